//! Any command-line agent, from a declaration (`backend = "cli"` and `[agents.NAME.cli]`):
//! how the prompt is passed (stdin, an argument, a file), which arguments make the program
//! non-interactive (the agent's `args`), how its final answer and its usage are read from its
//! output (the last line, all of it, a JSON field, a regular expression), and which state
//! directories under `HOME` it needs inside the kernel sandbox. ADR: "Any command-line agent
//! from a declaration".

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

use orca_core::Usage;

use super::Parsed;

/// The longest prompt passed as one argument: Linux refuses a single argument longer than
/// 128 KiB (`MAX_ARG_STRLEN`), and a run that cannot start is a worse failure than a clear
/// refusal.
const MAX_ARGUMENT_PROMPT: usize = 120 * 1024;

/// How the program gets its prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PromptVia {
    /// On stdin (no length limit, no quoting).
    #[default]
    Stdin,
    /// As one argument, after `prompt_flag` if one is declared, else last.
    Argument,
    /// As a file path, after `prompt_flag` if one is declared, else last: the path is
    /// `/dev/stdin` and the prompt goes to stdin, so it is never written to disk.
    File,
}

/// Where a value is read from the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    /// The last non-blank line.
    LastLine,
    /// All of stdout, trimmed.
    Stdout,
    /// A JSON pointer (RFC 6901) into the JSON values printed (one document or JSON lines; the
    /// last value holding it wins). A `*` segment sums (numbers) or joins (text) every member.
    Json(String),
    /// A regular expression over stdout: its first capture group (else the whole match) in
    /// the last match; for a token count, every match added up (a program printing its usage
    /// after each message). A number may end in `k` or `M` (`2.3k`).
    Regex(String),
}

impl Reading {
    /// Parses `last-line`, `stdout`, `json:/POINTER` or `regex:PATTERN`.
    ///
    /// # Errors
    ///
    /// Anything else, or a pattern that does not compile, as a message naming the forms.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text == "last-line" {
            return Ok(Self::LastLine);
        }
        if text == "stdout" {
            return Ok(Self::Stdout);
        }
        if let Some(pointer) = text.strip_prefix("json:") {
            if !(pointer.is_empty() || pointer.starts_with('/')) {
                return Err(format!(
                    "\"{text}\": a JSON pointer starts with `/` (json:/response)"
                ));
            }
            return Ok(Self::Json(pointer.to_owned()));
        }
        if let Some(pattern) = text.strip_prefix("regex:") {
            Regex::new(pattern).map_err(|e| format!("\"{text}\": {e}"))?;
            return Ok(Self::Regex(pattern.to_owned()));
        }
        Err(format!(
            "\"{text}\": expected last-line, stdout, json:/POINTER or regex:PATTERN"
        ))
    }
}

/// A command-line agent's declaration (validated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    /// How the prompt is passed.
    pub prompt_via: PromptVia,
    /// The flag before the prompt or its file (`--message-file`); `None`: the last argument.
    pub prompt_flag: Option<String>,
    /// Where the final answer is read.
    pub answer: Reading,
    /// Where the input tokens are read, if the program prints them.
    pub input_tokens: Option<Reading>,
    /// Where the output tokens are read, if the program prints them.
    pub output_tokens: Option<Reading>,
    /// The arguments of a read-only run (a question), instead of the agent's `args`; `None`:
    /// the program answers no questions.
    pub read_only_args: Option<Vec<String>>,
    /// Directories under `HOME` the program keeps its state in (writable in the sandbox).
    pub state_dirs: Vec<String>,
}

/// `[agents.NAME.cli]` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeclarationSettings {
    /// `stdin` (default), `argument` or `file`.
    pub prompt_via: Option<String>,
    /// The flag before the prompt (argument) or its file (file).
    pub prompt_flag: Option<String>,
    /// `last-line` (default), `stdout`, `json:/POINTER` or `regex:PATTERN`.
    pub answer: Option<String>,
    /// Where input tokens are read (same forms as `answer`).
    pub input_tokens: Option<String>,
    /// Where output tokens are read.
    pub output_tokens: Option<String>,
    /// The arguments of a read-only question; without them questions are refused.
    pub read_only_args: Option<Vec<String>>,
    /// State directories under `HOME` (relative, no `..`).
    pub state_dirs: Option<Vec<String>>,
}

impl DeclarationSettings {
    /// This layer's settings over `base`'s.
    #[must_use]
    pub fn merged_over(&self, base: &Self) -> Self {
        Self {
            prompt_via: self.prompt_via.clone().or_else(|| base.prompt_via.clone()),
            prompt_flag: self
                .prompt_flag
                .clone()
                .or_else(|| base.prompt_flag.clone()),
            answer: self.answer.clone().or_else(|| base.answer.clone()),
            input_tokens: self
                .input_tokens
                .clone()
                .or_else(|| base.input_tokens.clone()),
            output_tokens: self
                .output_tokens
                .clone()
                .or_else(|| base.output_tokens.clone()),
            read_only_args: self
                .read_only_args
                .clone()
                .or_else(|| base.read_only_args.clone()),
            state_dirs: self.state_dirs.clone().or_else(|| base.state_dirs.clone()),
        }
    }

