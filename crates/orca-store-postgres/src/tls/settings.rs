//! The TLS settings of a store URL: libpq's `sslmode`, `sslrootcert`, `sslcert` and `sslkey`,
//! taken out of the URL (`postgres://…?sslmode=…` or `key=value …`) before the driver reads
//! the rest (it knows only `disable`, `prefer` and `require`, and none of the files).

use std::path::PathBuf;

use orca_store::StoreError;

/// How a connection is protected: libpq's `sslmode` values (`allow` is not supported).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS if the server offers it, unverified.
    Prefer,
    /// TLS or nothing, unverified (verified like `verify-ca` when `sslrootcert` is given).
    Require,
    /// TLS, the certificate chains to `sslrootcert`.
    VerifyCa,
    /// `verify-ca`, and the certificate names the host.
    VerifyFull,
}

impl SslMode {
    /// The value as written in a URL.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    fn parse(value: &str) -> Result<Self, StoreError> {
        Ok(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => {
                return Err(StoreError::Invalid(format!(
                    "store url: sslmode={other}: expected disable, prefer, require, verify-ca or \
                     verify-full"
                )));
            }
        })
    }

    pub(super) const fn driver(self) -> tokio_postgres::config::SslMode {
        match self {
            Self::Disable => tokio_postgres::config::SslMode::Disable,
            Self::Prefer => tokio_postgres::config::SslMode::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        }
    }
}

/// The TLS settings of a store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// `sslmode` (default `prefer`).
    pub mode: SslMode,
    /// `sslrootcert`: the CA certificates (PEM) a verified server's certificate chains to.
    pub root_cert: Option<PathBuf>,
    /// `sslcert`: a client certificate (PEM) to present.
    pub client_cert: Option<PathBuf>,
    /// `sslkey`: its private key (PEM).
    pub client_key: Option<PathBuf>,
}

/// The settings this module reads; everything else goes to the driver.
const KEYS: &[&str] = &["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// Splits a URL (`postgres://…?sslmode=…` or libpq's `key=value …`) into the TLS settings and
/// the rest.
pub(super) fn split(url: &str) -> Result<(String, Vec<(String, String)>), StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else {
            return Ok((url.to_owned(), Vec::new()));
        };
        let mut kept = Vec::new();
        let mut ours = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if KEYS.contains(&key) {
                ours.push((key.to_owned(), percent_decode(value)?));
            } else {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        Ok((rest, ours))
    } else {
        let mut rest = String::new();
        let mut ours = Vec::new();
        for (key, value, raw) in key_values(url)? {
            if KEYS.contains(&key.as_str()) {
                ours.push((key, value));
            } else {
                rest.push_str(raw);
                rest.push(' ');
            }
        }
        Ok((rest.trim_end().to_owned(), ours))
    }
}

fn percent_decode(value: &str) -> Result<String, StoreError> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    StoreError::Invalid(format!("store url: bad percent-encoding in {value}"))
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| StoreError::Invalid(format!("store url: {value} is not utf-8 once decoded")))
}

/// libpq's `key = value` pairs: (key, value unquoted, the pair as written).
fn key_values(text: &str) -> Result<Vec<(String, String, &str)>, StoreError> {
    let bad = |what: &str| StoreError::Invalid(format!("store url: {what}"));
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let at = |i: usize| chars.get(i).map(|(_, c)| *c);
    let offset = |i: usize| chars.get(i).map_or(text.len(), |(o, _)| *o);
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while at(i).is_some_and(char::is_whitespace) {
            i += 1;
        }
        let Some(_) = at(i) else { break };
        let start = i;
        while at(i).is_some_and(|c| c != '=' && !c.is_whitespace()) {
            i += 1;
        }
        let key: String = chars[start..i].iter().map(|(_, c)| c).collect();
        while at(i).is_some_and(char::is_whitespace) {
            i += 1;
        }
        if at(i) != Some('=') {
            return Err(bad(&format!("`{key}` has no `=value`")));
        }
        i += 1;
        while at(i).is_some_and(char::is_whitespace) {
            i += 1;
        }
        let mut value = String::new();
        if at(i) == Some('\'') {
            i += 1;
            loop {
                match at(i) {
                    None => return Err(bad(&format!("the value of `{key}` has no closing quote"))),
                    Some('\'') => {
                        i += 1;
                        break;
                    }
                    Some('\\') => {
                        value.extend(at(i + 1));
                        i += 2;
                    }
                    Some(c) => {
                        value.push(c);
                        i += 1;
                    }
                }
            }
        } else {
            while let Some(c) = at(i).filter(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(at(i + 1));
                    i += 2;
                } else {
                    value.push(c);
                    i += 1;
                }
            }
        }
        out.push((key, value, &text[offset(start)..offset(i)]));
    }
    Ok(out)
}

