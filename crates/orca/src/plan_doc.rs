//! Plan documents outside the store: `orca plan validate FILE` (every problem, nothing written,
//! no project needed) and the step graph drawn for other tools (`plan show --format
//! mermaid|dot`).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::Path;

use orca_core::{AgentId, PlanContent, graph};
use serde_json::json;

use crate::exit::{CliError, Exit};

/// The largest plan document read (a plan is a few KiB; this bounds `/dev/zero`).
pub(crate) const MAX_PLAN_BYTES: u64 = 4 * 1024 * 1024;

/// Reads a plan document: a regular file (a FIFO or a device would block or never end), at most
/// [`MAX_PLAN_BYTES`], UTF-8. Errors name the file.
pub(crate) fn read_plan_file(path: &Path) -> Result<String, CliError> {
    let bad = |what: String| CliError::bad_input(format!("{}: {what}", path.display()));
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(bad("not a regular file".to_owned()));
    }
    let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_PLAN_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(e.to_string()))?;
    if bytes.len() as u64 > MAX_PLAN_BYTES {
        return Err(bad(format!(
            "larger than {} MiB; a plan document is a few KiB",
            MAX_PLAN_BYTES / 1024 / 1024
        )));
    }
    String::from_utf8(bytes).map_err(|_| bad("not UTF-8 text".to_owned()))
}

/// Every unknown and every missing field of a plan document, at the top and in each step, with
/// the known field a typo away — where the reader stops at the first. Empty when the text is
/// not a JSON object (the reader's error says why) or no field is wrong.
pub(crate) fn field_problems(text: &str) -> Vec<String> {
    let Ok(serde_json::Value::Object(doc)) = serde_json::from_str::<serde_json::Value>(text) else {
        return Vec::new();
    };
    let schema = PlanContent::json_schema();
    let mut problems = fields_of(&doc, &schema, "");
    if let Some(steps) = doc.get("steps").and_then(|s| s.as_array()) {
        let step_schema = &schema["$defs"]["Step"];
        for (i, step) in steps.iter().enumerate() {
            let Some(step) = step.as_object() else {
                continue;
            };
            let name = step
                .get("id")
                .and_then(|id| id.as_str())
                .map_or_else(|| format!("steps[{i}]"), |id| format!("step `{id}`"));
            problems.extend(fields_of(step, step_schema, &format!("{name}: ")));
        }
    }
    problems
}

/// The document read as if its unknown fields (at the top and in steps) were not there.
fn without_unknown_fields(text: &str) -> Option<PlanContent> {
    let mut doc: serde_json::Value = serde_json::from_str(text).ok()?;
    let schema = PlanContent::json_schema();
    let keep = |object: &mut serde_json::Map<String, serde_json::Value>,
                schema: &serde_json::Value| {
        if let Some(known) = schema["properties"].as_object() {
            object.retain(|k, _| known.contains_key(k));
        }
    };
    let object = doc.as_object_mut()?;
    keep(object, &schema);
    if let Some(steps) = object.get_mut("steps").and_then(|s| s.as_array_mut()) {
        for step in steps.iter_mut().filter_map(|s| s.as_object_mut()) {
            keep(step, &schema["$defs"]["Step"]);
        }
    }
    PlanContent::from_json(&doc.to_string()).ok()
}

/// The unknown and missing fields of `object` against the object `schema`.
fn fields_of(
    object: &serde_json::Map<String, serde_json::Value>,
    schema: &serde_json::Value,
    prefix: &str,
) -> Vec<String> {
    let Some(known) = schema["properties"].as_object() else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    for field in object.keys().filter(|k| !known.contains_key(*k)) {
        let hint = orca_core::suggest::closest(field, known.keys().map(String::as_str))
            .map_or_else(String::new, |k| format!(" (did you mean `{k}`?)"));
        problems.push(format!("{prefix}unknown field `{field}`{hint}"));
    }
    for field in schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str())
        .filter(|f| !object.contains_key(*f))
    {
        problems.push(format!("{prefix}missing field `{field}`"));
    }
    problems
}

