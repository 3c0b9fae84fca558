//! Leases and resource locks: session advisory locks on a connection of their own, so they go
//! when their holder's connection does (its process died, its host is gone once TCP keepalive
//! notices). The lease row records who holds it and when (the database's clock).
//!
//! A guard is released when dropped. The release runs on the runtime (unlock, then the
//! connection goes back to this store's idle lock connections, ADR 0026: a lock costs one
//! round trip, not a new connection); until it has finished, this store's own next attempt on
//! the same lock waits for it (so dropping a guard and locking again at once behaves as with
//! the file store).
//!
//! Task leases (workers claiming tasks one by one, ADR 0026) are rows with an expiry in the
//! database's clock, written with the running task (`write`), renewed here.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::pool::Session;
use crate::{PgStore, db};
use orca_core::{ExecutionId, Holder, StepId};
use orca_store::common;
use orca_store::{ExpiredTask, Lease, LeaseInfo, ResourceGuard, Revision, StoreError};
use time::OffsetDateTime;
use tokio::sync::Notify;

/// Idle lock connections kept for reuse.
const IDLE_LOCK_CONNECTIONS: usize = 32;

/// Releases under way in this process, by lock key, and the idle lock connections.
#[derive(Debug, Default)]
pub(crate) struct Releases {
    pending: Mutex<HashMap<i64, usize>>,
    done: Notify,
    /// Connections that held locks and hold none now.
    idle: Mutex<Vec<Session>>,
}

