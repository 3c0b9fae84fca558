//! A model caught in a generation loop: the same stretch of text over and over until its output
//! cap. Small models do it (a 1.5B coder rewriting a file repeated one function until 2,048
//! tokens, twice, 6.5 minutes each). Recognised while the answer streams, the turn is stopped
//! there instead of at the cap; recognised in a cut answer, the failure says so instead of
//! advising a larger cap, which would only make the loop longer.

/// The longest repeated stretch looked for, in bytes.
const MAX_PERIOD: usize = 4096;
/// How many times a stretch must follow itself at the end of the text.
const MIN_REPEATS: usize = 8;
/// How much of the text the repetition must cover at least, in bytes (a 1.5B model's
/// newline loop reached its 2,048-token cap in 1,000 newlines).
const MIN_COVERED: usize = 256;

/// A repetition at the end of a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loop {
    /// The repeated stretch's length, in bytes.
    pub period: usize,
    /// How many whole times it is repeated at the end.
    pub repeats: usize,
    /// The stretch is whitespace alone: the answer is over, the model just did not stop.
    pub whitespace: bool,
}

impl std::fmt::Display for Loop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the same {} characters {} times over",
            self.period, self.repeats
        )
    }
}

/// Whether `text` ends in one stretch repeated at least [`MIN_REPEATS`] times (covering at least
/// [`MIN_COVERED`] bytes): a model that is looping, not one writing a long answer. The last
/// copy may be cut anywhere (the stream stopped mid-stretch). The shortest such stretch is
/// named.
#[must_use]
pub fn looping(text: &str) -> Option<Loop> {
    let bytes = text.as_bytes();
    let len = bytes.len();
    if len < MIN_COVERED {
        return None;
    }
    let max = MAX_PERIOD.min(len / MIN_REPEATS);
    (1..=max).find_map(|period| {
        // How far back from the end every byte equals the one a period before it.
        let run = (period..len)
            .rev()
            .take_while(|&i| bytes[i] == bytes[i - period])
            .count();
        let covered = run + period;
        let repeats = covered / period;
        (repeats >= MIN_REPEATS && covered >= MIN_COVERED).then(|| Loop {
            period,
            repeats,
            whitespace: bytes[len - period..].iter().all(u8::is_ascii_whitespace),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_file() -> String {
        (0..200)
            .map(|i| format!("def f{i}(x):\n    return x * {i} + {}\n\n", i * 7 % 13))
            .collect()
    }

    #[test]
    fn a_function_written_again_and_again_is_a_loop_even_cut_mid_copy() {
        let block = "def main():\n    parser = argparse.ArgumentParser(description=\"Greets someone.\")\n    parser.add_argument('--name', default='world')\n    args = parser.parse_args()\n    print(f\"Hello, {args.name}!\")\n\n";
        let mut text = String::from("import argparse\n\n");
        for _ in 0..12 {
            text.push_str(block);
        }
        text.push_str(&block[..37]);
        let found = looping(&text).unwrap();
        assert_eq!(found.period, block.len());
        assert!(!found.whitespace);
        assert!(found.repeats >= 12, "{found:?}");
        // Escaped inside a JSON string (json mode, a tool call's arguments): still a loop.
        let escaped = serde_json::to_string(&text).unwrap();
        assert!(looping(&escaped[..escaped.len() - 1]).is_some());
    }

    #[test]
    fn long_answers_that_do_not_repeat_are_not_loops() {
        let mut misses = 0;
        for text in [
            code_file(),
            "lorem ipsum dolor sit amet ".repeat(3) + &code_file(),
            // Repeated, but too few times or too little of it.
            "x = compute(a, b, c, d)\n".repeat(7),
            "short".into(),
            String::new(),
        ] {
            misses += usize::from(looping(&text).is_some());
        }
        assert_eq!(misses, 0);
    }

    #[test]
    fn a_result_written_as_text_then_newlines_to_the_cap_is_a_loop() {
        // As Qwen2.5-Coder-1.5B answered in native mode: 2,048 tokens, ~1,000 of them newlines.
        let text = format!(
            "```json\n{{\n  \"status\": \"interruption\",\n  \"question\": \"What is the bug?\"\n}}\n```\n```{}",
            "\n".repeat(1000)
        );
        assert_eq!(
            looping(&text).map(|l| (l.period, l.whitespace)),
            Some((1, true))
        );
    }

    #[test]
    fn one_token_over_and_over_is_a_loop() {
        let found = looping(&format!("fn main() {{{}", "\n".repeat(1500))).unwrap();
        assert_eq!(
            (found.period, found.repeats, found.whitespace),
            (1, 1500, true)
        );
    }

    #[test]
    fn a_table_of_similar_rows_is_not_a_loop() {
        let rows: String = (0..300)
            .map(|i| format!("| row {i:>4} | ok | 0.{i:03} |\n"))
            .collect();
        assert_eq!(looping(&rows), None);
    }
}
