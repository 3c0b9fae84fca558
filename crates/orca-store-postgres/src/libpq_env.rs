//! libpq's environment defaults, so a store URL works the way `psql` does on the same machine:
//! what the URL leaves out is taken from `PGHOST`, `PGHOSTADDR`… as libpq does, and the password
//! from `PGPASSWORD` or the password file (`PGPASSFILE`, default `~/.pgpass`). What the URL says
//! always wins. Without a host anywhere, the local socket directory is used, as libpq does
//! (`/var/run/postgresql` on Debian, else `/tmp`), and the user defaults to the login name.
//!
//! Supported: `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGPASSFILE`, `PGDATABASE`,
//! `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`, `PGAPPNAME`, `PGCONNECT_TIMEOUT`.
//! Not supported (ignored): `PGSERVICE` (service files), `PGSSLCRL`, `PGOPTIONS`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use orca_store::StoreError;
use tokio_postgres::Config;
use tokio_postgres::config::Host;

/// The TLS settings libpq reads from the environment: (URL key, variable).
pub(crate) const TLS_VARS: &[(&str, &str)] = &[
    ("sslmode", "PGSSLMODE"),
    ("sslrootcert", "PGSSLROOTCERT"),
    ("sslcert", "PGSSLCERT"),
    ("sslkey", "PGSSLKEY"),
];

/// The TLS settings the URL left out, from the environment (`pairs`: what the URL gave).
pub(crate) fn tls_defaults(
    pairs: &[(String, String)],
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    TLS_VARS
        .iter()
        .filter(|(key, _)| !pairs.iter().any(|(k, _)| k == key))
        .filter_map(|(key, var)| {
            env(var)
                .filter(|v| !v.is_empty())
                .map(|v| ((*key).to_owned(), v))
        })
        .collect()
}

fn bad(var: &str, value: &str, what: &str) -> StoreError {
    StoreError::Invalid(format!("environment variable {var}={value}: {what}"))
}

/// A `postgres://` URL whose hosts name no port, with `PGPORT`'s ports put after them (the
/// URL parser fills in 5432 for a host without a port, so this cannot wait for [`apply`]).
/// Anything else is returned as it is.
pub(crate) fn url_with_env_port(url: &str, env: &dyn Fn(&str) -> Option<String>) -> String {
    let Some(ports) = env("PGPORT").filter(|p| !p.is_empty()) else {
        return url.to_owned();
    };
    let Some((scheme, after)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = after.find(['/', '?']).unwrap_or(after.len());
    let (authority, tail) = after.split_at(end);
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let query_port = tail
        .split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|kv| kv.starts_with("port=")));
    let names_port = |h: &str| match h.strip_prefix('[') {
        Some(v6) => v6.contains("]:"),
        None => h.contains(':'),
    };
    if hosts.is_empty() || query_port || hosts.split(',').any(names_port) {
        return url.to_owned();
    }
    let ports: Vec<&str> = ports.split(',').map(str::trim).collect();
    let hosts: Vec<&str> = hosts.split(',').collect();
    let with_ports: Vec<String> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or("5432");
            format!("{h}:{port}")
        })
        .collect();
    let userinfo = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    format!("{scheme}://{userinfo}{}{tail}", with_ports.join(","))
}

/// Fills in what `config` (parsed from the URL) leaves out, from the environment.
pub(crate) fn apply(
    config: &mut Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), StoreError> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
        if let Some(hosts) = var("PGHOST") {
            for h in hosts.split(',') {
                config.host(h.trim());
            }
        }
        if let Some(addrs) = var("PGHOSTADDR") {
            for a in addrs.split(',') {
                let ip = a
                    .trim()
                    .parse()
                    .map_err(|_| bad("PGHOSTADDR", a, "not an IP address"))?;
                config.hostaddr(ip);
            }
        }
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            let socket_dir = ["/var/run/postgresql", "/tmp"]
                .into_iter()
                .find(|d| Path::new(d).is_dir())
                .unwrap_or("/tmp");
            config.host(socket_dir);
        }
    }
    if config.get_ports().is_empty()
        && let Some(ports) = var("PGPORT")
    {
        for p in ports.split(',') {
            let port = p
                .trim()
                .parse::<u16>()
                .map_err(|_| bad("PGPORT", p, "not a port number"))?;
            config.port(port);
        }
    }
    if config.get_user().is_none()
        && let Some(user) = var("PGUSER")
            .or_else(|| var("USER"))
            .or_else(|| var("LOGNAME"))
    {
        config.user(user);
    }
    if config.get_dbname().is_none()
        && let Some(db) = var("PGDATABASE")
    {
        config.dbname(db);
    }
    if config.get_application_name().is_none()
        && let Some(name) = var("PGAPPNAME")
    {
        config.application_name(name);
    }
    if config.get_connect_timeout().is_none()
        && let Some(secs) = var("PGCONNECT_TIMEOUT")
    {
        let secs = secs
            .parse::<u64>()
            .map_err(|_| bad("PGCONNECT_TIMEOUT", &secs, "not a number of seconds"))?;
        config.connect_timeout(Duration::from_secs(secs.max(2)));
    }
    if config.get_password().is_none() {
        if let Some(password) = var("PGPASSWORD") {
            config.password(password);
        } else if let Some(password) = from_passfile(config, env) {
            config.password(password);
        }
    }
    Ok(())
}

