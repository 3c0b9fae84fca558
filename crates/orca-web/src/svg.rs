//! The step graph as SVG, drawn on the server: layers top to bottom (a step sits one layer
//! below its deepest dependency), edges as curves. No script, no external resources.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use orca_core::{ExecutionId, PlanContent, StepId, graph};

use crate::html::esc;

const W: usize = 168;
const H: usize = 44;
/// The height a node gets when some step holds locks (a third line names them).
const H_LOCKS: usize = 60;
const GX: usize = 24;
const GY: usize = 46;
const PAD: usize = 12;

fn fill(status: Option<&str>) -> (&'static str, &'static str) {
    match status {
        Some("completed") => ("#e6f4ea", "#1a7f37"),
        Some("running") => ("#fff5d6", "#9a6700"),
        Some("failed") => ("#fdeeee", "#c62828"),
        Some("skipped") => ("#eef0f2", "#8a939c"),
        _ => ("#ffffff", "#57606a"),
    }
}

fn short(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

/// Where a node of the graph leads.
#[derive(Debug, Clone, Copy)]
pub enum Links {
    /// To the step's row on the plan page (`#step-ID`).
    PlanRows,
    /// To the step's page in this execution (its output and transcript).
    Execution(ExecutionId),
    /// Nowhere (the graph as a standalone image).
    None,
}

/// The graph of `content`; `status` colours each step (by task status) when given; a step's
/// resource locks are named under it; each node is a link as `links` says.
#[must_use]
pub fn dag(content: &PlanContent, status: &BTreeMap<StepId, String>, links: Links) -> String {
    let steps = &content.steps;
    let h = if steps.iter().any(|s| !s.locks.is_empty()) {
        H_LOCKS
    } else {
        H
    };
    let deps = graph::dependency_indices(steps);
    let Some(order) = graph::topological_order(&deps) else {
        return "<p class=\"msg bad\">the steps form a cycle: no graph</p>".to_owned();
    };
    let mut level = vec![0usize; steps.len()];
    for v in order {
        level[v] = deps[v]
            .iter()
            .filter_map(|&d| level.get(d).map(|l| l + 1))
            .max()
            .unwrap_or(0);
    }
    let layers = level.iter().copied().max().map_or(0, |m| m + 1);
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); layers];
    for (i, l) in level.iter().enumerate() {
        rows[*l].push(i);
    }
    let widest = rows.iter().map(Vec::len).max().unwrap_or(1).max(1);
    let width = PAD * 2 + widest * W + (widest - 1) * GX;
    let height = PAD * 2 + layers * h + layers.saturating_sub(1) * GY;
    let mut pos = vec![(0usize, 0usize); steps.len()];
    for (l, row) in rows.iter().enumerate() {
        let row_w = row.len() * W + row.len().saturating_sub(1) * GX;
        let x0 = (width - row_w) / 2;
        for (k, &i) in row.iter().enumerate() {
            pos[i] = (x0 + k * (W + GX), PAD + l * (h + GY));
        }
    }
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg class=\"dag\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" role=\"img\" aria-label=\"step graph\">\
<defs><marker id=\"arr\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0L10,5L0,10z\" fill=\"#57606a\"/></marker></defs>"
    );
    for (i, ds) in deps.iter().enumerate() {
        for &d in ds {
            let (Some(&(fx, fy)), Some(&(tx, ty))) = (pos.get(d), pos.get(i)) else {
                continue;
            };
            let (x1, y1) = (fx + W / 2, fy + h);
            let (x2, y2) = (tx + W / 2, ty - 2);
            let my = (y1 + y2) / 2;
            let _ = write!(
                out,
                "<path d=\"M{x1},{y1} C{x1},{my} {x2},{my} {x2},{y2}\" fill=\"none\" stroke=\"#8c959f\" stroke-width=\"1.5\" marker-end=\"url(#arr)\"/>"
            );
        }
    }
    for (i, s) in steps.iter().enumerate() {
        let (x, y) = pos[i];
        let st = status.get(&s.id).map(String::as_str);
        let (bg, line) = fill(st);
        let href = match links {
            Links::PlanRows => Some(format!("#step-{}", s.id)),
            Links::Execution(id) => Some(format!("/executions/{id}/steps/{}", s.id)),
            Links::None => None,
        };
        if let Some(href) = &href {
            let _ = write!(out, "<a href=\"{}\" class=\"node\">", esc(href));
        }
        let _ = write!(
            out,
            "<g><title>{}</title><rect x=\"{x}\" y=\"{y}\" width=\"{W}\" height=\"{h}\" rx=\"7\" fill=\"{bg}\" stroke=\"{line}\" stroke-width=\"1.5\"/>\
<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-family=\"ui-monospace,monospace\" font-size=\"13\" font-weight=\"600\" fill=\"#0b62c4\">{}</text>\
<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-family=\"system-ui,sans-serif\" font-size=\"11\" fill=\"#5b6570\">{}</text>",
            esc(&s.description),
            x + W / 2,
            y + 18,
            esc(&short(s.id.as_str(), 20)),
            x + W / 2,
            y + 35,
            esc(&short(
                &format!(
                    "{}{}",
                    s.agent,
                    st.map(|t| format!(" · {t}")).unwrap_or_default()
                ),
                26
            )),
        );
        if !s.locks.is_empty() {
            let _ = write!(
                out,
                "<text class=\"locks\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-family=\"system-ui,sans-serif\" font-size=\"11\" fill=\"#9a6700\">{}</text>",
                x + W / 2,
                y + 51,
                esc(&short(&format!("lock: {}", s.locks.join(", ")), 26))
            );
        }
        out.push_str("</g>");
        if href.is_some() {
            out.push_str("</a>");
        }
    }
    out.push_str("</svg>");
    out
}
