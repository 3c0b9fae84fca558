//! Redaction: the one rule applied wherever text leaves orca's memory (state and result files,
//! audit entries, logs, error messages, `--json`).
//!
//! A [`Redactor`] replaces, with [`REDACTED`]:
//!
//! - the **exact values** of every secret orca knows (configured keys, values of environment
//!   variables named like secrets, values read from key files and key commands), also in their
//!   JSON-escaped form and, for a value spanning lines, line by line;
//! - the **shapes** of common credentials, known or not: OpenAI / Anthropic keys (`sk-…`), GitHub
//!   tokens (`ghp_`, `gho_`, `ghs_`, `ghu_`, `ghr_`, `github_pat_`), AWS access key ids
//!   (`AKIA…`, `ASIA…`), Slack tokens (`xoxb-`…), `Bearer …` (also with the token on the next
//!   line), `Authorization: …`, labelled values (`aws_secret_access_key = …`, `password: …`,
//!   `"api_key": "…"`, `…_TOKEN=…`), PEM private key blocks, and the password of a URL
//!   (`scheme://user:pass@host`).
//!
//! Pure: no I/O. The caller gathers the secrets.

mod shapes;

use std::sync::Arc;

use serde_json::Value;

/// The text that replaces a redacted secret.
pub const REDACTED: &str = "[redacted]";

/// Exact values shorter than this are not registered: they are too short to be keys, and
/// replacing them everywhere would garble the output.
pub const MIN_SECRET_LEN: usize = 8;

/// JSON keys whose values are always redacted (compared case-insensitively, `-` and `_` alike).
const SECRET_KEYS: &[&str] = &[
    "api_key",
    "apikey",
    "authorization",
    "token",
    "access_token",
    "refresh_token",
    "password",
    "secret",
    "client_secret",
    "x_api_key",
    "secret_access_key",
    "aws_secret_access_key",
    "private_key",
];

/// Whether a JSON key names a secret.
#[must_use]
pub fn is_secret_key(key: &str) -> bool {
    let norm = key.to_ascii_lowercase().replace('-', "_");
    SECRET_KEYS.contains(&norm.as_str())
}

/// Whether an environment variable's name says it holds a secret (`OPENAI_API_KEY`,
/// `GITHUB_TOKEN`, `AWS_SECRET_ACCESS_KEY`, `DB_PASSWORD`, `*_CREDENTIALS`, `*_AUTH*`…).
#[must_use]
pub fn is_secret_env_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let auth = upper.contains("AUTH") && (!upper.contains("AUTHOR") || upper.contains("AUTHORIZ"));
    auth || [
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "PRIVATE",
        "_PAT",
        "COOKIE",
    ]
    .iter()
    .any(|part| upper.contains(part))
}

/// Whether the value of a variable *named* like a secret is worth redacting by value: at least
/// 12 characters, not a path, with a letter and a digit or symbol (so `SSH_AUTH_SOCK`'s socket
/// path or `KEYMAP=us` are left alone and do not garble ordinary output).
#[must_use]
pub fn plausible_secret_value(value: &str) -> bool {
    let v = value.trim();
    v.len() >= 12
        && !v.starts_with('/')
        && !v.starts_with("~/")
        && v.chars().any(|c| c.is_alphabetic())
        && v.chars()
            .any(|c| c.is_ascii_digit() || c.is_ascii_punctuation())
}

/// The redaction rule, holding the exact secret values it knows. Cloning is cheap.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Needles, longest first (so a longer secret containing a shorter one goes whole).
    needles: Arc<Vec<String>>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("needles", &self.needles.len())
            .finish()
    }
}

impl Redactor {
    /// A redactor with the shape rules only.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the exact values of `secrets` (builder style). Values shorter than
    /// [`MIN_SECRET_LEN`] (after trimming) are ignored.
    #[must_use]
    pub fn with_secrets<I, S>(mut self, secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.add_secrets(secrets);
        self
    }