    /// The validated declaration.
    ///
    /// # Errors
    ///
    /// `(field, message)`: the field under `cli.` that is wrong and why.
    pub fn validate(&self) -> Result<Declaration, (&'static str, String)> {
        let reading = |field: &'static str, v: &Option<String>| {
            v.as_deref()
                .map(Reading::parse)
                .transpose()
                .map_err(|m| (field, m))
        };
        let prompt_via = match self.prompt_via.as_deref() {
            None | Some("stdin") => PromptVia::Stdin,
            Some("argument") => PromptVia::Argument,
            Some("file") => PromptVia::File,
            Some(other) => {
                return Err((
                    "prompt_via",
                    format!("\"{other}\": expected stdin, argument or file"),
                ));
            }
        };
        if prompt_via == PromptVia::Stdin && self.prompt_flag.is_some() {
            return Err((
                "prompt_flag",
                "the prompt goes on stdin (prompt_via = \"stdin\"): no flag is passed; set prompt_via = \"argument\" or \"file\", or remove prompt_flag".to_owned(),
            ));
        }
        if let Some(flag) = &self.prompt_flag
            && flag.trim().is_empty()
        {
            return Err(("prompt_flag", "must not be empty".to_owned()));
        }
        let mut state_dirs = Vec::new();
        for dir in self.state_dirs.iter().flatten() {
            let path = std::path::Path::new(dir);
            let inside_home = !dir.is_empty()
                && path.is_relative()
                && path
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)));
            if !inside_home {
                return Err((
                    "state_dirs",
                    format!(
                        "\"{dir}\" must be a relative path inside HOME without `..` (\".gemini\")"
                    ),
                ));
            }
            state_dirs.push(dir.clone());
        }
        Ok(Declaration {
            prompt_via,
            prompt_flag: self.prompt_flag.clone(),
            answer: reading("answer", &self.answer)?.unwrap_or(Reading::LastLine),
            input_tokens: reading("input_tokens", &self.input_tokens)?,
            output_tokens: reading("output_tokens", &self.output_tokens)?,
            read_only_args: self.read_only_args.clone(),
            state_dirs,
        })
    }
}

impl Declaration {
    /// The arguments of one run: `args` (the agent's, or the read-only ones), then the prompt
    /// or its file where declared.
    ///
    /// # Errors
    ///
    /// A prompt too long to pass as one argument.
    pub(super) fn invocation(&self, args: &[String], prompt: &str) -> Result<Vec<String>, String> {
        let mut out = args.to_vec();
        let passed = match self.prompt_via {
            PromptVia::Stdin => None,
            PromptVia::Argument => {
                if prompt.len() > MAX_ARGUMENT_PROMPT {
                    return Err(format!(
                        "the prompt is {} bytes, more than {MAX_ARGUMENT_PROMPT} that can be passed as one argument; declare prompt_via = \"stdin\" or \"file\" if the program accepts it",
                        prompt.len()
                    ));
                }
                Some(prompt.to_owned())
            }
            PromptVia::File => Some("/dev/stdin".to_owned()),
        };
        if let Some(passed) = passed {
            out.extend(self.prompt_flag.iter().cloned());
            out.push(passed);
        }
        Ok(out)
    }

    /// What goes to the program's stdin: the prompt, except when it is an argument (then
    /// nothing: a program that reads a piped stdin sees its end at once).
    pub(super) fn stdin(&self, prompt: String) -> Vec<u8> {
        match self.prompt_via {
            PromptVia::Argument => Vec::new(),
            PromptVia::Stdin | PromptVia::File => prompt.into_bytes(),
        }
    }

    /// Reads the answer and usage from stdout.
    pub(super) fn parse(&self, stdout: &str) -> Parsed {
        let values = super::json_values(stdout);
        let mut parsed = Parsed {
            text: read_text(&self.answer, stdout, &values),
            ..Parsed::default()
        };
        if let Some(text) = parsed.text.clone() {
            parsed.answered(&text);
        }
        let tokens = |r: &Option<Reading>| match r {
            None => 0,
            // A program that prints its usage after each message (Aider): every line counts.
            Some(Reading::Regex(pattern)) => Regex::new(pattern).map_or(0, |re| {
                re.captures_iter(stdout)
                    .filter_map(|c| c.get(1).or_else(|| c.get(0)))
                    .filter_map(|m| number(m.as_str()))
                    .sum()
            }),
            Some(r) => read_text(r, stdout, &values)
                .and_then(|t| number(&t))
                .unwrap_or(0),
        };
        parsed.usage = Usage {
            input_tokens: tokens(&self.input_tokens),
            output_tokens: tokens(&self.output_tokens),
            ..Usage::default()
        };
        parsed
    }
}

