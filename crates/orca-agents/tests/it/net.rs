//! Custom roots and proxies (ADR 0025), against a local HTTPS fake model server signed by a
//! throwaway CA and a counting proxy. Every environment value is passed as an explicit lookup,
//! so nothing here touches the process environment (tests run in parallel).
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::common::{TestTools, fast_settings, task};
use crate::net_support::{CountingProxy, FakeServer, Pki, openai_submit};

use std::collections::BTreeMap;
use std::path::Path;

use orca_agents::config::Config;
use orca_agents::{Agents, ConfigError};
use orca_core::{AgentPort, Budget, TaskResult};
use serde_json::json;

fn agents(root: &Path, config: &str, env: &BTreeMap<&str, String>) -> Result<Agents, ConfigError> {
    let config = Config::parse(config, Path::new(".orca/config.toml"))?;
    let lookup = |k: &str| env.get(k).cloned();
    Agents::from_config(root, &config, &lookup, fast_settings(0))
}

fn coder(base_url: &str, extra: &str) -> String {
    format!(
        "{extra}\n[agents.coder]\nbackend = \"openai\"\nbase_url = \"{base_url}\"\nmodel = \"m\"\napi_key_env = \"K\"\n"
    )
}

fn key_env() -> BTreeMap<&'static str, String> {
    BTreeMap::from([("K", "sk-test-net".to_owned())])
}

async fn run(agents: &Agents) -> TaskResult {
    agents
        .run_task(task("coder", Budget::UNLIMITED), &TestTools::new())
        .await
        .outcome
}

/// Without `ca_file` the private CA's certificate is refused with a readable TLS error and no
/// request reaches the server; with it (globally or per agent) the turn succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_ca_refused_without_ca_file_and_trusted_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let server = FakeServer::start(Some(&pki), |_| (200, openai_submit("over TLS"))).await;
    let url = format!("https://localhost:{}/v1", server.port);

    let plain = agents(dir.path(), &coder(&url, ""), &key_env()).unwrap();
    let refused = run(&plain).await;
    let TaskResult::Failure(f) = &refused else {
        panic!("expected a TLS failure, got {refused:?}")
    };
    assert!(
        f.message.contains("certificate is not trusted") && f.message.contains("ca_file"),
        "{}",
        f.message
    );
    let reached_without = server.requests().len();

    let ca = pki.ca.display().to_string();
    let mut succeeded = 0;
    for config in [
        coder(&url, &format!("[tls]\nca_file = \"{ca}\"")),
        format!("{}ca_file = \"{ca}\"\n", coder(&url, "")),
    ] {
        let trusted = agents(dir.path(), &config, &key_env()).unwrap();
        let outcome = run(&trusted).await;
        assert!(
            matches!(&outcome, TaskResult::Success(s) if s.summary == "over TLS"),
            "{outcome:?}"
        );
        succeeded += 1;
    }
    println!(
        "tls: without ca_file: \"{}\", {reached_without} requests reached the server, {} handshakes refused; with ca_file: {succeeded}/2 turns succeeded, {} requests",
        f.message,
        server
            .handshakes_failed
            .load(std::sync::atomic::Ordering::SeqCst),
        server.requests().len()
    );
    assert_eq!(reached_without, 0);
    assert!(
        server
            .handshakes_failed
            .load(std::sync::atomic::Ordering::SeqCst)
            >= 1
    );
}

/// A `ca_file` that is missing, a directory, not PEM, a key, or PEM that is not a certificate
/// is a config error naming the file and the setting; nothing falls back silently.
#[tokio::test]
async fn unusable_ca_files_are_config_errors() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    std::fs::write(dir.path().join("notpem.txt"), "just some text\n").unwrap();
    std::fs::write(
        dir.path().join("garbage.pem"),
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let cases = [
        ("missing.pem".to_owned(), "cannot read it"),
        (".".to_owned(), "not a regular file"),
        ("notpem.txt".to_owned(), "no PEM certificate"),
        (pki.key.display().to_string(), "no PEM certificate"),
        ("garbage.pem".to_owned(), "not"),
    ];
    let mut named = 0;
    for (file, why) in &cases {
        for (config, setting) in [
            (
                coder(
                    "https://localhost:1/v1",
                    &format!("[tls]\nca_file = \"{file}\""),
                ),
                "tls.ca_file",
            ),
            (
                format!(
                    "{}ca_file = \"{file}\"\n",
                    coder("https://localhost:1/v1", "")
                ),
                "agents.coder.ca_file",
            ),
        ] {
            let err = agents(dir.path(), &config, &key_env())
                .unwrap_err()
                .to_string();
            let path_named = err.contains(file.trim_start_matches("./"));
            assert!(
                err.contains(setting)
                    && err.contains(".orca/config.toml")
                    && path_named
                    && err.contains(why),
                "{file}: {err}"
            );
            named += 1;
        }
    }
    println!(
        "ca_file: {named}/{} unusable files refused with the file and setting named",
        cases.len() * 2
    );
}

