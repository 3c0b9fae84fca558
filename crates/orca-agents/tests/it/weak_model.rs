//! Models whose native tool calls are weak: `tool_mode = "json"` (no native tools, an output
//! schema, calls read from the text) and, in native mode, a result written as a JSON block.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::sync::Arc;

use common::{TestTools, fast_settings, task};
use orca_agents::{Agents, BackendSpec, ChatBackend, Generation, Message, Profile, ToolMode};
use orca_core::{AgentId, AgentPort, Budget, ErrorCode, QuestionRequest, Role, TaskResult};
use orca_llm::{PriceTable, ScriptedBackend};
use serde_json::{Value, json};

fn text_turn(text: &str) -> Value {
    json!({"text": text, "usage": {"input_tokens": 100, "output_tokens": 10}})
}

fn weak(turns: Value, mode: ToolMode) -> (Agents, Arc<ScriptedBackend>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let backend =
        Arc::new(ScriptedBackend::from_json(&json!({"turns": turns}).to_string(), "weak").unwrap());
    let profile = Profile {
        id: AgentId::parse("coder").unwrap(),
        role: Role::Specialist,
        description: "test".into(),
        backend: BackendSpec::Custom(Arc::clone(&backend) as Arc<dyn ChatBackend>),
        prompt: "prompt".into(),
        workspace_tools: vec![],
        limits: Budget::UNLIMITED,
    };
    let mut agents = Agents::new(dir.path(), [], fast_settings(0)).unwrap();
    let generation = Generation {
        tool_mode: mode,
        ..Generation::default()
    };
    agents
        .insert_with(profile, generation, &PriceTable::shipped())
        .unwrap();
    (agents, backend, dir)
}

/// A model that never makes a native call: a fenced call, then the result in prose. In json
/// mode every request offers no native tools, carries the output schema of the allowed calls,
/// and the transcript stays plain text.
#[tokio::test]
async fn json_mode_task_completes_without_native_tool_calls() {
    let (agents, backend, _dir) = weak(
        json!([
            text_turn(
                "I will look it up.\n```json\n{\"tool\": \"lookup\", \"arguments\": {\"key\": \"k\"}}\n```"
            ),
            text_turn("Done: {\"status\": \"success\", \"summary\": \"found it\"}"),
        ]),
        ToolMode::Json,
    );
    let tools = TestTools::new();
    let reply = agents
        .run_task(task("coder", Budget::UNLIMITED), &tools)
        .await;
    assert!(
        matches!(&reply.outcome, TaskResult::Success(s) if s.summary == "found it"),
        "{:?}",
        reply.outcome
    );
    assert_eq!(tools.names(), ["lookup"]);
    let requests = backend.requests();
    let native_tools_offered: usize = requests.iter().map(|r| r.tools.len()).sum();
    let without_schema = requests
        .iter()
        .filter(|r| {
            let s = r
                .output_schema
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_default();
            !(s.contains("\"lookup\"") && s.contains("\"submit_result\""))
        })
        .count();
    let native_messages = requests
        .iter()
        .flat_map(|r| &r.messages)
        .filter(|m| {
            matches!(m, Message::Tool { .. })
                || matches!(m, Message::Assistant { tool_calls, .. } if !tool_calls.is_empty())
        })
        .count();
    println!(
        "json mode: {} requests, {native_tools_offered} native tools offered, {without_schema} without the call schema, {native_messages} native tool messages",
        requests.len()
    );
    assert_eq!(requests.len(), 2);
    assert_eq!(native_tools_offered, 0);
    assert_eq!(without_schema, 0);
    assert_eq!(native_messages, 0);
    assert!(requests[0].system.contains("How to call tools"));
    assert!(matches!(
        requests[1].messages.last(),
        Some(Message::User { text }) if text.contains("result of `lookup`")
    ));
}

