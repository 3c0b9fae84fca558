//! The redaction property: a secret placed anywhere in any output — plain text (stdout, plain
//! logs), a JSON document (state files, audit entries, `--json`), a JSON log line redacted
//! after formatting, a Debug-formatted value — split across lines where its shape can be, or
//! JSON-escaped, never appears. Known secrets (exact values) may sit anywhere, glued to any
//! text; shapes (keys nobody told orca about) are recognised at a word boundary.

#![expect(clippy::unwrap_used, reason = "tests")]

use orca_core::redact::Redactor;
use proptest::prelude::*;
use serde_json::json;

/// A placed secret: the text to embed, the secret parts that must not survive, and whether
/// it is registered as a known value (else it must be caught by its shape).
#[derive(Debug, Clone)]
struct Planted {
    text: String,
    secrets: Vec<String>,
    known: bool,
}

fn token(chars: &'static str, len: std::ops::RangeInclusive<usize>) -> BoxedStrategy<String> {
    proptest::collection::vec(proptest::sample::select(chars.as_bytes().to_vec()), len)
        .prop_map(|b| String::from_utf8(b).unwrap())
        .boxed()
}

const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const UPPER_DIGIT: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const KEYISH: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn shaped() -> BoxedStrategy<Planted> {
    let plain = |text: String| Planted {
        secrets: vec![text.clone()],
        text,
        known: false,
    };
    prop_oneof![
        // OpenAI / Anthropic keys.
        (
            prop_oneof![Just("sk-"), Just("sk-proj-"), Just("sk-ant-api03-")],
            token(KEYISH, 20..=60)
        )
            .prop_map(move |(p, t)| plain(format!("{p}{t}"))),
        // GitHub tokens.
        (
            prop_oneof![Just("ghp_"), Just("gho_"), Just("ghs_"), Just("ghu_")],
            token(ALNUM, 36..=36)
        )
            .prop_map(move |(p, t)| plain(format!("{p}{t}"))),
        token(ALNUM, 22..=60).prop_map(move |t| plain(format!("github_pat_{t}"))),
        // AWS access key ids.
        (
            prop_oneof![Just("AKIA"), Just("ASIA")],
            token(UPPER_DIGIT, 16..=16)
        )
            .prop_map(move |(p, t)| plain(format!("{p}{t}"))),
        // Slack tokens.
        (
            prop_oneof![
                Just("xoxa-"),
                Just("xoxb-"),
                Just("xoxp-"),
                Just("xoxr-"),
                Just("xoxs-")
            ],
            token(KEYISH, 10..=40)
        )
            .prop_map(move |(p, t)| plain(format!("{p}{t}"))),
        // AWS secret keys, labelled.
        (
            prop_oneof![
                Just("aws_secret_access_key = "),
                Just("AWS_SECRET_ACCESS_KEY="),
                Just("\"aws_secret_access_key\": \""),
                Just("SecretAccessKey: "),
            ],
            token(B64, 40..=40)
        )
            .prop_map(|(label, v)| Planted {
                text: format!("{label}{v}"),
                secrets: vec![v],
                known: false,
            }),
        // Bearer tokens, on the same line or the next.
        (
            prop_oneof![
                Just("Authorization: Bearer "),
                Just("authorization: bearer "),
                Just("Bearer\n"),
                Just("Bearer \r\n  "),
            ],
            token(
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/",
                8..=60
            )
        )
            .prop_map(|(label, v)| Planted {
                text: format!("{label}{v}"),
                secrets: vec![v],
                known: false,
            }),
        // PEM private keys, across lines.
        (
            prop_oneof![
                Just("RSA "),
                Just("EC "),
                Just(""),
                Just("OPENSSH "),
                Just("ENCRYPTED ")
            ],
            proptest::collection::vec(token(B64, 16..=64), 1..=5)
        )
            .prop_map(|(kind, lines)| Planted {
                text: format!(
                    "-----BEGIN {kind}PRIVATE KEY-----\n{}\n-----END {kind}PRIVATE KEY-----",
                    lines.join("\n")
                ),
                secrets: lines,
                known: false,
            }),
        // URLs with passwords.
        (
            prop_oneof![Just("https"), Just("postgres"), Just("redis")],
            token(ALNUM, 3..=10),
            token(KEYISH, 8..=30)
        )
            .prop_map(|(scheme, user, pass)| Planted {
                text: format!("{scheme}://{user}:{pass}@db.example:5432/x"),
                secrets: vec![pass],
                known: false,
            }),
    ]
    .boxed()
}

