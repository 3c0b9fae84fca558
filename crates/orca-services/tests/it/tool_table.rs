//! The one table of tools: every `orca_*` tool is dispatched through its entry, and the
//! read-only flag decides what plan mode (the planner's calls) and read-only questions get.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::support;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use orca_core::tool_access::WORKSPACE_TOOLS;
use orca_core::{AgentInfo, Role, ToolAccess, ToolCall, ToolError, ToolHost, ToolSpec};
use orca_services::tools::{TABLE, definitions, names};
use orca_services::{CallMode, Gate, NoHuman, ScriptedHitl, ToolContext};
use serde_json::{Value, json};
use support::*;

/// A workspace host offering every workspace tool; it counts the calls that reach it.
#[derive(Default)]
struct CountingWorkspace {
    calls: Mutex<Vec<String>>,
}

#[async_trait]
impl ToolHost for CountingWorkspace {
    fn specs(&self) -> Vec<ToolSpec> {
        WORKSPACE_TOOLS
            .iter()
            .map(|t| ToolSpec {
                name: t.name.to_owned(),
                description: String::new(),
                parameters: json!({ "type": "object", "properties": {} }),
            })
            .collect()
    }

    async fn call(&self, call: &ToolCall) -> Result<Value, ToolError> {
        self.calls.lock().unwrap().push(call.name.clone());
        Ok(json!("done"))
    }
}

/// A context with a human attached (so `orca_ask_user` is offered).
fn context(ws: &Arc<CountingWorkspace>) -> ToolContext {
    let orca = orca(
        Arc::new(orca_store::MemoryStore::new()),
        ScriptedAgents::new(),
        Arc::new(ScriptedHitl::new([])),
    );
    ToolContext {
        workspace: Some(ws.clone()),
        ..orca.tools().clone()
    }
}

fn every_tool_agent(role: Role) -> AgentInfo {
    AgentInfo {
        id: agent("x"),
        role,
        description: String::new(),
        backend: "test".to_owned(),
        model: None,
        workspace_tools: WORKSPACE_TOOLS.iter().map(|t| t.name.to_owned()).collect(),
    }
}

fn call(name: &str) -> ToolCall {
    ToolCall {
        id: "c".to_owned(),
        name: name.to_owned(),
        arguments: json!({}),
    }
}

fn not_granted(result: &Result<Value, ToolError>) -> bool {
    result
        .as_ref()
        .is_err_and(|e| e.message.contains("is not granted"))
}

#[test]
fn the_table_and_the_tool_names_are_the_same_set() {
    use names::*;
    let mut named = vec![
        INVOKE,
        ASK_USER,
        ASK_AGENT,
        PLANS_LIST,
        PLANS_GET,
        PLAN_CREATE_DRAFT,
        PLAN_SET_GOAL,
        PLAN_SET_ASSUMPTIONS,
        PLAN_SET_RISKS,
        PLAN_SET_VERIFICATION,
        PLAN_SET_CHECKS,
        PLAN_ADD_STEP,
        PLAN_UPDATE_STEP,
        PLAN_REMOVE_STEP,
        PLAN_SUBMIT,
        EXECUTIONS_LIST,
        EXECUTION_GET,
    ];
    let mut in_table: Vec<&str> = TABLE.iter().map(|d| d.name).collect();
    let offered: Vec<String> = definitions().into_iter().map(|s| s.name).collect();
    assert_eq!(offered, in_table, "definitions() is the table, in order");
    named.sort_unstable();
    in_table.sort_unstable();
    let before = in_table.len();
    in_table.dedup();
    println!(
        "table: {before} entries, {} distinct, {} names",
        in_table.len(),
        named.len()
    );
    assert_eq!(before, in_table.len(), "a name appears twice in the table");
    assert_eq!(named, in_table);
    for t in WORKSPACE_TOOLS {
        assert!(
            !in_table.contains(&t.name),
            "{} is both an orca and a workspace tool",
            t.name
        );
    }
}

