-- xfer's PostgreSQL shard, migration 11: escalations. A transfer whose recovery kept
-- failing is marked for a person (`TransferOp::Escalate`, `{"k": "escalate", "escalation":
-- {"attempts": n, "error": text, "at": ms}}`, `xfer_core::Escalation` as serde writes it):
-- a non-terminal record with no mark takes it; a terminal or marked one is left as it is
-- (record.rs: `TransferOp::Escalate`). Nothing else changes: not the state, owner, epoch,
-- lease or `updated_at`, so `wake_at` stays, the record stays in the due scan, and neither
-- the timeline's nor the change feed's trigger (migrations 5 and 6) fires.
--
-- A re-drive (`redrive`) now also clears the mark, and re-drives a marked record whose
-- lease has lapsed: when the record is not terminal and its lease is ahead or it is marked,
-- `lease_until` becomes the earlier of it and `now` (`wake_at` follows) and the mark goes.
--
-- `escalation` is jsonb, the mark as serde writes it, NULL unless marked: as the row is read
-- (`to_jsonb(t)`: every step's answer, the due scan, the listing), NULL reads as none. An
-- insert stores the record's mark, if it has one. Rows written before this migration are
-- left as they are (NULL, not marked); no step of an ordinary transfer writes the column
-- or runs a statement more.
--
-- Replaced: `transfer_op` (the escalate step; the re-drive's rule; an insert stores
-- `escalation`).
ALTER TABLE transfers ADD COLUMN escalation jsonb;

-- As migration 10's, and the escalate step (`escalate`), a re-drive that clears the mark
-- (and re-drives a marked record whose lease has lapsed), and an insert stores the
-- record's `escalation`.
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
                               refunds, captured, escalation)
            SELECT tid, r.spec, r.state, r.created_at, r.updated_at, r.deadline,
                   r.hold_expires_at, r.owner, r.lease_until, r.epoch,
                   nullif(op->'rec'->'reason', 'null'::jsonb), r.refunded_by,
                   refunds_column(op->'rec'->'refunds'), captured_column(op->'rec'->'captured'),
                   nullif(op->'rec'->'escalation', 'null'::jsonb)
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

    ELSIF k = 'capture' OR k = 'void' OR k = 'capture_part' THEN
        -- A capture in part is a capture that also keeps its amounts, with the decision.
        IF t.state IN ('initial', 'pending') THEN
            RETURN refused('transfer_is_not_held');
        ELSIF t.state = 'held' THEN
            -- A capture resent long after it was made cannot beat the expiry: the store's
            -- clock judges too.
            IF k <> 'void' AND t.hold_expires_at <= greatest(at_ms, now_ms) THEN
                RETURN refused('hold_expired');
            END IF;
            UPDATE transfers SET
                state = CASE k WHEN 'void' THEN 'canceling' ELSE 'applied' END,
                reason = CASE k WHEN 'void' THEN '"voided"'::jsonb ELSE reason END,
                captured = CASE k WHEN 'capture_part' THEN captured_column(op->'amounts')
                                  ELSE captured END,
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
        -- and an amount at most what the original moved (its captured amount, if captured
        -- in part: `TransferRecord::moved_postings`).
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
                   OR (r.p->>'amount')::numeric > moved_amount(t, o.p, o.n)) THEN
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
                FROM (SELECT n, moved_amount(t, p, n) AS amount
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
        -- record.rs: `TransferOp::Redrive`. A lease ahead lapses now, one lapsed stays; the
        -- mark goes.
        IF t.state NOT IN ('done', 'canceled')
            AND (t.lease_until > at_ms OR t.escalation IS NOT NULL) THEN
            UPDATE transfers SET lease_until = least(lease_until, at_ms), escalation = NULL
                WHERE id = tid RETURNING * INTO t;
            changed := true;
        END IF;

    ELSIF k = 'escalate' THEN
        -- record.rs: `TransferOp::Escalate`: a non-terminal record is marked once; only the
        -- mark is written (no `updated_at`, so no timeline step and no event).
        IF jsonb_typeof(op->'escalation') IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION 'xfer: escalate without an escalation';
        END IF;
        IF t.state NOT IN ('done', 'canceled') AND t.escalation IS NULL THEN
            UPDATE transfers SET escalation = op->'escalation' WHERE id = tid RETURNING * INTO t;
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
