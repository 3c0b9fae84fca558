//! `orca eval compare A B`: per task, the trials that flipped and the change in each figure,
//! so a prompt or model change can be judged on the same suite.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::json;

use super::report::{Report, Summary, secs, usd};
use crate::app::{out, out_json};
use crate::exit::{CliError, Exit};

fn report_at(path: &Path) -> Result<Report, CliError> {
    let file = if path.is_dir() {
        path.join("report.json")
    } else {
        path.to_path_buf()
    };
    Report::read(&file)
}

/// `b - a` with its sign.
fn delta(a: u64, b: u64) -> i128 {
    i128::from(b) - i128::from(a)
}

fn signed(d: i128) -> String {
    if d > 0 {
        format!("+{d}")
    } else {
        d.to_string()
    }
}

fn signed_ms(d: i128) -> String {
    let sign = if d < 0 { "-" } else { "+" };
    format!(
        "{sign}{}",
        secs(u64::try_from(d.unsigned_abs()).unwrap_or(u64::MAX))
    )
}

fn signed_usd(d: i128) -> String {
    let sign = if d < 0 { "-" } else { "+" };
    format!(
        "{sign}{}",
        usd(u64::try_from(d.unsigned_abs()).unwrap_or(u64::MAX))
    )
}

fn points(a: f64, b: f64) -> String {
    format!("{:+.1}", (b - a) * 100.0)
}

pub(crate) fn compare(a: &Path, b: &Path, json_out: bool) -> Result<Exit, CliError> {
    let (ra, rb) = (report_at(a)?, report_at(b)?);
    if ra.suite.name != rb.suite.name {
        crate::term::say(&format!(
            "note: the reports measured different suites ({} and {})",
            ra.suite.name, rb.suite.name
        ));
    } else if ra.suite.digest != rb.suite.digest {
        crate::term::say("note: the suite changed between the reports (another digest)");
    }
    let tasks: BTreeSet<&String> = ra.tasks.keys().chain(rb.tasks.keys()).collect();
    let mut rows = Vec::new();
    let mut items = Vec::new();
    for task in tasks {
        let (sa, sb) = (ra.tasks.get(task), rb.tasks.get(task));
        let passed = |r: &Report, n: u32| {
            r.trials
                .iter()
                .find(|t| &t.task == task && t.trial == n)
                .map(|t| t.figures.passed)
        };
        let most = ra.k.max(rb.k);
        let (mut fixed, mut broke) = (Vec::new(), Vec::new());
        for n in 1..=most {
            match (passed(&ra, n), passed(&rb, n)) {
                (Some(false), Some(true)) => fixed.push(n),
                (Some(true), Some(false)) => broke.push(n),
                _ => {}
            }
        }
        let zero = Summary::default();
        let (sa, sb) = (sa.unwrap_or(&zero), sb.unwrap_or(&zero));
        let tokens = delta(
            sa.input_tokens + sa.output_tokens,
            sb.input_tokens + sb.output_tokens,
        );
        let cost = delta(sa.cost_micro_usd, sb.cost_micro_usd);
        let time = delta(sa.wall_ms, sb.wall_ms);
        let list = |v: &[u32]| {
            v.iter()
                .map(|n| format!("#{n}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let flips = match (fixed.is_empty(), broke.is_empty()) {
            (true, true) => "-".to_owned(),
            (false, true) => format!("fixed {}", list(&fixed)),
            (true, false) => format!("broke {}", list(&broke)),
            (false, false) => format!("fixed {}, broke {}", list(&fixed), list(&broke)),
        };
        rows.push(vec![
            task.clone(),
            format!("{}/{} → {}/{}", sa.passed, sa.trials, sb.passed, sb.trials),
            points(sa.pass_at_1, sb.pass_at_1),
            points(sa.pass_hat_k, sb.pass_hat_k),
            signed(tokens),
            signed_usd(cost),
            signed_ms(time),
            flips,
        ]);
        items.push(json!({
            "task": task, "fixed": fixed, "broke": broke,
            "pass_at_1": [sa.pass_at_1, sb.pass_at_1],
            "pass_hat_k": [sa.pass_hat_k, sb.pass_hat_k],
            "tokens_delta": tokens, "cost_micro_usd_delta": cost, "wall_ms_delta": time,
        }));
    }
    let (ta, tb) = (&ra.total, &rb.total);
    if json_out {
        out_json(&json!({
            "tasks": items,
            "total": {
                "pass_at_1": [ta.pass_at_1, tb.pass_at_1],
                "pass_hat_k": [ta.pass_hat_k, tb.pass_hat_k],
                "tokens_delta": delta(ta.input_tokens + ta.output_tokens, tb.input_tokens + tb.output_tokens),
                "cost_micro_usd_delta": delta(ta.cost_micro_usd, tb.cost_micro_usd),
                "wall_ms_delta": delta(ta.wall_ms, tb.wall_ms),
            },
        }));
        return Ok(Exit::Ok);
    }
    rows.push(vec![
        "total".to_owned(),
        format!("{}/{} → {}/{}", ta.passed, ta.trials, tb.passed, tb.trials),
        points(ta.pass_at_1, tb.pass_at_1),
        points(ta.pass_hat_k, tb.pass_hat_k),
        signed(delta(
            ta.input_tokens + ta.output_tokens,
            tb.input_tokens + tb.output_tokens,
        )),
        signed_usd(delta(ta.cost_micro_usd, tb.cost_micro_usd)),
        signed_ms(delta(ta.wall_ms, tb.wall_ms)),
        String::new(),
    ]);
    out(&crate::render::table(
        &[
            "TASK",
            "PASSED",
            "PASS@1 Δpt",
            "PASS^K Δpt",
            "TOKENS Δ",
            "COST Δ",
            "TIME Δ",
            "FLIPS",
        ],
        &rows,
    ));
    Ok(Exit::Ok)
}
