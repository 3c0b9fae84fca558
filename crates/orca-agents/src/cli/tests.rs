//! The parsers against output recorded from the real programs (Claude Code 2.1.330, Codex
//! 0.169.0, opencode 1.18.33, run against the fake model servers of `tests/real_clis.rs`), and
//! the argument lists.

use super::*;

fn parse(kind: CliKind, text: &str) -> Parsed {
    CliAgent::new(CliSpec::new(kind)).parse(text)
}

const CLAUDE_OK: &str = include_str!("../../tests/fixtures/cli/claude_success.json");
const CLAUDE_DENIED: &str = include_str!("../../tests/fixtures/cli/claude_denied.json");
const CLAUDE_STREAM_OK: &str = include_str!("../../tests/fixtures/cli/claude_stream_success.jsonl");
const CLAUDE_STREAM_DENIED: &str =
    include_str!("../../tests/fixtures/cli/claude_stream_denied.jsonl");
const CODEX_OK: &str = include_str!("../../tests/fixtures/cli/codex_success.jsonl");
const CODEX_RECONNECT: &str = include_str!("../../tests/fixtures/cli/codex_reconnect.jsonl");
const CODEX_READ_ONLY: &str = include_str!("../../tests/fixtures/cli/codex_read_only.jsonl");
const OPENCODE_OK: &str = include_str!("../../tests/fixtures/cli/opencode_success.jsonl");
const OPENCODE_REJECTED: &str = include_str!("../../tests/fixtures/cli/opencode_rejected.jsonl");

#[test]
fn claude_code_recorded_success() {
    let p = parse(CliKind::ClaudeCode, CLAUDE_OK);
    assert!(p.text.as_deref().unwrap().contains("wrote the file"));
    assert_eq!(p.error, None);
    assert!(p.denials.is_empty());
    assert_eq!(
        p.session.as_deref(),
        Some("904d3be4-5293-4bfc-bf1e-0b3f866b02eb")
    );
    assert!(p.cost_reported);
    assert_eq!(
        (
            p.usage.input_tokens,
            p.usage.output_tokens,
            p.usage.turns,
            p.usage.cost_micro_usd
        ),
        (22, 14, 2, 276)
    );
}

