-- xfer's PostgreSQL shard, migration 5: the change feed (xfer_store::event). Every
-- observable change of a transfer's record adds its events in the same transaction, by
-- triggers that mirror `event::events_of`, so the change never exists without its events
-- or the reverse.
--
-- An event's position is its writing transaction's id, then its number: readers take only
-- events of transactions older than every transaction still running
-- (`pg_snapshot_xmin`), so an event committed later can never land before a position a
-- reader has already passed (numbers alone are handed out before commit, out of commit
-- order).
CREATE TABLE events (
    xid      xid8 NOT NULL DEFAULT pg_current_xact_id(),
    seq      bigint GENERATED ALWAYS AS IDENTITY,
    transfer text COLLATE "C" NOT NULL,
    kind     text NOT NULL CHECK (kind IN ('accepted', 'held', 'captured', 'voided',
                                           'expired', 'done', 'canceled', 'refunded')),
    at       bigint NOT NULL,
    refund   text COLLATE "C",
    PRIMARY KEY (xid, seq)
);

-- The event of a record's move from `before` (NULL: written new) to `rec`'s state.
CREATE FUNCTION state_event(before text, rec transfers) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN before IS NOT DISTINCT FROM rec.state THEN NULL
        WHEN rec.state = 'held' THEN 'held'
        WHEN before = 'held' AND rec.state = 'applied' THEN 'captured'
        WHEN before = 'held' AND rec.state = 'canceling' THEN
            CASE WHEN rec.reason = '"voided"'::jsonb THEN 'voided' ELSE 'expired' END
        WHEN rec.state = 'done' THEN 'done'
        WHEN rec.state = 'canceled' THEN 'canceled'
    END
$$;

CREATE FUNCTION transfer_inserted_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    made text := state_event(NULL, NEW);
BEGIN
    INSERT INTO events (transfer, kind, at) VALUES (NEW.id, 'accepted', NEW.created_at);
    IF made IS NOT NULL THEN
        INSERT INTO events (transfer, kind, at) VALUES (NEW.id, made, NEW.updated_at);
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION transfer_changed_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    made text := state_event(OLD.state, NEW);
BEGIN
    IF OLD.state = 'done' AND NEW.state <> 'done' THEN
        -- Only the one-phase commit's undo (migration 4) takes a record out of `done`, in
        -- the transaction that wrote it so: its `done` event goes with it, unseen.
        DELETE FROM events e
            WHERE e.xid = pg_current_xact_id() AND e.transfer = NEW.id AND e.kind = 'done';
        RETURN NULL;
    END IF;
    IF made IS NOT NULL THEN
        INSERT INTO events (transfer, kind, at) VALUES (NEW.id, made, NEW.updated_at);
    END IF;
    IF NEW.refunded_by IS NOT NULL AND NEW.refunded_by IS DISTINCT FROM OLD.refunded_by THEN
        INSERT INTO events (transfer, kind, at, refund)
            VALUES (NEW.id, 'refunded', NEW.updated_at, NEW.refunded_by);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER transfer_inserted_events AFTER INSERT ON transfers
    FOR EACH ROW EXECUTE FUNCTION transfer_inserted_events();
-- Most updates (a lease, an owner, a claim's epoch) change neither: no call.
CREATE TRIGGER transfer_changed_events AFTER UPDATE ON transfers
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.refunded_by IS DISTINCT FROM NEW.refunded_by)
    EXECUTE FUNCTION transfer_changed_events();

-- Retention: the last position dropped (one row; none yet: nothing dropped).
CREATE TABLE events_dropped (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    xid xid8 NOT NULL,
    seq bigint NOT NULL
);

-- Drops at most `n` of the oldest events, a prefix by position, while made before
-- `before_ms`, and notes the last one dropped; answers how many.
CREATE FUNCTION trim_events(before_ms bigint, n int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    e        record;
    last_xid xid8;
    last_seq bigint;
    k        int := 0;
BEGIN
    FOR e IN SELECT x.xid, x.seq, x.at FROM events x
             WHERE x.xid < pg_snapshot_xmin(pg_current_snapshot())
             ORDER BY x.xid, x.seq LIMIT n LOOP
        EXIT WHEN e.at >= before_ms;
        last_xid := e.xid;
        last_seq := e.seq;
        k := k + 1;
    END LOOP;
    IF k = 0 THEN
        RETURN 0;
    END IF;
    DELETE FROM events x WHERE (x.xid, x.seq) <= (last_xid, last_seq);
    INSERT INTO events_dropped AS d (one, xid, seq) VALUES (true, last_xid, last_seq)
        ON CONFLICT (one) DO UPDATE SET xid = excluded.xid, seq = excluded.seq
        WHERE (d.xid, d.seq) < (excluded.xid, excluded.seq);
    RETURN k;
END
$$;
