//! `[notify]`: the command hook, webhooks and email, and how deliveries are retried. Parsed by
//! serde, then [`NotifyConfig::validate`] checks what serde cannot and names the field.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::error::ConfigError;

/// The most attempts a target may be given.
pub const MAX_ATTEMPTS: u32 = 10;
/// The longest wait between two attempts (the backoff doubles up to it).
pub const MAX_BACKOFF_SECS: u64 = 300;

/// `[notify]` in the user's or the project's config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// Run with `sh -c`, the notification as JSON on stdin (run by `orca serve`).
    #[serde(default)]
    pub command: Option<String>,
    /// Seconds one run of the command, one webhook call or one email may take (default 10).
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// Attempts per webhook or email before it is given up (default 4).
    #[serde(default = "default_attempts")]
    pub attempts: u32,
    /// Seconds before the second attempt; each later wait doubles (default 2).
    #[serde(default = "default_backoff")]
    pub backoff_secs: u64,
    /// `[[notify.webhook]]`: each gets every notification.
    #[serde(default)]
    pub webhook: Vec<WebhookConfig>,
    /// `[notify.email]`.
    #[serde(default)]
    pub email: Option<EmailConfig>,
}

const fn default_timeout() -> u64 {
    10
}

const fn default_attempts() -> u32 {
    4
}

const fn default_backoff() -> u64 {
    2
}

/// One `[[notify.webhook]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Where the notification is POSTed (`http` or `https`). Its path may be a secret (a Slack
    /// webhook's is): logs name only its host.
    pub url: String,
    /// The body: the notification as JSON (`json`, the default) or a Slack message (`slack`).
    #[serde(default)]
    pub format: WebhookFormat,
}

/// What a webhook receives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormat {
    /// The notification's JSON, as the command gets it on stdin.
    #[default]
    Json,
    /// `{"text": …, "blocks": [...]}`: the headline and the link (Slack, and the chat services
    /// that take its incoming-webhook format).
    Slack,
}

/// `[notify.email]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailConfig {
    /// The SMTP server's host name.
    pub server: String,
    /// Its port (default 587 with STARTTLS, 25 without).
    #[serde(default)]
    pub port: Option<u16>,
    /// The sender, `orca <orca@example.com>` or `orca@example.com`.
    pub from: String,
    /// The recipients.
    pub to: Vec<String>,
    /// The SMTP user, when the server wants one (then a password source too).
    #[serde(default)]
    pub username: Option<String>,
    /// The NAME of the environment variable holding the password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// A private file (mode 0600) holding the password.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// `starttls` (the default: the connection is upgraded before anything is sent, or
    /// nothing is sent) or `none` (plain text, only to a server on this machine).
    #[serde(default)]
    pub tls: EmailTls,
    /// A PEM file of CA certificates trusted for the server's certificate, besides the
    /// system's (a company CA, a test server's): only with STARTTLS.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

/// How the SMTP connection is protected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmailTls {
    /// STARTTLS required, the server's certificate checked against the system's roots.
    #[default]
    Starttls,
    /// No encryption: allowed only for `localhost` or a loopback address (a test server, a
    /// local relay).
    None,
}

impl EmailConfig {
    /// The port connected to.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(match self.tls {
            EmailTls::Starttls => 587,
            EmailTls::None => 25,
        })
    }
}

impl NotifyConfig {
    /// Checks what serde cannot: something to notify with, bounded retries, URLs, addresses,
    /// a password source with a user, plain SMTP only on this machine.
    ///
    /// # Errors
    ///
    /// The first problem, naming its field (`notify.email.to[1]`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field: &str, message: String| {
            Err(ConfigError {
                field: field.to_owned(),
                message,
            })
        };
        if self.command.is_none() && self.webhook.is_empty() && self.email.is_none() {
            return bad(
                "notify",
                "nothing to notify with: set `command`, a `[[notify.webhook]]` or `[notify.email]`"
                    .to_owned(),
            );
        }
        if let Some(c) = &self.command
            && c.trim().is_empty()
        {
            return bad("notify.command", "is empty".to_owned());
        }
        if self.attempts == 0 || self.attempts > MAX_ATTEMPTS {
            return bad(
                "notify.attempts",
                format!(
                    "{} is out of range: 1 to {MAX_ATTEMPTS} attempts",
                    self.attempts
                ),
            );
        }
        if self.backoff_secs > MAX_BACKOFF_SECS {
            return bad(
                "notify.backoff_secs",
                format!(
                    "{} is more than the {MAX_BACKOFF_SECS} s a wait may be",
                    self.backoff_secs
                ),
            );
        }
        for (i, hook) in self.webhook.iter().enumerate() {
            let field = format!("notify.webhook[{i}].url");
            match reqwest::Url::parse(&hook.url) {
                Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {}
                Ok(url) => {
                    return bad(
                        &field,
                        format!(
                            "`{}` is not an http or https address with a host",
                            url.scheme()
                        ),
                    );
                }
                Err(e) => return bad(&field, format!("not a URL: {e}")),
            }
        }
        if let Some(email) = &self.email {
            email.validate()?;
        }
        Ok(())
    }
}

