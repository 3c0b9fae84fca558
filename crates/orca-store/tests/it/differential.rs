//! Differential property test: random operation sequences applied to a `MemoryStore` and a
//! `FileStore` must give the same outcomes (revisions, error kinds) and leave the same state
//! (the PostgreSQL store runs the same operations in its own tests).

use orca_store::FileStore;
use orca_store::testkit::differential::{agree, op};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn memory_and_file_stores_agree(ops in prop::collection::vec(op(), 1..25)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = FileStore::open(dir.path()).unwrap();
        rt.block_on(agree(&ops, &file))?;
    }
}
