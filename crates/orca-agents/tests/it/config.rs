//! `.orca/config.toml`: parsing, validation errors naming the field, overrides, custom agents,
//! default backend selection, the planner prompt listing the specialists.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::Path;

use orca_agents::config::{CONFIG_TEMPLATE, Config};
use orca_agents::{Agents, BackendSpec, LoopSettings};
use orca_core::{AgentId, AgentPort, Role};

fn no_env(_: &str) -> Option<String> {
    None
}

#[track_caller]
fn check_err(text: &str, expected: &str) {
    let err = Config::parse(text, Path::new(".orca/config.toml"))
        .unwrap_err()
        .to_string();
    assert_eq!(err, expected);
}

#[track_caller]
fn check_err_contains(text: &str, expected: &str) {
    let err = Config::parse(text, Path::new(".orca/config.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(expected),
        "`{err}` does not contain `{expected}`"
    );
}

#[test]
fn errors_name_the_field() {
    check_err(
        "[agents.reviewer]\nbackend = \"gpt\"\n",
        ".orca/config.toml: agents.reviewer.backend: unknown backend \"gpt\" (expected one of: anthropic, openai, ollama, claude-code, codex, opencode, cli, scripted, shell)",
    );
    check_err_contains(
        "[agents.reviewer]\nmodle = \"x\"\n",
        "agents.reviewer: unknown field `modle`",
    );
    check_err_contains(
        "[agents.coder]\ntools = [\"rm_rf\"]\n",
        "agents.coder.tools: unknown tool \"rm_rf\"",
    );
    check_err_contains(
        "[agents.coder]\napi_key_env = \"sk-ant-123\"\n",
        "agents.coder.api_key_env: must be the NAME",
    );
    check_err_contains(
        "[agents.coder]\nbase_url = \"ftp://x\"\n",
        "agents.coder.base_url:",
    );
    check_err_contains(
        "[agents.coder]\nprompt = \"a\"\nprompt_file = \"b\"\n",
        "agents.coder.prompt_file: set either",
    );
    check_err_contains(
        "[agents.planner]\nrole = \"specialist\"\n",
        "agents.planner.role: the role of a built-in agent cannot be changed",
    );
    check_err_contains(
        "[agents.planner]\nbackend = \"codex\"\n",
        "agents.planner.backend: the planner agent needs a model backend",
    );
    check_err_contains(
        "[agents.shell]\nmodel = \"x\"\n",
        "agents.shell: the built-in shell agent cannot be configured",
    );
    check_err_contains(
        "[agents.Bad]\nmodel = \"x\"\n",
        "agents.Bad: invalid agent id",
    );
    check_err_contains(
        "[agents.x]\nlimits = { max_turns = \"ten\" }\n",
        "agents.x.limits.max_turns: must be a whole number",
    );
    check_err_contains(
        "[agents.x]\nlimits = { max_turnz = 1 }\n",
        "unknown field `max_turnz`",
    );
    check_err_contains("[agentz.x]\n", "unknown field `agentz`");
    check_err_contains("not toml [", ".orca/config.toml: ");
    check_err_contains(
        "[agents.x]\nbackend = \"openai\"\nscript = \"s.json\"\n",
        "agents.x.script:",
    );
}

#[test]
fn template_parses_and_empty_config_is_fine() {
    Config::parse(CONFIG_TEMPLATE, Path::new("t")).unwrap();
    // The template's commented examples are valid too.
    let uncommented: String = CONFIG_TEMPLATE
        .lines()
        .map(|l| {
            l.strip_prefix("# ")
                .filter(|r| r.starts_with('[') || r.contains(" = "))
                .unwrap_or("")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let config = Config::parse(&uncommented, Path::new("t")).unwrap();
    assert_eq!(config.agents.len(), 4, "{uncommented}");
    let env = |k: &str| (k == "ANTHROPIC_API_KEY" || k == "OPENAI_API_KEY").then(|| "k".to_owned());
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".orca/prompts")).unwrap();
    std::fs::write(
        dir.path().join(".orca/prompts/db-expert.md"),
        "You know databases.",
    )
    .unwrap();
    let profiles = config.profiles(dir.path(), &env).unwrap();
    let db = profiles
        .iter()
        .find(|p| p.id.as_str() == "db-expert")
        .unwrap();
    assert_eq!(db.prompt, "You know databases.");
    assert_eq!(db.backend.kind(), "openai");
}

#[test]
fn default_backend_follows_the_environment() {
    let anth = |k: &str| (k == "ANTHROPIC_API_KEY").then(|| "a".to_owned());
    let oai = |k: &str| (k == "OPENAI_API_KEY").then(|| "o".to_owned());
    assert!(matches!(
        BackendSpec::default_from_env(&anth),
        BackendSpec::Anthropic { .. }
    ));
    assert!(
        matches!(BackendSpec::default_from_env(&oai), BackendSpec::OpenAi { base_url, .. } if base_url == "https://api.openai.com/v1")
    );
    assert!(
        matches!(BackendSpec::default_from_env(&no_env), BackendSpec::OpenAi { base_url, api_key: None, .. } if base_url == "http://127.0.0.1:11434/v1")
    );
}

#[test]
fn overrides_and_custom_agents() {
    let text = r#"
[defaults]
backend = "ollama"
model = "llama3"

[agents.reviewer]
backend = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "MY_KEY"
tools = ["read_file"]
limits = { max_turns = 5 }

[agents.claude]
description = "Claude Code for big changes"
backend = "claude-code"
command = "/opt/claude"
"#;
    let config = Config::parse(text, Path::new("c.toml")).unwrap();
    let env = |k: &str| (k == "MY_KEY").then(|| "sk-very-secret".to_owned());
    let dir = tempfile::tempdir().unwrap();
    let agents = Agents::from_config(dir.path(), &config, &env, LoopSettings::default()).unwrap();
    let reviewer = agents
        .profile(&AgentId::parse("reviewer").unwrap())
        .unwrap();
    assert_eq!(reviewer.workspace_tools, ["read_file"]);
    assert_eq!(reviewer.limits.max_turns, Some(5));
    assert!(
        matches!(&reviewer.backend, BackendSpec::OpenAi { model, base_url, api_key: Some(k) }
        if model == "gpt-4.1" && base_url == "http://127.0.0.1:9/v1" && k.expose() == "sk-very-secret")
    );
    let coder = agents.profile(&AgentId::parse("coder").unwrap()).unwrap();
    assert_eq!(coder.backend.model(), Some("llama3"));
    let infos = agents.agents();
    let claude = infos.iter().find(|a| a.id.as_str() == "claude").unwrap();
    assert_eq!(
        (claude.role, claude.backend.as_str()),
        (Role::Specialist, "claude-code")
    );
    assert_eq!(infos.len(), 10, "8 built-ins + shell + claude");
    // Keys never show in Debug output.
    let debug = format!("{agents:?} {config:?}");
    assert!(!debug.contains("sk-very-secret"), "{debug}");
    assert!(debug.contains("[redacted]"));

    // A named key variable that is not set is an error naming the field.
    let err =
        Agents::from_config(dir.path(), &config, &no_env, LoopSettings::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("agents.reviewer.api_key_env: the environment variable MY_KEY is not set"),
        "{err}"
    );
}

#[test]
fn planner_prompt_lists_the_specialists_actually_available() {
    let text = "[agents.db-expert]\ndescription = \"knows our database schema\"\nbackend = \"ollama\"\ntools = [\"read_file\"]\n";
    let config = Config::parse(text, Path::new("c.toml")).unwrap();
    let agents =
        Agents::from_config("/project", &config, &no_env, LoopSettings::default()).unwrap();
    let base = &agents.profile(&AgentId::planner()).unwrap().prompt;
    let rendered = agents.planner_prompt(base);
    assert!(rendered.contains("`db-expert` (openai): knows our database schema"));
    assert!(rendered.contains("`shell` (shell)"));
    assert!(!rendered.contains("{{specialists}}"));
    insta::assert_snapshot!("planner_prompt", rendered);
}

#[test]
fn defaults_without_config() {
    let agents = Agents::with_defaults("/p", &no_env, LoopSettings::default());
    let infos = agents.agents();
    assert_eq!(infos.len(), 9, "8 built-ins + shell");
    let planner = infos.iter().find(|a| a.id == AgentId::planner()).unwrap();
    assert_eq!(
        (planner.role, planner.backend.as_str()),
        (Role::Planner, "openai")
    );
    assert_eq!(planner.model.as_deref(), Some("qwen2.5-coder"));
    let orca = infos.iter().find(|a| a.id.as_str() == "orca").unwrap();
    assert_eq!(orca.role, Role::Relay);
    assert!(
        orca.workspace_tools.is_empty(),
        "the relay has no workspace tools"
    );
    let reviewer = infos.iter().find(|a| a.id.as_str() == "reviewer").unwrap();
    assert!(
        !reviewer
            .workspace_tools
            .iter()
            .any(|t| t == "write_file" || t == "edit_file")
    );
}

#[test]
fn sandbox_settings_and_prompt_files_outside_the_project() {
    let path = Path::new(".orca/config.toml");
    let config = Config::parse(
        "sandbox = \"tools\"\nsandbox_writable = [\"~/.cache/x\", \"/opt/cache\"]\n",
        path,
    )
    .unwrap();
    assert_eq!(config.sandbox, Some(orca_os::SandboxMode::Tools));
    assert_eq!(config.sandbox_writable.len(), 2);
    check_err_contains(
        "sandbox = \"none\"\n",
        "sandbox: unknown sandbox mode \"none\"",
    );
    check_err_contains(
        "sandbox_writable = [\"relative\"]\n",
        "sandbox_writable: \"relative\" must be an absolute path",
    );
    check_err_contains(
        "sandbox_writable = [\"/p/.orca\"]\n",
        "sandbox_writable: \"/p/.orca\" may not name .orca",
    );

    // A prompt file must stay inside the project: not /etc/passwd, not through `..` or a
    // symlink; a clear error names the field and the file.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("project");
    std::fs::create_dir_all(root.join("prompts")).unwrap();
    std::fs::write(root.join("prompts/ok.md"), "You are fine.").unwrap();
    std::fs::write(dir.path().join("outside.md"), "SECRET").unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside.md"), root.join("prompts/link.md"))
        .unwrap();
    for (file, needle) in [
        ("/etc/passwd", "leads outside the project"),
        ("../outside.md", "leads outside the project"),
        ("prompts/link.md", "leads outside the project"),
        ("prompts/missing.md", "No such file"),
        ("prompts", "not a regular file"),
    ] {
        let text = format!("[agents.x]\nbackend = \"shell\"\nprompt_file = \"{file}\"\n");
        let config = Config::parse(&text, path).unwrap();
        let err = config.profiles(&root, &no_env).unwrap_err().to_string();
        assert!(
            err.contains("agents.x.prompt_file") && err.contains(needle),
            "{file}: {err}"
        );
        assert!(!err.contains("SECRET"));
    }
    let config = Config::parse(
        "[agents.x]\nbackend = \"shell\"\nprompt_file = \"prompts/ok.md\"\n",
        path,
    )
    .unwrap();
    let profiles = config.profiles(&root, &no_env).unwrap();
    assert!(profiles.iter().any(|p| p.prompt == "You are fine."));
}

#[test]
fn command_line_agent_settings() {
    let text = "[agents.claude]\ndescription = \"c\"\nbackend = \"claude-code\"\nmodel = \"claude-sonnet-4-5\"\npermission_mode = \"default\"\nargs = [\"--max-turns\", \"30\"]\ntimeout_secs = 90\n\n[agents.cx]\ndescription = \"x\"\nbackend = \"codex\"\n";
    let config = Config::parse(text, Path::new(".orca/config.toml")).unwrap();
    let profiles = config.profiles(Path::new("/p"), &no_env).unwrap();
    let spec = |id: &str| match &profiles
        .iter()
        .find(|p| p.id.as_str() == id)
        .unwrap()
        .backend
    {
        BackendSpec::Cli(spec) => spec.clone(),
        other => panic!("{other:?}"),
    };
    let claude = spec("claude");
    assert_eq!(claude.permission_mode.as_deref(), Some("default"));
    assert_eq!(claude.args, ["--max-turns", "30"]);
    assert_eq!(claude.timeout, Some(std::time::Duration::from_secs(90)));
    let codex = spec("cx");
    assert_eq!(
        (codex.permission_mode, codex.args.len(), codex.timeout),
        (None, 0, None)
    );

    for (setting, expected) in [
        (
            "permission_mode = \"yolo\"",
            "agents.cx.permission_mode: unknown permission mode \"yolo\" for codex; expected one of: read-only, workspace-write, danger-full-access",
        ),
        (
            "timeout_secs = 0",
            "agents.cx.timeout_secs: must be at least 1",
        ),
    ] {
        let text = format!("[agents.cx]\ndescription = \"x\"\nbackend = \"codex\"\n{setting}\n");
        let config = Config::parse(&text, Path::new(".orca/config.toml")).unwrap();
        let err = config
            .profiles(Path::new("/p"), &no_env)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(expected),
            "`{err}` does not contain `{expected}`"
        );
    }
}
