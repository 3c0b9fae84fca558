-- orca's PostgreSQL store, schema version 2 (ADR 0026): a transition in one round trip and one
-- commit, and task leases for workers that claim tasks individually.

-- The lease of a running task claimed by a worker: who holds it (its token) until when, in the
-- database's clock. Written with the running task (same transaction), renewed by the holder's
-- heartbeat, deleted when the task leaves `running`. A running task whose lease expired is
-- taken over (its attempt recorded as abandoned).
CREATE TABLE task_leases (
    execution_id text NOT NULL,
    step_id      text NOT NULL,
    token        text NOT NULL,
    holder       text NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (execution_id, step_id),
    FOREIGN KEY (execution_id, step_id) REFERENCES tasks (execution_id, step_id)
);
CREATE INDEX task_leases_by_token ON task_leases (token);

-- One durable write: a task transition (compare-and-swap on its revision), an audit entry
-- (appended after the head the caller computed it from), or both, in the one transaction of
-- this statement. Checks first, writes last: a refusal writes nothing. Returns 'ok', or why
-- not: 'missing:execution', 'missing:task', 'stage:<stage>', 'busy' (claimed by another transaction right now, with
-- p_skip_locked), 'conflict:<revision found>', 'no_log', 'sealed', 'head:<seq>:<line>' (the
-- log moved on: its head now).
-- Two appends from the same head race on the entries' primary key: the loser fails with
-- unique_violation and nothing of it is written.
CREATE FUNCTION orca_write(
    p_exec text, p_step text, p_expected bigint, p_next bigint, p_status text, p_doc text,
    p_stages text[], p_skip_locked boolean,
    p_lease_token text, p_lease_holder text, p_lease_secs double precision,
    p_log text, p_prev_seq bigint, p_prev_line text, p_seq bigint, p_line text)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_stage text;
    v_rev bigint;
    v_seal text;
    v_seq bigint;
    v_line text;
BEGIN
    IF p_step IS NOT NULL THEN
        -- FOR SHARE: the header cannot turn terminal until this write commits.
        SELECT stage INTO v_stage FROM executions WHERE id = p_exec FOR SHARE;
        IF NOT FOUND THEN
            RETURN 'missing:execution';
        END IF;
        IF NOT (v_stage = ANY (p_stages)) THEN
            RETURN 'stage:' || v_stage;
        END IF;
        IF p_skip_locked THEN
            SELECT revision INTO v_rev FROM tasks
             WHERE execution_id = p_exec AND step_id = p_step FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                IF EXISTS (SELECT 1 FROM tasks WHERE execution_id = p_exec AND step_id = p_step) THEN
                    RETURN 'busy';
                END IF;
                RETURN 'missing:task';
            END IF;
        ELSE
            SELECT revision INTO v_rev FROM tasks
             WHERE execution_id = p_exec AND step_id = p_step FOR UPDATE;
            IF NOT FOUND THEN
                RETURN 'missing:task';
            END IF;
        END IF;
        IF v_rev <> p_expected THEN
            RETURN 'conflict:' || v_rev;
        END IF;
    END IF;
    IF p_log IS NOT NULL THEN
        -- FOR SHARE: a seal (FOR UPDATE) waits for appends in flight, and they for it.
        SELECT seal INTO v_seal FROM audit_logs WHERE log_key = p_log FOR SHARE;
        IF NOT FOUND THEN
            RETURN 'no_log';
        END IF;
        IF v_seal IS NOT NULL THEN
            RETURN 'sealed';
        END IF;
        SELECT seq, line INTO v_seq, v_line FROM audit_entries
         WHERE log_key = p_log ORDER BY seq DESC LIMIT 1;
        IF v_seq IS DISTINCT FROM p_prev_seq OR v_line IS DISTINCT FROM p_prev_line THEN
            -- The head now (no second round trip to read it); '' for an empty log.
            RETURN 'head:' || coalesce(v_seq::text || ':' || v_line, '');
        END IF;
        INSERT INTO audit_entries (log_key, seq, line) VALUES (p_log, p_seq, p_line);
    END IF;
    IF p_step IS NOT NULL THEN
        UPDATE tasks SET revision = p_next, status = p_status, doc = p_doc
         WHERE execution_id = p_exec AND step_id = p_step;
        IF p_status = 'running' AND p_lease_token IS NOT NULL THEN
            INSERT INTO task_leases (execution_id, step_id, token, holder, expires_at)
            VALUES (p_exec, p_step, p_lease_token, p_lease_holder,
                    now() + make_interval(secs => p_lease_secs))
            ON CONFLICT (execution_id, step_id) DO UPDATE
               SET token = excluded.token, holder = excluded.holder,
                   expires_at = excluded.expires_at;
        ELSE
            DELETE FROM task_leases WHERE execution_id = p_exec AND step_id = p_step;
        END IF;
        -- Wakes workers and watchers of this execution; delivered on commit.
        PERFORM pg_notify('orca_tasks', p_exec);
    END IF;
    RETURN 'ok';
END
$$;
