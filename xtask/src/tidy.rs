//! `cargo xtask tidy`: checks of the project's own conventions. Also runs as a normal test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

mod house;

/// Crates each library crate must never depend on, directly or not (normal dependencies).
const FORBIDDEN: &[(&str, &[&str])] = &[
    (
        "orca-core",
        &[
            "tokio",
            "reqwest",
            "hyper",
            "mio",
            "orca-store",
            "orca-services",
            "orca-agents",
            "opentelemetry",
        ],
    ),
    (
        "orca-store",
        &["reqwest", "hyper", "orca-services", "orca-agents"],
    ),
    (
        "orca-services",
        &[
            "reqwest",
            "hyper",
            "orca-agents",
            "orca-store-postgres",
            "tokio-postgres",
            "opentelemetry",
        ],
    ),
    // The telemetry export reads the services' events; it runs no agent and picks no store.
    (
        "orca-telemetry",
        &["orca-agents", "orca-store-postgres", "tokio-postgres"],
    ),
    (
        "orca-store-postgres",
        &["reqwest", "hyper", "orca-services", "orca-agents"],
    ),
    (
        "orca-agents",
        &["orca-store", "orca-services", "orca-store-postgres"],
    ),
    // The kernel's crate knows no model, agent, store or service.
    (
        "orca-os",
        &[
            "orca-agents",
            "orca-llm",
            "orca-store",
            "orca-services",
            "reqwest",
            "hyper",
        ],
    ),
    // The model wire runs no process and knows no agent, store or service.
    (
        "orca-llm",
        &["orca-os", "orca-agents", "orca-store", "orca-services"],
    ),
    // The embedding façade: the file store and the agents, never the shared store's driver.
    ("orca-embed", &["orca-store-postgres", "tokio-postgres"]),
    // The binary is the one place concrete choices meet; test support never ships in it.
    ("orca", &[house::TEST_SUPPORT_CRATE]),
    // The web layer speaks HTTP over the services; agents are the binary's choice.
    ("orca-web", &["orca-agents", "reqwest"]),
    // The MCP server names no concrete store or agent backend, and speaks no HTTP itself.
    ("orca-mcp", &["orca-agents", "reqwest", "hyper"]),
    // Delivering a notification knows nothing of plans, stores, services or the web server:
    // it gets JSON and sends it.
    (
        "orca-notify",
        &["orca-store", "orca-services", "orca-web", "orca-agents"],
    ),
];

/// Source text that must not appear in a crate's `src/` (I/O in the pure domain, concrete
/// backends in the services).
const FORBIDDEN_TEXT: &[(&str, &[&str])] = &[
    (
        "orca-core",
        &[
            "std::fs",
            "std::net",
            "std::process",
            "std::env",
            "std::io",
            "std::os",
            "std::thread",
            "File::",
            "OpenOptions",
            "tokio",
            "reqwest",
        ],
    ),
    (
        "orca-services",
        &[
            "reqwest",
            "FileStore",
            "MemoryStore",
            "PgStore",
            "orca_agents",
            "orca_store_postgres",
        ],
    ),
    ("orca-web", &["FileStore", "MemoryStore", "orca_agents"]),
    (
        "orca-mcp",
        &["FileStore", "MemoryStore", "orca_agents", "std::process"],
    ),
];

/// Calls that may appear in one file of a crate only (ADR 0019: in `orca-mcp` only the
/// elicitation module approves, with a human's answer).
const ONLY_IN: &[(&str, &str, &str)] = &[
    ("orca-mcp", ".approve(", "approval.rs"),
    ("orca-mcp", ".approve_shown(", "approval.rs"),
];

