-- orca's PostgreSQL store, schema version 4 (ADR 0055): audit entries staged by writers that
-- lost the race for a log's head, and chained in batches.
--
-- Many processes writing one execution's log each hashed their entry after the head they
-- last saw; one of them won each commit and the others wrote again (12-14 calls per
-- transition with 16 workers, most of the database's time waiting on the log's row). Now a
-- writer that lost once stages its entry instead: the task transition and the entry (not yet
-- hashed) commit together in one statement that cannot lose, then ONE writer at a time (a
-- transaction advisory lock per log) chains every entry staged so far after the head, in
-- staging order, in one transaction, and deletes them from here. Each chained entry records
-- the staged row it came from, so its writer finds it whoever chained it.

CREATE TABLE audit_staged (
    id      bigserial PRIMARY KEY,
    log_key text NOT NULL REFERENCES audit_logs (log_key),
    -- The entry to chain (kind, data redacted, parent) and its time, as JSON.
    entry   text NOT NULL
);
CREATE INDEX audit_staged_by_log ON audit_staged (log_key, id);

ALTER TABLE audit_entries ADD COLUMN staged_id bigint;
CREATE UNIQUE INDEX audit_entries_by_staged ON audit_entries (staged_id)
    WHERE staged_id IS NOT NULL;

-- A task transition (optional, exactly as `orca_write` checks and writes it) and a staged
-- entry, in the one transaction of this statement. Returns 'ok:<staged id>', or why not:
-- 'no_log', 'sealed', or `orca_write`'s refusals of the transition. Checks first, writes last:
-- a refusal writes nothing.
CREATE FUNCTION orca_stage(
    p_exec text, p_step text, p_expected bigint, p_next bigint, p_status text, p_doc text,
    p_stages text[], p_skip_locked boolean,
    p_lease_token text, p_lease_holder text, p_lease_secs double precision,
    p_log text, p_entry text)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_seal text;
    v_answer text;
    v_id bigint;
BEGIN
    -- FOR SHARE: a seal (FOR UPDATE) waits for stagings in flight, and they for it.
    SELECT seal INTO v_seal FROM audit_logs WHERE log_key = p_log FOR SHARE;
    IF NOT FOUND THEN
        RETURN 'no_log';
    END IF;
    IF v_seal IS NOT NULL THEN
        RETURN 'sealed';
    END IF;
    IF p_step IS NOT NULL THEN
        v_answer := orca_write(p_exec, p_step, p_expected, p_next, p_status, p_doc, p_stages,
                               p_skip_locked, p_lease_token, p_lease_holder, p_lease_secs,
                               NULL, NULL, NULL, NULL, NULL);
        IF v_answer <> 'ok' THEN
            RETURN v_answer;
        END IF;
    END IF;
    INSERT INTO audit_staged (log_key, entry) VALUES (p_log, p_entry) RETURNING id INTO v_id;
    RETURN 'ok:' || v_id;
END
$$;
