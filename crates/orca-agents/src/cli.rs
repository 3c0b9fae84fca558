//! Command-line coding agents run as subprocesses with JSON output: Claude Code
//! (`claude -p --output-format json`), Codex (`codex exec --json`), opencode
//! (`opencode run --format json`). Unknown output lines are skipped; the process group is
//! killed on timeout and when the future is dropped.

use std::path::Path;
use std::time::Duration;

use orca_core::{
    AgentAnswer, ErrorCode, NoTools, QuestionRequest, Reply, TaskFailure, TaskRequest, TaskResult,
    TaskSuccess, ToolHost, Usage,
};
use serde_json::Value;

use crate::agent_loop::task_message;
use crate::process::{self, OUTPUT_CAP, RunEnd, RunSpec};
use crate::profile::Profile;
use crate::step_env::EnvPolicy;

/// The `ORCA_*` identity variables of a step's process.
use crate::sandbox::SandboxPolicy;

/// Which command-line agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CliKind {
    /// Claude Code.
    ClaudeCode,
    /// OpenAI Codex CLI.
    Codex,
    /// opencode.
    Opencode,
}

impl CliKind {
    /// The backend name used in config (`claude-code`, `codex`, `opencode`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ClaudeCode => "claude-code",
            Self::Codex => "codex",
            Self::Opencode => "opencode",
        }
    }

    /// Where the agent keeps its own state, relative to the home directory: writable in the
    /// kernel sandbox besides the project.
    #[must_use]
    pub const fn state_dirs(self) -> &'static [&'static str] {
        match self {
            Self::ClaudeCode => &[".claude", ".cache/claude", ".config/claude"],
            Self::Codex => &[".codex"],
            Self::Opencode => &[
                ".local/share/opencode",
                ".local/state/opencode",
                ".config/opencode",
                ".cache/opencode",
            ],
        }
    }

    /// The default executable.
    #[must_use]
    pub const fn default_program(self) -> &'static str {
        match self {
            Self::ClaudeCode => "claude",
            Self::Codex => "codex",
            Self::Opencode => "opencode",
        }
    }
}

/// How to run a command-line agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliSpec {
    /// Which agent.
    pub kind: CliKind,
    /// The executable (name on `PATH` or a path).
    pub program: String,
    /// The model to ask for, if any.
    pub model: Option<String>,
}

impl CliSpec {
    /// The default executable of `kind`.
    #[must_use]
    pub fn new(kind: CliKind) -> Self {
        Self {
            kind,
            program: kind.default_program().to_owned(),
            model: None,
        }
    }

    fn args(&self, prompt: String) -> Vec<String> {
        let mut args: Vec<String> = match self.kind {
            CliKind::ClaudeCode => vec!["-p".into(), "--output-format".into(), "json".into()],
            CliKind::Codex => vec!["exec".into(), "--json".into()],
            CliKind::Opencode => vec!["run".into(), "--format".into(), "json".into()],
        };
        if let Some(m) = &self.model {
            args.push("--model".into());
            args.push(m.clone());
        }
        args.push(prompt);
        args
    }
}

/// A command-line agent.
#[derive(Debug, Clone)]
pub struct CliAgent {
    spec: CliSpec,
}

/// What was parsed from the agent's output.
#[derive(Debug, Default, PartialEq, Eq)]
struct Parsed {
    text: Option<String>,
    error: Option<String>,
    usage: Usage,
}

const RESULT_INSTRUCTIONS: &str = "When you are done, end your final message with a JSON object in a ```json block: \
{\"status\": \"success\", \"summary\": \"...\", \"relevant_files\": [...]} or \
{\"status\": \"failure\", \"code\": \"task_failed\", \"message\": \"...\"}.";

impl CliAgent {
    /// An agent run per `spec`.
    #[must_use]
    pub const fn new(spec: CliSpec) -> Self {
        Self { spec }
    }

