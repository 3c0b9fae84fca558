//! The agent port of the registry: running a step, its checks, a question and the planner
//! through the runtime each agent has (the shell, a model loop, a command-line agent).

use async_trait::async_trait;
use orca_core::{
    AgentAnswer, AgentId, AgentInfo, AgentPort, ErrorCode, PlannerRequest, PlannerResponse,
    QuestionRequest, Reply, TaskFailure, TaskRequest, TaskResult, ToolHost,
};

use orca_os::step_env;

use super::{Agents, Runtime};
use crate::{agent_loop, shell};

#[async_trait]
impl AgentPort for Agents {
    fn agents(&self) -> Vec<AgentInfo> {
        self.entries.values().map(|e| e.profile.info()).collect()
    }

    async fn reap(&self, groups: &[orca_core::ProcessGroup]) -> Vec<orca_core::ReapOutcome> {
        orca_os::process_group::reap_groups(groups, self.kill_grace).await
    }

    async fn settle(&self) {
        let most = self.kill_grace + std::time::Duration::from_secs(5);
        orca_os::process_group::settle(most).await;
    }

    async fn run_task(&self, request: TaskRequest, tools: &dyn ToolHost) -> Reply<TaskResult> {
        let entry = match self.entry(&request.agent) {
            Ok(e) => e,
            Err(f) => return Reply::new(TaskResult::Failure(f)),
        };
        // An isolated step runs in its own worktree (ADR 0017).
        let root = request.workdir.as_deref().unwrap_or(&self.root);
        match &entry.runtime {
            Runtime::Shell => Reply::new(
                shell::run_shell_for(
                    root,
                    &request,
                    &self.env,
                    self.sandbox.as_deref(),
                    self.kill_grace,
                    tools,
                )
                .await,
            ),
            Runtime::Cli(cli) => {
                let run = cli.run_task(
                    root,
                    &entry.profile,
                    &request,
                    &self.env,
                    self.sandbox.as_deref(),
                    self.kill_grace,
                    entry.stall.unwrap_or(self.settings.stall).idle,
                    tools,
                );
                self.traced(&request, run).await
            }
            Runtime::Chat(backend) => {
                // `run_command` calls made by this step's agent get its names too.
                let mut names = self.env.agent_names(&request.agent).to_vec();
                names.extend(request.step.env.iter().cloned());
                let budget = request.budget.min(&entry.profile.limits);
                let settings = self.loop_settings(entry).await;
                let profile = self.seen_profile(entry);
                let run = agent_loop::run_task(
                    backend.as_ref(),
                    &profile,
                    &request,
                    budget,
                    tools,
                    &settings,
                );
                let run = step_env::STEP_NAMES.scope((request.agent.clone(), names), run);
                let run = self.reporting(request.step.id.as_str(), &request.agent, run);
                // The step's timeout is the loop's own: a timed-out attempt keeps the usage of
                // the turns the model answered.
                self.traced(&request, run).await
            }
        }
    }

    async fn run_checks(
        &self,
        request: &orca_core::ChecksRequest,
        tools: &dyn ToolHost,
    ) -> Vec<orca_core::CheckRun> {
        crate::checks::run_checks(
            &self.root,
            request,
            &self.env,
            self.sandbox.as_deref(),
            self.kill_grace,
            tools,
        )
        .await
    }

    async fn ask(
        &self,
        request: QuestionRequest,
        tools: &dyn ToolHost,
    ) -> Reply<Result<AgentAnswer, TaskFailure>> {
        let entry = match self.entry(&request.agent) {
            Ok(e) => e,
            Err(f) => return Reply::new(Err(f)),
        };
        match &entry.runtime {
            Runtime::Shell => Reply::new(Err(TaskFailure::new(
                ErrorCode::Validation,
                "the shell agent runs commands; it cannot answer questions",
            ))),
            Runtime::Cli(cli) => {
                cli.ask(
                    &self.root,
                    &entry.profile,
                    &request,
                    &self.env,
                    self.sandbox.as_deref(),
                )
                .await
            }
            Runtime::Chat(backend) => {
                let budget = request.budget.min(&entry.profile.limits);
                let profile = self.seen_profile(entry);
                let settings = self.loop_settings(entry).await;
                let run = agent_loop::ask(
                    backend.as_ref(),
                    &profile,
                    &request,
                    budget,
                    tools,
                    &settings,
                );
                self.reporting("ask", &request.agent, run).await
            }
        }
    }

    async fn plan(&self, request: PlannerRequest, tools: &dyn ToolHost) -> Reply<PlannerResponse> {
        let entry = match self.entry(&AgentId::planner()) {
            Ok(e) => e,
            Err(f) => return Reply::new(PlannerResponse::Failure(f)),
        };
        match &entry.runtime {
            Runtime::Chat(backend) => {
                let budget = request.budget.min(&entry.profile.limits);
                let system = self.with_instructions(&self.planner_prompt(&entry.profile.prompt));
                let settings = self.loop_settings(entry).await;
                let run = agent_loop::plan(
                    backend.as_ref(),
                    &entry.profile,
                    &system,
                    &request,
                    budget,
                    tools,
                    &settings,
                );
                self.reporting("plan", &entry.profile.id, run).await
            }
            Runtime::Shell | Runtime::Cli(_) => {
                Reply::new(PlannerResponse::Failure(TaskFailure::new(
                    ErrorCode::Validation,
                    format!(
                        "the planner must use a model backend (openai, anthropic, scripted), not `{}`",
                        entry.profile.backend.kind()
                    ),
                )))
            }
        }
    }
}
