//! The terminal: colours, the two-question prompts, and run progress.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::Mutex;
use std::time::Instant;

use async_trait::async_trait;
use orca_core::{AgentId, HumanAnswer, TwoQuestion};
use orca_services::hitl::context_prompt;
use orca_services::{Hitl, Observer, RunEvent};

/// Colours for stderr, off with `--no-color`, `NO_COLOR`, or when stderr is not a terminal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Style {
    pub(crate) color: bool,
}

impl Style {
    pub(crate) fn detect(no_color: bool) -> Self {
        Self {
            color: !no_color && colour_allowed(std::io::stderr().is_terminal()),
        }
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    pub(crate) fn green(self, t: &str) -> String {
        self.paint("32", t)
    }
    pub(crate) fn red(self, t: &str) -> String {
        self.paint("31", t)
    }
    pub(crate) fn yellow(self, t: &str) -> String {
        self.paint("33", t)
    }
    pub(crate) fn bold(self, t: &str) -> String {
        self.paint("1", t)
    }
    pub(crate) fn dim(self, t: &str) -> String {
        self.paint("2", t)
    }
}

/// How this process writes: set once from the global options, before any output.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Output {
    /// `--no-color` or `NO_COLOR`.
    pub(crate) no_color: bool,
    /// `--log-format json`: stderr carries JSON lines only.
    pub(crate) json_logs: bool,
}

static OUTPUT: std::sync::OnceLock<Output> = std::sync::OnceLock::new();

/// Sets how this process writes (the first call wins).
pub(crate) fn configure(output: Output) {
    let _ = OUTPUT.set(output);
}

fn output() -> Output {
    OUTPUT.get().copied().unwrap_or_default()
}

fn no_color_env() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// Whether colour may go to a stream that is (or is not) a terminal.
fn colour_allowed(is_terminal: bool) -> bool {
    is_terminal && !output().no_color && !no_color_env()
}

/// `text` without ANSI escape sequences (CSI `ESC [ … letter`).
pub(crate) fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Text for stdout: no colour unless stdout is a terminal and colour is allowed.
pub(crate) fn for_stdout(text: &str) -> String {
    if colour_allowed(std::io::stdout().is_terminal()) {
        text.to_owned()
    } else {
        strip_ansi(text)
    }
}

/// Writes a line to stderr (progress and prompts never go to stdout, which is for results).
/// With `--log-format json` the line is a JSON object like the log lines' (`timestamp`,
/// `level`, `fields.message`, `target`), so stderr stays pure JSON lines.
pub(crate) fn say(line: &str) {
    let line = crate::redact::redact(&crate::ids::abbreviate(line));
    let line = if colour_allowed(std::io::stderr().is_terminal()) {
        line
    } else {
        strip_ansi(&line)
    };
    let mut err = std::io::stderr().lock();
    crate::model_meter::clear_status(&mut err);
    if output().json_logs {
        for l in line.lines().filter(|l| !l.trim().is_empty()) {
            let level = if l.starts_with("error:") {
                "ERROR"
            } else if l.starts_with("warning:") {
                "WARN"
            } else {
                "INFO"
            };
            let now = time::OffsetDateTime::now_utc()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default();
            let value = serde_json::json!({
                "timestamp": now, "level": level, "fields": { "message": l }, "target": "orca",
            });
            let _ = writeln!(err, "{value}");
        }
        return;
    }
    let _ = writeln!(err, "{line}");
}

/// The width tables must fit: `COLUMNS` if set, else the terminal's width when stdout is a
/// terminal; `None` (no limit) when stdout is a pipe or file.
pub(crate) fn width() -> Option<usize> {
    if let Some(cols) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0)
    {
        return Some(cols);
    }
    if !std::io::stdout().is_terminal() {
        return None;
    }
    terminal_columns(1)
}

/// The width of the terminal on stderr (`COLUMNS` if set), for a line that must not wrap.
pub(crate) fn stderr_width() -> Option<usize> {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0)
        .or_else(|| terminal_columns(2))
}

fn terminal_columns(fd: i32) -> Option<usize> {
    orca_os::term::columns(fd)
}

