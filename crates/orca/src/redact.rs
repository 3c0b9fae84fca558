//! The one redactor every output of this process goes through: stdout, stderr, logs in every
//! format, and the store. It knows the secrets of the environment from the start and learns
//! the keys the settings load.

use std::io::Write as _;
use std::sync::{LazyLock, RwLock};

use orca_core::redact::{Redactor, is_secret_env_name, plausible_secret_value};

static REDACTOR: LazyLock<RwLock<Redactor>> = LazyLock::new(|| RwLock::new(from_environment()));

/// The redactor of this process (cheap to clone).
pub(crate) fn redactor() -> Redactor {
    REDACTOR
        .read()
        .map_or_else(|p| p.into_inner().clone(), |r| r.clone())
}

/// Adds the secrets found while loading the config (keys from files and commands, env file
/// values) to the process's redactor.
pub(crate) fn learn(more: &Redactor) {
    let mut r = REDACTOR
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    r.merge(more);
}

/// `text` redacted.
pub(crate) fn redact(text: &str) -> String {
    redactor().redact(text)
}

/// A redactor knowing the values of every environment variable of this process whose name
/// says it holds a secret (`*_API_KEY`, `*_TOKEN`, `*SECRET*`, `*PASSWORD*`…).
fn from_environment() -> Redactor {
    Redactor::new().with_secrets(
        std::env::vars()
            .filter(|(k, v)| is_secret_env_name(k) && plausible_secret_value(v))
            .map(|(_, v)| v),
    )
}

/// A `tracing` writer that redacts each event before it reaches stderr: every log format
/// (`--log-format human|json`, any `-v`) goes through it.
#[derive(Debug, Default)]
pub(crate) struct RedactingStderr;

/// One event's bytes, written redacted when dropped.
#[derive(Debug, Default)]
pub(crate) struct EventBuf(Vec<u8>);

impl std::io::Write for EventBuf {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventBuf {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.0);
        let mut err = std::io::stderr().lock();
        crate::model_meter::clear_status(&mut err);
        let _ = err.write_all(redact(&text).as_bytes());
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RedactingStderr {
    type Writer = EventBuf;

    fn make_writer(&'a self) -> Self::Writer {
        EventBuf::default()
    }
}
