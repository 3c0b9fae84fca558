//! Roots and proxies in the real binary (ADR 0025): the environment is the child process's
//! own, so `HTTPS_PROXY` / `NO_PROXY` are set per run without racing other tests. A throwaway
//! CA (openssl) signs a local HTTPS model endpoint; `orca doctor` reaches it only with
//! `[tls] ca_file`, through a counting CONNECT proxy unless `NO_PROXY` matches, shows where
//! its roots come from, and never prints the proxy's password.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::common::project::{Project, code, stderr, stdout};

const PROXY_PASSWORD: &str = "pr0xy-pa55-0f-the-test";

/// A CA (`ca.pem`) and a `localhost` certificate it signs: the acceptor.
fn pki(dir: &Path) -> TlsAcceptor {
    let files = orca_testkit::certs::make(dir).unwrap_or_else(|e| panic!("{e}"));
    std::fs::copy(&files.ca, dir.join("ca.pem")).unwrap();
    TlsAcceptor::from(
        orca_testkit::certs::server_config(&files.server_cert, &files.server_key)
            .unwrap_or_else(|e| panic!("{e}")),
    )
}

/// An HTTPS endpoint answering every request with an empty model list; counts answered
/// requests.
async fn https_endpoint(acceptor: TlsAcceptor) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let answered = Arc::new(AtomicUsize::new(0));
    let a = Arc::clone(&answered);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, a) = (acceptor.clone(), Arc::clone(&a));
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut buf = vec![0u8; 16384];
                let _ = tls.read(&mut buf).await;
                a.fetch_add(1, Ordering::SeqCst);
                let body = r#"{"object":"list","data":[]}"#;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(reply.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, answered)
}

/// A CONNECT proxy: counts tunnels and those that carried credentials.
async fn proxy() -> (u16, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tunnels, authorized) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (t, au) = (Arc::clone(&tunnels), Arc::clone(&authorized));
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let (t, au) = (Arc::clone(&t), Arc::clone(&au));
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match client.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let target = head
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_owned();
                if !head.starts_with("CONNECT ") {
                    return;
                }
                t.fetch_add(1, Ordering::SeqCst);
                if head.to_ascii_lowercase().contains("proxy-authorization:") {
                    au.fetch_add(1, Ordering::SeqCst);
                }
                let Ok(mut upstream) = TcpStream::connect(&target).await else {
                    return;
                };
                let _ = client
                    .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    .await;
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (port, tunnels, authorized)
}

fn check(v: &Value, prefix: &str) -> Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"].as_str().unwrap().starts_with(prefix))
        .unwrap_or_else(|| panic!("no check {prefix}: {v}"))
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reaches_a_private_ca_endpoint_through_the_proxy() {
    let p = Project::new();
    let acceptor = pki(p.root());
    let (port, answered) = https_endpoint(acceptor).await;
    let (proxy_port, tunnels, authorized) = proxy().await;
    let url = format!("https://localhost:{port}/v1");
    let agent = format!(
        "[agents.up]\ndescription = \"up\"\nrole = \"specialist\"\nbackend = \"openai\"\nmodel = \"m\"\nbase_url = \"{url}\"\n"
    );
    let proxy_url = format!("http://alice:{PROXY_PASSWORD}@127.0.0.1:{proxy_port}");
    let endpoint = format!("endpoint {url}/models");
    let doctor = |env: &[(&str, &str)]| {
        let out = p.run_env(env, &["--json", "doctor"]);
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert!(
            !all.contains(PROXY_PASSWORD),
            "the proxy password was printed: {all}"
        );
        let v = serde_json::from_slice::<Value>(&out.stdout).unwrap();
        // Exit 7 exactly when a check found a problem.
        let want = if v["problems"] == 0 { 0 } else { 7 };
        assert_eq!(code(&out), want, "{all}");
        v
    };

    // No ca_file: the certificate is refused, said so, and nothing is answered.
    p.write(".orca/config.toml", &agent);
    let v = doctor(&[]);
    let refused = check(&v, &endpoint);
    assert_eq!(refused["ok"], false, "{refused}");
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("certificate is not trusted"),
        "{refused}"
    );
    assert_eq!(answered.load(Ordering::SeqCst), 0);

    // SSL_CERT_FILE replaces the system's store (rustls-native-certs, as OpenSSL does): the
    // private CA alone is then trusted, without any ca_file.
    let ca_pem = p.root().join("ca.pem").display().to_string();
    let v = doctor(&[("SSL_CERT_FILE", &ca_pem)]);
    let by_env = check(&v, &endpoint);
    assert_eq!(by_env["ok"], true, "{by_env}");
    assert!(
        check(&v, &format!("tls roots for {url}"))["detail"]
            .as_str()
            .unwrap()
            .contains("SSL_CERT_FILE="),
        "{v}"
    );

    // With [tls] ca_file, through HTTPS_PROXY (with credentials).
    p.write(
        ".orca/config.toml",
        &format!("[tls]\nca_file = \"ca.pem\"\n\n{agent}"),
    );
    // Every log line too (trace level): the proxy's password never appears.
    let v = doctor(&[("HTTPS_PROXY", &proxy_url), ("ORCA_LOG", "trace")]);
    let reached = check(&v, &endpoint);
    let roots = check(&v, &format!("tls roots for {url}"));
    let via = check(&v, &format!("proxy for {url}"));
    assert_eq!(reached["ok"], true, "{reached}");
    assert!(
        roots["detail"]
            .as_str()
            .unwrap()
            .contains("ca.pem (1 certificate)"),
        "{roots}"
    );
    assert!(
        via["detail"].as_str().unwrap().contains("***@127.0.0.1"),
        "{via}"
    );
    let through_proxy = tunnels.load(Ordering::SeqCst);
    assert!(through_proxy >= 1);
    assert!(authorized.load(Ordering::SeqCst) >= 1);

    // NO_PROXY matching the host: direct, no tunnel.
    let v = doctor(&[("HTTPS_PROXY", &proxy_url), ("NO_PROXY", "localhost")]);
    assert_eq!(check(&v, &endpoint)["ok"], true);
    let after_no_proxy = tunnels.load(Ordering::SeqCst) - through_proxy;
    assert_eq!(after_no_proxy, 0);

    // A ca_file that is not PEM: one line naming the file and the setting, exit 2.
    std::fs::write(p.root().join("bad.pem"), "not a certificate\n").unwrap();
    p.write(
        ".orca/config.toml",
        &format!("[tls]\nca_file = \"bad.pem\"\n\n{agent}"),
    );
    let out = p.run(&["doctor"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert!(
        err.contains("tls.ca_file") && err.contains("bad.pem"),
        "{err}"
    );
    println!(
        "binary tls/proxy: without ca_file \"{}\"; with SSL_CERT_FILE=ca.pem: {}; with ca_file: {}, roots \"{}\", {through_proxy} CONNECT tunnels ({} with credentials), {after_no_proxy} with NO_PROXY=localhost, {} requests answered; bad ca_file: {}",
        refused["detail"].as_str().unwrap(),
        by_env["detail"].as_str().unwrap(),
        reached["detail"].as_str().unwrap(),
        roots["detail"].as_str().unwrap(),
        authorized.load(Ordering::SeqCst),
        answered.load(Ordering::SeqCst),
        err.trim()
    );
}
