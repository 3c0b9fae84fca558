//! # orca-embed
//!
//! orca inside your own program: a [`Project`] on the file store (`.orca/` under a directory
//! you choose) with the agents you give it — built-in kinds or your own [`ChatBackend`] — and
//! the three calls of orca's flow: [`Project::propose`] a plan, [`Project::approve`] it (a
//! person's decision, made by your program), [`Project::run`] it to its end. Everything is
//! recorded and audited as with the `orca` command: `orca exec show` and `orca audit verify`
//! work on the same directory.
//!
//! ```no_run
//! # async fn demo(backend: std::sync::Arc<dyn orca_embed::ChatBackend>) -> Result<(), orca_embed::Error> {
//! use orca_embed::{AgentId, BackendSpec, Budget, PlanContent, Profile, Project, Role, Step, StepId};
//!
//! let project = Project::builder("/tmp/demo")
//!     .agent(Profile {
//!         id: AgentId::parse("rules")?,
//!         role: Role::Specialist,
//!         description: "my agent".into(),
//!         backend: BackendSpec::Custom(backend),
//!         prompt: "You are my agent.".into(),
//!         workspace_tools: vec!["list_files".into()],
//!         limits: Budget::UNLIMITED,
//!     })
//!     .open()?;
//! let plan = project
//!     .propose(PlanContent {
//!         goal: "look at the project".into(),
//!         summary: None,
//!         steps: vec![Step::new(StepId::parse("look")?, AgentId::parse("rules")?, "look at the files")],
//!         assumptions: vec!["the project is small".into()],
//!         risks: vec!["none".into()],
//!         verification: vec!["the step completes".into()],
//!         checks: Vec::new(),
//!         isolation: None,
//!         budget: None,
//!     })
//!     .await?;
//! project.approve(plan, "me").await?;
//! let finished = project.run(plan).await?;
//! assert!(finished.completed() && finished.verified());
//! # Ok(()) }
//! ```
//!
//! **API Boundary:** this crate is what an embedder depends on; [`Project::services`] is the
//! way down to every service when the three calls are not enough.
#![forbid(unsafe_code)]

mod error;
mod project;

pub use error::Error;
pub use orca_agents::{
    Agents, BackendError, BackendSpec, ChatBackend, ChatRequest, ChatResponse, LoopSettings,
    Message, Profile, StopReason, ToolResult,
};
pub use orca_core::{
    AgentId, Budget, ExecutionId, PlanContent, PlanId, Role, Step, StepId, ToolCall, Usage,
};
pub use orca_services::{Observer, Quiet, RunEvent, RunOutcome};
pub use project::{Finished, Project, ProjectBuilder, StepResult};