/// Native mode: a result is taken only through the `submit_result` tool. A valid result
/// written in prose (a fenced block, or a call envelope in the text) is not scraped: the model
/// is told to call the tool, and its native call is what counts.
#[tokio::test]
async fn native_mode_takes_a_result_only_through_the_submit_tool() {
    let (agents, backend, _dir) = weak(
        json!([
            text_turn(
                "Here is my result:\n```json\n{\"status\": \"success\", \"summary\": \"from prose\"}\n```"
            ),
            text_turn(
                "{\"tool\": \"submit_result\", \"arguments\": {\"status\": \"success\", \"summary\": \"from an envelope\"}}"
            ),
            {"tool_calls": [{"name": "submit_result",
                "arguments": {"status": "success", "summary": "from the tool"}}],
             "usage": {"input_tokens": 100, "output_tokens": 10}},
        ]),
        ToolMode::Native,
    );
    let reply = agents
        .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
        .await;
    let requests = backend.requests();
    let told = requests
        .iter()
        .filter(|r| {
            matches!(r.messages.last(), Some(Message::User { text })
                if text.contains("calling the `submit_result` tool"))
        })
        .count();
    println!(
        "native mode: {} requests, told to call the tool {told} times, result: {:?}",
        requests.len(),
        reply.outcome
    );
    assert!(
        matches!(&reply.outcome, TaskResult::Success(s) if s.summary == "from the tool"),
        "{:?}",
        reply.outcome
    );
    assert_eq!((requests.len(), told), (3, 2));

    // Prose alone, whatever it holds, ends as a parse error after the repairs.
    let (agents, _backend, _dir) = weak(
        json!([
            text_turn("```json\n{\"status\": \"success\", \"summary\": \"ok\"}\n```"),
            text_turn("I think it works."),
            text_turn("still prose"),
        ]),
        ToolMode::Native,
    );
    let reply = agents
        .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
        .await;
    assert!(
        matches!(&reply.outcome, TaskResult::Failure(f) if f.code == ErrorCode::ParseError),
        "{:?}",
        reply.outcome
    );
}

/// Json mode sends the validator's own schema for `submit_result` (one variant per status),
/// in the prompt and in the output schema: a value mixing two statuses' fields — what a
/// constrained 1.5B model wrote under the flat schema — is outside it.
#[tokio::test]
async fn json_mode_sends_the_exact_submit_schema() {
    let (agents, backend, _dir) = weak(
        json!([text_turn(
            "{\"tool\": \"submit_result\", \"arguments\": {\"status\": \"success\", \"summary\": \"ok\"}}"
        )]),
        ToolMode::Json,
    );
    let reply = agents
        .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
        .await;
    assert!(
        matches!(&reply.outcome, TaskResult::Success(_)),
        "{:?}",
        reply.outcome
    );
    let requests = backend.requests();
    let schema = requests[0].output_schema.clone().unwrap();
    let submit = schema["anyOf"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["properties"]["tool"]["enum"][0] == "submit_result")
        .unwrap()["properties"]["arguments"]
        .clone();
    assert_eq!(submit, orca_agents::schema::task_result_variants());
    let variants = submit["oneOf"].as_array().unwrap();
    let success = variants
        .iter()
        .find(|v| v["properties"]["status"]["enum"][0] == "success")
        .unwrap();
    println!(
        "json mode submit schema: {} variants; success allows {:?}",
        variants.len(),
        success["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>()
    );
    assert_eq!(variants.len(), 3);
    assert!(success["properties"].get("code").is_none());
    assert_eq!(success["additionalProperties"], false);
    // The prompt lists the same schema.
    assert!(
        requests[0]
            .system
            .contains(&orca_agents::schema::task_result_variants().to_string()),
        "the prompt carries the exact schema"
    );
}

/// `ask` in json mode: the answer arrives as a bare JSON call envelope.
#[tokio::test]
async fn json_mode_ask_answers() {
    let (agents, _backend, _dir) = weak(
        json!([text_turn(
            "{\"tool\": \"submit_result\", \"arguments\": {\"answer\": \"42\"}}"
        )]),
        ToolMode::Json,
    );
    let reply = agents
        .ask(
            QuestionRequest {
                agent: AgentId::parse("coder").unwrap(),
                question: "what?".into(),
                session: None,
                budget: Budget::UNLIMITED,
            },
            &TestTools::new(),
        )
        .await;
    let answer = reply.outcome.unwrap();
    assert_eq!(answer.answer, "42");
}

/// The request bodies of a `json` mode turn, as the OpenAI-compatible and Responses adapters
/// send them: no native tools, the call schema as `response_format` / `text.format`.
#[test]
fn json_mode_request_bodies() {
    use orca_agents::{ChatRequest, Sampling, ToolChoice};
    use orca_llm::{OpenAiBackend, ResponsesBackend};
    let tools = vec![orca_core::ToolSpec {
        name: "submit_result".into(),
        description: "submit".into(),
        parameters: json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}),
    }];
    let request = ChatRequest {
        system: format!("prompt{}", orca_agents::tool_mode::instructions(&tools)),
        messages: vec![Message::User {
            text: "what?".into(),
        }],
        tools: vec![],
        tool_choice: ToolChoice::Required,
        max_output_tokens: Some(512),
        sampling: Sampling {
            temperature: Some(0.2),
            ..Sampling::default()
        },
        output_schema: Some(orca_agents::tool_mode::output_schema(&tools)),
    };
    let chat = OpenAiBackend::new("http://127.0.0.1:8080/v1", "qwen2.5-coder:1.5b", None);
    insta::assert_json_snapshot!("json_mode_chat_body", chat.request_body(&request));
    let responses = ResponsesBackend::new(
        "http://127.0.0.1:8080/v1",
        "gpt-4.1-mini",
        None,
        std::time::Duration::from_secs(5),
    );
    insta::assert_json_snapshot!("json_mode_responses_body", responses.request_body(&request));
}

