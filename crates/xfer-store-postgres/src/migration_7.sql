-- xfer's PostgreSQL shard, migration 7: partial refunds. A done transfer may be refunded
-- several times in part; its record keeps its refund links (`TransferRecord::refunds`,
-- `RefundLink`), and a link is added only if, posting by posting, the links then take back
-- at most the original's amount (`record::link_refund`).
--
-- `refunds` is a jsonb array of `RefundLink`s as serde writes them, oldest first:
-- [{"refund": id, "amounts": [n, ...]}, ...], at most 16 (`REFUNDS_MAX`); jsonb numbers
-- are numeric, so amounts up to 2^63 - 1 and their sums stay exact. `refunded_by` stays the
-- latest refund linked, so the timeline's and the change feed's triggers (migrations 5
-- and 6), which compare it before and after, make a link's step and its `refunded` event
-- as before, a link that replaces others included.
--
-- Rows written before this migration are left as they are (no data migration, no table
-- rewrite): `refunds` is NULL there, and a NULL or empty `refunds` with `refunded_by` set
-- reads as one link taking back every posting's whole amount (`refund_links` below, as
-- `TransferRecord::refund_links` does in Rust), so such a row answers exactly what it did
-- and its reader derives the same link. The first link written to it stores the links in
-- full.
--
-- Also a held transfer's expiry moved later (`TransferOp::Extend`, `{"k": "extend",
-- "until": ms, "now": ms}`): `transfer_op` sets `hold_expires_at`, and `wake_at`, generated
-- from it, follows, so the sweeper does not wake for the hold before its new expiry. Only
-- `hold_expires_at` and `updated_at` change, neither the state, the epoch nor `refunded_by`:
-- the timeline's and the change feed's triggers do not fire, no step and no event.
--
-- Replaced: `transfer_op` (the link's rules; an insert stores `refunds`; the extend step)
-- and `one_phase` (stores `refunds`).
ALTER TABLE transfers ADD COLUMN refunds jsonb;

-- What an insert stores of a record's `refunds`: NULL when it has none.
CREATE FUNCTION refunds_column(refunds jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN jsonb_typeof(refunds) = 'array' AND jsonb_array_length(refunds) > 0
                THEN refunds END
$$;

-- The refunds linked to `rec`, oldest first (`TransferRecord::refund_links`): its `refunds`,
-- or for a row written before partial refunds with `refunded_by` set, that one refund
-- taking back every posting's whole amount.
CREATE FUNCTION refund_links(rec transfers) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN refunds_column(rec.refunds) IS NOT NULL THEN rec.refunds
        WHEN rec.refunded_by IS NOT NULL THEN jsonb_build_array(jsonb_build_object(
            'refund', rec.refunded_by,
            'amounts', (SELECT coalesce(jsonb_agg(x.p->'amount' ORDER BY x.n), '[]'::jsonb)
                        FROM jsonb_array_elements(rec.spec->'postings')
                             WITH ORDINALITY AS x(p, n))))
        ELSE '[]'::jsonb
    END
$$;

-- As migration 6's, but a refund link follows `record::link_refund` (partial refunds,
-- `replacing` a list), an insert stores the record's `refunds`, and `extend` moves a held
-- transfer's expiry later.
CREATE OR REPLACE FUNCTION transfer_op(op jsonb, now_ms bigint) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    k       text := op->>'k';
    tid     text := op->>'id';
    t       transfers%ROWTYPE;
    changed boolean := false;
    nxt     text;
    at_ms   bigint := (op->>'now')::bigint;
    links   jsonb;
    kept    jsonb;
    sums    record;
BEGIN
    IF k = 'insert' THEN
        INSERT INTO transfers (id, spec, state, created_at, updated_at, deadline,
                               hold_expires_at, owner, lease_until, epoch, reason, refunded_by,
                               refunds)
            SELECT tid, r.spec, r.state, r.created_at, r.updated_at, r.deadline,
                   r.hold_expires_at, r.owner, r.lease_until, r.epoch,
                   nullif(op->'rec'->'reason', 'null'::jsonb), r.refunded_by,
                   refunds_column(op->'rec'->'refunds')
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
        -- record.rs: `link_refund`, in its order.
        IF t.state <> 'done' THEN
            RETURN refused('original_is_not_done');
        END IF;
        -- The refund's postings are the original's in order, each with from and to swapped
        -- and an amount at most the original's.
        IF jsonb_typeof(op->'postings') IS DISTINCT FROM 'array'
            OR jsonb_array_length(op->'postings') <> jsonb_array_length(t.spec->'postings')
            OR EXISTS (
                SELECT 1
                FROM jsonb_array_elements(t.spec->'postings') WITH ORDINALITY AS o(p, n)
                JOIN jsonb_array_elements(op->'postings') WITH ORDINALITY AS r(p, n)
                    ON r.n = o.n
                WHERE (r.p - 'amount') IS DISTINCT FROM
                          ((o.p - 'amount') || jsonb_build_object('from', o.p->'to', 'to', o.p->'from'))
                   OR jsonb_typeof(r.p->'amount') IS DISTINCT FROM 'number'
                   OR (r.p->>'amount')::numeric > (o.p->>'amount')::numeric) THEN
            RETURN refused('refund_must_reverse_original');
        END IF;
        links := refund_links(t);
        IF EXISTS (SELECT 1 FROM jsonb_array_elements(links) AS l(x)
                   WHERE l.x->>'refund' = op->>'refund') THEN
            NULL;  -- linked by this refund before: a repeat
        ELSE
            -- The links of the refunds it replaces (canceled ones) go; ids not linked are
            -- ignored. (`replacing` from a client before partial refunds: one id or null.)
            kept := coalesce((
                SELECT jsonb_agg(l.x ORDER BY l.n)
                FROM jsonb_array_elements(links) WITH ORDINALITY AS l(x, n)
                WHERE l.x->>'refund' NOT IN (
                    SELECT jsonb_array_elements_text(CASE jsonb_typeof(op->'replacing')
                        WHEN 'array' THEN op->'replacing'
                        WHEN 'string' THEN jsonb_build_array(op->'replacing')
                        ELSE '[]'::jsonb END))), '[]'::jsonb);
            -- Posting by posting, exactly (numeric): whether the kept links take back all of
            -- every posting, and whether this refund would take back more than is left of
            -- some posting.
            SELECT coalesce(bool_and(coalesce(s.taken, 0) = o.amount), false) AS all_taken,
                   coalesce(bool_or(coalesce(s.taken, 0) + r.amount > o.amount), false) AS too_much
                INTO sums
                FROM (SELECT n, (p->>'amount')::numeric AS amount
                      FROM jsonb_array_elements(t.spec->'postings') WITH ORDINALITY AS x(p, n)) o
                JOIN (SELECT n, (p->>'amount')::numeric AS amount
                      FROM jsonb_array_elements(op->'postings') WITH ORDINALITY AS x(p, n)) r
                    ON r.n = o.n
                LEFT JOIN (SELECT a.n, sum(a.v::numeric) AS taken
                           FROM jsonb_array_elements(kept) AS l(x),
                                jsonb_array_elements_text(l.x->'amounts') WITH ORDINALITY AS a(v, n)
                           GROUP BY a.n) s
                    ON s.n = o.n;
            IF sums.all_taken THEN
                RETURN refused('original_already_refunded');
            ELSIF sums.too_much THEN
                RETURN refused('refund_exceeds_original');
            ELSIF jsonb_array_length(kept) >= 16 THEN  -- REFUNDS_MAX
                RETURN refused('too_many_refunds');
            END IF;
            UPDATE transfers SET
                refunds = kept || jsonb_build_array(jsonb_build_object(
                    'refund', op->'refund',
                    'amounts', (SELECT jsonb_agg(x.p->'amount' ORDER BY x.n)
                                FROM jsonb_array_elements(op->'postings')
                                     WITH ORDINALITY AS x(p, n)))),
                refunded_by = op->>'refund', updated_at = at_ms
                WHERE id = tid RETURNING * INTO t;
            changed := true;
        END IF;

    ELSIF k = 'redrive' THEN
        IF t.state NOT IN ('done', 'canceled') AND t.lease_until > at_ms THEN
            UPDATE transfers SET lease_until = at_ms WHERE id = tid RETURNING * INTO t;
            changed := true;
        END IF;

    ELSIF k = 'extend' THEN
        -- record.rs: `TransferOp::Extend`. Once the expiry has passed, by the caller's clock
        -- or the store's, it is too late (as for a capture); an expiry is never brought
        -- forward, so one at or past `until` is a repeat; any state but these is left as it
        -- is, for the caller to read why.
        IF t.state IN ('initial', 'pending') THEN
            RETURN refused('transfer_is_not_held');
        ELSIF t.state = 'held' THEN
            IF t.hold_expires_at <= greatest(at_ms, now_ms) THEN
                RETURN refused('hold_expired');
            ELSIF t.hold_expires_at < (op->>'until')::bigint THEN
                UPDATE transfers SET hold_expires_at = (op->>'until')::bigint, updated_at = at_ms
                    WHERE id = tid RETURNING * INTO t;
                changed := true;
            END IF;
        END IF;

    ELSIF k <> 'get' THEN
        RAISE EXCEPTION 'xfer: unknown transfer op %', k;
    END IF;
    RETURN to_jsonb(t) || jsonb_build_object('r', CASE WHEN changed THEN 'transfer' ELSE 'unchanged' END);
END
$$;

-- As migration 6's, storing the record's `refunds`.
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
                           refunds, timeline)
        SELECT tid, r.spec, 'done', r.created_at, r.created_at, r.deadline,
               r.hold_expires_at, NULL, r.lease_until, r.epoch,
               nullif(op->'rec'->'reason', 'null'::jsonb), r.refunded_by,
               refunds_column(op->'rec'->'refunds'),
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
