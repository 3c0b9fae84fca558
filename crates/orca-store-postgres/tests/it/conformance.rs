//! The store conformance suite and the differential test (the same random operations on a
//! `MemoryStore` and here must agree), on databases of the shared throwaway server.

use orca_store::testkit::differential::{agree, op};
use proptest::prelude::*;

use crate::db::{database, store_on};

orca_store::store_conformance!(postgres, (store_on(&database().await).await, ()));

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn memory_and_postgres_stores_agree(ops in prop::collection::vec(op(), 1..25)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async { agree(&ops, &store_on(&database().await).await).await })?;
    }
}