    async fn run(
        &self,
        root: &Path,
        prompt: String,
        timeout: Option<Duration>,
        env: Vec<(String, String)>,
        sandbox: Option<&SandboxPolicy>,
        caller: &dyn ToolHost,
    ) -> Result<Parsed, TaskFailure> {
        let program = self.spec.program.clone();
        let sandbox = sandbox.map(|s| s.clone().with_home_dirs(self.spec.kind.state_dirs()));
        let run = process::run_captured(RunSpec {
            program: &program,
            args: self.spec.args(prompt),
            cwd: root,
            env,
            timeout,
            cap: OUTPUT_CAP,
            owner: Some(caller),
            sandbox: sandbox.as_ref(),
        })
        .await;
        let status = match run.end {
            RunEnd::SpawnFailed(err) => {
                return Err(TaskFailure::new(
                    ErrorCode::AgentError,
                    format!(
                        "cannot run `{program}` ({}): is it installed and on PATH?",
                        self.spec.kind.as_str()
                    ),
                )
                .with_cause(err.to_string()));
            }
            RunEnd::TimedOut => {
                let mut f = TaskFailure::new(
                    ErrorCode::Timeout,
                    format!("`{program}` timed out; its process group was ended"),
                );
                f.output = Some(run.output);
                return Err(f);
            }
            RunEnd::Exited(status) => status,
        };
        let parsed = parse_output(self.spec.kind, &run.stdout);
        if !status.success() {
            let mut f = TaskFailure::new(
                ErrorCode::AgentError,
                format!(
                    "`{program}` exited with status {}",
                    status
                        .code()
                        .map_or_else(|| "killed".to_owned(), |c| c.to_string())
                ),
            );
            f.cause = parsed
                .error
                .or_else(|| Some(process::tail(&run.output, 5, 500)));
            f.output = Some(run.output);
            return Err(f);
        }
        if let Some(error) = parsed.error {
            let mut f = TaskFailure::new(
                ErrorCode::AgentError,
                format!("`{program}` reported an error"),
            )
            .with_cause(error);
            f.output = Some(run.output);
            return Err(f);
        }
        if parsed.text.is_none() {
            let mut f = TaskFailure::new(
                ErrorCode::ParseError,
                format!("no result found in the JSON output of `{program}`"),
            );
            f.output = Some(run.output);
            return Err(f);
        }
        Ok(parsed)
    }

    /// Carries out a step.
    pub(crate) async fn run_task(
        &self,
        root: &Path,
        profile: &Profile,
        request: &TaskRequest,
        policy: &EnvPolicy,
        sandbox: Option<&SandboxPolicy>,
        tools: &dyn ToolHost,
    ) -> Reply<TaskResult> {
        let prompt = format!(
            "{}\n\n{}\n\n{RESULT_INSTRUCTIONS}",
            profile.prompt,
            task_message(request)
        );
        let timeout = request.timeout.or_else(|| {
            request
                .budget
                .min(&profile.limits)
                .max_wall_secs
                .map(Duration::from_secs)
        });
        let env = policy.build(&profile.id, &request.step.env, request.identity().env());
        match self.run(root, prompt, timeout, env, sandbox, tools).await {
            Err(f) => Reply::new(TaskResult::Failure(f)),
            Ok(parsed) => {
                let text = parsed.text.unwrap_or_default();
                let outcome = result_from_text(&text);
                Reply {
                    outcome,
                    usage: parsed.usage,
                    session: None,
                }
            }
        }
    }

    /// Asks a question.
    pub(crate) async fn ask(
        &self,
        root: &Path,
        profile: &Profile,
        request: &QuestionRequest,
        policy: &EnvPolicy,
        sandbox: Option<&SandboxPolicy>,
    ) -> Reply<Result<AgentAnswer, TaskFailure>> {
        let prompt = format!(
            "{}\n\nA read-only question (do not change anything):\n\n{}",
            profile.prompt, request.question
        );
        let timeout = request
            .budget
            .min(&profile.limits)
            .max_wall_secs
            .map(Duration::from_secs);
        let env = policy.build(&profile.id, &[], Vec::new());
        match self
            .run(root, prompt, timeout, env, sandbox, &NoTools)
            .await
        {
            Err(f) => Reply::new(Err(f)),
            Ok(parsed) => Reply {
                outcome: Ok(AgentAnswer {
                    answer: parsed.text.unwrap_or_default(),
                    session_id: None,
                }),
                usage: parsed.usage,
                session: None,
            },
        }
    }
}

