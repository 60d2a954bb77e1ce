-- xfer's PostgreSQL shard, migration 10: holds captured in part. A capture in part
-- (`TransferOp::CapturePart`, `{"k": "capture_part", "owner", "now", "lease_until",
-- "amounts": [n, ...]}`) is a capture, by the same rules, that also keeps on the record, with
-- the decision, the amount captured of each posting (`TransferRecord::captured`); each
-- account's post then moves only its part of the intent and gives the rest back
-- (`AccountOp::PostPart`, `{"k": "post_part", "t", "debit": n, "credit": n}`), refused with
-- `capture_exceeds_hold` above the open intent's amounts (record.rs: `post`).
--
-- `captured` is a jsonb array of the amounts as serde writes them (numbers), NULL when
-- every posting moves whole: as the row is read (`to_jsonb(t)`), NULL reads as none. A
-- refund of a record captured in part is judged against what it moved, posting by posting
-- the captured amount where there is one, else the posting's (`moved_amount`,
-- `TransferRecord::moved_postings`): the reversal check and the sums of `link_refund`, and
-- the link derived for a row with `refunded_by` and no `refunds`.
--
-- Rows written before this migration are left as they are (`captured` NULL: everything
-- moved whole, as before). The capture in part writes in the capture's own update, and a
-- post in part in the post's: no statement is added to a step.
--
-- Replaced: `account_op` (the post in part shares the post's step), `transfer_op` (the
-- capture in part; an insert stores `captured`; a refund link judged against the moved
-- amounts) and `refund_links`.
ALTER TABLE transfers ADD COLUMN captured jsonb;