/// Runs every check; returns every problem found.
pub(crate) fn run(root: &Path) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    check_dependencies(root, &mut problems);
    check_sources(root, &mut problems);
    check_manifests(root, &mut problems);
    check_adrs(root, &mut problems);
    house::check(root, &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

fn check_dependencies(root: &Path, problems: &mut Vec<String>) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let host = match host_triple() {
        Ok(host) => host,
        Err(e) => {
            problems.push(e);
            return;
        }
    };
    let output = match Command::new(cargo)
        // Every feature on: an optional dependency behind a feature counts too. Only the host's
        // platform: resolving every platform would need crates the build never downloads
        // (Windows-only ones), so on a fresh cargo cache it would fail or hit the network.
        // Not `--offline` either: the test must not depend on what the cache happens to hold.
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--all-features",
            "--filter-platform",
            &host,
        ])
        .current_dir(root)
        .output()
    {
        Ok(o) if o.status.success() => o.stdout,
        Ok(o) => {
            problems.push(format!(
                "cargo metadata failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
            return;
        }
        Err(e) => {
            problems.push(format!("cannot run cargo metadata: {e}"));
            return;
        }
    };
    let meta: serde_json::Value = match serde_json::from_slice(&output) {
        Ok(v) => v,
        Err(e) => {
            problems.push(format!("cargo metadata printed invalid JSON: {e}"));
            return;
        }
    };
    problems.extend(forbidden_dependencies(&meta, FORBIDDEN));
    // Test support is a dev-dependency only: no library reaches it through normal ones.
    let libraries: Vec<(&str, &[&str])> = FORBIDDEN
        .iter()
        .map(|(krate, _)| (*krate, &[house::TEST_SUPPORT_CRATE][..]))
        .collect();
    problems.extend(forbidden_dependencies(&meta, &libraries));
}

/// The host's target triple, from `rustc -vV`.
fn host_triple() -> Result<String, String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let out = Command::new(&rustc)
        .arg("-vV")
        .output()
        .map_err(|e| format!("cannot run {rustc} -vV: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|h| h.trim().to_owned())
        .ok_or_else(|| format!("{rustc} -vV printed no `host:` line"))
}

/// The layering violations in `cargo metadata` output: every crate of `forbidden` that a
/// library reaches through normal dependencies, directly or not.
fn forbidden_dependencies(meta: &serde_json::Value, forbidden: &[(&str, &[&str])]) -> Vec<String> {
    let mut problems = Vec::new();
    // id → (name, normal dependency ids)
    let mut graph: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    let names: BTreeMap<String, String> = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["id"].as_str()?.to_owned(), p["name"].as_str()?.to_owned())))
        .collect();
    for node in meta["resolve"]["nodes"].as_array().into_iter().flatten() {
        let Some(id) = node["id"].as_str() else {
            continue;
        };
        let deps = node["deps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| {
                d["dep_kinds"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|k| k["kind"].is_null())
            })
            .filter_map(|d| d["pkg"].as_str().map(str::to_owned))
            .collect();
        let name = names.get(id).cloned().unwrap_or_default();
        graph.insert(id.to_owned(), (name, deps));
    }
    for (krate, forbidden) in forbidden {
        let Some(start) = graph
            .iter()
            .find(|(_, (n, _))| n == krate)
            .map(|(id, _)| id.clone())
        else {
            problems.push(format!("crate {krate} is missing from the workspace"));
            continue;
        };
        let mut seen = BTreeSet::new();
        let mut stack = vec![start];
        while let Some(id) = stack.pop() {
            if !seen.insert(id.clone()) {
                continue;
            }
            if let Some((_, deps)) = graph.get(&id) {
                stack.extend(deps.iter().cloned());
            }
        }
        for id in &seen {
            if let Some((name, _)) = graph.get(id)
                && forbidden.contains(&name.as_str())
            {
                problems.push(format!(
                    "{krate} must not depend on {name} (layering, see docs/architecture.md)"
                ));
            }
        }
    }
    problems
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn markdown_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

fn check_sources(root: &Path, problems: &mut Vec<String>) {
    for (krate, needles) in FORBIDDEN_TEXT {
        let mut files = Vec::new();
        rust_files(&root.join("crates").join(krate).join("src"), &mut files);
        for file in files {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            for needle in forbidden_text(&text, needles) {
                problems.push(format!(
                    "{}: `{needle}` is not allowed in {krate}",
                    file.display()
                ));
            }
        }
    }
    for (krate, needle, only) in ONLY_IN {
        let mut files = Vec::new();
        rust_files(&root.join("crates").join(krate).join("src"), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            if text.contains(needle) && !file.ends_with(only) {
                problems.push(format!(
                    "{}: `{needle}` is allowed in {krate} only in {only}",
                    file.display()
                ));
            }
        }
    }
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    rust_files(&root.join("xtask"), &mut files);
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let ignore = concat!("#[", "ignore");
        if text.contains(ignore) {
            problems.push(format!(
                "{}: ignored tests are not allowed; make the test pass or delete it",
                file.display()
            ));
        }
    }
}

/// The needles found in `text`. A needle `std::x` also matches `x` named in a `std::{…}` group
/// (`use std::{fs, io};`), so grouping imports does not hide I/O.
fn forbidden_text<'a>(text: &str, needles: &[&'a str]) -> Vec<&'a str> {
    let grouped = std_groups(text);
    needles
        .iter()
        .copied()
        .filter(|needle| {
            text.contains(needle)
                || needle
                    .strip_prefix("std::")
                    .is_some_and(|module| grouped.iter().any(|m| m == module))
        })
        .collect()
}

