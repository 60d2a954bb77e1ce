-- xfer's PostgreSQL shard, migration 6: each transfer record keeps its timeline
-- (xfer_store::timeline), the states it passed through, each with the time and the owner
-- of the write, written by triggers on `transfers` in the step's own update, mirroring
-- `timeline::step_of`: a step is kept when the write changed the state, the epoch or the
-- refund link; at most 16, the first and the latest.
--
-- `timeline` is a jsonb array of `Step`s as serde writes them:
-- {"at": ms, "state", "owner", "epoch", "reason": CancelReason's JSON or null, "refund"}.
-- NULL in a row written before this migration: its reader derives one step, the row as it
-- is at its `updated_at` (`timeline::derived`), and the next step starts from that.
--
-- A refund link now sets `updated_at` to the linker's clock (`TransferOp::LinkRefund`'s
-- `now`), which the link's step and its `refunded` event take: `transfer_op` replaced.
-- The one-phase commit writes its record with both steps (`record::one_phase_done`):
-- `one_phase` replaced.
ALTER TABLE transfers ADD COLUMN timeline jsonb;

-- One step: the record's state, owner and epoch after a write at `at`, the cancel reason
-- only on a step to `canceling` or `canceled` (`TransferRecord::step_at`).
CREATE FUNCTION timeline_step(at bigint, state text, owner text, epoch bigint, reason jsonb,
                              refund text) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('at', at, 'state', state, 'owner', owner, 'epoch', epoch,
        'reason', CASE WHEN state IN ('canceling', 'canceled') THEN reason END,
        'refund', refund)
$$;

-- `Timeline::push`: past 16 steps the oldest after the first is dropped.
CREATE FUNCTION timeline_push(t jsonb, step jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN jsonb_array_length(t) >= 16 THEN (t - 1) ELSE t END
        || jsonb_build_array(step)
$$;

-- A record written new: its first step, at `created_at`, unless the writer gave the whole
-- timeline (the one-phase commit).
CREATE FUNCTION transfer_inserted_timeline() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.timeline IS NULL THEN
        NEW.timeline := jsonb_build_array(timeline_step(NEW.created_at, NEW.state, NEW.owner,
            NEW.epoch, NEW.reason, NULL));
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION transfer_changed_timeline() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    was jsonb := coalesce(OLD.timeline, jsonb_build_array(timeline_step(OLD.updated_at,
        OLD.state, OLD.owner, OLD.epoch, OLD.reason, OLD.refunded_by)));
BEGIN
    IF OLD.state = 'done' AND NEW.state <> 'done' THEN
        -- Only the one-phase commit's undo (migration 4) takes a record out of `done`, in
        -- the transaction that wrote it so: the insert's step alone stays.
        NEW.timeline := jsonb_build_array(was->0);
    ELSIF OLD.state IS DISTINCT FROM NEW.state OR OLD.epoch IS DISTINCT FROM NEW.epoch THEN
        NEW.timeline := timeline_push(was, timeline_step(NEW.updated_at, NEW.state, NEW.owner,
            NEW.epoch, NEW.reason, NULL));
    ELSIF NEW.refunded_by IS NOT NULL AND NEW.refunded_by IS DISTINCT FROM OLD.refunded_by THEN
        NEW.timeline := timeline_push(was, timeline_step(NEW.updated_at, NEW.state, NEW.owner,
            NEW.epoch, NEW.reason, NEW.refunded_by));
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER transfer_inserted_timeline BEFORE INSERT ON transfers
    FOR EACH ROW EXECUTE FUNCTION transfer_inserted_timeline();
-- Most updates (a lease alone) change none of these: no call.
CREATE TRIGGER transfer_changed_timeline BEFORE UPDATE ON transfers
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.epoch IS DISTINCT FROM NEW.epoch
          OR OLD.refunded_by IS DISTINCT FROM NEW.refunded_by)
    EXECUTE FUNCTION transfer_changed_timeline();

-- As schema.sql's, but a refund link sets `updated_at` to the linker's clock.
CREATE OR REPLACE FUNCTION transfer_op(op jsonb, now_ms bigint) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    k       text := op->>'k';
    tid     text := op->>'id';
    t       transfers%ROWTYPE;
    changed boolean := false;
    nxt     text;
    at_ms   bigint := (op->>'now')::bigint;
