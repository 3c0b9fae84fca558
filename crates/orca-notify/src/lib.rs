//! Notifications that reach people: the `[notify]` settings, and delivery of any notification
//! (`decision_pending`, or any other event the notifier sends) to webhooks — its JSON, or a
//! Slack message — and to email over SMTP with STARTTLS. Every delivery runs in its own task,
//! each attempt bounded in time, retried with exponential backoff; each attempt's outcome is
//! logged. Credentials are resolved by the caller and never displayed (ADR 0052).
//!
//! The command hook (`[notify] command`) is run by `orca serve` (`orca-web`), which hands every
//! notification to a [`Notifier`] too.

#![forbid(unsafe_code)]

mod config;
mod deliver;
mod email;
mod error;
mod message;
mod webhook;

pub use config::{
    EmailConfig, EmailTls, MAX_ATTEMPTS, MAX_BACKOFF_SECS, NotifyConfig, WebhookConfig,
    WebhookFormat,
};
pub use deliver::{Notifier, Retry};
pub use email::Password;
pub use error::ConfigError;
pub use webhook::shown_url;