impl Releases {
    /// Keeps a connection that holds no lock for the next lock.
    fn keep(&self, session: Session) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if !session.is_closed() && idle.len() < IDLE_LOCK_CONNECTIONS {
            idle.push(session);
        }
    }

    fn begin(&self, keys: &[i64]) {
        let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        for k in keys {
            *p.entry(*k).or_default() += 1;
        }
    }

    fn end(&self, keys: &[i64]) {
        {
            let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            for k in keys {
                if let Some(n) = p.get_mut(k) {
                    *n -= 1;
                    if *n == 0 {
                        p.remove(k);
                    }
                }
            }
        }
        self.done.notify_waiters();
    }

    /// Waits (bounded) until no release of these keys is under way.
    async fn settle(&self, keys: &[i64]) {
        let wait = async {
            loop {
                let notified = self.done.notified();
                {
                    let p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                    if keys.iter().all(|k| !p.contains_key(k)) {
                        return;
                    }
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(10), wait).await;
    }
}

/// The advisory lock key of a name in a namespace: 64 bits of sha256.
pub(crate) fn lock_key(namespace: &str, name: &str) -> i64 {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(namespace.as_bytes());
    h.update([0u8]);
    h.update(name.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    i64::from_be_bytes(b)
}

/// A held lock: its own connection, released (or abandoned) when dropped.
struct Held {
    client: Option<Session>,
    keys: Vec<i64>,
    /// The lease row to delete on a clean release.
    lease_row: Option<String>,
    /// Simulated crash: unlock, leave the lease row (see [`abandon_lease`]).
    abandon: AtomicBool,
    releases: Arc<Releases>,
    runtime: tokio::runtime::Handle,
}

impl Held {
    /// Locks of `keys` held on `client`, released on drop (no lease row yet).
    fn new(store: &PgStore, client: Session, keys: Vec<i64>) -> Self {
        Self {
            client: Some(client),
            keys,
            lease_row: None,
            abandon: AtomicBool::new(false),
            releases: Arc::clone(&store.inner.releases),
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        let keys = std::mem::take(&mut self.keys);
        let row = if self.abandon.load(Ordering::SeqCst) {
            None
        } else {
            self.lease_row.take()
        };
        let releases = Arc::clone(&self.releases);
        releases.begin(&keys);
        let done = Arc::clone(&releases);
        let done_keys = keys.clone();
        let task = async move {
            let mut session = client;
            if let Some(id) = row
                && let Ok(stmt) = session.prepared(DELETE_LEASE).await
            {
                let _ = session.client.execute(&stmt, &[&id]).await;
            }
            // Unlocked: the connection is kept for the next lock; not unlocked (it failed):
            // it is closed, which lets go of its locks all the same.
            if let Ok(stmt) = session.prepared(UNLOCK_ALL).await
                && session.client.execute(&stmt, &[]).await.is_ok()
            {
                done.keep(session);
            }
            done.end(&done_keys);
        };
        // With no runtime left, closing the connection releases the locks all the same.
        drop(self.runtime.spawn(task));
    }
}

/// Simulates the death of a lease's holder (for tests): its session locks go as a dead
/// process's would, but its lease row stays, so the next holder takes it over.
#[cfg(feature = "testkit")]
pub fn abandon_lease(lease: Lease) {
    if let Some(held) = lease.backend_guard().downcast_ref::<Held>() {
        held.abandon.store(true, Ordering::SeqCst);
    }
    drop(lease);
}

const TRY_LOCKS: &str =
    "SELECT coalesce(bool_and(pg_try_advisory_lock(k)), true) FROM unnest($1::int8[]) AS k";
const TRY_SHARED: &str =
    "SELECT coalesce(bool_and(pg_try_advisory_lock_shared(k)), true) FROM unnest($1::int8[]) AS k";
const UNLOCK_ALL: &str = "SELECT pg_advisory_unlock_all()";
const DELETE_LEASE: &str = "DELETE FROM leases WHERE execution_id = $1";

/// Takes every lock of `keys` (exclusive, or shared), all or none, on a connection of its own.
async fn take_locks(
    store: &PgStore,
    keys: &[i64],
    shared: bool,
) -> Result<Option<Session>, StoreError> {
    store.inner.releases.settle(keys).await;
    store.migrate().await?;
    let releases = &store.inner.releases;
    let mut session =
        match crate::pool::take_open(&releases.idle).or_else(|| store.pool().take_idle()) {
            Some(s) => s,
            None => {
                Session::new(crate::pool::connect(store.pool().config(), store.pool().own()).await?)
            }
        };
    let stmt = session
        .prepared(if shared { TRY_SHARED } else { TRY_LOCKS })
        .await
        .map_err(db("taking advisory locks"))?;
    let row = session
        .client
        .query_one(&stmt, &[&keys])
        .await
        .map_err(db("taking advisory locks"))?;
    let all: bool = row.get(0);
    if all {
        return Ok(Some(session));
    }
    // All or none: what was taken is let go before the connection is kept.
    if let Ok(stmt) = session.prepared(UNLOCK_ALL).await
        && session.client.execute(&stmt, &[]).await.is_ok()
    {
        releases.keep(session);
    }
    Ok(None)
}

/// Reads an execution's lease row and writes the new holder's in its place, in one statement
/// (both see the row as it was): `acquired_at` null when the execution does not exist, then
/// the previous holder, its `acquired_at` and `renewed_at` (null when there was no row).
const TAKE_LEASE: &str = "WITH previous AS (
       SELECT holder, acquired_at, renewed_at FROM leases WHERE execution_id = $1::text),
     taken AS (
       INSERT INTO leases (execution_id, holder, lock_key, acquired_at, renewed_at)
       SELECT $1::text, $2::text, $3::bigint, now(), NULL
        WHERE EXISTS (SELECT 1 FROM executions WHERE id = $1::text)
       ON CONFLICT (execution_id) DO UPDATE
         SET holder = excluded.holder, lock_key = excluded.lock_key,
             acquired_at = excluded.acquired_at, renewed_at = NULL
       RETURNING acquired_at)
     SELECT (SELECT acquired_at FROM taken), p.holder, p.acquired_at, p.renewed_at
       FROM (SELECT 1) AS one LEFT JOIN previous p ON true";

fn lease_key(execution: ExecutionId) -> i64 {
    lock_key("orca-lease", &execution.to_string())
}

const HELD_SQL: &str = "EXISTS (SELECT 1 FROM pg_locks l
      WHERE l.locktype = 'advisory' AND l.granted
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND l.classid = ((le.lock_key >> 32) & 4294967295)::oid
        AND l.objid = (le.lock_key & 4294967295)::oid
        AND l.objsubid = 1)";

fn holder_of(text: &str, execution: ExecutionId) -> Result<Holder, StoreError> {
    serde_json::from_str(text).map_err(|e| {
        crate::codec::corrupt("leases", &execution.to_string(), format!("bad holder: {e}"))
    })
}

pub(crate) async fn lease(
    store: &PgStore,
    execution: ExecutionId,
) -> Result<Option<LeaseInfo>, StoreError> {
    store.inner.releases.settle(&[lease_key(execution)]).await;
    let conn = store.conn().await?;
    let row = conn
        .query_opt(
            &format!(
                "SELECT le.holder, le.acquired_at, le.renewed_at, {HELD_SQL}
                 FROM leases le WHERE le.execution_id = $1"
            ),
            &[&execution.to_string()],
        )
        .await
        .map_err(db(format!("reading the lease of {execution}")))?;
    let Some(row) = row else {
        return Ok(None);
    };
    let held: bool = row.get(3);
    Ok(Some(LeaseInfo {
        holder: holder_of(row.get(0), execution)?,
        acquired_at: row.get(1),
        renewed_at: row.get(2),
        stale: !held,
    }))
}

/// Who the lease row names, for the error of a lease found held: only the row (whether its
/// lock is still held — `lease`'s question — needs `pg_locks`, which locks every partition of
/// the server's lock table while it is read: workers finding the lease taken used to slow the
/// leader taking it). `None`: no row (the holder is taking it now, or claimers hold it shared).
async fn lease_holder(
    store: &PgStore,
    execution: ExecutionId,
) -> Result<Option<Holder>, StoreError> {
    let mut conn = store.conn().await?;
    let rows = conn
        .query_prepared(
            "SELECT holder FROM leases WHERE execution_id = $1",
            &[&execution.to_string()],
        )
        .await
        .map_err(db(format!("reading the lease of {execution}")))?;
    rows.first()
        .map(|r| holder_of(r.get(0), execution))
        .transpose()
}

pub(crate) async fn acquire_lease(
    store: &PgStore,
    execution: ExecutionId,
    holder: &Holder,
) -> Result<Lease, StoreError> {
    let key = lease_key(execution);
    let id = execution.to_string();
    let Some(client) = take_locks(store, &[key], false).await? else {
        let current = lease_holder(store, execution).await?;
        return Err(StoreError::LeaseHeld {
            execution,
            holder: current.unwrap_or_else(|| Holder {
                pid: 0,
                host: "unknown (taking the lease now)".into(),
                token: String::new(),
            }),
        });
    };
    // From here the lock is ours: dropping `held` on any error releases it.
    let mut held = Held::new(store, client, vec![key]);
    let session = held
        .client
        .as_mut()
        .ok_or_else(|| StoreError::backend("taking a lease", "the lease connection is gone"))?;
    let holder_text = crate::codec::encode(holder, "a lease holder")?;
    // One round trip: the lease row as it was (whoever it names is gone: we hold the lock)
    // and ours written in its place — none if the execution does not exist.
    let recording = format!("recording the lease of {execution}");
    let stmt = session
        .prepared(TAKE_LEASE)
        .await
        .map_err(db(recording.clone()))?;
    let row = session
        .client
        .query_one(&stmt, &[&id, &holder_text, &key])
        .await
        .map_err(db(recording.clone()))?;
    let column = |e| db(recording.clone())(e);
    let Some(acquired_at) = row
        .try_get::<_, Option<OffsetDateTime>>(0)
        .map_err(column)?
    else {
        return Err(StoreError::NotFound {
            what: common::exec_what(execution),
        });
    };
    let took_over = match row.try_get::<_, Option<&str>>(1).map_err(column)? {
        Some(text) => Some(LeaseInfo {
            holder: holder_of(text, execution)?,
            acquired_at: row.try_get(2).map_err(column)?,
            renewed_at: row.try_get(3).map_err(column)?,
            stale: true,
        }),
        None => None,
    };
    held.lease_row = Some(id);
    let info = LeaseInfo {
        holder: holder.clone(),
        acquired_at,
        stale: false,
        renewed_at: None,
    };
    Ok(Lease::new(execution, info, Box::new(held), took_over))
}

/// A shared hold on an execution's lease lock (workers claiming its tasks, ADR 0026): no row
/// is written; it goes with its connection like the exclusive lease.
pub(crate) async fn acquire_shared_lease(
    store: &PgStore,
    execution: ExecutionId,
    holder: &Holder,
) -> Result<Option<Lease>, StoreError> {
    let key = lease_key(execution);
    let Some(client) = take_locks(store, &[key], true).await? else {
        return Ok(None);
    };
    let held = Held::new(store, client, vec![key]);
    let info = LeaseInfo {
        holder: holder.clone(),
        acquired_at: OffsetDateTime::now_utc(),
        stale: false,
        renewed_at: None,
    };
    Ok(Some(Lease::new(execution, info, Box::new(held), None)))
}

/// `false` once the connection holding `lease`'s lock is closed (the lock went with it).
pub(crate) fn lease_held(lease: &Lease) -> bool {
    lease
        .backend_guard()
        .downcast_ref::<Held>()
        .is_none_or(|held| held.client.as_ref().is_some_and(|s| !s.is_closed()))
}

pub(crate) async fn renew_lease(lease: &Lease) -> Result<(), StoreError> {
    let Some(held) = lease.backend_guard().downcast_ref::<Held>() else {
        return Err(StoreError::Invalid(
            "this lease was not taken from a postgres store".into(),
        ));
    };
    let Some(client) = held.client.as_ref().map(|s| &s.client) else {
        return Ok(());
    };
    let execution = lease.execution();
    client
        .execute(
            "UPDATE leases SET renewed_at = now() WHERE execution_id = $1",
            &[&execution.to_string()],
        )
        .await
        .map_err(db(format!("renewing the lease of {execution}")))?;
    Ok(())
}

pub(crate) async fn try_lock_resources(
    store: &PgStore,
    names: &[String],
    _holder: &Holder,
) -> Result<Option<ResourceGuard>, StoreError> {
    let mut unique: Vec<String> = names.to_vec();
    unique.sort();
    unique.dedup();
    let keys: Vec<i64> = unique
        .iter()
        .map(|n| lock_key("orca-resource", n))
        .collect();
    let Some(client) = take_locks(store, &keys, false).await? else {
        return Ok(None);
    };
    let held = Held::new(store, client, keys);
    Ok(Some(ResourceGuard::new(unique, Box::new(held))))
}

/// Renews the leases of the running tasks `holder` claimed (by its token).
pub(crate) async fn renew_task_leases(store: &PgStore, holder: &Holder) -> Result<(), StoreError> {
    let secs = store.inner.task_lease.as_secs_f64();
    let mut conn = store.conn().await?;
    let stmt = conn
        .prepared(
            "UPDATE task_leases SET expires_at = now() + make_interval(secs => $2)
             WHERE token = $1 AND expires_at >= now()",
        )
        .await
        .map_err(db("renewing task leases"))?;
    conn.execute(&stmt, &[&holder.token, &secs])
        .await
        .map_err(db("renewing task leases"))?;
    Ok(())
}

/// The running tasks of `execution` whose lease expired (the database's clock), with their
/// revisions.
pub(crate) async fn expired_tasks(
    store: &PgStore,
    execution: ExecutionId,
) -> Result<Vec<ExpiredTask>, StoreError> {
    let mut conn = store.conn().await?;
    let stmt = conn
        .prepared(
            "SELECT t.step_id, t.revision FROM tasks t
               JOIN task_leases l ON l.execution_id = t.execution_id AND l.step_id = t.step_id
              WHERE t.execution_id = $1 AND t.status = 'running' AND l.expires_at < now()
              ORDER BY t.ord",
        )
        .await
        .map_err(db("reading expired task leases"))?;
    let key = execution.to_string();
    let rows = conn
        .query(&stmt, &[&key])
        .await
        .map_err(db(format!("reading the task leases of {execution}")))?;
    rows.iter()
        .map(|r| {
            let step: String = r.get(0);
            let revision: i64 = r.get(1);
            let step = StepId::parse(&step).map_err(|e| {
                crate::codec::corrupt("task_leases", &key, format!("bad step id {step:?}: {e}"))
            })?;
            let revision = u64::try_from(revision).map(Revision).map_err(|_| {
                crate::codec::corrupt("tasks", &key, format!("step {step}: revision {revision}"))
            })?;
            Ok(ExpiredTask { step, revision })
        })
        .collect()
}
