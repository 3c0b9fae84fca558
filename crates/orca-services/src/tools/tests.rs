//! Unit tests of the grants and the table's schemas.

use super::*;
use orca_core::{AgentId, AgentInfo, Role};

fn info(role: Role, tools: &[&str]) -> AgentInfo {
    AgentInfo {
        id: AgentId::parse("x").unwrap(),
        role,
        description: String::new(),
        backend: "test".to_owned(),
        model: None,
        workspace_tools: tools.iter().map(|t| (*t).to_owned()).collect(),
    }
}

#[track_caller]
fn check(role: Role, profile: &[&str], mode: CallMode, expected: &[&str]) {
    let got: Vec<String> = grants(&info(role, profile), mode).into_iter().collect();
    let mut expected: Vec<String> = expected.iter().map(|s| (*s).to_owned()).collect();
    expected.sort();
    assert_eq!(got, expected);
}

#[test]
fn role_grants() {
    use names::*;
    let all = [
        "read_file",
        "write_file",
        "edit_file",
        "run_command",
        "list_files",
        "search_text",
    ];
    // The relay only forwards.
    check(Role::Relay, &all, CallMode::Relay, &[INVOKE]);
    // The planner researches read-only and builds plans; it never gets write tools. A new
    // request reads no other plan or execution.
    check(
        Role::Planner,
        &all,
        CallMode::Planning,
        &[
            ASK_AGENT,
            ASK_USER,
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
            "list_files",
            "read_file",
            "search_text",
        ],
    );
    check(
        Role::Planner,
        &all,
        CallMode::Revising,
        &[
            ASK_AGENT,
            ASK_USER,
            PLANS_LIST,
            PLANS_GET,
            EXECUTIONS_LIST,
            EXECUTION_GET,
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
            "list_files",
            "read_file",
            "search_text",
        ],
    );
    // A specialist doing a task gets its profile's tools.
    check(
        Role::Specialist,
        &["read_file", "write_file"],
        CallMode::Task,
        &[ASK_USER, "read_file", "write_file"],
    );
    // A question is read-only, even for the coder.
    check(
        Role::Specialist,
        &["read_file", "write_file", "edit_file", "run_command"],
        CallMode::Question,
        &["read_file"],
    );
}

#[test]
fn no_tool_approves_or_starts_anything() {
    for spec in definitions() {
        for word in ["approve", "reject", "execute", "run", "start"] {
            assert!(!spec.name.contains(word), "{} must not exist", spec.name);
        }
    }
}

#[test]
fn every_schema_is_an_object_schema() {
    for spec in definitions() {
        assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
        assert!(spec.parameters["properties"].is_object(), "{}", spec.name);
    }
}