/// What a small model reads in json mode: the task's first message lists the project's files
/// (a 1.5B model told "fix calc.py" otherwise edits whatever it read first), and a command's
/// output comes back with its own lines, not as a JSON string of `\n` escapes. With real
/// workspace tools; without `list_files` granted, no listing is made.
#[tokio::test]
async fn json_mode_lists_the_project_and_shows_output_as_text() {
    use orca_agents::workspace::WorkspaceTools;
    let script = json!([
        text_turn(
            "{\"tool\": \"run_command\", \"arguments\": {\"command\": \"printf 'F.\\\\nAssertionError: -1 != 5\\\\n'; exit 1\"}}"
        ),
        text_turn(
            "{\"tool\": \"submit_result\", \"arguments\": {\"status\": \"success\", \"summary\": \"ok\"}}"
        ),
    ]);
    let mut seen = Vec::new();
    for granted in [
        vec!["list_files", "read_file", "run_command"],
        vec!["read_file", "run_command"],
    ] {
        let (agents, backend, _dir) = weak(script.clone(), ToolMode::Json);
        let project = tempfile::tempdir().unwrap();
        std::fs::write(
            project.path().join("calc.py"),
            "def add(a, b):\n    return a - b\n",
        )
        .unwrap();
        std::fs::write(project.path().join("test_calc.py"), "import calc\n").unwrap();
        let granted: Vec<String> = granted.into_iter().map(str::to_owned).collect();
        let tools = WorkspaceTools::new(project.path(), &granted).unwrap();
        let reply = agents
            .run_task(task("coder", Budget::UNLIMITED), &tools)
            .await;
        assert!(
            matches!(&reply.outcome, TaskResult::Success(_)),
            "{:?}",
            reply.outcome
        );
        let requests = backend.requests();
        let first = match requests[0].messages.first() {
            Some(Message::User { text }) => text.clone(),
            other => panic!("{other:?}"),
        };
        let result = match requests[1].messages.last() {
            Some(Message::User { text }) => text.clone(),
            other => panic!("{other:?}"),
        };
        seen.push((
            first.contains("## Files in the project\n- calc.py\n- test_calc.py\n"),
            result.contains("exit_code: 1\noutput:\nF.\nAssertionError: -1 != 5"),
            result.contains("\\n"),
        ));
    }
    println!("(listed, output as lines, escaped newlines) with list_files, without: {seen:?}");
    assert_eq!(seen, [(true, true, false), (false, true, false)]);
}

/// A guessed path is corrected in the error a model reads: `src/greet.py` for the project's
/// `greet.py` names the real path (a 1.5B model, told "cannot open … (os error 2)", wrote a
/// new `src/greet.py` instead); a name found nowhere in this small project names every file
/// (in a larger one it points at `list_files`: the next test).
#[tokio::test]
async fn a_missing_path_names_the_files_of_that_name() {
    use orca_agents::workspace::WorkspaceTools;
    use orca_core::{ToolCall, ToolHost};
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("greet.py"), "print('hi')\n").unwrap();
    std::fs::create_dir(project.path().join("lib")).unwrap();
    std::fs::write(project.path().join("lib/greet.py"), "x = 1\n").unwrap();
    let granted = ["read_file", "edit_file"].map(str::to_owned);
    let tools = WorkspaceTools::new(project.path(), &granted).unwrap();
    let call = |name: &str, arguments: Value| ToolCall {
        id: "c".into(),
        name: name.into(),
        arguments,
    };
    let mut errors = Vec::new();
    for c in [
        call("read_file", json!({"path": "src/greet.py"})),
        call(
            "edit_file",
            json!({"path": "src/greet.py", "old": "a", "new": "b"}),
        ),
        call("read_file", json!({"path": "nowhere.py"})),
    ] {
        errors.push(tools.call(&c).await.unwrap_err().message);
    }
    println!("{errors:#?}");
    for e in &errors[..2] {
        assert!(
            e.contains("`src/greet.py` does not exist")
                && e.contains("`greet.py`")
                && e.contains("`lib/greet.py`"),
            "{e}"
        );
    }
    assert!(
        errors[2].contains("all of the project's files: `greet.py`, `lib/greet.py`"),
        "{}",
        errors[2]
    );
}

