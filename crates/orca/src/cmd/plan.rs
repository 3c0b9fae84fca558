//! `orca plan …`: create from a file, list, show, approve, reject, request changes.

use std::path::Path;
use std::sync::Arc;

use orca_core::PlanId;
use orca_services::hitl::render_plan;
use orca_services::{NoHuman, Orca};
use serde_json::json;

use crate::app::{App, out, out_json, unreachable_init, user};
use crate::cli::{PlanCommand, ShowFormat};
use crate::exit::{CliError, Exit};
use crate::render;
use crate::term::say;

pub(crate) async fn plan(app: &App, cmd: PlanCommand) -> Result<Exit, CliError> {
    let orca = app.orca(Arc::new(NoHuman));
    let p = &orca.planning();
    match cmd {
        PlanCommand::Create { path, file } => {
            let file = path
                .or(file)
                .ok_or_else(|| CliError::bad_input("plan create: name the plan document"))?;
            let proposal = create_from_file(&orca, &file).await?;
            if app.json {
                out_json(
                    &json!({ "plan_id": proposal.id(), "stage": "proposal", "steps": proposal.content().steps.len() }),
                );
            } else if app.quiet {
                crate::app::out_id(&proposal.id());
            } else {
                out(&format!(
                    "created proposal {} ({})",
                    proposal.id(),
                    orca_core::plural::count(proposal.content().steps.len(), "step", "steps"),
                ));
                let id = proposal.id();
                app.hint(&format!(
                    "next: orca plan show {id} · orca plan approve {id} · orca run {id} --yes"
                ));
            }
        }
        PlanCommand::List { filter } => {
            let filter = crate::cmd::filter::Filter::new(
                &filter,
                &["draft", "proposal", "approved", "rejected"],
            )?;
            let mut listing = p.list().await?;
            listing.items = filter.apply(listing.items, |i| i.stage.to_string(), |i| i.created_at);
            for problem in &listing.problems {
                say(&format!(
                    "warning: {}: {}",
                    problem.location, problem.message
                ));
            }
            if app.json {
                out_json(&json!(listing.items));
            } else {
                out(&render::plan_list(&listing.items, listing.problems.len()));
            }
        }
        PlanCommand::Show {
            plan,
            graph,
            format,
        } => {
            let id = p.resolve(&plan).await?;
            let plan = p.plan(id).await?;
            let policy = app.agents.env_policy();
            if format != ShowFormat::Text {
                out(&match format {
                    ShowFormat::Mermaid => crate::plan_doc::mermaid(plan.content()),
                    _ => crate::plan_doc::dot(plan.content()),
                });
            } else if app.json {
                // `plan_id`, as in every other output (the stored document says `id`).
                let mut value = crate::app::renamed(json!(plan), "id", "plan_id");
                let budgets = crate::budget_view::json(&orca, &plan).await;
                if let Some(obj) = value.as_object_mut() {
                    obj.insert(
                        "step_env".to_owned(),
                        crate::settings::step_env::step_env_json(&plan, policy),
                    );
                    if let orca_core::Plan::Approved(a) = &plan {
                        obj.insert(
                            "approved_through_agent_host".to_owned(),
                            json!(orca_services::approval::through_agent_host(
                                &a.approval().by
                            )),
                        );
                    }
                    if let Some(tally) = p.policy_tally(&plan) {
                        obj.insert("approval_policy".to_owned(), json!(tally));
                    }
                    if !budgets.is_null() {
                        obj.insert("budgets".to_owned(), budgets);
                    }
                }
                out_json(&value);
            } else {
                let mut text = render_plan(&plan);
                text.push('\n');
                text.push_str(&render::plan_decision(&plan));
                if let Some(tally) = p.policy_tally(&plan) {
                    text.push_str(&crate::cmd::policy::tally_text(&tally));
                    text.push('\n');
                }
                text.push_str(&crate::settings::step_env::step_env_text(&plan, policy));
                text.push_str(&crate::budget_view::text(&orca, &plan).await);
                if graph {
                    text.push('\n');
                    text.push_str(&render::plan_graph(&plan));
                }
                out(&text);
            }
        }
        PlanCommand::Validate { .. } | PlanCommand::Schema => return unreachable_init(),
        PlanCommand::Approve { plan, note, digest } => {
            let shown = digest
                .map(|d| {
                    d.parse::<orca_core::Digest>()
                        .map_err(|e| CliError::bad_input(format!("--digest: {e}")))
                })
                .transpose()?;
            let id = p.resolve(&plan).await?;
            // Approved already: the state asked for holds (unless another content was meant).
            if let orca_core::Plan::Approved(a) = p.plan(id).await? {
                let approval = a.approval();
                if let Some(meant) = shown.as_ref().filter(|d| **d != approval.digest) {
                    return Err(CliError::with(
                        Exit::Conflict,
                        format!(
                            "plan {id} is approved with digest {}, not {meant}: nothing was approved",
                            approval.digest
                        ),
                    ));
                }
                out(&format!(
                    "plan {id} is already approved (by {}, digest {})",
                    approval.by, approval.digest
                ));
                app.hint(&format!("next: orca run {id}"));
                return Ok(Exit::Ok);
            }
            // On a terminal, what is approved is what is shown now: the content and its digest,
            // bound like `--digest`. Without a terminal (scripts), `--digest` binds it.
            let shown = match shown {
                None if crate::term::interactive() && !app.json => {
                    let current = p.plan(id).await?;
                    let digest = current.content().digest();
                    say(&render_plan(&current));
                    if !crate::term::confirm(&format!(
                        "approve exactly this content (digest {digest})?"
                    )) {
                        say(&format!("not approved: {id} stays a proposal"));
                        return Ok(Exit::Ok);
                    }
                    Some(digest)
                }
                other => other,
            };
            if p.policy().is_some() {
                return approve_under_policy(app, p, id, note, shown.as_ref()).await;
            }
            let approved = match &shown {
                Some(shown) => p.approve_shown(id, &user(), note, shown).await?,
                None => p.approve(id, &user(), note).await?,
            };
            decided(
                app,
                id,
                "approved",
                &format!("approved {id} (digest {})", approved.digest()),
            );
            app.hint(&format!("next: orca run {id}"));
        }
        PlanCommand::Reject { plan, reason } => {
            let id = p.resolve(&plan).await?;
            p.reject(id, &user(), reason).await?;
            decided(app, id, "rejected", &format!("rejected {id}"));
        }
        PlanCommand::Revise { plan, file } => {
            let previous = p.resolve(&plan).await?;
            return crate::cmd::revise::revise(app, &orca, previous, &file).await;
        }
        PlanCommand::RequestChanges { plan, feedback } => {
            let id = p.resolve(&plan).await?;
            p.request_changes(id, &user(), &feedback).await?;
            decided(
                app,
                id,
                "draft",
                &format!("{id} is a draft again, with your feedback for the planner"),
            );
        }
    }
    Ok(Exit::Ok)
}

