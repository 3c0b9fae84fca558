-- orca's PostgreSQL store, schema version 3 (ADR 0026, amendment of 2026-11-29): how rows are
-- stored.
--
-- Documents and audit lines are compressed with lz4 instead of PostgreSQL's default pglz when
-- the server was built with it (PostgreSQL 14+, `--with-lz4`, as Debian's and the official
-- images are). A completed task's document (2-3 KB: the agent's summary, findings, output) is
-- compressed on every write; pglz did that at ~2 % of a 4-worker run's CPU, lz4 several times
-- faster, and a 1 MB plan reads back in 1.4 ms instead of 4.4. Rows written before keep their
-- pglz data (both are read); on a server without lz4 this part changes nothing.
DO $$
BEGIN
    ALTER TABLE plans ALTER COLUMN doc SET COMPRESSION lz4;
    ALTER TABLE executions ALTER COLUMN doc SET COMPRESSION lz4;
    ALTER TABLE tasks ALTER COLUMN doc SET COMPRESSION lz4;
    ALTER TABLE audit_entries ALTER COLUMN line SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'lz4 not supported by this server: documents stay compressed with pglz';
END
$$;

-- A task row is rewritten at each step of its life (started, completed, failed, retried…):
-- with half of each page left free, its new version usually fits on its page and is written
-- without touching the indexes (a "HOT" update); with full pages, 44 % of the updates of a
-- 4-worker run went to another page and wrote index entries again.
ALTER TABLE tasks SET (fillfactor = 50);
