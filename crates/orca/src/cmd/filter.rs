//! `--status`, `--since` and `--limit` of `plan list` and `exec list`, checked before anything
//! is read: a bad value exits 2 naming the option and what it accepts.

use time::OffsetDateTime;

use crate::cli::ListFilter;
use crate::exit::CliError;

/// A checked filter.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    status: Option<String>,
    since: Option<OffsetDateTime>,
    limit: Option<usize>,
}

impl Filter {
    /// Checks `args` against the stages a list can show.
    pub(crate) fn new(args: &ListFilter, stages: &[&str]) -> Result<Self, CliError> {
        // `awaiting decision`, `awaiting-decision` and `awaiting_decision` are one status.
        let normalized = args
            .status
            .as_ref()
            .map(|s| s.trim().to_ascii_lowercase().replace([' ', '-'], "_"));
        let status = match &normalized {
            Some(s) if !stages.contains(&s.as_str()) => {
                return Err(CliError::bad_input(format!(
                    "--status {s}: expected one of {}",
                    stages.join(", ")
                )));
            }
            other => other.clone(),
        };
        let since = args
            .since
            .as_deref()
            .map(|s| since(s, OffsetDateTime::now_utc()))
            .transpose()?;
        if args.limit == Some(0) {
            return Err(CliError::bad_input("--limit 0: expected at least 1"));
        }
        Ok(Self {
            status,
            since,
            limit: args.limit,
        })
    }

    /// Keeps the items (newest first) whose stage and creation time pass, at most `limit`.
    pub(crate) fn apply<T>(
        &self,
        items: Vec<T>,
        stage: impl Fn(&T) -> String,
        created: impl Fn(&T) -> OffsetDateTime,
    ) -> Vec<T> {
        items
            .into_iter()
            .filter(|i| self.status.as_ref().is_none_or(|s| *s == stage(i)))
            .filter(|i| self.since.is_none_or(|t| created(i) >= t))
            .take(self.limit.unwrap_or(usize::MAX))
            .collect()
    }
}

/// `30m`, `12h`, `7d`, `45s` before `now`, or an RFC 3339 time.
fn since(text: &str, now: OffsetDateTime) -> Result<OffsetDateTime, CliError> {
    let bad = || {
        CliError::bad_input(format!(
            "--since {text}: expected an age like 30m, 12h or 7d, or an RFC 3339 time"
        ))
    };
    if let Ok(t) = OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339) {
        return Ok(t);
    }
    let unit = text.chars().last().ok_or_else(bad)?;
    let n: i64 = text[..text.len() - unit.len_utf8()]
        .parse()
        .map_err(|_| bad())?;
    let seconds = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(seconds)
        .filter(|s| *s >= 0)
        .and_then(|s| now.checked_sub(time::Duration::seconds(s)))
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_times() {
        let now = OffsetDateTime::UNIX_EPOCH + time::Duration::days(10);
        assert_eq!(since("2d", now).unwrap(), now - time::Duration::days(2));
        assert_eq!(
            since("30m", now).unwrap(),
            now - time::Duration::minutes(30)
        );
        assert!(since("1970-01-02T00:00:00Z", now).is_ok());
        for bad in ["", "d", "2w", "-1d", "x1h"] {
            assert!(since(bad, now).is_err(), "{bad}");
        }
    }
}
