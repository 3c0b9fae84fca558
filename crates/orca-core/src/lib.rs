//! # orca-core
//!
//! The domain of orca, with no I/O: ids, the [`Plan`] and [`Execution`] / [`Task`] state
//! machines, plan validation over the step DAG, results, context threading, the human-in-the-
//! loop types and the [`AgentPort`] that the service layer dispatches through.
//!
//! Every state is an enum variant that holds only that state's data; transitions consume the
//! old state and return the new one (or hand it back with a typed error). Every persisted
//! document carries a format version and is read strictly.
//!
//! ```
//! use std::collections::BTreeSet;
//! use orca_core::*;
//! use time::OffsetDateTime;
//!
//! let now = OffsetDateTime::UNIX_EPOCH;
//! let id = |s: &str| StepId::parse(s).unwrap();
//! let agents: BTreeSet<AgentId> = [AgentId::shell()].into_iter().collect();
//!
//! // Build a draft with the builder operations, then submit it.
//! let mut draft = DraftPlan::new(PlanId::new(), now);
//! draft.set_goal("build and test");
//! draft.set_assumptions(vec!["a POSIX shell".into()]);
//! draft.set_risks(vec!["none".into()]);
//! draft.set_verification(vec!["tests pass".into()]);
//! draft.add_step(Step::new(id("build"), AgentId::shell(), "build").with_command("true"), None).unwrap();
//! draft.add_step(Step::new(id("test"), AgentId::shell(), "test").with_command("true"), None).unwrap();
//! let proposal = draft.submit(&agents, now).unwrap();
//!
//! // The human approves: the digest of the content is recorded.
//! let plan = proposal.approve("alice", None, now);
//! assert!(plan.is_intact());
//!
//! // Execute it: claim ready tasks, complete them, complete the execution.
//! let (pending, mut tasks) = PendingExecution::new(ExecutionId::new(), &plan, now);
//! let running = pending.start(now);
//! let holder = Holder { pid: 1, host: "h".into(), token: "t".into() };
//! while let Some(&i) = schedule::ready(plan.content(), &tasks).first() {
//!     let ctx = build_context(plan.id(), plan.content(), i, &tasks, &ContextLimits::default()).unwrap();
//!     let Task::Pending(task) = tasks[i].clone() else { unreachable!() };
//!     let done = task.start(ctx, holder.clone(), now).complete(TaskSuccess::with_summary("ok"), now);
//!     tasks[i] = done.into();
//! }
//! let completed = running.complete(&tasks, now).unwrap();
//! assert_eq!(Execution::from(completed).stage(), ExecutionStage::Completed);
//! ```
//!
//! ## Invalid transitions do not compile
//!
//! A transition is a method of the state that allows it, so a caller holding the wrong state
//! gets a compile error (here `E0599`, no such method), not a runtime check:
//!
//! ```compile_fail,E0599
//! # use orca_core::*;
//! # let now = time::OffsetDateTime::UNIX_EPOCH;
//! let draft = DraftPlan::new(PlanId::new(), now);
//! draft.approve("alice", None, now); // a draft must be submitted first
//! ```
//!
//! ```compile_fail,E0599
//! # use orca_core::*;
//! # fn f(mut plan: ApprovedPlan) {
//! plan.set_goal("something else"); // an approved plan is immutable
//! # }
//! ```
//!
//! ```compile_fail,E0599
//! # use orca_core::*;
//! # let now = time::OffsetDateTime::UNIX_EPOCH;
//! let task = PendingTask::new(StepId::parse("a").unwrap());
//! task.complete(TaskSuccess::with_summary("done"), now); // it has not started
//! ```
//!
//! ```compile_fail,E0599
//! # use orca_core::*;
//! # fn f(done: CompletedExecution, now: time::OffsetDateTime) {
//! done.stop("alice", None, now); // terminal stages are final
//! # }
//! ```
//!
//! ```compile_fail,E0599
//! # use orca_core::*;
//! # fn f(task: SkippedTask, ctx: TaskContext, holder: Holder, now: time::OffsetDateTime) {
//! task.retry(None, ctx, holder, now); // only a failed task is retried
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod agent;
pub mod audit_kind;
pub mod backoff;
mod canonical;
pub mod changes;
pub mod check;
pub mod context;
pub mod error;
pub mod execution;
pub mod format;
pub mod graph;
pub mod hitl;
pub mod id;
pub mod isolation;
pub mod ownership;
pub mod plan;
pub mod plural;
pub mod policy;
pub mod redact;
pub mod results;
pub mod schedule;
pub mod tool_access;
pub mod trace_context;
pub mod writes;

#[cfg(feature = "proptest")]
pub mod strategy;
pub mod suggest;

pub use agent::{
    AgentInfo, AgentPort, AgentToolUse, NoTools, PlannerRequest, QuestionRequest, Reply, Role,
    TaskRequest, ToolCall, ToolError, ToolHost, ToolSpec,
};
pub use audit_kind::{AuditKind, UNDER_EXECUTION};
pub use backoff::Backoff;
pub use changes::{ChangedFile, FileChange, RecordedChanges, Snapshot, StepChanges};
pub use check::{Check, CheckRun, CheckVerdict, ChecksRequest};
pub use context::{
    ContextLimits, DependencySummary, PreviousAttempt, TaskContext, build_context,
    build_context_with,
};
pub use error::{BuilderError, DocumentError, IdError, TransitionError};
pub use execution::{
    AnsweredDecision, AttemptOutcome, AttemptRecord, CompletedExecution, CompletedTask, Execution,
    ExecutionInfo, ExecutionStage, FailedExecution, FailedTask, Holder, PendingDecision,
    PendingExecution, PendingTask, RunningExecution, RunningTask, SkippedTask, StoppedExecution,
    Task, TaskStatus, TransitionFailed,
};
pub use format::{Digest, FORMAT_VERSION, FormatVersion};
pub use graph::Problem;
pub use hitl::{
    Action, ApprovalAction, Decision, DecisionRequest, DeviationAction, HumanAnswer,
    InterruptionAction, Touchpoint, TwoQuestion, match_action,
};
pub use id::{AgentId, ExecutionId, PlanId, SessionId, StepId};
pub use isolation::{
    Isolation, KeptWorktree, Merged, StepWorkspaces, WorkspaceEnd, WorkspaceError,
};
pub use ownership::{ProcessGroup, ReapOutcome, StepIdentity};
pub use plan::{
    Approval, ApprovedPlan, DraftPlan, GivenApproval, PendingApprovals, Plan, PlanContent,
    PlanEvent, PlanStage, PolicyApproval, ProposalPlan, RejectedPlan, Rejection, Requester, Step,
    StepPatch, SubmitRejected,
};
pub use results::{
    AgentAnswer, Budget, ErrorCode, PlanRefStage, PlannerResponse, TaskFailure, TaskInterruption,
    TaskResult, TaskSuccess, Usage,
};
pub use tool_access::{ToolAccess, WorkspaceTool};
