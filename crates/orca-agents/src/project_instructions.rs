//! Project instructions: `AGENTS.md` and `CLAUDE.md` in the project root, as the agent CLIs
//! read them, added (bounded) to the system prompt of the planner and of model-backed
//! specialists. Turned off with `project_instructions = false` in `.orca/config.toml`.

use std::io::Read as _;
use std::path::Path;

/// The files read, in order.
pub const FILES: &[&str] = &["AGENTS.md", "CLAUDE.md"];

/// The most read from all files together; the rest is left out with a note.
pub const MAX_BYTES: usize = 16 * 1024;

/// The section to append to a system prompt, or `None` when there are no instructions. Only
/// regular files directly in `root` are read (a symlink is skipped: it may lead anywhere);
/// a file that cannot be read is skipped with a debug line.
#[must_use]
pub fn section(root: &Path) -> Option<String> {
    let mut out = String::new();
    let mut left = MAX_BYTES;
    for name in FILES {
        let path = root.join(name);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_file() {
            tracing::debug!(file = %path.display(), "project instructions: not a regular file; skipped");
            continue;
        }
        let mut bytes = Vec::new();
        let limit = u64::try_from(left + 1).unwrap_or(u64::MAX);
        if let Err(err) =
            std::fs::File::open(&path).and_then(|f| f.take(limit).read_to_end(&mut bytes))
        {
            tracing::debug!(file = %path.display(), %err, "project instructions: cannot read; skipped");
            continue;
        }
        let cut = bytes.len() > left;
        bytes.truncate(left);
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        left = left.saturating_sub(bytes.len());
        out.push_str(&format!("\n\n### {name}\n\n{text}\n"));
        if cut {
            out.push_str(&format!(
                "\n(… the rest of {name} was left out: project instructions are limited to {MAX_BYTES} bytes.)\n"
            ));
            break;
        }
    }
    (!out.is_empty()).then(|| {
        format!(
            "\n\n## Project instructions\n\nThe project's own instructions for agents working in it (from its root). Follow them where they do not conflict with your role and output contract.{out}"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_files_bounded_symlinks_skipped() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(section(dir.path()), None);
        std::fs::write(dir.path().join("AGENTS.md"), "use tabs").unwrap();
        std::fs::write(dir.path().join("CLAUDE.md"), "x".repeat(MAX_BYTES * 2)).unwrap();
        let s = section(dir.path()).unwrap();
        assert!(s.contains("### AGENTS.md\n\nuse tabs"));
        assert!(s.contains("the rest of CLAUDE.md was left out"));
        assert!(s.len() < MAX_BYTES + 1_000, "{}", s.len());
        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join("secret"), "do not read").unwrap();
        std::fs::remove_file(dir.path().join("AGENTS.md")).unwrap();
        std::fs::remove_file(dir.path().join("CLAUDE.md")).unwrap();
        std::os::unix::fs::symlink(other.path().join("secret"), dir.path().join("AGENTS.md"))
            .unwrap();
        assert_eq!(section(dir.path()), None);
    }
}
