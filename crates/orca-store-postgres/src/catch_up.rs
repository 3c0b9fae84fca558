//! A claiming worker's catch-up: the tasks of an execution that changed since it last looked
//! (ADR 0060). Each task row carries the id of the transaction that last wrote it
//! (`changed_xid`, set by a trigger on every update). A look runs under one snapshot and
//! returns that snapshot's `xmin` as the cursor: every transaction with a smaller id had
//! finished when the look was taken, so its writes were visible then — returned, or already
//! known. Whatever was written after (by a transaction still running then, or begun since) has
//! an id of at least the cursor, and the next look finds it through the index
//! `(execution_id, changed_xid)` without visiting the other tasks. (An ordinary sequence
//! would not do: a number drawn before another can commit after it.)

use orca_core::{ExecutionId, Task};
use orca_store::{ChangeCursor, Revision, StoreError, Versioned};

use crate::codec::{db_revision, decode};
use crate::{PgStore, db};

/// Every task whose revision differs from `known`, and the cursor of this look.
const ALL: &str = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text, t.ord, t.step_id, \
                          t.revision, t.doc \
                     FROM (SELECT 1) one \
                     LEFT JOIN tasks t ON t.execution_id = $1 \
                      AND t.revision IS DISTINCT FROM ($2::int8[])[t.ord + 1] \
                    ORDER BY t.ord";

/// The same among the tasks written by transactions from `$3` on.
const SINCE: &str = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text, t.ord, t.step_id, \
                            t.revision, t.doc \
                       FROM (SELECT 1) one \
                       LEFT JOIN tasks t ON t.execution_id = $1 \
                        AND t.changed_xid >= $3::text::xid8 \
                        AND t.revision IS DISTINCT FROM ($2::int8[])[t.ord + 1] \
                      ORDER BY t.ord";

/// Type of the rows answered: the cursor, then a task's position, id, revision and document
/// (all null when nothing changed).
pub(crate) type Changed = (Vec<(usize, Versioned<Task>)>, Option<ChangeCursor>);

pub(crate) async fn changed_since(
    store: &PgStore,
    id: ExecutionId,
    known: &[Revision],
    since: Option<ChangeCursor>,
) -> Result<Changed, StoreError> {
    let key = id.to_string();
    let known: Vec<i64> = known.iter().map(|r| db_revision(*r)).collect();
    let what = || format!("reading the tasks of {id}");
    let mut conn = store.conn().await?;
    let rows = match since {
        None => {
            let stmt = conn.prepared(ALL).await.map_err(db(what()))?;
            conn.query(&stmt, &[&key, &known]).await
        }
        Some(ChangeCursor(from)) => {
            let stmt = conn.prepared(SINCE).await.map_err(db(what()))?;
            conn.query(&stmt, &[&key, &known, &from.to_string()]).await
        }
    }
    .map_err(db(what()))?;
    let mut cursor = None;
    let mut changed = Vec::with_capacity(rows.len());
    for r in &rows {
        let xmin: String = r.get(0);
        cursor = xmin.parse::<u64>().ok().map(ChangeCursor);
        let Some(ord) = r.get::<_, Option<i32>>(1) else {
            continue;
        };
        let step: String = r.get(2);
        let task = decode(
            "tasks",
            &format!("{key}/{step}"),
            r.get(4),
            r.get(3),
            Task::from_json,
        )?;
        changed.push((usize::try_from(ord).unwrap_or(usize::MAX), task));
    }
    Ok((changed, cursor))
}
