-- xfer's PostgreSQL shard, migration 1: tables, indexes and the server-side protocol steps.
--
-- Runs inside the shard's own schema (the connection's search_path names only it). Each
-- protocol step is one function call on one record: it locks that record's row
-- (`SELECT ... FOR UPDATE`), checks the step's conditions and writes, so the check and the
-- write are one atomic step next to the data. `execute` runs a batch of steps in one
-- statement (one round trip, one commit); each step's conditions are its own record's, and a
-- refused step is an answer, not an error, so it never undoes the others.
--
-- The rules are those of `xfer_store::record` (Rust), which the Memory store runs directly;
-- the conformance suite holds this file to them.
--
-- Timestamps are milliseconds (bigint); ids are compared byte-wise (COLLATE "C") so that
-- cursors follow the same order as the other stores.

CREATE TABLE accounts (
    id          text COLLATE "C" PRIMARY KEY,
    asset       text NOT NULL,
    balance     bigint NOT NULL DEFAULT 0,
    reserved    bigint NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    incoming    bigint NOT NULL DEFAULT 0 CHECK (incoming >= 0),
    lower_bound bigint,  -- NULL: unbounded (an issuer)
    status      text NOT NULL CHECK (status IN ('open', 'closed', 'unopened'))
);

-- One transfer's intent on one account; posted and released ones are tombstones until the
-- store's clock passes their horizon.
CREATE TABLE intents (
    account  text COLLATE "C" NOT NULL,
    transfer text COLLATE "C" NOT NULL,
    debit    bigint NOT NULL CHECK (debit >= 0),
    credit   bigint NOT NULL CHECK (credit >= 0),
    state    text NOT NULL CHECK (state IN ('open', 'posted', 'released')),
    horizon  bigint NOT NULL,
    PRIMARY KEY (account, transfer)
);
CREATE INDEX intents_tombstones ON intents (horizon) WHERE state <> 'open';

-- Every intent ever prepared (and, from migration 2, released mark), for an account's
-- history (newest first by seq).
CREATE TABLE history (
    account  text COLLATE "C" NOT NULL,
    seq      bigint GENERATED ALWAYS AS IDENTITY,
    transfer text COLLATE "C" NOT NULL,
    PRIMARY KEY (account, seq)
);

CREATE TABLE transfers (
    id              text COLLATE "C" PRIMARY KEY,
    spec            jsonb NOT NULL,
    state           text NOT NULL CHECK (state IN
                        ('initial', 'pending', 'applied', 'held', 'canceling', 'done', 'canceled')),
    created_at      bigint NOT NULL,
    updated_at      bigint NOT NULL,
    deadline        bigint NOT NULL,
    hold_expires_at bigint,
    owner           text,
    lease_until     bigint NOT NULL,
    epoch           bigint NOT NULL,
    reason          jsonb,
    refunded_by     text,
    -- TransferRecord::wake_at: when a sweeper should next look at it.
    wake_at         bigint GENERATED ALWAYS AS (
                        CASE
                            WHEN state IN ('done', 'canceled') THEN NULL
                            WHEN state = 'held'
                                THEN greatest(lease_until, coalesce(hold_expires_at, 9223372036854775807))
                            ELSE lease_until
                        END) STORED
);
CREATE INDEX transfers_due ON transfers (wake_at) WHERE wake_at IS NOT NULL;

-- The store's clock: the server's, in milliseconds since the Unix epoch.
CREATE FUNCTION now_ms() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

CREATE FUNCTION account_json(aid text) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'r', 'account', 'id', a.id, 'asset', a.asset, 'balance', a.balance,
        'reserved', a.reserved, 'incoming', a.incoming, 'lower_bound', a.lower_bound,
        'status', a.status,
        'intents', coalesce((
            SELECT jsonb_agg(jsonb_build_array(i.transfer, i.debit, i.credit, i.state, i.horizon)
                             ORDER BY i.transfer)
            FROM intents i WHERE i.account = a.id), '[]'::jsonb))
    FROM accounts a WHERE a.id = aid
$$;

CREATE FUNCTION refused(code text) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('r', 'refused', 'code', code)
$$;

CREATE FUNCTION outcome(r text, o text, code text DEFAULT NULL) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object('r', r, 'o', o, 'code', code))
$$;

-- One step on one account record. `op`: {k, id, ...}; see `wire.rs`. (Replaced by
-- migration 2's.)
CREATE FUNCTION account_op(op jsonb, now_ms bigint) RETURNS jsonb LANGUAGE plpgsql AS $$
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

-- One step on one transfer record. `op`: {k, id, ...}; see `wire.rs`.
CREATE FUNCTION transfer_op(op jsonb, now_ms bigint) RETURNS jsonb LANGUAGE plpgsql AS $$
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
            UPDATE transfers SET refunded_by = op->>'refund' WHERE id = tid RETURNING * INTO t;
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

-- A batch of steps, in order, one reply each, in one statement. The client sorts a batch by
-- record so that concurrent batches lock rows in one global order and never deadlock.
CREATE FUNCTION execute(ops jsonb) RETURNS SETOF jsonb LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := now_ms();
    op     jsonb;
BEGIN
    FOR op IN SELECT e.value FROM jsonb_array_elements(ops) WITH ORDINALITY AS e(value, n)
              ORDER BY e.n LOOP
        IF op->>'on' = 'account' THEN
            RETURN NEXT account_op(op, now_ms);
        ELSE
            RETURN NEXT transfer_op(op, now_ms);
        END IF;
    END LOOP;
END
$$;

-- Drops up to `lim` tombstones whose horizon the store's clock has passed, and placeholder
-- accounts left with no intents. Takes each account's lock as its steps do, in id order (the
-- order batches lock in), so it never deadlocks with them.
CREATE FUNCTION prune(lim integer) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    now_ms  bigint := now_ms();
    dropped integer := 0;
    d       record;
BEGIN
    FOR d IN SELECT due.account, due.transfer FROM (
                 SELECT account, transfer FROM intents
                 WHERE state <> 'open' AND horizon <= now_ms
                 ORDER BY horizon LIMIT lim) AS due
             ORDER BY due.account, due.transfer LOOP
        PERFORM 1 FROM accounts WHERE id = d.account FOR UPDATE;
        DELETE FROM intents
            WHERE account = d.account AND transfer = d.transfer
              AND state <> 'open' AND horizon <= now_ms;
        IF FOUND THEN
            dropped := dropped + 1;
        END IF;
        DELETE FROM accounts a
            WHERE a.id = d.account AND a.status = 'unopened'
              AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.account = d.account);
    END LOOP;
    RETURN dropped;
END
$$;
