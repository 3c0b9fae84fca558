//! Leases and resource locks: session advisory locks on a connection of their own, so they go
//! when their holder's connection does (its process died, its host is gone once TCP keepalive
//! notices). The lease row records who holds it and when (the database's clock).
//!
//! A guard is released when dropped. The release runs on the runtime (unlock, then close the
//! connection); until it has finished, this store's own next attempt on the same lock waits
//! for it (so dropping a guard and locking again at once behaves as with the file store).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use orca_core::{ExecutionId, Holder};
use orca_store::common;
use orca_store::{Lease, LeaseInfo, ResourceGuard, StoreError};
use time::OffsetDateTime;
use tokio::sync::Notify;
use tokio_postgres::Client;

use crate::{PgStore, db};

/// Releases under way in this process, by lock key.
#[derive(Debug, Default)]
pub(crate) struct Releases {
    pending: Mutex<HashMap<i64, usize>>,
    done: Notify,
}

impl Releases {
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
    client: Option<Client>,
    keys: Vec<i64>,
    /// The lease row to delete on a clean release.
    lease_row: Option<String>,
    /// Simulated crash: unlock, leave the lease row (see [`abandon_lease`]).
    abandon: AtomicBool,
    releases: Arc<Releases>,
    runtime: tokio::runtime::Handle,
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
            if let Some(id) = row {
                let _ = client
                    .execute("DELETE FROM leases WHERE execution_id = $1", &[&id])
                    .await;
            }
            let _ = client.execute("SELECT pg_advisory_unlock_all()", &[]).await;
            drop(client);
            done.end(&done_keys);
        };
        // With no runtime left, closing the connection releases the locks all the same.
        drop(self.runtime.spawn(task));
    }
}

/// Simulates the death of a lease's holder (for tests): its session locks go as a dead
/// process's would, but its lease row stays, so the next holder takes it over.
pub fn abandon_lease(lease: Lease) {
    if let Some(held) = lease.backend_guard().downcast_ref::<Held>() {
        held.abandon.store(true, Ordering::SeqCst);
    }
    drop(lease);
}

async fn take_locks(store: &PgStore, keys: &[i64]) -> Result<Option<Client>, StoreError> {
    store.inner.releases.settle(keys).await;
    store.migrate().await?;
    let client = crate::pool::connect(store.pool().config()).await?;
    let row = client
        .query_one(
            "SELECT coalesce(bool_and(pg_try_advisory_lock(k)), true) FROM unnest($1::int8[]) AS k",
            &[&keys],
        )
        .await
        .map_err(db("taking advisory locks"))?;
    let all: bool = row.get(0);
    if all {
        return Ok(Some(client));
    }
    // All or none: what was taken goes with the connection, explicitly first.
    let _ = client.execute("SELECT pg_advisory_unlock_all()", &[]).await;
    Ok(None)
}

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

pub(crate) async fn acquire_lease(
    store: &PgStore,
    execution: ExecutionId,
    holder: &Holder,
) -> Result<Lease, StoreError> {
    let key = lease_key(execution);
    let id = execution.to_string();
    let Some(client) = take_locks(store, &[key]).await? else {
        let current = lease(store, execution).await?;
        return Err(StoreError::LeaseHeld {
            execution,
            holder: current.map_or_else(
                || Holder {
                    pid: 0,
                    host: "unknown (taking the lease now)".into(),
                    token: String::new(),
                },
                |l| l.holder,
            ),
        });
    };
    // From here the lock is ours: dropping `held` on any error releases it.
    let mut held = Held {
        client: Some(client),
        keys: vec![key],
        lease_row: None,
        abandon: AtomicBool::new(false),
        releases: Arc::clone(&store.inner.releases),
        runtime: tokio::runtime::Handle::current(),
    };
    let client = held
        .client
        .as_ref()
        .ok_or_else(|| StoreError::backend("taking a lease", "the lease connection is gone"))?;
    let exists = client
        .query_opt("SELECT 1 FROM executions WHERE id = $1", &[&id])
        .await
        .map_err(db(format!("reading execution {execution}")))?
        .is_some();
    if !exists {
        return Err(StoreError::NotFound {
            what: common::exec_what(execution),
        });
    }
    let previous = client
        .query_opt(
            "SELECT holder, acquired_at, renewed_at FROM leases WHERE execution_id = $1",
            &[&id],
        )
        .await
        .map_err(db(format!("reading the lease of {execution}")))?;
    // We hold the lock, so whoever the row names is gone.
    let took_over = match previous {
        Some(r) => Some(LeaseInfo {
            holder: holder_of(r.get(0), execution)?,
            acquired_at: r.get(1),
            renewed_at: r.get(2),
            stale: true,
        }),
        None => None,
    };
    let holder_text = crate::codec::encode(holder, "a lease holder")?;
    let row = client
        .query_one(
            "INSERT INTO leases (execution_id, holder, lock_key, acquired_at, renewed_at)
             VALUES ($1, $2, $3, now(), NULL)
             ON CONFLICT (execution_id) DO UPDATE
               SET holder = excluded.holder, lock_key = excluded.lock_key,
                   acquired_at = excluded.acquired_at, renewed_at = NULL
             RETURNING acquired_at",
            &[&id, &holder_text, &key],
        )
        .await
        .map_err(db(format!("recording the lease of {execution}")))?;
    let acquired_at: OffsetDateTime = row.get(0);
    held.lease_row = Some(id);
    let info = LeaseInfo {
        holder: holder.clone(),
        acquired_at,
        stale: false,
        renewed_at: None,
    };
    Ok(Lease::new(execution, info, Box::new(held), took_over))
}

pub(crate) async fn renew_lease(lease: &Lease) -> Result<(), StoreError> {
    let Some(held) = lease.backend_guard().downcast_ref::<Held>() else {
        return Err(StoreError::Invalid(
            "this lease was not taken from a postgres store".into(),
        ));
    };
    let Some(client) = held.client.as_ref() else {
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
    let Some(client) = take_locks(store, &keys).await? else {
        return Ok(None);
    };
    let held = Held {
        client: Some(client),
        keys,
        lease_row: None,
        abandon: AtomicBool::new(false),
        releases: Arc::clone(&store.inner.releases),
        runtime: tokio::runtime::Handle::current(),
    };
    Ok(Some(ResourceGuard::new(unique, Box::new(held))))
}
