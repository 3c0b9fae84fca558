//! The `orca` binary's integration tests, in ONE test binary: each file of this
//! directory is a module (`cargo test -p orca --test it e2e::` runs one of them). One binary
//! links the crate graph once instead of once per file. Every module drives the real binary in
//! temp dirs through `common` (the user's config home is a temp dir too).

mod common;
mod escape_support;
mod mcp_support;
mod tamper_support;
mod web_support;

mod accept;
mod approval_binding;
mod ask_failures;
mod ask_tty;
mod browser;
mod browser_pages;
mod budgets;
mod checks;
mod cli;
mod cli_transcript;
mod commands;
mod daily_use;
mod diffs;
mod e2e;
mod elicitation_policy;
mod eval;
mod git_plants;
mod hostile;
mod mcp;
mod mcp_clients;
mod model_progress;
mod net;
mod notify_delivery;
mod pg_chaos;
mod pg_store;
mod pg_tls;
mod pg_workers;
mod pid_ns_fallback;
mod plan_tools;
mod planner_tokens;
mod procs;
mod readme;
mod readme_multi_host;
mod rollback;
mod seals;
mod secrets;
mod short_ids;
mod stalls;
mod step_fds_and_keys;
mod step_processes;
mod store_input;
mod store_password;
mod stored_digest;
mod tamper;
mod tamper_wal;
mod team_approvals;
mod telemetry;
mod telemetry_followers;
mod transcript;
mod weak_model;
mod web;
mod web_policy;
mod web_results;
mod web_steps;
mod worktree_bases;
mod worktrees;
