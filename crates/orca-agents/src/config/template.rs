//! The commented `.orca/config.toml` that `orca init` writes.

/// The commented template `orca init` writes.
pub const CONFIG_TEMPLATE: &str = r#"# orca configuration. Every setting is optional.
#
# Without any backend configured, orca uses Anthropic if ANTHROPIC_API_KEY is set, else OpenAI if
# OPENAI_API_KEY is set, else a local Ollama at http://127.0.0.1:11434 (its native API, which
# takes the context size). The `shell` agent needs no model at all.
#
# Backends: anthropic, openai (any OpenAI-compatible endpoint: OpenAI, vLLM, llama.cpp, LM
# Studio), ollama, claude-code, codex, opencode (command-line agents), scripted (replays a JSON
# file), shell.
#
# Keys are never written here. A backend's key comes from ONE of:
#   - api_key_env: the NAME of an environment variable ("OPENAI_API_KEY");
#   - api_key_file: a file holding the key, mode 0600 (orca refuses a file others can read);
#   - api_key_cmd: a command printing the key ("pass show openai"), run without a shell,
#     its first line used, 15 s at most.
# `orca doctor` shows which source each agent uses, masked.
#
# Steps (shell steps, run_command, command-line agents) do NOT inherit orca's environment: they
# get PATH, HOME, USER, LANG, LC_*, TERM, TMPDIR and the ORCA_* variables, plus what is named:
# in a plan step (`"env": ["GITHUB_TOKEN"]`), in an agent below (its `env`), or here.
# These two lines must come before any [table]:
# env = ["GITHUB_TOKEN"]        # every step receives these variables
# env_file = ".orca/step.env"   # NAME=value lines every step receives (mode 0600)

# How shell steps, run_command and command-line agents are confined (ADR 0012). "kernel" (the
# default): Landlock and a mount namespace, so they write only the project (never .orca/) and a
# per-step TMPDIR, and cannot read the signing key; where the kernel cannot, orca says so and
# falls back to "tools": the agents' file tools refuse .orca/ and the orca config. "off": no
# confinement, warned at every run. The ORCA_SANDBOX environment variable overrides this.
# sandbox = "kernel"
# Extra places steps may write in "kernel" mode (absolute, or ~/...), e.g. build caches:
# sandbox_writable = ["~/.cargo/registry", "~/.npm"]
# Where steps that declare `writes` run when neither they nor their plan say (ADR 0017):
# "worktree" gives each its own git worktree, merged into the run's branch orca/<execution>.
# isolation = "in_place"

# AGENTS.md / CLAUDE.md in the project root go into the planner's and specialists' prompts
# (16 KiB at most). This line, before any [table], keeps them out:
# project_instructions = false

# Model endpoints behind a company proxy or with a private CA: the system's root certificates
# are always trusted; ca_file adds a PEM file of your own (also per agent, in its table).
# HTTPS_PROXY / HTTP_PROXY / ALL_PROXY / NO_PROXY in orca's environment apply to model requests.
# [tls]
# ca_file = "/etc/ssl/private-ca.pem"

# OpenTelemetry traces and metrics (off unless an endpoint is set; the OTEL_* variables win).
# Header values are secrets: never printed. Answers go into spans only with
# capture_message_content is true, redacted as the audit log has them.
# [telemetry]
# endpoint = "http://localhost:4318"
# protocol = "http/protobuf"
# headers = { authorization = "Bearer …" }

# Settings every agent starts from.
# [defaults]
# backend = "anthropic"
# model = "claude-sonnet-4-5"
# api_key_env = "ANTHROPIC_API_KEY"

# Prices in USD per million tokens, overriding or adding to the shipped table (dated
# 2025-08-15); models not in the table (local ones) cost 0. Budgets use these.
# [prices."gpt-4.1"]
# input = 2.0
# output = 8.0
# cache_read = 0.5
# cache_write = 0.0

# Override a built-in agent (orca, planner, coder, tester, reviewer, researcher,
# document-writer, architect).
# [agents.reviewer]
# backend = "openai"
# base_url = "https://api.openai.com/v1"
# model = "gpt-4.1"
# api_key_env = "OPENAI_API_KEY"
# tools = ["read_file", "list_files", "search_text"]
#
# [agents.reviewer.limits]
# max_turns = 20
# max_tokens = 200000
# max_cost_micro_usd = 500000
# max_wall_secs = 600
# max_repeats = 3                 # same call, same result, 3 times in a row: `stalled` (0: off)
# stall_turns = 5                 # 5 turns that only re-read what was read: `stalled` (0: off)
# idle_secs = 600                 # command-line agents: no output, no file change (0: off)
#
# Generation settings, per agent or under [defaults.generation] (an agent's win field by field).
# [agents.reviewer.generation]
# max_output_tokens = 4096        # per turn (default 8192); a cut answer fails and says so
# request_timeout_secs = 300      # per model request; a timed-out turn is not re-sent
# temperature = 0.2               # also top_p, seed; reasoning_effort = "low" (OpenAI o-series/gpt-5)
# token_param = "auto"            # or "max_tokens", "max_completion_tokens"
# tool_mode = "native"            # "json" for small local models with weak tool calling
# context_window = 32768          # fit requests into the window, or fail before sending;
#                                 # unset: asked from llama.cpp / vLLM / Ollama servers
# stream = true                   # false for servers that cannot stream answers
# idle_timeout_secs = 60          # a stream silent this long is given up (not re-sent)

# A custom agent: the planner lists it with its description.
# [agents.db-expert]
# description = "knows our database schema and migrations"
# backend = "ollama"
# model = "qwen2.5-coder"
# api = "ollama"                # Ollama's native API: sends num_ctx, so the window is yours
# prompt_file = ".orca/prompts/db-expert.md"   # or: prompt = "You are ..."
# tools = ["read_file", "list_files", "search_text"]

# A command-line coding agent as a specialist; it names the key it needs.
# [agents.claude]
# description = "Claude Code, for larger code changes"
# backend = "claude-code"
# command = "claude"
# env = ["ANTHROPIC_API_KEY"]
# model = "claude-sonnet-4-5"
# permission_mode = "acceptEdits"   # codex: "workspace-write", opencode: "auto" (the defaults)
# args = ["--max-turns", "30"]      # extra flags, after orca's own
# timeout_secs = 1800                # hard timeout per run

# Any other command-line agent, declared (examples/agents/ has Gemini CLI and Aider).
# [agents.gemini]
# description = "Gemini CLI"
# backend = "cli"
# command = "gemini"
# args = ["--output-format", "json", "--approval-mode", "yolo"]   # non-interactive
# env = ["GEMINI_API_KEY"]
# [agents.gemini.cli]
# prompt_via = "stdin"                # or "argument" / "file", with prompt_flag = "..."
# answer = "json:/response"           # or "last-line", "stdout", "regex:..."
# output_tokens = "json:/stats/models/*/tokens/candidates"
# state_dirs = [".gemini"]            # under HOME, writable in the sandbox
"#;
