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
        let ranges = shape_ranges(current);
        if ranges.is_empty() {
            return out;
        }
        Some(replace_ranges(current, &ranges))
    }

    /// Whether `text` holds a known secret or a credential shape.
    #[must_use]
    pub fn finds_secret(&self, text: &str) -> bool {
        self.needles.iter().any(|n| text.contains(n.as_str())) || !shape_ranges(text).is_empty()
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

    fn walk(&self, value: Value, by_key: bool, keep: &[&str]) -> Value {
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
                            self.walk(v, by_key, keep)
                        };
                        let k = if keep.contains(&k.as_str()) {
                            k
                        } else {
                            self.redact_cow(k)
                        };
                        (k, v)
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(
                items
                    .into_iter()
                    .map(|v| self.walk(v, by_key, keep))
                    .collect(),
            ),
            Value::String(s) => Value::String(self.redact_cow(s)),
            other => other,
        }
    }

    fn redact_cow(&self, s: String) -> String {
        self.redact_changed(&s).unwrap_or(s)
    }
}

/// Whether a string contains a credential shape (see the module docs).
#[must_use]
pub fn looks_like_secret(text: &str) -> bool {
    !shape_ranges(text).is_empty()
}

/// `text` with every credential shape replaced by [`REDACTED`] (no exact values).
#[must_use]
pub fn redact_shapes(text: &str) -> String {
    let ranges = shape_ranges(text);
    if ranges.is_empty() {
        return text.to_owned();
    }
    replace_ranges(text, &ranges)
}

