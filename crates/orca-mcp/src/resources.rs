//! The server's handler: tools (from the router), and resources for plans and executions
//! (`orca://plans/<id>`, `orca://executions/<id>`).

use orca_core::{ExecutionId, PlanId};
use rmcp::model::{
    Implementation, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, tool_handler};
use serde_json::{Value, json};

use crate::server::{OrcaMcp, error_chain};
use crate::view;

const PLANS: &str = "orca://plans/";
const EXECUTIONS: &str = "orca://executions/";
const JSON: &str = "application/json";

const INSTRUCTIONS: &str = "orca runs plans that a human approved. Create a plan (plan_create from a document, \
plan_from_request through orca's planner), then a human approves it: plan_ask_human asks them in this host's UI \
when it can, otherwise give them the command it returns. No tool approves. Run an approved plan with plan_run, \
follow it with execution_watch, read results with step_output, and answer a failed step with decision_answer \
(retry or stop).";

#[tool_handler(router = self.router().clone())]
impl ServerHandler for OrcaMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("orca", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS.to_owned())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let orca = &self.inner.orca;
        let plans = orca.planning().list().await.map_err(|e| internal(&e))?;
        let execs = orca
            .executions()
            .list(None)
            .await
            .map_err(|e| internal(&e))?;
        let redactor = &self.inner.settings.redactor;
        let mut resources: Vec<Resource> = plans
            .items
            .iter()
            .map(|p| {
                Resource::new(format!("{PLANS}{}", p.plan_id), p.plan_id.to_string())
                    .with_title(redactor.redact(&format!("plan ({}): {}", p.stage, p.goal)))
                    .with_mime_type(JSON)
            })
            .collect();
        resources.extend(execs.items.iter().map(|e| {
            Resource::new(
                format!("{EXECUTIONS}{}", e.execution_id),
                e.execution_id.to_string(),
            )
            .with_title(format!(
                "execution ({}) of {}: {}/{} steps",
                e.stage, e.plan_id, e.completed, e.total
            ))
            .with_mime_type(JSON)
        }));
        Ok(ListResourcesResult {
            resources,
            ..Default::default()
        })
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult {
            resource_templates: vec![
                ResourceTemplate::new(format!("{PLANS}{{plan_id}}"), "plan")
                    .with_description("A plan: steps, stage, digest, approval (JSON).")
                    .with_mime_type(JSON),
                ResourceTemplate::new(format!("{EXECUTIONS}{{execution_id}}"), "execution")
                    .with_description(
                        "An execution: every task record and the pending decision (JSON).",
                    )
                    .with_mime_type(JSON),
            ],
            ..Default::default()
        })
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.clone();
        let value = self.resource(&uri).await?;
        let value = self.inner.settings.redactor.redact_strings(value);
        let text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| "null".to_owned());
        Ok(
            ReadResourceResult::new(vec![ResourceContents::text(text, uri).with_mime_type(JSON)])
                .into(),
        )
    }
}

impl OrcaMcp {
    async fn resource(&self, uri: &str) -> Result<Value, ErrorData> {
        let orca = &self.inner.orca;
        let not_found =
            |why: String| ErrorData::resource_not_found(why, Some(json!({ "uri": uri })));
        if let Some(id) = uri.strip_prefix(PLANS) {
            let id: PlanId = id.parse().map_err(|e| not_found(format!("{uri}: {e}")))?;
            let plan = orca
                .planning()
                .plan(id)
                .await
                .map_err(|e| not_found(format!("{uri}: {}", error_chain(&e))))?;
            return Ok(json!(plan));
        }
        if let Some(id) = uri.strip_prefix(EXECUTIONS) {
            let id: ExecutionId = id.parse().map_err(|e| not_found(format!("{uri}: {e}")))?;
            let snap = orca
                .executions()
                .get(id)
                .await
                .map_err(|e| not_found(format!("{uri}: {}", error_chain(&e))))?;
            let mut value = view::snapshot(&snap);
            value["decision"] = json!(view::pending_decision(&snap.execution.value));
            value["status"] = json!(self.status(&snap.execution.value).await.as_str());
            value["driver"] = json!(self.driver(&snap.execution.value).await);
            return Ok(value);
        }
        Err(not_found(format!(
            "{uri}: not an orca resource ({PLANS}<id> or {EXECUTIONS}<id>)"
        )))
    }
}

fn internal(e: &orca_services::ServiceError) -> ErrorData {
    ErrorData::internal_error(error_chain(e), None)
}
