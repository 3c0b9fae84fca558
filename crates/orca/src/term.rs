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
        let env_off = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Self {
            color: !no_color && !env_off && std::io::stderr().is_terminal(),
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

/// Writes a line to stderr (progress and prompts never go to stdout, which is for results).
pub(crate) fn say(line: &str) {
    let line = crate::secrets::redact(line);
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
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
    let text = crate::secrets::redact(text);
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{text}");
    let _ = err.flush();
    drop(err);
    read_line()
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
    failed: usize,
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
        say(&format!(
            "{} {mark} {text}  {}",
            self.style.dim(&format!(
                "[{elapsed:>6.1}s {}/{} done, {} running]",
                state.done, self.total, state.running
            )),
            if state.failed > 0 {
                self.style.red(&format!("{} failed", state.failed))
            } else {
                String::new()
            }
        ));
    }
}

fn one_line(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if line.chars().count() > 100 {
        format!("{}…", line.chars().take(99).collect::<String>())
    } else {
        line.to_owned()
    }
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
                    &format!("{}{took} — {}", step, one_line(summary)),
                );
            }
            RunEvent::TaskFailed {
                step,
                failure,
                retry_in,
            } => {
                s.running = s.running.saturating_sub(1);
                let next = match retry_in {
                    Some(d) => format!(" — retrying in {:.1}s", d.as_secs_f64()),
                    None => {
                        s.failed += 1;
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
