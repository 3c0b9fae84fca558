//! A newline-delimited JSON reader (Ollama's native streams): one JSON object per line. Bytes
//! may arrive split anywhere — inside a UTF-8 character, inside a `\r\n` — so lines are cut on
//! bytes and decoded only when whole. Each line is handed on as an [`SseEvent`] without a name,
//! so the assemblers and the read loop are the ones of server-sent events.

use super::sse::SseEvent;

/// Feeds bytes in, takes lines out.
#[derive(Debug, Default)]
pub(crate) struct NdjsonParser {
    line: Vec<u8>,
}

/// A line longer than this is a broken stream, not an object (bounds memory).
const MAX_LINE: usize = 16 * 1024 * 1024;

impl NdjsonParser {
    /// The lines completed by `bytes` (blank ones skipped).
    ///
    /// # Errors
    ///
    /// A line longer than 16 MiB.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, String> {
        let mut lines = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                let line = std::mem::take(&mut self.line);
                lines.extend(Self::line_done(&line));
            } else {
                if self.line.len() >= MAX_LINE {
                    return Err(format!("a stream line is longer than {MAX_LINE} bytes"));
                }
                self.line.push(b);
            }
        }
        Ok(lines)
    }

    /// The last line when the stream ends without a newline after it.
    pub(crate) fn finish(&mut self) -> Option<SseEvent> {
        let line = std::mem::take(&mut self.line);
        Self::line_done(&line)
    }

    fn line_done(line: &[u8]) -> Option<SseEvent> {
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        (!text.is_empty()).then(|| SseEvent {
            name: String::new(),
            data: text.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(stream: &[u8], cut: &[usize]) -> Vec<String> {
        let mut p = NdjsonParser::default();
        let mut out = Vec::new();
        let mut from = 0;
        for &c in cut.iter().chain(std::iter::once(&stream.len())) {
            out.extend(p.push(&stream[from..c]).unwrap());
            from = c;
        }
        out.extend(p.finish());
        out.into_iter().map(|e| e.data).collect()
    }

    #[test]
    fn split_anywhere_gives_the_same_lines() {
        let stream = "{\"t\":\"héllo ✓\"}\r\n\n{\"a\":1}\n{\"done\":true}".as_bytes();
        let whole = all(stream, &[]);
        assert_eq!(
            whole,
            ["{\"t\":\"héllo ✓\"}", "{\"a\":1}", "{\"done\":true}"]
        );
        for i in 0..stream.len() {
            for j in i..stream.len() {
                assert_eq!(all(stream, &[i, j]), whole, "cut at {i} and {j}");
            }
        }
    }
}
