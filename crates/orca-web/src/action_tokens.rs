//! Single-use, expiring action tokens: every form that changes something carries one. It is
//! bound to the access token that was shown the form and to the one action the form does; a
//! second submit of the same form is refused and says who used it first.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use time::OffsetDateTime;

use crate::tokens::{TokenName, random_hex};

/// How long a form stays usable.
pub const ACTION_TTL: Duration = Duration::from_secs(30 * 60);

#[derive(Debug)]
struct Grant {
    holder: TokenName,
    action: String,
    expires: Instant,
}

#[derive(Debug, Clone)]
struct Used {
    by: String,
    at: OffsetDateTime,
}

/// Why an action token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Used already.
    #[error("this form was already submitted, by {by} at {at}; nothing was done again")]
    Replayed {
        /// Who submitted it first.
        by: String,
        /// When.
        at: String,
    },
    /// Never issued, or too old.
    #[error(
        "this form is expired or unknown (forms are single-use and last 30 minutes); reload the page and try again"
    )]
    Unknown,
    /// Issued to another token or for another action.
    #[error("this form was issued for another action or another token; reload the page")]
    Mismatch,
}

/// The issued and used action tokens (in memory: a restarted server invalidates every open
/// form, which is the safe side).
#[derive(Debug, Default)]
pub struct ActionTokens {
    live: Mutex<HashMap<String, Grant>>,
    used: Mutex<HashMap<String, Used>>,
}

impl ActionTokens {
    /// A token for `action` (e.g. `plan:<id>:approve`), usable once by `holder`.
    #[must_use]
    pub fn issue(&self, holder: &TokenName, action: &str) -> String {
        let nonce = random_hex().unwrap_or_else(|_| {
            // Without randomness no form can be issued safely; an empty token is never valid.
            String::new()
        });
        if nonce.is_empty() {
            return nonce;
        }
        let now = Instant::now();
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        live.retain(|_, g| g.expires > now);
        live.insert(
            nonce.clone(),
            Grant {
                holder: holder.clone(),
                action: action.to_owned(),
                expires: now + ACTION_TTL,
            },
        );
        nonce
    }

    /// Uses the token: succeeds once.
    ///
    /// # Errors
    ///
    /// [`Refusal`] when the token was used, is unknown or expired, or is not for this action.
    pub fn redeem(&self, nonce: &str, holder: &TokenName, action: &str) -> Result<(), Refusal> {
        let grant = {
            let mut live = self
                .live
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match live.get(nonce) {
                Some(g) if g.holder != *holder || g.action != action => {
                    return Err(Refusal::Mismatch);
                }
                Some(_) => live.remove(nonce),
                None => None,
            }
        };
        let mut used = self
            .used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match grant {
            Some(g) if g.expires > Instant::now() => {
                // A used form is remembered (to name who used it) as long as it could be
                // replayed, and a day more.
                let horizon = OffsetDateTime::now_utc() - time::Duration::days(1);
                used.retain(|_, u| u.at > horizon);
                used.insert(
                    nonce.to_owned(),
                    Used {
                        by: holder.actor(),
                        at: OffsetDateTime::now_utc(),
                    },
                );
                Ok(())
            }
            Some(_) => Err(Refusal::Unknown),
            None => match used.get(nonce) {
                Some(u) => Err(Refusal::Replayed {
                    by: u.by.clone(),
                    at: crate::html::when(u.at),
                }),
                None => Err(Refusal::Unknown),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> TokenName {
        TokenName::try_from(n.to_owned()).unwrap()
    }

    #[test]
    fn a_token_works_once_for_its_holder_and_action() {
        let tokens = ActionTokens::default();
        let nonce = tokens.issue(&name("a"), "plan:x:approve");
        assert_eq!(
            tokens.redeem(&nonce, &name("b"), "plan:x:approve"),
            Err(Refusal::Mismatch)
        );
        assert_eq!(
            tokens.redeem(&nonce, &name("a"), "plan:x:reject"),
            Err(Refusal::Mismatch)
        );
        tokens.redeem(&nonce, &name("a"), "plan:x:approve").unwrap();
        let again = tokens.redeem(&nonce, &name("a"), "plan:x:approve");
        assert!(matches!(again, Err(Refusal::Replayed { ref by, .. }) if by == "web:a"));
        assert_eq!(
            tokens.redeem("nope", &name("a"), "plan:x:approve"),
            Err(Refusal::Unknown)
        );
    }
}
