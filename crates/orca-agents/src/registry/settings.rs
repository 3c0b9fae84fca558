//! How the agents run their steps' processes: the sandbox, the kill grace, the step
//! environment, where streamed progress goes, and when an attempt has stalled. Builders of [`Agents`], each returning the
//! same agents with one setting changed.

use std::sync::Arc;

use orca_llm::progress::ProgressSink;
use orca_os::sandbox::SandboxPolicy;
use orca_os::step_env::EnvPolicy;

use orca_core::AgentId;

use super::Agents;
use crate::stall::StallLimits;

impl Agents {
    /// The same agents, whose processes (shell steps, command-line agents) run under `policy`.
    /// In `kernel` mode, check [`orca_os::sandbox::probe`] first: where the kernel cannot
    /// confine, every child fails to start rather than run unconfined.
    #[must_use]
    pub fn with_sandbox(mut self, policy: Arc<SandboxPolicy>) -> Self {
        self.sandbox = Some(policy);
        self
    }

    /// The same agents, giving a step's processes that must end early (stop, cancel, Ctrl-C,
    /// a timeout) `grace` between SIGTERM and SIGKILL; also how long a dead runner's groups
    /// get (default [`orca_os::process_group::DEFAULT_KILL_GRACE`]).
    #[must_use]
    pub const fn with_kill_grace(mut self, grace: std::time::Duration) -> Self {
        self.kill_grace = grace;
        self
    }

    /// The same agents, passing on each attempt's trace context when `on` (telemetry export
    /// is on, ADR 0048): `traceparent` on its model requests, `TRACEPARENT` in a command-line
    /// agent's environment.
    #[must_use]
    pub const fn with_trace_context(mut self, on: bool) -> Self {
        self.trace_context = on;
        self
    }

    /// Runs `run` with the attempt's trace context in force, when it is passed on.
    pub(super) async fn traced<F: Future>(
        &self,
        request: &orca_core::TaskRequest,
        run: F,
    ) -> F::Output {
        if self.trace_context {
            let tp = orca_core::trace_context::traceparent(
                request.execution_id,
                request.step.id.as_str(),
                request.attempt,
            );
            orca_llm::trace::TRACEPARENT.scope(tp, run).await
        } else {
            run.await
        }
    }

    /// The grace period between SIGTERM and SIGKILL for a step's processes.
    #[must_use]
    pub const fn kill_grace(&self) -> std::time::Duration {
        self.kill_grace
    }

    /// The same agents, reporting the progress of streamed model answers (and each model-backed
    /// step's usage when it ends) to `sink`.
    #[must_use]
    pub fn with_progress(mut self, sink: Arc<dyn ProgressSink>) -> Self {
        self.progress = Some(sink);
        self
    }

    /// Sets which environment variables steps receive (builder style; see
    /// [`orca_os::step_env`]). Without it, steps get the base allowlist and their own `env`
    /// names, read from this process's environment.
    #[must_use]
    pub fn with_env_policy(mut self, policy: EnvPolicy) -> Self {
        self.env = policy;
        self
    }

    /// Sets when `id`'s attempts end `stalled` (see [`crate::stall`]), over the loop
    /// settings' [`crate::LoopSettings::stall`]; an unknown id is ignored.
    pub fn set_stall_limits(&mut self, id: &AgentId, limits: StallLimits) {
        if let Some(entry) = self.entries.get_mut(id) {
            entry.stall = Some(limits);
        }
    }

    /// When `id`'s attempts end `stalled`.
    #[must_use]
    pub fn stall_limits(&self, id: &AgentId) -> StallLimits {
        self.entries
            .get(id)
            .and_then(|e| e.stall)
            .unwrap_or(self.settings.stall)
    }
}
