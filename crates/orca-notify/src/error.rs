//! The errors of this crate.

/// A `[notify]` setting that is wrong, with the field it is in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// The dotted field (`notify.email.to[1]`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// Why one delivery attempt failed, for the log. Never holds a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) message: String,
    /// Trying again cannot help (a 4xx answer, a refused address): no more attempts.
    pub(crate) permanent: bool,
}

impl Failure {
    pub(crate) fn transient(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            permanent: false,
        }
    }
}

/// An error and its sources on one line (`a: b: c`).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}
