//! Where settings come from, lowest first: built-in defaults, the user's config
//! (`$XDG_CONFIG_HOME/orca/config.toml`, else `~/.config/orca/config.toml`), the project's
//! `.orca/config.toml`, then `ORCA_*` environment variables. Tables merge key by key (a later
//! layer's value replaces an earlier one's; lists are replaced whole). Each file is checked on
//! its own first, so an error names the file it is in; relative paths in either file resolve
//! against the project root. `orca config show` prints the result with each value's source.
//! `[approval]` is read here (the agents' config does not know it): a way of approving turned
//! off in either file stays off.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

use crate::exit::CliError;

/// Environment variables that override a setting: (variable, dotted key).
pub(crate) const ENV_OVERRIDES: &[(&str, &str)] = &[
    ("ORCA_BACKEND", "defaults.backend"),
    ("ORCA_MODEL", "defaults.model"),
    ("ORCA_BASE_URL", "defaults.base_url"),
    ("ORCA_SANDBOX", "sandbox"),
];

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    User(PathBuf),
    Project(PathBuf),
    Env(&'static str),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::User(p) => write!(f, "user config {}", p.display()),
            Self::Project(p) => write!(f, "project config {}", p.display()),
            Self::Env(v) => write!(f, "environment {v}"),
        }
    }
}

/// The merged settings and where each leaf came from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Layers {
    pub(crate) merged: Table,
    pub(crate) sources: BTreeMap<String, Source>,
    /// The files read (user, project), for error messages.
    pub(crate) files: Vec<PathBuf>,
    /// `[approval]` as the files set it (read with them, once).
    pub(crate) approval: ApprovalSettings,
}

/// The user's config file: `$XDG_CONFIG_HOME/orca/config.toml`, else
/// `$HOME/.config/orca/config.toml`.
pub(crate) fn user_config_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    let base = set("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| set("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("orca").join("config.toml"))
}

/// A file's text, or `None` if it does not exist.
pub(crate) fn read_optional(path: &Path) -> Result<Option<String>, CliError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CliError::bad_input(format!("{}: {e}", path.display()))),
    }
}

fn leaves(prefix: &str, table: &Table, out: &mut Vec<String>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Table(t) => leaves(&key, t, out),
            _ => out.push(key),
        }
    }
}

/// `upper` merged over `lower`, recording `source` for every leaf `upper` sets.
fn merge(
    lower: &mut Table,
    upper: &Table,
    prefix: &str,
    source: &Source,
    sources: &mut BTreeMap<String, Source>,
) {
    for (k, v) in upper {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match (lower.get_mut(k), v) {
            (Some(Value::Table(l)), Value::Table(u)) => merge(l, u, &key, source, sources),
            _ => {
                if let Value::Table(t) = v {
                    let mut keys = Vec::new();
                    leaves(&key, t, &mut keys);
                    // A table replacing a value: its old leaves are gone.
                    sources.retain(|s, _| !s.starts_with(&format!("{key}.")) && s != &key);
                    for l in keys {
                        sources.insert(l, source.clone());
                    }
                } else {
                    sources.retain(|s, _| !s.starts_with(&format!("{key}.")));
                    sources.insert(key, source.clone());
                }
                lower.insert(k.clone(), v.clone());
            }
        }
    }
}

fn set_dotted(table: &mut Table, dotted: &str, value: Value) {
    let mut parts: Vec<&str> = dotted.split('.').collect();
    let Some(last) = parts.pop() else { return };
    let mut t = table;
    for p in parts {
        let entry = t
            .entry(p.to_owned())
            .or_insert_with(|| Value::Table(Table::new()));
        if !entry.is_table() {
            *entry = Value::Table(Table::new());
        }
        let Value::Table(next) = entry else { return };
        t = next;
    }
    t.insert(last.to_owned(), value);
}

fn parse_table(text: &str, path: &Path) -> Result<Table, CliError> {
    text.parse::<Table>()
        .map_err(|e| CliError::bad_input(format!("{}: {}", path.display(), e.message())))
}

/// Tables the binary reads itself, unknown to the agents' config (`orca_agents::config`,
/// which refuses unknown fields): taken out of the text it is given.
const BINARY_TABLES: &[&str] = &["approval"];

/// A file's text for the agents' config: as it is, or without the binary's own tables.
fn for_agents(text: &str, table: &Table, path: &Path) -> Result<String, CliError> {
    if BINARY_TABLES.iter().any(|t| table.contains_key(*t)) {
        let mut rest = table.clone();
        for t in BINARY_TABLES {
            rest.remove(*t);
        }
        toml::to_string(&rest).map_err(|e| CliError::bad_input(format!("{}: {e}", path.display())))
    } else {
        Ok(text.to_owned())
    }
}