/// The text `reading` finds in the output, if any.
fn read_text(reading: &Reading, stdout: &str, values: &[Value]) -> Option<String> {
    let text = match reading {
        Reading::LastLine => stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim().to_owned()),
        Reading::Stdout => Some(stdout.trim().to_owned()),
        Reading::Json(pointer) => values.iter().rev().find_map(|v| at(v, pointer)),
        Reading::Regex(pattern) => {
            let re = Regex::new(pattern).ok()?;
            re.captures_iter(stdout)
                .last()
                .and_then(|c| c.get(1).or_else(|| c.get(0)).map(|m| m.as_str().to_owned()))
        }
    };
    text.filter(|t| !t.trim().is_empty())
}

/// The value at `pointer` as text; a `*` segment sums or joins every member.
fn at(v: &Value, pointer: &str) -> Option<String> {
    let Some((head, rest)) = pointer.split_once("/*") else {
        return match v.pointer(pointer)? {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        };
    };
    let members: Vec<&Value> = match v.pointer(head)? {
        Value::Object(m) => m.values().collect(),
        Value::Array(a) => a.iter().collect(),
        _ => return None,
    };
    let found: Vec<String> = members.iter().filter_map(|m| at(m, rest)).collect();
    if found.is_empty() {
        return None;
    }
    let numbers: Option<Vec<u64>> = found.iter().map(|f| number(f)).collect();
    Some(numbers.map_or_else(|| found.join("\n"), |n| n.iter().sum::<u64>().to_string()))
}

/// A token count as printed: `1234`, `1,234`, `2.3k`, `1.2M`.
fn number(text: &str) -> Option<u64> {
    let t = text.trim().replace(',', "");
    let (digits, scale) = match t.char_indices().last()? {
        (i, 'k' | 'K') => (&t[..i], 1_000.0),
        (i, 'm' | 'M') => (&t[..i], 1_000_000.0),
        _ => (t.as_str(), 1.0),
    };
    let value: f64 = digits.trim().parse().ok()?;
    if !(value.is_finite() && value >= 0.0) {
        return None;
    }
    // A non-negative finite count, rounded (`as` saturates past `u64::MAX`).
    Some((value * scale).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn read(reading: &str, stdout: &str) -> Option<String> {
        let values = super::super::json_values(stdout);
        read_text(&Reading::parse(reading).unwrap(), stdout, &values)
    }

    #[test]
    fn readings() {
        assert_eq!(read("last-line", "a\nb\n\n").as_deref(), Some("b"));
        assert_eq!(read("stdout", "  a\nb \n").as_deref(), Some("a\nb"));
        let gemini = r#"{"response": "done", "stats": {"models": {"m1": {"tokens": {"prompt": 10, "candidates": 3}}, "m2": {"tokens": {"prompt": 5, "candidates": 2}}}}}"#;
        assert_eq!(read("json:/response", gemini).as_deref(), Some("done"));
        assert_eq!(
            read("json:/stats/models/*/tokens/prompt", gemini).as_deref(),
            Some("15")
        );
        assert_eq!(read("json:/missing", gemini), None);
        let aider = "Tokens: 2.3k sent, 150 received. Cost: $0.01\nmore\nTokens: 1,200 sent, 80 received.\n";
        let sent = read(r"regex:Tokens: ([\d.,]+[kM]?) sent", aider).unwrap();
        assert_eq!(number(&sent), Some(1200), "the last match");
        assert_eq!(number("2.3k"), Some(2300));
        assert_eq!(number("1.2M"), Some(1_200_000));
        assert_eq!(number("x"), None);
        for bad in ["json:response", "regex:(", "first-line", ""] {
            assert!(Reading::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn invocations() {
        let decl = |via, flag: Option<&str>| Declaration {
            prompt_via: via,
            prompt_flag: flag.map(str::to_owned),
            answer: Reading::LastLine,
            input_tokens: None,
            output_tokens: None,
            read_only_args: None,
            state_dirs: vec![],
        };
        let args = vec!["--yes".to_owned()];
        assert_eq!(
            decl(PromptVia::Stdin, None).invocation(&args, "p").unwrap(),
            ["--yes"]
        );
        assert_eq!(
            decl(PromptVia::Argument, Some("-p"))
                .invocation(&args, "p")
                .unwrap(),
            ["--yes", "-p", "p"]
        );
        assert_eq!(
            decl(PromptVia::File, Some("--message-file"))
                .invocation(&args, "p")
                .unwrap(),
            ["--yes", "--message-file", "/dev/stdin"]
        );
        assert!(
            decl(PromptVia::Argument, None)
                .invocation(&args, &"x".repeat(MAX_ARGUMENT_PROMPT + 1))
                .unwrap_err()
                .contains("prompt_via")
        );
        assert!(decl(PromptVia::Argument, None).stdin("p".into()).is_empty());
    }
}
