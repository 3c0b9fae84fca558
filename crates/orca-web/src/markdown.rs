//! Markdown for text agents write — plan goals and summaries, step descriptions, results,
//! model answers — rendered safely: hostile input by construction.
//!
//! A small subset (paragraphs with their line breaks, headings, lists, quotes, fenced code,
//! code spans, strong and emphasis, links), built by escaping every character of the input
//! with [`esc`] and adding only the tags this module writes itself. There is no way to pass
//! HTML through: a `<script>` or `<img onerror>` in the text shows as text. A link keeps its
//! target only when it is an absolute `http:` or `https:` address without spaces, quotes or
//! angle brackets (no `javascript:`, `data:` or relative trickery) and gets
//! `rel="nofollow noopener noreferrer"`; any other link shows as its text followed by the
//! address, as text.

use crate::html::esc;

/// How deep strong / emphasis may nest (hostile input could nest without end).
const MAX_DEPTH: usize = 8;

/// A block of Markdown as HTML (`<p>`, `<ul>`, `<pre>`…), inside a `<div class="md">`.
#[must_use]
pub fn block(text: &str) -> String {
    let mut out = String::from("<div class=\"md\">");
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    let mut para: Vec<&str> = Vec::new();
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if let Some(fence) = fence(trimmed) {
            flush(&mut out, &mut para);
            let mut code = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].trim_start().starts_with(fence) {
                code.push(lines[i]);
                i += 1;
            }
            out.push_str("<pre><code>");
            out.push_str(&esc(&code.join("\n")));
            out.push_str("</code></pre>");
            i += 1;
            continue;
        }
        if trimmed.is_empty() {
            flush(&mut out, &mut para);
            i += 1;
            continue;
        }
        if let Some((level, rest)) = heading(trimmed) {
            flush(&mut out, &mut para);
            // Headings of a text inside a page start below the page's own.
            let tag = (level + 2).min(6);
            out.push_str(&format!("<h{tag}>{}</h{tag}>", inline(rest, 0)));
            i += 1;
            continue;
        }
        if let Some((ordered, _)) = item(trimmed) {
            flush(&mut out, &mut para);
            let tag = if ordered { "ol" } else { "ul" };
            out.push_str(&format!("<{tag}>"));
            while i < lines.len() {
                match item(lines[i].trim_start()) {
                    Some((o, rest)) if o == ordered => {
                        out.push_str(&format!("<li>{}</li>", inline(rest, 0)));
                        i += 1;
                    }
                    _ => break,
                }
            }
            out.push_str(&format!("</{tag}>"));
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix('>') {
            flush(&mut out, &mut para);
            let mut quoted = vec![rest.trim_start()];
            i += 1;
            while let Some(rest) = lines.get(i).and_then(|l| l.trim_start().strip_prefix('>')) {
                quoted.push(rest.trim_start());
                i += 1;
            }
            out.push_str("<blockquote>");
            out.push_str(&lines_html(&quoted));
            out.push_str("</blockquote>");
            continue;
        }
        para.push(line);
        i += 1;
    }
    flush(&mut out, &mut para);
    out.push_str("</div>");
    out
}

/// One line of Markdown (a goal, a description, a summary) as inline HTML: code spans,
/// strong, emphasis, links; no blocks.
#[must_use]
pub fn line(text: &str) -> String {
    inline(text, 0)
}

fn flush(out: &mut String, para: &mut Vec<&str>) {
    if para.is_empty() {
        return;
    }
    out.push_str("<p>");
    out.push_str(&lines_html(para));
    out.push_str("</p>");
    para.clear();
}

/// Lines of a paragraph: their breaks kept (agents' text relies on them).
fn lines_html(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|l| inline(l.trim(), 0))
        .collect::<Vec<_>>()
        .join("<br>")
}

fn fence(line: &str) -> Option<&'static str> {
    if line.starts_with("```") {
        Some("```")
    } else if line.starts_with("~~~") {
        Some("~~~")
    } else {
        None
    }
}

fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|&c| c == '#').count();
    let rest = line.get(level..)?;
    ((1..=6).contains(&level) && rest.starts_with(' ')).then(|| (level, rest.trim()))
}

/// A list item: whether it is numbered, and its text.
fn item(line: &str) -> Option<(bool, &str)> {
    for bullet in ["- ", "* ", "+ "] {
        if let Some(rest) = line.strip_prefix(bullet) {
            return Some((false, rest));
        }
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if (1..=9).contains(&digits) {
        let rest = line.get(digits..)?;
        if let Some(rest) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            return Some((true, rest));
        }
    }
    None
}

/// Where the run of `marker` starting at or after `from` closes (its first char's index).
fn find_run(chars: &[char], from: usize, marker: &[char]) -> Option<usize> {
    let n = marker.len();
    (from..chars.len().saturating_sub(n - 1)).find(|&j| chars[j..j + n] == *marker)
}

fn inline(text: &str, depth: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 16);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' if chars.get(i + 1).is_some_and(char::is_ascii_punctuation) => {
                out.push_str(&esc(&chars[i + 1].to_string()));
                i += 2;
            }
            '`' => {
                let n = chars[i..].iter().take_while(|&&c| c == '`').count();
                let marker = vec!['`'; n];
                match find_run(&chars, i + n, &marker) {
                    Some(end) => {
                        let code: String = chars[i + n..end].iter().collect();
                        out.push_str("<code>");
                        out.push_str(&esc(code.trim()));
                        out.push_str("</code>");
                        i = end + n;
                    }
                    None => {
                        out.push_str(&"`".repeat(n));
                        i += n;
                    }
                }
            }
            '*' | '_' if depth < MAX_DEPTH => {
                let double = chars.get(i + 1) == Some(&c);
                let marker: Vec<char> = if double { vec![c, c] } else { vec![c] };
                let n = marker.len();
                let opens = chars.get(i + n).is_some_and(|c| !c.is_whitespace())
                    // `snake_case_names` stay as they are: `_` opens only after a non-word.
                    && (c == '*' || i == 0 || !chars[i - 1].is_alphanumeric());
                let close = if opens {
                    find_run(&chars, i + n + 1, &marker).filter(|&end| {
                        !chars[end - 1].is_whitespace()
                            && (c == '*' || chars.get(end + n).is_none_or(|c| !c.is_alphanumeric()))
                    })
                } else {
                    None
                };
                match close {
                    Some(end) => {
                        let inner: String = chars[i + n..end].iter().collect();
                        let tag = if double { "strong" } else { "em" };
                        out.push_str(&format!("<{tag}>{}</{tag}>", inline(&inner, depth + 1)));
                        i = end + n;
                    }
                    None => {
                        out.push_str(&esc(&marker.iter().collect::<String>()));
                        i += n;
                    }
                }
            }
            '[' => match link(&chars, i) {
                Some((label, url, end)) => {
                    let label = inline(&label, MAX_DEPTH);
                    match safe_url(&url) {
                        Some(url) => out.push_str(&format!(
                            "<a href=\"{}\" rel=\"nofollow noopener noreferrer\">{label}</a>",
                            esc(url)
                        )),
                        None => {
                            out.push_str(&label);
                            out.push_str(&format!(" ({})", esc(&url)));
                        }
                    }
                    i = end;
                }
                None => {
                    out.push('[');
                    i += 1;
                }
            },
            c => {
                match c {
                    '&' => out.push_str("&amp;"),
                    '<' => out.push_str("&lt;"),
                    '>' => out.push_str("&gt;"),
                    '"' => out.push_str("&quot;"),
                    '\'' => out.push_str("&#39;"),
                    c => out.push(c),
                }
                i += 1;
            }
        }
    }
    out
}

