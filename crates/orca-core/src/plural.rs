//! Counts in words, the same on every surface: `1 step`, `2 steps`, `0 entries`.

/// `n` and the noun for it: `count(1, "entry", "entries")` is `1 entry`.
#[must_use]
pub fn count<N>(n: N, one: &str, many: &str) -> String
where
    N: std::fmt::Display + PartialEq + From<u8>,
{
    let noun = if n == N::from(1) { one } else { many };
    format!("{n} {noun}")
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(0, "entry", "entries"), "0 entries");
        assert_eq!(count(1, "entry", "entries"), "1 entry");
        assert_eq!(count(2_usize, "step", "steps"), "2 steps");
        assert_eq!(count(1_u64, "entry", "entries"), "1 entry");
    }
}
