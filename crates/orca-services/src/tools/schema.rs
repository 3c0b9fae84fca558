//! The JSON schemas of the `orca_*` tools' arguments (what the model sees).

use serde_json::{Value, json};

/// An arguments object: exactly these properties, these required.
pub(super) fn obj(props: Value, required: &[&str]) -> Value {
    json!({ "type": "object", "additionalProperties": false, "required": required, "properties": props })
}

/// A non-empty list of strings.
pub(super) fn strings(what: &str) -> Value {
    json!({ "type": "array", "items": { "type": "string" }, "minItems": 1, "description": what })
}

/// A plan id.
pub(super) fn plan_id() -> Value {
    json!({ "type": "string", "description": "the plan id (plan_…) returned by orca_plan_create_draft" })
}

/// Limits approved with the plan (a step's, or the plan's).
fn budget() -> Value {
    let n = json!({ "type": "integer", "minimum": 1 });
    json!({ "type": "object", "additionalProperties": false,
        "description": "ONLY limits the user stated in the request; omit otherwise (a model step takes tens of thousands of tokens, several turns and minutes; a limit below that fails the step at once); crossing one stops the step for the human to decide",
        "properties": { "max_tokens": n, "max_cost_micro_usd": n, "max_turns": n, "max_wall_secs": n } })
}

/// Checks: commands that must exit 0 (a step's, or the plan's).
pub(super) fn checks() -> Value {
    json!({ "type": "array",
        "description": "commands (sh -c) that must exit 0 for the work to count, e.g. the project's tests (`cargo test -p api`); run in the step's workspace and sandbox, judged by exit status only; a failing one's output goes to the next attempt",
        "items": { "type": "object", "additionalProperties": false, "required": ["command"],
            "properties": {
                "command": { "type": "string", "minLength": 1 },
                "timeout_secs": { "type": "integer", "minimum": 1, "description": "default 600" } } } })
}

/// A draft's step.
pub(super) fn step() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["id", "agent", "description"],
        "properties": {
            "id": { "type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,63}$" },
            "agent": { "type": "string", "description": "an available agent id" },
            "description": { "type": "string" },
            "command": { "type": "string", "description": "for the shell agent: the command to run" },
            "depends_on": { "type": "array", "items": { "type": "string" },
                "description": "omit: after the previous step; []: no dependencies; a list: these steps" },
            "locks": { "type": "array", "items": { "type": "string" },
                "description": "named resources; steps sharing a lock never run at once" },
            "writes": { "type": "array", "items": { "type": "string" },
                "description": "paths this step writes, relative to the project (`*`, `**` allowed), e.g. [\"src/api/**\", \"Cargo.toml\"]; steps that can run at once may not overlap unless they share a lock" },
            "assumptions": { "type": "array", "items": { "type": "string" } },
            "risks": { "type": "array", "items": { "type": "string" } },
            "verification": { "type": "array", "items": { "type": "string" } },
            "checks": checks(),
            "max_attempts": { "type": "integer", "minimum": 1 },
            "timeout_secs": { "type": "integer", "minimum": 1 },
            "env": { "type": "array", "items": { "type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$" },
                "description": "NAMES of environment variables the step needs (e.g. GITHUB_TOKEN), never values; the human approves them with the plan" },
            "isolation": { "type": "string", "enum": ["in_place", "worktree"],
                "description": "worktree: the step runs in its own git worktree, merged into the run's branch when it completes" },
            "budget": budget()
        }
    })
}
