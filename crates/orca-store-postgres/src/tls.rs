//! TLS to the database (ADR 0027): the store URL's `sslmode`, `sslrootcert`, `sslcert` and
//! `sslkey`, as libpq reads them, on rustls.
//!
//! * `disable`: never TLS.
//! * `prefer` (the default, as libpq's): TLS if the server offers it, in clear if it does not;
//!   the certificate is not checked.
//! * `require`: TLS or no connection; the certificate is not checked, unless `sslrootcert` is
//!   given (then as `verify-ca`, libpq's rule).
//! * `verify-ca`: TLS, and the server's certificate chains to a CA of `sslrootcert`.
//! * `verify-full`: `verify-ca`, and the certificate names the host connected to (the URL's
//!   host, even when `hostaddr` gives the address).
//!
//! `sslrootcert` defaults to `~/.postgresql/root.crt` for the two verifying modes, like libpq;
//! `sslcert` + `sslkey` send a client certificate. The files are read when the store is
//! opened: an error names the setting and the file. Every connection the store opens (pool,
//! leases and locks, LISTEN) goes through [`Target::connect`].

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use orca_store::StoreError;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::Host;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, Config, Connection, Socket};
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{
    CryptoProvider, ring, verify_tls12_signature, verify_tls13_signature,
};
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::{
    self, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

mod binding;
mod settings;

use settings::split;
pub use settings::{SslMode, TlsSettings};

/// A parsed store URL: the driver's settings and how to secure its connections.
#[derive(Clone)]
pub(crate) struct Target {
    config: Config,
    tls: Arc<Mutex<Loaded>>,
    settings: TlsSettings,
    /// The certificate and key files the TLS settings read (none without TLS).
    files: Vec<PathBuf>,
}

/// The TLS hook as built from the files' contents at the time: rebuilt when they change, so a
/// long-running worker picks up a rotated CA or client certificate at its next connection,
/// as libpq (which reads them at every connection) does.
struct Loaded {
    make: MakeTls,
    contents: Vec<Option<Vec<u8>>>,
}

/// What the files hold now (`None`: unreadable; building the config then says why).
fn contents(files: &[PathBuf]) -> Vec<Option<Vec<u8>>> {
    files.iter().map(|f| std::fs::read(f).ok()).collect()
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the config: it holds the password.
        f.debug_struct("Target")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The CA file for the verifying modes: `sslrootcert`, else `~/.postgresql/root.crt`.
fn root_cert_path(settings: &TlsSettings) -> Result<PathBuf, StoreError> {
    if let Some(p) = &settings.root_cert {
        return Ok(p.clone());
    }
    let default = std::env::var_os("HOME")
        .map(|h| Path::new(&h).join(".postgresql").join("root.crt"))
        .filter(|p| p.is_file());
    default.ok_or_else(|| {
        StoreError::Invalid(format!(
            "store url: sslmode={} checks the server's certificate: add sslrootcert=PATH (the \
             CA's certificate, PEM) to the url (there is no ~/.postgresql/root.crt either)",
            settings.mode.as_str()
        ))
    })
}

fn read_certs(setting: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, StoreError> {
    let bad = |e: &dyn std::fmt::Display| {
        StoreError::Invalid(format!("store url: {setting}={}: {e}", path.display()))
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    if certs.is_empty() {
        return Err(bad(&"no PEM certificate in it"));
    }
    Ok(certs)
}

fn client_config(settings: &TlsSettings) -> Result<ClientConfig, StoreError> {
    let provider = Arc::new(ring::default_provider());
    let verifier = if settings.verifying() {
        let path = root_cert_path(settings)?;
        let mut roots = RootCertStore::empty();
        if settings.system_roots() {
            // The platform's store (`SSL_CERT_FILE` / `SSL_CERT_DIR` are honoured).
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(StoreError::Invalid(format!(
                    "store url: sslrootcert=system: no CA certificate found in the system's \
                     store ({} errors; Debian: `apt-get install ca-certificates`)",
                    found.errors.len()
                )));
            }
        } else {
            for cert in read_certs("sslrootcert", &path)? {
                roots.add(cert).map_err(|e| {
                    StoreError::Invalid(format!("store url: sslrootcert={}: {e}", path.display()))
                })?;
            }
        }
        let webpki =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                .build()
                .map_err(|e| {
                    StoreError::Invalid(format!("store url: sslrootcert={}: {e}", path.display()))
                })?;
        Verifier {
            webpki: Some(webpki),
            check_name: settings.mode == SslMode::VerifyFull,
            provider: Arc::clone(&provider),
        }
    } else {
        Verifier {
            webpki: None,
            check_name: false,
            provider: Arc::clone(&provider),
        }
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Invalid(format!("store url: tls: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let mut config = match (&settings.client_cert, &settings.client_key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let certs = read_certs("sslcert", cert)?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                StoreError::Invalid(format!("store url: sslkey={}: {e}", key.display()))
            })?;
            builder.with_client_auth_cert(certs, key).map_err(|e| {
                StoreError::Invalid(format!(
                    "store url: sslcert={} / sslkey: {e}",
                    cert.display()
                ))
            })?
        }
        _ => {
            return Err(StoreError::Invalid(
                "store url: sslcert and sslkey go together (a client certificate and its key)"
                    .to_owned(),
            ));
        }
    };
    // What libpq 17 sends (and `sslnegotiation=direct` needs); older servers ignore it.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(config)
}

impl Target {
    /// Parses a store URL, reading the certificate files it names; what it leaves out comes
    /// from libpq's environment variables (`crate::libpq_env`).
    pub(crate) fn parse(url: &str) -> Result<Self, StoreError> {
        Self::parse_with(url, &|name| std::env::var(name).ok())
    }

    /// [`Self::parse`] with the environment read through `env`.
    pub(crate) fn parse_with(
        url: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, StoreError> {
        let (rest, mut pairs) = split(url)?;
        pairs.extend(crate::libpq_env::tls_defaults(&pairs, env));
        let settings = TlsSettings::from_pairs(pairs)?;
        let rest = crate::libpq_env::url_with_env_port(&rest, env);
        let mut config: Config = rest.parse().map_err(|e| {
            StoreError::Invalid(format!(
                "store url {}: not a postgres url: {e}",
                crate::redacted_url(url)
            ))
        })?;
        crate::libpq_env::apply(&mut config, env)?;
        // TLS does not run over unix sockets (libpq ignores sslmode there too).
        let all_unix = !config.get_hosts().is_empty()
            && config.get_hostaddrs().is_empty()
            && config
                .get_hosts()
                .iter()
                .all(|h| !matches!(h, Host::Tcp(_)));
        let mode = if all_unix {
            SslMode::Disable
        } else {
            settings.mode
        };
        config.ssl_mode(mode.driver());
        let files = if mode == SslMode::Disable {
            Vec::new()
        } else {
            let root = (settings.verifying() && !settings.system_roots())
                .then(|| root_cert_path(&settings))
                .transpose()?;
            root.into_iter()
                .chain(settings.client_cert.clone())
                .chain(settings.client_key.clone())
                .collect()
        };
        let read = contents(&files);
        let make = if mode == SslMode::Disable {
            MakeTls { config: None }
        } else {
            MakeTls {
                config: Some(Arc::new(client_config(&settings)?)),
            }
        };
        Ok(Self {
            config,
            tls: Arc::new(Mutex::new(Loaded {
                make,
                contents: read,
            })),
            settings,
            files,
        })
    }

    /// The TLS hook for a new connection: rebuilt first if a certificate or key file changed
    /// since it was built (a bad new file fails the connection, naming it).
    fn current_tls(&self) -> Result<MakeTls, StoreError> {
        let mut loaded = self.tls.lock().unwrap_or_else(PoisonError::into_inner);
        if self.files.is_empty() {
            return Ok(loaded.make.clone());
        }
        let now = contents(&self.files);
        if now != loaded.contents {
            loaded.make = MakeTls {
                config: Some(Arc::new(client_config(&self.settings)?)),
            };
            loaded.contents = now;
            tracing::info!(files = ?self.files, "the database certificates changed: re-read");
        }
        Ok(loaded.make.clone())
    }

    /// The TLS settings read from the URL.
    pub(crate) const fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// Opens a connection (`what`: what it is for, for the error).
    pub(crate) async fn connect(
        &self,
        what: &str,
    ) -> Result<(Client, Connection<Socket, TlsStream>), StoreError> {
        let tls = self.current_tls()?;
        self.config
            .connect(tls)
            .await
            .map_err(|e| self.error(what, e))
    }

    /// A readable error: what was done, where, with which TLS settings, and the whole cause
    /// (never the password).
    fn error(&self, what: &str, e: tokio_postgres::Error) -> StoreError {
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .map(|h| match h {
                Host::Tcp(h) => h.clone(),
                Host::Unix(p) => p.display().to_string(),
            })
            .collect();
        let ports: Vec<String> = self
            .config
            .get_ports()
            .iter()
            .map(ToString::to_string)
            .collect();
        let mut tls = format!("sslmode={}", self.settings.mode.as_str());
        if let Some(p) = &self.settings.root_cert {
            tls.push_str(&format!(", sslrootcert={}", p.display()));
        }
        if let Some(p) = &self.settings.client_cert {
            tls.push_str(&format!(", sslcert={}", p.display()));
        }
        let mut cause = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            let text = s.to_string();
            if !cause.contains(&text) {
                cause.push_str(": ");
                cause.push_str(&text);
            }
            source = s.source();
        }
        StoreError::backend(
            format!(
                "{what} (host {}, port {}, {tls}): {cause}",
                if hosts.is_empty() {
                    "default".to_owned()
                } else {
                    hosts.join(",")
                },
                if ports.is_empty() {
                    "5432".to_owned()
                } else {
                    ports.join(",")
                }
            ),
            e,
        )
    }
}

/// What [`PgStore::probe`] saw of the database (for `orca doctor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The schema version after migrating.
    pub schema_version: u32,
    /// The server's version (`server_version`).
    pub server_version: String,
    /// The TLS protocol and cipher of this connection (`pg_stat_ssl`), `None` in clear.
    pub tls: Option<String>,
    /// Over a unix socket (TLS does not apply).
    pub unix_socket: bool,
    /// To a loopback address (127.0.0.0/8, ::1): clear text stays on this host.
    pub loopback: bool,
}

impl crate::PgStore {
    /// Connects, migrates, and reports how the connection is protected.
    ///
    /// # Errors
    ///
    /// The database cannot be reached or refuses the connection (the error says why).
    pub async fn probe(&self) -> Result<Probe, StoreError> {
        let report = self.migrate().await?;
        let conn = self.conn().await?;
        let row = conn
            .query_one(
                "SELECT current_setting('server_version'), s.ssl, s.version, s.cipher,
                        a.client_addr IS NULL,
                        coalesce(inet_server_addr() <<= '127.0.0.0/8'::inet
                                 OR inet_server_addr() = '::1'::inet, true)
                 FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
                 WHERE s.pid = pg_backend_pid()",
                &[],
            )
            .await
            .map_err(crate::db("reading pg_stat_ssl"))?;
        let ssl: bool = row.get(1);
        let version: Option<String> = row.get(2);
        let cipher: Option<String> = row.get(3);
        Ok(Probe {
            schema_version: report.to,
            server_version: row.get(0),
            tls: ssl.then(|| {
                format!(
                    "{} {}",
                    version.unwrap_or_default(),
                    cipher.unwrap_or_default()
                )
                .trim()
                .to_owned()
            }),
            unix_socket: row.get(4),
            loopback: row.get(5),
        })
    }
}

/// Checks the server's certificate as the mode says: not at all, against the CA only, or
/// against the CA and the host name. Handshake signatures are always checked.
#[derive(Debug)]
struct Verifier {
    webpki: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(webpki) = &self.webpki else {
            return Ok(ServerCertVerified::assertion());
        };
        match webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            // The name is checked last, after the chain: verify-ca accepts any name.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The driver's TLS hook: rustls with the store's client config.
#[derive(Clone)]
pub(crate) struct MakeTls {
    /// `None` for `sslmode=disable` (the driver then never asks for a handshake).
    config: Option<Arc<ClientConfig>>,
}

impl MakeTlsConnect<Socket> for MakeTls {
    type Stream = TlsStream;
    type TlsConnect = Connector;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Connector, io::Error> {
        // Called for every host, unix sockets and `disable` included: errors wait for a
        // handshake to be asked for.
        Ok(Connector {
            config: self.config.clone(),
            host: domain.to_owned(),
        })
    }
}

/// One handshake with one host.
pub(crate) struct Connector {
    config: Option<Arc<ClientConfig>>,
    host: String,
}

impl TlsConnect<Socket> for Connector {
    type Stream = TlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TlsStream>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let config = self
                .config
                .ok_or_else(|| io::Error::other("tls is disabled (sslmode=disable)"))?;
            let name = ServerName::try_from(self.host.clone()).map_err(|e| {
                io::Error::other(format!("{}: not a host name to check: {e}", self.host))
            })?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await
                .map_err(|e| explain(&self.host, e))?;
            Ok(TlsStream(tls))
        })
    }
}

