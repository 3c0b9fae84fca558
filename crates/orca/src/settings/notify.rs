//! The SMTP password of `[notify.email]`: read from the environment variable named by
//! `password_env` or the private file named by `password_file` (mode 0600, as key files), the
//! way model API keys are; learned by the process's redactor before anything can print it. A
//! config names where the password is, never the password.

use std::path::Path;

use orca_core::redact::Redactor;
use orca_notify::{EmailConfig, NotifyConfig, Password};

use crate::redact::learn;

/// Where the password comes from, resolved against the project `root` (a relative
/// `password_file` is inside the project, like a relative `api_key_file`).
///
/// # Errors
///
/// A message naming the field (`notify.email.password_env`), never the value: the variable is
/// unset or empty, the file is unreadable, empty or readable by others.
pub(crate) fn smtp_password(email: &EmailConfig, root: &Path) -> Result<Option<Password>, String> {
    let secret = if let Some(name) = &email.password_env {
        match std::env::var(name) {
            Ok(v) if !v.is_empty() => v,
            _ => {
                return Err(format!(
                    "notify.email.password_env: the environment variable {name} is not set (it must hold the SMTP password)"
                ));
            }
        }
    } else if let Some(file) = &email.password_file {
        let path = root.join(file);
        let text = orca_agents::api_keys::read_private_file(&path, "password file")
            .map_err(|e| format!("notify.email.password_file: {e}"))?;
        let line = text.trim_end_matches(['\n', '\r']);
        if line.is_empty() {
            return Err(format!(
                "notify.email.password_file: {} is empty",
                path.display()
            ));
        }
        line.to_owned()
    } else {
        return Ok(None);
    };
    learn(&Redactor::new().with_secrets([secret.clone()]));
    Ok(Some(Password::new(secret)))
}

/// Learns the SMTP password `[notify]` names, if it can be read, so that the store's redactor
/// (made when the store opens, after the settings) knows it too. Problems are left for
/// `orca serve`, the one command that needs the password, to report.
pub(crate) fn learn_password(notify: Option<&toml::Value>, root: &Path) {
    let Some(config) = notify.and_then(|v| v.clone().try_into::<NotifyConfig>().ok()) else {
        return;
    };
    if let Some(email) = &config.email {
        let _ = smtp_password(email, root);
    }
}
