//! The environment of a step's processes (the `shell` agent, `run_command`, command-line
//! agents) is an allowlist: a minimal base ([`BASE_VARS`], `LC_*`), the `ORCA_*` identity
//! variables, and variables named — by the plan step (`env` in the step, approved with the
//! plan), by the agent's profile (`env` in `[agents.X]`), or in the config (`env = [...]`, and
//! every variable of `env_file`). Nothing else of orca's environment reaches a step: a provider
//! key in orca's environment is not visible to `env` in a shell step unless a name says so.
//!
//! Values are looked up in the environment snapshot the caller gives ([`EnvPolicy::from_vars`]);
//! a policy built with [`EnvPolicy::default`] reads this process's environment when a step
//! starts, still only for the allowed names.

use std::collections::BTreeMap;
use std::sync::Arc;

use orca_core::AgentId;
use serde::Serialize;

/// Variables every step gets (when set in orca's environment), plus every `LC_*`.
pub const BASE_VARS: &[&str] = &["PATH", "HOME", "USER", "LANG", "TERM", "TMPDIR"];

/// The base, as shown to people.
pub const BASE_DESCRIPTION: &str = "PATH, HOME, USER, LANG, LC_*, TERM, TMPDIR, ORCA_*";

/// Whether `name` is in the base allowlist.
#[must_use]
pub fn is_base(name: &str) -> bool {
    BASE_VARS.contains(&name) || name.starts_with("LC_")
}

/// Where a named variable comes from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum EnvSource {
    /// The plan step's `env`.
    Step,
    /// The agent profile's `env`.
    Agent(AgentId),
    /// The config's `env`.
    Config,
    /// The config's `env_file`.
    EnvFile,
}

impl std::fmt::Display for EnvSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Step => f.write_str("step"),
            Self::Agent(id) => write!(f, "agent {id}"),
            Self::Config => f.write_str("config"),
            Self::EnvFile => f.write_str("env_file"),
        }
    }
}

/// A variable a step receives beyond the base: its name (never its value), where it is named,
/// and whether it has a value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NamedVar {
    /// The variable.
    pub name: String,
    /// Who named it.
    pub from: EnvSource,
    /// Whether it has a value (in orca's environment or the env file).
    pub set: bool,
}

/// Which variables a step's processes receive.
#[derive(Clone, Default)]
pub struct EnvPolicy {
    /// orca's environment; `None`: read this process's environment when a step starts.
    parent: Option<Arc<BTreeMap<String, String>>>,
    config: Vec<String>,
    file: Arc<BTreeMap<String, String>>,
    agents: BTreeMap<AgentId, Vec<String>>,
}

impl std::fmt::Debug for EnvPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only: values may be secrets.
        f.debug_struct("EnvPolicy")
            .field("config", &self.config)
            .field("env_file", &self.file.keys().collect::<Vec<_>>())
            .field("agents", &self.agents)
            .finish_non_exhaustive()
    }
}

