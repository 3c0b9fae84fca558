//! The agent loop: offer tools, run tool calls, take the final result through the forced
//! submit tool, repair invalid results, enforce limits, retry transient backend errors.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use orca_core::{
    AgentAnswer, Budget, ErrorCode, PlannerRequest, PlannerResponse, QuestionRequest, Reply,
    TaskFailure, TaskRequest, TaskResult, ToolAccess, ToolCall, ToolHost, Usage,
};
use serde_json::Value;

use crate::generation::ToolMode;
use crate::profile::Profile;
use crate::schema::{self, SUBMIT_TOOL};
use crate::stall::{self, StallLimits};
use crate::task_message::project_files;
pub use crate::task_message::task_message;
use crate::tool_mode;
use orca_llm::BackendError;
use orca_llm::backend::{
    ChatBackend, ChatRequest, ChatResponse, Message, StopReason, ToolChoice, ToolResult,
};
use orca_llm::context_window::{self, Fit};

pub use orca_llm::retry::{RetryPolicy, call_with_retry};

/// Settings of the agent loop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoopSettings {
    /// Retries of transient backend errors.
    pub retry: RetryPolicy,
    /// The turn limit when neither the request nor the profile sets one.
    pub default_max_turns: u32,
    /// Attempts to repair an invalid (or missing) submitted result.
    pub max_repairs: u32,
    /// The output token cap of each turn.
    pub max_output_tokens: Option<u32>,
    /// Sampling settings sent with every turn.
    pub sampling: orca_llm::backend::Sampling,
    /// How the model makes tool calls (native, or JSON in its text).
    pub tool_mode: ToolMode,
    /// The backend's request timeout, named when a turn times out (`None`: unknown).
    pub request_timeout: Option<Duration>,
    /// The model's context window in tokens: each request is fitted into it or fails.
    pub context_window: Option<u64>,
    /// The idle timeout of a streamed answer, named when a stream stalls (`None`: unknown).
    pub idle_timeout: Option<Duration>,
    /// When a conversation that has stopped making progress ends `stalled` (see
    /// [`crate::stall`]).
    pub stall: StallLimits,
}

impl Default for LoopSettings {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            default_max_turns: 40,
            max_repairs: 2,
            max_output_tokens: Some(8192),
            sampling: orca_llm::backend::Sampling::default(),
            tool_mode: ToolMode::Native,
            request_timeout: None,
            context_window: None,
            idle_timeout: None,
            stall: StallLimits::DEFAULT,
        }
    }
}

/// One run of the loop.
struct Run<'a> {
    backend: &'a dyn ChatBackend,
    system: String,
    tools: &'a dyn ToolHost,
    budget: Budget,
    settings: &'a LoopSettings,
    /// The submit tool's schema offered natively (a flat object, as providers require).
    submit_schema: Value,
    /// The exact schema (one variant per kind), sent where it constrains decoding (json mode).
    exact_schema: Value,
    what: &'static str,
    /// The step's timeout, with the agent it names: enforced here, not around the loop, so
    /// that the usage of the turns already answered stays in the reply.
    timeout: Option<(Duration, String)>,
}

fn failure(code: ErrorCode, message: impl Into<String>) -> TaskFailure {
    TaskFailure::new(code, message)
}

