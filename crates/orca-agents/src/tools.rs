//! Composing tool hosts: the caller offers its `orca_*` tools and the workspace tools as one
//! [`ToolHost`].

use async_trait::async_trait;
use orca_core::{ToolAccess, ToolCall, ToolError, ToolHost, ToolSpec};
use serde_json::Value;

/// Several tool hosts offered as one. A call goes to the first host that offers the tool; a
/// tool no host offers is refused.
pub struct ToolSet<'a> {
    hosts: Vec<&'a dyn ToolHost>,
}

impl std::fmt::Debug for ToolSet<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSet")
            .field(
                "tools",
                &self.specs().into_iter().map(|s| s.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<'a> ToolSet<'a> {
    /// The hosts, in priority order.
    #[must_use]
    pub fn new(hosts: Vec<&'a dyn ToolHost>) -> Self {
        Self { hosts }
    }
}

#[async_trait]
impl ToolHost for ToolSet<'_> {
    fn specs(&self) -> Vec<ToolSpec> {
        let mut seen = std::collections::BTreeSet::new();
        self.hosts
            .iter()
            .flat_map(|h| h.specs())
            .filter(|s| seen.insert(s.name.clone()))
            .collect()
    }

    fn access(&self, name: &str) -> Option<ToolAccess> {
        self.hosts
            .iter()
            .find(|h| h.specs().iter().any(|s| s.name == name))
            .and_then(|h| h.access(name))
    }

    async fn call(&self, call: &ToolCall) -> Result<Value, ToolError> {
        for host in &self.hosts {
            if host.specs().iter().any(|s| s.name == call.name) {
                return host.call(call).await;
            }
        }
        tracing::warn!(tool = %call.name, "tool refused: not offered to this agent");
        Err(ToolError::new(format!(
            "tool `{}` is not granted to this agent",
            call.name
        )))
    }
}

#[cfg(test)]
mod tests {
    use orca_core::NoTools;
    use serde_json::json;

    use super::*;
    use crate::WorkspaceTools;

    #[tokio::test]
    async fn dispatches_to_the_host_offering_the_tool() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "A").unwrap();
        let ws = WorkspaceTools::new(dir.path(), &["read_file".to_owned()]).unwrap();
        let set = ToolSet::new(vec![&NoTools, &ws]);
        assert_eq!(set.specs().len(), 1);
        let call = |name: &str| ToolCall {
            id: "1".into(),
            name: name.into(),
            arguments: json!({"path": "a.txt"}),
        };
        assert_eq!(set.call(&call("read_file")).await.unwrap(), json!("A"));
        assert!(
            set.call(&call("write_file"))
                .await
                .unwrap_err()
                .message
                .contains("not granted")
        );
    }
}
