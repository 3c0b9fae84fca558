//! The one table of `orca_*` tools: each entry's name, what it may do, its description and
//! argument schema (what the model sees) and its handler. Grants, the offered specs, the
//! dispatch and the agent loop's concurrency all derive from it.

use std::future::Future;
use std::pin::Pin;

use orca_core::{ToolAccess, ToolError, ToolSpec};
use serde_json::{Value, json};

use super::gate::Gate;
use super::schema::{checks, obj, plan_id, step, strings};
use super::{ask, plan_tools};

/// Tool names (as in the seeds).
pub mod names {
    /// Relay → orchestration.
    pub const INVOKE: &str = "orca_invoke";
    /// A question to the human.
    pub const ASK_USER: &str = "orca_ask_user";
    /// A read-only question to a specialist.
    pub const ASK_AGENT: &str = "orca_ask_agent";
    /// List plans.
    pub const PLANS_LIST: &str = "orca_plans_list";
    /// Get a plan.
    pub const PLANS_GET: &str = "orca_plans_get";
    /// Create a draft.
    pub const PLAN_CREATE_DRAFT: &str = "orca_plan_create_draft";
    /// Set a draft's goal and summary.
    pub const PLAN_SET_GOAL: &str = "orca_plan_set_goal";
    /// Set a draft's assumptions.
    pub const PLAN_SET_ASSUMPTIONS: &str = "orca_plan_set_assumptions";
    /// Set a draft's risks.
    pub const PLAN_SET_RISKS: &str = "orca_plan_set_risks";
    /// Set a draft's verification.
    pub const PLAN_SET_VERIFICATION: &str = "orca_plan_set_verification";
    /// Set a draft's checks (commands run on the integrated result).
    pub const PLAN_SET_CHECKS: &str = "orca_plan_set_checks";
    /// Add a step.
    pub const PLAN_ADD_STEP: &str = "orca_plan_add_step";
    /// Update a step.
    pub const PLAN_UPDATE_STEP: &str = "orca_plan_update_step";
    /// Remove a step.
    pub const PLAN_REMOVE_STEP: &str = "orca_plan_remove_step";
    /// Submit a draft.
    pub const PLAN_SUBMIT: &str = "orca_plan_submit";
    /// List executions.
    pub const EXECUTIONS_LIST: &str = "orca_executions_list";
    /// Get an execution.
    pub const EXECUTION_GET: &str = "orca_execution_get";
}

/// What a handler returns.
pub(super) type HandlerFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send + 'a>>;

/// Runs one call of a tool: the gate serving the call, the call's arguments.
pub(super) type Handler = for<'a> fn(&'a Gate, &'a Value) -> HandlerFuture<'a>;

/// One `orca_*` tool.
#[derive(Clone, Copy)]
pub struct ToolDef {
    /// The name the model calls.
    pub name: &'static str,
    /// What it may do: grants and concurrency derive from it.
    pub access: ToolAccess,
    /// What it does (the model reads it).
    pub description: &'static str,
    /// The JSON schema of its arguments.
    pub parameters: fn() -> Value,
    pub(super) handler: Handler,
}

impl std::fmt::Debug for ToolDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolDef")
            .field("name", &self.name)
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

impl ToolDef {
    /// The tool as offered to a model.
    #[must_use]
    pub fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.to_owned(),
            description: self.description.to_owned(),
            parameters: (self.parameters)(),
        }
    }
}

