//! What a model guessed wrong: a path (the project's files of the same name, named in the
//! error, or taken instead when there is exactly one: the note a model reads says so), or the
//! text an edit replaces (the file's closest lines, shown so the next call can copy them).

use std::path::{Path, PathBuf};

use orca_core::ToolError;

use super::WorkspaceTools;

/// A project with at most this many files has them all named when a path does not exist.
const FEW_FILES: usize = 12;

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

    /// Every file of the project, as paths from the root, if it has at most [`FEW_FILES`].
    fn all_files_if_few(&self) -> Option<Vec<String>> {
        let mut files = Vec::new();
        self.walk(&self.root, |p, is_dir| {
            if !is_dir {
                files.push(self.display(p));
            }
            files.len() <= FEW_FILES
        });
        (files.len() <= FEW_FILES).then(|| {
            files.sort();
            files
        })
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
            match self.all_files_if_few() {
                // A model asked again and again for a `Cargo.toml` the task said was not there,
                // between `list_files` calls that showed the one file: naming every file of a
                // small project ends the search in the error itself.
                Some(files) if !files.is_empty() => format!(
                    "`{rel}` does not exist; these are all of the project's files: {}",
                    files
                        .iter()
                        .map(|p| format!("`{p}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                _ => format!(
                    "`{rel}` does not exist (paths are relative to the project root; `list_files` \
                     shows what there is)"
                ),
            }
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

impl WorkspaceTools {
    /// For a command that failed: the paths it names that do not exist while the project has
    /// exactly one file of that name (`node src/port.js` for the project's `port.js`: a 1.5B
    /// model kept the guessed directory in its commands after every file tool had taken the
    /// right file). Only words that look like relative paths are looked at.
    pub(super) fn guessed_in_command(&self, command: &str) -> Option<String> {
        let mut notes = Vec::new();
        for word in command.split_whitespace() {
            let word = word.trim_matches(|c| matches!(c, '"' | '\'' | ';' | '(' | ')'));
            let looks_like_path = word.contains('/')
                && word.contains('.')
                && !word.starts_with(['/', '-', '$', '~'])
                && !word.contains("://");
            if !looks_like_path || notes.len() >= 3 {
                continue;
            }
            let Ok(joined) = self.lexical(word) else {
                continue;
            };
            if joined.symlink_metadata().is_ok() {
                continue;
            }
            if let [only] = self.same_named(word).as_slice() {
                notes.push(format!(
                    "`{word}` does not exist: the project's only file of that name is `{only}`"
                ));
            }
        }
        (!notes.is_empty()).then(|| format!("{}; use that path", notes.join("; ")))
    }
}

/// `content` with one level of JSON escapes undone, if its line breaks came escaped twice:
/// not one real line break, and at least two `\n` written out as text (a json-mode 1.5B model
/// wrote `src/lib.rs` as one line of `\n`s; rustc refused it and the next attempt's edits found
/// nothing to match). `\\`, `\"`, `\t` and `\r` are undone with them; any other `\` is
/// kept.
pub(super) fn escaped_twice(content: &str) -> Option<String> {
    if content.contains('\n') || content.matches("\\n").count() < 2 {
        return None;
    }
    let mut out = String::with_capacity(content.len());
    let mut chars = content.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('"') => out.push('"'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    Some(out)
}

/// An edit written with single quotes where the file has double ones: `old` and `new` with
/// every `'` as `"`, if that `old` occurs exactly once in `text` and neither text had a `"` of
/// its own (a mix is not guessed at).
pub(super) fn quotes_swapped(text: &str, old: &str, new: &str) -> Option<(String, String)> {
    if !old.contains('\'') || old.contains('"') || new.contains('"') {
        return None;
    }
    let swapped = old.replace('\'', "\"");
    (text.matches(&swapped).count() == 1).then(|| (swapped, new.replace('\'', "\"")))
}

/// The most lines of a file compared with an edit's `old` text.
const MAX_COMPARED_LINES: usize = 20_000;

/// How many of the closest lines an error shows.
const SHOWN_LINES: usize = 3;

/// The error for an edit whose `old` text occurs `count` times (not once) in `path`: for none,
/// the file's lines closest to `old`'s first line, numbered, to copy exactly (a 1.5B model
/// guessed `print('Hello, world!')` for `print(f"Hello, {args.name}!")` three times, told only
/// that it occurs 0 times); for several, how to make it unique.
pub(super) fn not_once(path: &str, text: &str, old: &str, new: &str, count: usize) -> String {
    if count > 1 {
        return format!(
            "`old` occurs {count} times in `{path}`; it must occur exactly once: include more of the lines around the change in `old`"
        );
    }
    // The same edit sent again once it was made (a 1.5B model did, then edited the result
    // into itself three times).
    let made =
        text.contains(new) || (!new.contains('"') && text.contains(&new.replace('\'', "\"")));
    if !new.is_empty() && made {
        return format!(
            "`old` does not occur in `{path}`, and `new` already does: this edit was made; go on with the next change, or check the result (`read_file`)"
        );
    }
    let wanted = old
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let want = bigrams(wanted);
    let mut scored: Vec<(f64, usize, &str)> = text
        .lines()
        .take(MAX_COMPARED_LINES)
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| (dice(&want, &bigrams(line.trim())), i + 1, line))
        .filter(|(score, _, _)| *score >= 0.4)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    if scored.is_empty() {
        return format!(
            "`old` does not occur in `{path}` and no line of it is close; read the file (`read_file`) and copy `old` from it exactly"
        );
    }
    let shown: Vec<String> = scored
        .iter()
        .take(SHOWN_LINES)
        .map(|(_, n, line)| format!("line {n}: {line}"))
        .collect();
    format!(
        "`old` does not occur in `{path}`; its closest lines are:\n{}\ncopy `old` from the file exactly (whitespace and quotes included)",
        shown.join("\n")
    )
}

/// The character bigrams of a line (lowercased), for [`dice`].
fn bigrams(line: &str) -> Vec<(char, char)> {
    let chars: Vec<char> = line.chars().flat_map(char::to_lowercase).collect();
    let mut pairs: Vec<(char, char)> = chars.windows(2).map(|w| (w[0], w[1])).collect();
    pairs.sort_unstable();
    pairs
}

/// The Dice coefficient of two sorted bigram lists: 1 for the same line, 0 for nothing shared.
fn dice(a: &[(char, char)], b: &[(char, char)]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let (mut i, mut j, mut shared) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    #[expect(
        clippy::cast_precision_loss,
        reason = "a line's bigrams, far below 2^52"
    )]
    let score = 2.0 * shared as f64 / (a.len() + b.len()) as f64;
    score
}
