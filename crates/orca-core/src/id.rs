//! Identifiers.
//!
//! Plans, executions and sessions are named by UUIDv7 values shown with a type prefix
//! (`plan_…`, `exec_…`, `sess_…`), so the lexical order of their text is their creation order.
//! Steps and agents are named by slugs (`[a-z0-9][a-z0-9_-]{0,63}`). Parsing is strict: anything
//! that is not exactly one of these forms is refused, so an id can never be a path.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

use crate::error::IdError;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Uuid);

        impl $name {
            /// The prefix that starts the text form of this id.
            pub const PREFIX: &'static str = $prefix;

            /// A new id for something created now (UUIDv7: time-ordered).
            #[must_use]
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            /// Wraps a UUID. Ids made this way order by the UUID's bytes; only v7 UUIDs order by
            /// creation time.
            #[must_use]
            pub const fn from_uuid(uuid: Uuid) -> Self {
                Self(uuid)
            }

            /// The UUID inside.
            #[must_use]
            pub const fn uuid(&self) -> Uuid {
                self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl FromStr for $name {
            type Err = IdError;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                parse_prefixed_uuid(text, $prefix, $kind).map(Self)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}{}", $prefix, self.0.as_hyphenated())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

uuid_id!(
    /// The id of a plan: `plan_` followed by a hyphenated lowercase UUIDv7.
    PlanId,
    "plan_",
    "plan id"
);
uuid_id!(
    /// The id of an execution: `exec_` followed by a hyphenated lowercase UUIDv7.
    ExecutionId,
    "exec_",
    "execution id"
);
uuid_id!(
    /// The id of a conversation with an agent that can be continued: `sess_` + UUIDv7.
    SessionId,
    "sess_",
    "session id"
);

fn parse_prefixed_uuid(text: &str, prefix: &str, kind: &'static str) -> Result<Uuid, IdError> {
    let invalid = |why: &'static str| IdError::Invalid {
        kind,
        text: shorten(text),
        why,
    };
    let rest = text
        .strip_prefix(prefix)
        .ok_or_else(|| invalid("it does not start with the expected prefix"))?;
    // Exactly the lowercase hyphenated form: 8-4-4-4-12 hex digits.
    let bytes = rest.as_bytes();
    if bytes.len() != 36 {
        return Err(invalid("the uuid part is not 36 characters long"));
    }
    for (i, b) in bytes.iter().enumerate() {
        let ok = match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(b),
        };
        if !ok {
            return Err(invalid("the uuid part is not a lowercase hyphenated uuid"));
        }
    }
    Uuid::parse_str(rest).map_err(|_| invalid("the uuid part is not a valid uuid"))
}

macro_rules! slug_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Parses a slug: `[a-z0-9][a-z0-9_-]{0,63}`.
            ///
            /// # Errors
            ///
            /// Anything else (empty, too long, upper case, dots, slashes…).
            pub fn parse(text: &str) -> Result<Self, IdError> {
                validate_slug(text, $kind).map(|()| Self(text.to_owned()))
            }

            /// The slug's text.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl FromStr for $name {
            type Err = IdError;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Self::parse(text)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = IdError;

            fn try_from(text: &str) -> Result<Self, Self::Error> {
                Self::parse(text)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:?}", self.0)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                Self::parse(&text).map_err(serde::de::Error::custom)
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "description": concat!("a ", $kind, ": lower-case letters, digits, `_` and `-`, starting with a letter or digit, at most 64 characters"),
                    "pattern": "^[a-z0-9][a-z0-9_-]{0,63}$"
                })
            }
        }
    };
}

slug_id!(
    /// The id of a step within a plan, unique in that plan.
    StepId,
    "step id"
);
slug_id!(
    /// The id of an agent profile (`planner`, `coder`, `shell`, or a custom one).
    AgentId,
    "agent id"
);

impl AgentId {
    /// The built-in agent that runs a step's `command` with `sh -c`.
    pub const SHELL: &'static str = "shell";
    /// The planner.
    pub const PLANNER: &'static str = "planner";
    /// The relay agent the user talks to.
    pub const ORCA: &'static str = "orca";

    /// The built-in `shell` agent.
    #[must_use]
    pub fn shell() -> Self {
        Self(Self::SHELL.to_owned())
    }

