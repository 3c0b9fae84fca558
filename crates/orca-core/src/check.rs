//! Checks: commands, approved with the plan, whose exit status decides whether work passed.
//!
//! A step's [`Check`]s run after its agent reports success, in the step's workspace, under the
//! same sandbox and environment as the step; the plan's run once every step completed, on the
//! integrated result. The step (or the execution) completes only when every check exits 0. No
//! model takes part: a check is a command and its exit status, nothing else.
//!
//! This module holds the rule (what a check is, what a run of one reports, the failure a
//! failed run becomes); running them is the agent port's ([`crate::AgentPort::run_checks`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::id::{AgentId, ExecutionId, PlanId};
use crate::ownership::StepIdentity;
use crate::results::{ErrorCode, TaskFailure};

/// The time limit of a check that names none.
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(600);

/// Bytes kept of a check's output (stdout and stderr interleaved): its tail.
pub const CHECK_OUTPUT_BYTES: usize = 8 * 1024;

/// Lines of a failed check's output quoted in its failure's `cause`, the part the next
/// attempt is told.
pub const CHECK_CAUSE_LINES: usize = 12;

/// Bytes of a failed check's output quoted in its failure's `cause`: with the message (whose
/// command is cut at [`CHECK_COMMAND_CHARS`]) it fits the default bound of an earlier attempt's
/// error in the next attempt's context (`ContextLimits::max_attempt_chars`), so the tail of the
/// output — where a test run says what failed — is never the part left out.
pub const CHECK_CAUSE_BYTES: usize = 400;

/// Characters of a check's command named in its failure's message.
pub const CHECK_COMMAND_CHARS: usize = 100;

/// A command that must exit 0 for the work to count (`cargo test -p api`), run with `sh -c`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// The command (`sh -c`), run in the step's workspace (its worktree or the project).
    pub command: String,
    /// Its wall-clock limit in seconds (default: 600); past it the check fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

impl Check {
    /// A check running `command` with the default time limit.
    #[must_use]
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            timeout_secs: None,
        }
    }

    /// Its time limit.
    #[must_use]
    pub fn timeout(&self) -> Duration {
        self.timeout_secs
            .map_or(DEFAULT_CHECK_TIMEOUT, Duration::from_secs)
    }

    /// What is wrong with it, if anything: an empty command, a NUL byte, a zero time limit.
    #[must_use]
    pub fn problem(&self) -> Option<&'static str> {
        if self.command.trim().is_empty() {
            Some("`command` is empty")
        } else if self.command.contains('\0') {
            Some("`command` holds a NUL byte, which no shell can run")
        } else if self.timeout_secs == Some(0) {
            Some("`timeout_secs` must be at least 1")
        } else {
            None
        }
    }
}

/// Checks to run, where and as whom: a step's (after its agent succeeded) or the plan's (once
/// every step completed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChecksRequest {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The plan.
    pub plan_id: PlanId,
    /// The step's attempt the checks judge; `None` for the plan's checks.
    pub identity: Option<StepIdentity>,
    /// Whose configured environment names the checks get (the step's agent; `shell` for the
    /// plan's checks).
    pub agent: AgentId,
    /// The step's `env` names (none for the plan's checks).
    pub env: Vec<String>,
    /// Where they run when it is not the project root (a step's worktree, the execution's
    /// integration worktree).
    pub workdir: Option<std::path::PathBuf>,
    /// The checks, in order; the first that fails ends the run.
    pub checks: Vec<Check>,
}

/// How one check ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case", deny_unknown_fields)]
pub enum CheckVerdict {
    /// It exited 0.
    Passed,
    /// It exited non-zero or was killed by a signal.
    Failed {
        /// "exit status 1", "killed by signal 9".
        status: String,
    },
    /// It ran past its time limit; its process group was ended.
    TimedOut {
        /// The limit, in seconds.
        after_secs: u64,
    },
    /// It could not run at all (no shell, an agent port that runs no checks).
    NotRun {
        /// Why.
        reason: String,
    },
}

/// One check as it ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRun {
    /// The command.
    pub command: String,
    /// How it ended.
    #[serde(flatten)]
    pub verdict: CheckVerdict,
    /// The tail of its output (at most [`CHECK_OUTPUT_BYTES`]).
    pub output: String,
    /// How long it took, in milliseconds.
    pub millis: u64,
}

impl CheckRun {
    /// Whether it passed.
    #[must_use]
    pub const fn passed(&self) -> bool {
        matches!(self.verdict, CheckVerdict::Passed)
    }

    /// A check that did not run, for `reason`.
    #[must_use]
    pub fn not_run(check: &Check, reason: impl Into<String>) -> Self {
        Self {
            command: check.command.clone(),
            verdict: CheckVerdict::NotRun {
                reason: reason.into(),
            },
            output: String::new(),
            millis: 0,
        }
    }

