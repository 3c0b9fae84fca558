//! Access tokens: who may use the server. Each is a random secret shown once; only its sha256
//! is kept, in a file outside every project (`$XDG_CONFIG_HOME/orca/web-tokens.json`, 0600).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;

use crate::error::WebError;

/// The name of a token: what the audit records as `web:<name>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TokenName(String);

impl TokenName {
    /// The name as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The actor recorded for this token's actions.
    #[must_use]
    pub fn actor(&self) -> String {
        format!("web:{}", self.0)
    }
}

impl TryFrom<String> for TokenName {
    type Error = WebError;

    fn try_from(name: String) -> Result<Self, WebError> {
        let ok = !name.is_empty()
            && name.len() <= 40
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if ok {
            Ok(Self(name))
        } else {
            Err(WebError::BadInput(format!(
                "token name `{name}`: use 1 to 40 of a-z, 0-9, - and _"
            )))
        }
    }
}

impl From<TokenName> for String {
    fn from(name: TokenName) -> Self {
        name.0
    }
}

impl std::fmt::Display for TokenName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredToken {
    name: TokenName,
    sha256: String,
    #[serde(with = "time::serde::rfc3339")]
    created_at: OffsetDateTime,
    /// Under an approval policy: the one approver this token may bring signed approvals of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    approver: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenDoc {
    format_version: u32,
    tokens: Vec<StoredToken>,
}

/// The token file.
#[derive(Debug, Clone)]
pub struct TokenFile {
    path: PathBuf,
}

/// A new token's secret, to be shown once.
#[derive(Debug)]
pub struct NewToken {
    /// Its name.
    pub name: TokenName,
    /// The secret (`orca_` + 64 hex digits).
    pub secret: String,
    /// Whether a token of that name was replaced.
    pub replaced: bool,
}

fn hash(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// 32 random bytes as hex.
pub(crate) fn random_hex() -> Result<String, WebError> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes)
        .map_err(|e| WebError::Internal(format!("no randomness: {e}")))?;
    Ok(hex(&bytes))
}