BEGIN
    IF k = 'insert' THEN
        INSERT INTO transfers (id, spec, state, created_at, updated_at, deadline,
                               hold_expires_at, owner, lease_until, epoch, reason, refunded_by)
            SELECT tid, r.spec, r.state, r.created_at, r.updated_at, r.deadline,
                   r.hold_expires_at, r.owner, r.lease_until, r.epoch,
                   nullif(op->'rec'->'reason', 'null'::jsonb), r.refunded_by
            FROM jsonb_to_record(op->'rec') AS r(
                spec jsonb, state text, created_at bigint, updated_at bigint, deadline bigint,
                hold_expires_at bigint, owner text, lease_until bigint, epoch bigint,
                refunded_by text)
            ON CONFLICT (id) DO NOTHING
            RETURNING * INTO t;
        IF FOUND THEN
            RETURN to_jsonb(t) || '{"r": "transfer"}'::jsonb;
        END IF;
    END IF;

    SELECT * INTO t FROM transfers WHERE id = tid FOR UPDATE;
    IF NOT FOUND THEN
        RETURN '{"r": "not_found"}'::jsonb;
    END IF;

    IF k = 'insert' THEN
        -- Same id: the same body (everything but timeout_ms) is a repeat.
        IF (t.spec - 'timeout_ms') <> ((op->'rec'->'spec') - 'timeout_ms') THEN
            RETURN refused('id_exists_with_different_body');
        END IF;

    ELSIF k = 'claim' THEN
        nxt := CASE
            WHEN t.state = 'initial' THEN 'pending'
            WHEN t.state IN ('pending', 'applied', 'canceling') AND t.lease_until <= at_ms
                THEN t.state
            WHEN t.state = 'held' AND t.lease_until <= at_ms AND t.hold_expires_at <= at_ms
                THEN 'canceling'
        END;
        IF nxt IS NOT NULL THEN
            UPDATE transfers SET
                reason = CASE WHEN t.state = 'held' THEN '"expired"'::jsonb ELSE reason END,
                state = nxt, owner = op->>'owner', lease_until = (op->>'lease_until')::bigint,
                epoch = epoch + 1, updated_at = at_ms
                WHERE id = tid RETURNING * INTO t;
            changed := true;
        END IF;

    ELSIF k = 'decide' THEN
        -- The commit point: compare-and-set on state and epoch.
        IF t.state = 'pending' AND t.epoch = (op->>'epoch')::bigint
            AND op->>'to' IN ('applied', 'held', 'canceling') THEN
            UPDATE transfers SET state = op->>'to', reason = nullif(op->'reason', 'null'::jsonb),
                updated_at = at_ms
                WHERE id = tid RETURNING * INTO t;
            changed := true;
        END IF;

    ELSIF k = 'capture' OR k = 'void' THEN
        IF t.state IN ('initial', 'pending') THEN
            RETURN refused('transfer_is_not_held');
        ELSIF t.state = 'held' THEN
            -- A capture resent long after it was made cannot beat the expiry: the store's
            -- clock judges too.
            IF k = 'capture' AND t.hold_expires_at <= greatest(at_ms, now_ms) THEN
                RETURN refused('hold_expired');
            END IF;
            UPDATE transfers SET
                state = CASE k WHEN 'capture' THEN 'applied' ELSE 'canceling' END,
                reason = CASE k WHEN 'capture' THEN reason ELSE '"voided"'::jsonb END,
                owner = op->>'owner', lease_until = (op->>'lease_until')::bigint,
                epoch = epoch + 1, updated_at = at_ms
                WHERE id = tid RETURNING * INTO t;
            changed := true;
        END IF;

    ELSIF k = 'finish' THEN
        IF t.state IN ('applied', 'canceling') THEN
            UPDATE transfers SET
                state = CASE t.state WHEN 'applied' THEN 'done' ELSE 'canceled' END,
                owner = NULL, updated_at = at_ms
                WHERE id = tid RETURNING * INTO t;
            changed := true;
        END IF;

    ELSIF k = 'link_refund' THEN
        IF t.state <> 'done' THEN
            RETURN refused('original_is_not_done');
        END IF;
        -- The refund's postings must be the original's, each with from and to swapped.
        IF op->'postings' IS DISTINCT FROM (
            SELECT jsonb_agg(p || jsonb_build_object('from', p->'to', 'to', p->'from') ORDER BY n)
            FROM jsonb_array_elements(t.spec->'postings') WITH ORDINALITY AS x(p, n)) THEN
            RETURN refused('refund_must_reverse_original');
        END IF;
        IF t.refunded_by = op->>'refund' THEN
            NULL;  -- linked by this refund before: a repeat
        ELSIF t.refunded_by IS NULL OR t.refunded_by = op->>'replacing' THEN
            UPDATE transfers SET refunded_by = op->>'refund', updated_at = at_ms
                WHERE id = tid RETURNING * INTO t;
            changed := true;
        ELSE
            RETURN refused('original_already_refunded');
        END IF;

    ELSIF k = 'redrive' THEN
        IF t.state NOT IN ('done', 'canceled') AND t.lease_until > at_ms THEN
            UPDATE transfers SET lease_until = at_ms WHERE id = tid RETURNING * INTO t;
            changed := true;
        END IF;

    ELSIF k <> 'get' THEN
        RAISE EXCEPTION 'xfer: unknown transfer op %', k;
    END IF;
    RETURN to_jsonb(t) || jsonb_build_object('r', CASE WHEN changed THEN 'transfer' ELSE 'unchanged' END);
