//! A path a model guessed wrong: the project's files of the same name, named in the error, or
//! taken instead when there is exactly one (the note a model reads says so).

use std::path::{Path, PathBuf};

use orca_core::ToolError;

use super::WorkspaceTools;

impl WorkspaceTools {
    /// The project's files named like `rel`'s last part (at most 5), as paths from the root.
    pub(super) fn same_named(&self, rel: &str) -> Vec<String> {
        let Some(name) = Path::new(rel)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
        else {
            return Vec::new();
        };
        let mut same = Vec::new();
        self.walk(&self.root, |p, is_dir| {
            if !is_dir && p.file_name().is_some_and(|n| n.to_string_lossy() == *name) {
                same.push(self.display(p));
            }
            same.len() < 5
        });
        same
    }

    /// What a model reads for a path that does not exist: the project's files of the same name,
    /// so that a guessed directory (`src/greet.py` for `greet.py`) is corrected in one turn.
    pub(super) fn not_found(&self, rel: &str) -> String {
        let same: Vec<String> = self
            .same_named(rel)
            .iter()
            .map(|p| format!("`{p}`"))
            .collect();
        if same.is_empty() {
            format!(
                "`{rel}` does not exist (paths are relative to the project root; `list_files` shows what there is)"
            )
        } else {
            format!(
                "`{rel}` does not exist; the project has {}: use that path",
                same.join(", ")
            )
        }
    }

    /// An existing file to read or edit; a path that does not exist is taken as the project's
    /// only file of that name (`src/greet.py` for the one `greet.py`), and the note a model
    /// reads says so. Small models kept guessing a directory after being told the right path.
    pub(super) fn existing_or_only(
        &self,
        rel: &str,
    ) -> Result<(PathBuf, Option<String>), ToolError> {
        match self.existing(rel) {
            Ok(path) => Ok((path, None)),
            Err(e) if !e.refused && self.lexical(rel)?.symlink_metadata().is_err() => {
                match self.same_named(rel).as_slice() {
                    [only] => Ok((self.existing(only)?, Some(only.clone()))),
                    _ => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }
}