    /// Adds exact secret values.
    pub fn add_secrets<I, S>(&mut self, secrets: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut needles: Vec<String> = self.needles.as_ref().clone();
        for secret in secrets {
            let secret = secret.as_ref().trim();
            let mut forms = vec![secret.to_owned()];
            // A value spanning lines may be printed one line at a time.
            if secret.contains('\n') {
                forms.extend(secret.lines().map(|l| l.trim().to_owned()));
            }
            let mut escaped = Vec::new();
            for form in &forms {
                if let Ok(json) = serde_json::to_string(form) {
                    let inner = &json[1..json.len() - 1];
                    if inner != form {
                        escaped.push(inner.to_owned());
                    }
                }
                let debug = format!("{form:?}");
                let inner = &debug[1..debug.len() - 1];
                if inner != form {
                    escaped.push(inner.to_owned());
                }
            }
            forms.extend(escaped);
            for form in forms {
                if form.len() >= MIN_SECRET_LEN && !needles.contains(&form) {
                    needles.push(form);
                }
            }
        }
        needles.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        self.needles = Arc::new(needles);
    }

    /// Adds the secrets another redactor knows.
    pub fn merge(&mut self, other: &Self) {
        let theirs = other.needles.as_ref().clone();
        self.add_secrets(theirs);
    }

    /// How many exact forms (values, escaped forms, lines) it replaces.
    #[must_use]
    pub fn known(&self) -> usize {
        self.needles.len()
    }

    /// `text` with every known secret and every credential shape replaced by [`REDACTED`].
    #[must_use]
    pub fn redact(&self, text: &str) -> String {
        self.redact_changed(text).unwrap_or_else(|| text.to_owned())
    }

    /// The redacted text, or `None` if nothing had to be replaced (one scan either way).
    fn redact_changed(&self, text: &str) -> Option<String> {
        let mut out: Option<String> = None;
        for needle in self.needles.iter() {
            let current = out.as_deref().unwrap_or(text);
            if current.contains(needle.as_str()) {
                out = Some(current.replace(needle.as_str(), REDACTED));
            }
        }
        let current = out.as_deref().unwrap_or(text);
        let ranges = shapes::ranges(current);
        if ranges.is_empty() {
            return out;
        }
        Some(shapes::replace_ranges(current, &ranges))
    }

    /// Whether `text` holds a known secret or a credential shape.
    #[must_use]
    pub fn finds_secret(&self, text: &str) -> bool {
        self.needles.iter().any(|n| text.contains(n.as_str())) || !shapes::ranges(text).is_empty()
    }

    /// Redacts a JSON value: every string (and object key) as [`Redactor::redact`] does, and
    /// the whole value of any key named like a secret (`api_key`, `authorization`, `token`,
    /// `password`…). For audit entries and `--json` output.
    #[must_use]
    pub fn redact_json(&self, value: Value) -> Value {
        self.walk(value, true, &[])
    }

    /// Redacts every string (and object key) of a JSON value, leaving the structure and keys
    /// named like secrets alone. For stored documents, whose fields have fixed meanings (a
    /// lease's `token` is not a credential).
    #[must_use]
    pub fn redact_strings(&self, value: Value) -> Value {
        self.walk(value, false, &[])
    }

    /// [`Redactor::redact_strings`], keeping the strings (and lists of strings) under the
    /// object keys in `keep` as they are: identifiers, tags and times, whose values are
    /// validated and never free text, so a document always reads back.
    #[must_use]
    pub fn redact_document(&self, value: Value, keep: &[&str]) -> Value {
        self.walk(value, false, keep)
    }

    fn walk(&self, mut value: Value, by_key: bool, keep: &[&str]) -> Value {
        self.walk_in_place(&mut value, by_key, keep);
        value
    }

