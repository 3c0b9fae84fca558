//! Any command-line agent from a declaration (`backend = "cli"`): the two declarations in
//! `examples/agents/` (Gemini CLI, Aider) run against fake programs that behave like each —
//! they check the flags that make them non-interactive and read the prompt the way it is
//! declared (stdin; a file), do their work in the project, and print their answer and usage
//! the way the real ones do. Controls: a program that prints no answer, or exits non-zero,
//! fails the step; a bad declaration is refused naming its field.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use common::{TestTools, fast_settings, task};
use orca_agents::Agents;
use orca_agents::config::Config;
use orca_core::{AgentPort as _, Budget, ErrorCode, TaskResult};

fn example(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/agents")
        .join(name);
    std::fs::read_to_string(&path).unwrap()
}

/// Writes `body` as an executable sh script.
fn program(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The example `name` with its `command` replaced by `fake`, as the agents of a project.
fn agents_of(root: &Path, name: &str, program_name: &str, fake: &Path) -> Agents {
    let text = example(name).replace(
        &format!("command = \"{program_name}\""),
        &format!("command = \"{}\"", fake.display()),
    );
    assert!(
        text.contains(&fake.display().to_string()),
        "{name} names its program"
    );
    let config = Config::parse(&text, Path::new(name)).unwrap();
    Agents::from_config(root, &config, &|_: &str| None, fast_settings(0)).unwrap()
}

/// What a Gemini CLI run prints with `--output-format json`: one object, the answer in
/// `response`, tokens per model under `stats.models`.
const FAKE_GEMINI: &str = r#"
case " $* " in *" --output-format json "*) ;; *) echo "not headless JSON: $*" >&2; exit 9;; esac
case " $* " in *" --approval-mode yolo "*) ;; *) echo "would ask for approval: $*" >&2; exit 9;; esac
prompt=$(cat)
case "$prompt" in *"say hello"*) ;; *) echo "no prompt on stdin" >&2; exit 9;; esac
printf 'hello\n' > hello.txt
cat <<'JSON'
{"response": "I wrote hello.txt.\n```json\n{\"status\": \"success\", \"summary\": \"wrote hello.txt\"}\n```",
 "stats": {"models": {"gemini-2.5-pro": {"api": {"totalRequests": 2}, "tokens": {"prompt": 1200, "candidates": 80, "total": 1280}},
                      "gemini-2.5-flash": {"api": {"totalRequests": 1}, "tokens": {"prompt": 300, "candidates": 20, "total": 320}}},
           "tools": {"totalCalls": 1}}}
JSON
"#;

/// What Aider prints when scripted: its banner, the model's reply, the edit, and a token line
/// per message (two here: a reflection).
const FAKE_AIDER: &str = r#"
case " $* " in *" --yes-always "*) ;; *) echo "would ask: $*" >&2; exit 9;; esac
case " $* " in *" --no-auto-commits "*) ;; *) echo "would commit: $*" >&2; exit 9;; esac
file=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--message-file" ]; then file="$2"; fi
  shift
done
[ -n "$file" ] || { echo "no --message-file" >&2; exit 9; }
prompt=$(cat "$file")
case "$prompt" in *"say hello"*) ;; *) echo "no prompt in $file" >&2; exit 9;; esac
printf 'hello\n' > hello.txt
cat <<'OUT'
Aider v0.86.1
Main model: anthropic/claude-sonnet-4 with diff edit format
Git repo: none
Tokens: 2.3k sent, 150 received. Cost: $0.0092 message, $0.0092 session.

I created hello.txt.

hello.txt
<<<<<<< SEARCH
=======
hello
>>>>>>> REPLACE

```json
{"status": "success", "summary": "created hello.txt"}
```
Applied edit to hello.txt
Tokens: 1,250 sent, 60 received. Cost: $0.0046 message, $0.0138 session.
OUT
"#;

async fn run(agents: &Agents) -> orca_core::Reply<TaskResult> {
    let mut req = task("coder", Budget::UNLIMITED);
    req.step = orca_core::Step::new(
        req.step.id.clone(),
        req.agent.clone(),
        "say hello in hello.txt",
    );
    agents.run_task(req, &TestTools::new()).await
}

