//! Keeping a request inside the model's context window: an estimate of a request's size, and
//! fitting it by eliding the oldest tool results (the first message, with the step and its
//! threaded context, and the latest turn are never cut). What cannot be fitted fails with a
//! message naming the setting, instead of being cut silently by the server.

use crate::backend::{ChatRequest, Message};

/// What a tool result is replaced with when elided.
pub const ELIDED: &str = "(this older tool result was left out to fit the context window)";

/// A rough, deliberately generous token estimate: about 3.5 characters a token for English,
/// code and JSON, plus a little per message.
#[must_use]
pub fn estimate_tokens(request: &ChatRequest) -> u64 {
    let mut chars = request.system.chars().count();
    for t in &request.tools {
        chars += t.name.len() + t.description.len() + t.parameters.to_string().len();
    }
    if let Some(s) = &request.output_schema {
        chars += s.to_string().len();
    }
    let mut messages = 0usize;
    for m in &request.messages {
        messages += 1;
        chars += match m {
            Message::User { text } => text.chars().count(),
            Message::Assistant { text, tool_calls } => {
                text.as_deref().map_or(0, |t| t.chars().count())
                    + tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.to_string().len())
                        .sum::<usize>()
            }
            Message::Tool { results } => results.iter().map(|r| r.content.chars().count()).sum(),
        };
    }
    (chars as u64 * 2).div_ceil(7) + 8 * messages as u64
}

/// The outcome of fitting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// It fits as it is.
    Fits,
    /// It fits after eliding this many tool results.
    Trimmed(usize),
    /// It does not fit: the estimate after eliding everything that may be elided.
    TooLarge(u64),
}

/// Fits `request` into `window` tokens leaving `reserve` for the answer, eliding the oldest
/// tool results (never those of the latest turn).
pub fn fit(request: &mut ChatRequest, window: u64, reserve: u64) -> Fit {
    let budget = window.saturating_sub(reserve);
    if estimate_tokens(request) <= budget {
        return Fit::Fits;
    }
    let last_tool = request
        .messages
        .iter()
        .rposition(|m| matches!(m, Message::Tool { .. }));
    let mut elided = 0usize;
    for i in 0..last_tool.unwrap_or(0) {
        if let Some(Message::Tool { results }) = request.messages.get_mut(i) {
            for r in results.iter_mut().filter(|r| r.content != ELIDED) {
                r.content = ELIDED.to_owned();
                elided += 1;
            }
        }
        // Oldest first, stopping as soon as it fits: as much as possible is kept.
        if estimate_tokens(request) <= budget {
            return Fit::Trimmed(elided);
        }
    }
    Fit::TooLarge(estimate_tokens(request))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Sampling, ToolChoice, ToolResult};

    fn request(results: usize, size: usize) -> ChatRequest {
        let mut messages = vec![Message::User {
            text: "step".into(),
        }];
        for i in 0..results {
            messages.push(Message::Assistant {
                text: None,
                tool_calls: vec![],
            });
            messages.push(Message::Tool {
                results: vec![ToolResult {
                    call_id: format!("c{i}"),
                    name: "read_file".into(),
                    content: "x".repeat(size),
                    is_error: false,
                }],
            });
        }
        ChatRequest {
            system: "s".into(),
            messages,
            tools: vec![],
            tool_choice: ToolChoice::Auto,
            max_output_tokens: None,
            sampling: Sampling::default(),
            output_schema: None,
        }
    }

    #[test]
    fn old_results_are_elided_then_it_fails() {
        let mut r = request(3, 7_000);
        assert!(estimate_tokens(&r) > 5_000);
        assert_eq!(fit(&mut r, 100_000, 1_000), Fit::Fits);
        let mut r = request(3, 7_000);
        assert_eq!(fit(&mut r, 4_000, 1_000), Fit::Trimmed(2));
        let Message::Tool { results } = r.messages.last().unwrap() else {
            panic!()
        };
        assert_eq!(results[0].content.len(), 7_000, "the latest result is kept");
        let mut r = request(1, 70_000);
        assert!(matches!(fit(&mut r, 4_000, 1_000), Fit::TooLarge(n) if n > 3_000));
    }
}
