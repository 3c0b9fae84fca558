//! Throwaway certificates for a TLS test server, made with the `openssl` command: a CA, a
//! server certificate it signs (for `localhost` and `127.0.0.1`), a client certificate it signs
//! (for the role [`CERT_USER`]), and a second CA that signed none of them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::postgres::{ThrowawayError, failed};

/// The role that logs in with a client certificate only (`cert` in `pg_hba.conf`).
pub const CERT_USER: &str = "orca_cert_user";

/// The role that logs in with a password (SCRAM, channel binding offered over TLS).
pub const SCRAM_USER: &str = "orca_scram_user";

/// Its password.
pub const SCRAM_PASSWORD: &str = "orca-scram-pw-3e1d";

/// The files of a TLS throwaway server.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA that signed the server's and the client's certificates (`sslrootcert`).
    pub ca: PathBuf,
    /// A CA that signed nothing here: verifying against it must fail.
    pub other_ca: PathBuf,
    /// The server's certificate: names `localhost` and `127.0.0.1`, nothing else.
    pub server_cert: PathBuf,
    /// Its key.
    pub server_key: PathBuf,
    /// A client certificate for [`CERT_USER`] (`sslcert`).
    pub client_cert: PathBuf,
    /// Its key (`sslkey`).
    pub client_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) -> Result<(), ThrowawayError> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| failed("running openssl (install Debian's `openssl` package)", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(failed(
            format!("openssl {}", args.join(" ")),
            String::from_utf8_lossy(&out.stderr),
        ))
    }
}

const CONFIG: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = orca throwaway
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
";

const EC: &[&str] = &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

/// Makes the certificates in `dir` (which exists).
/// Makes the throwaway CAs and certificates in `dir` (`ca.crt`, `other-ca.crt`,
/// `server.crt`/`.key` for `localhost` and `127.0.0.1`, `client.crt`/`.key`).
///
/// # Errors
///
/// `openssl` is missing or failed.
pub fn make(dir: &Path) -> Result<TlsFiles, ThrowawayError> {
    std::fs::write(dir.join("openssl.cnf"), CONFIG)
        .map_err(|e| failed(format!("writing {}", dir.display()), e))?;
    for ca in ["ca", "other-ca"] {
        let subject = format!("/CN=orca throwaway {ca}");
        let (key, crt) = (format!("{ca}.key"), format!("{ca}.crt"));
        let mut args = vec!["req", "-x509", "-new", "-config", "openssl.cnf"];
        args.extend(EC);
        args.extend([
            "-nodes",
            "-days",
            "2",
            "-subj",
            &subject,
            "-extensions",
            "ca",
            "-keyout",
            &key,
            "-out",
            &crt,
        ]);
        openssl(dir, &args)?;
    }
    for (name, subject) in [
        ("server", "/CN=localhost"),
        ("client", "/CN=orca_cert_user"),
    ] {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        let mut args = vec!["req", "-new", "-config", "openssl.cnf"];
        args.extend(EC);
        args.extend(["-nodes", "-subj", subject, "-keyout", &key, "-out", &csr]);
        openssl(dir, &args)?;
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "openssl.cnf",
                "-extensions",
                name,
                "-out",
                &crt,
            ],
        )?;
    }
    Ok(TlsFiles {
        ca: dir.join("ca.crt"),
        other_ca: dir.join("other-ca.crt"),
        server_cert: dir.join("server.crt"),
        server_key: dir.join("server.key"),
        client_cert: dir.join("client.crt"),
        client_key: dir.join("client.key"),
    })
}

/// `pg_hba.conf` of a TLS server: TCP only over TLS (the client-certificate role by its
/// certificate, the SCRAM role by its password, everyone else
/// trusted), in clear refused; the unix socket (admin) trusted.
pub(crate) const HBA: &str = "\
local all all trust
hostssl all orca_cert_user 127.0.0.1/32 cert
hostssl all orca_scram_user 127.0.0.1/32 scram-sha-256
hostssl all all 127.0.0.1/32 trust
hostnossl all all 0.0.0.0/0 reject
hostnossl all all ::/0 reject
";

/// A TLS server configuration (rustls, ring) presenting `cert` with `key` and asking no client
/// certificate: for a local HTTPS fake server.
///
/// # Errors
///
/// A file that cannot be read or holds no PEM certificate / key, or rustls refused them.
pub fn server_config(
    cert: &Path,
    key: &Path,
) -> Result<std::sync::Arc<tokio_rustls::rustls::ServerConfig>, ThrowawayError> {
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(Iterator::collect)
        .map_err(|e| failed(format!("reading {}", cert.display()), e))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| failed(format!("reading {}", key.display()), e))?;
    let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| failed("rustls protocol versions", e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| failed("rustls server certificate", e))?;
    Ok(std::sync::Arc::new(config))
}