END
$$;

-- As migration 4's, but the record written done carries the insert's and the finish's
-- steps.
CREATE OR REPLACE FUNCTION one_phase(op jsonb, now_ms bigint) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    tid   text := op->>'id';
    leg   jsonb;
    d     numeric;
    c     numeric;
    moved int := 0;
    ok    boolean := true;
    lo    constant numeric := -9223372036854775808;
    hi    constant numeric := 9223372036854775807;
BEGIN
    -- The record first, done: its id's unique index is what makes a repeat (or a
    -- concurrent insert of the same id) an insert's answer, never a second move.
    INSERT INTO transfers (id, spec, state, created_at, updated_at, deadline,
                           hold_expires_at, owner, lease_until, epoch, reason, refunded_by,
                           timeline)
        SELECT tid, r.spec, 'done', r.created_at, r.created_at, r.deadline,
               r.hold_expires_at, NULL, r.lease_until, r.epoch,
               nullif(op->'rec'->'reason', 'null'::jsonb), r.refunded_by,
               -- `record::one_phase_done`: the insert's step, then the finish's.
               jsonb_build_array(
                   timeline_step(r.created_at, r.state, r.owner, r.epoch, NULL, NULL),
                   timeline_step(r.created_at, 'done', NULL, r.epoch, NULL, NULL))
        FROM jsonb_to_record(op->'rec') AS r(
            spec jsonb, state text, created_at bigint, deadline bigint, hold_expires_at bigint,
            owner text, lease_until bigint, epoch bigint, refunded_by text)
        WHERE now_ms < r.deadline AND jsonb_array_length(op->'legs') > 0
        ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN transfer_op(jsonb_set(op, '{k}', '"insert"'), now_ms);
    END IF;
    -- Each leg moves only where its prepare would succeed (record.rs: `prepare_check`):
    -- open, the leg's asset, no intent or tombstone of this transfer, the debit within the
    -- available amount, every sum within a bigint. The legs name different accounts, so
    -- each is checked as it was before any moved.
    FOR leg IN SELECT value FROM jsonb_array_elements(op->'legs') LOOP
        d := (leg->>2)::numeric;
        c := (leg->>3)::numeric;
        UPDATE accounts x SET balance = (x.balance + (c - d))::bigint
            WHERE x.id = leg->>0 AND x.status = 'open' AND x.asset = leg->>1
              AND (x.lower_bound IS NULL
                   OR d <= x.balance::numeric - x.reserved - x.lower_bound)
              AND x.reserved + d <= hi AND x.incoming + c <= hi
              AND x.balance - (x.reserved + d) >= lo AND x.balance + (x.incoming + c) <= hi
              AND NOT EXISTS (SELECT 1 FROM intents i
                                  WHERE i.account = x.id AND i.transfer = tid);
        IF NOT FOUND THEN
            ok := false;
            EXIT;
        END IF;
        moved := moved + 1;
    END LOOP;
    IF NOT ok THEN
        -- A leg's prepare would not succeed: the legs that moved back (the rows stay locked
        -- until the commit, so nobody saw them), and the record as the insert leaves it,
        -- for the two phases.
        FOR leg IN SELECT value FROM jsonb_array_elements(op->'legs') LIMIT moved LOOP
            UPDATE accounts
                SET balance = (balance - ((leg->>3)::numeric - (leg->>2)::numeric))::bigint
                WHERE id = leg->>0;
        END LOOP;
        UPDATE transfers SET state = r.state, owner = r.owner, updated_at = r.updated_at
            FROM jsonb_to_record(op->'rec') AS r(state text, owner text, updated_at bigint)
            WHERE id = tid;
        RETURN '{"r": "inserted"}'::jsonb;
    END IF;
    FOR leg IN SELECT value FROM jsonb_array_elements(op->'legs') LOOP
        INSERT INTO history (account, transfer) VALUES (leg->>0, tid);
    END LOOP;
    RETURN '{"r": "committed"}'::jsonb;
END
$$;
