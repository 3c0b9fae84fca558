//! The storage port.

use std::any::Any;
use std::fmt;

use async_trait::async_trait;
use orca_core::{
    Execution, ExecutionId, ExecutionStage, Holder, Plan, PlanId, PlanStage, StepId, Task,
};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::audit::{AuditEntry, NewAuditEntry, Seal, VerifyReport};
use crate::error::StoreError;

/// The revision of a stored document: 1 when created, +1 on every write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Revision(pub u64);

impl Revision {
    /// The revision of a newly created document.
    pub const FIRST: Self = Self(1);

    /// The next revision.
    #[must_use]
    pub const fn next(self) -> Self {
        Self(self.0.saturating_add(1))
    }

    /// The next revision, or `None` at the last one (a document cannot change again: its
    /// revision never wraps).
    #[must_use]
    pub const fn checked_next(self) -> Option<Self> {
        match self.0.checked_add(1) {
            Some(n) => Some(Self(n)),
            None => None,
        }
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A value with the revision it was read at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    /// The value.
    pub value: T,
    /// Its revision.
    pub revision: Revision,
}

/// One line of `plan list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanSummary {
    /// The plan.
    pub plan_id: PlanId,
    /// Its goal.
    pub goal: String,
    /// Its stage.
    pub stage: PlanStage,
    /// How many steps.
    pub steps: usize,
    /// How many executions it has.
    pub executions: usize,
    /// When it was created.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// The plan it supersedes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supersedes: Option<PlanId>,
}

/// One line of `exec list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionSummary {
    /// The execution.
    pub execution_id: ExecutionId,
    /// Its plan.
    pub plan_id: PlanId,
    /// Its stage.
    pub stage: ExecutionStage,
    /// Tasks completed.
    pub completed: usize,
    /// All tasks.
    pub total: usize,
    /// Whether a human decision is pending.
    pub awaiting_decision: bool,
    /// When it was created.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// A stored item that could not be listed; the rest of the listing is still returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListingProblem {
    /// The file or key.
    pub location: String,
    /// What is wrong.
    pub message: String,
}

/// A listing, newest first, with the items that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing<T> {
    /// The items, newest first.
    pub items: Vec<T>,
    /// What could not be read.
    pub problems: Vec<ListingProblem>,
}

/// An execution with all its tasks, each at its revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionSnapshot {
    /// The execution header.
    pub execution: Versioned<Execution>,
    /// The tasks, in plan order.
    pub tasks: Vec<Versioned<Task>>,
}

impl ExecutionSnapshot {
    /// The tasks without revisions, in plan order.
    #[must_use]
    pub fn task_values(&self) -> Vec<Task> {
        self.tasks.iter().map(|t| t.value.clone()).collect()
    }

    /// The task of a step.
    #[must_use]
    pub fn task(&self, step: &StepId) -> Option<&Versioned<Task>> {
        self.tasks.iter().find(|t| t.value.step_id() == step)
    }
}

/// Who held a lease, since when, and whether that process is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseInfo {
    /// The holder.
    pub holder: Holder,
    /// When it was acquired.
    #[serde(with = "time::serde::rfc3339")]
    pub acquired_at: OffsetDateTime,
    /// The holder's process is gone: the lease may be taken over.
    pub stale: bool,
    /// When the holder last renewed it (its heartbeat), if it ever did.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub renewed_at: Option<OffsetDateTime>,
}

impl LeaseInfo {
    /// When the holder was last known alive: its last renewal, or when it took the lease.
    #[must_use]
    pub fn last_seen(&self) -> OffsetDateTime {
        self.renewed_at.unwrap_or(self.acquired_at)
    }
}

/// An exclusive hold on an execution, released when dropped.
pub struct Lease {
    execution: ExecutionId,
    info: LeaseInfo,
    /// What the backend needs to keep the lease (an open locked file, a registry entry…).
    _guard: Box<dyn Any + Send + Sync>,
    /// The stale lease this one took over, if any.
    took_over: Option<LeaseInfo>,
}

impl Lease {
    /// Made by backends.
    #[must_use]
    pub fn new(
        execution: ExecutionId,
        info: LeaseInfo,
        guard: Box<dyn Any + Send + Sync>,
        took_over: Option<LeaseInfo>,
    ) -> Self {
        Self {
            execution,
            info,
            _guard: guard,
            took_over,
        }
    }

