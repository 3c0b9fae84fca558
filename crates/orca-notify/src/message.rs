//! What a person reads: a notification (any JSON the notifier sends: `decision_pending`, a
//! reminder, an escalation…) turned into a Slack message or an email. Only `event`, `headline`,
//! `url` and `inbox_url` are read, each optional, so any event the notifier sends can be shown.

use serde_json::{Value, json};

/// The parts of a notification a person reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) event: String,
    pub(crate) headline: String,
    /// The page of the thing to decide (else the inbox).
    pub(crate) link: Option<String>,
    pub(crate) inbox: Option<String>,
}

impl Summary {
    pub(crate) fn of(payload: &Value) -> Self {
        let text = |k: &str| {
            payload
                .get(k)
                .and_then(Value::as_str)
                .map(one_line)
                .filter(|s| !s.is_empty())
        };
        let event = text("event").unwrap_or_else(|| "notification".to_owned());
        let headline = text("headline").unwrap_or_else(|| event.replace('_', " "));
        let inbox = text("inbox_url");
        Self {
            link: text("url").or_else(|| inbox.clone()),
            inbox,
            event,
            headline,
        }
    }
}

/// Text on one line, control characters made spaces (a headline comes from plan text a model
/// wrote: it must not start a new header line in an email), at most 200 characters.
fn one_line(text: &str) -> String {
    let line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let line = line.trim();
    match line.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

/// Slack's escaping of `&`, `<` and `>` in message text.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A Slack incoming-webhook message: `text` (the notification fallback) and `blocks`.
pub(crate) fn slack(payload: &Value) -> Value {
    let s = Summary::of(payload);
    let headline = slack_escape(&format!("orca: {}", s.headline));
    let (text, section) = match &s.link {
        Some(link) => (
            format!("{headline} {link}"),
            format!(
                "*{headline}*\n<{}|Open it in the orca inbox>",
                slack_escape(link)
            ),
        ),
        None => (headline.clone(), format!("*{headline}*")),
    };
    json!({
        "text": text,
        "blocks": [
            { "type": "section", "text": { "type": "mrkdwn", "text": section } },
            { "type": "context", "elements": [ { "type": "mrkdwn", "text": format!("orca · {}", slack_escape(&s.event)) } ] },
        ],
    })
}

/// An email's subject and plain-text body.
pub(crate) fn email(payload: &Value) -> (String, String) {
    let s = Summary::of(payload);
    let mut body = format!("{}\n\n", s.headline);
    if let Some(link) = &s.link {
        body.push_str(&format!("Open it: {link}\n"));
    }
    if let Some(inbox) = s.inbox.as_ref().filter(|i| Some(*i) != s.link.as_ref()) {
        body.push_str(&format!("The inbox: {inbox}\n"));
    }
    body.push_str(&format!(
        "\n-- \norca serve ({}); decide in the inbox or with the orca command line.\n",
        s.event
    ));
    (format!("orca: {}", s.headline), body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_event_reads_well() {
        let pending = json!({
            "event": "decision_pending",
            "headline": "approve plan <b>&\nX-Evil: 1",
            "url": "https://h/plans/p1",
            "inbox_url": "https://h/inbox",
        });
        let m = slack(&pending);
        assert_eq!(
            m["text"],
            "orca: approve plan &lt;b&gt;&amp; X-Evil: 1 https://h/plans/p1"
        );
        assert_eq!(
            m["blocks"][0]["text"]["text"],
            "*orca: approve plan &lt;b&gt;&amp; X-Evil: 1*\n<https://h/plans/p1|Open it in the orca inbox>"
        );
        let (subject, body) = email(&pending);
        assert_eq!(subject, "orca: approve plan <b>& X-Evil: 1");
        assert!(
            body.contains("Open it: https://h/plans/p1\nThe inbox: https://h/inbox\n"),
            "{body}"
        );
        // Another helper's event, with only an event name and the inbox.
        let reminder = json!({ "event": "approval_reminder", "inbox_url": "https://h/inbox" });
        let (subject, body) = email(&reminder);
        assert_eq!(subject, "orca: approval reminder");
        assert!(body.contains("Open it: https://h/inbox\n"), "{body}");
        assert!(!body.contains("The inbox:"), "{body}");
        assert_eq!(slack(&json!({}))["text"], "orca: notification");
    }
}
