//! A model step's page in `orca serve`, as `orca exec logs` shows it: the model's answers
//! rendered as Markdown, its tool calls with arguments and results, its tokens, its output —
//! with hostile Markdown and HTML planted in the answer, in a file a tool reads and in the
//! result, which must reach the page as text only (served HTML and Chromium both checked).

#![allow(clippy::unwrap_used, clippy::print_stdout, reason = "tests")]

use serde_json::{Value, json};

use crate::browser::Driver;
use crate::web_support::{Project, Server, client, get, plan};

const HOSTILE: &str = "Used `cargo test` **twice**. <script>document.title='pwned'</script> \
<img src=x onerror=\"document.title='pwned'\"> [see](javascript:document.title='pwned') \
[docs](https://example.com/guide)";

/// Reads `notes.md`, then submits a result whose summary and output are hostile.
struct Writer;

impl wiremock::Respond for Writer {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let turns = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        let (text, call) = if turns == 0 {
            (
                format!("## Plan\n\n- read the notes\n- {HOSTILE}"),
                orca_testkit::fake_model::tool_call(
                    "c0",
                    "read_file",
                    &json!({"path": "notes.md"}),
                ),
            )
        } else {
            (
                "Done.".to_owned(),
                orca_testkit::fake_model::tool_call(
                    "c1",
                    "submit_result",
                    &json!({"status": "success", "summary": HOSTILE,
                        "output": format!("# Report\n\n```\n{HOSTILE}\n```\n\n{HOSTILE}")}),
                ),
            )
        };
        let mut answer =
            orca_testkit::fake_model::tool_calls("chatcmpl-steps", &json!("m"), vec![call]);
        answer["choices"][0]["message"]["content"] = json!(text);
        wiremock::ResponseTemplate::new(200).set_body_json(answer)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_steps_transcript_is_shown_as_safe_markdown() {
    let model = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(Writer)
        .mount(&model)
        .await;
    let p = Project::new();
    let token = p.token("me");
    std::fs::write(p.root.join("notes.md"), format!("notes: {HOSTILE}\n")).unwrap();
    p.config(&format!(
        "[agents.writer]\ndescription = \"writes\"\nbackend = \"ollama\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\ntools = [\"read_file\"]\n",
        model.uri()
    ));
    let mut doc = plan(&[("write", "", &[])]);
    doc["steps"][0] = json!({"id": "write", "agent": "writer",
        "description": "write the `report`", "depends_on": []});
    let id = p.proposal("write", &doc);
    let run = p.orca(&["--json", "run", &id, "--yes"]);
    assert!(run.status.success(), "{run:?}");
    let v: Value = serde_json::from_slice(&run.stdout).unwrap();
    let exec = v["execution_id"].as_str().unwrap().to_owned();
    let server = Server::start(&p, &[]);
    let c = client();
    let path = format!("/executions/{exec}/steps/write");
    let (status, page) = get(&c, &server.url(&path), &token).await;
    assert_eq!(status, 200, "{page}");

    // What `exec logs` shows is here: the answer, the tool call with its result, the tokens,
    // the output.
    for want in [
        "answer (turn 1, writer, 10 in / 5 out tokens)",
        "<h4>Plan</h4>",
        "<li>read the notes</li>",
        "<code>cargo test</code>",
        "<strong>twice</strong>",
        "tool <code>read_file</code>",
        "notes: Used `cargo test`",
        "<h3>Output</h3>",
        "<a href=\"https://example.com/guide\" rel=\"nofollow noopener noreferrer\">docs</a>",
    ] {
        assert!(page.contains(want), "`{want}` missing in {page}");
    }
    let raw = [
        "<script>document",
        "<img src=x",
        "href=\"javascript",
        "onerror=\"document",
    ]
    .iter()
    .filter(|bad| page.contains(**bad))
    .count();
    let escaped = page.matches("&lt;script&gt;document.title").count();
    println!("model step page: raw tags {raw}, escaped copies {escaped}");
    assert!(
        escaped >= 4,
        "control: answer, tool result, output are shown ({escaped})"
    );
    assert_eq!(raw, 0, "{page}");
    // Shown on the audit tree too, in words, as `audit show` does.
    let (_, tree) = get(&c, &server.url(&format!("/audit?exec={exec}")), &token).await;
    assert!(tree.contains("agent.answer"), "{tree}");
    assert!(tree.contains("read_file · ok ("), "{tree}");

    // In a browser on a phone: nothing ran, nothing is wider than the window.
    let d = Driver::start(&p.dir.path().join("chromium-profile")).await;
    d.call(
        "POST",
        "/window/rect",
        Some(json!({ "width": 390, "height": 844 })),
    )
    .await;
    d.goto(&server.url(&format!("/login?token={token}"))).await;
    d.goto(&server.url(&path)).await;
    let m = d
        .call(
            "POST",
            "/execute/sync",
            Some(json!({ "script": "return [document.documentElement.scrollWidth, window.innerWidth, document.title === 'pwned', document.querySelectorAll('main img, a[href^=\"javascript\"]').length];", "args": [] })),
        )
        .await;
    println!("model step page at 390 px: width, window, title set, hostile elements: {m}");
    assert!(m[0].as_u64() <= m[1].as_u64(), "{m}");
    assert_eq!(m[2], false);
    assert_eq!(m[3], 0);
    d.call("DELETE", "", None).await;
}