/// A guessed directory with exactly one file of that name in the project is taken as that file
/// (a 1.5B model kept writing `src/…` after being told the right path, two trials lost): the
/// read and the edit reach `app.py`, and the note says which path was used. A new file named
/// like one elsewhere is written where asked, and the result names the other. Two candidates,
/// or a refused place, are never guessed.
#[tokio::test]
async fn a_guessed_directory_reaches_the_only_file_of_that_name() {
    use orca_agents::workspace::WorkspaceTools;
    use orca_core::{ToolCall, ToolHost};
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("app.py"), "PORT = 80\n").unwrap();
    std::fs::create_dir(project.path().join("lib")).unwrap();
    std::fs::write(project.path().join("util.py"), "a = 1\n").unwrap();
    std::fs::write(project.path().join("lib/util.py"), "a = 2\n").unwrap();
    std::fs::create_dir(project.path().join(".orca")).unwrap();
    std::fs::write(project.path().join(".orca/secret.py"), "k = 1\n").unwrap();
    let granted = ["read_file", "edit_file", "write_file", "run_command"].map(str::to_owned);
    let tools = WorkspaceTools::new(project.path(), &granted).unwrap();
    let call = |name: &str, arguments: Value| ToolCall {
        id: "c".into(),
        name: name.into(),
        arguments,
    };
    let read = tools
        .call(&call("read_file", json!({"path": "src/app.py"})))
        .await
        .unwrap();
    println!("read: {read}");
    assert_eq!(read["path"], "app.py");
    assert_eq!(read["content"], "PORT = 80\n");
    assert!(
        read["note"]
            .as_str()
            .unwrap()
            .contains("`src/app.py` does not exist")
    );
    let edited = tools
        .call(&call(
            "edit_file",
            json!({"path": "src/app.py", "old": "80", "new": "8080"}),
        ))
        .await
        .unwrap();
    println!("edit: {edited}");
    assert_eq!(edited["edited"], "app.py");
    assert_eq!(
        std::fs::read_to_string(project.path().join("app.py")).unwrap(),
        "PORT = 8080\n"
    );
    assert!(!project.path().join("src").exists());
    // A path that exists is read as it is (a plain string, as before).
    let plain = tools
        .call(&call("read_file", json!({"path": "app.py"})))
        .await
        .unwrap();
    assert_eq!(plain, json!("PORT = 8080\n"));
    // Two files of the name: never guessed; orca's records: never a candidate.
    let ambiguous = tools
        .call(&call("read_file", json!({"path": "src/util.py"})))
        .await
        .unwrap_err();
    assert!(
        ambiguous.message.contains("`lib/util.py`"),
        "{}",
        ambiguous.message
    );
    let hidden = tools
        .call(&call("read_file", json!({"path": "src/secret.py"})))
        .await
        .unwrap_err();
    assert!(!hidden.message.contains(".orca"), "{}", hidden.message);
    // A command that failed on the guessed path: the result names the right one; one that
    // did not fail says nothing more.
    let ran = tools
        .call(&call("run_command", json!({"command": "cat src/app.py"})))
        .await
        .unwrap();
    println!("run: {ran}");
    assert_ne!(ran["exit_code"], 0);
    assert!(
        ran["note"].as_str().unwrap().contains("is `app.py`"),
        "{ran}"
    );
    let fine = tools
        .call(&call("run_command", json!({"command": "cat app.py"})))
        .await
        .unwrap();
    assert!(fine.get("note").is_none(), "{fine}");
    // A new file named like the project's: written where asked, the other one named.
    let written = tools
        .call(&call(
            "write_file",
            json!({"path": "src/app.py", "content": "PORT = 1\n"}),
        ))
        .await
        .unwrap();
    println!("write: {written}");
    assert_eq!(written["written"], "src/app.py");
    assert!(written["note"].as_str().unwrap().contains("`app.py`"));
    assert_eq!(
        std::fs::read_to_string(project.path().join("app.py")).unwrap(),
        "PORT = 8080\n"
    );
}