impl TlsSettings {
    pub(super) fn from_pairs(pairs: Vec<(String, String)>) -> Result<Self, StoreError> {
        let mut settings = Self {
            mode: SslMode::Prefer,
            root_cert: None,
            client_cert: None,
            client_key: None,
        };
        let mut mode_given = false;
        for (key, value) in pairs {
            match key.as_str() {
                "sslmode" => {
                    settings.mode = SslMode::parse(&value)?;
                    mode_given = true;
                }
                "sslrootcert" => settings.root_cert = Some(PathBuf::from(value)),
                "sslcert" => settings.client_cert = Some(PathBuf::from(value)),
                _ => settings.client_key = Some(PathBuf::from(value)),
            }
        }
        // libpq 16's rule: the system's CAs vouch for any name they signed, so only with the
        // name checked; it is also the default mode then.
        if settings.system_roots() {
            if !mode_given {
                settings.mode = SslMode::VerifyFull;
            } else if settings.mode != SslMode::VerifyFull {
                return Err(StoreError::Invalid(format!(
                    "store url: sslrootcert=system needs sslmode=verify-full (not {})",
                    settings.mode.as_str()
                )));
            }
        }
        Ok(settings)
    }

    /// `sslrootcert=system`: the operating system's trusted CAs.
    pub(super) fn system_roots(&self) -> bool {
        self.root_cert
            .as_deref()
            .is_some_and(|p| p.as_os_str() == "system")
    }

    /// Whether the server's certificate is checked against a CA (and which file holds it).
    pub(super) fn verifying(&self) -> bool {
        self.mode >= SslMode::VerifyCa
            || (self.mode == SslMode::Require && self.root_cert.is_some())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn settings(url: &str) -> (String, TlsSettings) {
        let (rest, pairs) = split(url).unwrap();
        (rest, TlsSettings::from_pairs(pairs).unwrap())
    }

    #[test]
    fn url_settings_are_taken_out_and_the_rest_kept() {
        let (rest, s) = settings(
            "postgres://u:p@db:5433/orca?application_name=x&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca%20x.crt",
        );
        assert_eq!(rest, "postgres://u:p@db:5433/orca?application_name=x");
        assert_eq!(s.mode, SslMode::VerifyFull);
        assert_eq!(s.root_cert.as_deref(), Some(Path::new("/tmp/ca x.crt")));
        let (rest, s) = settings("postgres://db/orca");
        assert_eq!(rest, "postgres://db/orca");
        assert_eq!(s.mode, SslMode::Prefer, "libpq's default");
        let (rest, s) = settings("postgresql://db/orca?sslmode=require");
        assert_eq!(rest, "postgresql://db/orca");
        assert_eq!(s.mode, SslMode::Require);
        assert!(!s.verifying());
    }

    #[test]
    fn system_roots_mean_verify_full() {
        let (_, s) = settings("postgres://db/orca?sslrootcert=system");
        assert_eq!(s.mode, SslMode::VerifyFull);
        assert!(s.system_roots());
        let (_, pairs) = split("postgres://db/orca?sslrootcert=system&sslmode=require").unwrap();
        let err = TlsSettings::from_pairs(pairs).unwrap_err();
        assert!(
            err.to_string()
                .contains("sslrootcert=system needs sslmode=verify-full"),
            "{err}"
        );
    }

    #[test]
    fn key_value_settings_are_taken_out_and_the_rest_kept() {
        let (rest, s) = settings(
            "host=db port=5433 sslmode = verify-ca sslrootcert='/tmp/my ca.crt' password='a b\\'c' sslcert=/c sslkey=/k",
        );
        assert_eq!(rest, "host=db port=5433 password='a b\\'c'");
        assert_eq!(s.mode, SslMode::VerifyCa);
        assert_eq!(s.root_cert.as_deref(), Some(Path::new("/tmp/my ca.crt")));
        assert_eq!(s.client_cert.as_deref(), Some(Path::new("/c")));
        assert_eq!(s.client_key.as_deref(), Some(Path::new("/k")));
        let config: tokio_postgres::Config = rest.parse().unwrap();
        assert_eq!(config.get_password(), Some(&b"a b'c"[..]));
    }
}
