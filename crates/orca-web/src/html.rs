//! Small HTML helpers: escaping, times, the page frame. Every value goes through [`esc`].

use std::fmt::Write as _;

use time::OffsetDateTime;

/// Escapes text for HTML content and attribute values.
#[must_use]
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A time as `2026-11-23 15:04:05 UTC`.
#[must_use]
pub fn when(at: OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

/// A duration in seconds, short.
#[must_use]
pub fn secs(d: time::Duration) -> String {
    let ms = d.whole_milliseconds().max(0);
    if ms < 10_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if ms < 120_000 {
        format!("{}s", ms / 1000)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    }
}

/// Text cut to `max` characters, saying so.
#[must_use]
pub fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let kept: String = text.chars().take(max).collect();
        format!("{kept}\n… (cut; the full text is in `orca exec show`)")
    }
}

/// A whole page for a signed-in person: the frame, the navigation with "Sign out", `body`.
/// No inline script or style: the CSP forbids them.
#[must_use]
pub fn page(title: &str, body: &str) -> String {
    frame(
        title,
        "<a href=\"/inbox\">Inbox</a> <a href=\"/plans\">Plans</a> <a href=\"/executions\">Executions</a> <a href=\"/audit\">Audit</a>\
<form class=\"logout\" method=\"post\" action=\"/logout\"><button class=\"link\" type=\"submit\">Sign out</button></form>",
        body,
    )
}

/// A page for someone not signed in (the sign-in page, a refusal before the token is
/// checked): no links that need a token, no "Sign out".
#[must_use]
pub fn public_page(title: &str, body: &str) -> String {
    frame(
        title,
        "<a class=\"signin\" href=\"/login\">Sign in</a>",
        body,
    )
}

fn frame(title: &str, links: &str, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 1024);
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>{} · orca</title><link rel=\"stylesheet\" href=\"/static/orca.css\">\
<script src=\"/static/live.js\" defer></script></head><body>\
<nav><a class=\"brand\" href=\"/inbox\">orca</a> {links}</nav>\
<main>{body}</main></body></html>",
        esc(title)
    );
    out
}

/// A time for a table or a tree: kept on one line.
#[must_use]
pub fn when_cell(at: OffsetDateTime) -> String {
    format!("<span class=\"when\">{}</span>", esc(&when(at)))
}

/// A status badge.
#[must_use]
pub fn badge(text: &str) -> String {
    format!("<span class=\"badge b-{0}\">{0}</span>", esc(text))
}

/// An execution's status badge: the token as its class, the words as its text (the same
/// vocabulary as the command line's).
pub fn status_badge(status: orca_services::status::Status) -> String {
    format!(
        "<span class=\"badge b-{}\">{}</span>",
        status.as_str(),
        esc(status.words())
    )
}

/// A hidden action-token field.
#[must_use]
pub fn nonce_field(nonce: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"nonce\" value=\"{}\">",
        esc(nonce)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_everything_that_could_open_markup() {
        assert_eq!(esc("<script>\"'&"), "&lt;script&gt;&quot;&#39;&amp;");
    }
}