    /// Redacts `value` where it lies: a string is replaced only when something in it was, an
    /// object rebuilt only when one of its keys has to change (every document written goes
    /// through here; copying each whole tree was most of its cost).
    fn walk_in_place(&self, value: &mut Value, by_key: bool, keep: &[&str]) {
        let plain = |v: &Value| match v {
            Value::String(_) => true,
            Value::Array(items) => items.iter().all(Value::is_string),
            _ => false,
        };
        match value {
            Value::Object(map) => {
                let mut rename = false;
                for (k, v) in map.iter_mut() {
                    let kept = keep.contains(&k.as_str());
                    if by_key && is_secret_key(k) && !v.is_null() {
                        *v = Value::String(REDACTED.to_owned());
                    } else if !(kept && plain(v)) {
                        self.walk_in_place(v, by_key, keep);
                    }
                    rename = rename || (!kept && self.redact_changed(k).is_some());
                }
                if rename {
                    // In order, a later key winning over an earlier one redacted to the same.
                    *map = std::mem::take(map)
                        .into_iter()
                        .map(|(k, v)| {
                            if keep.contains(&k.as_str()) {
                                (k, v)
                            } else {
                                (self.redact_cow(k), v)
                            }
                        })
                        .collect();
                }
            }
            Value::Array(items) => {
                for v in items {
                    self.walk_in_place(v, by_key, keep);
                }
            }
            Value::String(s) => {
                if let Some(redacted) = self.redact_changed(s) {
                    *s = redacted;
                }
            }
            _ => {}
        }
    }

    fn redact_cow(&self, s: String) -> String {
        self.redact_changed(&s).unwrap_or(s)
    }
}

/// Whether a string contains a credential shape (see the module docs).
#[must_use]
pub fn looks_like_secret(text: &str) -> bool {
    !shapes::ranges(text).is_empty()
}

/// `text` with every credential shape replaced by [`REDACTED`] (no exact values).
#[must_use]
pub fn redact_shapes(text: &str) -> String {
    let ranges = shapes::ranges(text);
    if ranges.is_empty() {
        return text.to_owned();
    }
    shapes::replace_ranges(text, &ranges)
}

