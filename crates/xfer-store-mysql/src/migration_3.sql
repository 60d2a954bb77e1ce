-- xfer's MySQL/MariaDB shard, migration 3: each transfer record keeps its timeline
-- (xfer_store::timeline), the states it passed through, each with the time and the owner
-- of the write, set by triggers on `transfers` in the step's own update, mirroring
-- `timeline::step_of`: a step is kept when the write changed the state, the epoch or the
-- refund link; at most 16, the first and the latest. Statements end with a line holding
-- only `;;`, as in migration 1.
--
-- `timeline` is JSON text, an array of `Step`s as serde writes them: {"at": ms, "state",
-- "owner", "epoch", "reason": CancelReason's JSON or null, "refund"}. NULL in a row written
-- before this migration: its reader derives one step, the row as it is at its `updated_at`
-- (`timeline::derived`), and the next step starts from that.
--
-- Replaced: `xfer_transfer_json` (answers the timeline), `xfer_transfer_op` (a refund link
-- sets `updated_at` to the linker's clock, which its step and its `refunded` event take),
-- `xfer_one_phase` (the record written done with both its steps; takes the sent record's
-- state and owner for the first) and `xfer_execute` (passes them).
ALTER TABLE transfers ADD COLUMN timeline LONGTEXT NULL CHECK (timeline IS NULL OR JSON_VALID(timeline))
;;

-- One step, as JSON text: the record's state, owner and epoch after a write at `v_at`, the
-- reason only on a step to `canceling` or `canceled` (`TransferRecord::step_at`).
CREATE FUNCTION xfer_step(v_at BIGINT, v_state VARCHAR(10),
                          v_owner VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
                          v_epoch BIGINT, v_reason LONGTEXT,
                          v_refund VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin)
RETURNS LONGTEXT DETERMINISTIC NO SQL
    -- (`+ 0`: MariaDB writes a BIGINT parameter as a JSON string.)
    RETURN JSON_OBJECT('at', v_at + 0, 'state', v_state, 'owner', v_owner, 'epoch', v_epoch + 0,
        'reason', IF(v_state IN ('canceling', 'canceled'), JSON_EXTRACT(v_reason, '$'), NULL),
        'refund', v_refund)
;;

-- `Timeline::push`: past 16 steps the oldest after the first is dropped.
CREATE FUNCTION xfer_timeline_push(v_t LONGTEXT, v_step LONGTEXT)
RETURNS LONGTEXT DETERMINISTIC NO SQL
    RETURN JSON_ARRAY_APPEND(IF(JSON_LENGTH(v_t) >= 16, JSON_REMOVE(v_t, '$[1]'), v_t), '$',
                             JSON_EXTRACT(v_step, '$'))
;;

-- A record written new: its first step, at `created_at`, unless the writer gave the whole
-- timeline (the one-phase commit).
CREATE TRIGGER xfer_transfer_inserted_timeline BEFORE INSERT ON transfers FOR EACH ROW
BEGIN
    IF NEW.timeline IS NULL THEN
        SET NEW.timeline = JSON_ARRAY(JSON_EXTRACT(xfer_step(NEW.created_at, NEW.state,
            NEW.owner, NEW.epoch, NEW.reason, NULL), '$'));
    END IF;
END
;;

CREATE TRIGGER xfer_transfer_changed_timeline BEFORE UPDATE ON transfers FOR EACH ROW
BEGIN
    DECLARE v_was LONGTEXT;
    IF NOT (OLD.state <=> NEW.state) OR NOT (OLD.epoch <=> NEW.epoch)
        OR (NEW.refunded_by IS NOT NULL AND NOT (OLD.refunded_by <=> NEW.refunded_by)) THEN
        SET v_was = COALESCE(OLD.timeline, JSON_ARRAY(JSON_EXTRACT(xfer_step(OLD.updated_at,
            OLD.state, OLD.owner, OLD.epoch, OLD.reason, OLD.refunded_by), '$')));
        SET NEW.timeline = xfer_timeline_push(v_was, xfer_step(NEW.updated_at, NEW.state,
            NEW.owner, NEW.epoch, NEW.reason,
            IF(OLD.state <=> NEW.state AND OLD.epoch <=> NEW.epoch, NEW.refunded_by, NULL)));
    END IF;
END
;;

-- As migration 1's, with the timeline.
CREATE FUNCTION xfer_transfer_json(v_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
                                   v_r VARCHAR(16))
RETURNS LONGTEXT NOT DETERMINISTIC READS SQL DATA
    RETURN (SELECT JSON_OBJECT(
        'r', v_r, 'spec', JSON_EXTRACT(t.spec, '$'), 'state', t.state,
        'created_at', t.created_at, 'updated_at', t.updated_at, 'deadline', t.deadline,
        'hold_expires_at', t.hold_expires_at, 'owner', t.owner, 'lease_until', t.lease_until,
        'epoch', t.epoch, 'reason', JSON_EXTRACT(t.reason, '$'), 'refunded_by', t.refunded_by,
        'timeline', JSON_EXTRACT(t.timeline, '$'))
    FROM transfers t WHERE t.id = v_id)
;;

-- As migration 1's, but a refund link sets `updated_at`.
CREATE PROCEDURE xfer_transfer_op(
    IN v_k VARCHAR(16), IN v_tid VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
    IN v_spec LONGTEXT, IN v_state VARCHAR(10), IN v_created_at BIGINT,
    IN v_updated_at BIGINT, IN v_deadline BIGINT, IN v_hold_expires_at BIGINT,
    IN v_owner VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN v_lease_until BIGINT,
    IN v_epoch BIGINT, IN v_reason LONGTEXT,
    IN v_refund VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
    IN v_replacing VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
    IN v_postings LONGTEXT, IN v_at BIGINT, IN v_now BIGINT, OUT v_reply LONGTEXT)
BEGIN
    DECLARE v_found BOOLEAN DEFAULT TRUE;
    DECLARE v_dup BOOLEAN DEFAULT FALSE;
    DECLARE v_changed BOOLEAN DEFAULT FALSE;
    DECLARE v_t_state VARCHAR(10);
    DECLARE v_t_epoch BIGINT;
    DECLARE v_t_lease BIGINT;
    DECLARE v_t_hold BIGINT;
    DECLARE v_t_refunded_by VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_t_reversed LONGTEXT;
    DECLARE v_next VARCHAR(10);
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = FALSE;
    DECLARE CONTINUE HANDLER FOR 1062 SET v_dup = TRUE;

    step: BEGIN
        IF v_k = 'insert' THEN
            -- (`v_postings` carries the spec's postings reversed.)
            INSERT INTO transfers (id, spec, state, created_at, updated_at, deadline,
                                   hold_expires_at, owner, lease_until, epoch, reason,
                                   refunded_by, reversed)
                VALUES (v_tid, v_spec, v_state, v_created_at, v_updated_at, v_deadline,
                        v_hold_expires_at, v_owner, v_lease_until, v_epoch, v_reason, v_refund,
                        v_postings);
            IF NOT v_dup THEN
                SET v_reply = xfer_transfer_json(v_tid, 'transfer');
                LEAVE step;
            END IF;
        END IF;

        SELECT state, epoch, lease_until, hold_expires_at, refunded_by, reversed
            INTO v_t_state, v_t_epoch, v_t_lease, v_t_hold, v_t_refunded_by, v_t_reversed
            FROM transfers WHERE id = v_tid FOR UPDATE;
        IF NOT v_found THEN
            SET v_reply = JSON_OBJECT('r', 'not_found');
            LEAVE step;
        END IF;

        IF v_k = 'insert' THEN
            -- Same id: the client compares the bodies.
            SET v_reply = xfer_transfer_json(v_tid, 'existing');
            LEAVE step;

        ELSEIF v_k = 'claim' THEN
            SET v_next = CASE
                WHEN v_t_state = 'initial' THEN 'pending'
                WHEN v_t_state IN ('pending', 'applied', 'canceling') AND v_t_lease <= v_at
                    THEN v_t_state
                WHEN v_t_state = 'held' AND v_t_lease <= v_at AND v_t_hold <= v_at
                    THEN 'canceling'
            END;
            IF v_next IS NOT NULL THEN
                UPDATE transfers SET
                    reason = IF(v_t_state = 'held', '"expired"', reason),
                    state = v_next, owner = v_owner, lease_until = v_lease_until,
                    epoch = epoch + 1, updated_at = v_at
                    WHERE id = v_tid;
                SET v_changed = TRUE;
            END IF;

        ELSEIF v_k = 'decide' THEN
            -- The commit point: compare-and-set on state and epoch.
            IF v_t_state = 'pending' AND v_t_epoch = v_epoch
                AND v_state IN ('applied', 'held', 'canceling') THEN
                UPDATE transfers SET state = v_state, reason = v_reason, updated_at = v_at
                    WHERE id = v_tid;
                SET v_changed = TRUE;
            END IF;

        ELSEIF v_k IN ('capture', 'void') THEN
            IF v_t_state IN ('initial', 'pending') THEN
                SET v_reply = xfer_refused('transfer_is_not_held');
                LEAVE step;
            ELSEIF v_t_state = 'held' THEN
                -- A capture resent long after it was made cannot beat the expiry: the
                -- store's clock judges too.
                IF v_k = 'capture' AND v_t_hold <= GREATEST(v_at, v_now) THEN
                    SET v_reply = xfer_refused('hold_expired');
                    LEAVE step;
                END IF;
                UPDATE transfers SET
                    state = IF(v_k = 'capture', 'applied', 'canceling'),
                    reason = IF(v_k = 'capture', reason, '"voided"'),
                    owner = v_owner, lease_until = v_lease_until,
                    epoch = epoch + 1, updated_at = v_at
                    WHERE id = v_tid;
                SET v_changed = TRUE;
            END IF;

        ELSEIF v_k = 'finish' THEN
            IF v_t_state IN ('applied', 'canceling') THEN
                UPDATE transfers SET
                    state = IF(v_t_state = 'applied', 'done', 'canceled'),
                    owner = NULL, updated_at = v_at
                    WHERE id = v_tid;
                SET v_changed = TRUE;
            END IF;

        ELSEIF v_k = 'link_refund' THEN
            IF v_t_state <> 'done' THEN
                SET v_reply = xfer_refused('original_is_not_done');
                LEAVE step;
            ELSEIF NOT (v_t_reversed <=> v_postings) THEN
                -- The refund's postings must be the original's, each with from and to
                -- swapped.
                SET v_reply = xfer_refused('refund_must_reverse_original');
                LEAVE step;
            ELSEIF v_t_refunded_by <=> v_refund THEN
                SET v_changed = FALSE;  -- linked by this refund before: a repeat
            ELSEIF v_t_refunded_by IS NULL OR v_t_refunded_by <=> v_replacing THEN
                UPDATE transfers SET refunded_by = v_refund, updated_at = v_at WHERE id = v_tid;
                SET v_changed = TRUE;
            ELSE
                SET v_reply = xfer_refused('original_already_refunded');
                LEAVE step;
            END IF;

        ELSEIF v_k = 'redrive' THEN
            IF v_t_state NOT IN ('done', 'canceled') AND v_t_lease > v_at THEN
                UPDATE transfers SET lease_until = v_at WHERE id = v_tid;
                SET v_changed = TRUE;
            END IF;

        ELSEIF v_k <> 'get' THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'xfer: unknown transfer op';
        END IF;
        SET v_reply = xfer_transfer_json(v_tid, IF(v_changed, 'transfer', 'unchanged'));
    END step;
END
;;

-- As migration 2's, and the record written done keeps both its steps.
CREATE PROCEDURE xfer_one_phase(
    IN v_tid VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN v_spec LONGTEXT,
    IN v_state VARCHAR(10), IN v_owner VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
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
        -- Its timeline the insert's step and the finish's (`record::one_phase_done`).
        INSERT INTO transfers (id, spec, state, created_at, updated_at, deadline,
                               hold_expires_at, owner, lease_until, epoch, reason,
                               refunded_by, reversed, timeline)
            VALUES (v_tid, v_spec, 'done', v_created_at, v_created_at, v_deadline,
                    v_hold_expires_at, NULL, v_lease_until, v_epoch, v_reason, v_refund,
                    v_postings,
                    JSON_ARRAY(
                        JSON_EXTRACT(xfer_step(v_created_at, v_state, v_owner, v_epoch, NULL,
                                               NULL), '$'),
                        JSON_EXTRACT(xfer_step(v_created_at, 'done', NULL, v_epoch, NULL,
                                               NULL), '$')));
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

-- As migration 2's, passing the one-phase step the sent record's state and owner.
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
            CALL xfer_one_phase(v_id, v_spec, v_state, v_owner, v_created_at, v_deadline,
                                v_hold, v_lease,
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
