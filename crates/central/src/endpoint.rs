//! Where the central store is and how to reach it: the site's URL with libpq's TLS options
//! (`sslmode`, `sslrootcert`) taken apart from what the `postgres` crate parses, the password
//! from the root-only file, and a [`Endpoint::connect`] that opens one connection.
//!
//! `sslmode` means what it means to libpq:
//! - `disable`: no TLS.
//! - `prefer` (the default, as in libpq): TLS when the server offers it, else plain; the
//!   server's certificate is not checked.
//! - `require`: TLS or nothing; with `sslrootcert` the chain is checked (libpq's
//!   compatibility rule), else nothing is.
//! - `verify-ca`: TLS; the server's chain must lead to a CA of `sslrootcert`.
//! - `verify-full`: as `verify-ca`, and the certificate must name the host of the URL (a DNS
//!   name or an IP address in its subjectAltName).
//!
//! `sslrootcert` is a PEM file of CA certificates, or `system` for the operating system's
//! store (`/etc/ssl/certs`). `verify-ca` and `verify-full` need it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use postgres::config::SslMode;
use postgres::{Client, NoTls};

use crate::tls;
use crate::CentralError;

/// How TLS is used (libpq's `sslmode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl TlsMode {
    /// Parse an `sslmode` value.
    pub fn parse(s: &str) -> Result<TlsMode, String> {
        Ok(match s {
            "disable" => TlsMode::Disable,
            "prefer" => TlsMode::Prefer,
            "require" => TlsMode::Require,
            "verify-ca" => TlsMode::VerifyCa,
            "verify-full" => TlsMode::VerifyFull,
            "allow" => {
                return Err(
                    "sslmode=allow is not supported: use prefer, require, verify-ca or verify-full"
                        .into(),
                )
            }
            other => {
                return Err(format!(
                "sslmode={other:?} is not one of disable, prefer, require, verify-ca, verify-full"
            ))
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Disable => "disable",
            TlsMode::Prefer => "prefer",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
        }
    }

    /// Whether the server's certificate is checked against the site's CA.
    pub fn verifies(self) -> bool {
        matches!(self, TlsMode::VerifyCa | TlsMode::VerifyFull)
    }
}

/// Where the CAs that vouch for the server come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootCerts {
    /// A PEM file of CA certificates.
    File(PathBuf),
    /// The operating system's store.
    System,
}

/// The TLS part of a URL, taken out of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOptions {
    pub mode: TlsMode,
    pub root: Option<RootCerts>,
}

/// Split libpq's TLS options off `url`: the URL the `postgres` crate gets (without them) and
/// the options. Pure.
pub fn split_tls(url: &str) -> Result<(String, TlsOptions), String> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => (url, ""),
    };
    let mut mode = None;
    let mut root = None;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "sslmode" => mode = Some(TlsMode::parse(&percent_decode(v)?)?),
            "sslrootcert" => {
                let v = percent_decode(v)?;
                root = Some(if v == "system" {
                    RootCerts::System
                } else if Path::new(&v).is_absolute() {
                    RootCerts::File(PathBuf::from(v))
                } else {
                    return Err(format!(
                        "sslrootcert={v:?} is not an absolute path or \"system\""
                    ));
                });
            }
            "sslcert" | "sslkey" | "sslpassword" | "sslcrl" | "sslcrldir" | "sslsni" => {
                return Err(format!(
                    "{k} is not supported (client certificates and CRLs are not)"
                ))
            }
            _ => rest.push(pair),
        }
    }
    let mode = mode.unwrap_or(TlsMode::Prefer);
    if mode.verifies() && root.is_none() {
        return Err(format!(
            "sslmode={} needs sslrootcert (the site's CA file, or \"system\")",
            mode.as_str()
        ));
    }
    let url = if rest.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((url, TlsOptions { mode, root }))
}

fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape in {s:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} is not UTF-8"))
}

/// `host:port/db` of a URL, for messages (no user, no password, no options).
pub fn target_of(url: &str) -> String {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let rest = rest.rsplit_once('@').map(|(_, r)| r).unwrap_or(rest);
    rest.split('?').next().unwrap_or(rest).to_string()
}

/// A parsed, ready-to-use central store address: connect as often as needed (the TLS
/// configuration, with its CA file, is read once).
#[derive(Clone)]
pub struct Endpoint {
    config: postgres::Config,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    mode: TlsMode,
    target: String,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("target", &self.target)
            .field("sslmode", &self.mode.as_str())
            .finish()
    }
}

