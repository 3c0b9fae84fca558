//! Email over SMTP: STARTTLS required (or plain text to a server on this machine, when
//! configured so), the password from a secret source the binary resolved.

use std::path::Path;
use std::time::Duration;

use lettre::message::Mailbox;
use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::{AsyncSmtpTransport, AsyncTransport as _, Message, Tokio1Executor};
use serde_json::Value;

use crate::config::{EmailConfig, EmailTls};
use crate::error::{ConfigError, Failure, chain};

/// A secret: shown as `[redacted]`, never displayed.
#[derive(Clone)]
pub struct Password(String);

impl Password {
    /// Wraps the secret (read from the environment or a private file by the caller).
    #[must_use]
    pub fn new(secret: String) -> Self {
        Self(secret)
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The configured email target.
pub(crate) struct Email {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    to: Vec<Mailbox>,
    name: String,
    /// Only to scrub it from a server's answer, should one ever echo it.
    password: Option<Password>,
}

impl std::fmt::Debug for Email {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Email")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Email {
    pub(crate) fn new(
        config: &EmailConfig,
        password: Option<Password>,
        timeout: Duration,
    ) -> Result<Self, ConfigError> {
        let bad = |field: &str, message: String| ConfigError {
            field: format!("notify.email.{field}"),
            message,
        };
        let server = config.server.trim();
        let from: Mailbox = config
            .from
            .parse()
            .map_err(|e| bad("from", format!("`{}`: {e}", config.from)))?;
        let mut to = Vec::with_capacity(config.to.len());
        for (i, t) in config.to.iter().enumerate() {
            to.push(
                t.parse()
                    .map_err(|e| bad(&format!("to[{i}]"), format!("`{t}`: {e}")))?,
            );
        }
        let tls = match config.tls {
            EmailTls::Starttls => {
                let mut params = TlsParameters::builder(server.to_owned());
                if let Some(path) = &config.ca_file {
                    params = params.add_root_certificate(
                        ca_file(path)
                            .map_err(|m| bad("ca_file", format!("{}: {m}", path.display())))?,
                    );
                }
                Tls::Required(
                    params
                        .build()
                        .map_err(|e| bad("tls", format!("cannot set up TLS: {}", chain(&e))))?,
                )
            }
            EmailTls::None => Tls::None,
        };
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(server)
            .port(config.port())
            .tls(tls)
            .timeout(Some(timeout));
        // EHLO names this host (RFC 5321 4.1.4); lettre's own lookup is a feature (and a
        // crate) left out, and its fallback is the address literal `[127.0.0.1]`.
        if let Some(host) = host_name() {
            builder = builder.hello_name(ClientId::Domain(host));
        }
        match (&config.username, &password) {
            (Some(user), Some(secret)) => {
                builder = builder.credentials(Credentials::new(user.clone(), secret.0.clone()));
            }
            (Some(_), None) => {
                return Err(bad(
                    "username",
                    "a user needs a password: set password_env or password_file".to_owned(),
                ));
            }
            (None, _) => {}
        }
        let name = format!(
            "email ({} recipient{} via {server}:{}{})",
            config.to.len(),
            if config.to.len() == 1 { "" } else { "s" },
            config.port(),
            match config.tls {
                EmailTls::Starttls if config.ca_file.is_some() => ", STARTTLS, ca_file",
                EmailTls::Starttls => ", STARTTLS",
                EmailTls::None => ", plain text",
            }
        );
        Ok(Self {
            transport: builder.build(),
            from,
            to,
            name,
            password,
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) async fn send(&self, payload: &Value) -> Result<(), Failure> {
        let (subject, body) = crate::message::email(payload);
        let mut message = Message::builder().from(self.from.clone());
        for to in &self.to {
            message = message.to(to.clone());
        }
        let message = message
            .subject(subject)
            .header(ContentType::TEXT_PLAIN)
            .body(body)
            .map_err(|e| Failure {
                message: format!("cannot build the message: {}", chain(&e)),
                permanent: true,
            })?;
        match self.transport.send(message).await {
            Ok(_) => Ok(()),
            Err(e) => Err(Failure {
                message: self.scrub(chain(&e)),
                permanent: e.is_permanent(),
            }),
        }
    }

    fn scrub(&self, text: String) -> String {
        match &self.password {
            Some(Password(p)) if !p.is_empty() => text.replace(p.as_str(), "[redacted]"),
            _ => text,
        }
    }
}

/// Largest `ca_file` read (a full system bundle is about 250 KB).
const CA_FILE_MAX: u64 = 4 * 1024 * 1024;

/// The certificates of a PEM `ca_file` (at least one).
fn ca_file(path: &Path) -> Result<Certificate, String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read it: {e}"))?;
    let mut pem = Vec::new();
    file.take(CA_FILE_MAX + 1)
        .read_to_end(&mut pem)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if pem.len() as u64 > CA_FILE_MAX {
        return Err(format!("larger than {CA_FILE_MAX} bytes: not a CA file"));
    }
    if !pem
        .windows(b"-----BEGIN CERTIFICATE-----".len())
        .any(|w| w == b"-----BEGIN CERTIFICATE-----")
    {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned());
    }
    Certificate::from_pem(&pem).map_err(|e| format!("not PEM certificates: {}", chain(&e)))
}

/// This machine's host name, when the kernel has a plausible one.
fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    let plausible = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    plausible.then(|| name.to_owned())
}