    /// The execution held.
    #[must_use]
    pub const fn execution(&self) -> ExecutionId {
        self.execution
    }

    /// This lease's holder and time.
    #[must_use]
    pub const fn info(&self) -> &LeaseInfo {
        &self.info
    }

    /// The stale lease this one replaced (its holder process had died).
    #[must_use]
    pub const fn took_over(&self) -> Option<&LeaseInfo> {
        self.took_over.as_ref()
    }

    /// What the backend keeps (for the backend's own `renew_lease`).
    #[must_use]
    pub fn backend_guard(&self) -> &(dyn Any + Send + Sync) {
        self._guard.as_ref()
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("execution", &self.execution)
            .field("info", &self.info)
            .field("took_over", &self.took_over)
            .finish_non_exhaustive()
    }
}

/// Exclusive hold on named resources (plan step locks), across executions and processes;
/// released when dropped.
pub struct ResourceGuard {
    names: Vec<String>,
    _guard: Box<dyn Any + Send + Sync>,
    fds: Vec<i32>,
}

impl ResourceGuard {
    /// Made by backends.
    #[must_use]
    pub fn new(names: Vec<String>, guard: Box<dyn Any + Send + Sync>) -> Self {
        Self {
            names,
            _guard: guard,
            fds: Vec::new(),
        }
    }

    /// Names the open file descriptors whose locks make up the hold (a backend with
    /// descriptor-based locks): a step's processes inherit them, so the resources stay held
    /// until the last of those processes is gone, even if the runner dies (ADR 0010).
    #[must_use]
    pub fn with_fds(mut self, fds: Vec<i32>) -> Self {
        self.fds = fds;
        self
    }

    /// The descriptors holding the locks (see [`ResourceGuard::with_fds`]); empty if none.
    #[must_use]
    pub fn fds(&self) -> &[i32] {
        &self.fds
    }

    /// The resources held.
    #[must_use]
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

impl fmt::Debug for ResourceGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceGuard")
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

/// Plans.
#[async_trait]
pub trait PlanStore: Send + Sync {
    /// Stores a new plan at [`Revision::FIRST`].
    async fn create_plan(&self, plan: &Plan) -> Result<Revision, StoreError>;

    /// Reads a plan.
    async fn plan(&self, id: PlanId) -> Result<Versioned<Plan>, StoreError>;

    /// Replaces a plan if it is still at `expected`; returns the new revision.
    /// Approved and rejected plans are immutable: updating one is [`StoreError::Immutable`].
    async fn update_plan(&self, plan: &Plan, expected: Revision) -> Result<Revision, StoreError>;

    /// Every plan, newest first; unreadable ones are reported, not fatal.
    async fn list_plans(&self) -> Result<Listing<PlanSummary>, StoreError>;
}

/// Which of the two writes of a [`TaskTransition`] a backend that writes them apart makes
/// first (ADR 0013, ADR 0014). A backend that writes both in one durable write ignores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOrder {
    /// The task's new state, then the entry (a claim: the state is what the entry points at).
    StateFirst,
    /// The entry, then the state (a reply: a task record never holds a result the log lacks).
    EntryFirst,
}

/// A running task whose lease expired, as [`ExecutionStore::expired_tasks`] read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredTask {
    /// Its step.
    pub step: StepId,
    /// The task's revision when its lease was seen expired.
    pub revision: Revision,
}

/// A task transition and the audit entry that records it, written together by
/// [`ExecutionStore::update_task_with_audit`].
#[derive(Debug, Clone)]
pub struct TaskTransition {
    /// The execution's plan (its log is `AuditLogId::Execution { plan_id, execution_id }`).
    pub plan_id: PlanId,
    /// The execution.
    pub execution_id: ExecutionId,
    /// The task's new state.
    pub task: Task,
    /// The revision the task must still be at (compare-and-swap).
    pub expected: Revision,
    /// The entry, appended to the execution's log.
    pub entry: NewAuditEntry,
    /// The order of the two writes for a backend that writes them apart.
    pub order: WriteOrder,
}

impl TaskTransition {
    /// The execution's audit log.
    #[must_use]
    pub const fn log(&self) -> AuditLogId {
        AuditLogId::Execution {
            plan_id: self.plan_id,
            execution_id: self.execution_id,
        }
    }
}

