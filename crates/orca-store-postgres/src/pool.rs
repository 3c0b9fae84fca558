//! A small connection pool: idle connections are reused, closed ones are dropped and replaced
//! by a new connection on the next use (so a restarted database is reconnected to). Each
//! connection keeps the statements it prepared ([`Conn::prepared`]): a hot statement is parsed
//! once per connection, then costs one round trip per use (ADR 0026).
//!
//! Every connection of the store — pooled, lock-holding or listening — is opened by [`open`].

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, PoisonError};

use orca_store::StoreError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio_postgres::{AsyncMessage, Client, Statement};

use crate::tls::Target;

/// The server processes (backend pids) of this store's open writing connections: a
/// notification one of them sent is this store's own write (see [`Forward::others_only`]).
#[derive(Debug, Default)]
pub(crate) struct Backends(Mutex<std::collections::HashSet<i32>>);

impl Backends {
    fn set(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<i32>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn contains(&self, pid: i32) -> bool {
        self.set().contains(&pid)
    }
}

/// Where a connection's notifications go: every one, or (`others_only`) those another store's
/// connection sent on `orca_tasks` — the store's own task writes are known to its runner
/// already, and a worker that read them back found nothing new at a fifth of the database's
/// time per task.
pub(crate) struct Forward {
    pub(crate) to: mpsc::Sender<String>,
    pub(crate) others_only: Option<Arc<Backends>>,
}

/// Connections open at once through the pool (lock holders and listeners are apart: see
/// `locks` and `notify`).
pub(crate) const POOL_SIZE: usize = 16;

/// A connection with the statements it has prepared.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) client: Client,
    statements: HashMap<&'static str, Statement>,
}

impl Session {
    pub(crate) fn new(client: Client) -> Self {
        Self {
            client,
            statements: HashMap::new(),
        }
    }

    /// `sql` prepared on this connection (once; later calls reuse it).
    ///
    /// # Errors
    ///
    /// The database refused the statement or the connection failed.
    pub(crate) async fn prepared(
        &mut self,
        sql: &'static str,
    ) -> Result<Statement, tokio_postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql).await?;
        self.statements.insert(sql, s.clone());
        Ok(s)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
}

/// Idle connections the pool keeps ready: a process that runs anything needs two at once
/// (its execution's lease holds one of its own, taken from the idle ones, while reads and
/// writes go on), and one made ahead is not made on the way of a run (~3 ms each on a local
/// server, and the server's CPU).
pub(crate) const MIN_IDLE: usize = 2;

#[derive(Debug)]
pub(crate) struct Pool {
    config: Target,
    idle: Arc<Mutex<Vec<Session>>>,
    permits: Arc<Semaphore>,
    /// Connections being opened in the background (see [`Pool::replenish`]).
    opening: Arc<std::sync::atomic::AtomicUsize>,
    /// The server processes of this store's writing connections (pooled and lock holders').
    own: Arc<Backends>,
}

/// A pooled connection; goes back to the pool when dropped, unless it was closed or may be
/// inside a transaction (see [`Conn::set_dirty`]).
#[derive(Debug)]
pub(crate) struct Conn<'a> {
    session: Option<Session>,
    pool: &'a Pool,
    _permit: OwnedSemaphorePermit,
    dirty: bool,
}

impl Pool {
    pub(crate) fn new(config: Target) -> Self {
        Self {
            config,
            idle: Arc::default(),
            permits: Arc::new(Semaphore::new(POOL_SIZE)),
            opening: Arc::default(),
            own: Arc::default(),
        }
    }

    pub(crate) fn config(&self) -> &Target {
        &self.config
    }

    pub(crate) fn own(&self) -> &Arc<Backends> {
        &self.own
    }

    /// An idle connection, still open, taken out of the pool for good (a lock holder's: a
    /// connection already made is ~3 ms sooner than a new one). The pool opens another when
    /// it needs one.
    pub(crate) fn take_idle(&self) -> Option<Session> {
        let taken = take_open(&self.idle);
        self.replenish();
        taken
    }

    /// Opens a connection in the background when fewer than [`MIN_IDLE`] are idle or being
    /// opened. Best effort: a failure is met again, and reported, by the next use.
    pub(crate) fn replenish(&self) {
        use std::sync::atomic::Ordering;
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        if idle + self.opening.load(Ordering::SeqCst) >= MIN_IDLE {
            return;
        }
        self.opening.fetch_add(1, Ordering::SeqCst);
        let (idle, opening, config, own) = (
            Arc::clone(&self.idle),
            Arc::clone(&self.opening),
            self.config.clone(),
            Arc::clone(&self.own),
        );
        tokio::spawn(async move {
            if let Ok(client) = connect(&config, &own).await {
                idle.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Session::new(client));
            }
            opening.fetch_sub(1, Ordering::SeqCst);
        });
    }

    /// A connection: an idle one still open, or a new one.
    pub(crate) async fn get(&self) -> Result<Conn<'_>, StoreError> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|e| StoreError::backend("waiting for a database connection", e))?;
        let reused = take_open(&self.idle);
        self.replenish();
        let session = match reused {
            Some(s) => s,
            None => Session::new(connect(&self.config, &self.own).await?),
        };
        Ok(Conn {
            session: Some(session),
            pool: self,
            _permit: permit,
            dirty: false,
        })
    }
}

