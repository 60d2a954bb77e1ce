-- xfer's MySQL/MariaDB shard, migration 8: escalations. A transfer whose recovery kept
-- failing is marked for a person (`TransferOp::Escalate`, `{"k": "escalate", "escalation":
-- the mark as JSON text}`, `xfer_core::Escalation` as serde writes it: {"attempts": n,
-- "error": text, "at": ms}): a non-terminal record with no mark takes it; a terminal or
-- marked one is left as it is (record.rs: `TransferOp::Escalate`). Nothing else changes:
-- not the state, owner, epoch, lease or `updated_at`, so `wake_at` stays, the record stays
-- in the due scan, and the timeline's trigger (migration 3) adds no step. Statements end
-- with a line holding only `;;`, as in migration 1.
--
-- A re-drive (`redrive`) now also clears the mark, and re-drives a marked record whose
-- lease has lapsed: when the record is not terminal and its lease is ahead or it is marked,
-- `lease_until` becomes the earlier of it and `now` (`wake_at` follows) and the mark goes.
--
-- `escalation` is JSON text, the mark copied from the client's JSON as it is, NULL unless
-- marked, which reads as none; it is answered with the row (every step's answer, the due
-- scan, the listing). The error is any text: the column, the parameters that carry it and
-- the row's answer are utf8mb4 whatever the database's default (as migration 6's
-- metadata). An insert stores the record's mark, if it has one. Rows written before this
-- migration are left as they are (NULL, not marked); no step of an ordinary transfer
-- writes the column or runs a statement more.
--
-- Replaced: `xfer_transfer_json` (answers `escalation`, in utf8mb4), `xfer_transfer_op`
-- (the escalate step, its mark in the new `v_escalation`; the re-drive's rule; an insert
-- stores `escalation`) and `xfer_execute` (reads the batch in utf8mb4, passes
-- `escalation`).
ALTER TABLE transfers ADD COLUMN escalation LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL
    CHECK (escalation IS NULL OR JSON_VALID(escalation))
;;

-- As migration 7's, with `escalation`, in utf8mb4.
CREATE FUNCTION xfer_transfer_json(v_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
                                   v_r VARCHAR(16))
RETURNS LONGTEXT CHARACTER SET utf8mb4 NOT DETERMINISTIC READS SQL DATA
    RETURN (SELECT JSON_OBJECT(
        'r', v_r, 'spec', JSON_EXTRACT(t.spec, '$'), 'state', t.state,
        'created_at', t.created_at, 'updated_at', t.updated_at, 'deadline', t.deadline,
        'hold_expires_at', t.hold_expires_at, 'owner', t.owner, 'lease_until', t.lease_until,
        'epoch', t.epoch, 'reason', JSON_EXTRACT(t.reason, '$'), 'refunded_by', t.refunded_by,
        'refunds', JSON_EXTRACT(t.refunds, '$'), 'captured', JSON_EXTRACT(t.captured, '$'),
        'timeline', JSON_EXTRACT(t.timeline, '$'),
        'escalation', JSON_EXTRACT(t.escalation, '$'))
    FROM transfers t WHERE t.id = v_id)
;;

-- As migration 7's, and the escalate step (`escalate`, which keeps `v_escalation` as
-- `escalation`), a re-drive that clears the mark (and re-drives a marked record whose lease
-- has lapsed), and an insert stores the record's `escalation` (`v_escalation`). Answers in
-- utf8mb4.
CREATE PROCEDURE xfer_transfer_op(
    IN v_k VARCHAR(16), IN v_tid VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
    IN v_spec LONGTEXT, IN v_state VARCHAR(10), IN v_created_at BIGINT,
    IN v_updated_at BIGINT, IN v_deadline BIGINT, IN v_hold_expires_at BIGINT,
    IN v_owner VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN v_lease_until BIGINT,
    IN v_epoch BIGINT, IN v_reason LONGTEXT,
    IN v_refund VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
    IN v_replacing LONGTEXT, IN v_postings LONGTEXT, IN v_refunds LONGTEXT,
    IN v_captured LONGTEXT, IN v_escalation LONGTEXT CHARACTER SET utf8mb4, IN v_at BIGINT,
    IN v_now BIGINT, OUT v_reply LONGTEXT CHARACTER SET utf8mb4)
