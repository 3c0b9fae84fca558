//! Declared writes: what a step says it writes (`writes: ["src/api/**", "Cargo.toml"]`), and the
//! check that two steps which may run at the same time never write the same path unless a
//! resource lock keeps them apart.
//!
//! A pattern is a relative path whose segments may hold `*` (any run of characters within a
//! segment), `?` (one character) and a whole-segment `**` (any number of segments, none
//! included). A pattern also covers everything beneath what it names: `site` covers
//! `site/out/index.html`, as a directory declared written is written with its contents.
//!
//! Two patterns overlap when some path matches both. [`overlap`] decides that exactly (no
//! enumeration): it is the intersection of two regular languages of a simple shape, walked
//! with memoised dynamic programming over the pattern positions.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::graph::Problem;
use crate::plan::Step;

/// Why a declared write pattern is refused.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PatternError {
    /// The pattern is empty or only slashes.
    Empty,
    /// An absolute path (`/etc`): declared writes are relative to the project.
    Absolute,
    /// A `.` or `..` segment, or an empty one (`a//b`).
    BadSegment,
    /// `**` mixed with other characters in one segment (`a**`).
    BadGlobstar,
    /// A NUL byte or a backslash.
    BadCharacter,
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "it is empty",
            Self::Absolute => "it is absolute; declare paths relative to the project",
            Self::BadSegment => "it has an empty, `.` or `..` segment",
            Self::BadGlobstar => "`**` must be a whole segment (`src/**`, not `src**`)",
            Self::BadCharacter => "it holds a NUL byte or a backslash",
        })
    }
}

/// One segment of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    /// `**`: any number of segments.
    Any,
    /// A segment pattern: literal characters, `*` and `?`.
    Glob(Vec<Tok>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Char(char),
    /// `?`: one character.
    One,
    /// `*`: any run of characters.
    Star,
}

/// A validated write pattern, parsed. The implicit "and everything beneath" is a trailing `**`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritePattern {
    text: String,
    segs: Vec<Seg>,
}

impl WritePattern {
    /// Parses and validates a pattern.
    ///
    /// # Errors
    /// [`PatternError`] says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        if text.contains('\0') || text.contains('\\') {
            return Err(PatternError::BadCharacter);
        }
        if text.starts_with('/') {
            return Err(PatternError::Absolute);
        }
        let trimmed = text.trim_end_matches('/');
        if trimmed.is_empty() {
            return Err(PatternError::Empty);
        }
        let mut segs = Vec::new();
        for seg in trimmed.split('/') {
            if seg.is_empty() || seg == "." || seg == ".." {
                return Err(PatternError::BadSegment);
            }
            if seg == "**" {
                // `a/**/**` is `a/**`.
                if segs.last() != Some(&Seg::Any) {
                    segs.push(Seg::Any);
                }
                continue;
            }
            if seg.contains("**") {
                return Err(PatternError::BadGlobstar);
            }
            segs.push(Seg::Glob(
                seg.chars()
                    .map(|c| match c {
                        '*' => Tok::Star,
                        '?' => Tok::One,
                        c => Tok::Char(c),
                    })
                    .collect(),
            ));
        }
        if segs.last() != Some(&Seg::Any) {
            segs.push(Seg::Any);
        }
        Ok(Self {
            text: text.to_owned(),
            segs,
        })
    }

    /// The pattern as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether a concrete relative path (segments joined by `/`) is covered by this pattern.
    #[must_use]
    pub fn matches(&self, path: &str) -> bool {
        let parts: Vec<&str> = path.split('/').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return false;
        }
        match_segs(&self.segs, &parts)
    }
}

impl fmt::Display for WritePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn match_segs(segs: &[Seg], parts: &[&str]) -> bool {
    match segs.split_first() {
        None => parts.is_empty(),
        Some((Seg::Any, rest)) => (0..=parts.len()).any(|k| match_segs(rest, &parts[k..])),
        Some((Seg::Glob(toks), rest)) => parts.split_first().is_some_and(|(p, more)| {
            match_toks(toks, &p.chars().collect::<Vec<_>>()) && match_segs(rest, more)
        }),
    }
}