#[tokio::test]
async fn gemini_cli_as_declared_in_examples() {
    let dir = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let fake = program(bin.path(), "gemini", FAKE_GEMINI);
    let agents = agents_of(dir.path(), "gemini-cli.toml", "gemini", &fake);
    // An eval report binds the agent as its program, not only as "cli".
    let info = agents
        .agents()
        .into_iter()
        .find(|a| a.id.as_str() == "coder")
        .unwrap();
    assert_eq!(info.backend, "cli:gemini");
    let reply = run(&agents).await;
    println!("gemini: {:?}; usage {:?}", reply.outcome, reply.usage);
    assert!(
        matches!(&reply.outcome, TaskResult::Success(s) if s.summary == "wrote hello.txt"),
        "{:?}",
        reply.outcome
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello\n"
    );
    // Summed over both models the run used.
    assert_eq!(
        (reply.usage.input_tokens, reply.usage.output_tokens),
        (1500, 100)
    );
}

#[tokio::test]
async fn aider_as_declared_in_examples() {
    let dir = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let fake = program(bin.path(), "aider", FAKE_AIDER);
    let agents = agents_of(dir.path(), "aider.toml", "aider", &fake);
    let reply = run(&agents).await;
    println!("aider: {:?}; usage {:?}", reply.outcome, reply.usage);
    assert!(
        matches!(&reply.outcome, TaskResult::Success(s) if s.summary == "created hello.txt"),
        "{:?}",
        reply.outcome
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello\n"
    );
    // Both messages' token lines: 2.3k + 1,250 sent, 150 + 60 received.
    assert_eq!(
        (reply.usage.input_tokens, reply.usage.output_tokens),
        (3550, 210)
    );
}

/// The controls: the same declarations with programs that fail — exit 0 with no answer, a
/// non-zero exit — fail the step; neither is taken for a success.
#[tokio::test]
async fn a_declared_program_without_an_answer_or_failing_fails_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let silent = program(
        bin.path(),
        "gemini",
        "cat > /dev/null\necho '{\"stats\": {}}'",
    );
    let reply = run(&agents_of(dir.path(), "gemini-cli.toml", "gemini", &silent)).await;
    let TaskResult::Failure(f) = &reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    println!("no answer: {f}");
    assert_eq!(f.code, ErrorCode::ParseError);
    let failing = program(bin.path(), "aider", "echo 'model not found' >&2\nexit 3");
    let reply = run(&agents_of(dir.path(), "aider.toml", "aider", &failing)).await;
    let TaskResult::Failure(f) = &reply.outcome else {
        panic!("{:?}", reply.outcome)
    };
    println!("exit 3: {f}");
    assert_eq!(f.code, ErrorCode::AgentError);
    assert!(f.message.contains("exited with status 3"), "{f}");
}

#[track_caller]
fn refused(text: &str, field: &str) {
    let err = Config::parse(text, Path::new("c.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains(field), "`{err}` does not name `{field}`");
}

#[test]
fn bad_declarations_are_refused_naming_the_field() {
    let base = "[agents.coder]\nbackend = \"cli\"\ncommand = \"x\"\n";
    refused(
        "[agents.coder]\nbackend = \"cli\"\n",
        "agents.coder.command",
    );
    refused(
        &format!("{base}[agents.coder.cli]\nanswer = \"first-line\"\n"),
        "agents.coder.cli.answer",
    );
    refused(
        &format!("{base}[agents.coder.cli]\noutput_tokens = \"regex:(\"\n"),
        "agents.coder.cli.output_tokens",
    );
    refused(
        &format!("{base}[agents.coder.cli]\nprompt_via = \"pipe\"\n"),
        "agents.coder.cli.prompt_via",
    );
    refused(
        &format!("{base}[agents.coder.cli]\nprompt_flag = \"-p\"\n"),
        "agents.coder.cli.prompt_flag",
    );
    refused(
        &format!("{base}[agents.coder.cli]\nstate_dirs = [\"../.ssh\"]\n"),
        "agents.coder.cli.state_dirs",
    );
    refused(
        &format!("{base}permission_mode = \"auto\"\n"),
        "agents.coder.permission_mode",
    );
    refused(
        "[agents.coder]\nbackend = \"codex\"\n[agents.coder.cli]\nanswer = \"stdout\"\n",
        "agents.coder.cli",
    );
    // The examples parse.
    for name in ["gemini-cli.toml", "aider.toml"] {
        Config::parse(&example(name), Path::new(name)).unwrap();
    }
}
