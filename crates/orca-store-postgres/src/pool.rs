//! A small connection pool: idle connections are reused, closed ones are dropped and replaced
//! by a new connection on the next use (so a restarted database is reconnected to).

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, PoisonError};

use orca_store::StoreError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::Client;

use crate::tls::Target;

/// Connections open at once through the pool (leases and resource locks have their own).
pub(crate) const POOL_SIZE: usize = 16;

#[derive(Debug)]
pub(crate) struct Pool {
    config: Target,
    idle: Mutex<Vec<Client>>,
    permits: Arc<Semaphore>,
}

/// A pooled connection; goes back to the pool when dropped, unless it was closed.
#[derive(Debug)]
pub(crate) struct Conn<'a> {
    client: Option<Client>,
    pool: &'a Pool,
    _permit: OwnedSemaphorePermit,
}

impl Pool {
    pub(crate) fn new(config: Target) -> Self {
        Self {
            config,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(POOL_SIZE)),
        }
    }

    pub(crate) fn config(&self) -> &Target {
        &self.config
    }

    /// A connection: an idle one still open, or a new one.
    pub(crate) async fn get(&self) -> Result<Conn<'_>, StoreError> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|e| StoreError::backend("waiting for a database connection", e))?;
        let reused = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            let mut found = None;
            while let Some(c) = idle.pop() {
                if !c.is_closed() {
                    found = Some(c);
                    break;
                }
            }
            found
        };
        let client = match reused {
            Some(c) => c,
            None => connect(&self.config).await?,
        };
        Ok(Conn {
            client: Some(client),
            pool: self,
            _permit: permit,
        })
    }
}

/// Opens a connection of its own (not pooled), its driver task spawned on the runtime.
pub(crate) async fn connect(config: &Target) -> Result<Client, StoreError> {
    let (client, connection) = config.connect("connecting to the postgres store").await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "postgres connection ended");
        }
    });
    Ok(client)
}

impl Deref for Conn<'_> {
    type Target = Client;

    fn deref(&self) -> &Client {
        // Only `None` after drop.
        self.client.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client.as_mut().unwrap_or_else(|| unreachable!())
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.client.take()
            && !c.is_closed()
        {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(c);
        }
    }
}
