//! Network fixtures (ADR 0025): a throwaway CA and a server certificate (`orca-testkit`),
//! a small HTTP(S) fake model server on port 0, and a counting proxy that tunnels `CONNECT`
//! and forwards absolute-form requests.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test file uses a different subset"
)]
#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// A CA and a server certificate for `localhost` and `127.0.0.1`, signed by it.
pub struct Pki {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pki {
    pub fn new(dir: &Path) -> Self {
        let files = orca_testkit::certs::make(dir).unwrap_or_else(|e| panic!("{e}"));
        Self {
            ca: files.ca,
            cert: files.server_cert,
            key: files.server_key,
        }
    }

    fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(
            orca_testkit::certs::server_config(&self.cert, &self.key)
                .unwrap_or_else(|e| panic!("{e}")),
        )
    }
}

/// One request the fake server received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: String,
    pub body: Value,
}

type Handler = Arc<dyn Fn(&Seen) -> (u16, Value) + Send + Sync>;

/// A fake model server over HTTP or HTTPS (one request per connection).
pub struct FakeServer {
    pub port: u16,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    /// TLS handshakes that failed (the client refused the certificate).
    pub handshakes_failed: Arc<AtomicUsize>,
}

impl FakeServer {
    pub async fn start(
        tls: Option<&Pki>,
        handler: impl Fn(&Seen) -> (u16, Value) + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(AtomicUsize::new(0));
        let acceptor = tls.map(Pki::acceptor);
        let handler: Handler = Arc::new(handler);
        let (s, f) = (Arc::clone(&seen), Arc::clone(&failed));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (seen, failed, handler, acceptor) = (
                    Arc::clone(&s),
                    Arc::clone(&f),
                    Arc::clone(&handler),
                    acceptor.clone(),
                );
                tokio::spawn(async move {
                    match acceptor {
                        Some(a) => match a.accept(stream).await {
                            Ok(tls) => serve(tls, &seen, &handler).await,
                            Err(_) => {
                                failed.fetch_add(1, Ordering::SeqCst);
                            }
                        },
                        None => serve(stream, &seen, &handler).await,
                    }
                });
            }
        });
        Self {
            port,
            seen,
            handshakes_failed: failed,
        }
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn count(&self, path: &str) -> usize {
        self.requests().iter().filter(|s| s.path == path).count()
    }
}

/// Reads one request head (up to the blank line) and returns it with any bytes read past it.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end + 4]).into_owned();
            return Some((head, buf[end + 4..].to_vec()));
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() > 1 << 20 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    seen: &Mutex<Vec<Seen>>,
    handler: &Handler,
) {
    let Some((head, mut body)) = read_head(&mut stream).await else {
        return;
    };
    let len: usize = header(&head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while body.len() < len {
        let mut chunk = vec![0u8; len - body.len()];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let mut first = head.lines().next().unwrap_or_default().split_whitespace();
    let method = first.next().unwrap_or_default().to_owned();
    let target = first.next().unwrap_or_default();
    // An absolute-form target (through an HTTP proxy) has the origin in front.
    let path = target
        .strip_prefix("http://")
        .map_or(target, |rest| &rest[rest.find('/').unwrap_or(rest.len())..])
        .to_owned();
    let request = Seen {
        method,
        path,
        headers: head.clone(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let (status, answer) = handler(&request);
    seen.lock().unwrap().push(request);
    let text = answer.to_string();
    let response = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// A proxy counting `CONNECT` tunnels and absolute-form (plain HTTP) requests.
pub struct CountingProxy {
    pub port: u16,
    pub connects: Arc<AtomicUsize>,
    pub forwarded: Arc<AtomicUsize>,
    /// Requests that carried `Proxy-Authorization`.
    pub authorized: Arc<AtomicUsize>,
}

impl CountingProxy {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connects = Arc::new(AtomicUsize::new(0));
        let forwarded = Arc::new(AtomicUsize::new(0));
        let authorized = Arc::new(AtomicUsize::new(0));
        let (c, f, a) = (
            Arc::clone(&connects),
            Arc::clone(&forwarded),
            Arc::clone(&authorized),
        );
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let (c, f, a) = (Arc::clone(&c), Arc::clone(&f), Arc::clone(&a));
                tokio::spawn(async move {
                    let Some((head, rest)) = read_head(&mut client).await else {
                        return;
                    };
                    if header(&head, "proxy-authorization").is_some() {
                        a.fetch_add(1, Ordering::SeqCst);
                    }
                    let mut first = head.lines().next().unwrap_or_default().split_whitespace();
                    let method = first.next().unwrap_or_default().to_owned();
                    let target = first.next().unwrap_or_default().to_owned();
                    if method == "CONNECT" {
                        c.fetch_add(1, Ordering::SeqCst);
                        let Ok(mut upstream) = TcpStream::connect(&target).await else {
                            let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                            return;
                        };
                        let _ = client
                            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                            .await;
                        let _ = upstream.write_all(&rest).await;
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    } else {
                        f.fetch_add(1, Ordering::SeqCst);
                        let authority = target
                            .strip_prefix("http://")
                            .and_then(|r| r.split('/').next())
                            .unwrap_or_default()
                            .to_owned();
                        let Ok(mut upstream) = TcpStream::connect(&authority).await else {
                            return;
                        };
                        let _ = upstream.write_all(head.as_bytes()).await;
                        let _ = upstream.write_all(&rest).await;
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
            }
        });
        Self {
            port,
            connects,
            forwarded,
            authorized,
        }
    }

    pub fn connects(&self) -> usize {
        self.connects.load(Ordering::SeqCst)
    }

    pub fn forwarded(&self) -> usize {
        self.forwarded.load(Ordering::SeqCst)
    }
}

/// An OpenAI chat completion that submits a success result.
pub fn openai_submit(summary: &str) -> Value {
    serde_json::json!({"choices": [{"message": {"role": "assistant", "content": null,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "submit_result",
        "arguments": serde_json::json!({"status": "success", "summary": summary}).to_string()}}]},
        "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3}})
}
