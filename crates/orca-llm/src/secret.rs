//! API keys: a newtype whose `Debug` and `Display` never show the key.

/// An API key. `Debug` and `Display` print `[redacted]`; use [`ApiKey::expose`] to send it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    #[must_use]
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key itself, for the request header only.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl std::fmt::Display for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_never_formatted() {
        let k = ApiKey::new("sk-secret-123");
        assert_eq!(format!("{k:?}"), "[redacted]");
        assert_eq!(format!("{k}"), "[redacted]");
        assert_eq!(k.expose(), "sk-secret-123");
    }
}
