-- xfer's MySQL/MariaDB shard, migration 2: the one-phase commit (`TransferOp::OnePhase`,
-- docs/protocol.md), and `xfer_execute` taking the locks of the accounts a batch's
-- one-phase steps move among its account steps. Statements end with a line holding only
-- `;;`, as in migration 1.

-- A transfer whose accounts all live in this shard, at once: if every leg's prepare would
-- succeed (record.rs: `one_phase_allows`) and the record is absent, the record is inserted
-- `done` and each leg's amounts move into its balance, with no intent, and the answer is
-- `committed` (the record is `record::one_phase_done` of the one sent, which the client
-- holds). Otherwise nothing is written and `v_reply` stays NULL: the caller inserts the
-- record as the insert does. `v_legs`: [[account, asset, debit, credit], ...] (amounts as
-- strings) as JSON text, one leg per account, each account locked by the caller.
CREATE PROCEDURE xfer_one_phase(
    IN v_tid VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN v_spec LONGTEXT,
    IN v_created_at BIGINT, IN v_deadline BIGINT, IN v_hold_expires_at BIGINT,
    IN v_lease_until BIGINT, IN v_epoch BIGINT, IN v_reason LONGTEXT,
    IN v_refund VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN v_postings LONGTEXT,
    IN v_legs LONGTEXT, IN v_now BIGINT, OUT v_reply LONGTEXT)
BEGIN
    DECLARE v_dup BOOLEAN DEFAULT FALSE;
    DECLARE v_count INT DEFAULT COALESCE(JSON_LENGTH(v_legs), 0);
    DECLARE v_i INT DEFAULT 0;
    DECLARE v_fits BOOLEAN;
    DECLARE v_account VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_asset VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_d, v_c DECIMAL(20, 0);
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_fits = NULL;
    DECLARE CONTINUE HANDLER FOR 1062 SET v_dup = TRUE;
    SET v_reply = NULL;
    step: BEGIN
        IF v_count = 0 OR v_now >= v_deadline THEN
            LEAVE step;
        END IF;
        -- Each leg's prepare would succeed (record.rs: `prepare_check`): open, the leg's
        -- asset, no intent or tombstone of this transfer, the debit within the available
        -- amount, every sum within a BIGINT (checked in DECIMAL).
        WHILE v_i < v_count DO
            SET v_account = JSON_UNQUOTE(JSON_EXTRACT(v_legs, CONCAT('$[', v_i, '][0]')));
            SET v_asset = JSON_UNQUOTE(JSON_EXTRACT(v_legs, CONCAT('$[', v_i, '][1]')));
            SET v_d = JSON_UNQUOTE(JSON_EXTRACT(v_legs, CONCAT('$[', v_i, '][2]')));
            SET v_c = JSON_UNQUOTE(JSON_EXTRACT(v_legs, CONCAT('$[', v_i, '][3]')));
            SET v_fits = NULL;
            SELECT a.status = 'open' AND a.asset = v_asset
                   AND (a.lower_bound IS NULL
                        OR v_d <= CAST(a.balance AS DECIMAL(21, 0)) - a.reserved - a.lower_bound)
                   AND a.reserved + v_d <= 9223372036854775807
                   AND a.incoming + v_c <= 9223372036854775807
                   AND CAST(a.balance AS DECIMAL(21, 0)) - (a.reserved + v_d) >= -9223372036854775808
                   AND CAST(a.balance AS DECIMAL(21, 0)) + (a.incoming + v_c) <= 9223372036854775807
                   AND NOT EXISTS (SELECT 1 FROM intents i
                                       WHERE i.account = a.id AND i.transfer = v_tid)
                INTO v_fits FROM accounts a WHERE a.id = v_account FOR UPDATE;
            IF v_fits IS NULL OR NOT v_fits THEN
                LEAVE step;
            END IF;
            SET v_i = v_i + 1;
        END WHILE;
        -- The record, done: its primary key makes a repeat an insert's answer (the caller's),
        -- with nothing moved.
        INSERT INTO transfers (id, spec, state, created_at, updated_at, deadline,
                               hold_expires_at, owner, lease_until, epoch, reason,
                               refunded_by, reversed)
            VALUES (v_tid, v_spec, 'done', v_created_at, v_created_at, v_deadline,
                    v_hold_expires_at, NULL, v_lease_until, v_epoch, v_reason, v_refund,
                    v_postings);
        IF v_dup THEN
            LEAVE step;
        END IF;
        SET v_i = 0;
        WHILE v_i < v_count DO
            SET v_account = JSON_UNQUOTE(JSON_EXTRACT(v_legs, CONCAT('$[', v_i, '][0]')));
            SET v_d = JSON_UNQUOTE(JSON_EXTRACT(v_legs, CONCAT('$[', v_i, '][2]')));
            SET v_c = JSON_UNQUOTE(JSON_EXTRACT(v_legs, CONCAT('$[', v_i, '][3]')));
            UPDATE accounts SET balance = balance + (v_c - v_d) WHERE id = v_account;
            INSERT INTO history (account, transfer) VALUES (v_account, v_tid);
            SET v_i = v_i + 1;
        END WHILE;
        SET v_reply = JSON_OBJECT('r', 'committed');
    END;
END
;;


