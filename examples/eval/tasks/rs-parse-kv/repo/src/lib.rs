/// `key=value` → `(key, value)`.
pub fn parse_kv(line: &str) -> Option<(&str, &str)> {
    let (k, v) = line.split_once('=').unwrap();
    Some((k, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(parse_kv("a=b"), Some(("a", "b")));
    }
}