fn match_toks(toks: &[Tok], chars: &[char]) -> bool {
    match toks.split_first() {
        None => chars.is_empty(),
        Some((Tok::Star, rest)) => (0..=chars.len()).any(|k| match_toks(rest, &chars[k..])),
        Some((Tok::One, rest)) => !chars.is_empty() && match_toks(rest, &chars[1..]),
        Some((Tok::Char(c), rest)) => chars.first() == Some(c) && match_toks(rest, &chars[1..]),
    }
}

/// Whether some path matches both patterns.
#[must_use]
pub fn overlap(a: &WritePattern, b: &WritePattern) -> bool {
    let mut memo = HashMap::new();
    segs_meet(&a.segs, &b.segs, 0, 0, &mut memo)
}

/// Whether the segment sequences `a[i..]` and `b[j..]` can match one common path. `**` on
/// either side may take zero segments, or take one segment of the other side and stay.
fn segs_meet(
    a: &[Seg],
    b: &[Seg],
    i: usize,
    j: usize,
    memo: &mut HashMap<(usize, usize), bool>,
) -> bool {
    // Every move advances `i`, `j` or both, so there are no cycles to guard against.
    if let Some(&known) = memo.get(&(i, j)) {
        return known;
    }
    let result = match (a.get(i), b.get(j)) {
        (None, None) => true,
        (Some(Seg::Any), _) if segs_meet(a, b, i + 1, j, memo) => true,
        (_, Some(Seg::Any)) if segs_meet(a, b, i, j + 1, memo) => true,
        // `**` takes one (non-empty) segment that the other side's glob produces.
        (Some(Seg::Any), Some(Seg::Glob(_))) => segs_meet(a, b, i, j + 1, memo),
        (Some(Seg::Glob(_)), Some(Seg::Any)) => segs_meet(a, b, i + 1, j, memo),
        (Some(Seg::Any), Some(Seg::Any)) => false,
        (Some(Seg::Glob(x)), Some(Seg::Glob(y))) => {
            globs_meet(x, y) && segs_meet(a, b, i + 1, j + 1, memo)
        }
        (None, Some(Seg::Glob(_))) | (Some(Seg::Glob(_)), None) => false,
        (None, Some(Seg::Any)) | (Some(Seg::Any), None) => false,
    };
    memo.insert((i, j), result);
    result
}

/// Whether some non-empty segment matches both segment patterns.
fn globs_meet(x: &[Tok], y: &[Tok]) -> bool {
    // State: positions in x and y, and whether a character has been produced yet.
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![(0usize, 0usize, false)];
    while let Some(state @ (i, j, produced)) = stack.pop() {
        if !seen.insert(state) {
            continue;
        }
        match (x.get(i), y.get(j)) {
            (None, None) if produced => return true,
            _ => {}
        }
        if x.get(i) == Some(&Tok::Star) {
            stack.push((i + 1, j, produced));
        }
        if y.get(j) == Some(&Tok::Star) {
            stack.push((i, j + 1, produced));
        }
        // One character produced by both sides.
        let step = |t: Option<&Tok>, at: usize| match t {
            Some(Tok::Star) => Some(at),
            Some(Tok::One | Tok::Char(_)) => Some(at + 1),
            None => None,
        };
        let compatible = match (x.get(i), y.get(j)) {
            (Some(Tok::Char(c)), Some(Tok::Char(d))) => c == d,
            (Some(_), Some(_)) => true,
            _ => false,
        };
        if compatible && let (Some(ni), Some(nj)) = (step(x.get(i), i), step(y.get(j), j)) {
            stack.push((ni, nj, true));
        }
    }
    false
}

