//! The shapes of credentials, known or not (see the module docs of [`super`]): where in a text
//! they are. Scanned in place, case-insensitively, without a lowercased copy of the text
//! (every string of every document written goes through here).

use super::REDACTED;

pub(super) fn replace_ranges(text: &str, ranges: &[(usize, usize)]) -> String {
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
pub(super) fn ranges(text: &str) -> Vec<(usize, usize)> {
    ranges_with(text, true)
}

/// Whether `bytes` at `i` starts with `lower` (lowercase), ASCII case ignored.
fn starts_ci(bytes: &[u8], i: usize, lower: &[u8]) -> bool {
    bytes
        .get(i..i + lower.len())
        .is_some_and(|w| w.eq_ignore_ascii_case(lower))
}

/// [`ranges`]; `labels`: also labelled values (`password: …`).
pub(super) fn ranges_with(text: &str, labels: bool) -> Vec<(usize, usize)> {
    scan(text, labels, next_word)
}

/// Where a word can start next after `i` (see [`boundary`]): inside a word none can, so the
/// rest of the word is skipped — but for the word right after an escaped line break or tab
/// (`\ntoken`: the `n` is alphanumeric, the word starts one byte later).
fn next_word(bytes: &[u8], i: usize) -> usize {
    let b = bytes[i];
    if !b.is_ascii_alphanumeric()
        || (i >= 1 && bytes[i - 1] == b'\\' && matches!(b, b'n' | b'r' | b't'))
    {
        return i + 1;
    }
    let mut j = i + 1;
    while j < bytes.len() && bytes[j].is_ascii_alphanumeric() {
        j += 1;
    }
    j
}

/// [`ranges_with`], looking at the positions `next` leads to ([`next_word`]; every one, in
/// the test that checks the two agree).
fn scan(text: &str, labels: bool, next: fn(&[u8], usize) -> usize) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut ranges = Vec::new();
    let run =
        |from: usize, ok: &dyn Fn(u8) -> bool| bytes[from..].iter().take_while(|b| ok(**b)).count();
    let mut i = 0;
    while i < bytes.len() {
        let first = bytes[i].to_ascii_lowercase();
        // Every shape and label starts with one of these bytes (case-insensitive).
        if !matches!(
            first,
            b'a' | b'b' | b'c' | b'g' | b'p' | b'r' | b's' | b't' | b'x' | b'-'
        ) || !boundary(bytes, i)
        {
            i = next(bytes, i);
            continue;
        }
        let mut matched: Option<usize> = None;
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
                starts_ci(bytes, i, prefix)
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
        if starts_ci(bytes, i, b"-----begin ")
            && let Some(range) = pem_block(text, i)
        {
            i = range.1;
            ranges.push(range);
            continue;
        }
        if starts_ci(bytes, i, b"bearer") {
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
        if labels && let Some((start, end)) = labelled(bytes, i) {
            ranges.push((start, end));
            i = end.max(i + 1);
            continue;
        }
        i = next(bytes, i);
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
fn labelled(bytes: &[u8], i: usize) -> Option<(usize, usize)> {
    // The label may continue a name (`AWS_SECRET_ACCESS_KEY`, `GITHUB_TOKEN`) after `_`.
    if !boundary(bytes, i) {
        return None;
    }
    for (label, min, to_eol) in LABELS {
        let label = label.as_bytes();
        if label.first().copied() != bytes.get(i).map(u8::to_ascii_lowercase)
            || !starts_ci(bytes, i, label)
        {
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

/// Where `needle` first occurs in `haystack` (`None` for an empty needle).
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut at = 0;
    while let Some(p) = haystack.get(at..)?.iter().position(|&b| b == first) {
        let start = at + p;
        if haystack.get(start + 1..)?.starts_with(rest) {
            return Some(start);
        }
        at = start + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

#[cfg(test)]
mod skipping {
    use proptest::prelude::*;

    /// Skipping the inside of words finds exactly what looking at every byte finds.
    fn every_byte(_: &[u8], i: usize) -> usize {
        i + 1
    }

    proptest! {
        #[test]
        fn skipping_words_finds_what_every_byte_finds(
            parts in proptest::collection::vec(proptest::sample::select(vec![
                "token", "TOKEN", "x", "ab", "sk-", "abcdefghijklmnop", "ghp_", "AKIA",
                "1234567890ABCDEF", "bearer", "Bearer ", "\\n", "\\t", "\\", "\n", " ", "=",
                ":", "\"", "_", "-", "password", "api_key", "-----BEGIN RSA PRIVATE KEY-----",
                "-----END RSA PRIVATE KEY-----", "https://u:p4ss@h", "é", "xoxb-", "secret",
                "ntoken", "Authorization: ", "GITHUB_TOKEN=", "ghs_0123456789abcdefXYZ",
            ]), 0..24),
            labels in any::<bool>(),
        ) {
            let text: String = parts.concat();
            prop_assert_eq!(
                super::scan(&text, labels, super::next_word),
                super::scan(&text, labels, every_byte),
                "{:?}", text
            );
        }
    }
}
