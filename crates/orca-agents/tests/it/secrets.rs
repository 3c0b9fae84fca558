//! API keys never appear in Debug output or in tracing logs, even at TRACE level.
#![expect(clippy::unwrap_used, reason = "tests")]

use crate::common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::{TestTools, fast_settings, task};
use orca_agents::{Agents, ApiKey, BackendSpec, Profile};
use orca_core::{AgentId, AgentPort, Budget, Role};
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const KEY: &str = "sk-super-secret-key-0123456789";

#[tokio::test]
async fn keys_never_reach_debug_output_or_logs() {
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    for (spec_of, fail_status) in [(0, 401), (1, 429), (0, 200)] {
        let server = MockServer::start().await;
        let body = if fail_status == 200 {
            json!({"choices": [{"message": {"tool_calls": [{"id": "1", "function": {"name": "submit_result", "arguments": "{\"status\":\"success\",\"summary\":\"ok\"}"}}]}}]})
        } else {
            json!({"error": {"message": "nope"}})
        };
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(fail_status).set_body_json(body))
            .mount(&server)
            .await;
        let backend = if spec_of == 0 {
            BackendSpec::OpenAi {
                base_url: format!("{}/v1", server.uri()),
                model: "m".into(),
                api_key: Some(ApiKey::new(KEY)),
            }
        } else {
            BackendSpec::Anthropic {
                base_url: server.uri(),
                model: "m".into(),
                api_key: Some(ApiKey::new(KEY)),
            }
        };
        let profile = Profile {
            id: AgentId::parse("coder").unwrap(),
            role: Role::Specialist,
            description: "c".into(),
            backend,
            prompt: String::new(),
            workspace_tools: vec![],
            limits: Budget::UNLIMITED,
        };
        let agents = Agents::new("/tmp", [profile], fast_settings(1)).unwrap();
        let debug = format!("{agents:?}");
        assert!(
            !debug.contains(KEY) && debug.contains("[redacted]"),
            "{debug}"
        );
        let reply = agents
            .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
            .await;
        let reply_text = format!("{reply:?}");
        assert!(!reply_text.contains(KEY), "{reply_text}");
        // The key was really sent (so the check above is meaningful).
        let sent = server.received_requests().await.unwrap();
        let headers = format!("{:?}", sent[0].headers);
        assert!(headers.contains(KEY), "the key was not sent at all");
    }
    let logs = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("model request"), "logs were captured: {logs}");
    assert!(!logs.contains(KEY), "the key leaked into the logs");
}
