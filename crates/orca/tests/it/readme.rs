//! The README's tour is a test: every `$ orca …` line of its first
//! ```console block runs, in order, in one temp project (a copy of `examples/`, the user's
//! config home a temp dir), and what the README shows under it must match what orca printed.
//!
//! Matching: each shown line matches the next line of stdout or of stderr (a terminal shows
//! both); `…` anywhere in a line matches any text; a line that is only `…` skips any number of
//! lines; a `plan_…` / `exec_…` id shown in the README matches any id and is bound to it, so a
//! later command naming that id (or a prefix of its digits, like `01a1fb49`) gets the real one.
//! `/tmp/tour` in a shown line is the test's project. Lines not starting with `$ orca` (`cd`, `cargo build`) are context for the reader only.

#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

const README: &str = include_str!("../../../../README.md");

/// One command of the tour and the lines shown under it.
struct Step {
    command: String,
    shown: Vec<String>,
}

fn tour() -> Vec<Step> {
    let start = README.find("## A five-minute tour").unwrap();
    let block = &README[start..];
    let open = block.find("```console\n").unwrap() + "```console\n".len();
    let close = block[open..].find("```").unwrap();
    let mut steps: Vec<Step> = Vec::new();
    for line in block[open..open + close].lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step {
                command: command.to_owned(),
                shown: Vec::new(),
            });
        } else if let Some(step) = steps.last_mut() {
            step.shown.push(line.to_owned());
        }
    }
    steps
}