#[tokio::test]
async fn every_table_tool_is_dispatched_by_its_own_handler() {
    let ws = Arc::new(CountingWorkspace::default());
    let ctx = context(&ws);
    let planner = Gate::new(
        ctx.clone(),
        &every_tool_agent(Role::Planner),
        CallMode::Revising,
        None,
    );
    let relay = Gate::new(ctx, &every_tool_agent(Role::Relay), CallMode::Relay, None);
    let mut unhandled = 0;
    for def in TABLE {
        let gate = if planner.granted().contains(def.name) {
            &planner
        } else {
            &relay
        };
        assert!(
            gate.granted().contains(def.name),
            "{} is granted to no mode",
            def.name
        );
        let result = gate.call(&call(def.name)).await;
        if result.as_ref().is_err_and(|e| {
            e.message.contains("not available") || e.message.contains("not granted")
        }) {
            unhandled += 1;
        }
        assert_eq!(gate.access(def.name), Some(def.access), "{}", def.name);
    }
    let reached_workspace = ws.calls.lock().unwrap().len();
    println!(
        "table tools: {}, unhandled: {unhandled}, fell through to the workspace: {reached_workspace}",
        TABLE.len()
    );
    assert_eq!(unhandled, 0);
    assert_eq!(reached_workspace, 0);
}

#[tokio::test]
async fn plan_mode_refuses_every_writing_tool_and_nothing_read_only() {
    let ws = Arc::new(CountingWorkspace::default());
    let ctx = context(&ws);
    let all: Vec<(&str, ToolAccess)> = TABLE
        .iter()
        .map(|d| (d.name, d.access))
        .chain(WORKSPACE_TOOLS.iter().map(|t| (t.name, t.access)))
        .collect();
    for (role, mode) in [
        (Role::Planner, CallMode::Revising),
        (Role::Specialist, CallMode::Question),
    ] {
        let gate = Gate::new(ctx.clone(), &every_tool_agent(role), mode, None);
        let (mut writes_let_through, mut reads_refused) = (0, 0);
        for (name, access) in &all {
            assert_eq!(gate.access(name), Some(*access), "{name}");
            let refused = not_granted(&gate.call(&call(name)).await);
            if matches!(access, ToolAccess::Write) && !refused {
                writes_let_through += 1;
            }
            // Plan mode gets every read-only tool; a question gets the read-only workspace
            // tools (its orca tools are the role's choice: `orca_plans_get` only).
            let must_have = access.is_read_only()
                && (mode == CallMode::Revising || WORKSPACE_TOOLS.iter().any(|t| t.name == *name));
            if must_have && refused {
                reads_refused += 1;
            }
        }
        let written: Vec<String> = ws.calls.lock().unwrap().drain(..).collect();
        let writes_reached = written
            .iter()
            .filter(|n| {
                WORKSPACE_TOOLS
                    .iter()
                    .any(|t| t.name == n.as_str() && t.access == ToolAccess::Write)
            })
            .count();
        println!(
            "{mode:?}: {} tools tried, writing tools let through: {writes_let_through}, reached the workspace: {writes_reached}, read-only tools refused: {reads_refused}",
            all.len()
        );
        assert_eq!(writes_let_through, 0);
        assert_eq!(writes_reached, 0);
        assert_eq!(reads_refused, 0);
    }
}

/// The planner sets checks with its tools: a step's through `orca_plan_add_step` and
/// `orca_plan_update_step`, the plan's through `orca_plan_set_checks`; a check that cannot run
/// is refused at submit, naming the step and the check.
#[tokio::test]
async fn the_planner_sets_a_steps_and_the_plans_checks() {
    let ws = Arc::new(CountingWorkspace::default());
    let ctx = context(&ws);
    let planner = Gate::new(
        ctx.clone(),
        &every_tool_agent(Role::Planner),
        CallMode::Planning,
        None,
    );
    let call = |name: &str, arguments: Value| ToolCall {
        id: "c".to_owned(),
        name: name.to_owned(),
        arguments,
    };
    let created = planner
        .call(&call(names::PLAN_CREATE_DRAFT, json!({ "goal": "g" })))
        .await
        .unwrap();
    let plan_id = created["plan_id"].clone();
    for (name, args) in [
        (names::PLAN_SET_ASSUMPTIONS, json!({ "items": ["a"] })),
        (names::PLAN_SET_RISKS, json!({ "items": ["r"] })),
        (names::PLAN_SET_VERIFICATION, json!({ "items": ["v"] })),
        (
            names::PLAN_ADD_STEP,
            json!({ "step": { "id": "build", "agent": "shell", "description": "d",
                    "command": "make", "checks": [{ "command": "make test" }] } }),
        ),
        (
            names::PLAN_ADD_STEP,
            json!({ "step": { "id": "docs", "agent": "shell", "description": "d",
                    "command": "make docs" } }),
        ),
        (
            names::PLAN_UPDATE_STEP,
            json!({ "step_id": "docs", "changes": { "checks": [{ "command": "  " }] } }),
        ),
        (
            names::PLAN_SET_CHECKS,
            json!({ "checks": [{ "command": "make all", "timeout_secs": 60 }] }),
        ),
    ] {
        let mut args = args;
        args["plan_id"] = plan_id.clone();
        planner.call(&call(name, args)).await.unwrap();
    }
    let refused = planner
        .call(&call(names::PLAN_SUBMIT, json!({ "plan_id": plan_id })))
        .await
        .unwrap_err();
    assert!(
        refused
            .message
            .contains("step `docs`: `checks[0]`: `command` is empty"),
        "{}",
        refused.message
    );
    planner
        .call(&call(
            names::PLAN_UPDATE_STEP,
            json!({ "plan_id": plan_id, "step_id": "docs",
                    "changes": { "checks": [{ "command": "make linkcheck" }] } }),
        ))
        .await
        .unwrap();
    planner
        .call(&call(names::PLAN_SUBMIT, json!({ "plan_id": plan_id })))
        .await
        .unwrap();
    let id: orca_core::PlanId = serde_json::from_value(plan_id).unwrap();
    let plan = ctx.planning.plan(id).await.unwrap();
    let c = plan.content();
    let commands =
        |checks: &[orca_core::Check]| checks.iter().map(|c| c.command.clone()).collect::<Vec<_>>();
    assert_eq!(commands(&c.steps[0].checks), ["make test"]);
    assert_eq!(commands(&c.steps[1].checks), ["make linkcheck"]);
    assert_eq!(commands(&c.checks), ["make all"]);
    assert_eq!(c.checks[0].timeout_secs, Some(60));
}

