//! A throwaway PostgreSQL server for tests and benchmarks: `initdb` in a temp dir, started on
//! a free port on 127.0.0.1 with its unix socket in that dir, stopped and removed afterwards
//! (by [`Drop`], and by a watchdog process if the test process is killed).
//!
//! [`Throwaway::shared_tls`] starts one with `ssl=on`, a throwaway CA and certificates
//! ([`TlsFiles`]) and a `pg_hba.conf` that refuses TCP connections in clear.
//!
//! As root the server runs as the `postgres` user (`runuser`), as PostgreSQL requires. The
//! binaries are looked for in `$ORCA_PG_BIN`, `/usr/lib/postgresql/<version>/bin` (newest
//! first) and `PATH`; if none is found the error says how to install them.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

pub use crate::certs::{CERT_USER, SCRAM_PASSWORD, SCRAM_USER, TlsFiles};

/// Why the throwaway server could not start.
#[derive(Debug, Error)]
pub enum ThrowawayError {
    /// No `initdb` / `pg_ctl`.
    #[error(
        "postgresql server binaries (initdb, pg_ctl) not found in $ORCA_PG_BIN, \
         /usr/lib/postgresql/*/bin or PATH: install them with `apt-get install postgresql` \
         (Debian; `.ci/setup` does it), or set ORCA_PG_BIN to their directory"
    )]
    Missing,
    /// A command failed.
    #[error("{what}: {detail}")]
    Failed {
        /// What was run.
        what: String,
        /// Its output or error.
        detail: String,
    },
}

/// TCP connections counted in a TLS server's log ([`Throwaway::connections_logged`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoggedConnections {
    /// Let in over TLS.
    pub tls: usize,
    /// Let in in clear.
    pub clear: usize,
    /// Refused (no TLS, a bad client certificate, …).
    pub refused: usize,
}

/// A running throwaway server.
#[derive(Debug)]
pub struct Throwaway {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
    databases: AtomicU64,
    tls: Option<TlsFiles>,
}

pub(crate) fn failed(what: impl Into<String>, detail: impl ToString) -> ThrowawayError {
    ThrowawayError::Failed {
        what: what.into(),
        detail: detail.to_string(),
    }
}

/// The directory holding `initdb` and `pg_ctl`.
fn find_bin() -> Option<PathBuf> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Some(d) = std::env::var_os("ORCA_PG_BIN").map(PathBuf::from) {
        return has(&d).then_some(d);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, d)| has(d))
        .collect();
    versions.sort();
    if let Some((_, d)) = versions.pop() {
        return Some(d);
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p).find(|d| has(d)).map(|d| {
            // Debian's wrappers in PATH resolve to the real binaries.
            std::fs::canonicalize(d.join("initdb"))
                .ok()
                .and_then(|f| f.parent().map(Path::to_path_buf))
                .unwrap_or(d)
        })
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

fn free_port() -> Result<u16, ThrowawayError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| failed("finding a free port", e))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| failed("finding a free port", e))
}

static SHARED: OnceLock<Result<Throwaway, String>> = OnceLock::new();
static SHARED_TLS: OnceLock<Result<Throwaway, String>> = OnceLock::new();
static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

