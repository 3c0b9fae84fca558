-- orca's PostgreSQL store, schema version 5 (ADR 0060): an audit entry chained by the database,
-- under the log's row lock, in the statement that writes its transition.
--
-- Writers in several processes hashed their entries after the head they last saw; the losers of
-- each commit staged theirs and a chainer chained them in a second commit (ADR 0055): with two
-- workers on one execution, four of five transitions took that road. Now the writer sends its
-- entry's texts with the chain's place left open (`Template` in orca-store: the canonical text
-- up to `prev`'s hex digits, and the line between `seq` and `prev`); this function locks the
-- log's row, reads the head, fills in `seq` and `prev`, hashes, and inserts — so a write cannot
-- lose, and the writers of one log take turns holding its row until they commit. The writer
-- checks the hash it is answered against its own arithmetic (orca-store's `entry_hash`).

-- Which transaction last wrote each task, so a worker catching up reads the rows written since
-- its last look (ADR 0060, `changed_tasks_since`), not every task of the execution: the
-- transactions not finished when it looked have ids of at least that snapshot's xmin, and the
-- rows they write are found by this index.
ALTER TABLE tasks ADD COLUMN changed_xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX tasks_by_change ON tasks (execution_id, changed_xid);
CREATE FUNCTION orca_task_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.changed_xid := pg_current_xact_id();
    RETURN NEW;
END
$$;
CREATE TRIGGER tasks_changed BEFORE UPDATE ON tasks
    FOR EACH ROW EXECUTE FUNCTION orca_task_changed();

-- An entry's hash beside its line, so the next write reads the head's hash without reading (and
-- decompressing) its whole line. Null for entries written by the earlier schemes: their hash
-- is read from the line's end.
ALTER TABLE audit_entries ADD COLUMN hash text;

-- A task transition (optional, exactly as `orca_write` checks and writes it) and an audit entry
-- chained after the log's head, in the one transaction of this statement. Returns
-- 'ok:<seq>:<prev hex>:<hash hex>', or why not: 'no_log', 'sealed', 'staged' (entries staged by
-- a writer of the earlier scheme are not chained yet: chain them first), or `orca_write`'s
-- refusals of the transition. Checks first, writes last: a refusal writes nothing.
-- Locks in the order every writer takes them: the header (shared), the log's row, the task.
CREATE FUNCTION orca_write_chained(
    p_exec text, p_step text, p_expected bigint, p_next bigint, p_status text, p_doc text,
    p_stages text[], p_skip_locked boolean,
    p_lease_token text, p_lease_holder text, p_lease_secs double precision,
    p_log text, p_hash_head text, p_line_body text)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_seal text;
    v_answer text;
    v_seq bigint;
    v_line text;
    v_prev text;
    v_hash text;
BEGIN
    IF p_step IS NOT NULL THEN
        -- FOR SHARE: the header cannot turn terminal until this write commits.
        PERFORM 1 FROM executions WHERE id = p_exec FOR SHARE;
    END IF;
    -- FOR UPDATE: one writer of this log at a time, until it commits.
    SELECT seal INTO v_seal FROM audit_logs WHERE log_key = p_log FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'no_log';
    END IF;
    IF v_seal IS NOT NULL THEN
        RETURN 'sealed';
    END IF;
    IF EXISTS (SELECT 1 FROM audit_staged WHERE log_key = p_log) THEN
        RETURN 'staged';
    END IF;
    IF p_step IS NOT NULL THEN
        v_answer := orca_write(p_exec, p_step, p_expected, p_next, p_status, p_doc, p_stages,
                               p_skip_locked, p_lease_token, p_lease_holder, p_lease_secs,
                               NULL, NULL, NULL, NULL, NULL);
        IF v_answer <> 'ok' THEN
            RETURN v_answer;
        END IF;
    END IF;
    SELECT seq, hash INTO v_seq, v_prev FROM audit_entries
     WHERE log_key = p_log ORDER BY seq DESC LIMIT 1;
    IF NOT FOUND THEN
        v_seq := 0;
        v_prev := repeat('0', 64);
    ELSE
        IF v_prev IS NULL THEN
            -- Every stored line ends with its hash (the entry's last field).
            SELECT line INTO v_line FROM audit_entries WHERE log_key = p_log AND seq = v_seq;
            IF right(v_line, 81) LIKE '"hash":"sha256:%"}' THEN
                v_prev := substr(right(v_line, 66), 1, 64);
            END IF;
            IF v_prev IS NULL OR v_prev !~ '^[0-9a-f]{64}$' THEN
                RAISE EXCEPTION 'the head of audit log % (#%) does not end with its hash',
                    p_log, v_seq;
            END IF;
        END IF;
        v_seq := v_seq + 1;
    END IF;
    v_hash := encode(sha256(convert_to(
        p_hash_head || v_prev || '","seq":' || v_seq || '}', 'UTF8')), 'hex');
    INSERT INTO audit_entries (log_key, seq, line, hash)
    VALUES (p_log, v_seq,
            '{"seq":' || v_seq || ',' || p_line_body || v_prev || '","hash":"sha256:' || v_hash
            || '"}', v_hash);
    RETURN 'ok:' || v_seq || ':' || v_prev || ':' || v_hash;
END
$$;