impl Run<'_> {
    /// Runs to a validated result (or a failure), summing usage.
    async fn go<T>(
        &self,
        first: String,
        validate: impl Fn(&Value) -> Result<T, String>,
    ) -> (Result<T, TaskFailure>, Usage) {
        let mut usage = Usage::default();
        let started = Instant::now();
        let inner = self.inner(first, &validate, &mut usage, started);
        let wall = self.budget.max_wall_secs.map(Duration::from_secs);
        // The sooner of the wall-clock budget and the step's timeout ends the run; the usage
        // of every turn answered before it is kept (the future only borrows it).
        let step = self.timeout.as_ref().map(|(t, _)| *t);
        let limit = wall.into_iter().chain(step).min();
        let result = match limit {
            Some(limit) => match tokio::time::timeout(limit, inner).await {
                Ok(r) => r,
                Err(_) => Err(match (&self.timeout, wall) {
                    (Some((t, agent)), w) if w.is_none_or(|w| *t < w) => failure(
                        ErrorCode::Timeout,
                        format!(
                            "agent `{agent}` timed out after {}s",
                            started.elapsed().as_secs()
                        ),
                    ),
                    _ => failure(
                        ErrorCode::BudgetExceeded,
                        format!("time budget exceeded: more than {}s", limit.as_secs()),
                    ),
                }),
            },
            None => inner.await,
        };
        (result, usage)
    }

    async fn inner<T>(
        &self,
        first: String,
        validate: &impl Fn(&Value) -> Result<T, String>,
        usage: &mut Usage,
        started: Instant,
    ) -> Result<T, TaskFailure> {
        let json_mode = self.settings.tool_mode == ToolMode::Json;
        let mut tools: Vec<_> = self
            .tools
            .specs()
            .into_iter()
            .filter(|t| t.name != SUBMIT_TOOL)
            .collect();
        // In json mode the schema constrains what the model writes: it must be the validator's.
        let submit_schema = if json_mode {
            &self.exact_schema
        } else {
            &self.submit_schema
        };
        tools.push(schema::submit_tool(submit_schema.clone(), self.what));
        let max_turns = self
            .budget
            .max_turns
            .unwrap_or(self.settings.default_max_turns);
        let (system, offered, output_schema) = if json_mode {
            (
                format!("{}{}", self.system, tool_mode::instructions(&tools)),
                Vec::new(),
                Some(tool_mode::output_schema(&tools)),
            )
        } else {
            (self.system.clone(), tools.clone(), None)
        };
        let mut messages = vec![Message::User { text: first }];
        let mut repairs = 0u32;
        let mut stalls = stall::Detector::new(self.settings.stall);
        loop {
            if usage.turns >= max_turns {
                return Err(failure(
                    ErrorCode::BudgetExceeded,
                    format!(
                        "turn budget exceeded: {} turns without a submitted result",
                        usage.turns
                    ),
                ));
            }
            let mut request = ChatRequest {
                system: system.clone(),
                messages: messages.clone(),
                tools: offered.clone(),
                tool_choice: ToolChoice::Required,
                max_output_tokens: self.settings.max_output_tokens,
                sampling: self.settings.sampling,
                output_schema: output_schema.clone(),
            };
            if let Some(window) = self.settings.context_window {
                let reserve = u64::from(self.settings.max_output_tokens.unwrap_or(0));
                match context_window::fit(&mut request, window, reserve) {
                    Fit::Fits => {}
                    Fit::Trimmed(n) => {
                        tracing::info!(
                            elided = n,
                            window,
                            "older tool results left out to fit the context window"
                        );
                        messages.clone_from(&request.messages);
                    }
                    Fit::TooLarge(estimate) => {
                        return Err(failure(
                            ErrorCode::AgentError,
                            format!(
                                "the request is about {estimate} tokens, more than the context window of {window} tokens less {reserve} kept for the answer, even with older tool results left out: raise `context_window` (if the model allows it) or lower `max_output_tokens` in this agent's [generation] settings"
                            ),
                        ));
                    }
                }
            }
            let response = call_with_retry(self.backend, &request, &self.settings.retry)
                .await
                .map_err(|e| backend_failure(&e, self.settings))?;
            let mut turn_usage = response.usage;
            turn_usage.turns = 1;
            usage.add(&turn_usage);
            if let Some(answer) = response.text.as_deref().filter(|t| !t.trim().is_empty()) {
                self.tools
                    .model_answered(usage.turns, answer, &turn_usage)
                    .await;
            } else {
                let finish = response.stop_reason.finish_reason();
                self.tools
                    .model_turn(usage.turns, finish, &turn_usage)
                    .await;
            }
            let mut limits = self.budget;
            limits.max_turns = None;
            if let Some(msg) = limits.exceeded(usage, started.elapsed().as_secs()) {
                return Err(failure(ErrorCode::BudgetExceeded, msg));
            }
            // Cut at the cap while repeating whitespace only: the answer was over, the model
            // just did not stop. Read it as ended (a non-streamed answer; a streamed one was
            // already ended so).
            let mut response = response;
            if response.stop_reason == StopReason::MaxTokens
                && let Some(text) = response.text.as_deref()
                && orca_llm::repetition::looping(text).is_some_and(|l| l.whitespace)
            {
                response.text = Some(text.trim_end().to_owned());
                response.stop_reason = if response.tool_calls.is_empty() {
                    StopReason::EndTurn
                } else {
                    StopReason::ToolUse
                };
            }
            if response.stop_reason == StopReason::MaxTokens {
                // A cut answer is not a forgotten `submit_result`: repairing it only grows the
                // conversation, and a cut tool call's arguments are incomplete JSON.
                let cap = self
                    .settings
                    .max_output_tokens
                    .map_or_else(|| turn_usage.output_tokens.to_string(), |c| c.to_string());
                // A model repeating itself is not helped by a larger cap (the loop only runs
                // longer); this message also reaches its next attempt, so it says what to do.
                let looped = response
                    .text
                    .as_deref()
                    .and_then(orca_llm::repetition::looping)
                    .or_else(|| {
                        response
                            .tool_calls
                            .iter()
                            .find_map(|c| orca_llm::repetition::looping(&c.arguments.to_string()))
                    });
                let message = match looped {
                    Some(found) => format!(
                        "the answer repeated {found} (a generation loop) and was stopped after about {} output tokens; a larger `max_output_tokens` would not help: answer with less — change only the lines that must change (`edit_file`), not a whole file written again",
                        turn_usage.output_tokens
                    ),
                    None => format!(
                        "the answer was cut at {cap} output tokens; raise `max_output_tokens` for this agent"
                    ),
                };
                return Err(failure(ErrorCode::AgentError, message));
            }
            let ChatResponse {
                text,
                mut tool_calls,
                ..
            } = response;
            if tool_calls.is_empty() {
                // A call written as JSON in the text is taken: weak tool callers do this, and
                // in `json` mode it is the only way. The result, though, only in `json` mode:
                // natively it comes through the submit tool, never from prose.
                for found in tool_mode::calls_in_text(text.as_deref().unwrap_or(""), &tools) {
                    match found {
                        tool_mode::TextCall::Call(mut call)
                            if json_mode || call.name != SUBMIT_TOOL =>
                        {
                            call.id = orca_llm::backend::generated_call_id(tool_calls.len());
                            tool_calls.push(call);
                        }
                        tool_mode::TextCall::Call(_) => {}
                        tool_mode::TextCall::Bare(value) if json_mode => {
                            if let Ok(result) = validate(&value) {
                                tracing::debug!(turns = usage.turns, "result written as JSON text");
                                return Ok(result);
                            }
                        }
                        tool_mode::TextCall::Bare(_) => {}
                    }
                }
            }
            if json_mode {
                // The transcript stays plain text: the server was offered no native tools.
                messages.push(Message::Assistant {
                    text: text.clone().or_else(|| {
                        tool_calls.first().map(|c| {
                            serde_json::json!({"tool": c.name, "arguments": c.arguments})
                                .to_string()
                        })
                    }),
                    tool_calls: Vec::new(),
                });
            } else {
                messages.push(Message::Assistant {
                    text: text.clone(),
                    tool_calls: tool_calls.clone(),
                });
            }
            if tool_calls.is_empty() {
                repairs += 1;
                if repairs > self.settings.max_repairs {
                    return Err(failure(
                        ErrorCode::ParseError,
                        format!(
                            "the model answered without calling `{SUBMIT_TOOL}` {repairs} times"
                        ),
                    ));
                }
                let text = if json_mode {
                    format!(
                        "Answer with exactly one JSON object {{\"tool\": \"<name>\", \"arguments\": {{...}}}}; finish with {{\"tool\": \"{SUBMIT_TOOL}\", \"arguments\": <your {}>}}.",
                        self.what
                    )
                } else {
                    format!(
                        "You must finish by calling the `{SUBMIT_TOOL}` tool with your {}; do not answer in plain text.",
                        self.what
                    )
                };
                messages.push(Message::User { text });
                continue;
            }

            // The submit call, if any, is checked first: a valid result ends the run.
            let mut results: Vec<Option<ToolResult>> = vec![None; tool_calls.len()];
            let mut submitted_invalid = None;
            for (i, call) in tool_calls.iter().enumerate() {
                if call.name != SUBMIT_TOOL {
                    continue;
                }
                match validate(&call.arguments) {
                    Ok(value) => {
                        tracing::debug!(turns = usage.turns, "result submitted");
                        return Ok(value);
                    }
                    Err(err) => {
                        let msg = format!(
                            "invalid {}: {err}. Call `{SUBMIT_TOOL}` again with corrected arguments that match its schema.",
                            self.what
                        );
                        results[i] = Some(ToolResult {
                            call_id: call.id.clone(),
                            name: call.name.clone(),
                            content: msg,
                            is_error: true,
                        });
                        submitted_invalid = Some(err);
                    }
                }
            }
            if let Some(err) = submitted_invalid {
                repairs += 1;
                if repairs > self.settings.max_repairs {
                    return Err(failure(
                        ErrorCode::ParseError,
                        format!(
                            "the submitted {} was still invalid after {} repair attempts",
                            self.what, self.settings.max_repairs
                        ),
                    )
                    .with_cause(err));
                }
            }

            // The other calls run concurrently; errors go back to the model.
            let pending: Vec<(usize, &ToolCall)> = tool_calls
                .iter()
                .enumerate()
                .filter(|(i, _)| results[*i].is_none())
                .collect();
            let outcomes = if pending.iter().all(|(_, c)| {
                // Calls that only read run concurrently; plan builder calls, writes and
                // commands depend on order and run one at a time.
                self.tools
                    .access(&c.name)
                    .is_some_and(ToolAccess::runs_concurrently)
            }) {
                join_all(
                    pending
                        .iter()
                        .map(|(_, call)| {
                            Box::pin(run_tool(self.tools, call))
                                as Pin<Box<dyn Future<Output = ToolResult> + Send + '_>>
                        })
                        .collect(),
                )
                .await
            } else {
                // Calls that change something run one at a time, in the order the model gave.
                let mut outcomes = Vec::with_capacity(pending.len());
                for (_, call) in &pending {
                    outcomes.push(run_tool(self.tools, call).await);
                }
                outcomes
            };
            let ran: Vec<_> = pending
                .iter()
                .zip(&outcomes)
                .map(|((_, call), outcome)| (*call, outcome, self.tools.access(&call.name)))
                .collect();
            let stalled = stalls.turn(&ran);
            for ((i, call), mut outcome) in pending.iter().zip(outcomes) {
                stalls.annotate_refusal(call, &mut outcome);
                results[*i] = Some(outcome);
            }
            if let Some(message) = stalled {
                tracing::info!(turns = usage.turns, %message, "the conversation stalled");
                return Err(failure(ErrorCode::Stalled, message));
            }
            let results: Vec<ToolResult> = results.into_iter().flatten().collect();
            if json_mode {
                let mut text = String::new();
                for r in &results {
                    let status = if r.is_error { "error" } else { "result" };
                    text.push_str(&format!(
                        "{status} of `{}`:\n{}\n\n",
                        r.name,
                        tool_mode::result_text(&r.content)
                    ));
                }
                messages.push(Message::User {
                    text: text.trim_end().to_owned(),
                });
            } else {
                messages.push(Message::Tool { results });
            }
        }
    }
}

