//! The command line: every command, option and help text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub(crate) const EXIT_CODES: &str = "\
Exit codes:
    0  success
    1  internal error
    2  bad input: usage, validation, unknown or ambiguous id, corrupt file, bad config,
       or the execution is being driven by another process
    3  the execution ended failed or stopped (`exec cancel`), or the planner's model failed
       (`ask`: an error status after retries, a timeout, an answer it could not use)
    4  waiting for a human decision that a non-interactive run cannot make, or a Replan that
       produced no usable plan (the decision is open again)
    5  audit verification found tampering
    6  conflict: the execution kept changing under concurrent writers, or the plan changed
       after it was shown for approval; nothing changed, try again
    7  `orca doctor` found a problem a run would meet
  130  interrupted: Ctrl-C or `exec stop` stopped the run (or `watch` found no live driver);
       the execution stays resumable with `orca exec resume`; Ctrl-C during `ask`'s planning";

/// Human-approved, durable, auditable multi-agent orchestration.
///
/// A planner builds a plan; you approve it; orca executes it step by step (or as a DAG),
/// dispatching each step to a specialist agent, retrying failures and asking you what to do
/// when a step cannot be completed. Everything is recorded under `.orca/` and survives crashes.
#[derive(Debug, Parser)]
#[command(name = "orca", version, after_help = EXIT_CODES, propagate_version = true)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every command takes.
#[derive(Debug, Clone, Args)]
pub(crate) struct Global {
    /// The project root (default: the nearest ancestor holding `.orca/`, else the current
    /// directory).
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) root: Option<PathBuf>,
    /// Print machine-readable JSON on stdout (a stable contract).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// More logs on stderr (-v info, -vv debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
    /// Only errors and results; `plan create`, `run` and `exec retry` print only the full id
    /// of what they created.
    #[arg(short, long, global = true)]
    pub(crate) quiet: bool,
    /// No colours (also: the NO_COLOR environment variable).
    #[arg(long, global = true)]
    pub(crate) no_color: bool,
    /// Also trust approvals and seals signed by this public key (`ed25519:…`), besides your
    /// own signing key; repeatable. A key under the project's `.orca/` is never trusted.
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) trusted_key: Vec<PathBuf>,
    /// The format of logs on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human)]
    pub(crate) log_format: LogFormat,
    /// A shared PostgreSQL store (`postgres://user@host:port/db`) instead of the files under
    /// `.orca/` (also: ORCA_STORE_URL, or `[store] url` in `.orca/config.toml`). A password
    /// here is refused (a command line is readable by every process of your user): use
    /// PGPASSWORD, ~/.pgpass, ORCA_STORE_URL or `[store] url` in your user config.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "ORCA_STORE_URL",
        hide_env_values = true
    )]
    pub(crate) store: Option<String>,
}

