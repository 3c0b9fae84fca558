//! A database of the shared throwaway server, and a store on it.

#![expect(clippy::unwrap_used, reason = "tests")]

use orca_core::redact::Redactor;
use orca_store::Authority;
use orca_store_postgres::PgStore;
use orca_testkit::postgres::Throwaway;

/// A store on `url`, permissive, redacting nothing but credential shapes.
pub(crate) async fn store_on(url: &str) -> PgStore {
    PgStore::connect(url, Authority::permissive(), Redactor::new())
        .await
        .unwrap()
}

/// A new database of the shared throwaway server: its URL.
pub(crate) async fn database() -> String {
    let server = Throwaway::shared().unwrap_or_else(|e| panic!("{e}"));
    server.create_database().await.unwrap()
}