/// What [`ExecutionStore::update_task_with_audit`] (or [`ExecutionStore::end_execution`])
/// wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Transitioned {
    /// The task's (or the execution header's) new revision.
    pub revision: Revision,
    /// The entry as appended (its `seq` is the parent of what happens under it).
    pub entry: AuditEntry,
}

/// Executions and their tasks.
#[async_trait]
pub trait ExecutionStore: Send + Sync {
    /// A document as this store writes it: the free text of an execution header or a task
    /// record with secrets redacted (ADR 0011), identifiers, tags and times kept. A digest over
    /// something the store keeps (a task's result) is taken of this form, so it checks against
    /// what is read back and no record holds the digest of a secret. Default: unchanged, for a
    /// store that keeps documents as given; a store that redacts must override it.
    fn stored_form(&self, document: serde_json::Value) -> serde_json::Value {
        document
    }

    /// Stores a new execution and its tasks, all at [`Revision::FIRST`].
    async fn create_execution(
        &self,
        execution: &Execution,
        tasks: &[Task],
    ) -> Result<(), StoreError>;

    /// Reads an execution with its tasks.
    async fn execution(&self, id: ExecutionId) -> Result<ExecutionSnapshot, StoreError>;

    /// Reads only the execution header (cheap: no task records). Backends should override the
    /// default, which reads the whole snapshot.
    async fn execution_header(&self, id: ExecutionId) -> Result<Versioned<Execution>, StoreError> {
        Ok(self.execution(id).await?.execution)
    }

    /// Reads one task record (cheap: O(task)). Backends should override the default, which
    /// reads the whole snapshot.
    async fn task(&self, id: ExecutionId, step: &StepId) -> Result<Versioned<Task>, StoreError> {
        self.execution(id)
            .await?
            .task(step)
            .cloned()
            .ok_or_else(|| StoreError::NotFound {
                what: format!("task {step} of {id}"),
            })
    }

    /// The tasks of an execution whose revision differs from `known` (the revisions the
    /// caller holds, in plan order), with their positions: a worker claiming tasks beside
    /// others catches up without re-reading every task (ADR 0026). The default reads the
    /// whole snapshot.
    async fn changed_tasks(
        &self,
        id: ExecutionId,
        known: &[Revision],
    ) -> Result<Vec<(usize, Versioned<Task>)>, StoreError> {
        Ok(self
            .execution(id)
            .await?
            .tasks
            .into_iter()
            .enumerate()
            .filter(|(i, t)| known.get(*i) != Some(&t.revision))
            .collect())
    }

    /// [`Self::changed_tasks`] looking only at what changed since `since` (a cursor an earlier
    /// call returned, from the caller's own catch-ups: its `known` holds everything that call
    /// returned), and the cursor for the next call. A store that can find what changed without
    /// visiting every task (PostgreSQL: the transaction that last wrote each row) makes a
    /// catch-up O(changed); the default is [`Self::changed_tasks`] and no cursor.
    async fn changed_tasks_since(
        &self,
        id: ExecutionId,
        known: &[Revision],
        since: Option<ChangeCursor>,
    ) -> Result<(Vec<(usize, Versioned<Task>)>, Option<ChangeCursor>), StoreError> {
        let _ = since;
        Ok((self.changed_tasks(id, known).await?, None))
    }

    /// Replaces the execution header if it is still at `expected`. Terminal executions are
    /// immutable.
    async fn update_execution(
        &self,
        execution: &Execution,
        expected: Revision,
    ) -> Result<Revision, StoreError>;

    /// Replaces one task if it is still at `expected`. Costs O(size of the task), never
    /// O(size of the execution).
    async fn update_task(
        &self,
        execution: ExecutionId,
        task: &Task,
        expected: Revision,
    ) -> Result<Revision, StoreError>;