    /// The planner.
    #[must_use]
    pub fn planner() -> Self {
        Self(Self::PLANNER.to_owned())
    }
}

/// The longest slug accepted.
pub const MAX_SLUG_LEN: usize = 64;

fn validate_slug(text: &str, kind: &'static str) -> Result<(), IdError> {
    let invalid = |why: &'static str| IdError::Invalid {
        kind,
        text: shorten(text),
        why,
    };
    let bytes = text.as_bytes();
    let Some(first) = bytes.first() else {
        return Err(invalid("it is empty"));
    };
    if bytes.len() > MAX_SLUG_LEN {
        return Err(invalid("it is longer than 64 characters"));
    }
    if !(first.is_ascii_lowercase() || first.is_ascii_digit()) {
        return Err(invalid("it must start with a lowercase letter or a digit"));
    }
    if !bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
    {
        return Err(invalid(
            "it may only hold lowercase letters, digits, '_' and '-'",
        ));
    }
    Ok(())
}

/// Keeps error messages one line long even for huge inputs or inputs with line breaks:
/// control characters are escaped (`\n`), and the text is cut after 80 characters.
fn shorten(text: &str) -> String {
    const MAX: usize = 80;
    let escaped: String = text.chars().flat_map(char::escape_debug).collect();
    if escaped.chars().count() <= MAX {
        escaped
    } else {
        let mut short: String = escaped.chars().take(MAX).collect();
        short.push('…');
        short
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check_plan_id(text: &str, ok: bool) {
        assert_eq!(text.parse::<PlanId>().is_ok(), ok, "{text}");
    }

    #[test]
    fn plan_ids_parse_strictly() {
        let id = PlanId::new();
        check_plan_id(&id.to_string(), true);
        check_plan_id("plan_0190b1c2-3d4e-7f00-8a00-0123456789ab", true);
        check_plan_id("plan_0190B1C2-3D4E-7F00-8A00-0123456789AB", false);
        check_plan_id("exec_0190b1c2-3d4e-7f00-8a00-0123456789ab", false);
        check_plan_id("0190b1c2-3d4e-7f00-8a00-0123456789ab", false);
        check_plan_id("plan_0190b1c23d4e7f008a000123456789ab", false);
        check_plan_id("plan_../../etc/passwd", false);
        check_plan_id("plan_0190b1c2-3d4e-7f00-8a00-0123456789ab/x", false);
        check_plan_id("", false);
    }

    #[test]
    fn ids_order_by_creation() {
        let ids: Vec<ExecutionId> = (0..100).map(|_| ExecutionId::new()).collect();
        let mut texts: Vec<String> = ids.iter().map(ToString::to_string).collect();
        let before = texts.clone();
        texts.sort();
        assert_eq!(texts, before);
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ids);
    }

    #[track_caller]
    fn check_slug(text: &str, ok: bool) {
        assert_eq!(StepId::parse(text).is_ok(), ok, "{text:?}");
    }

    #[test]
    fn slugs_parse_strictly() {
        check_slug("build", true);
        check_slug("0", true);
        check_slug("run-tests_2", true);
        check_slug(&"a".repeat(64), true);
        check_slug(&"a".repeat(65), false);
        check_slug("", false);
        check_slug("-x", false);
        check_slug("_x", false);
        check_slug("Build", false);
        check_slug("a.b", false);
        check_slug("../x", false);
        check_slug("a/b", false);
        check_slug("a b", false);
        check_slug("é", false);
    }

    #[test]
    fn errors_name_the_kind_and_text() {
        let err = "../x".parse::<AgentId>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid agent id `../x`: it must start with a lowercase letter or a digit"
        );
        let err = "a\nb".parse::<StepId>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid step id `a\\nb`: it may only hold lowercase letters, digits, '_' and '-'"
        );
        let err = format!("plan_{}", "x".repeat(200))
            .parse::<PlanId>()
            .unwrap_err();
        assert_eq!(err.to_string().lines().count(), 1);
        assert!(err.to_string().len() < 200, "{err}");
    }

    #[test]
    fn serde_rejects_bad_ids() {
        assert!(serde_json::from_str::<PlanId>("\"plan_x\"").is_err());
        let id = PlanId::new();
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(serde_json::from_str::<PlanId>(&json).unwrap(), id);
    }
}