/// A failed backend call as one line the user can act on.
fn backend_failure(e: &BackendError, settings: &LoopSettings) -> TaskFailure {
    match e {
        BackendError::Unreachable { .. } | BackendError::Tls { .. } | BackendError::Auth { .. } => {
            failure(ErrorCode::BackendUnavailable, e.to_string())
        }
        BackendError::Timeout { endpoint } => {
            let limit = settings
                .request_timeout
                .map_or_else(String::new, |t| format!(" within {}s", t.as_secs()));
            let cap = settings
                .max_output_tokens
                .map_or_else(String::new, |m| format!(" (now {m})"));
            failure(
                ErrorCode::Timeout,
                format!(
                    "the model at {endpoint} did not answer{limit}; the turn was not re-sent (it would most likely time out again): raise `request_timeout_secs` or lower `max_output_tokens`{cap} in this agent's [generation] settings"
                ),
            )
        }
        BackendError::Stalled { endpoint, idle } => failure(
            ErrorCode::Timeout,
            format!(
                "the model at {endpoint} sent nothing for {} s (idle_timeout_secs); the turn was not re-sent (a stalled server most likely stalls again): check the server, or raise `idle_timeout_secs` (or set `stream = false`) in this agent's [generation] settings",
                idle.as_secs()
            ),
        ),
        _ => failure(ErrorCode::AgentError, e.to_string()),
    }
}