/// An edit whose `old` text is not in the file shows the file's closest lines, numbered, to be
/// copied exactly: a 1.5B model sent `print('Hello, world!')` for the file's
/// `print(f"Hello, {args.name}!")` three times in a row, told only that it occurs 0 times, and
/// its attempt stalled. Nothing close: told to read the file. Several: told to add lines. Then,
/// shown the line, it sent it with single quotes four times: that is taken as the line.
#[tokio::test]
async fn an_edit_that_misses_shows_the_closest_lines() {
    use orca_agents::workspace::WorkspaceTools;
    use orca_core::{ToolCall, ToolHost};
    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("greet.py"),
        "import argparse\n\n\ndef main():\n    parser = argparse.ArgumentParser()\n    args = parser.parse_args()\n    print(f\"Hello, {args.name}!\")\n\n\nmain()\nmain()\n",
    )
    .unwrap();
    let tools = WorkspaceTools::new(project.path(), &["edit_file".to_owned()]).unwrap();
    let edit = |old: &str| ToolCall {
        id: "c".into(),
        name: "edit_file".into(),
        arguments: json!({"path": "greet.py", "old": old, "new": "x"}),
    };
    let missed = tools
        .call(&edit("print('Hello, world!')"))
        .await
        .unwrap_err()
        .message;
    println!("{missed}");
    let first_shown = missed.lines().nth(1).unwrap_or_default();
    assert_eq!(
        first_shown, "line 7:     print(f\"Hello, {args.name}!\")",
        "{missed}"
    );
    let far = tools.call(&edit("zzzz qqqq")).await.unwrap_err().message;
    assert!(far.contains("read_file"), "{far}");
    let twice = tools.call(&edit("main()\n")).await.unwrap_err().message;
    assert!(
        twice.contains("occurs 2 times") && twice.contains("more of the lines"),
        "{twice}"
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("greet.py"))
            .unwrap()
            .matches('x')
            .count(),
        0,
        "nothing was edited"
    );
    // The same line with single quotes for the file's double ones (json mode makes a model
    // escape a double quote; small ones write single quotes): found, and `new` written with
    // the file's quotes.
    let swapped = ToolCall {
        id: "c".into(),
        name: "edit_file".into(),
        arguments: json!({"path": "greet.py", "old": "print(f'Hello, {args.name}!')",
                          "new": "print(f'HELLO, {args.name}!')"}),
    };
    let edited = tools.call(&swapped).await.unwrap();
    println!("{edited}");
    assert!(
        edited["note"].as_str().unwrap().contains("double quotes"),
        "{edited}"
    );
    assert!(
        std::fs::read_to_string(project.path().join("greet.py"))
            .unwrap()
            .contains("    print(f\"HELLO, {args.name}!\")\n"),
    );
    // The same edit again, once made: said to be made (the model sent it once more, then
    // edited the result into itself until it stalled).
    let again = tools.call(&swapped).await.unwrap_err().message;
    assert!(again.contains("this edit was made"), "{again}");
}

/// A file rewritten with the content it already has is reported unchanged: a 1.5B model
/// rewrote an unfixed `src/lib.rs` five times, each time told only "written". An edit of
/// equal texts is refused.
#[tokio::test]
async fn a_write_or_edit_that_changes_nothing_says_so() {
    use orca_agents::workspace::WorkspaceTools;
    use orca_core::{ToolCall, ToolHost};
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("lib.rs"), "fn a() {}\n").unwrap();
    let tools = WorkspaceTools::new(project.path(), &["write_file".to_owned()]).unwrap();
    let mut said = Vec::new();
    // The last: the same without its final newline, as a json-mode model copies back a file
    // it read (the tool result's text ends trimmed): unchanged, and the file keeps it.
    for content in ["fn a() {}\n", "fn b() {}\n", "fn b() {}\n", "fn b() {}"] {
        let call = ToolCall {
            id: "c".into(),
            name: "write_file".into(),
            arguments: json!({"path": "lib.rs", "content": content}),
        };
        said.push(tools.call(&call).await.unwrap().get("unchanged").is_some());
    }
    println!("unchanged reported (same, new, same again, same less its newline): {said:?}");
    assert_eq!(said, [true, false, true, true]);
    assert_eq!(
        std::fs::read_to_string(project.path().join("lib.rs")).unwrap(),
        "fn b() {}\n"
    );
    // An edit whose `old` and `new` are equal (a 1.5B model made 6 of them, renaming nothing)
    // is refused, naming the fix; a real edit still goes through.
    let tools = WorkspaceTools::new(project.path(), &["edit_file".to_owned()]).unwrap();
    let edit = |old: &str, new: &str| ToolCall {
        id: "e".into(),
        name: "edit_file".into(),
        arguments: json!({"path": "lib.rs", "old": old, "new": new}),
    };
    let same = tools.call(&edit("fn b", "fn b")).await.unwrap_err().message;
    println!("an edit of equal texts: {same}");
    assert!(same.contains("nothing would change"), "{same}");
    tools.call(&edit("fn b", "fn c")).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(project.path().join("lib.rs")).unwrap(),
        "fn c() {}\n"
    );
}