/// Whether `text` holds an unmistakable credential: a prefixed key or token (`sk-…`, `ghp_…`,
/// `AKIA…`, `xoxb-…`), a `Bearer` token, a PEM private key or a URL password — the shapes
/// without labels (`password: …` in prose is not enough). Plans are checked with it.
#[must_use]
pub fn holds_credential(text: &str) -> bool {
    !shapes::ranges_with(text, false).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[track_caller]
    fn hides(text: &str, secret: &str) {
        let out = Redactor::new().redact(text);
        assert!(!out.contains(secret), "{text:?} -> {out:?}");
        assert!(out.contains(REDACTED), "{out}");
    }

    #[track_caller]
    fn keeps(text: &str) {
        assert_eq!(Redactor::new().redact(text), text);
    }

    #[test]
    fn shapes() {
        hides("key sk-proj-abcdefgh12345678 here", "abcdefgh12345678");
        hides("x-api-key: sk-ant-api03-abcdefghijkl", "api03-abcdefghijkl");
        hides(
            "ghp_abcdefghijklmnopqrstuvwxyz0123",
            "abcdefghijklmnopqrstuvwxyz0123",
        );
        hides(
            "pat=github_pat_11AAAAAAA0abcdefghijkl_mnop",
            "11AAAAAAA0abcdefghijkl",
        );
        hides("id AKIAIOSFODNN7EXAMPLE.", "IOSFODNN7EXAMPLE");
        hides(
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "wJalrXUtnFEMI",
        );
        hides(
            "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG",
            "wJalrXUtnFEMI",
        );
        hides("xoxb-1234-5678-abcdefgh", "1234-5678-abcdefgh");
        hides("Authorization: Bearer abc.def-ghi", "abc.def-ghi");
        hides("authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz");
        hides("Bearer\n  tok123", "tok123");
        hides("{\"password\":\"hunter2\"}", "hunter2");
        hides("GITHUB_TOKEN=abcdefgh1234", "abcdefgh1234");
        hides("postgres://me:s3cr3t@db:5432/x", "s3cr3t");
        hides(
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\ndef==\n-----END RSA PRIVATE KEY-----\nafter",
            "MIIEabc",
        );
        hides(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1r",
            "b3BlbnNzaC1r",
        );
        keeps("task-analysis-report and max_tokens: 100 and input_tokens=5");
        keeps("https://example.com/path?x=1 and user@host and a:b");
        keeps("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----");
        keeps("sk-short and ghp_short");
    }

    #[test]
    fn exact_values_and_escaped_forms() {
        let r = Redactor::new().with_secrets([
            "my\"weird\\secret-value",
            "short",
            "line one x\nline two y",
        ]);
        let out = r.redact("a my\"weird\\secret-value b");
        assert!(!out.contains("weird"), "{out}");
        let json = serde_json::to_string("a my\"weird\\secret-value b").unwrap();
        assert!(!r.redact(&json).contains("weird"), "{json}");
        assert!(r.redact("short").contains("short"));
        assert!(!r.redact("x line two y").contains("line two y"));
    }

    #[test]
    fn json_by_key_and_strings_only() {
        let r = Redactor::new();
        let v = serde_json::json!({"token": "abc", "nested": {"Api-Key": 5, "ok": "sk-abcdefghijk"}, "n": null});
        let out = r.redact_json(v.clone());
        assert_eq!(out["token"], REDACTED);
        assert_eq!(out["nested"]["Api-Key"], REDACTED);
        assert_eq!(out["nested"]["ok"], REDACTED);
        let doc = r.redact_strings(v);
        assert_eq!(doc["token"], "abc");
        assert_eq!(doc["nested"]["ok"], REDACTED);
    }

    /// The first walk, which rebuilt every tree: what [`Redactor::walk`] must still return.
    fn walk_by_copy(r: &Redactor, value: Value, by_key: bool, keep: &[&str]) -> Value {
        let plain = |v: &Value| match v {
            Value::String(_) => true,
            Value::Array(items) => items.iter().all(Value::is_string),
            _ => false,
        };
        match value {
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| {
                        let v = if by_key && is_secret_key(&k) && !v.is_null() {
                            Value::String(REDACTED.to_owned())
                        } else if keep.contains(&k.as_str()) && plain(&v) {
                            v
                        } else {
                            walk_by_copy(r, v, by_key, keep)
                        };
                        let k = if keep.contains(&k.as_str()) {
                            k
                        } else {
                            r.redact_cow(k)
                        };
                        (k, v)
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(
                items
                    .into_iter()
                    .map(|v| walk_by_copy(r, v, by_key, keep))
                    .collect(),
            ),
            Value::String(s) => Value::String(r.redact_cow(s)),
            other => other,
        }
    }

    fn json() -> impl Strategy<Value = Value> {
        let words = proptest::sample::select(vec![
            "the parser",
            "sk-abcdefghijklmnop",
            "password: hunter2",
            "Bearer abc.def",
            "postgres://me:s3cr3t@db/x",
            "ghp_abcdefghijklmnopqrstuvwxyz0123",
            "ok",
            "",
            "my-known-secret-value",
            "AKIAIOSFODNN7EXAMPLE",
        ]);
        let keys = proptest::sample::select(vec![
            "token",
            "Api-Key",
            "id",
            "status",
            "summary",
            "sk-abcdefghijklmnop",
            "password: hunter2",
            "ok",
            "my-known-secret-value",
            "a",
        ]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::from),
            any::<bool>().prop_map(Value::from),
            words.prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec((keys.clone(), inner), 0..6).prop_map(|kv| {
                    Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
                }),
            ]
        })
    }

    proptest::proptest! {
        /// In place or by copy, the same redacted document, for every way of walking.
        #[test]
        fn walking_in_place_is_walking_by_copy(value in json()) {
            let r = Redactor::new().with_secrets(["my-known-secret-value"]);
            for (by_key, keep) in [(true, &[][..]), (false, &[][..]), (false, &["id", "status"][..])] {
                proptest::prop_assert_eq!(
                    r.walk(value.clone(), by_key, keep),
                    walk_by_copy(&r, value.clone(), by_key, keep)
                );
            }
        }
    }

    #[test]
    fn idempotent() {
        let r = Redactor::new();
        for t in ["password: hunter2", "Bearer abc", "sk-abcdefghijkl"] {
            let once = r.redact(t);
            assert_eq!(r.redact(&once), once);
        }
    }
}
