//! Versioned schema migrations, applied on start (ADR 0021).

use orca_store::StoreError;
use tokio_postgres::Client;

use crate::db;

/// The migrations, in order. Version `n` is `MIGRATIONS[n - 1]`; a released migration never
/// changes (its text is checked against the digest recorded when it was applied).
pub const MIGRATIONS: &[(&str, &str)] = &[
    ("initial", include_str!("../migrations/0001_initial.sql")),
    (
        "transitions",
        include_str!("../migrations/0002_transitions.sql"),
    ),
    ("storage", include_str!("../migrations/0003_storage.sql")),
    (
        "staged audit",
        include_str!("../migrations/0004_staged_audit.sql"),
    ),
    (
        "chained in database",
        include_str!("../migrations/0005_chained_in_database.sql"),
    ),
];

/// Serialises migrations of one database across processes (an advisory transaction lock).
const MIGRATION_LOCK: i64 = 0x6f72_6361_0000_0001;

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// The schema version before.
    pub from: u32,
    /// The schema version now.
    pub to: u32,
}

fn digest(sql: &str) -> String {
    use sha2::Digest as _;
    let d = sha2::Sha256::digest(sql.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Brings the schema to the latest version. A database
/// at a version newer than this orca knows, or whose applied migration differs from the one
/// shipped, is refused and left unchanged. All pending migrations apply in one transaction.
pub async fn migrate(client: &mut Client) -> Result<MigrationReport, StoreError> {
    let tx = client
        .transaction()
        .await
        .map_err(db("starting the migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(db("locking the schema for migration"))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS orca_schema_migrations (
             version integer PRIMARY KEY,
             name text NOT NULL,
             digest text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .await
    .map_err(db("creating orca_schema_migrations"))?;
    let rows = tx
        .query(
            "SELECT version, name, digest FROM orca_schema_migrations ORDER BY version",
            &[],
        )
        .await
        .map_err(db("reading orca_schema_migrations"))?;
    let mut from = 0u32;
    for row in &rows {
        let version: i32 = row.get(0);
        let name: String = row.get(1);
        let recorded: String = row.get(2);
        let version = u32::try_from(version).unwrap_or(0);
        let Some((known, sql)) = usize::try_from(version)
            .ok()
            .and_then(|v| v.checked_sub(1))
            .and_then(|i| MIGRATIONS.get(i))
        else {
            return Err(StoreError::Invalid(format!(
                "the postgres store's schema is at version {version} ({name}), newer than this \
                 orca knows ({}): upgrade orca",
                MIGRATIONS.len()
            )));
        };
        if *known != name || digest(sql) != recorded {
            return Err(StoreError::Invalid(format!(
                "the postgres store's migration {version} ({name}) differs from this orca's \
                 ({known}): the schema was changed by another program"
            )));
        }
        from = from.max(version);
    }
    for (i, (name, sql)) in MIGRATIONS.iter().enumerate().skip(from as usize) {
        let version = i32::try_from(i + 1).unwrap_or(i32::MAX);
        tx.batch_execute(sql)
            .await
            .map_err(db(format!("applying migration {version} ({name})")))?;
        tx.execute(
            "INSERT INTO orca_schema_migrations (version, name, digest) VALUES ($1, $2, $3)",
            &[&version, name, &digest(sql)],
        )
        .await
        .map_err(db(format!("recording migration {version}")))?;
    }
    tx.commit().await.map_err(db("committing the migration"))?;
    Ok(MigrationReport {
        from,
        to: u32::try_from(MIGRATIONS.len()).unwrap_or(u32::MAX),
    })
}