async fn run_tool(tools: &dyn ToolHost, call: &ToolCall) -> ToolResult {
    let (content, is_error) = if call.arguments.is_object() {
        match tools.call(call).await {
            Ok(value) => (
                match value {
                    Value::String(s) => s,
                    other => other.to_string(),
                },
                false,
            ),
            Err(err) => (format!("error: {}", err.message), true),
        }
    } else {
        tracing::debug!(tool = %call.name, "tool arguments are not a JSON object");
        (
            format!(
                "error: the arguments of `{}` are not a JSON object: {}",
                call.name,
                match &call.arguments {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                }
            ),
            true,
        )
    };
    ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content,
        is_error,
    }
}

/// Polls every future to completion, concurrently, keeping their order.
async fn join_all<'a, T>(mut futures: Vec<Pin<Box<dyn Future<Output = T> + Send + 'a>>>) -> Vec<T> {
    let mut out: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, fut) in out.iter_mut().zip(futures.iter_mut()) {
            if slot.is_some() {
                continue;
            }
            match fut.as_mut().poll(cx) {
                Poll::Ready(v) => *slot = Some(v),
                Poll::Pending => pending = true,
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// Runs a task through the loop.
pub(crate) async fn run_task(
    backend: &dyn ChatBackend,
    profile: &Profile,
    request: &TaskRequest,
    budget: Budget,
    tools: &dyn ToolHost,
    settings: &LoopSettings,
) -> Reply<TaskResult> {
    let run = Run {
        backend,
        system: profile.prompt.clone(),
        tools,
        budget,
        settings,
        submit_schema: schema::task_result_schema(),
        exact_schema: schema::task_result_variants(),
        what: "task result",
        timeout: request
            .timeout
            .map(|t| (t, request.agent.as_str().to_owned())),
    };
    let mut first = task_message(request);
    first.push_str(&project_files(tools).await);
    let (result, usage) = run.go(first, schema::parse_submitted_task_result).await;
    Reply {
        outcome: result.unwrap_or_else(TaskResult::Failure),
        usage,
        session: None,
    }
}

/// Asks a question through the loop.
pub(crate) async fn ask(
    backend: &dyn ChatBackend,
    profile: &Profile,
    request: &QuestionRequest,
    budget: Budget,
    tools: &dyn ToolHost,
    settings: &LoopSettings,
) -> Reply<Result<AgentAnswer, TaskFailure>> {
    if request.session.is_some() {
        tracing::warn!(agent = %request.agent, "model backends keep no sessions; starting a new conversation");
    }
    let run = Run {
        backend,
        system: profile.prompt.clone(),
        tools,
        budget,
        settings,
        submit_schema: schema::answer_schema(),
        exact_schema: schema::answer_schema(),
        what: "answer",
        timeout: None,
    };
    let first = format!(
        "A read-only question (do not change anything):\n\n{}",
        request.question
    );
    let (result, usage) = run.go(first, schema::parse_answer).await;
    Reply {
        outcome: result,
        usage,
        session: None,
    }
}

/// Gives the planner a message through the loop.
pub(crate) async fn plan(
    backend: &dyn ChatBackend,
    _profile: &Profile,
    system: &str,
    request: &PlannerRequest,
    budget: Budget,
    tools: &dyn ToolHost,
    settings: &LoopSettings,
) -> Reply<PlannerResponse> {
    let run = Run {
        backend,
        system: system.to_owned(),
        tools,
        budget,
        settings,
        submit_schema: schema::planner_response_schema(),
        exact_schema: schema::planner_response_variants(),
        what: "planner response",
        timeout: None,
    };
    let mut first = request.message.clone();
    if let Some(plan) = &request.plan_id {
        first.push_str(&format!("\n\n(The plan being worked on: `{plan}`.)"));
    }
    let (result, usage) = run
        .go(first, schema::parse_submitted_planner_response)
        .await;
    Reply {
        outcome: result.unwrap_or_else(PlannerResponse::Failure),
        usage,
        session: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_honours_retry_after_and_grows() {
        let p = RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
        };
        let ra = BackendError::RateLimited {
            endpoint: "e".into(),
            message: "m".into(),
            retry_after: Some(Duration::from_secs(7)),
        };
        assert_eq!(
            p.delay(0, &ra),
            Duration::from_secs(2),
            "capped by max_delay"
        );
        let t = BackendError::Server {
            endpoint: "e".into(),
            status: 500,
            message: "m".into(),
            retry_after: None,
        };
        for retry in 0..5 {
            let d = p.delay(retry, &t);
            let exp = Duration::from_millis(100 * 2u64.pow(retry)).min(Duration::from_secs(2));
            assert!(
                d >= exp / 2 && d <= exp,
                "retry {retry}: {d:?} not in [{:?}, {exp:?}]",
                exp / 2
            );
        }
    }
}