/// The last idle session of `idle` that is still open (closed ones are dropped).
pub(crate) fn take_open(idle: &Mutex<Vec<Session>>) -> Option<Session> {
    let mut idle = idle.lock().unwrap_or_else(PoisonError::into_inner);
    while let Some(s) = idle.pop() {
        if !s.is_closed() {
            return Some(s);
        }
    }
    None
}

/// Opens a connection (the one place the store connects): its driver runs on the runtime and
/// forwards notifications as `forward` says, if given, until the connection ends or nobody
/// receives them any more. The receiver fires when the driver has ended. A writing
/// connection (`own`) has its server process counted among the store's while it is open.
pub(crate) async fn open(
    config: &Target,
    what: &str,
    forward: Option<Forward>,
    own: Option<&Arc<Backends>>,
) -> Result<(Client, oneshot::Receiver<()>), StoreError> {
    let (client, mut connection) = config.connect(what).await?;
    let (ended, on_end) = oneshot::channel();
    let pid = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let (counted, owner) = (Arc::clone(&pid), own.map(Arc::clone));
    tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    let Some(f) = &forward else { continue };
                    if f.others_only.as_ref().is_some_and(|own| {
                        n.channel() == "orca_tasks" && own.contains(n.process_id())
                    }) {
                        continue;
                    }
                    // A full queue means the listener is behind: it re-reads anyway.
                    if let Err(mpsc::error::TrySendError::Closed(_)) =
                        f.to.try_send(n.payload().to_owned())
                    {
                        break;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "postgres connection ended");
                    break;
                }
            }
        }
        if let Some(own) = owner {
            own.set()
                .remove(&counted.load(std::sync::atomic::Ordering::SeqCst));
        }
        let _ = ended.send(());
    });
    if let Some(own) = own {
        // Best effort: a connection not counted only wakes its own store once more.
        if let Ok(row) = client.query_one("SELECT pg_backend_pid()", &[]).await
            && let Ok(p) = row.try_get::<_, i32>(0)
        {
            pid.store(p, std::sync::atomic::Ordering::SeqCst);
            own.set().insert(p);
            // Ended meanwhile: its driver may have looked before the pid was known.
            if client.is_closed() {
                own.set().remove(&p);
            }
        }
    }
    Ok((client, on_end))
}

/// Opens a writing connection of the store's own (not pooled, or for the pool).
pub(crate) async fn connect(config: &Target, own: &Arc<Backends>) -> Result<Client, StoreError> {
    open(config, "connecting to the postgres store", None, Some(own))
        .await
        .map(|(client, _)| client)
}

impl Conn<'_> {
    /// `sql` prepared on this connection (see [`Session::prepared`]).
    pub(crate) async fn prepared(
        &mut self,
        sql: &'static str,
    ) -> Result<Statement, tokio_postgres::Error> {
        match self.session.as_mut() {
            Some(s) => s.prepared(sql).await,
            None => unreachable!("a pooled connection holds its session until dropped"),
        }
    }
}

impl Conn<'_> {
    /// Runs `sql`, prepared on this connection once, with `params`: its rows.
    pub(crate) async fn query_prepared(
        &mut self,
        sql: &'static str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
        let stmt = self.prepared(sql).await?;
        self.query(&stmt, params).await
    }

    /// `true` while a transaction this connection began by hand (`BEGIN` sent as a statement)
    /// may still be open: dropped then (an error, a cancelled future), the connection is closed
    /// instead of going back to the pool, where the next user would find itself inside it.
    pub(crate) const fn set_dirty(&mut self, dirty: bool) {
        self.dirty = dirty;
    }
}

impl Deref for Conn<'_> {
    type Target = Client;

    fn deref(&self) -> &Client {
        // Only `None` after drop.
        &self
            .session
            .as_ref()
            .unwrap_or_else(|| unreachable!())
            .client
    }
}

impl DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self
            .session
            .as_mut()
            .unwrap_or_else(|| unreachable!())
            .client
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.session.take()
            && !s.is_closed()
            && !self.dirty
        {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(s);
        }
    }
}
