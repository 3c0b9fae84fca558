//! "Did you mean …?" for names a person typed: the closest known name by edit distance, if it
//! is close enough to be a typo.

/// The edit distance (insertions, deletions, substitutions) between `a` and `b`, by characters.
#[must_use]
pub fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The candidate closest to `word` when it is within a typo's reach (at most a third of the
/// word's length, at least 1, at most 3); the first of equals.
#[must_use]
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let reach = (word.chars().count() / 3).clamp(1, 3);
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .map(|c| (distance(word, c), c))
        .filter(|(d, _)| *d <= reach)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::{closest, distance};

    #[test]
    fn typos_find_their_word_and_strangers_find_nothing() {
        assert_eq!(distance("shel", "shell"), 1);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        let agents = ["coder", "shell", "tester", "reviewer"];
        assert_eq!(closest("shel", agents), Some("shell"));
        assert_eq!(closest("tseter", agents), Some("tester"));
        assert_eq!(closest("wizard", agents), None);
        assert_eq!(closest("x", agents), None);
    }
}
