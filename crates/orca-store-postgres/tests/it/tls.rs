//! TLS to the database (ADR 0027), against a throwaway server with `ssl=on`, a throwaway CA and
//! a `pg_hba.conf` that refuses TCP in clear: `verify-full` with the CA runs a flow over every
//! kind of connection the store opens (pool, resource locks, LISTEN) and `pg_stat_ssl` counts
//! none in clear; the wrong CA, no CA, a wrong host name, `sslmode=disable` and a missing client
//! certificate each fail with an error that says why, naming the setting and the file, never
//! the password.

#![expect(clippy::unwrap_used, reason = "tests")]

use orca_core::redact::Redactor;
use orca_core::{Holder, PlanId};
use orca_store::{AuditLogId, AuditStore, Authority, ExecutionStore, NewAuditEntry, StoreError};
use orca_store_postgres::PgStore;
use orca_testkit::postgres::{CERT_USER, SCRAM_PASSWORD, SCRAM_USER, Throwaway};
use serde_json::json;

/// Planted in every URL: no message may show it.
const PASSWORD: &str = "planted-pw-7f3a";

fn server() -> &'static Throwaway {
    Throwaway::shared_tls().unwrap_or_else(|e| panic!("{e}"))
}

/// A new database on the TLS server: its name.
async fn database(server: &Throwaway) -> String {
    let url = server.create_database().await.unwrap();
    url.rsplit('/').next().unwrap().to_owned()
}

fn url(server: &Throwaway, user: &str, host: &str, db: &str, query: &str) -> String {
    format!(
        "postgres://{user}:{PASSWORD}@{host}:{}/{db}?{query}",
        server.port()
    )
}

fn ca(server: &Throwaway) -> String {
    server.tls_files().unwrap().ca.display().to_string()
}

fn chain(e: &StoreError) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(&format!(": {text}"));
        }
        source = s.source();
    }
    out
}

async fn connect(url: &str) -> Result<PgStore, String> {
    PgStore::connect(url, Authority::permissive(), Redactor::new())
        .await
        .map_err(|e| {
            let text = chain(&e);
            assert!(!text.contains(PASSWORD), "the password leaked: {text}");
            text
        })
}

