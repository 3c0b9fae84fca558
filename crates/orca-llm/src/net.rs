//! How orca reaches model servers (ADR 0025): which root certificates a TLS connection trusts
//! and which proxy it goes through.
//!
//! - **Roots**: the system's (reqwest 0.13 with rustls verifies through
//!   `rustls-platform-verifier`, which on Linux loads the system store with
//!   `rustls-native-certs`; that honours `SSL_CERT_FILE` / `SSL_CERT_DIR` as OpenSSL does), plus
//!   an optional `ca_file` (PEM, one or many certificates) from the config. A `ca_file` that is
//!   missing, unreadable, not PEM or not a certificate is an error naming the file and the
//!   setting, never a silent fallback.
//! - **Proxies**: `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (upper case first,
//!   then lower case), read once from the caller's environment lookup — never from the process
//!   environment behind its back — so every value is explicit (and tests do not race on the
//!   process-global environment). Credentials in a proxy URL are never printed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::BackendError;

mod proxy;
pub use proxy::{Proxies, ProxyUrl, mask_userinfo, no_proxy_matches};

/// How long connecting (TCP, proxy tunnel, TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest `ca_file` read (a full system bundle is about 250 KB).
const MAX_CA_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// A network setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// A `ca_file` that cannot be used.
    #[error("{setting}: {path}: {message}")]
    CaFile {
        /// The setting that names it (`tls.ca_file`, `agents.coder.ca_file`).
        setting: String,
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A proxy variable whose value is not a usable URL (the value is not quoted: it may hold
    /// credentials).
    #[error("the environment variable {var} is not a usable proxy URL: {message}")]
    Proxy {
        /// The variable.
        var: String,
        /// What is wrong.
        message: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

/// A `ca_file`: its certificates, read and parsed once.
#[derive(Clone)]
pub struct CaFile {
    path: PathBuf,
    setting: String,
    certs: Vec<reqwest::Certificate>,
}

impl std::fmt::Debug for CaFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaFile")
            .field("path", &self.path)
            .field("setting", &self.setting)
            .field("certificates", &self.certs.len())
            .finish()
    }
}

impl CaFile {
    /// Reads `path` (named by `setting` in errors): a PEM file of one or more certificates.
    ///
    /// # Errors
    ///
    /// Missing, unreadable, too large, not PEM, or holding no certificate.
    pub fn load(path: &Path, setting: &str) -> Result<Self, NetError> {
        use std::io::Read as _;
        let err = |message: String| NetError::CaFile {
            setting: setting.to_owned(),
            path: path.display().to_string(),
            message,
        };
        let meta = std::fs::metadata(path).map_err(|e| err(format!("cannot read it: {e}")))?;
        if !meta.is_file() {
            return Err(err("not a regular file".to_owned()));
        }
        if meta.len() > MAX_CA_FILE_BYTES {
            return Err(err(format!(
                "{} bytes, more than the {MAX_CA_FILE_BYTES} a certificate file may have",
                meta.len()
            )));
        }
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_CA_FILE_BYTES).read_to_end(&mut bytes))
            .map_err(|e| err(format!("cannot read it: {e}")))?;
        let text = String::from_utf8_lossy(&bytes);
        if !text.contains("-----BEGIN CERTIFICATE-----") {
            return Err(err(
                "no PEM certificate in it (expected -----BEGIN CERTIFICATE----- blocks)".to_owned(),
            ));
        }
        let certs = reqwest::Certificate::from_pem_bundle(&bytes)
            .map_err(|e| err(format!("not valid PEM: {}", error_chain(&e))))?;
        if certs.is_empty() {
            return Err(err("no PEM certificate in it".to_owned()));
        }
        // Building a client checks every certificate (DER that is not a certificate fails).
        let ca = Self {
            path: path.to_owned(),
            setting: setting.to_owned(),
            certs,
        };
        crate::http::client_builder()
            .no_proxy()
            .tls_certs_only(ca.certs.clone())
            .build()
            .map_err(|e| err(format!("not a usable certificate: {}", error_chain(&e))))?;
        Ok(ca)
    }

    /// The file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many certificates it holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.certs.len()
    }

    /// Whether it holds none (never, once loaded).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.certs.is_empty()
    }
}