/// Log formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// Lines for people.
    Human,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create `.orca/` and a commented `.orca/config.toml` (never overwrites).
    Init,
    /// Send a message to the planner: it answers, or builds a plan you approve and run.
    #[command(after_help = EXIT_CODES)]
    Ask(AskArgs),
    /// Plans: create from a file, list, show, and the approval decisions.
    #[command(subcommand)]
    Plan(PlanCommand),
    /// Execute an approved plan (or a plan document) and drive it to its end.
    #[command(after_help = EXIT_CODES)]
    Run(RunArgs),
    /// Executions: list, show, logs, retry, resume, stop, cancel, decide.
    #[command(subcommand)]
    Exec(ExecCommand),
    /// Follow an execution driven by another process, live.
    #[command(after_help = EXIT_CODES)]
    Watch {
        /// The execution (an id or a unique prefix).
        exec: String,
    },
    /// A stable JSON Lines stream of an execution's events, from its durable audit log (works
    /// from any process, during a run and after it; schema: docs/events.md).
    #[command(
        after_help = "Examples:\n  orca events 01a1fb4a                       # what happened so far\n  orca events 01a1fb4a --follow | jq -c 'select(.type == \"task.attempt.completed\")'\n\nExit codes: 0, 2 unknown execution."
    )]
    Events {
        /// The execution (an id or a unique prefix).
        exec: String,
        /// Keep printing events until the execution ends or nothing drives it.
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// Audit logs.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Approval policies for a team: sign one, show the one in use, check what a plan needs.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Serve orca to an agent host (Claude Code, Codex, opencode…) as an MCP server on
    /// stdin/stdout. No tool approves a plan: approval stays the human's (ADR 0019).
    Mcp(crate::cmd::mcp::McpArgs),
    /// Agents.
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// The decision inbox and dashboard in a browser (localhost; a token on every request).
    #[command(
        after_help = "Examples:\n  orca serve --new-token phone   # prints the token once\n  orca serve                     # http://127.0.0.1:7777/login\n  orca serve --addr 0.0.0.0:7777 --tls-cert cert.pem --tls-key key.pem"
    )]
    Serve(crate::cmd::serve::ServeArgs),
    /// Drive executions of the (shared) store as they become ready, until stopped: on any
    /// host, as many worker processes as you like (ADR 0022).
    Worker(crate::cmd::worker::WorkerArgs),
    /// The shared PostgreSQL store: migrate its schema, export it to the file layout, import
    /// a file store into it.
    #[command(subcommand)]
    Store(crate::cmd::store::StoreCommand),
    /// Settings: the effective configuration and where each value comes from.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Measure how often a setup of agents gets a suite of tasks right (pass@1, pass^k),
    /// signed; verify a report; compare two.
    #[command(subcommand)]
    Eval(crate::cmd::eval::EvalCommand),
    /// Where each agent's key comes from (masked: never a secret character), what every
    /// step's environment holds, and the store's permissions.
    Doctor,
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  orca completions bash > ~/.local/share/bash-completion/completions/orca\n  orca completions zsh > ~/.zfunc/_orca\n  orca completions fish > ~/.config/fish/completions/orca.fish"
    )]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff).
    #[command(after_help = "Example:\n  orca man > orca.1 && man ./orca.1")]
    Man,
}

/// What `plan show` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ShowFormat {
    /// The plan for people.
    Text,
    /// The step graph as a Mermaid flowchart.
    Mermaid,
    /// The step graph in Graphviz DOT.
    Dot,
}

#[derive(Debug, Args)]
pub(crate) struct AskArgs {
    /// What you want.
    pub(crate) message: String,
    #[command(flatten)]
    pub(crate) run: RunOptions,
}

/// How an execution is driven.
#[derive(Debug, Clone, Args)]
pub(crate) struct RunOptions {
    /// Tasks in flight at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) concurrency: u16,
    /// Approve a proposal without asking (for scripts and CI).
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
    /// What to do when a step fails its last attempt: ask a human (Retry / Replan / Stop),
    /// stop the run, or skip the step's dependents and finish the rest.
    #[arg(long, value_enum, default_value_t = OnFailure::Ask)]
    pub(crate) on_failure: OnFailure,
    /// Attempts per step, unless the step sets `max_attempts`.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) max_attempts: u32,
    /// Seconds a step's processes get between SIGTERM and SIGKILL when they are ended
    /// (timeout, stop, Ctrl-C, takeover).
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub(crate) kill_grace: u64,
    /// Seconds the driver's lease counts as live without a renewal, for readers on another
    /// host (on this host a dead driver is seen at once); renewed every third of it.
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) lease_timeout: u64,
    /// When the execution completes, accept its result into your checked-out branch, as
    /// `orca exec accept --yes` does (its branch `orca/<execution>`, holding the merged results
    /// of worktree steps: a fast-forward or a merge commit; signed and audited); only when your
    /// working tree is clean and nothing conflicts. Otherwise orca never touches it.
    #[arg(long)]
    pub(crate) apply: bool,
}