/// Shell-like words: spaces split, double quotes group, `#` starts a comment.
fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in command.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            '#' if !quoted && word.is_empty() => break,
            ' ' if !quoted => {
                if any {
                    out.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    out
}

fn id_len(text: &str) -> Option<usize> {
    let prefix = ["plan_", "exec_"]
        .into_iter()
        .find(|p| text.starts_with(p))?;
    let body = text[prefix.len()..]
        .bytes()
        .take_while(|b| b.is_ascii_hexdigit() || *b == b'-')
        .count();
    (body >= 4).then_some(prefix.len() + body)
}

/// Whether `actual` matches the shown `pattern` (with `…` and ids), binding ids.
fn matches(pattern: &str, actual: &str, binds: &mut BTreeMap<String, String>) -> bool {
    if let Some(rest) = pattern.strip_prefix('…') {
        return (0..=actual.len())
            .filter(|i| actual.is_char_boundary(*i))
            .any(|i| {
                let mut trial = binds.clone();
                let ok = matches(rest, &actual[i..], &mut trial);
                if ok {
                    *binds = trial;
                }
                ok
            });
    }
    if let Some(n) = id_len(pattern) {
        let Some(m) = id_len(actual).filter(|_| actual[..5] == pattern[..5]) else {
            return false;
        };
        let shown = pattern[..n].to_owned();
        let real = actual[..m].to_owned();
        if binds.get(&shown).is_some_and(|b| *b != real) {
            return false;
        }
        let mut trial = binds.clone();
        trial.insert(shown, real);
        let ok = matches(&pattern[n..], &actual[m..], &mut trial);
        if ok {
            *binds = trial;
        }
        return ok;
    }
    match (pattern.chars().next(), actual.chars().next()) {
        (None, None) => true,
        (Some(p), Some(a)) if p == a => {
            matches(&pattern[p.len_utf8()..], &actual[a.len_utf8()..], binds)
        }
        _ => false,
    }
}

/// The real id for a word of a command: a bound id, or a prefix of a bound id's digits.
fn substitute(word: &str, binds: &BTreeMap<String, String>) -> String {
    if let Some(real) = binds.get(word) {
        return real.clone();
    }
    for (shown, real) in binds {
        let digits = &shown[5..];
        if word.len() >= 4 && digits.starts_with(word) {
            return real[5..].to_owned();
        }
    }
    word.to_owned()
}

/// The example plans (not `examples/eval/`) copied to `to`, as the README's commands use them.
pub(crate) fn copy_examples(to: &Path) {
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples"),
        to,
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        // The tour uses the example files; `examples/eval/` is a suite of its own.
        if entry.file_type().unwrap().is_dir() {
            continue;
        }
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn the_readme_tour_matches_reality() {
    let dir = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let root = dir.path();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    copy_dir(&repo.join("examples"), &root.join("examples"));
    let mut binds = BTreeMap::new();
    let mut ran = 0;
    let mut mismatches = Vec::new();
    for step in tour() {
        let argv = words(&step.command);
        if argv.first().map(String::as_str) != Some("orca") {
            continue;
        }
        let args: Vec<String> = argv[1..].iter().map(|w| substitute(w, &binds)).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = common::orca(root, config.path(), &args);
        ran += 1;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            out.status.code(),
            Some(0),
            "`{}`: {stdout}{stderr}",
            step.command
        );
        let streams = [
            stdout.lines().collect::<Vec<_>>(),
            stderr.lines().collect::<Vec<_>>(),
        ];
        let mut at = [0usize, 0usize];
        let mut skipping = false;
        let root_text = root.display().to_string();
        for shown in &step.shown {
            // The tour's project is `/tmp/tour`; the test's is a temp dir.
            let shown = &shown.replace("/tmp/tour", &root_text);
            if shown.trim() == "…" {
                skipping = true;
                continue;
            }
            let mut found = None;
            'streams: for (s, stream) in streams.iter().enumerate() {
                let end = if skipping {
                    stream.len()
                } else {
                    (at[s] + 1).min(stream.len())
                };
                for (i, actual) in stream.iter().enumerate().take(end).skip(at[s]) {
                    let mut trial = binds.clone();
                    if matches(shown.trim_end(), actual.trim_end(), &mut trial) {
                        binds = trial;
                        found = Some((s, i));
                        break 'streams;
                    }
                }
            }
            match found {
                Some((s, i)) => {
                    at[s] = i + 1;
                    skipping = false;
                }
                None => mismatches.push(format!(
                    "`{}`: the README shows {shown:?}, orca printed:\n{stdout}{stderr}",
                    step.command
                )),
            }
        }
    }
    println!(
        "README tour: {ran} commands run, {} mismatches",
        mismatches.len()
    );
    assert!(ran >= 7, "the tour runs commands: {ran}");
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn the_matcher_binds_ids_and_wildcards() {
    let mut binds = BTreeMap::new();
    assert!(matches(
        "created proposal plan_01a1fb49 (8 steps)",
        "created proposal plan_0aa2b3c4-9 (8 steps)",
        &mut binds
    ));
    assert_eq!(binds["plan_01a1fb49"], "plan_0aa2b3c4-9");
    assert!(matches(
        "ok … plan_01a1fb49: …",
        "ok   log of plan_0aa2b3c4-9: 2 entries",
        &mut binds
    ));
    assert!(!matches("ok plan_01a1fb49", "ok plan_0bb00000", &mut binds));
    assert!(!matches("created", "deleted", &mut binds));
    assert_eq!(substitute("01a1fb49", &binds), "0aa2b3c4-9");
    assert_eq!(
        words(r#"orca plan approve x --note "looks right"  # c"#),
        ["orca", "plan", "approve", "x", "--note", "looks right"]
    );
}

/// The README's figures of the shared store are the code's: the schema version `doctor` prints.
#[test]
fn the_readme_names_the_current_schema_version() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap_or_else(|e| panic!("README.md: {e}"));
    let said: Vec<usize> = readme
        .match_indices("schema version ")
        .filter_map(|(at, m)| {
            let rest = &readme[at + m.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect();
    assert!(!said.is_empty(), "the README names no schema version");
    let current = orca_store_postgres::schema::MIGRATIONS.len();
    assert!(
        said.iter().all(|v| *v == current),
        "the README says schema version {said:?}, the code is at {current}"
    );
}