/// Where a client's root certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CaSource {
    /// The system's store (or `SSL_CERT_FILE` / `SSL_CERT_DIR` when set).
    System,
    /// The system's store and a `ca_file`.
    SystemAndFile {
        /// The file.
        path: PathBuf,
        /// Its certificates.
        certificates: usize,
    },
    /// Only a `ca_file`: the system's store could not be loaded.
    FileOnly {
        /// The file.
        path: PathBuf,
        /// Its certificates.
        certificates: usize,
        /// Why not the system's.
        system: String,
    },
    /// No roots at all: https endpoints fail (the system's store could not be loaded and no
    /// `ca_file` is set). http endpoints (a local model server) still work.
    None {
        /// Why not the system's.
        system: String,
    },
}

impl std::fmt::Display for CaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::System => f.write_str("the system's root certificates"),
            Self::SystemAndFile { path, certificates } => write!(
                f,
                "the system's root certificates and {} ({certificates} certificate{})",
                path.display(),
                if *certificates == 1 { "" } else { "s" }
            ),
            Self::FileOnly {
                path,
                certificates,
                system,
            } => write!(
                f,
                "only {} ({certificates} certificates; the system's: {system})",
                path.display()
            ),
            Self::None { system } => write!(
                f,
                "none: the system's could not be loaded ({system}); https endpoints fail; set tls.ca_file"
            ),
        }
    }
}

/// How one agent reaches its model server: roots and proxies, read once.
#[derive(Debug, Clone, Default)]
pub struct Net {
    ca_file: Option<Arc<CaFile>>,
    proxies: Proxies,
    cert_env: Option<String>,
    clients: Arc<Mutex<BTreeMap<Duration, (reqwest::Client, CaSource)>>>,
}

impl Net {
    /// The settings from `env`: the proxy variables, and whether `SSL_CERT_FILE` /
    /// `SSL_CERT_DIR` replace the system's store (for `orca doctor`).
    ///
    /// # Errors
    ///
    /// A proxy variable that is not a URL.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, NetError> {
        let cert_env = ["SSL_CERT_FILE", "SSL_CERT_DIR"]
            .iter()
            .find_map(|n| env(n).filter(|v| !v.is_empty()).map(|v| format!("{n}={v}")));
        Ok(Self {
            ca_file: None,
            proxies: Proxies::from_env(env)?,
            cert_env,
            clients: Arc::default(),
        })
    }

    /// No proxy, the system's roots (what a library user gets without a config).
    #[must_use]
    pub fn direct() -> Self {
        Self::default()
    }

    /// The same settings with `ca` added to the roots (a separate client cache).
    #[must_use]
    pub fn with_ca_file(&self, ca: Option<Arc<CaFile>>) -> Self {
        Self {
            ca_file: ca,
            proxies: self.proxies.clone(),
            cert_env: self.cert_env.clone(),
            clients: Arc::default(),
        }
    }

    /// The proxies.
    #[must_use]
    pub const fn proxies(&self) -> &Proxies {
        &self.proxies
    }

    /// The `ca_file`, if any.
    #[must_use]
    pub fn ca_file(&self) -> Option<&CaFile> {
        self.ca_file.as_deref()
    }

    /// A client whose requests time out after `timeout` (built once per timeout; clones share
    /// connections).
    ///
    /// # Errors
    ///
    /// The `ca_file`'s certificates refused by the TLS library, or a client that cannot be built.
    pub fn client(&self, timeout: Duration) -> Result<reqwest::Client, NetError> {
        self.client_and_source(timeout).map(|(c, _)| c)
    }

    /// Where the roots of this agent's clients come from (for `orca doctor`).
    ///
    /// # Errors
    ///
    /// As [`Self::client`].
    pub fn ca_source(&self) -> Result<String, NetError> {
        let (_, source) = self.client_and_source(crate::http::DEFAULT_REQUEST_TIMEOUT)?;
        Ok(match (&source, &self.cert_env) {
            (CaSource::System | CaSource::SystemAndFile { .. }, Some(env)) => {
                format!("{source} (the system's from {env})")
            }
            _ => source.to_string(),
        })
    }

    fn client_and_source(
        &self,
        timeout: Duration,
    ) -> Result<(reqwest::Client, CaSource), NetError> {
        let mut clients = self
            .clients
            .lock()
            .map_err(|_| NetError::Client("a client cache lock was poisoned".to_owned()))?;
        if let Some(hit) = clients.get(&timeout) {
            return Ok(hit.clone());
        }
        let built = self.build(timeout)?;
        clients.insert(timeout, built.clone());
        Ok(built)
    }

    fn builder(&self, timeout: Duration) -> reqwest::ClientBuilder {
        let mut b = crate::http::client_builder()
            .timeout(timeout)
            .connect_timeout(CONNECT_TIMEOUT)
            // Only the proxies read through the caller's lookup; never the process's own.
            .no_proxy();
        for p in self.proxies.reqwest_proxies() {
            b = b.proxy(p);
        }
        b
    }

    fn build(&self, timeout: Duration) -> Result<(reqwest::Client, CaSource), NetError> {
        let Some(ca) = &self.ca_file else {
            return match self.builder(timeout).build() {
                Ok(c) => Ok((c, CaSource::System)),
                Err(e) => {
                    let system = error_chain(&e);
                    tracing::warn!(
                        "the system's root certificates could not be loaded ({system}); https model endpoints will fail; set tls.ca_file"
                    );
                    let client = self
                        .builder(timeout)
                        .tls_certs_only([])
                        .build()
                        .map_err(|e| NetError::Client(error_chain(&e)))?;
                    Ok((client, CaSource::None { system }))
                }
            };
        };
        let ca_err = |e: &reqwest::Error| NetError::CaFile {
            setting: ca.setting.clone(),
            path: ca.path.display().to_string(),
            message: format!("not usable: {}", error_chain(e)),
        };
        match self
            .builder(timeout)
            .tls_certs_merge(ca.certs.clone())
            .build()
        {
            Ok(c) => Ok((
                c,
                CaSource::SystemAndFile {
                    path: ca.path.clone(),
                    certificates: ca.certs.len(),
                },
            )),
            Err(merged) => {
                let client = self
                    .builder(timeout)
                    .tls_certs_only(ca.certs.clone())
                    .build()
                    .map_err(|e| ca_err(&e))?;
                Ok((
                    client,
                    CaSource::FileOnly {
                        path: ca.path.clone(),
                        certificates: ca.certs.len(),
                        system: error_chain(&merged),
                    },
                ))
            }
        }
    }
}