/// The write problems of a plan: invalid patterns, then every pair of steps that can run at the
/// same time (neither is an ancestor of the other in `deps`) whose declared writes overlap
/// while they share no lock. Each pair is reported once, with the first overlapping patterns.
pub(crate) fn conflicts(steps: &[Step], deps: &[Vec<usize>]) -> Vec<Problem> {
    let mut problems = Vec::new();
    let parsed: Vec<Vec<WritePattern>> = steps
        .iter()
        .map(|step| {
            step.writes
                .iter()
                .filter_map(|text| match WritePattern::parse(text) {
                    Ok(p) => Some(p),
                    Err(reason) => {
                        problems.push(Problem::InvalidWrite {
                            step: step.id.clone(),
                            pattern: text.clone(),
                            reason,
                        });
                        None
                    }
                })
                .collect()
        })
        .collect();
    if parsed.iter().all(Vec::is_empty) {
        return problems;
    }
    let ancestors: Vec<BTreeSet<usize>> = (0..steps.len())
        .map(|i| crate::graph::ancestors(deps, i).into_iter().collect())
        .collect();
    for (i, first) in steps.iter().enumerate() {
        for (j, second) in steps.iter().enumerate().skip(i + 1) {
            let ordered = ancestors[i].contains(&j) || ancestors[j].contains(&i);
            let share_lock = first.locks.iter().any(|l| second.locks.contains(l));
            if ordered || share_lock {
                continue;
            }
            let hit = parsed[i].iter().find_map(|a| {
                parsed[j]
                    .iter()
                    .find(|b| overlap(a, b))
                    .map(|b| (a.as_str().to_owned(), b.as_str().to_owned()))
            });
            if let Some((first_pattern, second_pattern)) = hit {
                problems.push(Problem::WriteConflict {
                    first: first.id.clone(),
                    first_pattern,
                    second: second.id.clone(),
                    second_pattern,
                });
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> WritePattern {
        WritePattern::parse(text).unwrap()
    }

    #[track_caller]
    fn check(a: &str, b: &str, expected: bool) {
        assert_eq!(overlap(&p(a), &p(b)), expected, "{a} ~ {b}");
        assert_eq!(overlap(&p(b), &p(a)), expected, "{b} ~ {a}");
    }

    #[test]
    fn overlaps() {
        check("Cargo.toml", "Cargo.toml", true);
        check("src/api/**", "src/**", true);
        check("src/api", "src/api/mod.rs", true);
        check("src/a.rs", "src/b.rs", false);
        check("src/*.rs", "src/lib.rs", true);
        check("src/*.rs", "src/lib.toml", false);
        check("**/*.md", "docs/guide.md", true);
        // Not .md itself, but `docs/guide.rs/x.md` would be beneath both: conservative.
        check("**/*.md", "docs/guide.rs", true);
        check("a/*/c", "a/b/d", false);
        check("a?c", "abc", true);
        check("a?c", "ac", false);
        check("*", "x", true);
        check("site", "site.tar", false);
        check("a*b", "*c", false);
        check("a*b", "*b", true);
        check("**", "anything/at/all", true);
    }

    #[test]
    fn bad_patterns() {
        for (text, err) in [
            ("", PatternError::Empty),
            ("/", PatternError::Absolute),
            ("/etc/passwd", PatternError::Absolute),
            ("a/../b", PatternError::BadSegment),
            ("./a", PatternError::BadSegment),
            ("a//b", PatternError::BadSegment),
            ("src**", PatternError::BadGlobstar),
            ("a\\b", PatternError::BadCharacter),
            ("a\0b", PatternError::BadCharacter),
        ] {
            assert_eq!(WritePattern::parse(text), Err(err), "{text:?}");
        }
    }

    #[test]
    fn matching_covers_what_is_beneath() {
        assert!(p("site").matches("site"));
        assert!(p("site").matches("site/out/x.html"));
        assert!(!p("site").matches("site.tar"));
        assert!(p("src/**/mod.rs").matches("src/mod.rs"));
        assert!(p("src/**/mod.rs").matches("src/a/b/mod.rs"));
        assert!(!p("src/**/mod.rs").matches("src/a/b/lib.rs"));
    }
}
