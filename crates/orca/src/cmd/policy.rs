//! `orca policy …`: sign an approval policy, show the one in use, check what a plan needs,
//! apply the timers of pending proposals.

use std::path::Path;
use std::sync::Arc;

use orca_core::Plan;
use orca_core::policy::{Outcome, Tally};
use orca_services::NoHuman;
use orca_services::policy::{PolicyContext, SignedPolicy, summaries};
use orca_store::keys;
use orca_store::signing::policy_statement;
use serde_json::json;

use crate::app::{App, out, out_json};
use crate::cli::{Global, PolicyCommand};
use crate::exit::{CliError, Exit};

/// `orca policy sign FILE [--key KEY]`: checks the policy's content, then writes `FILE.sig`.
pub(crate) fn sign(file: &Path, key: Option<&Path>, global: &Global) -> Result<Exit, CliError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::bad_input(format!("{}: {e}", file.display())))?;
    orca_services::policy::parse(&text)
        .map_err(|e| CliError::bad_input(format!("{}: {e}", file.display())))?;
    let key = match key {
        Some(path) => keys::load(path)
            .map_err(|e| CliError::bad_input(e.to_string()))?
            .ok_or_else(|| CliError::bad_input(format!("{}: no such key file", path.display())))?,
        None => {
            let path = crate::trust::key_path().ok_or_else(|| {
                CliError::bad_input("there is no signing key: pass --key or set ORCA_SIGNING_KEY")
            })?;
            keys::load_or_create(&path)
                .map_err(|e| CliError::bad_input(e.to_string()))?
                .0
        }
    };
    let digest = orca_core::Digest::of_bytes(text.as_bytes());
    let signature = key.sign(&policy_statement(&digest));
    let sig_path = orca_services::policy::signature_path(file);
    let body = serde_json::to_string(&signature)
        .map_err(|e| CliError::bad_input(format!("{}: {e}", sig_path.display())))?;
    std::fs::write(&sig_path, format!("{body}\n"))
        .map_err(|e| CliError::bad_input(format!("{}: {e}", sig_path.display())))?;
    if global.json {
        out_json(
            &json!({ "policy": file, "digest": digest, "signature": sig_path, "admin_key": signature.key }),
        );
    } else {
        out(&format!(
            "signed {} ({digest}) with {} into {}\nevery approver's config trusts it with: [approval] policy_admin_key = \"{}\"",
            file.display(),
            signature.key,
            sig_path.display(),
            signature.key
        ));
    }
    Ok(Exit::Ok)
}

fn configured(app: &App) -> Result<&PolicyContext, CliError> {
    app.policy.as_deref().ok_or_else(|| {
        CliError::bad_input(
            "no approval policy is configured: name one in the user's config ([approval] policy = \"…\", policy_admin_key = \"ed25519:…\")",
        )
    })
}

pub(crate) async fn policy(app: &App, cmd: PolicyCommand) -> Result<Exit, CliError> {
    match cmd {
        PolicyCommand::Sign { .. } | PolicyCommand::Vote { .. } => crate::app::unreachable_init(),
        PolicyCommand::Show => {
            let ctx = configured(app)?;
            show(app, &ctx.signed);
            Ok(Exit::Ok)
        }
        PolicyCommand::Check { plan } => check(app, &plan).await,
        PolicyCommand::Timers => timers(app).await,
    }
}