/// `plan approve` under an approval policy: this user's approval, signed with their key; the
/// plan is approved when the policy is satisfied.
async fn approve_under_policy(
    app: &App,
    p: &orca_services::PlanningService,
    id: PlanId,
    note: Option<String>,
    shown: Option<&orca_core::Digest>,
) -> Result<Exit, CliError> {
    use orca_services::policy::{PolicyDecision, summaries};
    match p.approve_as_approver(id, note, shown).await? {
        PolicyDecision::Approved(approved, tally) => {
            if app.json {
                out_json(&json!({ "plan_id": id, "stage": "approved", "policy": tally }));
            } else {
                out(&format!(
                    "approved {id} (digest {}): the policy is satisfied ({})",
                    approved.digest(),
                    summaries(&tally)
                ));
                app.hint(&format!("next: orca run {id}"));
            }
        }
        PolicyDecision::Pending(_, tally) => {
            if app.json {
                out_json(&json!({ "plan_id": id, "stage": "proposal", "policy": tally }));
            } else {
                out(&format!(
                    "your approval of {id} is recorded; it is not approved yet: {}",
                    summaries(&tally)
                ));
            }
        }
        _ => {}
    }
    Ok(Exit::Ok)
}

fn decided(app: &App, id: PlanId, stage: &str, human: &str) {
    if app.json {
        out_json(&json!({ "plan_id": id, "stage": stage }));
    } else {
        out(human);
    }
}

pub(crate) async fn create_from_file(
    orca: &Orca,
    file: &Path,
) -> Result<orca_core::ProposalPlan, CliError> {
    create_revision(orca, file, None).await
}

/// The plan for `orca run FILE`: a proposal already holding exactly the document's content
/// (a run that waited for approval, run again), else a new proposal. `true`: it is new.
pub(crate) async fn proposal_for_run(orca: &Orca, file: &Path) -> Result<(PlanId, bool), CliError> {
    let text = crate::plan_doc::read_plan_file(file)?;
    let content = crate::plan_doc::content_of(file, &text)?;
    let digest = content.digest();
    let listing = orca.planning().list().await?;
    for summary in listing.items.iter().filter(|s| {
        s.stage == orca_core::PlanStage::Proposal
            && s.goal == content.goal
            && s.steps == content.steps.len()
    }) {
        if let Ok(plan) = orca.planning().plan(summary.plan_id).await
            && plan.content().digest() == digest
        {
            return Ok((summary.plan_id, false));
        }
    }
    Ok((create_from_file(orca, file).await?.id(), true))
}

/// A proposal from a plan document, superseding `previous` if given; nothing is written if
/// the document is unreadable or invalid.
pub(crate) async fn create_revision(
    orca: &Orca,
    file: &Path,
    previous: Option<PlanId>,
) -> Result<orca_core::ProposalPlan, CliError> {
    let text = crate::plan_doc::read_plan_file(file)?;
    let content = crate::plan_doc::content_of(file, &text)?;
    let proposal = orca
        .planning()
        .create_proposal(content, previous)
        .await
        .map_err(|e| {
            CliError::bad_input(format!("{}: {}", file.display(), crate::exit::chain(&e)))
        })?;
    crate::ids::learn_plan(proposal.id());
    Ok(proposal)
}