impl Throwaway {
    /// The server shared by every test of this process (started on first use; a watchdog
    /// stops and removes it when the process exits).
    ///
    /// # Errors
    ///
    /// It could not start (the message says why, e.g. how to install PostgreSQL).
    pub fn shared() -> Result<&'static Self, String> {
        SHARED
            .get_or_init(|| Self::start(false).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The TLS server shared by every test of this process: `ssl=on`, certificates of a
    /// throwaway CA, TCP connections in clear refused (see [`Throwaway::start_tls`]).
    ///
    /// # Errors
    ///
    /// It could not start (the message says why).
    pub fn shared_tls() -> Result<&'static Self, String> {
        SHARED_TLS
            .get_or_init(|| Self::start_tls().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Starts a server with `ssl=on` and the certificates of [`TlsFiles`] (made with
    /// `openssl`): over TCP, only TLS connections are let in (the role [`CERT_USER`] by its
    /// client certificate, [`SCRAM_USER`] by its password, every other role trusted); the unix socket is for the harness.
    ///
    /// # Errors
    ///
    /// The binaries or `openssl` are missing, or a command failed.
    pub fn start_tls() -> Result<Self, ThrowawayError> {
        Self::start_with(false, true)
    }

    /// Starts a server. `durable`: `fsync` on, as in production (benchmarks); otherwise off
    /// (tests: what they check does not depend on the disk).
    ///
    /// # Errors
    ///
    /// The binaries are missing, or `initdb` / `pg_ctl` failed.
    pub fn start(durable: bool) -> Result<Self, ThrowawayError> {
        Self::start_with(durable, false)
    }

    fn start_with(durable: bool, tls: bool) -> Result<Self, ThrowawayError> {
        let bin = find_bin().ok_or(ThrowawayError::Missing)?;
        let as_postgres = is_root();
        let n = NEXT_DIR.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("orca-pg-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| failed(format!("creating {}", dir.display()), e))?;
        let mut server = Self {
            dir,
            bin,
            port: 0,
            as_postgres,
            databases: AtomicU64::new(0),
            tls: None,
        };
        if as_postgres {
            let out = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&server.dir)
                .output()
                .map_err(|e| failed("chown postgres", e))?;
            if !out.status.success() {
                return Err(failed(
                    "chown postgres (is there a `postgres` user?)",
                    String::from_utf8_lossy(&out.stderr),
                ));
            }
        }
        server.watchdog();
        let data = server.dir.join("data");
        server.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "--auth=trust".as_ref(),
                "--no-sync".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--locale=C".as_ref(),
            ],
        )?;
        if tls {
            server.tls = Some(server.set_up_tls(&data)?);
        }
        let mut last = None;
        for _ in 0..5 {
            server.port = free_port()?;
            match server.pg_ctl_start(durable) {
                Ok(()) if tls => {
                    server.psql(&format!(
                        "CREATE ROLE {CERT_USER} LOGIN SUPERUSER; \
                         CREATE ROLE {SCRAM_USER} LOGIN SUPERUSER PASSWORD '{SCRAM_PASSWORD}'"
                    ))?;
                    return Ok(server);
                }
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| failed("pg_ctl start", "gave up")))
    }

    /// Certificates in `<dir>/tls`, owned by the server's user, and a `pg_hba.conf` that
    /// refuses TCP in clear.
    fn set_up_tls(&self, data: &Path) -> Result<TlsFiles, ThrowawayError> {
        let dir = self.dir.join("tls");
        std::fs::create_dir_all(&dir)
            .map_err(|e| failed(format!("creating {}", dir.display()), e))?;
        let files = crate::certs::make(&dir)?;
        if self.as_postgres {
            let out = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .output()
                .map_err(|e| failed("chown postgres", e))?;
            if !out.status.success() {
                return Err(failed(
                    "chown postgres",
                    String::from_utf8_lossy(&out.stderr),
                ));
            }
        }
        {
            use std::os::unix::fs::PermissionsExt as _;
            // The server refuses a key others can read.
            std::fs::set_permissions(&files.server_key, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| failed(format!("chmod {}", files.server_key.display()), e))?;
        }
        let hba = data.join("pg_hba.conf");
        std::fs::write(&hba, crate::certs::HBA)
            .map_err(|e| failed(format!("writing {}", hba.display()), e))?;
        Ok(files)
    }

    /// Runs one SQL statement as `postgres` over the unix socket.
    fn psql(&self, sql: &str) -> Result<(), ThrowawayError> {
        let port = self.port.to_string();
        self.run(
            "psql",
            &[
                "-h".as_ref(),
                self.dir.as_os_str(),
                "-p".as_ref(),
                port.as_ref(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "-d".as_ref(),
                "postgres".as_ref(),
                "-v".as_ref(),
                "ON_ERROR_STOP=1".as_ref(),
                "-c".as_ref(),
                sql.as_ref(),
            ],
        )
    }

    /// The TCP connections the server has logged so far (a TLS server logs every one): how
    /// many were let in over TLS, let in in clear, and refused.
    #[must_use]
    pub fn connections_logged(&self) -> LoggedConnections {
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        // Lines start `<time> [<pid>] LOG:  …` (the default log_line_prefix).
        let pid = |line: &str| {
            line.split_once('[')
                .and_then(|(_, r)| r.split_once(']'))
                .map(|(p, _)| p.to_owned())
        };
        let mut tcp = std::collections::HashSet::new();
        let mut counts = LoggedConnections::default();
        for line in log.lines() {
            let Some(p) = pid(line) else { continue };
            if line.contains("connection received: host=") && !line.contains("host=[local]") {
                tcp.insert(p);
            } else if tcp.contains(&p) && line.contains("connection authorized:") {
                if line.contains("SSL enabled") {
                    counts.tls += 1;
                } else {
                    counts.clear += 1;
                }
            } else if tcp.contains(&p) && line.contains("FATAL:") {
                counts.refused += 1;
            }
        }
        counts
    }

    /// The certificates of a server started with [`Throwaway::start_tls`].
    #[must_use]
    pub const fn tls_files(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// A URL of `database` over the server's unix socket, as `postgres` (TLS does not apply:
    /// for the harness and tests to look at the server from outside the store).
    #[must_use]
    pub fn socket_url(&self, database: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={database}",
            self.dir.display(),
            self.port
        )
    }

    fn options(&self, durable: bool) -> String {
        let fsync = if durable { "on" } else { "off" };
        // A durable (benchmark) server counts its statements, for the per-statement
        // breakdown (`pg_stat_statements`, when the server has it).
        let stats = if durable && self.bin.join("../lib/pg_stat_statements.so").is_file() {
            " -c shared_preload_libraries=pg_stat_statements"
        } else {
            ""
        };
        let tls = self.tls.as_ref().map_or_else(String::new, |t| {
            format!(
                " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={} -c ssl_ca_file={} \
                 -c log_connections=on",
                t.server_cert.display(),
                t.server_key.display(),
                t.ca.display()
            )
        });
        format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync={fsync} \
             -c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3{stats}{tls}",
            self.port,
            self.dir.display()
        )
    }

    fn pg_ctl_start(&self, durable: bool) -> Result<(), ThrowawayError> {
        let data = self.dir.join("data");
        let log = self.dir.join("server.log");
        let opts = self.options(durable);
        self.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-w".as_ref(),
                "-t".as_ref(),
                "60".as_ref(),
                "-o".as_ref(),
                opts.as_ref(),
                "start".as_ref(),
            ],
        )
    }

    /// Stops the server (fast shutdown: connections are cut).
    ///
    /// # Errors
    ///
    /// `pg_ctl stop` failed.
    pub fn stop(&self) -> Result<(), ThrowawayError> {
        let data = self.dir.join("data");
        self.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-m".as_ref(),
                "fast".as_ref(),
                "-w".as_ref(),
                "stop".as_ref(),
            ],
        )
    }

    /// Freezes the server (`SIGSTOP` to the postmaster and every backend): connections stay
    /// open and nothing answers, as across a network partition that drops packets.
    /// [`Throwaway::thaw`] lets it go on.
    ///
    /// # Errors
    ///
    /// The server's pid cannot be read, or `kill` failed.
    pub fn freeze(&self) -> Result<(), ThrowawayError> {
        self.signal_all("-STOP")
    }

    /// Lets a frozen server go on (`SIGCONT`).
    ///
    /// # Errors
    ///
    /// As [`Throwaway::freeze`].
    pub fn thaw(&self) -> Result<(), ThrowawayError> {
        self.signal_all("-CONT")
    }

    /// Signals the postmaster (its pid from `postmaster.pid`) and its children.
    fn signal_all(&self, signal: &str) -> Result<(), ThrowawayError> {
        let pid_file = self.dir.join("data").join("postmaster.pid");
        let text = std::fs::read_to_string(&pid_file)
            .map_err(|e| failed(format!("reading {}", pid_file.display()), e))?;
        let postmaster = text
            .lines()
            .next()
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| failed("reading the postmaster's pid", "empty postmaster.pid"))?
            .to_owned();
        let mut pids = vec![postmaster.clone()];
        for entry in std::fs::read_dir("/proc")
            .map_err(|e| failed("listing /proc", e))?
            .flatten()
        {
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid …`: the fields after the last `)`.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1));
            if ppid == Some(postmaster.as_str()) {
                pids.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        let out = Command::new("kill")
            .arg(signal)
            .args(&pids)
            .output()
            .map_err(|e| failed("running kill", e))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(failed(
                format!("kill {signal}"),
                String::from_utf8_lossy(&out.stderr),
            ))
        }
    }

    /// Starts it again on the same port, after [`Throwaway::stop`].
    ///
    /// # Errors
    ///
    /// `pg_ctl start` failed.
    pub fn restart(&self, durable: bool) -> Result<(), ThrowawayError> {
        self.pg_ctl_start(durable)
    }

    /// The port on 127.0.0.1.
    #[must_use]
    pub const fn port(&self) -> u16 {
        self.port
    }

    /// The URL of a database on this server.
    #[must_use]
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates a new, empty database and returns its URL.
    ///
    /// # Errors
    ///
    /// The server cannot be reached.
    pub async fn create_database(&self) -> Result<String, ThrowawayError> {
        let n = self.databases.fetch_add(1, Ordering::SeqCst);
        let name = format!("orca_{n}");
        let (client, conn) =
            tokio_postgres::connect(&self.socket_url("postgres"), tokio_postgres::NoTls)
                .await
                .map_err(|e| failed("connecting to the throwaway server", e))?;
        let driver = tokio::spawn(conn);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .map_err(|e| failed(format!("creating database {name}"), e))?;
        drop(client);
        let _ = driver.await;
        Ok(self.url(&name))
    }

    /// Cuts every connection to `database` (the fault tests' "connection cut"), as the server
    /// does to a client it terminates; returns how many were cut.
    ///
    /// # Errors
    ///
    /// The server cannot be reached.
    pub async fn terminate_connections(&self, database: &str) -> Result<u64, ThrowawayError> {
        let (client, conn) =
            tokio_postgres::connect(&self.socket_url("postgres"), tokio_postgres::NoTls)
                .await
                .map_err(|e| failed("connecting to the throwaway server", e))?;
        let driver = tokio::spawn(conn);
        let rows = client
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = $1 AND pid <> pg_backend_pid()",
                &[&database],
            )
            .await
            .map_err(|e| failed(format!("cutting the connections to {database}"), e))?;
        drop(client);
        let _ = driver.await;
        Ok(rows.len() as u64)
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) -> Result<(), ThrowawayError> {
        let out = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| failed(format!("running {program}"), e))?;
        if out.status.success() {
            return Ok(());
        }
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        Err(failed(
            format!(
                "{program} {}",
                args.iter()
                    .map(|a| a.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            format!(
                "{}{}\n{log}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ))
    }

    /// A shell process that waits for this process to exit, then stops the server and
    /// removes its directory: nothing is left behind even if the tests are killed.
    fn watchdog(&self) {
        let pg_ctl = self.bin.join("pg_ctl");
        let as_pg = if self.as_postgres {
            "runuser -u postgres -- "
        } else {
            ""
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             {as_pg}'{pg_ctl}' -D '{dir}/data' -m immediate stop >/dev/null 2>&1; \
             rm -rf '{dir}'",
            pid = std::process::id(),
            pg_ctl = pg_ctl.display(),
            dir = self.dir.display(),
        );
        let _ = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
    }
}

impl Drop for Throwaway {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .args(["-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
