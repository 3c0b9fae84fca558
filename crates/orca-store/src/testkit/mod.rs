//! Test support for store backends (the `testkit` feature): the conformance suite every
//! backend must pass ([`checks`], [`crate::store_conformance!`]), the fixtures it uses, and the
//! differential test's operations ([`differential`]). A backend crate enables the feature in
//! its dev-dependencies and instantiates the suite in its own tests; no store crate depends on
//! another for its tests.

pub mod checks;
pub mod differential;
pub mod fixtures;

use orca_core::Holder;

use crate::{FileStore, Lease, MemoryStore, Store};

/// How a backend simulates the death of a lease holder's process.
pub trait Backend: Store + Sized {
    /// Simulates the death of the process that holds `lease` (as `holder`): its locks go as a
    /// dead process's would, its record stays.
    fn kill_holder(&self, lease: Lease, holder: &Holder);
}

impl Backend for MemoryStore {
    fn kill_holder(&self, lease: Lease, holder: &Holder) {
        self.mark_dead(holder);
        std::mem::forget(lease);
    }
}

impl Backend for FileStore {
    fn kill_holder(&self, lease: Lease, _holder: &Holder) {
        // A dead process leaves its record in the file, but the kernel has dropped its flock.
        let id = lease.execution();
        let path = std::fs::read_dir(self.root().join("plans"))
            .expect("the store's plans directory")
            .flatten()
            .map(|e| e.path().join("executions").join(format!("{id}.lease")))
            .find(|p| p.exists())
            .expect("the lease file");
        let record = std::fs::read(&path).expect("the lease record");
        drop(lease);
        std::fs::write(&path, record).expect("the lease record written back");
    }
}

/// One `#[tokio::test]` per conformance check for a backend: `store_conformance!(file, {
/// let dir = tempfile::tempdir().unwrap(); (FileStore::open(dir.path()).unwrap(), dir) })`
/// — `$make` gives the store and anything that must live as long (a temp dir).
#[macro_export]
macro_rules! store_conformance {
    ($name:ident, $make:expr) => {
        mod $name {
            #[allow(unused_imports, reason = "the store's own helpers, if any")]
            use super::*;

            macro_rules! case {
                ($check:ident) => {
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $check() {
                        let (store, _dir) = $make;
                        $crate::testkit::checks::$check(&store).await;
                    }
                };
            }

            case!(plans_create_get_update);
            case!(approved_and_rejected_plans_are_immutable);
            case!(executions_and_tasks_cas);
            case!(listing_order_and_summaries);
            case!(leases);
            case!(resource_locks);
            case!(audit_append_seal_verify);
            case!(task_status_round_trips);
            case!(concurrent_appends_chain);
            case!(ending_writes_header_entry_and_seal);
        }
    };
}
