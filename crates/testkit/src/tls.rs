//! A throw-away certificate authority for TLS tests, made with the `openssl` command (Debian's
//! `openssl`, which `ca-certificates` pulls in): ECDSA P-256 keys, SHA-256 signatures, valid
//! for two days, in a temporary directory removed on drop.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A CA that issues server certificates.
#[derive(Debug)]
pub struct TestCa {
    dir: tempfile::TempDir,
    name: String,
}

/// A certificate and its key (PEM files).
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (Debian's openssl package)");
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TestCa {
    /// A new CA called `name`.
    pub fn new(name: &str) -> TestCa {
        let dir = tempfile::Builder::new()
            .prefix("pjw-ca")
            .tempdir()
            .expect("temp dir");
        openssl(
            dir.path(),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-sha256",
                "-subj",
                &format!("/CN={name}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        TestCa {
            dir,
            name: name.to_string(),
        }
    }

    /// The CA's certificate (what a site puts in `sslrootcert`).
    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A server certificate for these names (DNS names or IP addresses).
    pub fn issue(&self, file: &str, names: &[&str]) -> Issued {
        let d = self.dir.path();
        let san: Vec<String> = names
            .iter()
            .map(|n| {
                if n.parse::<std::net::IpAddr>().is_ok() {
                    format!("IP:{n}")
                } else {
                    format!("DNS:{n}")
                }
            })
            .collect();
        std::fs::write(
            d.join(format!("{file}.ext")),
            format!(
                "subjectAltName={}\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
                san.join(",")
            ),
        )
        .expect("write the extensions");
        let (key, csr, crt) = (
            format!("{file}.key"),
            format!("{file}.csr"),
            format!("{file}.pem"),
        );
        openssl(
            d,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={}", names[0]),
            ],
        );
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "2",
                "-sha256",
                "-extfile",
                &format!("{file}.ext"),
            ],
        );
        Issued {
            cert: d.join(crt),
            key: d.join(key),
        }
    }

    /// The CA's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}
