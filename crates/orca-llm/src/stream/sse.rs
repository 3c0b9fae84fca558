//! A small server-sent events parser (the part of the WHATWG `text/event-stream` rules the model
//! APIs use): `event:` and `data:` fields, comments, blank-line dispatch. Bytes may arrive split
//! anywhere — inside a UTF-8 character, inside a `\r\n` — so lines are cut on bytes and decoded
//! only when whole.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field (empty when the server sent none: OpenAI chat completions).
    pub(crate) name: String,
    /// The `data:` lines, joined with `\n`.
    pub(crate) data: String,
}

/// Feeds bytes in, takes events out.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a leading `\n` belongs to that line end.
    after_cr: bool,
    name: String,
    data: String,
    has_data: bool,
}

/// A line longer than this is a broken stream, not an event (bounds memory).
const MAX_LINE: usize = 16 * 1024 * 1024;

impl SseParser {
    /// The events completed by `bytes`.
    ///
    /// # Errors
    ///
    /// A line longer than 16 MiB.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, String> {
        let mut events = Vec::new();
        for &b in bytes {
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                continue;
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(e) = self.line_done(&line) {
                        events.push(e);
                    }
                }
                _ => {
                    if self.line.len() >= MAX_LINE {
                        return Err(format!("an event line is longer than {MAX_LINE} bytes"));
                    }
                    self.line.push(b);
                }
            }
        }
        Ok(events)
    }

    /// The last event when the stream ends without a blank line after it.
    pub(crate) fn finish(&mut self) -> Option<SseEvent> {
        let line = std::mem::take(&mut self.line);
        let mut last = self.line_done(&line);
        if last.is_none() {
            last = self.line_done(b"");
        }
        last
    }

    fn line_done(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            let name = std::mem::take(&mut self.name);
            let data = std::mem::take(&mut self.data);
            return std::mem::take(&mut self.has_data).then_some(SseEvent { name, data });
        }
        let line = String::from_utf8_lossy(line);
        if line.starts_with(':') {
            return None; // a comment (keep-alive)
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => value.clone_into(&mut self.name),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {} // id, retry: not used
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(stream: &[u8], cut: &[usize]) -> Vec<SseEvent> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        let mut from = 0;
        for &c in cut.iter().chain(std::iter::once(&stream.len())) {
            out.extend(p.push(&stream[from..c]).unwrap());
            from = c;
        }
        out.extend(p.finish());
        out
    }

    #[test]
    fn split_anywhere_gives_the_same_events() {
        let stream = "event: a\r\ndata: {\"t\":\"héllo ✓\"}\r\n\r\n: ping\n\ndata: x\ndata: y\n\nevent: b\rdata:z\r\rdata: last"
            .as_bytes();
        let whole = all(stream, &[]);
        assert_eq!(
            whole,
            vec![
                SseEvent {
                    name: "a".into(),
                    data: "{\"t\":\"héllo ✓\"}".into()
                },
                SseEvent {
                    name: String::new(),
                    data: "x\ny".into()
                },
                SseEvent {
                    name: "b".into(),
                    data: "z".into()
                },
                SseEvent {
                    name: String::new(),
                    data: "last".into()
                },
            ]
        );
        for i in 0..stream.len() {
            for j in i..stream.len() {
                assert_eq!(all(stream, &[i, j]), whole, "cut at {i} and {j}");
            }
        }
    }
}
