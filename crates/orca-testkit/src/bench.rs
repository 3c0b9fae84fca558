//! What a benchmark prints and hands to `cargo xtask bench`: a table of figures on stdout and,
//! with `--json PATH`, `{"figures": [{"name", "value", "unit", "target", "description",
//! "quick"}]}`.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Value, json};

/// One figure: its name, value and unit, the target it is held to (if any), what it measures.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    /// The figure's name (`pg_claim_task_4w_vs_1w`).
    pub name: &'a str,
    /// Its value.
    pub value: f64,
    /// Its unit (`ms`, `x`, `/s`).
    pub unit: &'a str,
    /// The target it is held to, if any.
    pub target: Option<f64>,
    /// What it measures.
    pub description: &'a str,
}

/// The figures as a table with a header line.
#[must_use]
pub fn table(rows: &[Row<'_>]) -> String {
    let mut table = String::new();
    let _ = writeln!(
        table,
        "{:<28} {:>10} {:>8}  what",
        "figure", "measured", "target"
    );
    for f in rows {
        let target = f.target.map_or_else(|| "-".to_owned(), |t| format!("{t}"));
        let _ = writeln!(
            table,
            "{:<28} {:>10.3}{:<2} {:>8}  {}",
            f.name, f.value, f.unit, target, f.description
        );
    }
    table.trim_end().to_owned()
}

/// Writes the figures to `path` as JSON for `cargo xtask bench` (`quick`: small sizes, whose
/// targets are not judged).
///
/// # Errors
///
/// The file cannot be written.
pub fn write_json(rows: &[Row<'_>], path: &Path, quick: bool) -> std::io::Result<()> {
    let doc: Vec<Value> = rows
        .iter()
        .map(|f| {
            json!({ "name": f.name, "value": f.value, "unit": f.unit, "target": f.target,
                    "description": f.description, "quick": quick })
        })
        .collect();
    let bytes =
        serde_json::to_vec_pretty(&json!({ "figures": doc })).map_err(std::io::Error::other)?;
    std::fs::write(path, bytes)
}
