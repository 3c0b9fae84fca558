//! # orca-store-postgres
//!
//! orca's store on PostgreSQL (15 or later): the same port as the file store ([`PlanStore`],
//! [`ExecutionStore`], [`AuditStore`]) with the same semantics, shared by runners on many
//! hosts. Documents are kept as the JSON orca writes; every update is compare-and-swap on a
//! revision inside a transaction that locks the row; leases and resource locks are session
//! advisory locks, so they go when their holder's connection does (a dead process); times that
//! decide anything are the database's clock. The schema is versioned and migrated on open
//! ([`schema`], ADR 0021).
//!
//! [`PlanStore`]: orca_store::PlanStore
//! [`ExecutionStore`]: orca_store::ExecutionStore
//! [`AuditStore`]: orca_store::AuditStore
#![forbid(unsafe_code)]

mod audit;
mod catch_up;
mod chain;
mod chained;
mod codec;
mod ending;
mod executions;
mod group;
mod libpq_env;
mod locks;
mod notify;
mod plans;
mod pool;
pub mod schema;
mod tls;
mod transfer;
mod write;

use std::sync::Arc;

use orca_core::redact::Redactor;
use orca_store::{Authority, StoreError};

pub use executions::BatchFailed;
/// Test support: a lease left behind as by a crash (see `abandon_lease`).
#[cfg(feature = "testkit")]
pub use locks::abandon_lease;

/// The store conformance suite's view of this backend: a holder that dies leaves its lease
/// row, its session locks go.
#[cfg(feature = "testkit")]
impl orca_store::testkit::Backend for PgStore {
    fn kill_holder(&self, lease: orca_store::Lease, _holder: &orca_core::Holder) {
        abandon_lease(lease);
    }
}
pub use notify::CHANNELS;
pub use schema::MigrationReport;
pub use tls::{Probe, SslMode, TlsSettings};
pub use transfer::RawLog;

/// How long a running task's lease lasts without its holder's heartbeat (ADR 0026).
pub const DEFAULT_TASK_LEASE: std::time::Duration = std::time::Duration::from_secs(30);

/// The PostgreSQL store. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: pool::Pool,
    authority: Authority,
    redactor: Redactor,
    releases: Arc<locks::Releases>,
    /// Each audit log's queue and head as this store last saw it (`group`).
    heads: group::Heads,
    /// How long a claimed task's lease lasts without a heartbeat.
    task_lease: std::time::Duration,
    /// Every audit write is staged and chained here (`chain`), none chained by the database
    /// (tests, and a database that hashes differently from orca).
    stage_first: std::sync::atomic::AtomicBool,
    url: String,
    /// The schema was brought up to date by this store (on its first connection).
    migrated: tokio::sync::OnceCell<MigrationReport>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &redacted_url(&self.inner.url))
            .finish_non_exhaustive()
    }
}

/// A URL without its password, to show: `user:***@`, and `password=***` in a URL's query or
/// in libpq's `key=value` form.
#[must_use]
pub fn redacted_url(url: &str) -> String {
    let mut out = url.to_owned();
    // postgres://user:password@host/db → postgres://user:***@host/db
    if let Some((scheme, rest)) = url.split_once("://")
        && let Some((creds, host)) = rest
            .split_once('/')
            .map_or(rest, |(a, _)| a)
            .rsplit_once('@')
        && let Some((user, _)) = creds.split_once(':')
    {
        let tail = &rest[creds.len() + 1 + host.len()..];
        out = format!("{scheme}://{user}:***@{host}{tail}");
    }
    // password=… (up to `&` or whitespace; a quoted value up to its closing quote).
    let mut shown = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(at) = rest.find("password") {
        let (before, after) = rest.split_at(at);
        shown.push_str(before);
        let boundary = before
            .chars()
            .next_back()
            .is_none_or(|c| c == '?' || c == '&' || c.is_whitespace());
        let value = after["password".len()..].trim_start();
        match value.strip_prefix('=') {
            Some(v) if boundary => {
                let v = v.trim_start();
                let end = if let Some(q) = v.strip_prefix('\'') {
                    let mut i = 0;
                    let bytes = q.as_bytes();
                    while i < bytes.len() && bytes[i] != b'\'' {
                        i += if bytes[i] == b'\\' { 2 } else { 1 };
                    }
                    (i + 2).min(v.len())
                } else {
                    v.find(|c: char| c == '&' || c.is_whitespace())
                        .unwrap_or(v.len())
                };
                shown.push_str("password=***");
                rest = &v[end..];
            }
            _ => {
                shown.push_str("password");
                rest = &after["password".len()..];
            }
        }
    }
    shown.push_str(rest);
    shown
}

