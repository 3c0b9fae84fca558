//! The first message of a task: the step, its context, and the project's files.

use orca_core::{TaskRequest, ToolCall, ToolHost};
use serde_json::Value;

/// The first message of a task: the step and its context.
#[must_use]
pub fn task_message(request: &TaskRequest) -> String {
    let step = &request.step;
    let ctx = &request.context;
    let mut m = String::new();
    m.push_str(&format!(
        "# Step `{}` ({} of {}), attempt {}\n\n{}\n",
        step.id,
        ctx.step_index + 1,
        ctx.total_steps,
        request.attempt,
        step.description
    ));
    if let Some(cmd) = &step.command {
        m.push_str(&format!("\nSuggested command: `{cmd}`\n"));
    }
    let list = |m: &mut String, title: &str, items: &[String]| {
        if !items.is_empty() {
            m.push_str(&format!("\n## {title}\n"));
            for i in items {
                m.push_str(&format!("- {i}\n"));
            }
        }
    };
    list(&mut m, "Assumptions", &step.assumptions);
    list(&mut m, "Risks", &step.risks);
    list(&mut m, "How to verify", &step.verification);
    m.push_str(&format!(
        "\n## Plan\nPlan `{}`: {}\n",
        ctx.plan_id, ctx.plan_goal
    ));
    if !ctx.dependencies.is_empty() {
        m.push_str("\n## Earlier steps\n");
        for d in &ctx.dependencies {
            m.push_str(&format!("- `{}` ({}): {}\n", d.step_id, d.agent, d.summary));
            for f in &d.key_findings {
                m.push_str(&format!("  - {f}\n"));
            }
        }
    }
    list(&mut m, "Relevant files", &ctx.relevant_files);
    if !ctx.previous_attempts.is_empty() {
        m.push_str("\n## Earlier attempts of this step\n");
        for a in &ctx.previous_attempts {
            m.push_str(&format!("- attempt {}: {}\n", a.attempt, a.error));
            if let Some(g) = &a.guidance {
                m.push_str(&format!("  - guidance from the human: {g}\n"));
            }
        }
    }
    if ctx.omitted > 0 {
        m.push_str(&format!("\n({} older items were left out.)\n", ctx.omitted));
    }
    m
}

/// Entries of the project's listing put in a task's first message.
const LISTED_FILES: usize = 40;

/// The project's files, for the first message of an agent that may list them: a small model
/// told "fix calc.py" otherwise guesses paths or edits the file it happened to read first.
/// Empty when `list_files` is not offered or fails.
pub(crate) async fn project_files(tools: &dyn ToolHost) -> String {
    if !tools.specs().iter().any(|t| t.name == "list_files") {
        return String::new();
    }
    let call = ToolCall {
        id: orca_llm::backend::generated_call_id(0),
        name: "list_files".to_owned(),
        arguments: serde_json::json!({}),
    };
    let Ok(listing) = tools.call(&call).await else {
        return String::new();
    };
    let files: Vec<&str> = listing["files"]
        .as_array()
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if files.is_empty() {
        return String::new();
    }
    let mut m = String::from("\n## Files in the project\n");
    for f in files.iter().take(LISTED_FILES) {
        m.push_str(&format!("- {f}\n"));
    }
    if files.len() > LISTED_FILES || listing["truncated"] == true {
        m.push_str("- … (more: use `list_files`)\n");
    }
    m
}
