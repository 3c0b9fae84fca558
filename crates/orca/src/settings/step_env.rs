//! What each step of a plan will receive in its environment, for `plan show`, `ask` and
//! `run`: names, never values.

use orca_core::Plan;
use orca_os::step_env::{self, EnvPolicy, NamedVar};
use serde_json::{Value, json};

/// What one step will receive, for `plan show`: names, never values.
pub(crate) fn step_env_json(plan: &Plan, policy: &EnvPolicy) -> Value {
    let steps: Vec<Value> = plan
        .content()
        .steps
        .iter()
        .map(|s| {
            json!({
                "step_id": s.id,
                "base": step_env::BASE_DESCRIPTION,
                "named": policy.named(&s.agent, &s.env),
            })
        })
        .collect();
    Value::Array(steps)
}

pub(crate) fn named_text(named: &[NamedVar]) -> String {
    named
        .iter()
        .map(|v| {
            format!(
                "{} ({}{})",
                v.name,
                v.from,
                if v.set { "" } else { ", not set" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `plan show` section listing what each step receives.
pub(crate) fn step_env_text(plan: &Plan, policy: &EnvPolicy) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "Environment (names only; every step gets {}):\n",
        step_env::BASE_DESCRIPTION
    );
    for s in &plan.content().steps {
        let named = policy.named(&s.agent, &s.env);
        let _ = writeln!(
            out,
            "  {}: {}",
            s.id,
            if named.is_empty() {
                "nothing more".to_owned()
            } else {
                format!("+ {}", named_text(&named))
            }
        );
    }
    out
}
