-- orca's PostgreSQL store, schema version 3 (ADR 0026, amendment of 2026-11-29): documents and
-- audit lines compressed with lz4 instead of PostgreSQL's default pglz when the server was
-- built with it (PostgreSQL 14+, `--with-lz4`, as Debian's and the official images are). A
-- completed task's document (2-3 KB: the agent's summary, findings, output) is compressed on
-- every write; pglz did that at a measured ~2 % of a 4-worker run's CPU, lz4 several times
-- faster, and reads back faster too. Rows written before keep their pglz data (both read);
-- on a server without lz4 this migration changes nothing and still counts as applied.
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
