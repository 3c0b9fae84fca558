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

/// `orca plan validate FILE`: reads and validates a plan document against `agents`; prints
/// every problem (exit 2) or that it is valid (exit 0). Writes nothing.
pub(crate) fn validate(
    file: &Path,
    agents: &BTreeSet<AgentId>,
    json: bool,
) -> Result<Exit, CliError> {
    let text = read_plan_file(file)?;
    let content = PlanContent::from_json(&text)
        .map_err(|e| CliError::bad_input(format!("{}: {e}", file.display())))?;
    let problems: Vec<String> = content
        .validate(agents)
        .iter()
        .map(ToString::to_string)
        .collect();
    if json {
        crate::app::out(
            &serde_json::to_string_pretty(&json!({
                "format_version": 1,
                "file": file,
                "valid": problems.is_empty(),
                "steps": content.steps.len(),
                "problems": problems,
            }))
            .unwrap_or_default(),
        );
    } else if problems.is_empty() {
        crate::app::out(&format!(
            "{}: valid ({})",
            file.display(),
            orca_core::plural::count(content.steps.len(), "step", "steps")
        ));
    } else {
        let lines: Vec<String> = problems
            .iter()
            .map(|p| format!("{}: {p}", file.display()))
            .collect();
        crate::app::out(&lines.join("\n"));
    }
    Ok(if problems.is_empty() {
        Exit::Ok
    } else {
        Exit::BadInput
    })
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