/// A known secret (a configured key, an env file value…): any printable text, maybe spanning
/// lines, glued to anything.
fn known() -> BoxedStrategy<Planted> {
    (
        "[A-Za-z0-9!#$%&()*+,./:;<=>?@^_`{|}~\"'\\\\é漢-]{8,30}",
        proptest::option::of("[A-Za-z0-9\"\\\\ ]{0,5}\n[A-Za-z0-9\"\\\\]{8,20}"),
    )
        .prop_map(|(a, b)| {
            let text = match b {
                Some(b) => format!("{a}{b}"),
                None => a,
            };
            let mut secrets = vec![text.clone()];
            secrets.extend(
                text.lines()
                    .map(|l| l.trim().to_owned())
                    .filter(|l| l.len() >= 8),
            );
            Planted {
                text,
                secrets,
                known: true,
            }
        })
        .boxed()
}

fn filler() -> BoxedStrategy<String> {
    "[ -~\n\t é]{0,40}".boxed()
}

/// Bytes that end a word (so a shape starts or ends there).
fn separator() -> BoxedStrategy<String> {
    prop_oneof![
        Just(" "),
        Just("\n"),
        Just("\t"),
        Just("\""),
        Just("'"),
        Just("="),
        Just(": "),
        Just(","),
        Just("("),
        Just("["),
    ]
    .prop_map(str::to_owned)
    .boxed()
}

/// The forms a secret can take in an output.
fn forms(secret: &str) -> Vec<String> {
    let json = serde_json::to_string(secret).unwrap();
    let debug = format!("{secret:?}");
    vec![
        secret.to_owned(),
        json[1..json.len() - 1].to_owned(),
        debug[1..debug.len() - 1].to_owned(),
    ]
}

/// Every output a text can reach, redacted the way orca redacts it there.
fn outputs(r: &Redactor, text: &str) -> Vec<(&'static str, String)> {
    let doc = json!({"summary": text, "nested": [{"output": text}], "token": text});
    vec![
        ("plain text (stdout, plain logs)", r.redact(text)),
        (
            "json document (audit, --json)",
            serde_json::to_string(&r.redact_json(doc.clone())).unwrap(),
        ),
        (
            "stored document (state and result files)",
            serde_json::to_string_pretty(&r.redact_strings(doc)).unwrap(),
        ),
        (
            "json log line, redacted after formatting",
            r.redact(&json!({"level": "WARN", "fields": {"message": text}}).to_string()),
        ),
        ("debug-formatted", r.redact(&format!("error: {text:?}"))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn a_secret_never_survives_redaction(
        planted in prop_oneof![shaped(), known()],
        before in filler(),
        after in filler(),
        sep_before in separator(),
        sep_after in separator(),
    ) {
        let r = if planted.known {
            Redactor::new().with_secrets([planted.text.as_str()])
        } else {
            Redactor::new()
        };
        let text = format!("{before}{sep_before}{}{sep_after}{after}", planted.text);
        let mut leaks = Vec::new();
        for (name, out) in outputs(&r, &text) {
            for secret in &planted.secrets {
                for form in forms(secret) {
                    if out.contains(&form) {
                        leaks.push(format!("{form:?} in {name}: {out}"));
                    }
                }
            }
        }
        prop_assert!(leaks.is_empty(), "{} leaks: {:#?}", leaks.len(), leaks);
    }

    /// Text without secrets comes out unchanged (redaction does not eat ordinary output).
    #[test]
    fn ordinary_text_is_kept(text in "[a-z0-9 .,:()\n-]{0,80}") {
        prop_assert_eq!(Redactor::new().redact(&text), text);
    }
}

#[test]
fn known_secrets_glued_to_text_are_found() {
    let r = Redactor::new().with_secrets(["hunter2-but-longer"]);
    let out = r.redact("xxhunter2-but-longeryy");
    assert_eq!(out, "xx[redacted]yy");
}