/// A handshake error with what it means for the settings.
fn explain(host: &str, e: io::Error) -> io::Error {
    let hint = match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        )) => "the server's certificate is not signed by a CA in sslrootcert",
        Some(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => {
            return io::Error::other(format!(
                "{e}: the server's certificate does not name host {host} (sslmode=verify-full \
                 checks it)"
            ));
        }
        Some(rustls::Error::InvalidCertificate(CertificateError::Expired)) => {
            "the server's certificate has expired"
        }
        _ => return e,
    };
    io::Error::other(format!("{e}: {hint}"))
}

/// A TLS connection to the server.
pub(crate) struct TlsStream(tokio_rustls::client::TlsStream<Socket>);

impl AsyncRead for TlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl tokio_postgres::tls::TlsStream for TlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        self.0
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|certs| certs.first())
            .and_then(|cert| binding::server_end_point(cert))
            .map_or_else(ChannelBinding::none, ChannelBinding::tls_server_end_point)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_refused_naming_the_setting_and_the_file() {
        let err = Target::parse("postgres://u:secret@db/orca?sslmode=allow").unwrap_err();
        assert!(err.to_string().contains("sslmode=allow"), "{err}");
        let err = Target::parse(
            "postgres://u:secret@db/orca?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt",
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("sslrootcert=/nonexistent/ca.crt"), "{text}");
        assert!(!text.contains("secret"), "{text}");
        let err = Target::parse("postgres://db/orca?sslmode=require&sslcert=/c").unwrap_err();
        assert!(err.to_string().contains("sslcert and sslkey"), "{err}");
        let dir = std::env::temp_dir().join(format!("orca-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.crt");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = Target::parse(&format!(
            "postgres://db/orca?sslmode=verify-ca&sslrootcert={}",
            empty.display()
        ))
        .unwrap_err();
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unix_sockets_go_without_tls() {
        let t = Target::parse("host=/tmp port=5432 sslmode=require").unwrap();
        assert!(t.current_tls().unwrap().config.is_none());
        assert_eq!(
            t.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Disable
        );
        let t = Target::parse("postgres://127.0.0.1/orca").unwrap();
        assert!(
            t.current_tls().unwrap().config.is_some(),
            "prefer tries tls"
        );
    }
}