/// The first path segment of every item in the `std::{…}` groups of `text`.
fn std_groups(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("std::{") {
        let rest = &text[at + "std::{".len()..];
        let mut depth = 0usize;
        let mut item = String::new();
        let mut segment_done = false;
        for c in rest.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(std::mem::take(&mut item));
                    segment_done = false;
                }
                ':' if depth == 0 => segment_done = true,
                c if depth == 0 && !segment_done && (c.is_alphanumeric() || c == '_') => {
                    item.push(c)
                }
                _ => {}
            }
        }
        out.push(item);
    }
    out.retain(|m| !m.is_empty());
    out
}

fn check_manifests(root: &Path, problems: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(root.join("crates")) else {
        problems.push("no crates/ directory".to_owned());
        return;
    };
    let mut manifests: Vec<_> = entries
        .flatten()
        .map(|e| e.path().join("Cargo.toml"))
        .collect();
    manifests.push(root.join("xtask").join("Cargo.toml"));
    for manifest in manifests {
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        if !text.contains("[lints]\nworkspace = true") {
            problems.push(format!(
                "{}: add `[lints] workspace = true`",
                manifest.display()
            ));
        }
    }
}

fn check_adrs(root: &Path, problems: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(root.join("adr")) else {
        problems.push("no adr/ directory".to_owned());
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "README.md" || name == "template.md" {
            continue;
        }
        let numbered = name.len() > 5
            && name.as_bytes()[..4].iter().all(u8::is_ascii_digit)
            && name.as_bytes()[4] == b'-'
            && name.ends_with(".md");
        if !numbered {
            problems.push(format!("adr/{name}: ADRs are named NNNN-dashed-title.md"));
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if !text.lines().any(|l| l.starts_with("status:")) {
            problems.push(format!(
                "adr/{name}: needs a `status:` line in its front matter"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_source_check_finds_io_however_it_is_imported() {
        let needles = ["std::fs", "std::env", "std::io", "tokio"];
        let check = |text: &str| super::forbidden_text(text, &needles);
        assert_eq!(check("use std::fs::read;"), ["std::fs"]);
        assert_eq!(check("let x = ::std::env::var(\"A\");"), ["std::env"]);
        assert_eq!(
            check("use std::{collections::BTreeMap, fs, io::Read};"),
            ["std::fs", "std::io"]
        );
        assert_eq!(
            check("use std::{\n    fmt,\n    env::{self, var},\n};"),
            ["std::env"]
        );
        assert_eq!(check("tokio::spawn(f)"), ["tokio"]);
        assert!(check("use std::{collections::BTreeSet, fmt::Write as _};").is_empty());
        assert!(check("use std::str::FromStr; // refs, fs-like words: prefs").is_empty());
    }

    /// A made-up `cargo metadata`: `core` → `util` → (`util_deps`); `store` dev-depends on
    /// `insta`.
    fn metadata(util_deps: &[&str]) -> serde_json::Value {
        let pkg = |name: &str| json!({ "id": format!("{name}-id"), "name": name });
        let node = |name: &str, deps: &[&str], kind: &serde_json::Value| {
            let deps: Vec<_> = deps
                .iter()
                .map(|d| json!({ "pkg": format!("{d}-id"), "dep_kinds": [{ "kind": kind }] }))
                .collect();
            json!({ "id": format!("{name}-id"), "deps": deps })
        };
        let normal = serde_json::Value::Null;
        json!({
            "packages": [pkg("core"), pkg("util"), pkg("tokio"), pkg("store"), pkg("insta")],
            "resolve": { "nodes": [
                node("core", &["util"], &normal),
                node("util", util_deps, &normal),
                node("store", &["insta"], &json!("dev")),
                node("tokio", &[], &normal),
                node("insta", &[], &normal),
            ]},
        })
    }

    #[test]
    fn the_dependency_check_follows_the_graph() {
        let rules: &[(&str, &[&str])] = &[("core", &["tokio"]), ("store", &["insta"])];
        assert_eq!(
            super::forbidden_dependencies(&metadata(&["tokio"]), rules),
            ["core must not depend on tokio (layering, see docs/architecture.md)"]
        );
        // Without the transitive edge, or through a dev-dependency only, all is well.
        assert!(super::forbidden_dependencies(&metadata(&[]), rules).is_empty());
        // A crate missing from the workspace is reported, not silently passed.
        let missing: &[(&str, &[&str])] = &[("nowhere", &["tokio"])];
        assert_eq!(
            super::forbidden_dependencies(&metadata(&[]), missing),
            ["crate nowhere is missing from the workspace"]
        );
    }

    #[test]
    fn tidy() {
        let root = super::super::workspace_root();
        if let Err(problems) = super::run(&root) {
            panic!("tidy found problems:\n{}", problems.join("\n"));
        }
    }
}
