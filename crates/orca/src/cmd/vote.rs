//! `orca policy vote PLAN --digest D`: an approver signs their approval on their own machine,
//! with their own key, under the policy their own config names, and prints it for an inbox
//! (`orca serve`) to record. It opens no store and no project: the inbox verifies it.

use orca_core::{Digest, PlanId};
use orca_services::policy::{SignedPolicy, SignedVote};
use orca_store::{Authority, keys};
use serde_json::json;

use crate::app::{out, out_json};
use crate::cli::Global;
use crate::exit::{CliError, Exit};
use crate::term::say;

pub(crate) fn vote(
    plan: &str,
    digest: &str,
    note: Option<String>,
    global: &Global,
) -> Result<Exit, CliError> {
    let plan_id: PlanId = plan.trim().parse().map_err(|e| {
        CliError::bad_input(format!(
            "PLAN `{plan}`: {e} (give the full id, as the inbox shows it)"
        ))
    })?;
    let digest: Digest = digest
        .trim()
        .parse()
        .map_err(|e| CliError::bad_input(format!("--digest `{digest}`: {e}")))?;
    let env = |k: &str| std::env::var(k).ok();
    let approval = crate::settings::layers::load(None, &env)?
        .map(|l| l.approval)
        .unwrap_or_default();
    let Some(path) = &approval.policy else {
        return Err(CliError::bad_input(
            "no approval policy is configured: name one in your user config ([approval] policy = \"…\", policy_admin_key = \"ed25519:…\")",
        ));
    };
    let key_path = crate::trust::key_path().ok_or_else(|| {
        CliError::bad_input(
            "there is no place for your signing key: set ORCA_SIGNING_KEY, or XDG_CONFIG_HOME or HOME",
        )
    })?;
    let key = keys::load(&key_path)
        .map_err(|e| CliError::bad_input(e.to_string()))?
        .ok_or_else(|| {
            CliError::bad_input(format!(
                "{}: you have no signing key yet (the one the policy names for you)",
                key_path.display()
            ))
        })?;
    let authority =
        crate::trust::with_policy_admins(Authority::new(Some(key.clone()), []), &approval)?;
    let signed = SignedPolicy::load(path, &authority)
        .map_err(|e| CliError::with(Exit::Tampered, e.to_string()))?;
    let public = key.public();
    let approver = signed.approver(&public).cloned().ok_or_else(|| {
        CliError::bad_input(format!(
            "your key {public} ({}) is not an approver's in the approval policy {} ({})",
            key_path.display(),
            signed.digest,
            path.display()
        ))
    })?;
    let vote = SignedVote::sign(
        &key,
        plan_id,
        digest.clone(),
        signed.digest.clone(),
        approver.clone(),
        note,
    );
    let line = serde_json::to_string(&vote)
        .map_err(|e| CliError::internal(format!("cannot encode the approval: {e}")))?;
    if global.json {
        out_json(&json!(vote));
    } else {
        out(&line);
        say(&format!(
            "signed {approver}'s approval of {plan_id} (digest {digest}) under the policy {} with {public}; paste the line above into the inbox's approval page (valid for an hour)",
            signed.digest
        ));
    }
    Ok(Exit::Ok)
}
