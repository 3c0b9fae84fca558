//! `orca audit verify`: every log, seal, approval and state file checked against the record
//! (ADR 0008, ADR 0013). Each problem is located: the file and, where there is one, the entry.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use orca_core::{ExecutionId, Plan, PlanId, PlanStage};
use orca_services::integrity::{self, Place};
use orca_services::{ExecutionService, approval};
use orca_store::audit::VerifyReport;
use orca_store::{AuditLogId, FileStore};
use serde_json::{Value, json};

use crate::app::{App, out, out_json};
use crate::exit::{CliError, Exit};

/// One located problem.
struct Problem {
    file: PathBuf,
    entry: Option<u64>,
    problem: String,
    /// Found by verifying a log (already printed with the log's line).
    printed: bool,
}

struct Report<'a> {
    app: &'a App,
    files: &'a FileStore,
    logs: Vec<Value>,
    problems: Vec<Problem>,
    /// Records in an older format that cannot be checked in full (not tampering).
    old: Vec<Value>,
}

impl Report<'_> {
    fn rel(&self, path: &Path) -> String {
        path.strip_prefix(self.app.root())
            .unwrap_or(path)
            .display()
            .to_string()
    }

    fn problem(&mut self, file: PathBuf, entry: Option<u64>, problem: impl Into<String>) {
        let problem = problem.into();
        // The same fault found twice (a listing, then a read of the same file) is one problem.
        let known = self.problems.iter().any(|p| {
            p.file == file
                && p.entry == entry
                && (problem.contains(&p.problem) || p.problem.contains(&problem))
        });
        if known {
            return;
        }
        self.problems.push(Problem {
            file,
            entry,
            problem,
            printed: false,
        });
    }

    /// Verifies one log (chain, seal, the seal's log id and signature); returns whether it is
    /// sealed, or `None` if it is tampered.
    async fn log(&mut self, log: AuditLogId) -> Result<Option<bool>, CliError> {
        let path = self.files.audit_path(log);
        let seal_path = self.files.seal_path(log);
        let report = self.app.store().verify(log).await?;
        self.logs.push(json!({
            "log": log, "file": self.rel(&path), "report": report,
        }));
        match report {
            VerifyReport::Intact { entries, sealed } => {
                if !self.app.json() {
                    out(&format!(
                        "{}  {log}: {}{}",
                        self.app.style().green("ok      "),
                        orca_core::plural::count(entries, "entry", "entries"),
                        if sealed { ", sealed" } else { "" }
                    ));
                }
                Ok(Some(sealed))
            }
            VerifyReport::Tampered { seq, problem } => {
                let file = if problem.starts_with("seal:") {
                    seal_path
                } else {
                    path
                };
                let text = crate::app::tamper_text(seq, &problem);
                if !self.app.json() {
                    out(&format!(
                        "{}  {log}: {}: {text}",
                        self.app.style().red("TAMPERED"),
                        self.rel(&file)
                    ));
                }
                self.problems.push(Problem {
                    file,
                    entry: Some(seq),
                    problem,
                    printed: true,
                });
                Ok(None)
            }
        }
    }

    /// A plan: its log (sealed once decided), its approval, its run register. Returns the
    /// executions the register names, with the entry that names each.
    async fn plan(&mut self, id: PlanId) -> Result<BTreeMap<ExecutionId, u64>, CliError> {
        let store = self.app.store().clone();
        let plan_log = AuditLogId::Plan { plan_id: id };
        let plan_path = self.files.plan_path(id);
        let plan = match store.plan(id).await {
            Ok(p) => Some(p.value),
            Err(e) => {
                self.problem(plan_path.clone(), None, format!("cannot be read: {e}"));
                None
            }
        };
        let sealed = if self.files.audit_path(plan_log).exists() {
            self.log(plan_log).await?
        } else {
            self.problem(
                self.files.audit_path(plan_log),
                None,
                "the plan's audit log is missing",
            );
            None
        };
        if let Some(plan) = &plan {
            let decided = matches!(plan.stage(), PlanStage::Approved | PlanStage::Rejected);
            if decided && sealed == Some(false) {
                self.problem(
                    self.files.seal_path(plan_log),
                    None,
                    format!(
                        "the plan is {} but its log is not sealed (the seal was deleted)",
                        plan.stage()
                    ),
                );
            }
            if let Plan::Approved(approved) = plan
                && self.files.audit_path(plan_log).exists()
                && let Err(p) = approval::check(store.as_ref(), approved).await?
            {
                let file = if p.problem.contains("content") {
                    plan_path.clone()
                } else {
                    self.files.audit_path(plan_log)
                };
                self.problem(
                    file,
                    p.entry,
                    format!("its approval does not hold: {}", p.problem),
                );
            } else if let Plan::Approved(approved) = plan
                && !self.app.json()
                && approved.approval().policy.is_some()
            {
                // Which signatures satisfied which rule, under the policy recorded then.
                let entries = store.entries(plan_log).await?;
                if let Some(Ok(x)) =
                    orca_services::policy::explain(&store.authority(), approved, &entries)
                {
                    for line in x.lines() {
                        out(&format!(
                            "policy    plan {id} (policy {}): {line}",
                            x.policy
                        ));
                    }
                }
            }
        }
        let runs = AuditLogId::Runs { plan_id: id };
        let mut registered = BTreeMap::new();
        if self.files.audit_path(runs).exists() && self.log(runs).await?.is_some() {
            for e in store.entries(runs).await? {
                if e.kind == orca_core::AuditKind::ExecutionAccepted
                    && let Err(problem) =
                        orca_services::acceptance::check_entry(&store.authority(), &e)
                {
                    self.problem(self.files.audit_path(runs), Some(e.seq), problem);
                }
                if e.kind == orca_core::AuditKind::ExecutionCreated
                    && let Some(x) = e
                        .data
                        .get("execution_id")
                        .and_then(Value::as_str)
                        .and_then(|s| s.parse::<ExecutionId>().ok())
                {
                    registered.insert(x, e.seq);
                }
            }
        }
        Ok(registered)
    }

    /// An execution: its files exist, its log verifies and is sealed once it ended, its state
    /// agrees with its log.
    async fn execution(
        &mut self,
        plan: PlanId,
        id: ExecutionId,
        registered: Option<u64>,
    ) -> Result<(), CliError> {
        let store = self.app.store().clone();
        let log = ExecutionService::log(plan, id);
        let header_path = self.files.execution_path(plan, id);
        let runs_path = self.files.audit_path(AuditLogId::Runs { plan_id: plan });
        if !header_path.exists() {
            let msg = match registered {
                Some(seq) => format!(
                    "the plan's run register records execution {id} at entry {seq}, but its state is gone (the execution was deleted)"
                ),
                None => format!("execution {id} has a log but no state"),
            };
            self.problem(header_path, registered, msg);
            if self.files.audit_path(log).exists() {
                self.log(log).await?;
            }
            return Ok(());
        }
        if registered.is_none() {
            self.problem(
                runs_path,
                None,
                format!("execution {id} is not in its plan's run register"),
            );
        }
        let sealed = if self.files.audit_path(log).exists() {
            self.log(log).await?
        } else {
            self.problem(
                self.files.audit_path(log),
                None,
                format!("the audit log of execution {id} is missing"),
            );
            None
        };
        let snapshot = match store.execution(id).await {
            Ok(s) => s,
            Err(e) => {
                self.problem(
                    header_path,
                    None,
                    format!("cannot be read: {}", crate::exit::chain(&e)),
                );
                return Ok(());
            }
        };
        // The execution ran the plan as approved.
        if let Ok(orca_store::Versioned {
            value: Plan::Approved(approved),
            ..
        }) = store.plan(plan).await
            && approved.digest() != &snapshot.execution.value.info().plan_digest
        {
            self.problem(
                header_path.clone(),
                None,
                format!(
                    "execution {id} names plan digest {}, but the approved plan's is {}",
                    snapshot.execution.value.info().plan_digest,
                    approved.digest()
                ),
            );
        }
        if snapshot.execution.value.stage().is_terminal() && sealed == Some(false) {
            self.problem(
                self.files.seal_path(log),
                None,
                format!(
                    "execution {id} ended {} but its log is not sealed (the seal was deleted)",
                    snapshot.execution.value.stage()
                ),
            );
        }
        if sealed.is_some() {
            let entries = store.entries(log).await?;
            for o in integrity::old_format(&snapshot, &entries) {
                let file = self.rel(&self.files.tasks_path(plan, id));
                let what = format!(
                    "old format: task `{}`'s result digest (entry written before digests covered the stored, redacted result) cannot be checked against the stored result",
                    o.step
                );
                if !self.app.json() {
                    out(&format!(
                        "{}  {file}: entry {}: {what}",
                        self.app.style().yellow("old     "),
                        o.entry
                    ));
                }
                self.old.push(json!({
                    "file": file, "entry": o.entry, "old_format": what,
                }));
            }
            for f in integrity::against_log(&snapshot, &entries) {
                let file = match &f.place {
                    Place::Header => header_path.clone(),
                    Place::Task(_) => self.files.tasks_path(plan, id),
                    Place::Log => self.files.audit_path(log),
                };
                self.problem(file, f.entry, f.to_string());
            }
        }
        Ok(())
    }
}

