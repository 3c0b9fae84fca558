//! LISTEN/NOTIFY: the store notifies `orca_executions` when an execution is created or
//! changes stage, and `orca_tasks` when a task changes; workers (executions) and watchers
//! (both, filtered by id) listen instead of polling (they still poll, slowly, as a fallback: a
//! notification sent while a listener reconnects is lost).

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
        self.migrate().await?;
        let (tx, rx) = mpsc::channel(1024);
        // The connection lives while the driver runs: until the receiver goes (a send fails)
        // or the connection ends.
        let (client, ended) = crate::pool::open(self.pool().config(), Some(tx))
            .await
            .map_err(db("connecting to listen for notifications"))?;
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