#[test]
fn claude_code_recorded_denial_is_read_despite_success_subtype() {
    assert!(CLAUDE_DENIED.contains(r#""subtype":"success""#));
    let p = parse(CliKind::ClaudeCode, CLAUDE_DENIED);
    assert_eq!(p.error, None);
    assert_eq!(p.denials, ["Write"]);
}

// `--output-format stream-json --verbose`: the messages and the program's own tool uses, in
// order, with the same result and usage as the one-document output.
#[test]
fn claude_code_stream_has_the_transcript_and_the_same_result() {
    let p = parse(CliKind::ClaudeCode, CLAUDE_STREAM_OK);
    assert!(p.text.as_deref().unwrap().contains("wrote hello.txt"));
    assert_eq!(p.error, None);
    assert!(p.denials.is_empty());
    assert_eq!(
        (p.usage.input_tokens, p.usage.output_tokens, p.usage.turns),
        (22, 14, 2)
    );
    assert!(p.session.is_some());
    let said: Vec<&str> = p
        .said
        .iter()
        .map(|s| match s {
            Said::Answer(_) => "answer",
            Said::Tool(_) => "tool",
        })
        .collect();
    assert_eq!(said, ["tool", "answer"], "in the order it happened");
    assert_eq!(p.answers(), [p.text.clone().unwrap()]);
    let tools = p.tools();
    assert_eq!(tools[0].tool, "Write");
    assert!(
        tools[0].input["file_path"]
            .as_str()
            .unwrap()
            .ends_with("hello.txt")
    );
    assert!(
        tools[0]
            .output
            .as_deref()
            .unwrap()
            .starts_with("File created successfully")
    );
    assert!(tools[0].ok);
}

#[test]
fn claude_code_stream_denial_is_a_failed_tool_use_and_a_denial() {
    let p = parse(CliKind::ClaudeCode, CLAUDE_STREAM_DENIED);
    assert_eq!(p.denials, ["Write"]);
    let tools = p.tools();
    assert_eq!(tools.len(), 1);
    assert!(!tools[0].ok);
    assert!(tools[0].output.is_some());
}

#[test]
fn codex_and_opencode_report_their_own_tool_uses() {
    let p = parse(CliKind::Codex, CODEX_OK);
    let tools = p.tools();
    assert_eq!(
        tools.len(),
        1,
        "one completed file_change (its start is not a use)"
    );
    assert_eq!(tools[0].tool, "file_change");
    assert_eq!(tools[0].input["changes"][0]["kind"], "add");
    assert!(tools[0].ok);
    let p = parse(CliKind::Opencode, OPENCODE_OK);
    let tools = p.tools();
    assert_eq!(tools[0].tool, "write");
    assert_eq!(tools[0].output.as_deref(), Some("Wrote file successfully."));
    assert!(tools[0].ok);
    let p = parse(CliKind::Opencode, OPENCODE_REJECTED);
    let tools = p.tools();
    assert!(!tools[0].ok);
    assert!(
        tools[0]
            .output
            .as_deref()
            .unwrap()
            .contains("rejected permission")
    );
    assert_eq!(p.denials, ["write"]);
}

#[test]
fn claude_code_api_error_with_success_subtype_is_an_error() {
    let line = r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: API returned an empty or malformed response (HTTP 200)","session_id":"e6b17324-1a3e-4c16-b92c-5fffb1a6d9d9","total_cost_usd":0,"num_turns":1}"#;
    let p = parse(CliKind::ClaudeCode, line);
    assert!(p.error.unwrap().starts_with("API Error"));
}

#[test]
fn codex_recorded_success_usage_and_thread() {
    let p = parse(CliKind::Codex, CODEX_OK);
    assert!(p.text.as_deref().unwrap().contains("wrote the file"));
    assert_eq!(p.answers(), [p.text.clone().unwrap()]);
    assert_eq!(
        p.session.as_deref(),
        Some("01a2090e-d6c3-7651-9eed-5709afeeb843")
    );
    assert!(!p.cost_reported);
    // input 100 of which 40 cached; output 18 (reasoning included).
    assert_eq!(
        (
            p.usage.input_tokens,
            p.usage.cache_read_tokens,
            p.usage.output_tokens,
            p.usage.turns
        ),
        (60, 40, 18, 1)
    );
}

#[test]
fn codex_reconnecting_is_a_warning_not_a_failure() {
    assert!(CODEX_RECONNECT.contains("Reconnecting... 1/5"));
    let p = parse(CliKind::Codex, CODEX_RECONNECT);
    assert_eq!(p.error, None);
    assert_eq!(p.warnings.len(), 1);
    assert!(p.text.is_some());
    let p = parse(
        CliKind::Codex,
        r#"{"type":"turn.failed","error":{"message":"stream disconnected"}}"#,
    );
    assert_eq!(p.error.as_deref(), Some("stream disconnected"));
}

#[test]
fn codex_read_only_rejection_is_not_in_its_output() {
    // Recorded: the patch was rejected ("writing is blocked by read-only sandbox") but Codex's
    // JSON says nothing of it; only the model's own answer can report it.
    let p = parse(CliKind::Codex, CODEX_READ_ONLY);
    assert!(p.denials.is_empty() && p.error.is_none());
}

#[test]
fn opencode_recorded_success_and_session() {
    let p = parse(CliKind::Opencode, OPENCODE_OK);
    assert!(p.text.as_deref().unwrap().contains("wrote the file"));
    // Each text part is an answer, the final one last (recorded as `agent.answer`).
    assert_eq!(p.answers(), [p.text.clone().unwrap()]);
    assert_eq!(p.session.as_deref(), Some("ses_df6f0c428ffeUlhpMr93wqEKwu"));
    // Two steps of 30 input (+10 cached) and 8 output; cost 0 means "not priced".
    assert_eq!(
        (
            p.usage.input_tokens,
            p.usage.cache_read_tokens,
            p.usage.output_tokens,
            p.usage.turns
        ),
        (60, 20, 16, 2)
    );
    assert!(!p.cost_reported);
}

#[test]
fn opencode_recorded_rejection_has_no_text_and_a_denial() {
    let p = parse(CliKind::Opencode, OPENCODE_REJECTED);
    assert_eq!(p.text, None);
    assert_eq!(p.denials, ["write"]);
}

#[test]
fn garbage_and_unknown_lines_are_skipped() {
    for kind in [CliKind::ClaudeCode, CliKind::Codex, CliKind::Opencode] {
        assert_eq!(
            parse(kind, "not json at all\n{\"half\":"),
            Parsed::default()
        );
    }
}

#[test]
fn invocations_read_the_prompt_from_stdin() {
    let mut spec = CliSpec::new(CliKind::Codex);
    spec.model = Some("gpt-5.5".into());
    spec.args = vec!["-c".into(), "model_provider=fake".into()];
    assert_eq!(
        spec.invocation(None, false),
        [
            "exec",
            "--json",
            "-s",
            "workspace-write",
            "--skip-git-repo-check",
            "--model",
            "gpt-5.5",
            "-c",
            "model_provider=fake",
            "-"
        ]
    );
    assert_eq!(
        spec.invocation(Some("t1"), true)[4..],
        [
            "--model",
            "gpt-5.5",
            "-c",
            "model_provider=fake",
            "resume",
            "t1",
            "-"
        ]
    );
    let spec = CliSpec::new(CliKind::ClaudeCode);
    assert_eq!(
        spec.invocation(Some("s1"), true),
        [
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-mode",
            "acceptEdits",
            "--resume",
            "s1"
        ]
    );
    let mut spec = CliSpec::new(CliKind::Opencode);
    assert_eq!(
        spec.invocation(None, true),
        ["run", "--format", "json", "--auto"]
    );
    spec.permission_mode = Some("ask".into());
    assert_eq!(spec.invocation(None, true), ["run", "--format", "json"]);
    spec.permission_mode = Some("yolo".into());
    assert!(spec.validate().unwrap_err().contains("auto, ask, plan"));
    // A question is asked read-only, whatever the configured mode.
    assert_eq!(
        spec.read_only().invocation(None, true),
        ["run", "--format", "json", "--agent", "plan"]
    );
    let codex = CliSpec::new(CliKind::Codex).read_only();
    assert_eq!(
        codex.invocation(None, true)[..4],
        ["exec", "--json", "-s", "read-only"]
    );
    let claude = CliSpec::new(CliKind::ClaudeCode).read_only();
    assert_eq!(claude.invocation(None, true)[5], "plan");
}

#[test]
fn native_sessions_map_to_orca_sessions_and_back() {
    let agent = CliAgent::new(CliSpec::new(CliKind::Opencode));
    let id = agent.session_for("ses_df6f0c428ffeUlhpMr93wqEKwu");
    assert_eq!(agent.session_for("ses_df6f0c428ffeUlhpMr93wqEKwu"), id);
    assert_eq!(
        agent.native_session(id).as_deref(),
        Some("ses_df6f0c428ffeUlhpMr93wqEKwu")
    );
    assert_eq!(agent.native_session(SessionId::new()), None);
    let claude = CliAgent::new(CliSpec::new(CliKind::ClaudeCode));
    let id = claude.session_for("904d3be4-5293-4bfc-bf1e-0b3f866b02eb");
    assert_eq!(id.to_string(), "sess_904d3be4-5293-4bfc-bf1e-0b3f866b02eb");
    assert_eq!(
        CliAgent::new(CliSpec::new(CliKind::ClaudeCode))
            .native_session(id)
            .as_deref(),
        Some("904d3be4-5293-4bfc-bf1e-0b3f866b02eb")
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

#[test]
fn codex_leaves_confinement_to_orcas_kernel_sandbox_unless_configured() {
    let dir = tempfile::tempdir().unwrap();
    let no_env = |_: &str| None;
    let kernel = SandboxPolicy::new(SandboxMode::Kernel, dir.path(), &no_env).unwrap();
    let tools = kernel.clone().with_mode(SandboxMode::Tools);
    let codex = CliSpec::new(CliKind::Codex);
    let mode = |spec: &CliSpec, sandbox: Option<&SandboxPolicy>| {
        spec.for_sandbox(sandbox).invocation(None, true)[3].clone()
    };
    assert_eq!(mode(&codex, Some(&kernel)), "danger-full-access");
    assert_eq!(mode(&codex, Some(&tools)), "workspace-write");
    assert_eq!(mode(&codex, None), "workspace-write");
    let mut configured = codex.clone();
    configured.permission_mode = Some("workspace-write".into());
    assert_eq!(mode(&configured, Some(&kernel)), "workspace-write");
    let claude = CliSpec::new(CliKind::ClaudeCode);
    assert_eq!(
        claude.for_sandbox(Some(&kernel)).invocation(None, true)[5],
        "acceptEdits"
    );
}