/// Failure policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnFailure {
    /// Ask a human; without one, wait (exit 4) for `orca exec decide`.
    Ask,
    /// End the run as failed.
    Stop,
    /// Skip the dependents of the failed step, finish the independent branches.
    Skip,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// An approved plan (an id or a unique prefix), or a plan document (a JSON file) to create,
    /// approve (with --yes) and run.
    pub(crate) plan: String,
    #[command(flatten)]
    pub(crate) run: RunOptions,
    /// Create the execution and leave it to `orca worker` processes (on any host sharing the
    /// store); prints its id and returns at once.
    #[arg(long)]
    pub(crate) detach: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum PlanCommand {
    /// Create a proposal from a plan document (JSON), validated.
    Create {
        /// The plan document (`orca plan create plan.json`, or with `--file`).
        #[arg(
            value_name = "PATH",
            required_unless_present = "file",
            conflicts_with = "file"
        )]
        path: Option<PathBuf>,
        /// The plan document.
        #[arg(long, value_name = "PATH")]
        file: Option<PathBuf>,
    },
    /// Plans, newest first.
    #[command(
        after_help = "Examples:\n  orca plan list --status proposal\n  orca plan list --since 1h --limit 3"
    )]
    List {
        #[command(flatten)]
        filter: ListFilter,
    },
    /// One plan.
    #[command(
        after_help = "Examples:\n  orca plan show 01a1fb49 --graph\n  orca plan show 01a1fb49 --format mermaid > plan.mmd\n  orca plan show 01a1fb49 --format dot | dot -Tsvg > plan.svg"
    )]
    Show {
        /// The plan (an id or a unique prefix).
        plan: String,
        /// Draw the step graph.
        #[arg(long)]
        graph: bool,
        /// The output: text for people, or the step graph for Mermaid or Graphviz.
        #[arg(long, value_enum, default_value_t = ShowFormat::Text)]
        format: ShowFormat,
    },
    /// Check a plan document: every problem at once, nothing written, no project needed.
    #[command(
        after_help = "Examples:\n  orca plan validate examples/parallel-dag.json\n  orca plan validate plan.json --json\n\nExit codes: 0 valid, 2 unreadable or invalid (each problem on its own line)."
    )]
    Validate {
        /// The plan document (JSON).
        file: PathBuf,
    },
    /// Print the JSON Schema of plan documents (for editors: completion and checks as you type).
    #[command(
        after_help = "Example:\n  orca plan schema > plan.schema.json\n  # then in VS Code settings: \"json.schemas\": [{\"fileMatch\": [\"plans/*.json\"], \"url\": \"./plan.schema.json\"}]"
    )]
    Schema,
    /// Approve a proposal.
    Approve {
        /// The plan.
        plan: String,
        /// A note to record with the approval.
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
        /// Approve only if the plan's content still has this digest (`sha256:…`, as `plan
        /// show` printed it): content changed since you read it is refused (exit 6). At a
        /// terminal without it, the plan and its digest are shown and you confirm that content.
        #[arg(long, value_name = "DIGEST")]
        digest: Option<String>,
    },
    /// Reject a proposal.
    Reject {
        /// The plan.
        plan: String,
        /// Why.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// Create the next revision of a plan from a document you edited: a new proposal that
    /// supersedes PLAN (audited in both plans' logs). A proposal it replaces is rejected
    /// ("revised as …"), so only the revision can be approved.
    #[command(
        after_help = "Example (a plan created from a file, sent back with request-changes):\n  orca plan show 01a1fb49 --json > plan.json   # or edit the file you created it from\n  $EDITOR plan.json\n  orca plan revise 01a1fb49 --file plan.json\n  orca plan approve <the new id>\n\nExit codes: 0 created, 2 unknown plan or an invalid document (nothing written)."
    )]
    Revise {
        /// The plan to revise (an id or a unique prefix).
        plan: String,
        /// The revised plan document (JSON).
        #[arg(long, value_name = "PATH")]
        file: PathBuf,
    },
    /// Send a proposal back to draft with feedback for the planner.
    RequestChanges {
        /// The plan.
        plan: String,
        /// What should change.
        #[arg(long, value_name = "TEXT")]
        feedback: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ExecCommand {
    /// Executions, newest first.
    #[command(
        after_help = "Examples:\n  orca exec list --status failed --since 2d\n  orca exec list --limit 5 --json"
    )]
    List {
        /// Only this plan's.
        #[arg(long, value_name = "PLAN")]
        plan: Option<String>,
        #[command(flatten)]
        filter: ListFilter,
    },
    /// One execution with its tasks, their time, tokens and cost.
    Show {
        /// The execution (an id or a unique prefix).
        exec: String,
    },
    /// A step's output and its agent's transcript (the model's answers, each tool call with its
    /// result; 4 KB each), attempt by attempt (redacted).
    #[command(
        after_help = "Examples:\n  orca exec logs 01a1fb4a            # every step\n  orca exec logs 01a1fb4a build      # one step\n  orca exec logs 01a1fb4a build -f   # until the step ends\n\nExit codes: 0, 2 unknown execution or step."
    )]
    Logs {
        /// The execution (an id or a unique prefix).
        exec: String,
        /// Only this step.
        step: Option<String>,
        /// Keep printing until the step (or the execution) ends.
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// Run an execution's plan again as a NEW execution that reuses the recorded results of
    /// every step before STEP (default: before the first step that did not complete) and runs
    /// the rest. Audited in both executions, with a link to the source.
    #[command(
        after_help = "Examples:\n  orca exec retry 01a1fb4a                 # from the first failed step\n  orca exec retry 01a1fb4a --from build    # re-run build and everything after it\n\nExit codes: as for `orca run`; 2 if the plan is no longer approved or STEP is unknown."
    )]
    Retry {
        /// The execution to fork.
        exec: String,
        /// The first step to run again (it and every step that depends on it run again).
        #[arg(long, value_name = "STEP")]
        from: Option<String>,
        #[command(flatten)]
        run: RunOptions,
    },
    /// Continue after a crash or a pause.
    #[command(after_help = EXIT_CODES)]
    Resume {
        /// The execution.
        exec: String,
        #[command(flatten)]
        run: RunOptions,
    },
    /// What each step changed: its diff (the last attempt of each step, or of STEP), as git
    /// recorded it before and after the attempt (in place: trees built in a temporary index;
    /// in a worktree: its branch against where it started). Colour on a terminal. Outside a git
    /// repository only the list of changed files was recorded.
    #[command(
        after_help = "Examples:\n  orca exec diff 01a1fb4a\n  orca exec diff 01a1fb4a build\n  orca exec diff 01a1fb4a --stat\n\nExit codes: 0, 2 unknown execution or step."
    )]
    Diff {
        /// The execution (an id or a unique prefix).
        exec: String,
        /// Only this step.
        step: Option<String>,
        /// Only the files changed and the lines added and removed.
        #[arg(long)]
        stat: bool,
    },
    /// Accept a completed execution's result (its integration branch, with worktree
    /// isolation) into the checked-out branch: shows the whole diff and asks, then
    /// fast-forwards or makes a merge commit naming the execution. Signed and audited, bound
    /// to the result's tree. Refused, with nothing changed, on a dirty working tree, a
    /// conflict (listed), or a second decision.
    #[command(
        after_help = "Examples:\n  orca exec accept 01a1fb4a\n  orca exec accept 01a1fb4a --yes --note 'reviewed'\n\nExit codes: 0 accepted, 2 refused (nothing changed)."
    )]
    Accept {
        /// The execution (an id or a unique prefix).
        exec: String,
        /// A note recorded (and signed) with the decision.
        #[arg(long)]
        note: Option<String>,
        /// Do not show the diff nor ask.
        #[arg(long)]
        yes: bool,
    },
    /// Discard an execution's result: removes its branches and worktrees (its recorded step
    /// diffs stay). Audited.
    #[command(after_help = "Examples:\n  orca exec discard 01a1fb4a")]
    Discard {
        /// The execution (an id or a unique prefix).
        exec: String,
        /// A note recorded with the decision.
        #[arg(long)]
        note: Option<String>,
    },
    /// Stop the process driving an execution (on this host), like Ctrl-C in its terminal:
    /// running steps are ended (SIGTERM, grace, SIGKILL) and recorded as interrupted; the
    /// execution stays resumable with `orca exec resume`.
    Stop {
        /// The execution.
        exec: String,
        /// Why.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// End an execution for good (`stopped`, final); a process driving it ends its steps.
    Cancel {
        /// The execution.
        exec: String,
        /// Why.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// Answer a pending decision, then continue the run here.
    #[command(after_help = EXIT_CODES)]
    Decide {
        /// The execution.
        exec: String,
        /// The decision.
        #[arg(value_enum)]
        decision: DecisionArg,
        /// Guidance for the retry, or for the new plan.
        #[arg(long, value_name = "TEXT")]
        guidance: Option<String>,
        /// Only record the decision; do not continue the run here.
        #[arg(long)]
        no_run: bool,
        #[command(flatten)]
        run: RunOptions,
    },
}

/// Decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum DecisionArg {
    /// Run the step again (with --guidance).
    Retry,
    /// Have the planner build a new plan.
    Replan,
    /// Stop the execution.
    Stop,
    /// Answer a specialist's question (the answer in --guidance).
    Answer,
}

