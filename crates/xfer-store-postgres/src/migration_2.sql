-- xfer's PostgreSQL shard, migration 2: a release's mark on an opened account, before its
-- horizon, adds the transfer to the account's history, as `xfer_store::record` does (issue
-- 49: a transfer one account refused was missing from that account's history).

-- One step on one account record. `op`: {k, id, ...}; see `wire.rs`.
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

    ELSIF k = 'post' THEN
        -- Only an open intent moves money.
        SELECT * INTO i FROM intents WHERE account = aid AND transfer = tid;
        IF NOT FOUND THEN
            RETURN outcome('post', 'missing');
        ELSIF i.state = 'posted' THEN
            RETURN outcome('post', 'already_posted');
        ELSIF i.state = 'released' THEN
            RETURN outcome('post', 'found_released');
        END IF;
        UPDATE intents SET state = 'posted' WHERE account = aid AND transfer = tid;
        UPDATE accounts
            SET reserved = reserved - i.debit,
                incoming = incoming - i.credit,
                balance = balance + (i.credit - i.debit)
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