BEGIN
    DECLARE v_found BOOLEAN DEFAULT TRUE;
    DECLARE v_dup BOOLEAN DEFAULT FALSE;
    DECLARE v_changed BOOLEAN DEFAULT FALSE;
    DECLARE v_t_escalated BOOLEAN;
    DECLARE v_t_state VARCHAR(10);
    DECLARE v_t_epoch BIGINT;
    DECLARE v_t_lease BIGINT;
    DECLARE v_t_hold BIGINT;
    DECLARE v_t_refunded_by VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_t_reversed LONGTEXT;
    DECLARE v_t_refunds LONGTEXT;
    DECLARE v_t_captured LONGTEXT;
    DECLARE v_next VARCHAR(10);
    DECLARE v_n, v_i, v_j INT;
    DECLARE v_ok, v_repeat, v_all_taken, v_too_much BOOLEAN;
    DECLARE v_links, v_kept, v_moved LONGTEXT;
    DECLARE v_linked VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_amount, v_original DECIMAL(20, 0);
    DECLARE v_taken DECIMAL(25, 0);
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = FALSE;
    DECLARE CONTINUE HANDLER FOR 1062 SET v_dup = TRUE;

    step: BEGIN
        IF v_k = 'insert' THEN
            -- (`v_postings` carries the spec's postings reversed.)
            INSERT INTO transfers (id, spec, state, created_at, updated_at, deadline,
                                   hold_expires_at, owner, lease_until, epoch, reason,
                                   refunded_by, reversed, refunds, captured, escalation)
                VALUES (v_tid, v_spec, v_state, v_created_at, v_updated_at, v_deadline,
                        v_hold_expires_at, v_owner, v_lease_until, v_epoch, v_reason, v_refund,
                        v_postings, xfer_refunds_column(v_refunds),
                        xfer_captured_column(v_captured), v_escalation);
            IF NOT v_dup THEN
                SET v_reply = xfer_transfer_json(v_tid, 'transfer');
                LEAVE step;
            END IF;
        END IF;

        SELECT state, epoch, lease_until, hold_expires_at, refunded_by, reversed, refunds,
               captured, escalation IS NOT NULL
            INTO v_t_state, v_t_epoch, v_t_lease, v_t_hold, v_t_refunded_by, v_t_reversed,
                 v_t_refunds, v_t_captured, v_t_escalated
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

        ELSEIF v_k IN ('capture', 'void', 'capture_part') THEN
            -- A capture in part is a capture that also keeps its amounts (`v_captured`), with
            -- the decision.
            IF v_t_state IN ('initial', 'pending') THEN
                SET v_reply = xfer_refused('transfer_is_not_held');
                LEAVE step;
            ELSEIF v_t_state = 'held' THEN
                -- A capture resent long after it was made cannot beat the expiry: the
                -- store's clock judges too.
                IF v_k <> 'void' AND v_t_hold <= GREATEST(v_at, v_now) THEN
                    SET v_reply = xfer_refused('hold_expired');
                    LEAVE step;
                END IF;
                UPDATE transfers SET
                    state = IF(v_k = 'void', 'canceling', 'applied'),
                    reason = IF(v_k = 'void', '"voided"', reason),
                    captured = IF(v_k = 'capture_part', xfer_captured_column(v_captured),
                                  captured),
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
            -- record.rs: `link_refund`, in its order.
            IF v_t_state <> 'done' THEN
                SET v_reply = xfer_refused('original_is_not_done');
                LEAVE step;
            END IF;
            -- The refund's postings are the original's in order (`reversed` holds them with
            -- from and to swapped), each with an amount at most what the original moved
            -- (`xfer_moved`: its captured amount, if captured in part).
            SET v_n = JSON_LENGTH(v_t_reversed);
            SET v_ok = JSON_LENGTH(v_postings) <=> v_n;
            SET v_i = 0;
            WHILE v_ok AND v_i < v_n DO
                SET v_ok = xfer_same_text(v_postings, v_t_reversed, CONCAT('$[', v_i, '].from'))
                    AND xfer_same_text(v_postings, v_t_reversed, CONCAT('$[', v_i, '].to'))
                    AND xfer_same_text(v_postings, v_t_reversed, CONCAT('$[', v_i, '].asset'))
                    AND xfer_amount(v_postings, CONCAT('$[', v_i, '].amount'))
                        <= xfer_moved(v_t_reversed, v_t_captured, v_i);
                SET v_ok = COALESCE(v_ok, FALSE);
                SET v_i = v_i + 1;
            END WHILE;
            IF NOT v_ok THEN
                SET v_reply = xfer_refused('refund_must_reverse_original');
                LEAVE step;
            END IF;
            -- Its links (`TransferRecord::refund_links`): `refunds`, or for a row written
            -- before partial refunds with `refunded_by` set, that one refund taking back
            -- what every posting moved (its whole amount, or the amount captured of it).
            IF xfer_refunds_column(v_t_refunds) IS NOT NULL THEN
                SET v_links = v_t_refunds;
            ELSEIF v_t_refunded_by IS NOT NULL THEN
                SET v_moved = JSON_EXTRACT(v_t_reversed, '$[*].amount');
                SET v_i = 0;
                WHILE v_i < LEAST(v_n, COALESCE(JSON_LENGTH(v_t_captured), 0)) DO
                    SET v_moved = JSON_SET(v_moved, CONCAT('$[', v_i, ']'),
                        JSON_EXTRACT(v_t_captured, CONCAT('$[', v_i, ']')));
                    SET v_i = v_i + 1;
                END WHILE;
                SET v_links = JSON_ARRAY(JSON_OBJECT('refund', v_t_refunded_by,
                    'amounts', JSON_EXTRACT(v_moved, '$')));
            ELSE
                SET v_links = JSON_ARRAY();
            END IF;
            -- A client before partial refunds sends one id or none.
            IF v_replacing IS NULL THEN
                SET v_replacing = JSON_ARRAY();
            ELSEIF NOT JSON_VALID(v_replacing) THEN
                SET v_replacing = JSON_ARRAY(v_replacing);
            ELSEIF JSON_TYPE(v_replacing) <> 'ARRAY' THEN
                SET v_replacing = JSON_ARRAY(v_replacing);
            END IF;
            -- A repeat if linked already; else the links of the refunds it replaces
            -- (canceled ones) go, ids not linked ignored.
            SET v_repeat = FALSE;
            SET v_kept = JSON_ARRAY();
            SET v_i = 0;
            WHILE v_i < JSON_LENGTH(v_links) DO
                SET v_linked = JSON_UNQUOTE(JSON_EXTRACT(v_links, CONCAT('$[', v_i, '].refund')));
                IF v_linked = v_refund THEN
                    SET v_repeat = TRUE;
                ELSEIF NOT JSON_CONTAINS(v_replacing, JSON_QUOTE(v_linked)) THEN
                    SET v_kept = JSON_ARRAY_APPEND(v_kept, '$',
                        JSON_EXTRACT(v_links, CONCAT('$[', v_i, ']')));
                END IF;
                SET v_i = v_i + 1;
            END WHILE;
            IF v_repeat THEN
                SET v_changed = FALSE;  -- linked by this refund before: a repeat
            ELSE
                -- Posting by posting, in DECIMAL: whether the kept links take back all of
                -- every posting, and whether this refund would take back more than is left
                -- of some posting.
                SET v_all_taken = TRUE;
                SET v_too_much = FALSE;
                SET v_i = 0;
                WHILE v_i < v_n DO
                    SET v_original = xfer_moved(v_t_reversed, v_t_captured, v_i);
                    SET v_amount = xfer_amount(v_postings, CONCAT('$[', v_i, '].amount'));
                    SET v_taken = 0;
                    SET v_j = 0;
                    WHILE v_j < JSON_LENGTH(v_kept) DO
                        SET v_taken = v_taken + COALESCE(xfer_amount(v_kept,
                            CONCAT('$[', v_j, '].amounts[', v_i, ']')), 0);
                        SET v_j = v_j + 1;
                    END WHILE;
                    IF v_taken <> v_original THEN
                        SET v_all_taken = FALSE;
                    END IF;
                    IF v_taken + v_amount > v_original THEN
                        SET v_too_much = TRUE;
                    END IF;
                    SET v_i = v_i + 1;
                END WHILE;
                IF v_all_taken THEN
                    SET v_reply = xfer_refused('original_already_refunded');
                    LEAVE step;
                ELSEIF v_too_much THEN
                    SET v_reply = xfer_refused('refund_exceeds_original');
                    LEAVE step;
                ELSEIF JSON_LENGTH(v_kept) >= 16 THEN  -- REFUNDS_MAX
                    SET v_reply = xfer_refused('too_many_refunds');
                    LEAVE step;
                END IF;
                UPDATE transfers SET
                    refunds = JSON_ARRAY_APPEND(v_kept, '$', JSON_OBJECT('refund', v_refund,
                        'amounts', JSON_EXTRACT(v_postings, '$[*].amount'))),
                    refunded_by = v_refund, updated_at = v_at
                    WHERE id = v_tid;
                SET v_changed = TRUE;
            END IF;

        ELSEIF v_k = 'redrive' THEN
            -- record.rs: `TransferOp::Redrive`. A lease ahead lapses now, one lapsed stays;
            -- the mark goes.
            IF v_t_state NOT IN ('done', 'canceled') AND (v_t_lease > v_at OR v_t_escalated) THEN
                UPDATE transfers SET lease_until = LEAST(lease_until, v_at), escalation = NULL
                    WHERE id = v_tid;
                SET v_changed = TRUE;
            END IF;

        ELSEIF v_k = 'escalate' THEN
            -- record.rs: `TransferOp::Escalate`: a non-terminal record is marked once; only the
            -- mark is written (no `updated_at`, so no timeline step).
            IF NOT COALESCE(JSON_TYPE(v_escalation) = 'OBJECT', FALSE) THEN
                SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'xfer: escalate without an escalation';
            END IF;
            IF v_t_state NOT IN ('done', 'canceled') AND NOT v_t_escalated THEN
                UPDATE transfers SET escalation = v_escalation WHERE id = v_tid;
                SET v_changed = TRUE;
            END IF;

        ELSEIF v_k = 'extend' THEN
            -- record.rs: `TransferOp::Extend`, to `v_hold_expires_at`. Once the expiry has
            -- passed, by the caller's clock or the store's, it is too late (as for a
            -- capture); an expiry is never brought forward, so one at or past the new one is
            -- a repeat; any state but these is left as it is, for the caller to read why.
            IF v_t_state IN ('initial', 'pending') THEN
                SET v_reply = xfer_refused('transfer_is_not_held');
                LEAVE step;
            ELSEIF v_t_state = 'held' THEN
                IF v_t_hold <= GREATEST(v_at, v_now) THEN
                    SET v_reply = xfer_refused('hold_expired');
                    LEAVE step;
                END IF;
                IF v_t_hold < v_hold_expires_at THEN
                    UPDATE transfers SET hold_expires_at = v_hold_expires_at, updated_at = v_at
                        WHERE id = v_tid;
                    SET v_changed = TRUE;
                END IF;
            END IF;

        ELSEIF v_k <> 'get' THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'xfer: unknown transfer op';
        END IF;
        SET v_reply = xfer_transfer_json(v_tid, IF(v_changed, 'transfer', 'unchanged'));
    END step;
END
;;

-- As migration 7's, passing `escalation`; the batch and the replies in utf8mb4.
CREATE PROCEDURE xfer_execute(IN v_ops LONGTEXT CHARACTER SET utf8mb4)
BEGIN
    DECLARE v_done BOOLEAN DEFAULT FALSE;
    DECLARE v_now BIGINT DEFAULT xfer_now_ms();
    DECLARE v_replies LONGTEXT CHARACTER SET utf8mb4 DEFAULT '';
    DECLARE v_reply LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_escalation LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_on VARCHAR(8);
    DECLARE v_locked INT;
    DECLARE v_k VARCHAR(16);
    DECLARE v_id, v_t, v_owner, v_refund VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_asset VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_debit, v_credit DECIMAL(20, 0);
    DECLARE v_deadline, v_horizon, v_lb, v_created_at, v_updated_at, v_hold, v_until,
            v_lease, v_epoch, v_at BIGINT;
    DECLARE v_bounded BOOLEAN;
    DECLARE v_spec, v_reason, v_replacing, v_postings, v_refunds, v_captured, v_legs LONGTEXT;
    DECLARE v_state VARCHAR(10);
    DECLARE ops CURSOR FOR
        SELECT j.on_, j.k, j.id, j.t, j.asset, j.debit, j.credit, j.deadline, j.horizon,
               j.bounded, j.lb, j.spec, j.state, j.created_at, j.updated_at, j.hold,
               j.until_ms, j.owner, j.lease, j.epoch, j.reason, j.refund, j.replacing,
               j.postings, j.refunds, j.captured, j.escalation, j.at_ms, j.legs
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
            until_ms   BIGINT PATH '$.until',
            owner      VARCHAR(64) PATH '$.owner',
            lease      BIGINT PATH '$.lease_until',
            epoch      BIGINT PATH '$.epoch',
            reason     LONGTEXT PATH '$.reason',
            refund     VARCHAR(64) PATH '$.refund',
            replacing  LONGTEXT PATH '$.replacing',
            postings   LONGTEXT PATH '$.postings',
            refunds    LONGTEXT PATH '$.refunds',
            captured   LONGTEXT PATH '$.captured',
            escalation LONGTEXT CHARACTER SET utf8mb4 PATH '$.escalation',
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
                       v_until, v_owner, v_lease, v_epoch, v_reason, v_refund, v_replacing,
                       v_postings, v_refunds, v_captured, v_escalation, v_at, v_legs;
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
                                v_epoch, v_reason, v_refund, v_postings, v_refunds,
                                v_legs, v_now,
                                v_reply);
            IF v_reply IS NULL THEN
                -- Not committed: exactly the insert.
                CALL xfer_transfer_op('insert', v_id, v_spec, v_state, v_created_at,
                                      v_updated_at, v_deadline, v_hold, v_owner, v_lease,
                                      v_epoch, v_reason, v_refund, v_replacing, v_postings,
                                      v_refunds, v_captured, v_escalation, v_at, v_now,
                                      v_reply);
            END IF;
        ELSE
            -- (An extend's `until` goes as the new `hold_expires_at`.)
            CALL xfer_transfer_op(v_k, v_id, v_spec, v_state, v_created_at, v_updated_at,
                                  v_deadline, IF(v_k = 'extend', v_until, v_hold), v_owner,
                                  v_lease, v_epoch, v_reason, v_refund, v_replacing, v_postings,
                                  v_refunds, v_captured, v_escalation, v_at, v_now,
                                  v_reply);
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
