-- orca's PostgreSQL store, schema version 1 (ADR 0021).
-- Documents are stored as the exact JSON text orca wrote (the domain types read them strictly);
-- the columns beside them are what queries need. Revisions are compare-and-swap counters.
CREATE TABLE plans (
    id          text PRIMARY KEY,
    revision    bigint NOT NULL CHECK (revision >= 1),
    doc         text NOT NULL
);

CREATE TABLE executions (
    id          text PRIMARY KEY,
    plan_id     text NOT NULL REFERENCES plans (id),
    revision    bigint NOT NULL CHECK (revision >= 1),
    stage       text NOT NULL,
    doc         text NOT NULL
);
CREATE INDEX executions_by_plan ON executions (plan_id);
CREATE INDEX executions_by_stage ON executions (stage);

CREATE TABLE tasks (
    execution_id text NOT NULL REFERENCES executions (id),
    step_id      text NOT NULL,
    ord          integer NOT NULL,
    revision     bigint NOT NULL CHECK (revision >= 1),
    status       text NOT NULL,
    doc          text NOT NULL,
    PRIMARY KEY (execution_id, step_id)
);

-- The lease of an execution. Liveness is the holder's session advisory lock (lock_key): it
-- goes when the holder's connection does (a dead process, a dead host once TCP keepalive
-- notices). Times are the database's clock.
CREATE TABLE leases (
    execution_id text PRIMARY KEY REFERENCES executions (id),
    holder       text NOT NULL,
    lock_key     bigint NOT NULL,
    acquired_at  timestamptz NOT NULL,
    renewed_at   timestamptz
);

CREATE TABLE audit_logs (
    log_key     text PRIMARY KEY,
    log_id      text NOT NULL,
    seal        text
);

CREATE TABLE audit_entries (
    log_key     text NOT NULL REFERENCES audit_logs (log_key),
    seq         bigint NOT NULL CHECK (seq >= 0),
    line        text NOT NULL,
    PRIMARY KEY (log_key, seq)
);