impl EmailConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field: &str, message: String| {
            Err(ConfigError {
                field: format!("notify.email.{field}"),
                message,
            })
        };
        let server = self.server.trim();
        if server.is_empty() || server.contains(char::is_whitespace) || server.contains('/') {
            return bad("server", format!("`{}` is not a host name", self.server));
        }
        if self.port == Some(0) {
            return bad("port", "0 is not a port".to_owned());
        }
        if let Err(e) = self.from.parse::<lettre::message::Mailbox>() {
            return bad(
                "from",
                format!("`{}` is not an email address: {e}", self.from),
            );
        }
        if self.to.is_empty() {
            return bad("to", "names no recipient".to_owned());
        }
        for (i, to) in self.to.iter().enumerate() {
            if let Err(e) = to.parse::<lettre::message::Mailbox>() {
                return bad(
                    &format!("to[{i}]"),
                    format!("`{to}` is not an email address: {e}"),
                );
            }
        }
        match (&self.username, &self.password_env, &self.password_file) {
            (_, Some(_), Some(_)) => {
                return bad(
                    "password_env",
                    "set password_env or password_file, not both".to_owned(),
                );
            }
            (Some(_), None, None) => {
                return bad(
                    "username",
                    "a user needs a password: set password_env (the NAME of an environment variable) or password_file".to_owned(),
                );
            }
            (None, Some(_), _) | (None, _, Some(_)) => {
                return bad(
                    "username",
                    "a password needs a user: set username".to_owned(),
                );
            }
            _ => {}
        }
        if let Some(name) = &self.password_env
            && (name.is_empty() || name.contains(['=', '\0']))
        {
            return bad(
                "password_env",
                "must be the NAME of an environment variable, never the password".to_owned(),
            );
        }
        if self.ca_file.is_some() && self.tls == EmailTls::None {
            return bad(
                "ca_file",
                "trusts certificates for STARTTLS, but tls is \"none\"".to_owned(),
            );
        }
        if self.tls == EmailTls::None && !is_this_machine(server) {
            return bad(
                "tls",
                format!(
                    "\"none\" (no encryption) is only for a server on this machine (localhost or a loopback address); `{server}` needs \"starttls\""
                ),
            );
        }
        Ok(())
    }
}

/// `localhost` or a loopback address.
fn is_this_machine(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(text: &str, expect: Result<(), &str>) {
        let config: NotifyConfig = toml::from_str(text).expect("parses");
        let got = config.validate().map_err(|e| e.to_string());
        assert_eq!(got, expect.map_err(str::to_owned), "{text}");
    }

    const EMAIL: &str = "[email]\nserver = \"smtp.example.com\"\nfrom = \"orca@example.com\"\nto = [\"me@example.com\"]\n";

    #[test]
    fn good_configs_pass() {
        check("command = \"true\"\n", Ok(()));
        check(
            "[[webhook]]\nurl = \"https://hooks.example.com/x\"\nformat = \"slack\"\n",
            Ok(()),
        );
        check(EMAIL, Ok(()));
        check(
            &format!("{EMAIL}ca_file = \"/etc/company-ca.pem\"\n"),
            Ok(()),
        );
        check(
            &format!("{EMAIL}username = \"me\"\npassword_env = \"SMTP_PASSWORD\"\n"),
            Ok(()),
        );
        check(
            "[email]\nserver = \"127.0.0.1\"\nport = 2525\nfrom = \"o@x.test\"\nto = [\"a@x.test\"]\ntls = \"none\"\n",
            Ok(()),
        );
    }

    #[test]
    fn bad_configs_name_the_field() {
        check(
            "",
            Err(
                "notify: nothing to notify with: set `command`, a `[[notify.webhook]]` or `[notify.email]`",
            ),
        );
        check(
            "command = \"true\"\nattempts = 0\n",
            Err("notify.attempts: 0 is out of range: 1 to 10 attempts"),
        );
        check(
            "command = \"true\"\nbackoff_secs = 301\n",
            Err("notify.backoff_secs: 301 is more than the 300 s a wait may be"),
        );
        check(
            "[[webhook]]\nurl = \"ftp://x\"\n",
            Err("notify.webhook[0].url: `ftp` is not an http or https address with a host"),
        );
        check(
            &format!("{EMAIL}tls = \"none\"\n"),
            Err(
                "notify.email.tls: \"none\" (no encryption) is only for a server on this machine (localhost or a loopback address); `smtp.example.com` needs \"starttls\"",
            ),
        );
        check(
            &EMAIL.replace("[\"me@example.com\"]", "[\"me@example.com\", \"nope\"]"),
            Err("notify.email.to[1]: `nope` is not an email address: Invalid input"),
        );
        check(
            &format!("{EMAIL}username = \"me\"\n"),
            Err(
                "notify.email.username: a user needs a password: set password_env (the NAME of an environment variable) or password_file",
            ),
        );
        check(
            &format!("{EMAIL}username = \"me\"\npassword_env = \"S=hunter2\"\n"),
            Err(
                "notify.email.password_env: must be the NAME of an environment variable, never the password",
            ),
        );
        check(
            "[email]\nserver = \"127.0.0.1\"\nfrom = \"o@x.test\"\nto = [\"a@x.test\"]\ntls = \"none\"\nca_file = \"/etc/ca.pem\"\n",
            Err("notify.email.ca_file: trusts certificates for STARTTLS, but tls is \"none\""),
        );
    }
}