impl EnvPolicy {
    /// A policy looking values up in `vars` (orca's environment, captured by the caller).
    #[must_use]
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            parent: Some(Arc::new(vars.into_iter().collect())),
            ..Self::default()
        }
    }

    /// Names every step receives (the config's `env`).
    #[must_use]
    pub fn with_config_names(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.config = names.into_iter().collect();
        self
    }

    /// Variables every step receives with these values (the config's `env_file`).
    #[must_use]
    pub fn with_file_vars(mut self, vars: BTreeMap<String, String>) -> Self {
        self.file = Arc::new(vars);
        self
    }

    /// Names every step of `agent` receives (its profile's `env`).
    pub fn set_agent_names(&mut self, agent: AgentId, names: Vec<String>) {
        if names.is_empty() {
            self.agents.remove(&agent);
        } else {
            self.agents.insert(agent, names);
        }
    }

    /// The names `agent`'s profile adds.
    #[must_use]
    pub fn agent_names(&self, agent: &AgentId) -> &[String] {
        self.agents.get(agent).map_or(&[], Vec::as_slice)
    }

    /// The values of the env file (secrets for the redactor).
    pub fn file_values(&self) -> impl Iterator<Item = &str> {
        self.file.values().map(String::as_str)
    }

    fn lookup(&self, name: &str) -> Option<String> {
        match &self.parent {
            Some(vars) => vars.get(name).cloned(),
            None => std::env::var(name).ok(),
        }
    }

    fn base(&self) -> Vec<(String, String)> {
        match &self.parent {
            Some(vars) => vars
                .iter()
                .filter(|(k, _)| is_base(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            None => std::env::vars().filter(|(k, _)| is_base(k)).collect(),
        }
    }

    /// The variables beyond the base that a step of `agent` naming `step` receives, each once
    /// (the most specific source wins: step, then agent, then config, then env file), sorted
    /// by name.
    #[must_use]
    pub fn named(&self, agent: &AgentId, step: &[String]) -> Vec<NamedVar> {
        let mut out: BTreeMap<String, NamedVar> = BTreeMap::new();
        let sources = [
            (
                EnvSource::EnvFile,
                self.file.keys().cloned().collect::<Vec<_>>(),
            ),
            (EnvSource::Config, self.config.clone()),
            (
                EnvSource::Agent(agent.clone()),
                self.agent_names(agent).to_vec(),
            ),
            (EnvSource::Step, step.to_vec()),
        ];
        for (from, names) in sources {
            for name in names {
                if is_base(&name) || name.starts_with("ORCA_") {
                    continue;
                }
                let set = self.file.contains_key(&name) || self.lookup(&name).is_some();
                out.insert(
                    name.clone(),
                    NamedVar {
                        name,
                        from: from.clone(),
                        set,
                    },
                );
            }
        }
        out.into_values().collect()
    }

    /// The complete environment of a step's process: the base, the named variables that have
    /// a value, then `identity` (the `ORCA_*` variables, which win).
    #[must_use]
    pub fn build(
        &self,
        agent: &AgentId,
        step: &[String],
        identity: Vec<(String, String)>,
    ) -> Vec<(String, String)> {
        let mut env: BTreeMap<String, String> = self.base().into_iter().collect();
        for var in self.named(agent, step) {
            let value = if var.from == EnvSource::EnvFile {
                self.file.get(&var.name).cloned()
            } else {
                self.lookup(&var.name)
                    .or_else(|| self.file.get(&var.name).cloned())
            };
            if let Some(v) = value {
                env.insert(var.name, v);
            }
        }
        env.extend(identity);
        env.into_iter().collect()
    }
}

/// Parses an env file: `NAME=value` lines (`export ` allowed), `#` comments and blank lines
/// skipped, values optionally in single or double quotes.
///
/// # Errors
///
/// The first bad line, by number (never quoting its value).
pub fn parse_env_file(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((name, value)) = line.split_once('=') else {
            return Err(format!("line {}: expected NAME=value", i + 1));
        };
        let name = name.trim();
        if !orca_core::plan::is_env_name(name) {
            return Err(format!(
                "line {}: {name:?} is not an environment variable name (or is an ORCA_* one)",
                i + 1
            ));
        }
        let value = value.trim();
        let value = ['"', '\'']
            .iter()
            .find_map(|q| value.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)))
            .unwrap_or(value);
        out.insert(name.to_owned(), value.to_owned());
    }
    Ok(out)
}

tokio::task_local! {
    /// The names the running step adds (its profile's and its own), for `run_command` calls
    /// made while the step's agent runs.
    pub static STEP_NAMES: (AgentId, Vec<String>);
}

/// The names of the step running in this task, if any.
pub fn current_step() -> Option<(AgentId, Vec<String>)> {
    STEP_NAMES.try_with(Clone::clone).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn only_the_base_and_named_variables_pass() {
        let mut policy = EnvPolicy::from_vars(vars(&[
            ("PATH", "/bin"),
            ("LC_ALL", "C"),
            ("OPENAI_API_KEY", "sk-x"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("ANTHROPIC_API_KEY", "sk-ant"),
        ]))
        .with_config_names(["AWS_SECRET_ACCESS_KEY".to_owned()])
        .with_file_vars(parse_env_file("# c\nexport FROM_FILE='v 1'\n").unwrap());
        let claude = AgentId::parse("claude").unwrap();
        policy.set_agent_names(claude.clone(), vec!["ANTHROPIC_API_KEY".into()]);
        let env = policy.build(
            &AgentId::shell(),
            &["GITHUB_TOKEN".into(), "MISSING".into()],
            vars(&[("ORCA_STEP_ID", "a")]),
        );
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "AWS_SECRET_ACCESS_KEY",
                "FROM_FILE",
                "GITHUB_TOKEN",
                "LC_ALL",
                "ORCA_STEP_ID",
                "PATH"
            ]
        );
        assert!(env.contains(&("FROM_FILE".into(), "v 1".into())));
        let env = policy.build(&claude, &[], vec![]);
        assert!(env.iter().any(|(k, _)| k == "ANTHROPIC_API_KEY"));
        assert!(!env.iter().any(|(k, _)| k == "OPENAI_API_KEY"));
        let named = policy.named(&AgentId::shell(), &["MISSING".into()]);
        assert!(named.contains(&NamedVar {
            name: "MISSING".into(),
            from: EnvSource::Step,
            set: false
        }));
    }

    #[test]
    fn env_file_errors_name_the_line_not_the_value() {
        let e = parse_env_file("A=1\nnot a line sk-secret\n").unwrap_err();
        assert_eq!(e, "line 2: expected NAME=value");
        assert!(parse_env_file("ORCA_X=1").is_err());
    }
}
