//! LISTEN/NOTIFY: the store notifies `orca_executions` when an execution is created or
//! changes stage, and `orca_tasks` when a task changes; workers (executions) and watchers
//! (both, filtered by id) listen instead of polling (they still poll, slowly, as a fallback: a
//! notification sent while a listener reconnects is lost).

use std::sync::Arc;

use orca_store::StoreError;
use tokio::sync::mpsc;

use crate::{PgStore, db};

/// The channels the store notifies.
pub const CHANNELS: &[&str] = &["orca_executions", "orca_tasks"];

impl PgStore {
    /// Listens on `channels` (of [`CHANNELS`]): every notification's payload (an execution
    /// id) arrives on the receiver. The receiver ends when the connection does (reconnect by
    /// calling again).
    ///
    /// # Errors
    ///
    /// The database cannot be reached.
    pub async fn listen(&self, channels: &[&str]) -> Result<mpsc::Receiver<String>, StoreError> {
        self.listen_with(channels, false).await
    }

    /// [`PgStore::listen`], without the task notifications this store's own writes sent: for
    /// a worker, whose runner knows its own writes (reading them back cost a catch-up read a
    /// notification; one worker went from ~1,000 to ~1,400 tasks/s without them).
    ///
    /// # Errors
    ///
    /// The database cannot be reached.
    pub async fn listen_to_others(
        &self,
        channels: &[&str],
    ) -> Result<mpsc::Receiver<String>, StoreError> {
        self.listen_with(channels, true).await
    }

    async fn listen_with(
        &self,
        channels: &[&str],
        others_only: bool,
    ) -> Result<mpsc::Receiver<String>, StoreError> {
        self.migrate().await?;
        let (tx, rx) = mpsc::channel(1024);
        let forward = crate::pool::Forward {
            to: tx,
            others_only: others_only.then(|| Arc::clone(self.pool().own())),
        };
        // The connection lives while the driver runs: until the receiver goes (a send fails)
        // or the connection ends.
        let (client, ended) = crate::pool::open(
            self.pool().config(),
            "connecting to listen for notifications",
            Some(forward),
            None,
        )
        .await?;
        let listen: String = channels
            .iter()
            .filter(|c| CHANNELS.contains(c))
            .map(|c| format!("LISTEN {c};"))
            .collect();
        client
            .batch_execute(&listen)
            .await
            .map_err(db("listening for notifications"))?;
        // Dropping the client would end the connection: it is kept until the driver ends
        // (the receiver was dropped, or the connection ended).
        tokio::spawn(async move {
            let _ = ended.await;
            drop(client);
        });
        Ok(rx)
    }
}