/// Seen with a 1.5B planner: the same step added six times, each under a new id, between
/// calls setting the same goal — no call repeated the one before, so no stall was seen in 15
/// minutes. The same work added again is refused, naming the step that does it and what to do
/// instead; a step that differs in anything but its id is added; and every edit answers where
/// the draft stands (what its submission would still refuse, or that it is ready).
#[tokio::test]
async fn the_same_step_added_again_is_refused_and_each_edit_says_where_the_draft_stands() {
    let ws = Arc::new(CountingWorkspace::default());
    let ctx = context(&ws);
    let planner = Gate::new(
        ctx.clone(),
        &every_tool_agent(Role::Planner),
        CallMode::Planning,
        None,
    );
    let call = |name: &str, arguments: Value| ToolCall {
        id: "c".to_owned(),
        name: name.to_owned(),
        arguments,
    };
    let created = planner
        .call(&call(names::PLAN_CREATE_DRAFT, json!({ "goal": "g" })))
        .await
        .unwrap();
    let plan_id = created["plan_id"].clone();
    let step = |id: &str, description: &str| json!({ "id": id, "agent": "coder", "description": description, "command": "cargo test" });
    let add = |step: Value| {
        call(
            names::PLAN_ADD_STEP,
            json!({ "plan_id": plan_id, "step": step }),
        )
    };
    let first = planner
        .call(&add(step("s1", "add reverse()")))
        .await
        .unwrap();
    assert_eq!(first["steps"], 1);
    // Each edit says where the draft stands: here, what its submission would still refuse.
    let before = first["before_submitting"].as_array().unwrap();
    assert!(
        before
            .iter()
            .any(|p| p.as_str().unwrap().contains("assumptions")),
        "{first}"
    );
    // And which tool fixes the first of them.
    assert_eq!(
        first["next"],
        format!("call `{}`", names::PLAN_SET_ASSUMPTIONS),
        "{first}"
    );
    // Under a new id (the model numbered them on), the same work is the same step.
    let again = planner
        .call(&add(step("s2", "add reverse()")))
        .await
        .unwrap_err();
    assert!(
        again
            .message
            .contains("step `s1` already does exactly this")
            && again.message.contains(names::PLAN_SUBMIT)
            && again.message.contains(names::PLAN_UPDATE_STEP),
        "{}",
        again.message
    );
    // A model step's token budget too small for one turn is refused with the fix.
    let mut tiny = step("s2", "write its test");
    tiny["budget"] = json!({ "max_tokens": 100 });
    let refused = planner.call(&add(tiny)).await.unwrap_err();
    assert!(
        refused.message.contains("`budget.max_tokens` 100")
            && refused.message.contains("omit `budget`"),
        "{}",
        refused.message
    );
    // So are the budget a small planner wrote for a coder step (1 turn, 60 seconds, 10
    // micro-dollars: the step ran out of turns before it could submit); every field too small
    // is named in one refusal (one a turn, a small planner spent a minute on each).
    for (budget, fields) in [
        (
            json!({ "max_tokens": 10_000, "max_turns": 1 }),
            vec!["`budget.max_turns` 1"],
        ),
        (
            json!({ "max_wall_secs": 60 }),
            vec!["`budget.max_wall_secs` 60"],
        ),
        (
            json!({ "max_cost_micro_usd": 10 }),
            vec!["`budget.max_cost_micro_usd` 10"],
        ),
        (
            json!({ "max_tokens": 100, "max_turns": 1, "max_wall_secs": 10, "max_cost_micro_usd": 100 }),
            vec![
                "`budget.max_tokens` 100",
                "`budget.max_turns` 1",
                "`budget.max_wall_secs` 10",
                "`budget.max_cost_micro_usd` 100",
            ],
        ),
    ] {
        let mut small = step("s2", "write its test");
        small["budget"] = budget;
        let refused = planner.call(&add(small)).await.unwrap_err();
        assert!(
            fields.iter().all(|f| refused.message.contains(f))
                && refused.message.contains("omit `budget`"),
            "{}",
            refused.message
        );
    }
    let mut shell_step = step("s9", "list the files");
    shell_step["agent"] = json!("shell");
    shell_step["command"] = json!("ls");
    shell_step["budget"] = json!({ "max_wall_secs": 5 });
    let listed = planner.call(&add(shell_step)).await.unwrap();
    assert_eq!(
        listed["steps"], 2,
        "a shell step's budget is its own: {listed}"
    );
    planner
        .call(&call(
            names::PLAN_REMOVE_STEP,
            json!({ "plan_id": plan_id, "step_id": "s9" }),
        ))
        .await
        .unwrap();
    let other = planner
        .call(&add(step("s2", "write its test")))
        .await
        .unwrap();
    let patched = planner
        .call(&call(
            names::PLAN_UPDATE_STEP,
            json!({ "plan_id": plan_id, "step_id": "s2", "changes": { "budget": { "max_tokens": 500 } } }),
        ))
        .await
        .unwrap_err();
    assert!(
        patched.message.contains("`budget.max_tokens` 500"),
        "{}",
        patched.message
    );
    assert_eq!(other["steps"], 2);
    for (name, items) in [
        (names::PLAN_SET_ASSUMPTIONS, "a"),
        (names::PLAN_SET_RISKS, "r"),
        (names::PLAN_SET_VERIFICATION, "v"),
    ] {
        let state = planner
            .call(&call(name, json!({ "plan_id": plan_id, "items": [items] })))
            .await
            .unwrap();
        assert_eq!(state["steps"], 2, "{state}");
    }
    let state = planner
        .call(&call(
            names::PLAN_SET_GOAL,
            json!({ "plan_id": plan_id, "goal": "g", "summary": "s" }),
        ))
        .await
        .unwrap();
    assert!(
        state["ready"]
            .as_str()
            .is_some_and(|r| r.contains(names::PLAN_SUBMIT)),
        "a complete draft says it can be submitted: {state}"
    );
}

