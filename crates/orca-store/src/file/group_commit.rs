//! Group commit: concurrent writers to one durable file (an audit log, a write-ahead log) queue
//! their records; the first one that finds nobody writing becomes the writer and commits
//! everything queued with one write and one fsync, so N concurrent appends cost about two
//! fsyncs instead of N. Every caller returns only once its own record is on disk (or the
//! batch failed: then every caller of the batch gets the error).

use std::collections::HashMap;
use std::hash::Hash;
use std::io;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The longest a writer waits to gather as many requests as the largest recent batch held.
const GATHER: Duration = Duration::from_millis(2);

/// How long a large batch counts as "recent".
const PEAK_FOR: Duration = Duration::from_secs(1);

use crate::error::StoreError;

/// One queue per key (per file).
#[derive(Debug)]
pub(super) struct GroupCommit<K, Req, Resp> {
    queues: Mutex<HashMap<K, Arc<Queue<Req, Resp>>>>,
}

impl<K, Req, Resp> Default for GroupCommit<K, Req, Resp> {
    fn default() -> Self {
        Self {
            queues: Mutex::new(HashMap::new()),
        }
    }
}

#[derive(Debug)]
struct Queue<Req, Resp> {
    state: Mutex<State<Req, Resp>>,
    written: Condvar,
}

#[derive(Debug)]
struct State<Req, Resp> {
    next_ticket: u64,
    pending: Vec<(u64, Req)>,
    results: HashMap<u64, Result<Resp, StoreError>>,
    writing: bool,
    /// The largest batch seen lately (and when): the concurrency of this file's writers.
    peak: usize,
    peak_at: Option<Instant>,
}

impl<Req, Resp> Default for Queue<Req, Resp> {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                next_ticket: 0,
                pending: Vec::new(),
                results: HashMap::new(),
                writing: false,
                peak: 0,
                peak_at: None,
            }),
            written: Condvar::new(),
        }
    }
}

impl<K: Eq + Hash + Copy, Req, Resp> GroupCommit<K, Req, Resp> {
    /// Queues `request` for `key` and returns its result. `write` commits a batch, in queue
    /// order, all or nothing, and returns one result per request (it is run by whichever
    /// caller becomes the writer, for everything queued at that moment).
    pub(super) fn submit(
        &self,
        key: K,
        request: Req,
        what: &str,
        write: impl Fn(Vec<Req>) -> Result<Vec<Resp>, StoreError>,
    ) -> Result<Resp, StoreError> {
        let queue = Arc::clone(
            self.queues
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(key)
                .or_default(),
        );
        let result = {
            let mut state = queue.state.lock().unwrap_or_else(PoisonError::into_inner);
            let ticket = state.next_ticket;
            state.next_ticket += 1;
            state.pending.push((ticket, request));
            // A writer gathering a batch may be waiting for this request.
            queue.written.notify_all();
            loop {
                if let Some(result) = state.results.remove(&ticket) {
                    break result;
                }
                if state.writing {
                    state = queue
                        .written
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                    continue;
                }
                // Nobody is writing: write everything queued, ours included. If a recent batch
                // held several requests (parallel writers), wait a moment for as many: their
                // requests usually arrive within a millisecond of each other, and one fsync
                // for all of them costs far less than the window.
                state.writing = true;
                let now = Instant::now();
                if state
                    .peak_at
                    .is_none_or(|at| now.duration_since(at) > PEAK_FOR)
                {
                    state.peak = 0;
                }
                let deadline = now + GATHER;
                while state.pending.len() < state.peak {
                    let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                        break;
                    };
                    state = queue
                        .written
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                let batch = std::mem::take(&mut state.pending);
                if batch.len() >= state.peak {
                    state.peak = batch.len();
                    state.peak_at = Some(Instant::now());
                }
                drop(state);
                let tickets: Vec<u64> = batch.iter().map(|(t, _)| *t).collect();
                let requests = batch.into_iter().map(|(_, r)| r).collect();
                // A panic must not leave `writing` set (every later caller would wait forever).
                let outcome =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write(requests)))
                        .unwrap_or_else(|_| {
                            Err(StoreError::backend(
                                what.to_owned(),
                                io::Error::other("the writer panicked"),
                            ))
                        });
                state = queue.state.lock().unwrap_or_else(PoisonError::into_inner);
                match outcome {
                    Ok(responses) if responses.len() == tickets.len() => state
                        .results
                        .extend(tickets.into_iter().zip(responses.into_iter().map(Ok))),
                    Ok(_) => {
                        let e = StoreError::backend(
                            what.to_owned(),
                            io::Error::other("a batch returned the wrong number of results"),
                        );
                        for t in tickets {
                            state.results.insert(t, Err(replicate(&e, what)));
                        }
                    }
                    Err(e) => {
                        for t in tickets {
                            state.results.insert(t, Err(replicate(&e, what)));
                        }
                    }
                }
                state.writing = false;
                queue.written.notify_all();
            }
        };
        // Forget the queue when nobody else holds it (new holders take it under the map lock),
        // unless it saw parallel writers: then it keeps how many, for the next batch.
        let parallel = queue
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .peak
            > 1;
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        if !parallel && Arc::strong_count(&queue) == 2 {
            queues.remove(&key);
        }
        result
    }
}

/// The same error again, for every caller of a failed group commit.
fn replicate(e: &StoreError, what: &str) -> StoreError {
    match e {
        StoreError::Immutable(m) => StoreError::Immutable(m.clone()),
        StoreError::Invalid(m) => StoreError::Invalid(m.clone()),
        StoreError::Tampered { path, message } => StoreError::Tampered {
            path: path.clone(),
            message: message.clone(),
        },
        StoreError::Corrupt { path, message } => StoreError::Corrupt {
            path: path.clone(),
            message: message.clone(),
        },
        StoreError::Backend { context, source } => {
            let kind = source
                .downcast_ref::<io::Error>()
                .map_or(io::ErrorKind::Other, io::Error::kind);
            StoreError::backend(context.clone(), io::Error::new(kind, source.to_string()))
        }
        other => StoreError::backend(what.to_owned(), io::Error::other(other.to_string())),
    }
}