/// Whether a person can answer prompts.
pub(crate) fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Asks decisions on the terminal: numbered options, matched exactly (a number, a key or a
/// label), then the context question for the chosen action.
#[derive(Debug)]
pub(crate) struct TerminalHitl {
    pub(crate) style: Style,
}

fn read_line() -> Option<String> {
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim_end_matches(['\n', '\r']).to_owned()),
    }
}

fn prompt(text: &str) -> Option<String> {
    let text = crate::redact::redact(text);
    let mut err = std::io::stderr().lock();
    crate::model_meter::clear_status(&mut err);
    let _ = write!(err, "{text}");
    let _ = err.flush();
    drop(err);
    // No status line is drawn over a question waiting for its answer.
    let _asking = crate::model_meter::Asking::start();
    read_line()
}

/// Asks a yes/no question on stderr and reads the answer from stdin: only `y` or `yes`
/// agree (end of input is no).
pub(crate) fn confirm(question: &str) -> bool {
    prompt(&format!("{question} [y/N] "))
        .is_some_and(|a| matches!(a.trim().to_ascii_lowercase().as_str(), "y" | "yes"))
}

#[async_trait]
impl Hitl for TerminalHitl {
    async fn decide(&self, question: &TwoQuestion) -> Option<HumanAnswer> {
        let question = question.clone();
        let style = self.style;
        tokio::task::spawn_blocking(move || {
            say("");
            say(&question.header);
            say(&style.bold(&question.action.prompt));
            for (i, o) in question.action.options.iter().enumerate() {
                say(&format!(
                    "  {}) {:<16} {}",
                    i + 1,
                    o.label,
                    style.dim(&o.description)
                ));
            }
            loop {
                let answer = prompt("> ")?;
                let answer = answer.trim();
                let chosen = answer
                    .parse::<usize>()
                    .ok()
                    .and_then(|n| n.checked_sub(1))
                    .and_then(|i| question.action.options.get(i))
                    .or_else(|| {
                        question
                            .action
                            .options
                            .iter()
                            .find(|o| o.key == answer || o.label == answer)
                    });
                let Some(option) = chosen else {
                    say(&format!(
                        "`{answer}` is not an option: type a number or one of {}",
                        question
                            .action
                            .options
                            .iter()
                            .map(|o| o.key.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    continue;
                };
                let context = match context_prompt(question.touchpoint, &option.key) {
                    None => None,
                    Some(c) => loop {
                        let text = prompt(&format!("{}: ", c.prompt))?;
                        if c.required && text.trim().is_empty() {
                            say("an answer is required here");
                            continue;
                        }
                        break Some(text).filter(|t| !t.trim().is_empty());
                    },
                };
                return Some(HumanAnswer {
                    action: option.key.clone(),
                    context,
                });
            }
        })
        .await
        .ok()
        .flatten()
    }

    async fn ask_text(&self, agent: &AgentId, question: &str) -> Option<String> {
        let header = format!("{agent} asks: {question}");
        tokio::task::spawn_blocking(move || {
            say("");
            say(&header);
            prompt("> ")
        })
        .await
        .ok()
        .flatten()
    }
}

/// Prints run progress to stderr: each attempt, completion, failure and decision, with the
/// elapsed time and a running count.
pub(crate) struct Progress {
    style: Style,
    quiet: bool,
    start: Instant,
    total: usize,
    state: Mutex<ProgressState>,
}

#[derive(Default)]
struct ProgressState {
    done: usize,
    /// Steps whose last attempt failed: a step counts once, and no longer once it runs again
    /// (a retry decided by a human).
    failed: std::collections::BTreeSet<String>,
    running: usize,
    started: std::collections::HashMap<String, Instant>,
}

impl Progress {
    pub(crate) fn new(style: Style, quiet: bool, total: usize, already_done: usize) -> Self {
        Self {
            style,
            quiet,
            start: Instant::now(),
            total,
            state: Mutex::new(ProgressState {
                done: already_done,
                ..ProgressState::default()
            }),
        }
    }

    fn line(&self, state: &ProgressState, mark: &str, text: &str) {
        let elapsed = self.start.elapsed().as_secs_f64();
        let mut line = format!(
            "{} {mark} {text}",
            self.style.dim(&format!(
                "[{elapsed:>6.1}s {}/{} done, {} running]",
                state.done, self.total, state.running
            ))
        );
        if !state.failed.is_empty() {
            line.push_str("  ");
            line.push_str(&self.style.red(&format!("{} failed", state.failed.len())));
        }
        say(&line);
    }
}

/// The line that says what a step did: the last line starting with `summary:` if the step
/// printed one, else its last non-empty line (a shell step's summary is the tail of its
/// output, whose last line is the meaningful one), at most 100 characters.
pub(crate) fn headline(text: &str) -> String {
    orca_services::timeline::headline(text)
}

/// At most `max` characters; a cut is marked `…` and closes the parentheses it opened.
pub(crate) fn clip(text: &str, max: usize) -> String {
    orca_services::timeline::clip(text, max)
}

fn one_line(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    clip(line, 100)
}

/// A failure that is no failure of the step: it was stopped, cancelled or interrupted.
fn is_interruption(code: orca_core::ErrorCode) -> bool {
    matches!(
        code,
        orca_core::ErrorCode::Cancelled | orca_core::ErrorCode::Interrupted
    )
}

impl Observer for Progress {
    fn event(&self, event: &RunEvent) {
        if self.quiet {
            return;
        }
        let Ok(mut s) = self.state.lock() else { return };
        match event {
            RunEvent::Recovered { steps } => {
                let names: Vec<&str> = steps.iter().map(orca_core::StepId::as_str).collect();
                self.line(
                    &s,
                    &self.style.yellow("↻"),
                    &format!(
                        "took over: attempts of {} were interrupted and will run again",
                        names.join(", ")
                    ),
                );
            }
            RunEvent::TaskStarted {
                step,
                agent,
                attempt,
            } => {
                s.running += 1;
                s.failed.remove(step.as_str());
                s.started.insert(step.to_string(), Instant::now());
                let again = if *attempt > 1 {
                    format!(" (attempt {attempt})")
                } else {
                    String::new()
                };
                self.line(
                    &s,
                    "▶",
                    &format!(
                        "{} {}{again}",
                        self.style.bold(step.as_str()),
                        self.style.dim(&format!("[{agent}]"))
                    ),
                );
            }
            RunEvent::TaskCompleted { step, summary } => {
                s.running = s.running.saturating_sub(1);
                s.done += 1;
                let took = s
                    .started
                    .get(step.as_str())
                    .map(|t| format!(" in {:.1}s", t.elapsed().as_secs_f64()))
                    .unwrap_or_default();
                self.line(
                    &s,
                    &self.style.green("✓"),
                    &format!("{}{took} — {}", step, headline(summary)),
                );
            }
            RunEvent::TaskFailed {
                step,
                failure,
                retry_in,
            } => {
                s.running = s.running.saturating_sub(1);
                if is_interruption(failure.code) && retry_in.is_none() {
                    self.line(
                        &s,
                        &self.style.yellow("⊘"),
                        &format!("{step} {}: {}", failure.code, one_line(&failure.message)),
                    );
                    return;
                }
                let next = match retry_in {
                    Some(d) => format!(" — retrying in {:.1}s", d.as_secs_f64()),
                    None => {
                        s.failed.insert(step.to_string());
                        String::new()
                    }
                };
                self.line(
                    &s,
                    &self.style.red("✗"),
                    &format!("{step}: {}{next}", one_line(&failure.to_string())),
                );
            }
            RunEvent::TaskSkipped { step } => {
                self.line(
                    &s,
                    &self.style.yellow("↷"),
                    &format!("{step} skipped (an upstream step failed)"),
                );
            }
            RunEvent::WaitingForLock {
                step,
                resource,
                holder,
            } => {
                let by = holder.as_ref().map_or_else(String::new, |h| {
                    format!(" held by {} step {}", h.execution, h.step)
                });
                self.line(
                    &s,
                    &self.style.dim("…"),
                    &format!("{step} waiting for lock `{resource}`{by}"),
                );
            }
            RunEvent::DecisionNeeded { request } => {
                self.line(
                    &s,
                    &self.style.yellow("?"),
                    &format!("decision needed for step {}", request.step_id()),
                );
            }
            _ => {}
        }
    }
}