/// Reads a plan document's content; an error lists every unknown and missing field (else the
/// reader's own error), naming the file.
pub(crate) fn content_of(file: &Path, text: &str) -> Result<PlanContent, CliError> {
    PlanContent::from_json(text).map_err(|e| {
        let fields = field_problems(text);
        let why = if fields.is_empty() {
            e.to_string()
        } else {
            fields.join("; ")
        };
        CliError::bad_input(format!("{}: {why}", file.display()))
    })
}

/// `orca plan validate FILE`: reads and validates a plan document against `agents`; prints
/// every problem (exit 2) or that it is valid (exit 0). Writes nothing.
pub(crate) fn validate(
    file: &Path,
    agents: &BTreeSet<AgentId>,
    json: bool,
) -> Result<Exit, CliError> {
    let text = read_plan_file(file)?;
    let mut fields = field_problems(&text);
    if !fields.is_empty() {
        // What else is wrong, read without the unknown fields (when nothing is missing).
        let steps = without_unknown_fields(&text).map(|content| {
            fields.extend(content.validate(agents).iter().map(ToString::to_string));
            content.steps.len()
        });
        return Ok(report(file, json, steps, &fields));
    }
    let content = PlanContent::from_json(&text)
        .map_err(|e| CliError::bad_input(format!("{}: {e}", file.display())))?;
    let problems: Vec<String> = content
        .validate(agents)
        .iter()
        .map(ToString::to_string)
        .collect();
    Ok(report(file, json, Some(content.steps.len()), &problems))
}

/// Prints what `plan validate` found; its exit code.
fn report(file: &Path, json: bool, steps: Option<usize>, problems: &[String]) -> Exit {
    if json {
        crate::app::out(
            &serde_json::to_string_pretty(&json!({
                "format_version": 1,
                "file": file,
                "valid": problems.is_empty(),
                "steps": steps,
                "problems": problems,
            }))
            .unwrap_or_default(),
        );
    } else if problems.is_empty() {
        crate::app::out(&format!(
            "{}: valid ({})",
            file.display(),
            orca_core::plural::count(steps.unwrap_or(0), "step", "steps")
        ));
    } else {
        let lines: Vec<String> = problems
            .iter()
            .map(|p| format!("{}: {p}", file.display()))
            .collect();
        crate::app::out(&lines.join("\n"));
    }
    if problems.is_empty() {
        Exit::Ok
    } else {
        Exit::BadInput
    }
}

/// The step graph as a Mermaid flowchart: one node per step (id and agent), an edge per
/// dependency, locks as a note on the node.
pub(crate) fn mermaid(content: &PlanContent) -> String {
    let steps = &content.steps;
    let mut out = String::from("flowchart TD\n");
    for (i, s) in steps.iter().enumerate() {
        let locks = if s.locks.is_empty() {
            String::new()
        } else {
            format!("<br/>🔒 {}", s.locks.join(", "))
        };
        let _ = writeln!(
            out,
            "  s{i}[\"{}<br/><i>{}</i>{}\"]",
            escape_mermaid(s.id.as_str()),
            escape_mermaid(s.agent.as_str()),
            escape_mermaid(&locks)
        );
    }
    for (i, deps) in graph::dependency_indices(steps).iter().enumerate() {
        for d in deps {
            let _ = writeln!(out, "  s{d} --> s{i}");
        }
    }
    out
}

fn escape_mermaid(text: &str) -> String {
    text.replace('"', "#quot;")
}

/// The step graph in Graphviz DOT.
pub(crate) fn dot(content: &PlanContent) -> String {
    let steps = &content.steps;
    let mut out = String::from("digraph plan {\n  rankdir=TB;\n  node [shape=box];\n");
    for (i, s) in steps.iter().enumerate() {
        let mut label = format!("{}\\n{}", s.id, s.agent);
        if !s.locks.is_empty() {
            let _ = write!(label, "\\nlocks: {}", s.locks.join(", "));
        }
        let _ = writeln!(out, "  s{i} [label=\"{}\"];", label.replace('"', "\\\""));
    }
    for (i, deps) in graph::dependency_indices(steps).iter().enumerate() {
        for d in deps {
            let _ = writeln!(out, "  s{d} -> s{i};");
        }
    }
    out.push_str("}\n");
    out
}
