//! The planner's tokens per step, measured on a recorded run. This drives `orca ask`
//! against the fake planner of `mcp_support` (a recorded conversation: create a draft, set
//! assumptions / risks / verification, add one step, submit) and measures every request the
//! planner sent: system prompt, tool list and messages, in characters and in estimated tokens
//! (the estimate `orca_llm::context_window` uses: 3.5 characters a token plus 8 a message).
//! It prints the figures and fails if the first request — what every planning session pays
//! before the model has said anything — grows past a budget, or if the planner is offered a
//! tool it has no use for.

use crate::common::project::{Project, code, stderr, stdout};

use serde_json::Value;

/// What the first planner request may cost at most, in estimated tokens. The issue measured
/// about 3k on a real run; small local models start at 4k–8k windows.
const FIRST_REQUEST_BUDGET: u64 = 4_000;

fn chars(v: &Value) -> usize {
    match v {
        Value::String(s) => s.chars().count(),
        Value::Null => 0,
        other => other.to_string().chars().count(),
    }
}

struct Sizes {
    system: usize,
    tools: usize,
    messages: usize,
    count: usize,
}

impl Sizes {
    fn of(body: &Value) -> Self {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let system: usize = messages
            .iter()
            .filter(|m| m["role"] == "system")
            .map(|m| chars(&m["content"]))
            .sum();
        let rest: usize = messages
            .iter()
            .filter(|m| m["role"] != "system")
            .map(|m| chars(&m["content"]) + chars(&m["tool_calls"]))
            .sum();
        let tools = body["tools"].as_array().map_or(0, |tools| {
            tools
                .iter()
                .map(|t| {
                    let f = &t["function"];
                    chars(&f["name"]) + chars(&f["description"]) + f["parameters"].to_string().len()
                })
                .sum()
        });
        Self {
            system,
            tools,
            messages: rest,
            count: messages.len(),
        }
    }

    fn tokens(&self) -> u64 {
        ((self.system + self.tools + self.messages) as u64 * 2).div_ceil(7) + 8 * self.count as u64
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planners_tokens_per_request_and_per_step_are_measured() {
    let p = Project::new();
    let server = crate::mcp_support::planner::serve_for(p.root()).await;
    let root = p.root().to_path_buf();
    let config = p.config.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        crate::common::orca(&root, &config, &["ask", "say hello in hello.txt"])
    })
    .await
    .unwrap();
    // No terminal and no --yes: the proposal waits for a human (exit 4).
    assert_eq!(code(&out), 4, "{}{}", stdout(&out), stderr(&out));

    let requests = server.received_requests().await.unwrap_or_default();
    let bodies: Vec<Value> = requests
        .iter()
        .filter_map(|r| serde_json::from_slice(&r.body).ok())
        .collect();
    assert!(
        bodies.len() >= 2,
        "the planner made {} requests",
        bodies.len()
    );

    let steps = 1u64; // the recorded plan has one step
    let mut total = 0u64;
    eprintln!("planner requests (estimated tokens = chars x 2/7 + 8 a message):");
    for (i, body) in bodies.iter().enumerate() {
        let s = Sizes::of(body);
        let tools: Vec<&str> = body["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["function"]["name"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        total += s.tokens();
        eprintln!(
            "  request {}: {} messages; system {} chars, {} tools {} chars, messages {} chars: ~{} tokens",
            i + 1,
            s.count,
            s.system,
            tools.len(),
            s.tools,
            s.messages,
            s.tokens()
        );
        if i == 0 {
            eprintln!("  tools offered: {}", tools.join(", "));
            // A planner builds plans: it never runs a shell or writes files.
            let misplaced: Vec<&&str> = tools
                .iter()
                .filter(|t| ["write_file", "run_command", "orca_invoke"].contains(t))
                .collect();
            assert!(misplaced.is_empty(), "planner offered {misplaced:?}");
        }
    }
    let first = Sizes::of(&bodies[0]).tokens();
    eprintln!(
        "planner: {} requests, ~{total} prompt tokens in all, ~{} per plan step, first request ~{first}",
        bodies.len(),
        total / steps
    );
    assert!(
        first <= FIRST_REQUEST_BUDGET,
        "the planner's first request is ~{first} tokens, over the budget of {FIRST_REQUEST_BUDGET}"
    );
}
