//! What the collector acknowledged, kept on disk: for each execution, the `seq` of the last
//! audit entry whose spans were all exported. The next process that follows the execution (a
//! resume after `kill -9`, a worker, the run a web or MCP decision starts) begins there, so the
//! spans a killed process derived but never sent — and the entries it never read — are sent by
//! the next one, and what was acknowledged is not sent again.
//!
//! Spans leave through the batch processor in the order they were queued; [`Acking`] counts
//! those whose export returned, and a window's mark (`exec`, `seq`, the count queued up to it)
//! is written once every span queued before it was exported without error. After a failed
//! export nothing more is written (the next process sends from the last acknowledged mark): a
//! process killed between an export and the write of its mark makes the next one send that
//! window again, with the same span ids.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use orca_core::ExecutionId;

/// The marks of the executions this process follows, and where they are kept.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    dir: Option<PathBuf>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Spans queued so far.
    queued: u64,
    /// Spans whose export returned.
    done: u64,
    /// An export failed: nothing more is marked.
    failed: bool,
    /// Marks not yet acknowledged: (spans queued up to it, execution, seq).
    pending: VecDeque<(u64, ExecutionId, u64)>,
}

impl Ledger {
    /// Marks kept under `dir` (`None`: not kept; every follower starts where the log stands).
    pub(crate) fn new(dir: Option<PathBuf>) -> Self {
        Self {
            dir,
            state: Mutex::default(),
        }
    }

    fn file(&self, exec: ExecutionId) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(exec.to_string()))
    }

    /// The `seq` up to which `exec`'s spans were acknowledged, by this or an earlier process.
    pub(crate) fn acknowledged(&self, exec: ExecutionId) -> Option<u64> {
        let text = std::fs::read_to_string(self.file(exec)?).ok()?;
        text.trim().parse().ok()
    }

    /// `spans` spans were queued, for the window of an execution up to a `seq` (`window`) or
    /// for nothing to mark (the planner's trace).
    pub(crate) fn queued(&self, window: Option<(ExecutionId, u64)>, spans: usize) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.queued += spans as u64;
        if let Some((exec, seq)) = window {
            let at = s.queued;
            s.pending.push_back((at, exec, seq));
        }
        self.advance(&mut s);
    }

    /// An export of `spans` spans returned (`ok`: without error).
    fn exported(&self, spans: usize, ok: bool) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.done += spans as u64;
        s.failed |= !ok;
        self.advance(&mut s);
    }

    fn advance(&self, s: &mut State) {
        if s.failed {
            s.pending.clear();
            return;
        }
        while let Some(&(at, exec, seq)) = s.pending.front() {
            if at > s.done {
                break;
            }
            s.pending.pop_front();
            self.write(exec, seq);
        }
    }

    fn write(&self, exec: ExecutionId, seq: u64) {
        let Some(path) = self.file(exec) else {
            return;
        };
        // Never backwards (two followers of one execution in one process, say).
        if self.acknowledged(exec).is_some_and(|old| old >= seq) {
            return;
        }
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| {
                let tmp = path.with_extension("tmp");
                std::fs::write(&tmp, seq.to_string())?;
                std::fs::rename(&tmp, &path)
            });
        if let Err(e) = written {
            tracing::debug!(
                "telemetry: cannot keep the export mark at {}: {e}",
                path.display()
            );
        }
    }
}

/// The OTLP exporter, telling the ledger which exports returned.
#[derive(Debug)]
pub(crate) struct Acking<E> {
    pub(crate) inner: E,
    pub(crate) ledger: Arc<Ledger>,
}

impl<E: SpanExporter> SpanExporter for Acking<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        let result = self.inner.export(batch).await;
        self.ledger.exported(n, result.is_ok());
        result
    }

    fn shutdown_with_timeout(&self, timeout: std::time::Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_kept_once_every_span_before_it_was_exported() {
        let dir = std::env::temp_dir().join(format!("orca-ledger-{}", ExecutionId::new()));
        let ledger = Ledger::new(Some(dir.clone()));
        let (a, b) = (ExecutionId::new(), ExecutionId::new());
        ledger.queued(Some((a, 4)), 3);
        ledger.queued(Some((b, 9)), 0);
        ledger.queued(Some((a, 7)), 2);
        assert_eq!(ledger.acknowledged(a), None, "nothing exported yet");
        ledger.exported(2, true);
        assert_eq!(
            ledger.acknowledged(a),
            None,
            "one span of the first window is not"
        );
        ledger.exported(1, true);
        assert_eq!(ledger.acknowledged(a), Some(4));
        assert_eq!(ledger.acknowledged(b), Some(9), "an empty window behind it");
        ledger.exported(2, false);
        assert_eq!(
            ledger.acknowledged(a),
            Some(4),
            "a failed export is not a mark"
        );
        ledger.queued(Some((a, 8)), 0);
        assert_eq!(ledger.acknowledged(a), Some(4), "nor anything after it");
        let _ = std::fs::remove_dir_all(dir);
    }
}
