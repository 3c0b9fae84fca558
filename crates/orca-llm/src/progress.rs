//! Progress of model calls while they stream, for whoever shows it (the `orca` binary's
//! terminal). The registry installs a [`ProgressSink`] around each step, question or plan it
//! runs ([`scoped`]); the streaming HTTP adapters report into it. Nothing is reported where no
//! sink is installed, and a sink only ever sees counts — never model text.

use std::sync::Arc;
use std::time::Duration;

use orca_core::Usage;

/// What is being reported.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ModelProgress {
    /// A model turn is streaming (sent a few times a second at most).
    Streaming {
        /// The step id, or `ask` / `plan`.
        label: String,
        /// The agent.
        agent: String,
        /// The turn of this step (1-based).
        turn: u32,
        /// Output tokens so far (an estimate until the turn ends).
        output_tokens: u64,
        /// The turn has ended and `output_tokens` is the server's own count: a display shows
        /// this report whatever its rate limit (else the last estimate stays on screen).
        exact: bool,
        /// Since the request was sent.
        elapsed: Duration,
    },
    /// A tool call of the model was refused (an error result): shown, so that a model
    /// repeating a refused call is not mistaken for one making progress.
    ToolRefused {
        /// The step id, or `ask` / `plan`.
        label: String,
        /// The agent.
        agent: String,
        /// The tool called.
        tool: String,
        /// How many times this exact call got this exact refusal so far.
        times: u32,
    },
    /// A model-backed step, question or plan ended: its usage over all turns.
    Finished {
        /// The step id, or `ask` / `plan`.
        label: String,
        /// The agent.
        agent: String,
        /// The summed usage (with cost, if known).
        usage: Usage,
        /// Since it started.
        elapsed: Duration,
    },
}

impl ModelProgress {
    /// The step id, or `ask` / `plan`.
    #[must_use]
    pub fn label(&self) -> &str {
        match self {
            Self::Streaming { label, .. }
            | Self::ToolRefused { label, .. }
            | Self::Finished { label, .. } => label,
        }
    }
}

/// Receives progress (called from the model call's task: keep it quick, never block).
pub trait ProgressSink: Send + Sync + std::fmt::Debug {
    /// One report.
    fn report(&self, progress: &ModelProgress);
}

#[derive(Debug, Clone)]
struct Scope {
    sink: Arc<dyn ProgressSink>,
    label: String,
    agent: String,
}

tokio::task_local! {
    static SCOPE: Scope;
    static TURN: std::cell::Cell<u32>;
}

/// Runs `fut` with `sink` receiving the progress of the model calls it makes, labelled.
pub async fn scoped<F: Future>(
    sink: Option<Arc<dyn ProgressSink>>,
    label: &str,
    agent: &str,
    fut: F,
) -> F::Output {
    match sink {
        Some(sink) => {
            let scope = Scope {
                sink,
                label: label.to_owned(),
                agent: agent.to_owned(),
            };
            SCOPE
                .scope(scope, TURN.scope(std::cell::Cell::new(0), fut))
                .await
        }
        None => fut.await,
    }
}

/// Marks the start of a model turn (the turn number reports carry).
pub(crate) fn turn_started() {
    let _ = TURN.try_with(|t| t.set(t.get().saturating_add(1)));
}

/// Reports streaming progress, if a sink is installed.
pub(crate) fn streaming(output_tokens: u64, elapsed: Duration, exact: bool) {
    let _ = SCOPE.try_with(|s| {
        let turn = TURN.try_with(std::cell::Cell::get).unwrap_or(1).max(1);
        s.sink.report(&ModelProgress::Streaming {
            label: s.label.clone(),
            agent: s.agent.clone(),
            turn,
            output_tokens,
            exact,
            elapsed,
        });
    });
}

/// Reports a refused tool call of the model, if a sink is installed.
pub fn tool_refused(tool: &str, times: u32) {
    let _ = SCOPE.try_with(|s| {
        s.sink.report(&ModelProgress::ToolRefused {
            label: s.label.clone(),
            agent: s.agent.clone(),
            tool: tool.to_owned(),
            times,
        });
    });
}

/// Reports the end of a step, question or plan, if a sink is installed and a model was asked.
pub fn finished(
    sink: Option<&Arc<dyn ProgressSink>>,
    label: &str,
    agent: &str,
    usage: &Usage,
    elapsed: Duration,
) {
    if let Some(sink) = sink
        && usage.turns > 0
    {
        sink.report(&ModelProgress::Finished {
            label: label.to_owned(),
            agent: agent.to_owned(),
            usage: *usage,
            elapsed,
        });
    }
}