impl Endpoint {
    /// Parse `url`, add `password` (kept apart from the URL), read the CA file.
    pub fn new(url: &str, password: Option<&str>) -> Result<Endpoint, CentralError> {
        let target = target_of(url);
        let (pg_url, opts) = split_tls(url).map_err(CentralError::Url)?;
        let mut config: postgres::Config = pg_url
            .parse()
            .map_err(|e: postgres::Error| CentralError::Url(e.to_string()))?;
        if let Some(p) = password {
            config.password(p);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        if config.get_application_name().is_none() {
            config.application_name("pjw");
        }
        config.ssl_mode(match opts.mode {
            TlsMode::Disable => SslMode::Disable,
            TlsMode::Prefer => SslMode::Prefer,
            _ => SslMode::Require,
        });
        let tls = match opts.mode {
            TlsMode::Disable => None,
            mode => Some(tokio_postgres_rustls::MakeRustlsConnect::new(
                tls::client_config(mode, opts.root.as_ref()).map_err(CentralError::Tls)?,
            )),
        };
        Ok(Endpoint {
            config,
            tls,
            mode: opts.mode,
            target,
        })
    }

    /// Name this connection in `pg_stat_activity` (`pjw/<node>`).
    pub fn set_application_name(&mut self, name: &str) {
        self.config.application_name(name);
    }

    /// `host:port/db`, for messages.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The `sslmode` in force.
    pub fn tls_mode(&self) -> TlsMode {
        self.mode
    }

    /// Whether the connection goes to this machine only (a Unix socket or a loopback
    /// address), where an unverified server is no risk worth a warning.
    pub fn is_local(&self) -> bool {
        use postgres::config::Host;
        self.config.get_hosts().iter().all(|h| match h {
            Host::Unix(_) => true,
            Host::Tcp(name) => {
                name == "localhost"
                    || name
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            }
        })
    }

    /// Open one connection (no schema check: see [`crate::Central::open`]).
    pub(crate) fn client(&self) -> Result<Client, CentralError> {
        let res = match &self.tls {
            None => self.config.connect(NoTls),
            Some(t) => self.config.connect(t.clone()),
        };
        res.map_err(|source| CentralError::Postgres {
            target: self.target.clone(),
            source,
        })
    }
}

/// Shared, so report threads and the shipper reuse one parsed endpoint.
pub type SharedEndpoint = Arc<Endpoint>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_never_show_credentials() {
        let cases = [
            (
                "postgres://u:secret@db.example:5433/pjw",
                "db.example:5433/pjw",
            ),
            ("postgresql://db/pjw?sslmode=disable", "db/pjw"),
            ("postgres://a@b@h:1/d", "h:1/d"),
        ];
        for (url, want) in cases {
            assert_eq!(target_of(url), want);
        }
    }

    #[test]
    fn tls_options_are_taken_out_of_the_url() {
        let ok = [
            (
                "postgres://pjw@db/pjw",
                "postgres://pjw@db/pjw",
                TlsMode::Prefer,
                None,
            ),
            (
                "postgres://pjw@db/pjw?sslmode=verify-full&sslrootcert=/etc/pjw/ca.pem&connect_timeout=3",
                "postgres://pjw@db/pjw?connect_timeout=3",
                TlsMode::VerifyFull,
                Some(RootCerts::File("/etc/pjw/ca.pem".into())),
            ),
            (
                "postgres://pjw@db/pjw?sslrootcert=%2Fsite%20ca%2Fca.pem&sslmode=verify-ca",
                "postgres://pjw@db/pjw",
                TlsMode::VerifyCa,
                Some(RootCerts::File("/site ca/ca.pem".into())),
            ),
            (
                "postgres://pjw@db/pjw?sslmode=verify-full&sslrootcert=system",
                "postgres://pjw@db/pjw",
                TlsMode::VerifyFull,
                Some(RootCerts::System),
            ),
            (
                "postgres://pjw@db/pjw?sslmode=disable",
                "postgres://pjw@db/pjw",
                TlsMode::Disable,
                None,
            ),
            (
                "postgres://pjw@db/pjw?sslmode=require",
                "postgres://pjw@db/pjw",
                TlsMode::Require,
                None,
            ),
        ];
        for (url, rest, mode, root) in ok {
            assert_eq!(
                split_tls(url).unwrap(),
                (rest.to_string(), TlsOptions { mode, root }),
                "{url}"
            );
        }
        let bad = [
            ("postgres://db/p?sslmode=verify-full", "needs sslrootcert"),
            ("postgres://db/p?sslmode=allow", "not supported"),
            ("postgres://db/p?sslmode=yes", "is not one of"),
            (
                "postgres://db/p?sslmode=verify-ca&sslrootcert=ca.pem",
                "not an absolute path",
            ),
            ("postgres://db/p?sslcert=/c.pem", "not supported"),
            ("postgres://db/p?sslrootcert=/a%zz", "bad percent escape"),
        ];
        for (url, want) in bad {
            let e = split_tls(url).unwrap_err();
            assert!(e.contains(want), "{url}: {e}");
        }
    }
}