/// TCP connections to `db` now, from `pg_stat_ssl`: (over TLS, in clear, TLS versions seen).
async fn count(server: &Throwaway, db: &str) -> (usize, usize, Vec<String>) {
    let (client, conn) =
        tokio_postgres::connect(&server.socket_url("postgres"), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(conn);
    let rows = client
        .query(
            "SELECT s.ssl, coalesce(s.version, '') FROM pg_stat_ssl s
             JOIN pg_stat_activity a USING (pid)
             WHERE a.datname = $1 AND a.client_addr IS NOT NULL",
            &[&db],
        )
        .await
        .unwrap();
    let tls = rows.iter().filter(|r| r.get::<_, bool>(0)).count();
    let mut versions: Vec<String> = rows.iter().map(|r| r.get(1)).collect();
    versions.sort();
    versions.dedup();
    (tls, rows.len() - tls, versions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_with_the_ca_runs_a_flow_and_no_connection_goes_in_clear() {
    let server = server();
    let db = database(server).await;
    let url = url(
        server,
        "postgres",
        "localhost",
        &db,
        &format!("sslmode=verify-full&sslrootcert={}", ca(server)),
    );
    let store = connect(&url).await.unwrap();
    assert!(!format!("{store:?}").contains(PASSWORD));
    assert!(!store.url().contains(PASSWORD));

    // Every kind of connection the store opens: pooled (appends, in parallel), a resource
    // lock's own (taken first: a lock takes an idle pooled connection when there is one),
    // and the LISTEN one.
    let mut notes = store.listen(orca_store_postgres::CHANNELS).await.unwrap();
    let holder = Holder {
        pid: std::process::id(),
        host: "tls-test".into(),
        token: "tls".into(),
    };
    let guard = store
        .try_lock_resources(&["db".to_owned()], &holder)
        .await
        .unwrap()
        .unwrap();
    let log = AuditLogId::Plan {
        plan_id: PlanId::new(),
    };
    let mut joins = tokio::task::JoinSet::new();
    for i in 0..16u64 {
        let store = store.clone();
        joins.spawn(async move {
            store
                .append(log, NewAuditEntry::new("n", json!({ "i": i })))
                .await
        });
    }
    while let Some(r) = joins.join_next().await {
        r.unwrap().unwrap();
    }
    assert!(store.verify(log).await.unwrap().is_intact());
    let (tls, clear, versions) = count(server, &db).await;
    eprintln!(
        "verify-full: tcp connections to the database: {tls} over TLS ({}), {clear} in clear",
        versions.join(", ")
    );
    assert_eq!(clear, 0);
    assert!(tls >= 3, "pool, lock and listen connections: {tls}");
    assert!(notes.try_recv().is_err(), "nothing was notified");
    drop(guard);

    // The IP address is in the certificate too.
    let by_ip = url.replace("@localhost:", "@127.0.0.1:");
    connect(&by_ip).await.unwrap();
    // Every TCP connection the server let in so far, by every test of this process.
    let logged = server.connections_logged();
    eprintln!(
        "server log: {} tcp connections let in over TLS, {} in clear, {} refused",
        logged.tls, logged.clear, logged.refused
    );
    assert_eq!(logged.clear, 0);
    assert!(logged.tls >= tls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_right_ca_verification_fails_naming_the_file() {
    let server = server();
    let db = database(server).await;
    let other = server.tls_files().unwrap().other_ca.display().to_string();
    for mode in ["verify-full", "verify-ca", "require"] {
        let err = connect(&url(
            server,
            "postgres",
            "localhost",
            &db,
            &format!("sslmode={mode}&sslrootcert={other}"),
        ))
        .await
        .unwrap_err();
        eprintln!("{mode} with another CA: {err}");
        assert!(err.contains("not signed by a CA in sslrootcert"), "{err}");
        assert!(err.contains(&format!("sslrootcert={other}")), "{err}");
        assert!(err.contains(&format!("sslmode={mode}")), "{err}");
    }
    // No CA at all: said before anything is sent (unless ~/.postgresql/root.crt exists).
    let home_ca = std::env::var_os("HOME")
        .map(|h| std::path::Path::new(&h).join(".postgresql/root.crt"))
        .is_some_and(|p| p.exists());
    if !home_ca {
        let err = connect(&url(
            server,
            "postgres",
            "localhost",
            &db,
            "sslmode=verify-full",
        ))
        .await
        .unwrap_err();
        eprintln!("verify-full without sslrootcert: {err}");
        assert!(err.contains("add sslrootcert=PATH"), "{err}");
    }
    // The system's CAs (libpq 16's `sslrootcert=system`, verify-full by default) do not know
    // the throwaway CA.
    let err = connect(&url(
        server,
        "postgres",
        "localhost",
        &db,
        "sslrootcert=system",
    ))
    .await
    .unwrap_err();
    eprintln!("sslrootcert=system: {err}");
    assert!(err.contains("sslrootcert=system"), "{err}");
    assert!(err.contains("sslmode=verify-full"), "{err}");
    // A file that is not there.
    let err = connect(&url(
        server,
        "postgres",
        "localhost",
        &db,
        "sslmode=verify-full&sslrootcert=/nonexistent/orca-ca.crt",
    ))
    .await
    .unwrap_err();
    assert!(
        err.contains("sslrootcert=/nonexistent/orca-ca.crt"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_host_name_fails_verify_full_only() {
    let server = server();
    let db = database(server).await;
    // The name is not in the certificate; the address is the server's.
    let query = |mode: &str| {
        format!(
            "hostaddr=127.0.0.1&sslmode={mode}&sslrootcert={}",
            ca(server)
        )
    };
    let err = connect(&url(
        server,
        "postgres",
        "orca-wrong-name.test",
        &db,
        &query("verify-full"),
    ))
    .await
    .unwrap_err();
    eprintln!("verify-full, wrong host name: {err}");
    assert!(
        err.contains("does not name host orca-wrong-name.test"),
        "{err}"
    );
    // verify-ca checks the CA only, as libpq's does.
    connect(&url(
        server,
        "postgres",
        "orca-wrong-name.test",
        &db,
        &query("verify-ca"),
    ))
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_disable_is_refused_by_the_server_and_prefer_goes_over_tls() {
    let server = server();
    let db = database(server).await;
    let err = connect(&url(
        server,
        "postgres",
        "127.0.0.1",
        &db,
        "sslmode=disable",
    ))
    .await
    .unwrap_err();
    eprintln!("sslmode=disable against a hostssl-only server: {err}");
    assert!(err.contains("no encryption"), "{err}");
    assert!(err.contains("sslmode=disable"), "{err}");
    // The default (prefer, like libpq's) takes TLS when the server offers it, unverified.
    let store = connect(&format!(
        "postgres://postgres:{PASSWORD}@127.0.0.1:{}/{db}",
        server.port()
    ))
    .await
    .unwrap();
    assert_eq!(store.tls().mode, orca_store_postgres::SslMode::Prefer);
    let (tls, clear, _) = count(server, &db).await;
    eprintln!("prefer: {tls} over TLS, {clear} in clear");
    assert_eq!((clear, tls > 0), (0, true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_logs_in_its_role() {
    let server = server();
    let db = database(server).await;
    let files = server.tls_files().unwrap();
    let base = format!("sslmode=verify-full&sslrootcert={}", ca(server));
    let err = connect(&url(server, CERT_USER, "localhost", &db, &base))
        .await
        .unwrap_err();
    eprintln!("cert role without a client certificate: {err}");
    assert!(err.contains("certificate"), "{err}");
    let with_cert = format!(
        "{base}&sslcert={}&sslkey={}",
        files.client_cert.display(),
        files.client_key.display()
    );
    let store = connect(&url(server, CERT_USER, "localhost", &db, &with_cert))
        .await
        .unwrap();
    let log = AuditLogId::Plan {
        plan_id: PlanId::new(),
    };
    store
        .append(log, NewAuditEntry::new("n", json!({})))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_server_without_tls_prefer_goes_in_clear_and_require_fails() {
    let server = Throwaway::shared().unwrap_or_else(|e| panic!("{e}"));
    let plain = server.create_database().await.unwrap();
    connect(&plain).await.unwrap();
    let err = connect(&format!("{plain}?sslmode=require"))
        .await
        .unwrap_err();
    eprintln!("require against a server without tls: {err}");
    assert!(err.contains("server does not support TLS"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_login_is_bound_to_the_tls_session() {
    let server = server();
    let db = database(server).await;
    let url = |password: &str, binding: &str| {
        format!(
            "postgres://{SCRAM_USER}:{password}@localhost:{}/{db}?sslmode=verify-full&sslrootcert={}&channel_binding={binding}",
            server.port(),
            ca(server)
        )
    };
    // `require`: SCRAM-SHA-256-PLUS or no login; the server checks the certificate hash we
    // send against its own, so a wrong hash would fail here.
    let store = PgStore::connect(
        &url(SCRAM_PASSWORD, "require"),
        Authority::permissive(),
        Redactor::new(),
    )
    .await
    .unwrap();
    let log = AuditLogId::Plan {
        plan_id: PlanId::new(),
    };
    store
        .append(log, NewAuditEntry::new("n", json!({})))
        .await
        .unwrap();
    // A wrong password: refused, and neither password is in the message.
    let err = PgStore::connect(
        &url("wrong-pw-5b7e", "require"),
        Authority::permissive(),
        Redactor::new(),
    )
    .await
    .unwrap_err();
    let text = chain(&err);
    eprintln!("scram with a wrong password: {text}");
    assert!(text.contains("password authentication failed"), "{text}");
    assert!(
        !text.contains("wrong-pw-5b7e") && !text.contains(SCRAM_PASSWORD),
        "{text}"
    );
}

// A rotated CA is picked up without restarting: a store opened while its `sslrootcert` file
// held the wrong CA connects once the file holds the right one (libpq reads the files at every
// connection; so does the store, rebuilding its TLS settings when their contents change).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_ca_file_is_read_again_at_the_next_connection() {
    let server = server();
    let db = database(server).await;
    let files = server.tls_files().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::copy(&files.other_ca, &ca_file).unwrap();
    let store = PgStore::open(
        &url(
            server,
            "postgres",
            "localhost",
            &db,
            &format!("sslmode=verify-full&sslrootcert={}", ca_file.display()),
        ),
        Authority::permissive(),
        Redactor::new(),
    )
    .unwrap();
    let log = AuditLogId::Plan {
        plan_id: PlanId::new(),
    };
    let before = store
        .append(log, NewAuditEntry::new("plan.created", json!({})))
        .await
        .unwrap_err();
    let before = chain(&before);
    eprintln!("with the old CA in the file: {before}");
    assert!(
        before.contains("not signed by a CA in sslrootcert"),
        "{before}"
    );
    // The CA is rotated in place.
    std::fs::copy(&files.ca, &ca_file).unwrap();
    let entry = store
        .append(log, NewAuditEntry::new("plan.created", json!({})))
        .await
        .unwrap();
    println!(
        "after the CA file changed: entry {} appended over TLS",
        entry.seq
    );
    assert_eq!(entry.seq, 0);
    let (tls, clear, _) = count(server, &db).await;
    assert!(tls >= 1 && clear == 0, "tls {tls}, clear {clear}");
}