    /// A task transition and its audit entry, as ONE write where the backend can (the file
    /// store: one record of the execution's write-ahead log, one `fdatasync` shared with the
    /// parallel transitions of that moment; ADR 0015): when this returns, both are durable,
    /// and after a crash either both are there or neither. `audit` is where the default writes
    /// the entry: this same store (`&*store` coerces).
    ///
    /// The default writes them one after the other, in `transition.order`, through
    /// [`Self::update_task`] and [`AuditStore::append`]: if the second write fails, the first
    /// stands (the caller records that, e.g. `task.attempt.unrecorded`). A conflict or a
    /// refusal of the task update (checked first or second) is the same error either way.
    async fn update_task_with_audit(
        &self,
        audit: &dyn AuditStore,
        transition: TaskTransition,
    ) -> Result<Transitioned, StoreError> {
        let log = transition.log();
        let TaskTransition {
            execution_id,
            task,
            expected,
            entry,
            order,
            ..
        } = transition;
        match order {
            WriteOrder::StateFirst => {
                let revision = self.update_task(execution_id, &task, expected).await?;
                let entry = audit.append(log, entry).await?;
                Ok(Transitioned { revision, entry })
            }
            WriteOrder::EntryFirst => {
                let entry = audit.append(log, entry).await?;
                let revision = self.update_task(execution_id, &task, expected).await?;
                Ok(Transitioned { revision, entry })
            }
        }
    }

    /// Ends an execution: its terminal header (if the stored one is still at `expected`),
    /// `entry` appended to its log, and the log sealed — as ONE write where the backend can
    /// (PostgreSQL: one transaction), so a process killed in between cannot leave an ended
    /// execution whose log has no ending entry and no seal (which `audit verify` must take for
    /// a deleted seal). `audit` is where the default writes the entry and the seal: this same
    /// store. The default writes the three one after the other. A header that has not ended
    /// is refused ([`StoreError::Invalid`]) and nothing is written.
    async fn end_execution(
        &self,
        audit: &dyn AuditStore,
        execution: &Execution,
        expected: Revision,
        entry: NewAuditEntry,
    ) -> Result<Transitioned, StoreError> {
        let log = crate::common::ending_log(execution)?;
        let revision = self.update_execution(execution, expected).await?;
        let entry = audit.append(log, entry).await?;
        audit.seal(log).await?;
        Ok(Transitioned { revision, entry })
    }

    /// Whether `lease` is still held, as far as this process can tell without asking anyone:
    /// `false` once it is known to be gone (PostgreSQL: the connection holding its lock was
    /// cut, which released the lock — another process may take the execution now). Default:
    /// `true` (a lease that cannot go away by itself).
    fn lease_held(&self, lease: &Lease) -> bool {
        let _ = lease;
        true
    }

    /// Renews the leases of the running tasks `holder` claimed (its heartbeat), for backends
    /// whose workers claim tasks individually (ADR 0026). By default nothing is recorded.
    async fn renew_task_leases(&self, holder: &Holder) -> Result<(), StoreError> {
        let _ = holder;
        Ok(())
    }

    /// How long a task's lease runs from its claim or its last renewal, for backends whose
    /// workers claim tasks individually: a worker that could not renew for this long must
    /// have stopped its attempts (another worker may take them over). `None`: no task leases.
    fn task_lease(&self) -> Option<std::time::Duration> {
        None
    }

    /// The running tasks of an execution whose lease expired (their holder stopped its
    /// heartbeat), by the backend's clock, each with the revision it was read at: a takeover
    /// abandons the attempt only while the task is still at it (another worker may have taken
    /// it over and claimed it again since). By default none: a backend without task leases
    /// leaves takeovers to the execution's lease.
    async fn expired_tasks(&self, execution: ExecutionId) -> Result<Vec<ExpiredTask>, StoreError> {
        let _ = execution;
        Ok(Vec::new())
    }

    /// Executions, newest first, of one plan or of all.
    async fn list_executions(
        &self,
        plan: Option<PlanId>,
    ) -> Result<Listing<ExecutionSummary>, StoreError>;

    /// Takes the exclusive lease of an execution. A live holder → [`StoreError::LeaseHeld`];
    /// a stale one (its process is gone) is taken over and reported in [`Lease::took_over`].
    async fn acquire_lease(
        &self,
        execution: ExecutionId,
        holder: &Holder,
    ) -> Result<Lease, StoreError>;