fn show(app: &App, signed: &SignedPolicy) {
    if app.json {
        out_json(&json!({
            "digest": signed.digest, "admin_key": signed.signature.key, "policy": signed.policy,
        }));
        return;
    }
    let mut text = format!(
        "approval policy {} (signed by {})\napprovers:\n",
        signed.digest, signed.signature.key
    );
    for (name, key) in &signed.policy.approvers {
        text.push_str(&format!("  {name}  {key}\n"));
    }
    for rule in &signed.policy.rules {
        let from = rule.from.as_ref().map_or_else(
            || "any approver".to_owned(),
            |f| {
                f.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        );
        text.push_str(&format!(
            "rule {}: {} of {{{from}}} when {}\n",
            rule.name,
            rule.require,
            serde_json::to_string(&rule.when).unwrap_or_default()
        ));
    }
    out(text.trim_end());
}

/// What a tally says, one line per rule and the outcome.
pub(crate) fn tally_text(tally: &Tally) -> String {
    let outcome = match &tally.outcome {
        Outcome::Approved => "satisfied".to_owned(),
        Outcome::Pending => "waiting for approvals".to_owned(),
        Outcome::Rejected { by } => format!("rejected by {by}"),
    };
    format!("approval policy: {} — {outcome}", summaries(tally))
}

async fn check(app: &App, target: &str) -> Result<Exit, CliError> {
    let ctx = configured(app)?;
    let orca = app.orca(Arc::new(NoHuman));
    let p = orca.planning();
    let path = Path::new(target);
    let (content, plan) = if path.is_file() {
        let text = orca_store::bounded::read_text(path, 64 << 20)
            .map_err(|e| CliError::bad_input(format!("{}: {e}", path.display())))?;
        let content = orca_core::PlanContent::from_json(&text)
            .map_err(|e| CliError::bad_input(format!("{}: {e}", path.display())))?;
        (content, None)
    } else {
        let id = p.resolve(target).await?;
        let plan = p.plan(id).await?;
        (plan.content().clone(), Some(plan))
    };
    let reqs = ctx.around.requirements(&ctx.signed.policy, &content);
    let tally = plan.as_ref().and_then(|plan| p.policy_tally(plan));
    let explained = match &plan {
        Some(Plan::Approved(a)) => {
            let entries = app
                .store()
                .entries(orca_store::AuditLogId::Plan { plan_id: a.id() })
                .await?;
            orca_services::policy::explain(&app.store().authority(), a, &entries)
        }
        _ => None,
    };
    if app.json {
        out_json(&json!({
            "policy": ctx.signed.digest,
            "requirements": reqs,
            "tally": tally,
            "approved_under": explained.as_ref().and_then(|e| e.as_ref().ok()).map(|e| json!({"policy": e.policy, "tally": e.tally})),
        }));
        return Ok(Exit::Ok);
    }
    let mut text = format!("approval policy {}\n", ctx.signed.digest);
    for r in &reqs {
        let from = r
            .from
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        text.push_str(&format!(
            "rule {} matches ({}): needs {} of {{{from}}}",
            r.rule,
            r.because.join(", "),
            r.need
        ));
        if let (Some(after), false) = (r.escalate_after_secs, r.escalate_to.is_empty()) {
            let to = r
                .escalate_to
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            text.push_str(&format!("; after {after}s also {{{to}}}"));
        }
        if let Some(expire) = r.expire_after_secs {
            text.push_str(&format!("; unanswered after {expire}s: rejected"));
        }
        text.push('\n');
    }
    if let Some(t) = &tally {
        text.push_str(&tally_text(t));
        text.push('\n');
    }
    match explained {
        Some(Ok(e)) => {
            text.push_str(&format!("approved under policy {}:\n", e.policy));
            for line in e.lines() {
                text.push_str(&format!("  {line}\n"));
            }
        }
        Some(Err((entry, problem))) => {
            text.push_str(&format!(
                "its approval does not hold (plan log entry {entry}): {problem}\n"
            ));
        }
        None => {}
    }
    out(text.trim_end());
    Ok(Exit::Ok)
}

/// Applies every pending proposal's due timers and sends each through the notifier.
async fn timers(app: &App) -> Result<Exit, CliError> {
    configured(app)?;
    let (_, notify) = crate::cmd::serve::sections(app)?;
    // Every target of `[notify]`: the command, webhooks, email.
    let (command, notifier) = crate::cmd::serve::notifiers(app, notify.as_ref())?;
    let orca = app.orca(Arc::new(NoHuman));
    let p = orca.planning();
    let now = time::OffsetDateTime::now_utc();
    let mut sent = Vec::new();
    for summary in p.list().await?.items {
        if summary.stage != orca_core::PlanStage::Proposal {
            continue;
        }
        for event in p.apply_timers(summary.plan_id, now).await? {
            let payload = event.payload(summary.plan_id);
            if let Some(config) = &command
                && let Err(e) = orca_web::notify::run_notifier(config, &payload, None).await
            {
                crate::term::say(&format!("warning: notifier: {e}"));
            }
            if let Some(notifier) = &notifier {
                notifier.deliver(&payload);
            }
            sent.push(payload);
        }
    }
    if let Some(notifier) = &notifier {
        // Delivered (or given up, each attempt bounded) before the command ends.
        notifier.finish(notifier.retry().worst_case()).await;
    }
    if app.json {
        out_json(&json!(sent));
    } else if sent.is_empty() {
        out("no reminder, escalation or expiry was due");
    } else {
        for s in &sent {
            out(&s.to_string());
        }
    }
    Ok(Exit::Ok)
}
