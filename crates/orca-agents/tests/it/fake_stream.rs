//! A fake model server over raw TCP (port 0) that controls exactly how the bytes of an answer
//! arrive: in small pieces cut at awkward places, with stalls, after an error status. Counts
//! requests and keeps their bodies.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test uses a different subset"
)]
#![expect(clippy::unwrap_used, reason = "tests")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// `text/event-stream`, written in pieces of the given sizes (cycled), a short pause between
    /// pieces; after `stall_after` bytes the server goes silent (holding the connection).
    Stream {
        body: String,
        pieces: Vec<usize>,
        stall_after: Option<usize>,
    },
    /// `application/x-ndjson` (Ollama's native stream), written like [`Reply::Stream`].
    Ndjson {
        body: String,
        pieces: Vec<usize>,
        stall_after: Option<usize>,
    },
    /// A whole body with a status, content type and extra headers.
    Whole {
        status: u16,
        content_type: &'static str,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
}

impl Reply {
    /// An event stream cut into 1, 2, 3, 5 and 7 byte pieces.
    pub fn stream(body: impl Into<String>) -> Self {
        Self::Stream {
            body: body.into(),
            pieces: vec![1, 2, 3, 5, 7, 64],
            stall_after: None,
        }
    }

    /// A JSON body.
    pub fn json(status: u16, body: &Value) -> Self {
        Self::Whole {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body: body.to_string(),
        }
    }
}

/// The server: replies in order, the last one repeating.
pub struct FakeStream {
    pub url: String,
    replies: Arc<Mutex<Vec<Reply>>>,
    pub requests: Arc<AtomicUsize>,
    pub bodies: Arc<Mutex<Vec<Value>>>,
}

impl FakeStream {
    pub async fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let replies = Arc::new(Mutex::new(replies));
        let requests = Arc::new(AtomicUsize::new(0));
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let (r, n, b) = (replies.clone(), requests.clone(), bodies.clone());
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (r, n, b) = (r.clone(), n.clone(), b.clone());
                tokio::spawn(async move {
                    let _ = serve(socket, r, n, b).await;
                });
            }
        });
        Self {
            url,
            replies,
            requests,
            bodies,
        }
    }

    pub fn count(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    pub fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }
}

async fn read_request(socket: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Vec::new());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = socket.read(&mut chunk).await?;
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Ok(buf[end + 4..].to_vec());
        }
    }
}

async fn serve(
    mut socket: TcpStream,
    replies: Arc<Mutex<Vec<Reply>>>,
    requests: Arc<AtomicUsize>,
    bodies: Arc<Mutex<Vec<Value>>>,
) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let body = read_request(&mut socket).await?;
    requests.fetch_add(1, Ordering::SeqCst);
    bodies
        .lock()
        .unwrap()
        .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
    let reply = {
        let mut q = replies.lock().unwrap();
        if q.len() > 1 {
            q.remove(0)
        } else {
            q[0].clone()
        }
    };
    let content_type = if matches!(reply, Reply::Ndjson { .. }) {
        "application/x-ndjson"
    } else {
        "text/event-stream; charset=utf-8"
    };
    match reply {
        Reply::Whole {
            status,
            content_type: whole_type,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: {whole_type}\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(body.as_bytes()).await?;
        }
        Reply::Stream {
            body,
            pieces,
            stall_after,
        }
        | Reply::Ndjson {
            body,
            pieces,
            stall_after,
        } => {
            socket
                .write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n").as_bytes())
                .await?;
            let bytes = body.as_bytes();
            let mut at = 0;
            let mut i = 0;
            while at < bytes.len() {
                if stall_after.is_some_and(|s| at >= s) {
                    tokio::time::sleep(Duration::from_secs(600)).await;
                }
                let end = (at + pieces[i % pieces.len()]).min(bytes.len());
                socket.write_all(&bytes[at..end]).await?;
                socket.flush().await?;
                at = end;
                i += 1;
                if i % 16 == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                } else {
                    tokio::task::yield_now().await;
                }
            }
        }
    }
    socket.shutdown().await?;
    Ok(())
}

/// SSE text: `event:` lines (when named) and `data:` lines, `\r\n` line ends.
pub fn sse(events: &[(&str, Value)]) -> String {
    let mut out = String::new();
    for (name, data) in events {
        if !name.is_empty() {
            out.push_str(&format!("event: {name}\r\n"));
        }
        out.push_str(&format!("data: {data}\r\n\r\n"));
    }
    out
}