/// The tools each role is offered, with their count: the contract of what a model sees (a
/// small model does better with fewer). With no human attached `orca_ask_user` is not offered.
#[test]
fn the_tools_each_role_is_offered() {
    let ws = Arc::new(CountingWorkspace::default());
    let with_human = context(&ws);
    let without = ToolContext {
        hitl: Arc::new(NoHuman),
        ..with_human.clone()
    };
    // The coder's profile grants every workspace tool; the planner's too (it gets the reads).
    let coder = every_tool_agent(Role::Specialist);
    let planner = every_tool_agent(Role::Planner);
    let mut out = String::new();
    for (who, info, mode) in [
        ("planner, a new request", &planner, CallMode::Planning),
        ("planner, revising a plan", &planner, CallMode::Revising),
        ("coder, a step", &coder, CallMode::Task),
        ("coder, a question", &coder, CallMode::Question),
    ] {
        for (human, ctx) in [("a human attached", &with_human), ("no human", &without)] {
            let gate = Gate::new(ctx.clone(), info, mode, None);
            // `submit_result` is added by the agent loop to every call.
            let names: Vec<&str> = gate.granted().iter().map(String::as_str).collect();
            out.push_str(&format!(
                "{who}, {human}: {} (+ submit_result)\n  {}\n",
                names.len(),
                names.join(", ")
            ));
        }
    }
    println!("{out}");
    insta::assert_snapshot!(out);
}
