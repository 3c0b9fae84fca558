//! Small string helpers.

/// `s` with its first character in upper case.
pub fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capitalizes() {
        assert_eq!(capitalize("orca"), "Orca");
        assert_eq!(capitalize(""), "");
    }
}