/// A task result from the agent's final text: a ```json block holding a `TaskResult` if there
/// is one, else a success whose summary is the tail of the text.
fn result_from_text(text: &str) -> TaskResult {
    let candidate = text
        .rfind("```json")
        .map(|start| &text[start + 7..])
        .and_then(|rest| rest.find("```").map(|end| &rest[..end]))
        .unwrap_or(text);
    if let Ok(value) = serde_json::from_str::<Value>(candidate.trim())
        && let Ok(mut result) = crate::schema::parse_task_result(&value)
    {
        if let TaskResult::Success(s) = &mut result {
            s.output.get_or_insert_with(|| text.to_owned());
        }
        return result;
    }
    TaskResult::Success(TaskSuccess {
        summary: process::tail(text, 20, 2048),
        output: Some(text.to_owned()),
        ..TaskSuccess::default()
    })
}

fn u64_at(v: &Value, path: &str) -> u64 {
    v.pointer(path).and_then(Value::as_u64).unwrap_or(0)
}

fn str_at(v: &Value, paths: &[&str]) -> Option<String> {
    paths
        .iter()
        .find_map(|p| v.pointer(p).and_then(Value::as_str))
        .map(str::to_owned)
}

/// Parses the JSON output of a command-line agent. Lines that are not JSON, or JSON of unknown
/// types, are skipped.
fn parse_output(kind: CliKind, stdout: &str) -> Parsed {
    let mut parsed = Parsed::default();
    // Claude Code prints one JSON document (possibly pretty-printed); the others print JSON lines.
    let values: Vec<Value> = match serde_json::from_str::<Value>(stdout.trim()) {
        Ok(Value::Array(items)) => items,
        Ok(v) => vec![v],
        Err(_) => stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .collect(),
    };
    for v in values {
        let ty = v.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            CliKind::ClaudeCode => {
                if ty != "result" {
                    continue;
                }
                let text = str_at(&v, &["/result"]);
                if v.get("is_error").and_then(Value::as_bool).unwrap_or(false) {
                    parsed.error = Some(text.clone().unwrap_or_else(|| {
                        str_at(&v, &["/subtype"]).unwrap_or_else(|| "unknown error".to_owned())
                    }));
                }
                parsed.text = text;
                parsed.usage = Usage {
                    input_tokens: u64_at(&v, "/usage/input_tokens"),
                    output_tokens: u64_at(&v, "/usage/output_tokens"),
                    cache_read_tokens: u64_at(&v, "/usage/cache_read_input_tokens"),
                    cache_write_tokens: u64_at(&v, "/usage/cache_creation_input_tokens"),
                    turns: u32::try_from(u64_at(&v, "/num_turns")).unwrap_or(u32::MAX),
                    cost_micro_usd: v
                        .get("total_cost_usd")
                        .and_then(Value::as_f64)
                        .map_or(0, |c| (c * 1_000_000.0).round().max(0.0) as u64),
                };
            }
            CliKind::Codex => match ty {
                "item.completed" => {
                    if v.pointer("/item/type").and_then(Value::as_str) == Some("agent_message") {
                        parsed.text = str_at(&v, &["/item/text"]);
                    }
                }
                "turn.completed" => {
                    let cached = u64_at(&v, "/usage/cached_input_tokens");
                    parsed.usage.input_tokens +=
                        u64_at(&v, "/usage/input_tokens").saturating_sub(cached);
                    parsed.usage.cache_read_tokens += cached;
                    parsed.usage.output_tokens += u64_at(&v, "/usage/output_tokens");
                    parsed.usage.turns += 1;
                }
                "turn.failed" | "error" => {
                    parsed.error = str_at(&v, &["/error/message", "/message"])
                        .or(Some("unknown error".into()));
                }
                _ => {
                    // Older Codex versions: {"msg": {"type": "agent_message", "message": "..."}}.
                    if v.pointer("/msg/type").and_then(Value::as_str) == Some("agent_message") {
                        parsed.text = str_at(&v, &["/msg/message"]);
                    }
                }
            },
            CliKind::Opencode => match ty {
                "text" => {
                    if let Some(t) = str_at(&v, &["/part/text", "/text"]) {
                        parsed.text = Some(t);
                    }
                }
                "step_finish" => {
                    parsed.usage.input_tokens += u64_at(&v, "/part/tokens/input");
                    parsed.usage.output_tokens += u64_at(&v, "/part/tokens/output");
                    parsed.usage.cache_read_tokens += u64_at(&v, "/part/tokens/cache/read");
                    parsed.usage.cache_write_tokens += u64_at(&v, "/part/tokens/cache/write");
                    parsed.usage.turns += 1;
                    if let Some(c) = v.pointer("/part/cost").and_then(Value::as_f64) {
                        parsed.usage.cost_micro_usd += (c * 1_000_000.0).round().max(0.0) as u64;
                    }
                }
                "error" => {
                    parsed.error = str_at(
                        &v,
                        &[
                            "/error/data/message",
                            "/error/message",
                            "/error",
                            "/message",
                        ],
                    )
                    .or(Some("unknown error".into()));
                }
                _ => {}
            },
        }
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_format_and_skips_unknown_lines() {
        let claude = r#"{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"s","total_cost_usd":0.0123,"num_turns":3,"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":100,"cache_creation_input_tokens":20}}"#;
        let p = parse_output(CliKind::ClaudeCode, claude);
        assert_eq!(p.text.as_deref(), Some("done"));
        assert_eq!(p.usage.cost_micro_usd, 12_300);
        assert_eq!(p.usage.cache_read_tokens, 100);
        assert_eq!(p.usage.turns, 3);

        let codex = "garbage line\n{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n{\"type\":\"item.completed\",\"item\":{\"type\":\"reasoning\",\"text\":\"x\"}}\n{\"type\":\"item.completed\",\"item\":{\"type\":\"agent_message\",\"text\":\"hello\"}}\n{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":50,\"cached_input_tokens\":20,\"output_tokens\":7}}\n";
        let p = parse_output(CliKind::Codex, codex);
        assert_eq!(p.text.as_deref(), Some("hello"));
        assert_eq!(
            (
                p.usage.input_tokens,
                p.usage.cache_read_tokens,
                p.usage.output_tokens
            ),
            (30, 20, 7)
        );

        let oc = "{\"type\":\"step_start\"}\n{\"type\":\"text\",\"part\":{\"text\":\"hi\"}}\n{\"type\":\"step_finish\",\"part\":{\"tokens\":{\"input\":3,\"output\":4,\"cache\":{\"read\":1,\"write\":2}},\"cost\":0.5}}\n";
        let p = parse_output(CliKind::Opencode, oc);
        assert_eq!(p.text.as_deref(), Some("hi"));
        assert_eq!(p.usage.cost_micro_usd, 500_000);

        let p = parse_output(
            CliKind::Codex,
            "{\"type\":\"turn.failed\",\"error\":{\"message\":\"boom\"}}",
        );
        assert_eq!(p.error.as_deref(), Some("boom"));
        assert_eq!(
            parse_output(CliKind::ClaudeCode, "not json at all"),
            Parsed::default()
        );
    }

    #[test]
    fn result_from_text_reads_a_json_block() {
        let r = result_from_text(
            "work done\n```json\n{\"status\":\"failure\",\"code\":\"task_failed\",\"message\":\"tests fail\"}\n```",
        );
        assert!(matches!(r, TaskResult::Failure(f) if f.message == "tests fail"));
        let r = result_from_text("just text");
        assert!(matches!(r, TaskResult::Success(s) if s.summary == "just text"));
    }
}
