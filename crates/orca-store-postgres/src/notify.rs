//! LISTEN/NOTIFY: the store notifies `orca_executions` when an execution is created or
//! changes stage, and `orca_tasks` when a task changes; workers (executions) and watchers
//! (both, filtered by id) listen instead of polling (they still poll, slowly, as a fallback: a
//! notification sent while a listener reconnects is lost).

use std::future::poll_fn;

use orca_store::StoreError;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

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
        let (client, mut connection) = self
            .pool()
            .config()
            .connect("connecting to listen for notifications")
            .await?;
        let (tx, rx) = mpsc::channel(1024);
        let client = std::sync::Arc::new(client);
        let kept = std::sync::Arc::clone(&client);
        tokio::spawn(async move {
            // Holds the client while the connection is polled; both go when the receiver does.
            let _kept = kept;
            while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        // A full queue means the listener is behind: it re-reads anyway.
                        if let Err(mpsc::error::TrySendError::Closed(_)) =
                            tx.try_send(n.payload().to_owned())
                        {
                            break;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "notification connection ended");
                        break;
                    }
                }
            }
        });
        let listen: String = channels
            .iter()
            .filter(|c| CHANNELS.contains(c))
            .map(|c| format!("LISTEN {c};"))
            .collect();
        client
            .batch_execute(&listen)
            .await
            .map_err(db("listening for notifications"))?;
        Ok(rx)
    }
}