/// The password file's password for this connection (libpq's rules: the first line whose
/// `host:port:database:user` matches, `*` matching anything; a file readable by others is
/// ignored, as libpq does).
fn from_passfile(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let path = env("PGPASSFILE")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".pgpass")))?;
    let meta = std::fs::metadata(&path).ok()?;
    {
        use std::os::unix::fs::PermissionsExt as _;
        if !meta.is_file() || meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(path = %path.display(), "password file ignored: it is not a private regular file (chmod 600)");
            return None;
        }
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        // libpq matches a socket connection as `localhost`.
        Some(Host::Unix(_)) | None => "localhost".to_owned(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user().unwrap_or_default().to_owned();
    let db = config
        .get_dbname()
        .map_or_else(|| user.clone(), str::to_owned);
    passfile_lookup(&text, [&host, &port, &db, &user])
}

/// The password of the first line matching `wanted` (host, port, database, user).
pub(crate) fn passfile_lookup(text: &str, wanted: [&str; 4]) -> Option<String> {
    for line in text.lines() {
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_fields(line);
        let [host, port, db, user, password] = fields.as_slice() else {
            continue;
        };
        let matches = [host, port, db, user]
            .iter()
            .zip(wanted)
            .all(|(field, want)| field.as_str() == "*" || field.as_str() == want);
        if matches {
            return Some(password.clone());
        }
    }
    None
}

/// A password file line's fields: `:` separates them, `\` escapes `:` and `\`.
fn split_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(next), Some(last)) = (chars.next(), fields.last_mut()) {
                    last.push(next);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(last) = fields.last_mut() {
                    last.push(c);
                }
            }
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn the_url_wins_and_the_environment_fills_the_rest() {
        let vars = env(&[
            ("PGHOST", "db.example"),
            ("PGPORT", "6543"),
            ("PGUSER", "orca"),
            ("PGPASSWORD", "pw"),
            ("PGDATABASE", "runs"),
        ]);
        let mut c: Config = "postgres:///".parse().unwrap();
        apply(&mut c, &vars).unwrap();
        assert_eq!(c.get_hosts(), [Host::Tcp("db.example".into())]);
        assert_eq!(c.get_ports(), [6543]);
        assert_eq!(c.get_user(), Some("orca"));
        assert_eq!(c.get_password(), Some(&b"pw"[..]));
        assert_eq!(c.get_dbname(), Some("runs"));
        let mut c: Config = "postgres://me:secret@h:1/d".parse().unwrap();
        apply(&mut c, &vars).unwrap();
        assert_eq!(c.get_hosts(), [Host::Tcp("h".into())]);
        assert_eq!(c.get_ports(), [1]);
        assert_eq!(
            (c.get_user(), c.get_password(), c.get_dbname()),
            (Some("me"), Some(&b"secret"[..]), Some("d"))
        );
    }

    #[test]
    fn bad_values_name_the_variable() {
        let mut c: Config = "host=h dbname=d".parse().unwrap();
        let e = apply(&mut c, &env(&[("PGPORT", "54x")])).unwrap_err();
        assert!(e.to_string().contains("PGPORT=54x"), "{e}");
    }

    #[test]
    fn pgport_goes_after_hosts_that_name_no_port() {
        let vars = env(&[("PGPORT", "6543")]);
        let with = |u: &str| url_with_env_port(u, &vars);
        assert_eq!(with("postgres://u:p@h/d"), "postgres://u:p@h:6543/d");
        assert_eq!(
            with("postgres://a,[::1]/d?x=1"),
            "postgres://a:6543,[::1]:6543/d?x=1"
        );
        assert_eq!(with("postgres://h:1/d"), "postgres://h:1/d");
        assert_eq!(with("postgres://[::1]:1/d"), "postgres://[::1]:1/d");
        assert_eq!(with("postgres://h/d?port=7"), "postgres://h/d?port=7");
        assert_eq!(with("postgres:///d"), "postgres:///d");
        assert_eq!(with("host=h"), "host=h");
        let c: Config = with("postgres://h/d").parse().unwrap();
        assert_eq!(c.get_ports(), [6543]);
        assert_eq!(
            url_with_env_port("postgres://h/d", &env(&[])),
            "postgres://h/d"
        );
    }

    #[test]
    fn tls_settings_come_from_the_environment_unless_the_url_has_them() {
        let vars = env(&[("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", "/ca.pem")]);
        let given = vec![("sslmode".to_owned(), "require".to_owned())];
        assert_eq!(
            tls_defaults(&given, &vars),
            [("sslrootcert".to_owned(), "/ca.pem".to_owned())]
        );
    }

    #[test]
    fn password_file_lines_match_like_libpq() {
        let text = "# comment\nother:5432:*:*:nope\n*:5432:orca:me:se\\:cret\nh:*:*:*:later\n";
        assert_eq!(
            passfile_lookup(text, ["h", "5432", "orca", "me"]).as_deref(),
            Some("se:cret")
        );
        assert_eq!(
            passfile_lookup(text, ["h", "1", "x", "y"]).as_deref(),
            Some("later")
        );
        assert_eq!(passfile_lookup(text, ["z", "1", "x", "y"]), None);
    }

    #[test]
    fn a_password_file_readable_by_others_is_ignored() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pgpass");
        std::fs::write(&file, "*:*:*:*:filepw\n").unwrap();
        let path = file.display().to_string();
        let vars = env(&[("PGPASSFILE", &path), ("PGUSER", "u")]);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut c: Config = "postgres://h/d".parse().unwrap();
        apply(&mut c, &vars).unwrap();
        assert_eq!(c.get_password(), None);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        apply(&mut c, &vars).unwrap();
        assert_eq!(c.get_password(), Some(&b"filepw"[..]));
    }
}
