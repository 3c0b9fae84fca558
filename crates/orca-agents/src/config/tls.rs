//! The config's answers about reaching model servers (ADR 0025): each agent's `ca_file` and
//! whether it runs on the default backend (whose local Ollama fallback is spoken natively).

use std::path::{Path, PathBuf};

use orca_core::AgentId;

use super::Config;

impl Config {
    /// Whether `agent` runs on the default backend (no `backend` and no `api` for it or in
    /// `[defaults]`): then the local Ollama fallback speaks Ollama's native API.
    #[must_use]
    pub fn on_default_backend(&self, agent: &AgentId) -> bool {
        let merged = self
            .agents
            .get(agent)
            .map_or_else(|| self.defaults.clone(), |s| s.merged_over(&self.defaults));
        merged.backend.is_none() && merged.api.is_none()
    }

    /// The `ca_file` of `agent` and the setting that names it: its own, else `[defaults]`'s,
    /// else `[tls]`'s. A relative path is taken from `root`, `~/` from `HOME`.
    #[must_use]
    pub fn ca_file_for(
        &self,
        agent: &AgentId,
        root: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<(PathBuf, String)> {
        let (path, setting) = self
            .agents
            .get(agent)
            .and_then(|s| s.ca_file.clone())
            .map(|p| (p, format!("agents.{agent}.ca_file")))
            .or_else(|| {
                self.defaults
                    .ca_file
                    .clone()
                    .map(|p| (p, "defaults.ca_file".to_owned()))
            })
            .or_else(|| {
                self.tls_ca_file
                    .clone()
                    .map(|p| (p, "tls.ca_file".to_owned()))
            })?;
        let path = match (path.strip_prefix("~"), env("HOME")) {
            (Ok(rest), Some(home)) => PathBuf::from(home).join(rest),
            _ => root.join(path),
        };
        Some((path, setting))
    }
}