-- What a row stores of a record's `captured`: NULL when it has none.
CREATE FUNCTION captured_column(captured jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN jsonb_typeof(captured) = 'array' AND jsonb_array_length(captured) > 0
                THEN captured END
$$;

-- What `rec` moved of its posting `p`, the `n`th (from 1): the amount captured of it, if
-- captured in part, else its whole amount (`TransferRecord::moved_postings`).
CREATE FUNCTION moved_amount(rec transfers, p jsonb, n bigint) RETURNS numeric
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce((rec.captured ->> (n::int - 1))::numeric, (p->>'amount')::numeric)
$$;

-- As migration 7's, the derived link taking back what each posting moved.
CREATE OR REPLACE FUNCTION refund_links(rec transfers) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN refunds_column(rec.refunds) IS NOT NULL THEN rec.refunds
        WHEN rec.refunded_by IS NOT NULL THEN jsonb_build_array(jsonb_build_object(
            'refund', rec.refunded_by,
            'amounts', (SELECT coalesce(jsonb_agg(coalesce(rec.captured -> (x.n::int - 1),
                                                           x.p->'amount') ORDER BY x.n),
                                        '[]'::jsonb)
                        FROM jsonb_array_elements(rec.spec->'postings')
                             WITH ORDINALITY AS x(p, n))))
        ELSE '[]'::jsonb
    END
$$;

-- As migration 2's, and a post in part (`post_part`): the part sent moves into the balance,
-- the whole intent leaves `reserved` and `incoming`. A plain post runs as before, in
-- bigint.
CREATE OR REPLACE FUNCTION account_op(op jsonb, now_ms bigint) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    k   text := op->>'k';
    aid text := op->>'id';
    tid text := op->>'t';
    a   accounts%ROWTYPE;
    i   intents%ROWTYPE;
    lb  bigint;
    d   numeric;
    c   numeric;
    res numeric;
    inc numeric;
    pd  bigint;
    pc  bigint;
    lo  constant numeric := -9223372036854775808;
    hi  constant numeric := 9223372036854775807;
BEGIN
    LOOP
        IF k = 'create' THEN
            INSERT INTO accounts (id, asset, lower_bound, status)
                VALUES (aid, op->>'asset', (op->>'lower_bound')::bigint, 'open')
                ON CONFLICT (id) DO NOTHING;
            IF FOUND THEN
                RETURN account_json(aid);
            END IF;
        ELSIF k = 'release' THEN
            -- A release may reach an account nobody created yet: it leaves a placeholder
            -- that holds the released mark, so a prepare arriving after the creation finds it.
            INSERT INTO accounts (id, asset, lower_bound, status)
                VALUES (aid, op->>'asset', 0, 'unopened')
                ON CONFLICT (id) DO NOTHING;
        END IF;
        SELECT * INTO a FROM accounts WHERE id = aid FOR UPDATE;
        -- A placeholder found by the insert may have been pruned before the lock: again.
        EXIT WHEN FOUND OR k NOT IN ('create', 'release');
    END LOOP;
    IF NOT FOUND THEN
        RETURN CASE k
            WHEN 'prepare' THEN outcome('prepare', 'refused', 'account_not_found')
            WHEN 'post' THEN outcome('post', 'missing')
            WHEN 'post_part' THEN outcome('post', 'missing')
            ELSE '{"r": "not_found"}'::jsonb
        END;
    END IF;

    IF k = 'create' THEN
        lb := (op->>'lower_bound')::bigint;
        IF a.status = 'unopened' THEN
            -- Keep the tombstones: a late prepare must still find them.
            UPDATE accounts SET status = 'open', asset = op->>'asset', lower_bound = lb
                WHERE id = aid;
            RETURN account_json(aid);
        ELSIF a.asset = op->>'asset' AND a.lower_bound IS NOT DISTINCT FROM lb THEN
            RETURN account_json(aid);
        END IF;
        RETURN refused('account_exists_with_different_body');

    ELSIF k = 'prepare' THEN
        -- An existing intent or tombstone answers first, then the deadline, then the rules.
        SELECT * INTO i FROM intents WHERE account = aid AND transfer = tid;
        IF FOUND THEN
            RETURN outcome('prepare', CASE i.state
                WHEN 'open' THEN 'already_prepared'
                WHEN 'posted' THEN 'already_posted'
                ELSE 'already_released' END);
        END IF;
        IF now_ms >= (op->>'deadline')::numeric THEN
            RETURN outcome('prepare', 'too_late');
        END IF;
        IF a.status = 'closed' THEN
            RETURN outcome('prepare', 'refused', 'account_closed');
        ELSIF a.status = 'unopened' THEN
            RETURN outcome('prepare', 'refused', 'account_not_found');
        ELSIF a.asset <> op->>'asset' THEN
            RETURN outcome('prepare', 'refused', 'asset_mismatch');
        END IF;
        d := (op->>'debit')::numeric;
        c := (op->>'credit')::numeric;
        IF a.lower_bound IS NOT NULL
            AND d > a.balance::numeric - a.reserved - a.lower_bound THEN
            RETURN outcome('prepare', 'refused', 'exceeds_available');
        END IF;
        -- Every number the record will ever hold must fit a bigint (see record.rs).
        res := a.reserved + d;
        inc := a.incoming + c;
        IF res > hi OR inc > hi OR a.balance - res < lo OR a.balance + inc > hi THEN
            RETURN outcome('prepare', 'refused', 'balance_would_overflow');
        END IF;
        UPDATE accounts SET reserved = res, incoming = inc WHERE id = aid;
        INSERT INTO intents (account, transfer, debit, credit, state, horizon)
            VALUES (aid, tid, d, c, 'open', (op->>'horizon')::bigint);
        INSERT INTO history (account, transfer) VALUES (aid, tid);
        RETURN outcome('prepare', 'prepared');

    ELSIF k = 'post' OR k = 'post_part' THEN
        -- Only an open intent moves money: all of it, or (`post_part`) the part sent, at
        -- most the intent's, the rest given back (record.rs: `post`).
        SELECT * INTO i FROM intents WHERE account = aid AND transfer = tid;
        IF NOT FOUND THEN
            RETURN outcome('post', 'missing');
        ELSIF i.state = 'posted' THEN
            RETURN outcome('post', 'already_posted');
        ELSIF i.state = 'released' THEN
            RETURN outcome('post', 'found_released');
        END IF;
        IF k = 'post_part' THEN
            d := (op->>'debit')::numeric;
            c := (op->>'credit')::numeric;
            IF d > i.debit OR c > i.credit THEN
                RETURN refused('capture_exceeds_hold');
            END IF;
            pd := d;
            pc := c;
        ELSE
            pd := i.debit;
            pc := i.credit;
        END IF;
        UPDATE intents SET state = 'posted' WHERE account = aid AND transfer = tid;
        UPDATE accounts
            SET reserved = reserved - i.debit,
                incoming = incoming - i.credit,
                balance = balance + (pc - pd)
            WHERE id = aid;
        RETURN outcome('post', 'posted');

    ELSIF k = 'release' THEN
        SELECT * INTO i FROM intents WHERE account = aid AND transfer = tid;
        IF NOT FOUND THEN
            INSERT INTO intents (account, transfer, debit, credit, state, horizon)
                VALUES (aid, tid, 0, 0, 'released', (op->>'horizon')::bigint);
            IF a.status <> 'unopened' AND now_ms < (op->>'horizon')::bigint THEN
                INSERT INTO history (account, transfer) VALUES (aid, tid);
            END IF;
            RETURN outcome('release', 'marked');
        ELSIF i.state = 'released' THEN
            RETURN outcome('release', 'already_released');
        ELSIF i.state = 'posted' THEN
            RETURN outcome('release', 'found_posted');
        END IF;
        UPDATE intents SET state = 'released' WHERE account = aid AND transfer = tid;
        UPDATE accounts SET reserved = reserved - i.debit, incoming = incoming - i.credit
            WHERE id = aid;
        RETURN outcome('release', 'released');

    ELSIF k = 'close' THEN
        IF a.status = 'unopened' THEN
            RETURN '{"r": "not_found"}'::jsonb;
        ELSIF a.status = 'open' THEN
            IF EXISTS (SELECT 1 FROM intents WHERE account = aid AND state = 'open') THEN
                RETURN refused('account_has_transfers_in_flight');
            END IF;
            UPDATE accounts SET status = 'closed' WHERE id = aid;
        END IF;
        RETURN account_json(aid);

    ELSIF k = 'set_lower_bound' THEN
        IF a.status = 'unopened' THEN
            RETURN '{"r": "not_found"}'::jsonb;
        END IF;
        lb := (op->>'lower_bound')::bigint;
        IF lb IS NOT NULL AND a.balance::numeric - a.reserved - lb < 0 THEN
            RETURN refused('lower_bound_above_available');
        END IF;
        UPDATE accounts SET lower_bound = lb WHERE id = aid;
        RETURN account_json(aid);

    ELSIF k = 'get' THEN
        IF a.status = 'unopened' THEN
            RETURN '{"r": "not_found"}'::jsonb;
        END IF;
        RETURN account_json(aid);
    END IF;
    RAISE EXCEPTION 'xfer: unknown account op %', k;
END
$$;

-- As migration 7's, and a capture in part (`capture_part`, which keeps its amounts as
-- `captured`), an insert stores the record's `captured`, and a refund link is judged
-- against what the original moved (`moved_amount`).
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
                               refunds, captured)
            SELECT tid, r.spec, r.state, r.created_at, r.updated_at, r.deadline,
                   r.hold_expires_at, r.owner, r.lease_until, r.epoch,
                   nullif(op->'rec'->'reason', 'null'::jsonb), r.refunded_by,
                   refunds_column(op->'rec'->'refunds'), captured_column(op->'rec'->'captured')
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