/// Filters of `plan list` and `exec list`.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct ListFilter {
    /// Only this stage (`proposal`, `approved`, `running`, `failed`, `interrupted`…).
    #[arg(long, value_name = "STAGE")]
    pub(crate) status: Option<String>,
    /// Only those created within this long (`30m`, `12h`, `7d`) or since this time (RFC 3339).
    #[arg(long, value_name = "AGE|TIME")]
    pub(crate) since: Option<String>,
    /// At most this many (the newest).
    #[arg(long, value_name = "N")]
    pub(crate) limit: Option<usize>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum PolicyCommand {
    /// Sign a policy file as its admin: writes FILE.sig (your signing key, or --key).
    #[command(
        after_help = "Example:\n  orca policy sign ~/team/policy.toml --key ~/admin.key\n\nExit codes: 0 signed, 2 an unreadable file or an invalid policy (nothing written)."
    )]
    Sign {
        /// The policy file (TOML).
        file: PathBuf,
        /// The admin's key file (default: your signing key).
        #[arg(long, value_name = "KEY_FILE")]
        key: Option<PathBuf>,
    },
    /// The approval policy in use (the user's config `[approval] policy`), verified.
    #[command(
        after_help = "Exit codes: 0, 2 no policy configured, 5 a policy that does not verify."
    )]
    Show,
    /// Which rules of the policy match a plan and what it needs (and has).
    #[command(
        after_help = "Exit codes: 0, 2 no policy or unknown plan, 5 a policy that does not verify."
    )]
    Check {
        /// A plan (an id or a unique prefix), or a plan document (a JSON file).
        plan: String,
    },
    /// Applies the due reminders, escalations and expiries of every pending proposal now,
    /// and sends them through the notifier (`orca serve` does this on its own).
    #[command(after_help = "Exit codes: 0, 2 no policy configured.")]
    Timers,
    /// Sign your approval of a plan on this machine, with your key, and print it: for an
    /// inbox under the policy (`orca serve`), which records it only if it verifies with your
    /// key in the policy. Needs no store; the policy is the one your config names.
    #[command(
        after_help = "Example (the inbox shows this command with the plan's digest):\n  orca policy vote plan_01a2… --digest sha256:94e6… --note \"ok for prod\"\n  # paste the line it prints into the inbox's approval page\n\nExit codes: 0 signed (printed), 2 no policy configured, a bad id or digest, or your key is no approver's, 5 a policy that does not verify."
    )]
    Vote {
        /// The plan's full id (`plan_…`, as the inbox shows it).
        plan: String,
        /// The digest of the plan's content you approve (`sha256:…`, as the inbox shows it).
        #[arg(long, value_name = "DIGEST")]
        digest: String,
        /// A note, signed with the approval.
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Verify audit logs; names the first bad entry.
    #[command(after_help = EXIT_CODES)]
    Verify {
        /// The execution (an id or a unique prefix); default: every log.
        exec: Option<String>,
        /// Every log (plans and executions).
        #[arg(long, conflicts_with = "exec")]
        all: bool,
    },
    /// The human-readable timeline of an execution or a plan (who, what, when, how long,
    /// which attempt) and its causal tree: execution → task attempt → tool call.
    #[command(
        after_help = "Examples:\n  orca audit show 01a1fb4a     # an execution\n  orca audit show 01a1fb49     # a plan: its lifecycle and its runs\n  orca audit show 01a1fb4a --json"
    )]
    Show {
        /// An execution or a plan (an id or a unique prefix).
        target: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// The effective settings, each with its source: the user's config
    /// ($XDG_CONFIG_HOME/orca/config.toml), under the project's .orca/config.toml, under the
    /// ORCA_BACKEND / ORCA_MODEL / ORCA_BASE_URL / ORCA_SANDBOX environment variables.
    #[command(
        after_help = "Examples:\n  orca config show\n  ORCA_MODEL=llama3.2 orca config show --json\n\nExit codes: 0, 2 a config file is invalid (named)."
    )]
    Show,
}

#[derive(Debug, Subcommand)]
pub(crate) enum AgentsCommand {
    /// Built-in and configured agents, with backend and model.
    List,
}