/// Whether a store location is a PostgreSQL URL.
#[must_use]
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

impl PgStore {
    /// A store on the database at `url` (`postgres://user@host:port/db`, or libpq's
    /// `key=value` form). Nothing is connected yet: the first operation connects and brings
    /// the schema to the latest version.
    ///
    /// # Errors
    ///
    /// The URL is not valid.
    pub fn open(url: &str, authority: Authority, redactor: Redactor) -> Result<Self, StoreError> {
        let config = tls::Target::parse(url)?;
        Ok(Self {
            inner: Arc::new(Inner {
                pool: pool::Pool::new(config),
                authority,
                redactor,
                releases: Arc::new(locks::Releases::default()),
                heads: group::Heads::default(),
                task_lease: DEFAULT_TASK_LEASE,
                stage_first: std::sync::atomic::AtomicBool::new(false),
                url: url.to_owned(),
                migrated: tokio::sync::OnceCell::new(),
            }),
        })
    }

    /// [`PgStore::open`], then connects and migrates at once.
    ///
    /// # Errors
    ///
    /// The URL is not valid, the database cannot be reached, or its schema is newer than this
    /// orca or was changed by another program.
    pub async fn connect(
        url: &str,
        authority: Authority,
        redactor: Redactor,
    ) -> Result<Self, StoreError> {
        let store = Self::open(url, authority, redactor)?;
        store.migrate().await?;
        store.inner.pool.replenish();
        Ok(store)
    }

    /// Brings the schema to the latest version (done by [`PgStore::connect`] too).
    ///
    /// # Errors
    ///
    /// See [`schema::migrate`].
    pub async fn migrate(&self) -> Result<MigrationReport, StoreError> {
        self.inner
            .migrated
            .get_or_try_init(|| async {
                let mut conn = self.inner.pool.get().await?;
                let report = schema::migrate(&mut conn).await?;
                if !chained::hashes_as_orca(&conn).await {
                    tracing::warn!(
                        "this database does not hash text as orca does: audit entries are \
                         staged and chained by orca"
                    );
                    self.set_stage_first(true);
                }
                Ok(report)
            })
            .await
            .cloned()
    }

    /// Stages every audit write and chains it here (ADR 0055) instead of having the database
    /// chain it (ADR 0060, the default). Tests use it to exercise staging beside entries the
    /// database chains; a store whose database hashes text differently turns it on itself.
    pub fn set_stage_first(&self, stage_first: bool) {
        self.inner
            .stage_first
            .store(stage_first, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn stage_first(&self) -> bool {
        self.inner
            .stage_first
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The URL this store was opened with, password hidden.
    #[must_use]
    pub fn url(&self) -> String {
        redacted_url(&self.inner.url)
    }

    /// A pooled connection to a migrated database.
    pub(crate) async fn conn(&self) -> Result<pool::Conn<'_>, StoreError> {
        self.migrate().await?;
        self.inner.pool.get().await
    }

    /// The TLS settings of the URL (`sslmode`, `sslrootcert`, …; ADR 0027).
    #[must_use]
    pub fn tls(&self) -> &TlsSettings {
        self.inner.pool.config().settings()
    }

    pub(crate) fn pool(&self) -> &pool::Pool {
        &self.inner.pool
    }
}

/// Maps a database error to a [`StoreError::Backend`] saying what was being done.
pub(crate) fn db(context: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> StoreError {
    let context = context.into();
    move |e| StoreError::backend(context, e)
}

#[cfg(test)]
mod tests {
    use super::redacted_url;

    #[test]
    fn passwords_are_hidden_in_every_form() {
        for (url, shown) in [
            (
                "postgres://u:s3cret@db:5432/orca?sslmode=require",
                "postgres://u:***@db:5432/orca?sslmode=require",
            ),
            ("postgres://u:s3c@ret@db/orca", "postgres://u:***@db/orca"),
            (
                "postgres://u@db/orca?password=s3cret&sslmode=verify-full",
                "postgres://u@db/orca?password=***&sslmode=verify-full",
            ),
            (
                "host=db password='s3 \\'cret' user=u",
                "host=db password=*** user=u",
            ),
            ("host=db password = s3cret", "host=db password=***"),
            ("postgres://db/orca", "postgres://db/orca"),
            (
                "postgres://u@db/my_password_db",
                "postgres://u@db/my_password_db",
            ),
        ] {
            assert_eq!(redacted_url(url), shown, "{url}");
            assert!(!redacted_url(url).contains("s3"), "{url}");
        }
    }
}