#[tokio::test]
async fn a_missing_file_in_a_small_project_is_answered_with_every_file() {
    use orca_agents::workspace::WorkspaceTools;
    use orca_core::{ToolCall, ToolHost};
    // A 1.5B model asked for `Cargo.toml` five times in each of two attempts (the task said
    // there was none), between `list_files` calls: the error now names the project's files.
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join("src")).unwrap();
    std::fs::write(project.path().join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    std::fs::create_dir(project.path().join(".orca")).unwrap();
    std::fs::write(project.path().join(".orca/key"), "secret\n").unwrap();
    let granted = ["read_file", "list_files"].map(str::to_owned);
    let tools = WorkspaceTools::new(project.path(), &granted).unwrap();
    let read = |path: &'static str| ToolCall {
        id: "c".into(),
        name: "read_file".into(),
        arguments: json!({ "path": path }),
    };
    let err = tools.call(&read("Cargo.toml")).await.unwrap_err();
    println!("{}", err.message);
    assert!(
        err.message.contains(
            "`Cargo.toml` does not exist; these are all of the project's files: `src/lib.rs`"
        ),
        "{}",
        err.message
    );
    assert!(!err.message.contains(".orca"), "{}", err.message);
    // A larger project: pointed at `list_files`, not listed.
    for i in 0..13 {
        std::fs::write(project.path().join(format!("src/m{i}.rs")), "\n").unwrap();
    }
    let err = tools.call(&read("Cargo.toml")).await.unwrap_err();
    assert!(
        err.message.contains("`list_files` shows"),
        "{}",
        err.message
    );
    assert!(!err.message.contains("m0.rs"), "{}", err.message);
}

#[tokio::test]
async fn content_whose_line_breaks_came_escaped_twice_is_written_with_line_breaks() {
    use orca_agents::workspace::WorkspaceTools;
    use orca_core::{ToolCall, ToolHost};
    // A json-mode 1.5B model sent `src/lib.rs` with `\\n` for every line break: one line of
    // text rustc refused ("expected item after doc comment"), and the next attempt's edits,
    // written with real line breaks, matched nothing in it.
    let project = tempfile::tempdir().unwrap();
    let granted = ["write_file"].map(str::to_owned);
    let tools = WorkspaceTools::new(project.path(), &granted).unwrap();
    let write = |path: &str, content: &str| ToolCall {
        id: "c".into(),
        name: "write_file".into(),
        arguments: json!({ "path": path, "content": content }),
    };
    let sent = r#"/// `key=value`.\n\npub fn f() -> &'static str {\n    \"a\\nb\"\n}\n"#;
    let written = tools.call(&write("lib.rs", sent)).await.unwrap();
    println!("{written}");
    assert!(
        written["note"].as_str().unwrap().contains("escaped twice"),
        "{written}"
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("lib.rs")).unwrap(),
        "/// `key=value`.\n\npub fn f() -> &'static str {\n    \"a\\nb\"\n}\n"
    );
    // Real line breaks beside a `\n` in a string, or one `\n` on one line: written as sent.
    for (name, content) in [
        ("a.sh", "printf 'a\\nb\\n'\necho done\n"),
        ("b.sh", "printf 'a\\n'"),
    ] {
        let written = tools.call(&write(name, content)).await.unwrap();
        assert!(written.get("note").is_none(), "{written}");
        assert_eq!(
            std::fs::read_to_string(project.path().join(name)).unwrap(),
            content
        );
    }
}