-- As migration 1's, and: an account step `lock` locks the account and answers nothing,
-- a transfer step `one_phase` commits at once or inserts.
-- A batch of steps, in order, one reply each (but `lock`), in one transaction: answers one row, the
-- replies as a JSON array. The client sorts a batch by record so that concurrent batches
-- lock rows in one global order.
CREATE PROCEDURE xfer_execute(IN v_ops LONGTEXT)
BEGIN
    DECLARE v_done BOOLEAN DEFAULT FALSE;
    DECLARE v_now BIGINT DEFAULT xfer_now_ms();
    DECLARE v_replies LONGTEXT DEFAULT '';
    DECLARE v_reply LONGTEXT;
    DECLARE v_on VARCHAR(8);
    DECLARE v_locked INT;
    DECLARE v_k VARCHAR(16);
    DECLARE v_id, v_t, v_owner, v_refund, v_replacing VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_asset VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_debit, v_credit DECIMAL(20, 0);
    DECLARE v_deadline, v_horizon, v_lb, v_created_at, v_updated_at, v_hold, v_lease,
            v_epoch, v_at BIGINT;
    DECLARE v_bounded BOOLEAN;
    DECLARE v_spec, v_reason, v_postings, v_legs LONGTEXT;
    DECLARE v_state VARCHAR(10);
    DECLARE ops CURSOR FOR
        SELECT j.on_, j.k, j.id, j.t, j.asset, j.debit, j.credit, j.deadline, j.horizon,
               j.bounded, j.lb, j.spec, j.state, j.created_at, j.updated_at, j.hold,
               j.owner, j.lease, j.epoch, j.reason, j.refund, j.replacing, j.postings, j.at_ms,
               j.legs
        FROM JSON_TABLE(v_ops, '$[*]' COLUMNS (
            n          FOR ORDINALITY,
            on_        VARCHAR(8) PATH '$.on',
            k          VARCHAR(16) PATH '$.k',
            id         VARCHAR(64) PATH '$.id',
            t          VARCHAR(64) PATH '$.t',
            asset      VARCHAR(32) PATH '$.asset',
            debit      DECIMAL(20, 0) PATH '$.debit',
            credit     DECIMAL(20, 0) PATH '$.credit',
            deadline   BIGINT PATH '$.deadline',
            horizon    BIGINT PATH '$.horizon',
            bounded    BOOLEAN PATH '$.bounded',
            lb         BIGINT PATH '$.lb',
            spec       LONGTEXT PATH '$.spec',
            state      VARCHAR(10) PATH '$.state',
            created_at BIGINT PATH '$.created_at',
            updated_at BIGINT PATH '$.updated_at',
            hold       BIGINT PATH '$.hold_expires_at',
            owner      VARCHAR(64) PATH '$.owner',
            lease      BIGINT PATH '$.lease_until',
            epoch      BIGINT PATH '$.epoch',
            reason     LONGTEXT PATH '$.reason',
            refund     VARCHAR(64) PATH '$.refund',
            replacing  VARCHAR(64) PATH '$.replacing',
            postings   LONGTEXT PATH '$.postings',
            at_ms      BIGINT PATH '$.now',
            legs       LONGTEXT PATH '$.legs')) AS j
        ORDER BY j.n;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;

    START TRANSACTION;
    OPEN ops;
    each_op: LOOP
        FETCH ops INTO v_on, v_k, v_id, v_t, v_asset, v_debit, v_credit, v_deadline, v_horizon,
                       v_bounded, v_lb, v_spec, v_state, v_created_at, v_updated_at, v_hold,
                       v_owner, v_lease, v_epoch, v_reason, v_refund, v_replacing, v_postings,
                       v_at, v_legs;
        IF v_done THEN
            LEAVE each_op;
        END IF;
        SET v_reply = NULL;
        IF v_on = 'account' AND v_k = 'lock' THEN
            -- An account a one-phase step of the batch moves, locked here, among the
            -- batch's account steps in id order: every lock in one global order.
            SELECT 1 INTO v_locked FROM accounts WHERE id = v_id FOR UPDATE;
        ELSEIF v_on = 'account' THEN
            CALL xfer_account_op(v_k, v_id, v_t, v_asset, v_debit, v_credit, v_deadline,
                                 v_horizon, v_bounded, v_lb, v_now, v_reply);
        ELSEIF v_k = 'one_phase' THEN
            CALL xfer_one_phase(v_id, v_spec, v_created_at, v_deadline, v_hold, v_lease,
                                v_epoch, v_reason, v_refund, v_postings,
                                v_legs, v_now,
                                v_reply);
            IF v_reply IS NULL THEN
                -- Not committed: exactly the insert.
                CALL xfer_transfer_op('insert', v_id, v_spec, v_state, v_created_at,
                                      v_updated_at, v_deadline, v_hold, v_owner, v_lease,
                                      v_epoch, v_reason, v_refund, v_replacing, v_postings,
                                      v_at, v_now, v_reply);
            END IF;
        ELSE
            CALL xfer_transfer_op(v_k, v_id, v_spec, v_state, v_created_at, v_updated_at,
                                  v_deadline, v_hold, v_owner, v_lease, v_epoch, v_reason,
                                  v_refund, v_replacing, v_postings, v_at, v_now, v_reply);
        END IF;
        -- A nested call's last statement may have set NOT FOUND: only the cursor ends it.
        SET v_done = FALSE;
        IF v_reply IS NOT NULL THEN
            SET v_replies = IF(v_replies = '', v_reply, CONCAT(v_replies, ',', v_reply));
        END IF;
    END LOOP;
    CLOSE ops;
    COMMIT;
    SELECT CONCAT('[', v_replies, ']');
END
;;
