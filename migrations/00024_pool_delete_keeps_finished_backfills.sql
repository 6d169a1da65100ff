-- A pool's deletion leaves finished backfills as they were.
--
-- backfills.pool referenced pools ON DELETE SET NULL, so deleting a pool rewrote every
-- finished backfill that had named it: a terminal backfill's record changed, and the
-- settings trigger wrote a backfill.updated after its terminal event. The reference is now
-- checked by a trigger that does what the foreign key's check did, and nothing happens on
-- the pool's side: a finished backfill keeps the name of the pool it ran in. Active
-- backfills still hold a pool (PoolDelete refuses while one names it).
--
-- The check takes the same lock as the foreign key's (FOR KEY SHARE on the pool row), so a
-- deletion that locked the row first makes the write wait and then find no pool, and one
-- that comes later waits for the write and then sees it. It raises the foreign key's
-- SQLSTATE under the foreign key's name, which the repository maps to pool_not_found.
-- dag_runs.pool keeps its foreign key: a manual run names its own pool, and only finished
-- manual runs can name a pool that is deleted.

-- +goose Up
ALTER TABLE backfills DROP CONSTRAINT backfills_pool_fkey;

-- +goose StatementBegin
CREATE FUNCTION backfills_pool_exists() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM pools WHERE name = NEW.pool FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'insert or update on table "backfills" violates foreign key constraint "backfills_pool_fkey"'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'backfills_pool_fkey',
                  TABLE = 'backfills', COLUMN = 'pool',
                  DETAIL = format('Key (pool)=(%s) is not present in table "pools".', NEW.pool);
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER backfills_pool_exists_insert BEFORE INSERT ON backfills
    FOR EACH ROW WHEN (NEW.pool IS NOT NULL)
    EXECUTE FUNCTION backfills_pool_exists();
CREATE TRIGGER backfills_pool_exists_update BEFORE UPDATE OF pool ON backfills
    FOR EACH ROW WHEN (NEW.pool IS NOT NULL AND NEW.pool IS DISTINCT FROM OLD.pool)
    EXECUTE FUNCTION backfills_pool_exists();

-- +goose Down
DROP TRIGGER backfills_pool_exists_update ON backfills;
DROP TRIGGER backfills_pool_exists_insert ON backfills;
DROP FUNCTION backfills_pool_exists();
-- Backfills that name a deleted pool name none again, as the foreign key would have left them.
UPDATE backfills b SET pool = NULL
WHERE pool IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pools p WHERE p.name = b.pool);
ALTER TABLE backfills ADD CONSTRAINT backfills_pool_fkey
    FOREIGN KEY (pool) REFERENCES pools (name) ON DELETE SET NULL;