/// An error and its sources on one line.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut parts = vec![err.to_string()];
    let mut source = err.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    mask_userinfo(&parts.join(": "))
}

/// A failed connection as a backend error: [`BackendError::Tls`] for a certificate or
/// handshake failure, [`BackendError::Unreachable`] otherwise.
pub(crate) fn connect_error(err: &reqwest::Error, endpoint: &str) -> BackendError {
    let message = connect_failure(err);
    if let Some(tls) = message.strip_prefix("TLS: ") {
        BackendError::Tls {
            endpoint: endpoint.to_owned(),
            message: tls.to_owned(),
        }
    } else if message.starts_with("TLS handshake") {
        BackendError::Tls {
            endpoint: endpoint.to_owned(),
            message,
        }
    } else {
        BackendError::Unreachable {
            endpoint: endpoint.to_owned(),
            message,
        }
    }
}

/// Why a connection failed, readable: a certificate the roots do not trust says so and names
/// the setting that fixes it; a refused proxy tunnel says so.
#[must_use]
pub fn connect_failure(err: &reqwest::Error) -> String {
    let chain = error_chain(err);
    let lower = chain.to_ascii_lowercase();
    if lower.contains("certificate") || lower.contains("unknownissuer") {
        let why = chain
            .find("invalid peer certificate")
            .or_else(|| chain.to_ascii_lowercase().find("certificate"))
            .and_then(|i| chain.get(i..))
            .unwrap_or("the certificate was refused");
        format!(
            "TLS: the server's certificate is not trusted ({why}); if a private CA or a company proxy signs it, set tls.ca_file (or the agent's ca_file) to its PEM file"
        )
    } else if lower.contains("tls") || lower.contains("handshake") {
        format!(
            "TLS handshake failed ({})",
            crate::http::shorten(&chain, 200)
        )
    } else if lower.contains("proxy") || lower.contains("tunnel") {
        format!("the proxy failed ({})", crate::http::shorten(&chain, 200))
    } else {
        "connection refused or failed".to_owned()
    }
}
