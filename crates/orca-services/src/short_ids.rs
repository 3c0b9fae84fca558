//! Short ids for people: the shortest prefix of an id that is unique among the existing
//! records of its kind, never shorter than [`ShortIds::MIN_HEX`] hex digits (like git's
//! abbreviated hashes). Ids are UUIDv7, whose first digits are a timestamp, so plans created
//! close together share a long prefix: a fixed-length prefix would be ambiguous.
//!
//! A short id stays unique only while no new record shares it; resolving an ambiguous prefix
//! is an error that lists the candidates (`planning::resolve_prefix`).

/// The ids of one kind (`plan_…`, `exec_…`), sorted, to abbreviate any of them.
#[derive(Debug, Clone, Default)]
pub struct ShortIds {
    sorted: Vec<String>,
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
        Self { sorted }
    }

    /// Adds an id (one created after the listing was read).
    pub fn insert(&mut self, id: String) {
        if let Err(at) = self.sorted.binary_search(&id) {
            self.sorted.insert(at, id);
        }
    }

    /// The shortest unique prefix of `full` (its kind prefix, e.g. `plan_`, included), at least
    /// [`Self::MIN_HEX`] hex digits long, never ending in a `-`. An id not known is abbreviated
    /// against the known ones as if it were one of them.
    #[must_use]
    pub fn short(&self, full: &str) -> String {
        let kind_len = full.find('_').map_or(0, |i| i + 1);
        let lcp = |other: &str| {
            full.bytes()
                .zip(other.bytes())
                .take_while(|(a, b)| a == b)
                .count()
        };
        let at = match self.sorted.binary_search_by(|s| s.as_str().cmp(full)) {
            Ok(i) | Err(i) => i,
        };
        let mut shared = 0;
        for neighbour in [at.checked_sub(1), Some(at), Some(at + 1)]
            .into_iter()
            .flatten()
            .filter_map(|i| self.sorted.get(i))
            .filter(|s| s.as_str() != full)
        {
            shared = shared.max(lcp(neighbour));
        }
        let mut len = (shared + 1).max(kind_len + Self::MIN_HEX);
        while full.as_bytes().get(len.saturating_sub(1)) == Some(&b'-') {
            len += 1;
        }
        full.get(..len.min(full.len())).unwrap_or(full).to_owned()
    }

    /// Every known id that starts with `prefix`.
    #[must_use]
    pub fn matching(&self, prefix: &str) -> Vec<&str> {
        let start = self.sorted.partition_point(|s| s.as_str() < prefix);
        self.sorted[start..]
            .iter()
            .take_while(|s| s.starts_with(prefix))
            .map(String::as_str)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "plan_019a1b2c-3d4e-7aaa-8bbb-000000000001";
    const B: &str = "plan_019a1b2c-3d4e-7aaa-8bbb-000000000002";
    const C: &str = "plan_019a1b2c-3d4f-7ccc-8ddd-000000000003";
    const D: &str = "plan_029a1b2c-3d4f-7ccc-8ddd-000000000003";

    #[test]
    fn shortest_unique_prefix_of_at_least_eight_hex_digits() {
        let ids = ShortIds::new([A, B, C, D].map(str::to_owned));
        assert_eq!(ids.short(D), "plan_029a1b2c");
        assert_eq!(ids.short(C), "plan_019a1b2c-3d4f");
        assert_eq!(ids.short(A), A);
        assert_eq!(ids.short(B), B);
        // Every short id names exactly one known id.
        for id in [A, B, C, D] {
            assert_eq!(ids.matching(&ids.short(id)), vec![id]);
        }
    }

    #[test]
    fn never_ends_in_a_hyphen_and_unknown_ids_are_abbreviated_too() {
        let ids = ShortIds::new([C.to_owned()]);
        let other = "plan_019a1b2c-0000-7000-8000-000000000000";
        // Shares `plan_019a1b2c-` with C: the cut after the hyphen moves one further.
        assert_eq!(ids.short(other), "plan_019a1b2c-0");
        assert_eq!(ShortIds::default().short(A), "plan_019a1b2c");
    }
}