/// Every `orca_*` tool, in the order they are offered.
pub static TABLE: &[ToolDef] = &[
    ToolDef {
        name: names::INVOKE,
        access: ToolAccess::Relay,
        description: "Send the user's message to the orchestration system (the planner) and return its reply.",
        parameters: || obj(json!({ "message": { "type": "string" } }), &["message"]),
        handler: ask::invoke,
    },
    ToolDef {
        name: names::ASK_USER,
        access: ToolAccess::AskHuman,
        description: "Ask the human a question and wait for the answer. Use sparingly, for decisions only they can make.",
        parameters: || obj(json!({ "question": { "type": "string" } }), &["question"]),
        handler: ask::ask_user,
    },
    ToolDef {
        name: names::ASK_AGENT,
        access: ToolAccess::Read,
        description: "Ask a specialist a read-only question (it cannot change files). Pass session_id to continue a conversation.",
        parameters: || {
            obj(
                json!({ "agent": { "type": "string" }, "question": { "type": "string" }, "session_id": { "type": "string" } }),
                &["agent", "question"],
            )
        },
        handler: ask::ask_agent,
    },
    ToolDef {
        name: names::PLANS_LIST,
        access: ToolAccess::Read,
        description: "List existing plans, newest first (id, goal, stage, steps, executions).",
        parameters: || obj(json!({}), &[]),
        handler: plan_tools::plans_list,
    },
    ToolDef {
        name: names::PLANS_GET,
        access: ToolAccess::Read,
        description: "Get a plan's full content and stage.",
        parameters: || obj(json!({ "plan_id": plan_id() }), &["plan_id"]),
        handler: plan_tools::plans_get,
    },
    ToolDef {
        name: names::PLAN_CREATE_DRAFT,
        access: ToolAccess::EditDraft,
        description: "Create a new draft plan; returns its plan_id, which every other plan tool takes.",
        parameters: || {
            obj(
                json!({ "goal": { "type": "string" }, "summary": { "type": "string" } }),
                &["goal"],
            )
        },
        handler: plan_tools::create_draft,
    },
    ToolDef {
        name: names::PLAN_SET_GOAL,
        access: ToolAccess::EditDraft,
        description: "Set a draft's goal and (optionally) summary.",
        parameters: || {
            obj(
                json!({ "plan_id": plan_id(), "goal": { "type": "string" }, "summary": { "type": "string" } }),
                &["plan_id", "goal"],
            )
        },
        handler: plan_tools::set_goal,
    },
    ToolDef {
        name: names::PLAN_SET_ASSUMPTIONS,
        access: ToolAccess::EditDraft,
        description: "Replace a draft's assumptions (at least one).",
        parameters: || {
            obj(
                json!({ "plan_id": plan_id(), "items": strings("the assumptions") }),
                &["plan_id", "items"],
            )
        },
        handler: plan_tools::set_assumptions,
    },
    ToolDef {
        name: names::PLAN_SET_RISKS,
        access: ToolAccess::EditDraft,
        description: "Replace a draft's risks (at least one).",
        parameters: || {
            obj(
                json!({ "plan_id": plan_id(), "items": strings("the risks") }),
                &["plan_id", "items"],
            )
        },
        handler: plan_tools::set_risks,
    },
    ToolDef {
        name: names::PLAN_SET_VERIFICATION,
        access: ToolAccess::EditDraft,
        description: "Replace how the result will be verified (at least one).",
        parameters: || {
            obj(
                json!({ "plan_id": plan_id(), "items": strings("the verification steps") }),
                &["plan_id", "items"],
            )
        },
        handler: plan_tools::set_verification,
    },
    ToolDef {
        name: names::PLAN_SET_CHECKS,
        access: ToolAccess::EditDraft,
        description: "Replace the plan's checks: commands run once every step completed, on the integrated result; the run completes only if each exits 0 ([] removes them). Give a step its own `checks` with orca_plan_add_step / orca_plan_update_step.",
        parameters: || {
            obj(
                json!({ "plan_id": plan_id(), "checks": checks() }),
                &["plan_id", "checks"],
            )
        },
        handler: plan_tools::set_checks,
    },
    ToolDef {
        name: names::PLAN_ADD_STEP,
        access: ToolAccess::EditDraft,
        description: "Add a step to a draft, at a 0-based position or at the end.",
        parameters: || {
            obj(
                json!({ "plan_id": plan_id(), "step": step(), "position": { "type": "integer", "minimum": 0 } }),
                &["plan_id", "step"],
            )
        },
        handler: plan_tools::add_step,
    },
    ToolDef {
        name: names::PLAN_UPDATE_STEP,
        access: ToolAccess::EditDraft,
        description: "Change fields of a draft's step; fields left out stay as they are.",
        parameters: || {
            obj(
                json!({ "plan_id": plan_id(), "step_id": { "type": "string" }, "changes": { "type": "object" } }),
                &["plan_id", "step_id", "changes"],
            )
        },
        handler: plan_tools::update_step,
    },
    ToolDef {
        name: names::PLAN_REMOVE_STEP,
        access: ToolAccess::EditDraft,
        description: "Remove a step from a draft.",
        parameters: || {
            obj(
                json!({ "plan_id": plan_id(), "step_id": { "type": "string" } }),
                &["plan_id", "step_id"],
            )
        },
        handler: plan_tools::remove_step,
    },
    ToolDef {
        name: names::PLAN_SUBMIT,
        access: ToolAccess::EditDraft,
        description: "Validate the draft and submit it for the human's approval. On problems, every problem is returned and the draft stays editable.",
        parameters: || obj(json!({ "plan_id": plan_id() }), &["plan_id"]),
        handler: plan_tools::submit,
    },
    ToolDef {
        name: names::EXECUTIONS_LIST,
        access: ToolAccess::Read,
        description: "List executions (optionally of one plan), newest first.",
        parameters: || obj(json!({ "plan_id": plan_id() }), &[]),
        handler: plan_tools::executions_list,
    },
    ToolDef {
        name: names::EXECUTION_GET,
        access: ToolAccess::Read,
        description: "Get an execution with its tasks' statuses and summaries.",
        parameters: || {
            obj(
                json!({ "execution_id": { "type": "string" } }),
                &["execution_id"],
            )
        },
        handler: plan_tools::execution_get,
    },
];

/// The `orca_*` tool called `name`.
#[must_use]
pub fn find(name: &str) -> Option<&'static ToolDef> {
    TABLE.iter().find(|d| d.name == name)
}

/// Every orca tool with its schema.
#[must_use]
pub fn definitions() -> Vec<ToolSpec> {
    TABLE.iter().map(ToolDef::spec).collect()
}
