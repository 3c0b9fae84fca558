//! The watcher beside the server: when a decision becomes pending it runs the `[notify]`
//! command (JSON on stdin, with the inbox link) and hands the same JSON to the built-in
//! delivery ([`Deliver`]: webhooks, email), and it applies default-deny expiry: a proposal
//! unanswered for longer than the expiry is rejected, a step decision stops its execution. A
//! notifier that fails or hangs is logged and killed after its time limit; no notification
//! ever blocks the watcher, the server or a run.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use orca_core::Decision;
use serde_json::json;
use tokio::io::AsyncWriteExt as _;
use tokio_util::sync::CancellationToken;

use crate::state::Web;
use crate::views::{self, InboxItem};

/// The actor recorded for a decision made by expiry.
pub const EXPIRY_ACTOR: &str = "expiry:default-deny";

/// The command hook of `[notify]` (the binary reads and validates the whole table, with its
/// webhooks and email, as `orca_notify::NotifyConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyConfig {
    /// Run with `sh -c`, the notification as JSON on stdin.
    pub command: String,
    /// Seconds it may take before it is killed (at least 1).
    pub timeout_secs: u64,
}

/// Built-in delivery of notifications (webhooks, email), chosen by the binary: every
/// notification [`send`] hands out, whatever its `event`, goes to every target it has.
pub trait Deliver: Send + Sync + std::fmt::Debug {
    /// Starts delivering `payload` and returns at once (delivery runs in tasks of its own,
    /// each bounded in time).
    fn deliver(&self, payload: &serde_json::Value);
    /// The server is stopping: deliveries under way are abandoned; the future ends when they
    /// have (promptly: it bounds its own wait).
    fn close(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// Sends one notification (`payload`, any `event`): the `[notify]` command in a task of its
/// own, and the built-in delivery. Returns at once. `key` names it in the log.
pub(crate) fn send(web: &Web, input: &serde_json::Value, key: String) {
    if let Some(deliver) = &web.settings.deliver {
        deliver.deliver(input);
    }
    if let Some(config) = web.settings.notify.clone() {
        let input = input.clone();
        let notifiers = web.notifiers.clone();
        tokio::spawn(async move {
            match notifiers.run(&config, &input).await {
                Ok(()) => tracing::info!("notified: {key}"),
                Err(e) => tracing::warn!("notifier: {e}"),
            }
        });
    }
}

/// The JSON a notifier receives.
#[must_use]
pub fn payload(item: &InboxItem, public_url: &str) -> serde_json::Value {
    let base = public_url.trim_end_matches('/');
    json!({
        "event": "decision_pending",
        "headline": item.headline(),
        "item": item,
        "inbox_url": format!("{base}/inbox"),
        "url": format!("{base}{}", item.path()),
    })
}

/// The process groups of the notifiers running now, killed when the server stops.
#[derive(Debug, Default)]
pub struct Notifiers {
    running: std::sync::Mutex<BTreeSet<u32>>,
}

impl Notifiers {
    fn set(&self) -> std::sync::MutexGuard<'_, BTreeSet<u32>> {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Kills every notifier still running (their whole process groups).
    pub async fn kill_all(&self) {
        let groups: Vec<u32> = std::mem::take(&mut *self.set()).into_iter().collect();
        for pgid in groups {
            kill_group(pgid).await;
        }
    }

    /// Runs the notifier once, its group registered while it runs.
    ///
    /// # Errors
    ///
    /// What went wrong, for the log.
    pub async fn run(
        &self,
        config: &NotifyConfig,
        input: &serde_json::Value,
    ) -> Result<(), String> {
        run_notifier(config, input, Some(self)).await
    }
}

/// Runs the notifier once; returns what happened (for the log). Bounded by its timeout.
///
/// # Errors
///
/// The command could not start, failed, or did not finish in time (then its process group is
/// killed).
pub async fn run_notifier(
    config: &NotifyConfig,
    input: &serde_json::Value,
    registry: Option<&Notifiers>,
) -> Result<(), String> {
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(&config.command)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Its own process group with the watchdog every child of orca gets: the group dies with
    // orca, however orca dies.
    orca_os::process_group::own_group(&mut command);
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", config.command))?;
    let group = child.id();
    if let (Some(r), Some(g)) = (registry, group) {
        r.set().insert(g);
    }
    let text = serde_json::to_vec(input).unwrap_or_default();
    let limit = Duration::from_secs(config.timeout_secs.max(1));
    let work = async {
        if let Some(mut stdin) = child.stdin.take() {
            // A notifier that does not read stdin is not an error.
            let _ = stdin.write_all(&text).await;
        }
        child.wait_with_output().await
    };
    let outcome = tokio::time::timeout(limit, work).await;
    // The leader has ended (or timed out): what is left of its group goes too — the watchdog,
    // and anything the notifier left running in the background.
    if let Some(pgid) = group {
        kill_group(pgid).await;
    }
    if let (Some(r), Some(g)) = (registry, group) {
        r.set().remove(&g);
    }
    match outcome {
        Ok(Ok(out)) if out.status.success() => Ok(()),
        Ok(Ok(out)) => Err(format!(
            "`{}` failed ({}): {}",
            config.command,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Ok(Err(e)) => Err(format!("`{}`: {e}", config.command)),
        // The child is dropped with the future (kill_on_drop ends it); what it started is in
        // its process group, which is killed too.
        Err(_) => Err(format!(
            "`{}` did not finish within {}s; killed",
            config.command,
            limit.as_secs()
        )),
    }
}

/// SIGKILLs a notifier's process group (it was started as its leader).
async fn kill_group(pgid: u32) {
    if !orca_os::process_group::kill_group(pgid) {
        tracing::debug!("the notifier's process group {pgid} was already gone");
    }
}

/// Watches the inbox until `shutdown`.
pub async fn watch(web: Arc<Web>, shutdown: CancellationToken) {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    loop {
        match views::inbox(&web.orca).await {
            Ok(items) => {
                let now: BTreeSet<String> = items.iter().map(InboxItem::key).collect();
                for item in &items {
                    policy_timers(&web, item).await;
                    if expire(&web, item).await {
                        continue;
                    }
                    if seen.contains(&item.key()) {
                        continue;
                    }
                    send(&web, &payload(item, &web.settings.public_url), item.key());
                }
                seen = now;
            }
            Err(e) => tracing::warn!("cannot read the inbox: {e}"),
        }
        tokio::select! {
            () = shutdown.cancelled() => {
                if let Some(deliver) = &web.settings.deliver {
                    deliver.close().await;
                }
                web.notifiers.kill_all().await;
                return;
            }
            () = tokio::time::sleep(web.settings.poll.max(Duration::from_millis(200))) => {}
        }
    }
}

/// Applies an approval policy's due reminders, escalations and expiry to a proposal, and
/// sends each to every notification target (its payload's `event` says which).
async fn policy_timers(web: &Web, item: &InboxItem) {
    let InboxItem::PlanApproval { plan_id, .. } = item else {
        return;
    };
    let now = time::OffsetDateTime::now_utc();
    let events = match web.orca.planning().apply_timers(*plan_id, now).await {
        Ok(events) => events,
        Err(e) => return tracing::warn!("plan {plan_id}: approval timers: {e}"),
    };
    for event in events {
        let mut input = event.payload(*plan_id);
        if let Some(obj) = input.as_object_mut() {
            let base = web.settings.public_url.trim_end_matches('/');
            obj.insert("url".to_owned(), json!(format!("{base}/plans/{plan_id}")));
        }
        // Every target: the command, webhooks, email.
        send(web, &input, format!("{} of plan {plan_id}", event.event()));
    }
}

/// Applies default-deny to an expired item; true when it did.
async fn expire(web: &Web, item: &InboxItem) -> bool {
    let Some(expiry) = web.settings.expiry else {
        return false;
    };
    let age = time::OffsetDateTime::now_utc() - item.since();
    if age < expiry {
        return false;
    }
    let reason = format!("no decision within {}s: default deny", expiry.as_secs());
    match item {
        InboxItem::PlanApproval { plan_id, .. } => {
            match web
                .orca
                .planning()
                .reject(*plan_id, EXPIRY_ACTOR, Some(reason))
                .await
            {
                Ok(_) => tracing::info!("plan {plan_id}: approval expired; rejected"),
                Err(e) => tracing::debug!("plan {plan_id}: expiry not applied: {e}"),
            }
        }
        InboxItem::StepDecision { execution_id, .. } => {
            match web
                .orca
                .executions()
                .decide(*execution_id, Decision::Stop, EXPIRY_ACTOR)
                .await
            {
                Ok(_) => {
                    tracing::info!("execution {execution_id}: decision expired; stopping");
                    if let Err(e) = web.runs.continue_run(*execution_id) {
                        tracing::warn!("execution {execution_id}: cannot apply the stop: {e}");
                    }
                }
                Err(e) => tracing::debug!("execution {execution_id}: expiry not applied: {e}"),
            }
        }
    }
    true
}