/// Compares without stopping at the first difference.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl TokenFile {
    /// The token file at `path` (it need not exist yet).
    #[must_use]
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Where it is.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<TokenDoc, WebError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(TokenDoc {
                    format_version: 1,
                    tokens: Vec::new(),
                });
            }
            Err(e) => {
                return Err(WebError::BadInput(format!(
                    "{}: cannot read it: {e}",
                    self.path.display()
                )));
            }
        };
        let doc: TokenDoc = serde_json::from_str(&text).map_err(|e| {
            WebError::BadInput(format!("{}: not a token file: {e}", self.path.display()))
        })?;
        if doc.format_version != 1 {
            return Err(WebError::BadInput(format!(
                "{}: unknown format_version {}",
                self.path.display(),
                doc.format_version
            )));
        }
        Ok(doc)
    }

    /// Whether any token exists.
    ///
    /// # Errors
    ///
    /// An unreadable file.
    pub fn any(&self) -> Result<bool, WebError> {
        Ok(!self.read()?.tokens.is_empty())
    }

    /// Creates (or replaces) the token `name`; returns its secret, which is not stored.
    ///
    /// # Errors
    ///
    /// An unreadable or unwritable file.
    pub fn create(&self, name: TokenName) -> Result<NewToken, WebError> {
        self.create_for(name, None)
    }

    /// Creates (or replaces) the token `name`, bound to the policy approver `approver` when
    /// given: under an approval policy it can record approvals signed by that approver's key
    /// only, and no other token can.
    ///
    /// # Errors
    ///
    /// An unreadable or unwritable file.
    pub fn create_for(
        &self,
        name: TokenName,
        approver: Option<String>,
    ) -> Result<NewToken, WebError> {
        let mut doc = self.read()?;
        let before = doc.tokens.len();
        doc.tokens.retain(|t| t.name != name);
        let replaced = doc.tokens.len() != before;
        let secret = format!("orca_{}", random_hex()?);
        doc.tokens.push(StoredToken {
            name: name.clone(),
            sha256: hash(&secret),
            created_at: OffsetDateTime::now_utc(),
            approver,
        });
        self.write(&doc)?;
        Ok(NewToken {
            name,
            secret,
            replaced,
        })
    }

    /// Removes the token `name`: it stops working at once. True when it existed.
    ///
    /// # Errors
    ///
    /// An unreadable or unwritable file.
    pub fn revoke(&self, name: &TokenName) -> Result<bool, WebError> {
        let mut doc = self.read()?;
        let before = doc.tokens.len();
        doc.tokens.retain(|t| t.name != *name);
        if doc.tokens.len() == before {
            return Ok(false);
        }
        self.write(&doc)?;
        Ok(true)
    }

    /// The names of the tokens, with when each was created.
    ///
    /// # Errors
    ///
    /// An unreadable file.
    pub fn list(&self) -> Result<Vec<(TokenName, OffsetDateTime)>, WebError> {
        Ok(self
            .read()?
            .tokens
            .into_iter()
            .map(|t| (t.name, t.created_at))
            .collect())
    }

    /// The approver the token `name` is bound to, if any (read from the file on every call).
    ///
    /// # Errors
    ///
    /// An unreadable file.
    pub fn approver(&self, name: &TokenName) -> Result<Option<String>, WebError> {
        Ok(self
            .read()?
            .tokens
            .into_iter()
            .find(|t| t.name == *name)
            .and_then(|t| t.approver))
    }

    /// The names of the tokens, with when each was created and the approver each is bound to.
    ///
    /// # Errors
    ///
    /// An unreadable file.
    pub fn list_bound(&self) -> Result<Vec<(TokenName, OffsetDateTime, Option<String>)>, WebError> {
        Ok(self
            .read()?
            .tokens
            .into_iter()
            .map(|t| (t.name, t.created_at, t.approver))
            .collect())
    }

    /// The name of the token whose secret this is. The file is read on every call: a token
    /// removed from it stops working at once.
    ///
    /// # Errors
    ///
    /// An unreadable file.
    pub fn check(&self, secret: &str) -> Result<Option<TokenName>, WebError> {
        let digest = hash(secret);
        Ok(self
            .read()?
            .tokens
            .into_iter()
            .find(|t| same(&t.sha256, &digest))
            .map(|t| t.name))
    }

    fn write(&self, doc: &TokenDoc) -> Result<(), WebError> {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        let fail = |e: std::io::Error| {
            WebError::Internal(format!("{}: cannot write it: {e}", self.path.display()))
        };
        let dir = self.path.parent().unwrap_or_else(|| Path::new("."));
        std::fs::create_dir_all(dir).map_err(fail)?;
        let tmp = dir.join(format!(".web-tokens.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let text = serde_json::to_string_pretty(doc)
            .map_err(|e| WebError::Internal(format!("cannot encode tokens: {e}")))?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(fail)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(fail)?;
        file.write_all(text.as_bytes()).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        std::fs::rename(&tmp, &self.path).map_err(fail)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_stored_hashed_and_checks() {
        let dir = tempfile::tempdir().unwrap();
        let file = TokenFile::new(dir.path().join("orca/web-tokens.json"));
        let new = file
            .create(TokenName::try_from("phone".to_owned()).unwrap())
            .unwrap();
        let text = std::fs::read_to_string(file.path()).unwrap();
        assert!(!text.contains(&new.secret), "the secret is never stored");
        assert_eq!(file.check(&new.secret).unwrap().unwrap().as_str(), "phone");
        assert!(file.check("orca_wrong").unwrap().is_none());
        let again = file.create(new.name.clone()).unwrap();
        assert!(again.replaced);
        assert!(
            file.check(&new.secret).unwrap().is_none(),
            "replaced token is dead"
        );
        assert_eq!(file.approver(&new.name).unwrap(), None);
        let bound = file
            .create_for(
                TokenName::try_from("alice-web".to_owned()).unwrap(),
                Some("alice".to_owned()),
            )
            .unwrap();
        assert_eq!(
            file.approver(&bound.name).unwrap().as_deref(),
            Some("alice")
        );
        assert_eq!(
            file.approver(&new.name).unwrap(),
            None,
            "other tokens stay unbound"
        );
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in ["", "Phone", "a b", "../x", &"x".repeat(41)] {
            assert!(TokenName::try_from(bad.to_owned()).is_err(), "{bad}");
        }
    }
}