/// `HTTPS_PROXY` carries the model traffic through a `CONNECT` tunnel (with the credentials of
/// its URL, which no output shows); `HTTP_PROXY` gets plain requests in absolute form;
/// `NO_PROXY` matching the host (name, suffix, IP) sends nothing to the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxies_carry_model_traffic_unless_no_proxy_matches() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let tls = FakeServer::start(Some(&pki), |_| (200, openai_submit("via proxy"))).await;
    let plain = FakeServer::start(None, |_| (200, openai_submit("via proxy"))).await;
    let ca = format!("[tls]\nca_file = \"{}\"", pki.ca.display());
    let mut report = Vec::new();

    // HTTPS through a CONNECT tunnel, credentials from the URL.
    let proxy = CountingProxy::start().await;
    let mut env = key_env();
    env.insert(
        "HTTPS_PROXY",
        format!("http://alice:pr0xy-s3cret@127.0.0.1:{}", proxy.port),
    );
    let https_url = format!("https://localhost:{}/v1", tls.port);
    let a = agents(dir.path(), &coder(&https_url, &ca), &env).unwrap();
    assert!(matches!(run(&a).await, TaskResult::Success(_)));
    let described = a
        .net(&"coder".parse().unwrap())
        .unwrap()
        .proxies()
        .describe();
    assert!(!described.contains("pr0xy-s3cret"), "{described}");
    report.push(format!(
        "HTTPS_PROXY: {} CONNECT, {} with Proxy-Authorization, shown as {described}",
        proxy.connects(),
        proxy.authorized.load(std::sync::atomic::Ordering::SeqCst)
    ));
    assert!(proxy.connects() >= 1);
    assert!(proxy.authorized.load(std::sync::atomic::Ordering::SeqCst) >= 1);

    // NO_PROXY: a name, a suffix, an IP; lower-case variables too.
    for (var, no_proxy, url) in [
        ("NO_PROXY", "localhost".to_owned(), https_url.clone()),
        (
            "no_proxy",
            ".example.org, localhost".to_owned(),
            https_url.clone(),
        ),
        (
            "NO_PROXY",
            "127.0.0.1".to_owned(),
            format!("https://127.0.0.1:{}/v1", tls.port),
        ),
    ] {
        let proxy = CountingProxy::start().await;
        let mut env = key_env();
        env.insert("https_proxy", format!("http://127.0.0.1:{}", proxy.port));
        env.insert(var, no_proxy.clone());
        let a = agents(dir.path(), &coder(&url, &ca), &env).unwrap();
        assert!(matches!(run(&a).await, TaskResult::Success(_)));
        report.push(format!(
            "{var}={no_proxy} for {url}: {} CONNECT, {} forwarded",
            proxy.connects(),
            proxy.forwarded()
        ));
        assert_eq!(proxy.connects() + proxy.forwarded(), 0, "{var}={no_proxy}");
    }

    // Plain HTTP through HTTP_PROXY (absolute-form), and ALL_PROXY when it is the only one.
    for var in ["HTTP_PROXY", "ALL_PROXY"] {
        let proxy = CountingProxy::start().await;
        let mut env = key_env();
        env.insert(var, format!("http://127.0.0.1:{}", proxy.port));
        let url = format!("http://127.0.0.1:{}/v1", plain.port);
        let a = agents(dir.path(), &coder(&url, ""), &env).unwrap();
        assert!(matches!(run(&a).await, TaskResult::Success(_)));
        report.push(format!(
            "{var} for {url}: {} forwarded, {} CONNECT",
            proxy.forwarded(),
            proxy.connects()
        ));
        assert!(proxy.forwarded() >= 1, "{var}");
    }
    // A proxy variable that is not a URL is an error naming the variable, not the value.
    let mut env = key_env();
    env.insert("HTTPS_PROXY", "http://bob:s3cret@[::1".to_owned());
    let err = agents(dir.path(), &coder(&https_url, ""), &env)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("HTTPS_PROXY") && !err.contains("s3cret"),
        "{err}"
    );
    for line in &report {
        println!("proxy: {line}");
    }
    let _ = json!({});
}

/// Misplaced settings name their field: a `ca_file` on a command-line agent, `api = "ollama"`
/// on Anthropic, an unknown `[tls]` key.
#[test]
fn misplaced_net_settings_name_their_field() {
    for (text, field) in [
        (
            "[agents.cc]\nbackend = \"claude-code\"\nca_file = \"ca.pem\"\n",
            "agents.cc.ca_file",
        ),
        (
            "[agents.coder]\nbackend = \"anthropic\"\napi = \"ollama\"\n",
            "agents.coder.api",
        ),
        ("[tls]\ncafile = \"x.pem\"\n", "cafile"),
    ] {
        let err = Config::parse(text, Path::new(".orca/config.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(field), "{text}: {err}");
    }
}
