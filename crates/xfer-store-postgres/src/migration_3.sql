-- xfer's PostgreSQL shard, migration 3: the one-phase commit (`TransferOp::OnePhase`,
-- docs/protocol.md), `execute` taking a batch's account locks first when it holds one, and
-- account reads without a lock.

-- A transfer whose accounts all live in this shard, at once: if the record is absent and
-- every leg's prepare would succeed (record.rs: `one_phase_allows`), the record is inserted
-- `done` and each leg's amounts move into its balance, with no intent; otherwise this is
-- exactly the insert of the record. `op`: {k, id, rec, legs: [[account, asset, debit,
-- credit], ...]}.
CREATE FUNCTION one_phase(op jsonb, now_ms bigint) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    tid text := op->>'id';
    leg jsonb;
    a   accounts%ROWTYPE;
    t   transfers%ROWTYPE;
    d   numeric;
    c   numeric;
    ok  boolean := now_ms < (op->'rec'->>'deadline')::bigint;
    lo  constant numeric := -9223372036854775808;
    hi  constant numeric := 9223372036854775807;
BEGIN
    -- The record first, done: its id's unique index is what makes a repeat (or a
    -- concurrent insert of the same id) an insert's answer, never a second move.
    INSERT INTO transfers (id, spec, state, created_at, updated_at, deadline,
                           hold_expires_at, owner, lease_until, epoch, reason, refunded_by)
        SELECT tid, r.spec, 'done', r.created_at, r.created_at, r.deadline,
               r.hold_expires_at, NULL, r.lease_until, r.epoch,
               nullif(op->'rec'->'reason', 'null'::jsonb), r.refunded_by
        FROM jsonb_to_record(op->'rec') AS r(
            spec jsonb, created_at bigint, deadline bigint, hold_expires_at bigint,
            lease_until bigint, epoch bigint, refunded_by text)
        WHERE ok AND jsonb_array_length(op->'legs') > 0
        ON CONFLICT (id) DO NOTHING
        RETURNING * INTO t;
    IF NOT FOUND THEN
        RETURN transfer_op(jsonb_set(op, '{k}', '"insert"'), now_ms);
    END IF;
    FOR leg IN SELECT value FROM jsonb_array_elements(op->'legs') LOOP
        SELECT * INTO a FROM accounts WHERE id = leg->>0 FOR UPDATE;
        d := (leg->>2)::numeric;
        c := (leg->>3)::numeric;
        IF NOT FOUND OR a.status <> 'open' OR a.asset <> leg->>1
            OR (a.lower_bound IS NOT NULL AND d > a.balance::numeric - a.reserved - a.lower_bound)
            OR a.reserved + d > hi OR a.incoming + c > hi
            OR a.balance - (a.reserved + d) < lo OR a.balance + (a.incoming + c) > hi
            OR EXISTS (SELECT 1 FROM intents i WHERE i.account = a.id AND i.transfer = tid)
        THEN
            ok := false;
            EXIT;
        END IF;
    END LOOP;
    IF NOT ok THEN
        -- A leg's prepare would not succeed: the record as the insert leaves it, for the
        -- two phases (nothing else was written).
        UPDATE transfers SET state = r.state, owner = r.owner, updated_at = r.updated_at
            FROM jsonb_to_record(op->'rec') AS r(state text, owner text, updated_at bigint)
            WHERE id = tid RETURNING transfers.* INTO t;
        RETURN to_jsonb(t) || '{"r": "transfer"}'::jsonb;
    END IF;
    FOR leg IN SELECT value FROM jsonb_array_elements(op->'legs') LOOP
        UPDATE accounts
            SET balance = (balance + ((leg->>3)::numeric - (leg->>2)::numeric))::bigint
            WHERE id = leg->>0;
        INSERT INTO history (account, transfer) VALUES (leg->>0, tid);
    END LOOP;
    RETURN to_jsonb(t) || '{"r": "transfer"}'::jsonb;
END
$$;

-- As migration 1's, and a batch holding a one-phase commit first locks every account the
-- batch names, in id order: its other steps lock one record each in the batch's order
-- (accounts, then transfers), but a one-phase commit, placed by its transfer, locks
-- accounts too, and without this two batches could wait for each other in a cycle.
CREATE OR REPLACE FUNCTION execute(ops jsonb) RETURNS SETOF jsonb LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := now_ms();
    op     jsonb;
BEGIN
    IF jsonb_path_exists(ops, '$[*] ? (@.k == "one_phase")') THEN
        PERFORM 1 FROM accounts WHERE id IN (
                SELECT e->>'id' FROM jsonb_array_elements(ops) AS e
                    WHERE e->>'on' = 'account' AND e->>'k' <> 'get'
                UNION
                SELECT l->>0 FROM jsonb_array_elements(ops) AS e,
                                  jsonb_array_elements(e->'legs') AS l
                    WHERE e->>'k' = 'one_phase')
            ORDER BY id FOR UPDATE;
    END IF;
    FOR op IN SELECT e.value FROM jsonb_array_elements(ops) WITH ORDINALITY AS e(value, n)
              ORDER BY e.n LOOP
        IF op->>'on' = 'account' AND op->>'k' = 'get' THEN
            -- A read takes no lock: it neither waits for the batches that write nor holds
            -- them up until its own commit (the pre-check reads every account of a batch).
            RETURN NEXT coalesce(
                (SELECT account_json(a.id) FROM accounts a
                     WHERE a.id = op->>'id' AND a.status <> 'unopened'),
                '{"r": "not_found"}'::jsonb);
        ELSIF op->>'on' = 'account' THEN
            RETURN NEXT account_op(op, now_ms);
        ELSIF op->>'k' = 'one_phase' THEN
            RETURN NEXT one_phase(op, now_ms);
        ELSE
            RETURN NEXT transfer_op(op, now_ms);
        END IF;
    END LOOP;
END
$$;
