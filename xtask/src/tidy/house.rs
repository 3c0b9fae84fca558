//! The house rules `tidy` keeps: `unsafe` in one crate, source files a newcomer can read in one
//! sitting, explicit imports, no references to a tracker that is not in the repository, and
//! test support out of production crates.

use std::path::{Path, PathBuf};

/// The one crate allowed `unsafe` (it talks to the kernel).
pub(crate) const UNSAFE_CRATE: &str = "orca-os";

/// The most lines a source file under `src/` may have.
pub(crate) const MAX_FILE_LINES: usize = 700;

/// Test support: a dev-dependency (or a benchmark's), never a normal dependency.
pub(crate) const TEST_SUPPORT_CRATE: &str = "orca-testkit";

/// Every crate directory under `crates/`, by name.
fn crate_dirs(root: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(root.join("crates")) else {
        return Vec::new();
    };
    let mut out: Vec<_> = entries
        .flatten()
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    out.sort();
    out
}

/// Runs the house checks over the tree at `root`.
pub(crate) fn check(root: &Path, problems: &mut Vec<String>) {
    for (name, dir) in crate_dirs(root) {
        let mut files = Vec::new();
        super::rust_files(&dir.join("src"), &mut files);
        files.sort();
        if name != UNSAFE_CRATE {
            check_forbid_unsafe(&name, &dir, problems);
        }
        for file in &files {
            let Ok(text) = std::fs::read_to_string(file) else {
                continue;
            };
            let shown = file.strip_prefix(root).unwrap_or(file).display();
            if name != UNSAFE_CRATE {
                for line in unsafe_lines(&text) {
                    problems.push(format!(
                        "{shown}:{line}: `unsafe` belongs in {UNSAFE_CRATE} (the one crate that talks to the kernel)"
                    ));
                }
            }
            let lines = text.lines().count();
            if lines > MAX_FILE_LINES {
                problems.push(format!(
                    "{shown}: {lines} lines (at most {MAX_FILE_LINES}); split it by concern"
                ));
            }
            for line in glob_imports_outside_tests(file, &text) {
                problems.push(format!(
                    "{shown}:{line}: `use super::*` outside tests; import what the module uses"
                ));
            }
        }
    }
    let mut files = Vec::new();
    super::rust_files(&root.join("crates"), &mut files);
    super::rust_files(&root.join("xtask").join("src"), &mut files);
    for name in ["README.md", "CONTRIBUTING.md"] {
        files.push(root.join(name));
    }
    super::markdown_files(&root.join("docs"), &mut files);
    super::markdown_files(&root.join("adr"), &mut files);
    files.sort();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let shown = file.strip_prefix(root).unwrap_or(&file).display();
        for (line, found) in tracker_references(&text) {
            problems.push(format!(
                "{shown}:{line}: `{found}` names a tracker that is not in the repository; say what, not which ticket"
            ));
        }
    }
}

/// A crate root without `#![forbid(unsafe_code)]`.
fn check_forbid_unsafe(name: &str, dir: &Path, problems: &mut Vec<String>) {
    for root_file in ["src/lib.rs", "src/main.rs"] {
        let path = dir.join(root_file);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if !text.contains("#![forbid(unsafe_code)]") {
            problems.push(format!(
                "crates/{name}/{root_file}: add `#![forbid(unsafe_code)]` (only {UNSAFE_CRATE} may use `unsafe`)"
            ));
        }
    }
}

/// The 1-based lines of `text` that use `unsafe` (a block, fn, impl or trait), comments aside.
fn unsafe_lines(text: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let code = l.split("//").next().unwrap_or_default();
            [
                "unsafe {",
                "unsafe fn",
                "unsafe impl",
                "unsafe trait",
                "unsafe extern",
            ]
            .iter()
            .any(|n| code.contains(n))
        })
        .map(|(i, _)| i + 1)
        .collect()
}

/// The lines of `use super::*` that are not in test code: a file named `tests.rs` is a test
/// module, a `testkit` module is test support (its suite macro brings the caller's names into
/// the test modules it makes), and in any other file only what follows its first
/// `#[cfg(test)]` counts as tests.
fn glob_imports_outside_tests(file: &Path, text: &str) -> Vec<usize> {
    if file.file_name().is_some_and(|n| n == "tests.rs")
        || file.components().any(|c| c.as_os_str() == "testkit")
    {
        return Vec::new();
    }
    let tests_from = text
        .lines()
        .position(|l| l.trim() == "#[cfg(test)]")
        .unwrap_or(usize::MAX);
    text.lines()
        .enumerate()
        .filter(|(i, l)| *i < tests_from && l.trim() == "use super::*;")
        .map(|(i, _)| i + 1)
        .collect()
}

/// References to numbered issues or defects of a tracker (the word, then a number, with a
/// space, `#`, `_` or `-` between), with their 1-based line.
fn tracker_references(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let lower = line.to_ascii_lowercase();
        for word in ["issue", "defect", "ticket"] {
            let mut from = 0;
            while let Some(at) = lower[from..].find(word) {
                let start = from + at;
                from = start + word.len();
                let before_ok = start == 0 || !lower.as_bytes()[start - 1].is_ascii_alphanumeric();
                let rest = lower[from..].trim_start_matches([' ', '#', '_', '-']);
                let after_word = &lower[from..];
                let separated = after_word.len() != rest.len();
                if before_ok && separated && rest.starts_with(|c: char| c.is_ascii_digit()) {
                    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    out.push((i + 1, format!("{word} {digits}")));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn tracker_references_are_found_and_prose_is_left_alone() {
        let found = |t: &str| super::tracker_references(t);
        // Built at run time, so this file does not trip its own check.
        let (issue, defect) = (["iss", "ue"].concat(), ["def", "ect"].concat());
        assert_eq!(
            found(&format!("see {issue} 15, {defect} 3")),
            [(1, format!("{issue} 15")), (1, format!("{defect} 3"))]
        );
        assert_eq!(
            found(&format!("x\n(I{} #4 item 8)", &issue[1..])),
            [(2, format!("{issue} 4"))]
        );
        assert!(found("the issue is 3 bytes; tissue 4; issues").is_empty());
        assert!(found("an issue_tracker2 field").is_empty());
    }

    #[test]
    fn glob_imports_count_only_outside_tests() {
        let f = Path::new("src/a.rs");
        let text = "use super::*;\nfn a() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n";
        assert_eq!(super::glob_imports_outside_tests(f, text), [1]);
        assert!(super::glob_imports_outside_tests(Path::new("src/tests.rs"), text).is_empty());
    }

    #[test]
    fn unsafe_is_found_in_code_not_in_comments() {
        let text =
            "// unsafe { no }\nlet x = unsafe { f() };\n/// see unsafe fn\nunsafe fn g() {}\n";
        assert_eq!(super::unsafe_lines(text), [2, 4]);
    }
}