fn replace_ranges(text: &str, ranges: &[(usize, usize)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for &(start, end) in ranges {
        out.push_str(&text[at..start]);
        out.push_str(REDACTED);
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// Whether a word can start at `i`: at the start, after a non-alphanumeric byte, or after an
/// escaped line break or tab (`\n`, `\r`, `\t`: the text is inside a JSON string).
fn boundary(bytes: &[u8], i: usize) -> bool {
    i == 0
        || !bytes[i - 1].is_ascii_alphanumeric()
        || (i >= 2 && bytes[i - 2] == b'\\' && matches!(bytes[i - 1], b'n' | b'r' | b't'))
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// Prefixed tokens: (prefix, case-sensitive, minimum length of the rest).
const PREFIXES: &[(&str, bool, usize)] = &[
    ("sk-", false, 8),
    ("ghp_", true, 16),
    ("gho_", true, 16),
    ("ghs_", true, 16),
    ("ghu_", true, 16),
    ("ghr_", true, 16),
    ("github_pat_", true, 16),
    ("xoxa-", true, 8),
    ("xoxb-", true, 8),
    ("xoxp-", true, 8),
    ("xoxr-", true, 8),
    ("xoxs-", true, 8),
];

/// Byte ranges to replace, sorted and merged. Every range starts and ends at a char boundary
/// (the matchers only stop at ASCII bytes).
fn shape_ranges(text: &str) -> Vec<(usize, usize)> {
    shape_ranges_with(text, true)
}

/// Whether `text` holds an unmistakable credential: a prefixed key or token (`sk-…`, `ghp_…`,
/// `AKIA…`, `xoxb-…`), a `Bearer` token, a PEM private key or a URL password — the shapes
/// without labels (`password: …` in prose is not enough). Plans are checked with it.
#[must_use]
pub fn holds_credential(text: &str) -> bool {
    !shape_ranges_with(text, false).is_empty()
}

fn shape_ranges_with(text: &str, labels: bool) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let lower = text.to_ascii_lowercase();
    let lower = lower.as_bytes();
    let mut ranges = Vec::new();
    let word_start = |i: usize| boundary(bytes, i);
    let run =
        |from: usize, ok: &dyn Fn(u8) -> bool| bytes[from..].iter().take_while(|b| ok(**b)).count();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &lower[i..];
        // Every shape and label starts with one of these bytes (case-insensitive).
        if !word_start(i)
            || !matches!(
                lower[i],
                b'a' | b'b' | b'c' | b'g' | b'p' | b'r' | b's' | b't' | b'x' | b'-'
            )
        {
            i += 1;
            continue;
        }
        let mut matched: Option<usize> = None;
        let first = lower[i];
        for (prefix, case_sensitive, min) in PREFIXES {
            let prefix = prefix.as_bytes();
            // Every prefix is lowercase: one that starts otherwise cannot match here (prose
            // has a candidate at nearly every word; this skips most comparisons).
            if prefix.first() != Some(&first) {
                continue;
            }
            let hit = if *case_sensitive {
                bytes[i..].starts_with(prefix)
            } else {
                rest.starts_with(prefix)
            };
            if hit {
                let n = run(i + prefix.len(), &is_token_byte);
                if n >= *min {
                    matched = Some(i + prefix.len() + n);
                    break;
                }
            }
        }
        if matched.is_none() && (bytes[i..].starts_with(b"AKIA") || bytes[i..].starts_with(b"ASIA"))
        {
            let n = run(i + 4, &|b: u8| b.is_ascii_uppercase() || b.is_ascii_digit());
            let end = i + 4 + n;
            if n >= 16 && bytes.get(end).is_none_or(|b| !b.is_ascii_alphanumeric()) {
                matched = Some(end);
            }
        }
        if let Some(end) = matched {
            ranges.push((i, end));
            i = end;
            continue;
        }
        if rest.starts_with(b"-----begin ")
            && let Some(range) = pem_block(text, i)
        {
            i = range.1;
            ranges.push(range);
            continue;
        }
        if rest.starts_with(b"bearer") {
            // `Bearer` + whitespace (the token may be on the next line, or after an escaped
            // newline `\n` in JSON) + the token.
            let mut j = i + 6;
            let mut gap = 0;
            loop {
                if j < bytes.len() && bytes[j].is_ascii_whitespace() {
                    j += 1;
                    gap += 1;
                } else if bytes[j..].starts_with(b"\\n") || bytes[j..].starts_with(b"\\r") {
                    j += 2;
                    gap += 1;
                } else {
                    break;
                }
            }
            let n = run(j, &|b: u8| {
                b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b)
            });
            if gap > 0 && n >= 1 {
                ranges.push((j, j + n));
                i = j + n;
                continue;
            }
        }
        if labels && let Some((start, end)) = labelled(bytes, lower, i) {
            ranges.push((start, end));
            i = end.max(i + 1);
            continue;
        }
        i += 1;
    }
    ranges.extend(url_passwords(bytes));
    merge(ranges)
}

fn merge(mut ranges: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    ranges.retain(|(s, e)| e > s);
    ranges.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (s, e) in ranges {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// A PEM private key block starting at `start`: up to its `-----END … PRIVATE KEY-----` line,
/// or to the end of the text if it was cut off.
fn pem_block(text: &str, start: usize) -> Option<(usize, usize)> {
    let lower = text[start..].to_ascii_lowercase();
    let header_end = lower[11..].find("-----")? + 11;
    let header = &lower[..header_end];
    if !header.ends_with("private key") || header.contains('\n') {
        return None;
    }
    let after = header_end + 5;
    let end = match lower[after..].find("-----end ") {
        Some(e) => {
            let tail = after + e + 9;
            lower[tail..]
                .find("-----")
                .map_or(text.len() - start, |close| tail + close + 5)
        }
        None => text.len() - start,
    };
    Some((start, start + end))
}

/// Labels whose value is a secret: `(label, minimum value length, value runs to the end of
/// the line)`.
const LABELS: &[(&str, usize, bool)] = &[
    ("authorization", 1, true),
    ("proxy-authorization", 1, true),
    ("aws_secret_access_key", 8, false),
    ("secret_access_key", 8, false),
    ("secretaccesskey", 8, false),
    ("aws_session_token", 8, false),
    ("session_token", 8, false),
    ("client_secret", 8, false),
    ("private_key", 8, false),
    ("access_token", 8, false),
    ("refresh_token", 8, false),
    ("auth_token", 8, false),
    ("x-api-key", 8, false),
    ("x_api_key", 8, false),
    ("api_key", 8, false),
    ("api-key", 8, false),
    ("apikey", 8, false),
    ("password", 1, false),
    ("passwd", 1, false),
    ("secret", 8, false),
    ("token", 8, false),
];

/// A labelled value at `i`: `label` then quotes/spaces, `:` or `=`, quotes/spaces, the value.
/// Returns the value's range.
fn labelled(bytes: &[u8], lower: &[u8], i: usize) -> Option<(usize, usize)> {
    // The label may continue a name (`AWS_SECRET_ACCESS_KEY`, `GITHUB_TOKEN`) after `_`.
    if !boundary(bytes, i) {
        return None;
    }
    for (label, min, to_eol) in LABELS {
        let label = label.as_bytes();
        if label.first() != lower.get(i) || !lower[i..].starts_with(label) {
            continue;
        }
        let mut j = i + label.len();
        // The label must end the name: `token` but not `tokens`, `GITHUB_TOKEN` but not
        // `TOKEN_COUNT`.
        if bytes.get(j).is_some_and(|b| is_token_byte(*b)) {
            continue;
        }
        let skip = |j: &mut usize| {
            while *j < bytes.len() && matches!(bytes[*j], b'"' | b'\'' | b'\\' | b' ' | b'\t') {
                *j += 1;
            }
        };
        skip(&mut j);
        if j >= bytes.len() || !matches!(bytes[j], b':' | b'=') {
            continue;
        }
        j += 1;
        skip(&mut j);
        if bytes[j..].starts_with(REDACTED.as_bytes()) {
            return None;
        }
        let start = j;
        let stop: &[u8] = if *to_eol {
            b"\r\n\"'"
        } else {
            b"\r\n\"' \t,;&}])"
        };
        let mut end = start;
        // An escape sequence (`\"`, `\n`: the value is inside a JSON string) ends the value;
        // a lone backslash does not.
        while end < bytes.len()
            && !stop.contains(&bytes[end])
            && !(bytes[end] == b'\\'
                && matches!(bytes.get(end + 1), Some(b'"' | b'n' | b'r' | b't' | b'\\')))
        {
            end += 1;
        }
        if end - start >= *min {
            return Some((start, end));
        }
        return None;
    }
    None
}

/// The passwords of URLs with credentials: `scheme://user:PASSWORD@host`.
fn url_passwords(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(pos) = find(&bytes[from..], b"://") {
        let userinfo = from + pos + 3;
        let stop = |b: u8| b.is_ascii_whitespace() || b"/?#@\"'<>`\\".contains(&b);
        let mut j = userinfo;
        while j < bytes.len() && !stop(bytes[j]) && bytes[j] != b':' {
            j += 1;
        }
        if j < bytes.len() && bytes[j] == b':' {
            let pass = j + 1;
            let mut k = pass;
            while k < bytes.len() && !stop(bytes[k]) {
                k += 1;
            }
            // `user:$TOKEN@host` names a variable: not a secret.
            if k < bytes.len() && bytes[k] == b'@' && k > pass && bytes[pass] != b'$' {
                out.push((pass, k));
            }
        }
        from = userinfo;
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// The scan skips a prefix or label whose first byte is not the word's, lowercased: sound
    /// only while every one of them is written in lowercase.
    #[test]
    fn prefixes_and_labels_are_lowercase() {
        for (p, _, _) in PREFIXES {
            assert_eq!(*p, p.to_ascii_lowercase(), "prefix {p}");
        }
        for (l, _, _) in LABELS {
            assert_eq!(*l, l.to_ascii_lowercase(), "label {l}");
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
