//! A table of malformed plan documents and the exact problems each must report.
//!
//! Every case is a JSON object merged over a valid base plan (`null` removes a field), so a
//! line states only what is wrong with it.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;

use orca_core::{AgentId, PlanContent};
use serde_json::{Value, json};

fn base() -> Value {
    json!({
        "goal": "ship it",
        "steps": [{ "id": "a", "agent": "coder", "description": "do a" }],
        "assumptions": ["a shell"],
        "risks": ["none"],
        "verification": ["tests pass"],
    })
}

fn known_agents() -> BTreeSet<AgentId> {
    ["shell", "coder"]
        .into_iter()
        .map(|a| AgentId::parse(a).unwrap())
        .collect()
}

/// The document: `patch` merged over the base plan, top-level keys replaced.
fn document(patch: &str) -> String {
    let patch: Value = serde_json::from_str(patch).unwrap();
    let mut doc = base();
    for (key, value) in patch.as_object().unwrap() {
        if value.is_null() {
            doc.as_object_mut().unwrap().remove(key);
        } else {
            doc[key] = value.clone();
        }
    }
    doc.to_string()
}

/// Reads the patched document and checks that validation reports exactly `expected`
/// (each problem's message, in the order reported).
#[track_caller]
fn check(patch: &str, expected: &[&str]) {
    let text = document(patch);
    let content = PlanContent::from_json(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
    let problems: Vec<String> = content
        .validate(&known_agents())
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(problems, expected, "{text}");
}

/// Checks that reading the patched document fails with exactly `message`.
#[track_caller]
fn check_json(patch: &str, message: &str) {
    let text = document(patch);
    let err = PlanContent::from_json(&text).unwrap_err();
    assert_eq!(err.to_string(), message, "{text}");
}

const A: &str = r#"{ "id": "a", "agent": "coder", "description": "do a" }"#;

fn steps(list: &[&str]) -> String {
    format!(r#"{{ "steps": [{}] }}"#, list.join(","))
}

#[test]
fn the_base_plan_is_valid() {
    check("{}", &[]);
    check(
        &steps(&[
            A,
            r#"{ "id": "b", "agent": "shell", "description": "b", "command": "true", "locks": ["db"] }"#,
        ]),
        &[],
    );
}

#[test]
fn plan_level_problems() {
    check(r#"{ "goal": "" }"#, &["`goal` is empty"]);
    check(r#"{ "goal": " \n " }"#, &["`goal` is empty"]);
    check(
        r#"{ "steps": [] }"#,
        &["`steps` is empty: a plan needs at least one step"],
    );
    check(
        r#"{ "assumptions": [] }"#,
        &["`assumptions` is empty: list at least one"],
    );
    check(
        r#"{ "risks": [] }"#,
        &["`risks` is empty: list at least one"],
    );
    check(
        r#"{ "verification": [] }"#,
        &["`verification` is empty: list at least one"],
    );
    check(
        r#"{ "verification": ["", "  "] }"#,
        &["`verification` is empty: list at least one"],
    );
    check(
        r#"{ "assumptions": [], "risks": [], "verification": [] }"#,
        &[
            "`assumptions` is empty: list at least one",
            "`risks` is empty: list at least one",
            "`verification` is empty: list at least one",
        ],
    );
}

#[test]
fn step_level_problems() {
    check(&steps(&[A, A]), &["step id `a` is used more than once"]);
    check(&steps(&[A, A, A]), &["step id `a` is used more than once"]);
    check(
        &steps(&[r#"{ "id": "a", "agent": "coder", "description": " " }"#]),
        &["step `a`: `description` is empty"],
    );
    check(
        &steps(&[
            A,
            r#"{ "id": "b", "agent": "coder", "description": "b", "depends_on": ["zz"] }"#,
        ]),
        &["step `b`: `depends_on` names `zz`, which is not a step of this plan"],
    );
    check(
        &steps(&[r#"{ "id": "a", "agent": "wizard", "description": "a" }"#]),
        &["step `a`: unknown agent `wizard`"],
    );
    check(
        &steps(&[r#"{ "id": "a", "agent": "shell", "description": "a" }"#]),
        &["step `a`: the `shell` agent needs a `command`"],
    );
    check(
        &steps(&[r#"{ "id": "a", "agent": "shell", "description": "a", "command": "  " }"#]),
        &["step `a`: the `shell` agent needs a `command`"],
    );
    check(
        &steps(&[
            r#"{ "id": "a", "agent": "shell", "description": "a", "command": "echo a\u0000b" }"#,
        ]),
        &["step `a`: `command` holds a NUL byte, which no shell can run"],
    );
    check(
        &steps(&[
            r#"{ "id": "a", "agent": "coder", "description": "a", "locks": ["", " db", "ok"] }"#,
        ]),
        &[
            r#"step `a`: lock "" must be non-empty without surrounding whitespace"#,
            r#"step `a`: lock " db" must be non-empty without surrounding whitespace"#,
        ],
    );
    // Declared writes: two roots writing one path, a root writing `..`.
    check(
        &steps(&[
            r#"{ "id": "a", "agent": "coder", "description": "a", "depends_on": [], "writes": ["src/api/**"] }"#,
            r#"{ "id": "b", "agent": "coder", "description": "b", "depends_on": [], "writes": ["src/api/mod.rs", "../x"] }"#,
            r#"{ "id": "c", "agent": "coder", "description": "c", "depends_on": ["a", "b"], "writes": ["src/**"] }"#,
        ]),
        &[
            r#"step `b`: `writes` pattern "../x": it has an empty, `.` or `..` segment"#,
            "steps `a` and `b` can run at the same time and both write `src/api/**` and \
             `src/api/mod.rs`: make one depend on the other, or give both the same lock",
        ],
    );
    check(
        &steps(&[
            r#"{ "id": "a", "agent": "coder", "description": "a", "max_attempts": 0, "timeout_secs": 0 }"#,
        ]),
        &[
            "step `a`: `max_attempts` must be at least 1",
            "step `a`: `timeout_secs` must be at least 1",
        ],
    );
    check(
        &steps(&[
            r#"{ "id": "a", "agent": "coder", "description": "a", "budget": { "max_tokens": 0, "max_wall_secs": 0 } }"#,
        ]),
        &[
            "step `a`: `budget.max_tokens` must be at least 1",
            "step `a`: `budget.max_wall_secs` must be at least 1",
        ],
    );
}

#[test]
fn cycles_name_their_steps() {
    let step = |id: &str, deps: &str| {
        format!(r#"{{ "id": "{id}", "agent": "coder", "description": "x", "depends_on": {deps} }}"#)
    };
    check(
        &steps(&[&step("a", r#"["a"]"#)]),
        &["the dependencies form a cycle: a → a"],
    );
    check(
        &steps(&[&step("a", r#"["b"]"#), &step("b", r#"["a"]"#)]),
        &["the dependencies form a cycle: a → b → a"],
    );
    check(
        &steps(&[
            &step("a", r#"["c"]"#),
            &step("b", r#"["a"]"#),
            &step("c", r#"["b"]"#),
            &step("d", r#"["c"]"#),
        ]),
        &["the dependencies form a cycle: a → b → c → a"],
    );
    // The default "after the previous step" closes a cycle too.
    check(
        &steps(&[
            &step("a", r#"["b"]"#),
            r#"{ "id": "b", "agent": "coder", "description": "x" }"#,
        ]),
        &["the dependencies form a cycle: a → b → a"],
    );
    // Two separate cycles are reported separately, in plan order.
    check(
        &steps(&[
            &step("a", r#"["b"]"#),
            &step("b", r#"["a"]"#),
            &step("c", r#"["c"]"#),
            &step("d", "[]"),
        ]),
        &[
            "the dependencies form a cycle: a → b → a",
            "the dependencies form a cycle: c → c",
        ],
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    check(
        r#"{
            "goal": "",
            "verification": [],
            "steps": [
                { "id": "a", "agent": "shell", "description": "a", "depends_on": ["a", "ghost"] },
                { "id": "b", "agent": "wizard", "description": "", "max_attempts": 0 },
                { "id": "a", "agent": "coder", "description": "again", "locks": [""] }
            ]
        }"#,
        &[
            "`goal` is empty",
            "`verification` is empty: list at least one",
            "step id `a` is used more than once",
            "step `a`: the `shell` agent needs a `command`",
            "step `a`: `depends_on` names `ghost`, which is not a step of this plan",
            "step `b`: `description` is empty",
            "step `b`: unknown agent `wizard`",
            "step `b`: `max_attempts` must be at least 1",
            r#"step `a`: lock "" must be non-empty without surrounding whitespace"#,
            "the dependencies form a cycle: a → a",
        ],
    );
}

#[test]
fn json_level_errors_name_the_field() {
    check_json(
        r#"{ "owner": "me" }"#,
        "unknown field `owner`, expected one of `goal`, `summary`, `steps`, `assumptions`, `risks`, `verification`, `checks`, `isolation`, `budget` at line 1 column 156",
    );
    check_json(
        &steps(&[r#"{ "id": "a", "agent": "coder", "description": "a", "retries": 3 }"#]),
        "unknown field `retries`, expected one of `id`, `agent`, `description`, `command`, `depends_on`, `locks`, `writes`, `assumptions`, `risks`, `verification`, `checks`, `max_attempts`, `timeout_secs`, `env`, `isolation`, `budget` at line 1 column 80",
    );
    check_json(
        &steps(&[r#"{ "id": "../x", "agent": "coder", "description": "a" }"#]),
        "invalid step id `../x`: it must start with a lowercase letter or a digit at line 1 column 39",
    );
    check_json(
        &steps(&[r#"{ "id": "a", "agent": "Coder", "description": "a" }"#]),
        "invalid agent id `Coder`: it must start with a lowercase letter or a digit at line 1 column 52",
    );
    check_json(
        &steps(&[r#"{ "id": "a", "agent": "coder", "description": "a", "depends_on": ["a/b"] }"#]),
        "invalid step id `a/b`: it may only hold lowercase letters, digits, '_' and '-' at line 1 column 91",
    );
    check_json(
        r#"{ "goal": 5 }"#,
        "invalid type: integer `5`, expected a string at line 1 column 9",
    );
    check_json(
        r#"{ "steps": {} }"#,
        "invalid type: map, expected a sequence at line 1 column 26",
    );
    check_json(
        r#"{ "goal": null }"#,
        "missing field `goal` at line 1 column 132",
    );
    check_json(
        &steps(&[r#"{ "id": "a", "agent": "coder", "description": "a", "max_attempts": -1 }"#]),
        "invalid value: integer `-1`, expected u32 at line 1 column 88",
    );
}

#[test]
fn text_that_is_not_json_is_refused() {
    let err = PlanContent::from_json("{ goal: 1 }").unwrap_err();
    assert_eq!(err.to_string(), "key must be a string at line 1 column 3");
}