/// `[label](url)` at `start`: its label, its address and the index after it.
fn link(chars: &[char], start: usize) -> Option<(String, String, usize)> {
    let close = (start + 1..chars.len()).find(|&j| chars[j] == ']')?;
    if chars.get(close + 1) != Some(&'(') {
        return None;
    }
    let end = (close + 2..chars.len()).find(|&j| chars[j] == ')')?;
    let label: String = chars[start + 1..close].iter().collect();
    let url: String = chars[close + 2..end].iter().collect();
    Some((label, url.trim().to_owned(), end + 1))
}

/// The address, when a link may point to it: absolute `http:` / `https:`, nothing in it that
/// could leave the attribute or hide a scheme.
fn safe_url(url: &str) -> Option<&str> {
    let lower = url.to_ascii_lowercase();
    let scheme_ok = lower.starts_with("https://") || lower.starts_with("http://");
    let clean = url
        .chars()
        .all(|c| !c.is_control() && !c.is_whitespace() && !"\"'<>`\\".contains(c));
    (scheme_ok && clean && url.len() > "https://".len()).then_some(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(input: &str, want: &str) {
        assert_eq!(line(input), want, "{input}");
    }

    #[test]
    fn inline_markup() {
        check("run `cargo test` now", "run <code>cargo test</code> now");
        check("**bold** and *em*", "<strong>bold</strong> and <em>em</em>");
        check("a snake_case_name stays", "a snake_case_name stays");
        check("2 * 3 * 4", "2 * 3 * 4");
        check("`<b>` in code", "<code>&lt;b&gt;</code> in code");
        check("unclosed `tick", "unclosed `tick");
        check(
            "[docs](https://example.com/a?b=1&c=2)",
            "<a href=\"https://example.com/a?b=1&amp;c=2\" rel=\"nofollow noopener noreferrer\">docs</a>",
        );
    }

    #[test]
    fn hostile_input_stays_text() {
        let cases = [
            "<script>alert(1)</script>",
            "<img src=x onerror=alert(1)>",
            "[x](javascript:alert(1))",
            "[x](JaVaScRiPt:alert(1))",
            "[x]( javascript:alert(1))",
            "[x](data:text/html,<script>alert(1)</script>)",
            "[x](https://a\" onmouseover=\"alert(1))",
            "[<img src=x onerror=alert(1)>](https://example.com)",
            "**<script>**",
            "`</code><script>alert(1)</script>`",
            "```\n<script>alert(1)</script>\n```",
            "> <iframe src=https://evil>",
            "# <svg onload=alert(1)>",
            "- <a href=javascript:alert(1)>x</a>",
        ];
        for case in cases {
            for html in [line(case), block(case)] {
                let lower = html.to_ascii_lowercase();
                for bad in [
                    "<script",
                    "<img",
                    "<iframe",
                    "<svg",
                    "href=\"javascript",
                    "href=\"data",
                    "onmouseover=\"",
                    "<a href=javascript",
                ] {
                    assert!(!lower.contains(bad), "{case} gave {html}");
                }
            }
        }
        assert_eq!(line("[x](javascript:alert(1))"), "x (javascript:alert(1))");
    }

    #[test]
    fn blocks() {
        let html = block(
            "# Title\n\nline one\nline two\n\n- a\n- `b`\n\n1. x\n2. y\n\n```\nfn main() {}\n```\n> quoted",
        );
        assert_eq!(
            html,
            "<div class=\"md\"><h3>Title</h3><p>line one<br>line two</p><ul><li>a</li><li><code>b</code></li></ul>\
<ol><li>x</li><li>y</li></ol><pre><code>fn main() {}</code></pre><blockquote>quoted</blockquote></div>"
        );
    }

    #[test]
    fn deep_nesting_ends() {
        let deep = "*".repeat(10_000) + "x" + &"*".repeat(10_000);
        let html = line(&deep);
        assert!(html.contains('x'));
    }
}