/// `[approval]`: which ways of approving the user allows (`mcp_elicitation = false`: no
/// approval through an agent host's MCP elicitation).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct ApprovalSettings {
    /// Where `mcp_elicitation = false` was set, if it was: the path is then off.
    pub(crate) mcp_elicitation_off: Option<PathBuf>,
    /// The signed approval policy (`policy`, the user's config only), absolute.
    pub(crate) policy: Option<PathBuf>,
    /// Keys trusted to sign approval policies (`policy_admin_key`, the user's config only).
    pub(crate) policy_admin_keys: Vec<String>,
}

/// `[approval]`'s team settings, which only the user's config may hold: a policy kept inside
/// a project could be rewritten by anything that writes there.
fn check_team_approval(
    table: &Table,
    path: &Path,
    user: bool,
    out: &mut ApprovalSettings,
) -> Result<(), CliError> {
    let Some(Value::Table(approval)) = table.get("approval") else {
        return Ok(());
    };
    for (k, v) in approval {
        if !matches!(k.as_str(), "policy" | "policy_admin_key") {
            continue;
        }
        if !user {
            return Err(CliError::bad_input(format!(
                "{}: approval.{k}: only the user's config may name an approval policy or its admin key (a project's config can be written by its steps)",
                path.display()
            )));
        }
        let bad = || {
            CliError::bad_input(format!(
                "{}: approval.{k}: must be a string{}",
                path.display(),
                if k == "policy_admin_key" {
                    " (ed25519:<hex>) or a list of them"
                } else {
                    " (the policy file's path)"
                }
            ))
        };
        match (k.as_str(), v) {
            ("policy", Value::String(p)) => {
                let p = PathBuf::from(p);
                out.policy = Some(if p.is_absolute() {
                    p
                } else {
                    path.parent().unwrap_or(Path::new(".")).join(p)
                });
            }
            ("policy_admin_key", Value::String(key)) => out.policy_admin_keys = vec![key.clone()],
            ("policy_admin_key", Value::Array(keys)) => {
                out.policy_admin_keys = keys
                    .iter()
                    .map(|k| k.as_str().map(str::to_owned).ok_or_else(bad))
                    .collect::<Result<_, _>>()?;
            }
            _ => return Err(bad()),
        }
    }
    Ok(())
}

/// Checks a file's `[approval]` table: a table of known keys with boolean values.
fn check_approval(table: &Table, path: &Path) -> Result<Option<bool>, CliError> {
    let Some(value) = table.get("approval") else {
        return Ok(None);
    };
    let Value::Table(approval) = value else {
        return Err(CliError::bad_input(format!(
            "{}: approval: must be a table ([approval])",
            path.display()
        )));
    };
    let mut elicitation = None;
    for (k, v) in approval {
        match (k.as_str(), v) {
            ("mcp_elicitation", Value::Boolean(b)) => elicitation = Some(*b),
            ("policy" | "policy_admin_key", _) => {}
            ("mcp_elicitation", _) => {
                return Err(CliError::bad_input(format!(
                    "{}: approval.mcp_elicitation: must be true or false",
                    path.display()
                )));
            }
            (other, _) => {
                return Err(CliError::bad_input(format!(
                    "{}: approval.{other}: unknown setting (known: mcp_elicitation, policy, policy_admin_key)",
                    path.display()
                )));
            }
        }
    }
    Ok(elicitation)
}

