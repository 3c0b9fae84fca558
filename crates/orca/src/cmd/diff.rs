//! `orca exec diff`: what each step changed, from its `step.changes` entries and the trees they
//! name; and the "files changed" lines of `exec show`.
//!
//! A diff is what a step wrote: hostile text. Control characters are shown as their Unicode
//! pictures (an escape sequence in a file never reaches the terminal); colour is orca's own,
//! added afterwards, and only on a terminal.

use std::sync::Arc;

use orca_core::{ExecutionId, RecordedChanges, StepId};
use orca_services::{NoHuman, Orca};
use serde_json::{Value, json};

use crate::app::{App, out, out_json, out_raw};
use crate::exit::{CliError, Exit};
use crate::term::say;

/// `text` with every control character but newline and tab replaced by a visible picture.
pub(crate) fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            '\u{0}'..='\u{1f}' => char::from_u32(0x2400 + u32::from(c)).unwrap_or('\u{fffd}'),
            '\u{7f}' => '\u{2421}',
            '\u{80}'..='\u{9f}' => '\u{fffd}',
            c => c,
        })
        .collect()
}

/// A sanitized patch with colours (removed again by the output when stdout is no terminal).
fn colour(patch: &str) -> String {
    let mut out = String::with_capacity(patch.len() + patch.len() / 4);
    for line in patch.lines() {
        let code = if line.starts_with("diff --git")
            || line.starts_with("index ")
            || line.starts_with("--- ")
            || line.starts_with("+++ ")
        {
            Some("1")
        } else if line.starts_with("@@") {
            Some("36")
        } else if line.starts_with('+') {
            Some("32")
        } else if line.starts_with('-') {
            Some("31")
        } else {
            None
        };
        match code {
            Some(code) => out.push_str(&format!("\x1b[{code}m{line}\x1b[0m\n")),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The heading of one attempt's changes.
fn heading(r: &RecordedChanges) -> String {
    let (added, removed) = r.totals();
    let files = r.files.len() + usize::try_from(r.more_files).unwrap_or(usize::MAX);
    let place = if r.worktree {
        ", in its worktree"
    } else if r.shared {
        ", in place beside other steps: their changes may be here too"
    } else {
        ""
    };
    let lines = if r.before.is_some() {
        format!(", +{added} -{removed}")
    } else {
        String::new()
    };
    format!(
        "step {} (attempt {}{place}): {files} file{} changed{lines}",
        r.step,
        r.attempt,
        if files == 1 { "" } else { "s" }
    )
}

/// The changed files of one attempt, one line each (`M path  +a -r`).
pub(crate) fn stat_lines(r: &RecordedChanges, indent: &str) -> Vec<String> {
    let mut lines: Vec<String> = r
        .files
        .iter()
        .map(|f| {
            let counts = match (f.added, f.removed) {
                (Some(a), Some(d)) => format!("  +{a} -{d}"),
                _ if r.before.is_some() => "  binary".to_owned(),
                _ => String::new(),
            };
            format!("{indent}{} {}{counts}", f.change.mark(), sanitize(&f.path))
        })
        .collect();
    if r.more_files > 0 {
        lines.push(format!("{indent}… and {} more", r.more_files));
    }
    lines
}

/// `exec show`'s lines: the files the last attempt of each step changed.
pub(crate) async fn show_lines(orca: &Orca, id: ExecutionId) -> (Vec<String>, Value) {
    let Ok(recorded) = orca_services::changes::recorded(orca.executions(), id).await else {
        return (Vec::new(), Value::Null);
    };
    let Ok(snap) = orca.executions().get(id).await else {
        return (Vec::new(), Value::Null);
    };
    let order: Vec<&StepId> = snap.tasks.iter().map(|t| t.value.step_id()).collect();
    let latest = orca_services::changes::latest(&recorded, &order);
    if latest.is_empty() {
        return (Vec::new(), Value::Null);
    }
    let mut lines = vec!["files changed (the last attempt of each step):".to_owned()];
    for r in &latest {
        lines.push(format!("  {}", heading(r)));
        lines.extend(stat_lines(r, "    "));
    }
    let json = Value::Array(
        latest
            .iter()
            .map(|r| orca_services::changes::to_json(r))
            .collect(),
    );
    (lines, json)
}

/// `orca exec diff EXEC [STEP] [--stat]`.
pub(crate) async fn diff(
    app: &App,
    exec: &str,
    step: Option<&str>,
    stat: bool,
) -> Result<Exit, CliError> {
    let orca = app.orca(Arc::new(NoHuman));
    let id = orca.executions().resolve(exec).await?;
    let snap = orca.executions().get(id).await?;
    let step = match step {
        Some(s) => {
            let step = StepId::parse(s).map_err(|e| CliError::bad_input(format!("{s}: {e}")))?;
            if !snap.tasks.iter().any(|t| t.value.step_id() == &step) {
                return Err(CliError::bad_input(format!(
                    "execution {id} has no step `{step}`"
                )));
            }
            Some(step)
        }
        None => None,
    };
    let recorded = orca_services::changes::recorded(orca.executions(), id).await?;
    let order: Vec<&StepId> = snap.tasks.iter().map(|t| t.value.step_id()).collect();
    let latest: Vec<&RecordedChanges> = orca_services::changes::latest(&recorded, &order)
        .into_iter()
        .filter(|r| step.as_ref().is_none_or(|s| &r.step == s))
        .collect();
    if latest.iter().any(|r| r.trees().is_none()) {
        say(&format!(
            "{} is not in a git repository: orca recorded only the list of files each step changed",
            app.root().display()
        ));
    }
    let changes = crate::isolation::changes(app).await;
    let mut items = Vec::new();
    let mut text = Vec::new();
    for r in &latest {
        let patch = match (stat, r.trees()) {
            (false, Some((before, after))) if before != after => Some(
                changes
                    .patch(before, after)
                    .await
                    .map_err(|e| CliError::bad_input(format!("step `{}`: {e}", r.step)))?,
            ),
            _ => None,
        };
        if app.json {
            let mut v = orca_services::changes::to_json(r);
            if let Some(p) = &patch {
                v["patch"] = json!(p);
            }
            items.push(v);
            continue;
        }
        if stat {
            text.push(heading(r));
            text.extend(stat_lines(r, "  "));
            continue;
        }
        text.push(format!("# {}", heading(r)));
        match patch {
            Some(p) => text.push(colour(&sanitize(&p))),
            None => text.extend(stat_lines(r, "#   ")),
        }
    }
    if app.json {
        out_json(&json!({ "execution_id": id, "steps": items }));
    } else if latest.is_empty() {
        out(&format!(
            "no changes recorded for execution {id}{}",
            step.map(|s| format!(", step {s}")).unwrap_or_default()
        ));
    } else {
        out_raw(&text.join("\n"));
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_pictures() {
        assert_eq!(sanitize("a\x1b[31mb\tc\r\n"), "a\u{241b}[31mb\tc\u{240d}\n");
        assert_eq!(sanitize("\u{9b}x\u{7f}"), "\u{fffd}x\u{2421}");
    }
}
