//! Short ids for people. Ids are UUIDv7: their first digits are a timestamp, so everything
//! created within a minute shares its first 8 hex digits, and a plan and its execution share
//! even more. A short id is therefore the kind and the **last** hex digits of the uuid (its
//! random part): `exec_…` + at least [`ShortIds::MIN_HEX`] of them, as many as it takes to name
//! no other known id (`exec_7c41d09e2f3a`). Things created together get unrelated short ids,
//! and a short id printed once stays unique unless a later id happens to end the same (one
//! chance in 2³² per pair).
//!
//! A text names an id when the id's uuid **starts** with it (a prefix, as typed: `exec_019a`)
//! or, for texts of at least [`ShortIds::MIN_HEX`] digits, **ends** with it (a short id as
//! printed): [`names`]. Resolving a text that names several ids is an error that lists them
//! (`planning::resolve_prefix`).

/// Whether `text` (with or without the kind `prefix`) names the id `full` (`prefix` + uuid):
/// the uuid starts with it, or ends with it and it has at least [`ShortIds::MIN_HEX`] digits.
#[must_use]
pub fn names(full: &str, prefix: &str, text: &str) -> bool {
    let text = text.strip_prefix(prefix).unwrap_or(text);
    let Some(uuid) = full.strip_prefix(prefix) else {
        return false;
    };
    uuid.starts_with(text) || (text.len() >= ShortIds::MIN_HEX && uuid.ends_with(text))
}

/// The ids of one kind (`plan_…`, `exec_…`), to abbreviate any of them.
#[derive(Debug, Clone, Default)]
pub struct ShortIds {
    /// The full ids, sorted (prefix matches are a range).
    sorted: Vec<String>,
    /// The full ids reversed, sorted (suffix matches are a range).
    reversed: Vec<String>,
}

fn reverse(text: &str) -> String {
    text.chars().rev().collect()
}

/// The ids in `sorted` starting with `prefix`.
fn range<'a>(sorted: &'a [String], prefix: &str) -> &'a [String] {
    let start = sorted.partition_point(|s| s.as_str() < prefix);
    let len = sorted[start..]
        .iter()
        .take_while(|s| s.starts_with(prefix))
        .count();
    &sorted[start..start + len]
}

impl ShortIds {
    /// The fewest hex digits of the uuid a short id keeps.
    pub const MIN_HEX: usize = 8;

    /// The known ids (full text forms, e.g. `plan_019a…`).
    #[must_use]
    pub fn new(ids: impl IntoIterator<Item = String>) -> Self {
        let mut sorted: Vec<String> = ids.into_iter().collect();
        sorted.sort();
        sorted.dedup();
        let mut reversed: Vec<String> = sorted.iter().map(|s| reverse(s)).collect();
        reversed.sort();
        Self { sorted, reversed }
    }

    /// Adds an id (one created after the listing was read).
    pub fn insert(&mut self, id: String) {
        let rev = reverse(&id);
        if let Err(at) = self.sorted.binary_search(&id) {
            self.sorted.insert(at, id);
        }
        if let Err(at) = self.reversed.binary_search(&rev) {
            self.reversed.insert(at, rev);
        }
    }

    /// The short id of `full`: its kind prefix (`plan_`) and the fewest last hex digits of its
    /// uuid, at least [`Self::MIN_HEX`], that name no other known id (see [`names`]); never
    /// starting with a `-`. An id not known is abbreviated against the known ones as if it
    /// were one of them; `full` itself if no tail is unique.
    #[must_use]
    pub fn short(&self, full: &str) -> String {
        let kind_len = full.find('_').map_or(0, |i| i + 1);
        let (kind, uuid) = full.split_at(kind_len);
        for n in Self::MIN_HEX..uuid.len() {
            let Some(tail) = uuid.get(uuid.len() - n..) else {
                break;
            };
            if tail.starts_with('-') {
                continue;
            }
            let candidate = format!("{kind}{tail}");
            if self.matching(&candidate).iter().all(|m| *m == full) {
                return candidate;
            }
        }
        full.to_owned()
    }

    /// Every known id that `text` (with its kind prefix) names (see [`names`]), in order.
    #[must_use]
    pub fn matching(&self, text: &str) -> Vec<&str> {
        let kind_len = text.find('_').map_or(0, |i| i + 1);
        let (kind, hex) = text.split_at(kind_len);
        let mut found: Vec<&str> = range(&self.sorted, text)
            .iter()
            .map(String::as_str)
            .collect();
        if hex.len() >= Self::MIN_HEX {
            let rev = reverse(hex);
            for r in range(&self.reversed, &rev) {
                // `r` is a whole id reversed.
                let full = reverse(r);
                if full.starts_with(kind)
                    && let Ok(i) = self.sorted.binary_search(&full)
                {
                    found.push(self.sorted[i].as_str());
                }
            }
        }
        found.sort_unstable();
        found.dedup();
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "plan_019a1b2c-3d4e-7aaa-8bbb-000000000001";
    const B: &str = "plan_019a1b2c-3d4e-7aaa-8bbb-100000000001";
    const C: &str = "plan_019a1b2c-3d4f-7ccc-8ddd-0000a0000003";
    const D: &str = "plan_029a1b2c-3d4f-7ccc-8ddd-000000000004";

    #[test]
    fn the_fewest_last_digits_that_name_one_id() {
        let ids = ShortIds::new([A, B, C, D].map(str::to_owned));
        assert_eq!(ids.short(D), "plan_00000004");
        assert_eq!(ids.short(C), "plan_a0000003");
        // A and B end alike for eleven digits.
        assert_eq!(ids.short(A), "plan_000000000001");
        assert_eq!(ids.short(B), "plan_100000000001");
        // Every short id names exactly one known id, and so does a typed prefix.
        for id in [A, B, C, D] {
            assert_eq!(ids.matching(&ids.short(id)), vec![id]);
        }
        assert_eq!(ids.matching("plan_029a"), vec![D]);
        assert_eq!(ids.matching("plan_019a1b2c"), vec![A, B, C]);
        // A suffix needs eight digits: `0004` is no id's prefix, and too short for a suffix.
        assert!(ids.matching("plan_0004").is_empty());
    }

    #[test]
    fn never_starts_with_a_hyphen_and_unknown_ids_are_abbreviated_too() {
        let x = "plan_019a1b2c-3d4e-7aaa-8bbb-123456789abc";
        let y = "plan_019a1b2c-3d4e-7aaa-9bbb-123456789abc";
        let ids = ShortIds::new([x.to_owned(), y.to_owned()]);
        // The last group is shared: the tail grows past the hyphen, never starting with it.
        assert_eq!(ids.short(x), "plan_8bbb-123456789abc");
        assert_eq!(ShortIds::default().short(A), "plan_00000001");
        assert!(names(A, "plan_", "00000001"));
        assert!(names(A, "plan_", "plan_019a"));
        assert!(!names(A, "plan_", "0001"));
        assert!(!names(A, "exec_", "00000001"));
    }
}
