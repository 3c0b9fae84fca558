//! What the server holds: the services, the token file, the issued action tokens, and how to
//! continue a run once a decision is recorded.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use orca_core::ExecutionId;
use orca_services::Orca;
use orca_store::Store;

use crate::action_tokens::ActionTokens;
use crate::notify::{Deliver, NotifyConfig};
use crate::tokens::TokenFile;

/// Continues an execution after a decision made here (or starts a newly created one): the
/// binary implements it by running `orca exec resume` in the background, so a run continues
/// exactly as it would after `orca exec decide`. Must not block.
pub trait RunStarter: Send + Sync + Debug {
    /// Drives `execution` to its end (or its next decision) in the background.
    ///
    /// # Errors
    ///
    /// The driver could not be started (a message for the page).
    fn continue_run(&self, execution: ExecutionId) -> Result<(), String>;
}

/// A starter that starts nothing (tests, or a read-only server).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRuns;

impl RunStarter for NoRuns {
    fn continue_run(&self, _: ExecutionId) -> Result<(), String> {
        Ok(())
    }
}

/// Settings of a server.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Who signs approvals made here (shown on the confirmation page), e.g. the key's file
    /// and public key.
    pub signer: String,
    /// The address people open (for notification links), e.g. `https://host:7777`.
    pub public_url: String,
    /// Cookies get `Secure` (TLS).
    pub secure_cookie: bool,
    /// An unanswered decision older than this is decided by default-deny: a proposal is
    /// rejected, a step decision stops the execution.
    pub expiry: Option<Duration>,
    /// What to run when a decision becomes pending.
    pub notify: Option<NotifyConfig>,
    /// Where else notifications go (webhooks, email): the binary's choice.
    pub deliver: Option<Arc<dyn Deliver>>,
    /// How often the inbox is checked for new and expired decisions, and live pages for
    /// changes.
    pub poll: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            signer: "the server user's signing key".to_owned(),
            public_url: "http://127.0.0.1:7777".to_owned(),
            secure_cookie: false,
            expiry: None,
            notify: None,
            deliver: None,
            poll: Duration::from_millis(500),
        }
    }
}

/// The server's state.
pub struct Web {
    pub(crate) orca: Orca,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) tokens: TokenFile,
    pub(crate) actions: ActionTokens,
    pub(crate) runs: Arc<dyn RunStarter>,
    pub(crate) settings: Settings,
    /// Cancelled when the server stops: open event streams end, so shutdown never waits on
    /// a page left open.
    pub(crate) closing: tokio_util::sync::CancellationToken,
    /// Notifiers running now (killed when the server stops).
    pub(crate) notifiers: Arc<crate::notify::Notifiers>,
}

impl std::fmt::Debug for Web {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Web")
            .field("tokens", &self.tokens)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Web {
    /// A server over these services and store.
    #[must_use]
    pub fn new(
        orca: Orca,
        store: Arc<dyn Store>,
        tokens: TokenFile,
        runs: Arc<dyn RunStarter>,
        settings: Settings,
    ) -> Self {
        Self {
            orca,
            store,
            tokens,
            actions: ActionTokens::default(),
            runs,
            settings,
            closing: tokio_util::sync::CancellationToken::new(),
            notifiers: Arc::default(),
        }
    }
}