/// Reads the layers (user file, project file, environment) and merges them; `None` when no
/// layer sets anything (the built-in defaults apply).
pub(crate) fn load(
    project: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Layers>, CliError> {
    let mut layers = Layers::default();
    let mut any = false;
    let files = [
        user_config_path(env).map(|p| (Source::User(p.clone()), p)),
        project.map(|root| {
            let p = root.join(".orca").join("config.toml");
            (Source::Project(p.clone()), p)
        }),
    ];
    for (source, path) in files.into_iter().flatten() {
        let Some(text) = read_optional(&path)? else {
            continue;
        };
        // Each file must be valid on its own: its errors name it.
        super::check_config_file(&path, &text)?;
        let Ok(table) = text.parse::<Table>() else {
            // A syntax error: the agents' config reports it with its line.
            orca_agents::config::Config::parse(&text, &path)
                .map_err(|e| CliError::bad_input(e.to_string()))?;
            return Err(parse_table(&text, &path).err().unwrap_or_else(|| {
                CliError::bad_input(format!("{}: not valid TOML", path.display()))
            }));
        };
        let approval = check_approval(&table, &path)?;
        check_team_approval(
            &table,
            &path,
            matches!(source, Source::User(_)),
            &mut layers.approval,
        )?;
        if approval == Some(false) && layers.approval.mcp_elicitation_off.is_none() {
            layers.approval.mcp_elicitation_off = Some(path.clone());
        }
        orca_agents::config::Config::parse(&for_agents(&text, &table, &path)?, &path)
            .map_err(|e| CliError::bad_input(e.to_string()))?;
        // A setting that turns an approval path off is not turned back on by a later layer.
        let keep_off = approval == Some(true)
            && layers
                .merged
                .get("approval")
                .and_then(|a| a.get("mcp_elicitation"))
                .and_then(Value::as_bool)
                == Some(false);
        let mut table = table;
        if keep_off && let Some(Value::Table(a)) = table.get_mut("approval") {
            a.remove("mcp_elicitation");
        }
        merge(&mut layers.merged, &table, "", &source, &mut layers.sources);
        layers.files.push(path);
        any = true;
    }
    for (var, key) in ENV_OVERRIDES {
        // ORCA_SANDBOX is read by the sandbox itself (it also overrides a project's setting);
        // it is shown here as the source of `sandbox`.
        if let Some(value) = env(var).filter(|v| !v.is_empty()) {
            if *var != "ORCA_SANDBOX" {
                let mut t = Table::new();
                set_dotted(&mut t, key, Value::String(value));
                merge(
                    &mut layers.merged,
                    &t,
                    "",
                    &Source::Env(var),
                    &mut layers.sources,
                );
                any = true;
            } else {
                layers.sources.insert((*key).to_owned(), Source::Env(var));
                set_dotted(&mut layers.merged, key, Value::String(value));
                any = true;
            }
        }
    }
    Ok(any.then_some(layers))
}

/// The merged settings as config text, for `Config::parse` (the sandbox setting is left to
/// the file layers: `ORCA_SANDBOX` is applied by the sandbox).
pub(crate) fn merged_text(layers: &Layers, env: &dyn Fn(&str) -> Option<String>) -> String {
    let mut merged = layers.merged.clone();
    for t in BINARY_TABLES {
        merged.remove(*t);
    }
    if env("ORCA_SANDBOX").is_some_and(|v| !v.is_empty()) {
        // Keep the files' value (or none): the sandbox reads the variable itself.
        merged.remove("sandbox");
        if let Some((_, value)) = file_sandbox(layers) {
            merged.insert("sandbox".to_owned(), value);
        }
    }
    toml::to_string(&merged).unwrap_or_default()
}

fn file_sandbox(layers: &Layers) -> Option<(PathBuf, Value)> {
    layers.files.iter().rev().find_map(|p| {
        let text = std::fs::read_to_string(p).ok()?;
        let table = text.parse::<Table>().ok()?;
        table.get("sandbox").cloned().map(|v| (p.clone(), v))
    })
}

/// Every leaf of the merged settings: (dotted key, value, source).
pub(crate) fn effective(layers: &Layers) -> Vec<(String, Option<Value>, String)> {
    let mut keys = Vec::new();
    leaves("", &layers.merged, &mut keys);
    keys.into_iter()
        .map(|k| {
            let mut v: Option<&Value> = None;
            let mut t = &layers.merged;
            for (i, part) in k.split('.').enumerate() {
                match t.get(part) {
                    Some(Value::Table(next)) if i + 1 < k.split('.').count() => t = next,
                    other => v = other,
                }
            }
            let value = v.cloned();
            let source = layers
                .sources
                .get(&k)
                .map_or_else(|| "default".to_owned(), ToString::to_string);
            (k, value, source)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_layers_win_key_by_key() {
        let mut sources = BTreeMap::new();
        let mut merged: Table = "env = [\"A\"]\n[defaults]\nmodel = \"u\"\nbackend = \"ollama\"\n"
            .parse()
            .unwrap();
        let user = Source::User(PathBuf::from("u"));
        merge(&mut Table::new(), &merged.clone(), "", &user, &mut sources);
        let project: Table = "[defaults]\nmodel = \"p\"\n".parse().unwrap();
        merge(
            &mut merged,
            &project,
            "",
            &Source::Project(PathBuf::from("p")),
            &mut sources,
        );
        assert_eq!(merged["defaults"]["model"].as_str(), Some("p"));
        assert_eq!(merged["defaults"]["backend"].as_str(), Some("ollama"));
        assert_eq!(
            sources["defaults.model"],
            Source::Project(PathBuf::from("p"))
        );
        assert_eq!(sources["defaults.backend"], user);
    }
}
