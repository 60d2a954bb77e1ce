-- xfer's PostgreSQL shard, migration 4: the one-phase commit with one statement per leg
-- (the check and the move in one conditional update, undone if a later leg fails), answering
-- in a word where the client holds the record.

-- As migration 3's: if the record is absent and every leg's prepare would succeed
-- (record.rs: `one_phase_allows`), the record is inserted `done` and each leg's amounts
-- move into its balance, with no intent; otherwise this is exactly the insert of the
-- record. Answers `committed` (the record is `record::one_phase_done` of the one sent) or
-- `inserted` (the record as sent), else the insert's own answer. `op`: {k, id, rec, legs:
-- [[account, asset, debit, credit], ...]}, one leg per account.
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
                           hold_expires_at, owner, lease_until, epoch, reason, refunded_by)
        SELECT tid, r.spec, 'done', r.created_at, r.created_at, r.deadline,
               r.hold_expires_at, NULL, r.lease_until, r.epoch,
               nullif(op->'rec'->'reason', 'null'::jsonb), r.refunded_by
        FROM jsonb_to_record(op->'rec') AS r(
            spec jsonb, created_at bigint, deadline bigint, hold_expires_at bigint,
            lease_until bigint, epoch bigint, refunded_by text)
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
