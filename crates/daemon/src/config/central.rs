//! `[central]`: the cluster-wide PostgreSQL store, and keeping its password secret.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{Config, ConfigError, Errs};

/// `[central]`: the cluster-wide PostgreSQL store.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCentral {
    pub url: Option<String>,
    pub password_file: Option<PathBuf>,
    pub ship_samples: Option<bool>,
    pub batch_size: Option<usize>,
    pub retry_secs: Option<f64>,
    pub jobs_retention_days: Option<u32>,
    pub samples_retention_days: Option<u32>,
}

/// The validated `[central]` section.
#[derive(Clone, PartialEq)]
pub struct CentralConfig {
    /// `postgres://user@host:port/db`.
    pub url: String,
    /// Where the password is kept apart from the URL (root's, mode 0600), and the password
    /// read from it at load.
    pub password_file: Option<PathBuf>,
    pub password: Option<String>,
    /// Also ship the samples of running jobs, every `retry` (finished jobs always go with
    /// their series).
    pub ship_samples: bool,
    /// Jobs per transaction.
    pub batch_size: usize,
    /// Wait before retrying after PostgreSQL was unreachable; with `ship_samples`, also the
    /// time between shipments of live samples.
    pub retry: std::time::Duration,
    /// How long the central store keeps jobs and samples (whole time partitions are dropped).
    pub retention: pjw_central::Retention,
}

impl std::fmt::Debug for CentralConfig {
    /// Never prints a password (the URL's is masked, the file's is not shown).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CentralConfig")
            .field("url", &mask_password(&self.url))
            .field("password_file", &self.password_file)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("ship_samples", &self.ship_samples)
            .field("batch_size", &self.batch_size)
            .field("retry", &self.retry)
            .field("retention", &self.retention)
            .finish()
    }
}

/// The password of a `postgres://user:password@host/db` URL, if it has one.
pub fn url_password(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let userinfo = rest.split(['/', '?']).next()?.rsplit_once('@')?.0;
    let pw = userinfo.split_once(':')?.1;
    (!pw.is_empty()).then_some(pw)
}

/// The URL with its password replaced by `***` (for logs and errors).
pub fn mask_password(url: &str) -> String {
    match url_password(url) {
        Some(pw) => url.replacen(&format!(":{pw}@"), ":***@", 1),
        None => url.to_string(),
    }
}

/// A file holding a secret must be root's and closed to group and others.
fn check_secret_file(path: &Path) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if md.uid() != 0 || md.mode() & 0o077 != 0 {
        return Err(format!(
            "{} must be owned by root with mode 0600 (it is uid {}, mode {:04o})",
            path.display(),
            md.uid(),
            md.mode() & 0o7777
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let pw = text.trim_end_matches(['\n', '\r']).to_string();
    if pw.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(pw)
}

/// Validate `[central]`; None when it has no `url`.
pub(super) fn parse(c: RawCentral, e: Errs) -> Result<Option<CentralConfig>, ConfigError> {
    let err = |key: &str, reason: String| e.at(key, reason);
    let central = match c.url {
        None => {
            if c.ship_samples.is_some()
                || c.batch_size.is_some()
                || c.retry_secs.is_some()
                || c.password_file.is_some()
                || c.jobs_retention_days.is_some()
                || c.samples_retention_days.is_some()
            {
                return Err(err(
                    "central.url",
                    "missing (other [central] keys are set)".into(),
                ));
            }
            None
        }
        Some(url) => {
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return Err(err(
                    "central.url",
                    "must start with postgres:// or postgresql://".into(),
                ));
            }
            let batch_size = c.batch_size.unwrap_or(100);
            if !(1..=10_000).contains(&batch_size) {
                return Err(err(
                    "central.batch_size",
                    format!("{batch_size} is not 1-10000"),
                ));
            }
            let retry = c.retry_secs.unwrap_or(60.0);
            if !(0.05..=86_400.0).contains(&retry) {
                return Err(err(
                    "central.retry_secs",
                    format!("{retry} is not 0.05-86400"),
                ));
            }
            if url_password(&url).is_some() {
                return Err(err(
                    "central.url",
                    "holds a password: keep it in central.password_file (root's, mode 0600)".into(),
                ));
            }
            if let Err(why) = pjw_central::endpoint::split_tls(&url) {
                return Err(err("central.url", why));
            }
            let days = |key: &str, v: Option<u32>, default: u32| match v.unwrap_or(default) {
                d @ 1..=36_500 => Ok(d),
                d => Err(err(key, format!("{d} is not 1-36500"))),
            };
            let defaults = pjw_central::Retention::default();
            let retention = pjw_central::Retention {
                jobs_days: days(
                    "central.jobs_retention_days",
                    c.jobs_retention_days,
                    defaults.jobs_days,
                )?,
                samples_days: days(
                    "central.samples_retention_days",
                    c.samples_retention_days,
                    defaults.samples_days,
                )?,
            };
            if let Some(p) = &c.password_file {
                if !p.is_absolute() {
                    return Err(err(
                        "central.password_file",
                        format!("{} is not an absolute path", p.display()),
                    ));
                }
            }
            Some(CentralConfig {
                password_file: c.password_file.clone(),
                password: None,
                url,
                ship_samples: c.ship_samples.unwrap_or(false),
                batch_size,
                retry: std::time::Duration::from_secs_f64(retry),
                retention,
            })
        }
    };
    Ok(central)
}

impl Config {
    /// Secrets and files of `[central]`: `central.password_file` must be root's and mode 0600,
    /// and is read now (a password inside `central.url` was refused at parse); the CA file of
    /// `sslrootcert` is read now too.
    pub(super) fn load_secrets(&mut self, _file: Option<PathBuf>) -> Result<(), ConfigError> {
        let err = |key: &str, reason: String| ConfigError {
            file: self.origin.clone(),
            key: key.into(),
            reason,
        };
        let Some(c) = self.central.as_mut() else {
            return Ok(());
        };
        // The site's CA must be readable now, not at the first job's end.
        if let Err(e) = pjw_central::Endpoint::new(&c.url, None) {
            return Err(err("central.url", e.to_string()));
        }
        if let Some(p) = c.password_file.clone() {
            c.password =
                Some(check_secret_file(&p).map_err(|why| err("central.password_file", why))?);
        }
        Ok(())
    }
}