    /// What went wrong, one line ("exit status 1"); `None` if it passed.
    #[must_use]
    pub fn what_failed(&self) -> Option<String> {
        match &self.verdict {
            CheckVerdict::Passed => None,
            CheckVerdict::Failed { status } => Some(status.clone()),
            CheckVerdict::TimedOut { after_secs } => Some(format!("timed out after {after_secs}s")),
            CheckVerdict::NotRun { reason } => Some(format!("did not run: {reason}")),
        }
    }
}

/// The `check_failed` failure of the first failed run in `runs`, or `None` if they all
/// passed. Its message names the check, its `cause` quotes the tail of the output (what the
/// next attempt is told) and its `output` keeps what was captured.
#[must_use]
pub fn failure_of(runs: &[CheckRun]) -> Option<TaskFailure> {
    let (run, what) = runs.iter().find_map(|r| r.what_failed().map(|w| (r, w)))?;
    let cause = tail(&run.output, CHECK_CAUSE_LINES, CHECK_CAUSE_BYTES);
    let command: String = if run.command.chars().count() > CHECK_COMMAND_CHARS {
        let mut c: String = run.command.chars().take(CHECK_COMMAND_CHARS - 1).collect();
        c.push('…');
        c
    } else {
        run.command.clone()
    };
    Some(TaskFailure {
        code: ErrorCode::CheckFailed,
        message: format!("the checks failed: `{command}` {what}"),
        cause: Some(cause).filter(|c| !c.is_empty()),
        output: Some(run.output.clone()).filter(|o| !o.is_empty()),
    })
}

/// The last `max_lines` lines of `text`, at most `max_bytes` bytes (cut at a character).
#[must_use]
pub fn tail(text: &str, max_lines: usize, max_bytes: usize) -> String {
    let trimmed = text.trim_end();
    let start = trimmed
        .char_indices()
        .rev()
        .filter(|(_, c)| *c == '\n')
        .nth(max_lines.saturating_sub(1))
        .map_or(0, |(i, _)| i + 1);
    let mut out = &trimmed[start..];
    if out.len() > max_bytes {
        let mut cut = out.len() - max_bytes;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = &out[cut..];
    }
    out.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(command: &str, verdict: CheckVerdict, output: &str) -> CheckRun {
        CheckRun {
            command: command.to_owned(),
            verdict,
            output: output.to_owned(),
            millis: 1,
        }
    }

    #[test]
    fn the_first_failed_run_is_the_failure() {
        let runs = [
            run("true", CheckVerdict::Passed, ""),
            run(
                "test -f fixed",
                CheckVerdict::Failed {
                    status: "exit status 1".into(),
                },
                "a\nb\nmissing: fixed\n",
            ),
            run("never", CheckVerdict::TimedOut { after_secs: 2 }, ""),
        ];
        let f = failure_of(&runs).unwrap();
        assert_eq!(f.code, ErrorCode::CheckFailed);
        assert_eq!(
            f.to_string(),
            "check_failed: the checks failed: `test -f fixed` exit status 1 (a\nb\nmissing: fixed)"
        );
        assert!(failure_of(&runs[..1]).is_none());
        // A long command and a long output: the message and the output's tail fit what the
        // next attempt is told of an earlier one.
        let long = run(
            &"x".repeat(5000),
            CheckVerdict::Failed {
                status: "exit status 1".into(),
            },
            &format!("{}\nTHE END", "y".repeat(9000)),
        );
        let text = failure_of(&[long]).unwrap().to_string();
        let limit = crate::ContextLimits::default().max_attempt_chars;
        assert!(text.chars().count() <= limit, "{}", text.len());
        assert!(text.ends_with("THE END)"), "{text}");
        assert!(failure_of(&[]).is_none());
    }

    #[test]
    fn tail_keeps_the_last_lines_and_bytes() {
        assert_eq!(tail("1\n2\n3\n", 2, 100), "2\n3");
        assert_eq!(tail("1\n2\n3", 5, 100), "1\n2\n3");
        assert_eq!(tail("abcdef", 5, 3), "def");
        assert_eq!(tail("ééé", 1, 3), "é");
        assert_eq!(tail("", 3, 3), "");
    }

    #[test]
    fn problems_are_named() {
        assert!(Check::new("cargo test").problem().is_none());
        assert!(Check::new("  ").problem().is_some());
        assert!(Check::new("a\0b").problem().is_some());
        let zero = Check {
            command: "true".into(),
            timeout_secs: Some(0),
        };
        assert!(zero.problem().is_some());
    }
}