/// What `audit verify` checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuditScope {
    /// One execution's log, its plan's logs and its state files.
    Execution(String),
    /// Every log (plans and executions): `--all`, or no execution named.
    All,
}

impl AuditScope {
    /// `--all` and an execution are exclusive (clap refuses both); naming neither means all.
    pub(crate) fn from_args(exec: Option<String>, all: bool) -> Self {
        match exec {
            Some(e) if !all => Self::Execution(e),
            _ => Self::All,
        }
    }
}

/// `orca audit verify [EXEC | --all]`.
pub(crate) async fn verify(app: &App, scope: AuditScope) -> Result<Exit, CliError> {
    let files = app.files().clone();
    let mut report = Report {
        app,
        files: &files,
        logs: Vec::new(),
        problems: Vec::new(),
        old: Vec::new(),
    };
    let store = app.store().clone();
    let scope_all = scope == AuditScope::All;
    match scope {
        AuditScope::Execution(e) => {
            let id = crate::app::resolve_exec(app, &e).await?;
            let header = store.execution_header(id).await?;
            let plan = header.value.info().plan_id;
            let registered = report.plan(plan).await?;
            report
                .execution(plan, id, registered.get(&id).copied())
                .await?;
        }
        AuditScope::All => {
            let listing = store.list_plans().await?;
            for p in &listing.problems {
                report.problem(PathBuf::from(&p.location), None, p.message.clone());
            }
            let mut plans: BTreeSet<PlanId> = listing.items.iter().map(|s| s.plan_id).collect();
            let mut execs: BTreeSet<(PlanId, ExecutionId)> = BTreeSet::new();
            for log in store.audit_logs().await? {
                match log {
                    AuditLogId::Plan { plan_id } | AuditLogId::Runs { plan_id } => {
                        plans.insert(plan_id);
                    }
                    AuditLogId::Execution {
                        plan_id,
                        execution_id,
                    } => {
                        plans.insert(plan_id);
                        execs.insert((plan_id, execution_id));
                    }
                }
            }
            let listed = store.list_executions(None).await?;
            for p in &listed.problems {
                report.problem(PathBuf::from(&p.location), None, p.message.clone());
            }
            execs.extend(listed.items.iter().map(|s| (s.plan_id, s.execution_id)));
            for plan in plans {
                let registered = report.plan(plan).await?;
                for x in registered.keys() {
                    execs.insert((plan, *x));
                }
                let mine: Vec<ExecutionId> = execs
                    .iter()
                    .filter(|(p, _)| *p == plan)
                    .map(|(_, x)| *x)
                    .collect();
                for x in mine {
                    report
                        .execution(plan, x, registered.get(&x).copied())
                        .await?;
                }
            }
        }
    }
    // Records that went missing or back in time since orca last wrote them (the checkpoint
    // outside the project), and anything among them that is not a regular file.
    let mut notes = Vec::new();
    if scope_all {
        match crate::checkpoint::check(app).await? {
            crate::checkpoint::Outcome::Intact => {}
            crate::checkpoint::Outcome::NotPossible(why) => {
                notes.push(format!("the rollback check was not possible: {why}"));
            }
            crate::checkpoint::Outcome::RolledBack(found) => {
                for r in found {
                    report.problem(PathBuf::from(&r.log), None, r.problem);
                }
            }
        }
        for (path, what) in non_regular(&app.root().join(".orca")) {
            report.problem(path, None, what);
        }
    }
    let problems = std::mem::take(&mut report.problems);
    if app.json() {
        let mut items = report.logs.clone();
        items.extend(report.old.iter().cloned());
        for p in problems.iter().filter(|p| !p.printed) {
            items.push(json!({
                "file": report.rel(&p.file), "entry": p.entry, "problem": p.problem,
            }));
        }
        out_json(&Value::Array(items));
    } else {
        for p in &problems {
            if p.printed {
                continue;
            }
            let entry = p.entry.map(|e| format!("entry {e}: ")).unwrap_or_default();
            out(&format!(
                "{}  {}: {entry}{}",
                app.style().red("TAMPERED"),
                report.rel(&p.file),
                p.problem
            ));
        }
        for note in &notes {
            app.info(note);
        }
        if problems.is_empty() {
            app.info("every audit log, seal, approval and state file verifies");
        } else {
            crate::term::say(&format!(
                "audit: {} found",
                orca_core::plural::count(problems.len(), "problem", "problems")
            ));
        }
    }
    Ok(if problems.is_empty() {
        Exit::Ok
    } else {
        Exit::Tampered
    })
}

/// Everything under `dir` that is not a directory or a regular file (a symlink, a fifo, a
/// device): orca writes none, and never follows one.
fn non_regular(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = std::fs::read_link(&path)
                    .map(|t| t.display().to_string())
                    .unwrap_or_default();
                found.push((
                    path,
                    format!("is a symbolic link (to {target}); orca's records are regular files"),
                ));
            }
            Ok(meta) if meta.is_dir() => found.extend(non_regular(&path)),
            Ok(meta) if meta.is_file() => {}
            Ok(_) => found.push((
                path,
                "is not a regular file; orca's records are regular files".to_owned(),
            )),
            Err(e) => found.push((path, format!("cannot be read: {e}"))),
        }
    }
    found
}