    /// Takes a SHARED hold on an execution, for workers that claim its tasks one by one
    /// (ADR 0026): any number of shared holders at once, never together with the exclusive
    /// lease of [`Self::acquire_lease`] (which fails with [`StoreError::LeaseHeld`] while a
    /// shared holder lives). `Ok(None)`: the exclusive lease is held now. The default: this
    /// store cannot ([`StoreError::Invalid`]).
    async fn acquire_shared_lease(
        &self,
        execution: ExecutionId,
        holder: &Holder,
    ) -> Result<Option<Lease>, StoreError> {
        let _ = (execution, holder);
        Err(StoreError::Invalid(
            "this store cannot share an execution between workers (claiming tasks one by one \
             needs the postgres store)"
                .to_owned(),
        ))
    }

    /// Who holds the lease now, if anyone has recorded one (stale or not).
    async fn lease(&self, execution: ExecutionId) -> Result<Option<LeaseInfo>, StoreError>;

    /// Renews a held lease (the holder's heartbeat): records the time, so readers on other
    /// hosts can tell a live holder from a dead one. By default nothing is recorded.
    async fn renew_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let _ = lease;
        Ok(())
    }

    /// Tries to take every named resource at once (all or none), without waiting.
    /// `Ok(None)`: some resource is held by someone else.
    async fn try_lock_resources(
        &self,
        names: &[String],
        holder: &Holder,
    ) -> Result<Option<ResourceGuard>, StoreError>;
}

/// Where a catch-up of an execution's tasks left off ([`ExecutionStore::changed_tasks_since`]):
/// opaque, meaningful only to the store that returned it and the caller whose knowledge it
/// goes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeCursor(pub u64);

/// Which audit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "log", rename_all = "snake_case", deny_unknown_fields)]
pub enum AuditLogId {
    /// A plan's lifecycle (created, submitted, changes requested, approved, rejected).
    Plan {
        /// The plan.
        plan_id: PlanId,
    },
    /// The register of a plan's runs: each execution created from it and each refused run.
    /// Never sealed (a plan runs again); lets `audit verify` find an execution whose files were
    /// deleted.
    Runs {
        /// The plan.
        plan_id: PlanId,
    },
    /// An execution's causal chain.
    Execution {
        /// The plan it runs.
        plan_id: PlanId,
        /// The execution.
        execution_id: ExecutionId,
    },
}

impl fmt::Display for AuditLogId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Plan { plan_id } => write!(f, "audit log of {plan_id}"),
            Self::Runs { plan_id } => write!(f, "run register of {plan_id}"),
            Self::Execution { execution_id, .. } => write!(f, "audit log of {execution_id}"),
        }
    }
}

/// Append-only, hash-chained audit logs.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Appends an entry; it is durable when this returns. Secrets in `data` are redacted
    /// before hashing and writing. Appending to a sealed log is [`StoreError::Immutable`].
    async fn append(&self, log: AuditLogId, entry: NewAuditEntry)
    -> Result<AuditEntry, StoreError>;

    /// Seals a log with the Merkle root of its entry hashes. Idempotent.
    async fn seal(&self, log: AuditLogId) -> Result<Seal, StoreError>;

    /// Every entry of a log, as stored (parsed).
    async fn entries(&self, log: AuditLogId) -> Result<Vec<AuditEntry>, StoreError>;

    /// Recomputes the chain, hashes and seal; names the first bad entry.
    async fn verify(&self, log: AuditLogId) -> Result<VerifyReport, StoreError>;

    /// [`Self::verify`], and the entries when the log is intact (none when it is not): what a
    /// runner opening an execution reads. The default reads the log twice; a backend that can
    /// read it once (one statement: one snapshot) and parse it once does so.
    async fn verified_entries(
        &self,
        log: AuditLogId,
    ) -> Result<(VerifyReport, Vec<AuditEntry>), StoreError> {
        match self.verify(log).await? {
            report @ VerifyReport::Intact { .. } => Ok((report, self.entries(log).await?)),
            report @ VerifyReport::Tampered { .. } => Ok((report, Vec::new())),
        }
    }

    /// Every audit log in the store.
    async fn audit_logs(&self) -> Result<Vec<AuditLogId>, StoreError>;

    /// Who signs this store's seals and approvals, and whose signatures it trusts (ADR 0013).
    /// The default signs nothing and requires no signature.
    fn authority(&self) -> crate::signing::Authority {
        crate::signing::Authority::permissive()
    }
}

/// Everything orca stores.
pub trait Store: PlanStore + ExecutionStore + AuditStore {}

impl<T: PlanStore + ExecutionStore + AuditStore + ?Sized> Store for T {}
