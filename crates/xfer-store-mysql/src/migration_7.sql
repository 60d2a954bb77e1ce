-- xfer's MySQL/MariaDB shard, migration 7: holds captured in part. A capture in part
-- (`TransferOp::CapturePart`, `{"k": "capture_part", "owner", "now", "lease_until",
-- "captured": the amounts as JSON text}`) is a capture, by the same rules, that also keeps
-- on the record, with the decision, the amount captured of each posting
-- (`TransferRecord::captured`); each account's post then moves only its part of the intent
-- and gives the rest back (`AccountOp::PostPart`, `{"k": "post_part", "t", "debit",
-- "credit"}`), refused with `capture_exceeds_hold` above the open intent's amounts
-- (record.rs: `post`). Statements end with a line holding only `;;`, as in migration 1.
--
-- `captured` is JSON text, an array of the amounts as serde writes them (numbers), copied
-- from the client's JSON as it is; NULL when every posting moves whole, which reads as
-- none. A refund of a record captured in part is judged against what it moved, posting by
-- posting the captured amount where there is one, else the posting's (`xfer_moved`,
-- `TransferRecord::moved_postings`): the reversal check and the sums of `link_refund`, and
-- the link derived for a row with `refunded_by` and no `refunds`. `reversed` keeps the
-- spec's postings reversed, whole, as written at the insert.
--
-- Rows written before this migration are left as they are (`captured` NULL: everything
-- moved whole, as before). The capture in part writes in the capture's own update, and a
-- post in part in the post's: no statement is added to a step.
--
-- Replaced: `xfer_account_op` (the post in part shares the post's step; `v_debit` and
-- `v_credit` carry its amounts), `xfer_transfer_json` (answers `captured`),
-- `xfer_transfer_op` (the capture in part, its amounts in the new `v_captured`; an insert
-- stores `captured`; a refund link judged against the moved amounts) and `xfer_execute`
-- (passes `captured`).
ALTER TABLE transfers ADD COLUMN captured LONGTEXT NULL CHECK (captured IS NULL OR JSON_VALID(captured))
;;

-- What a row stores of a record's `captured` (JSON text): NULL when it has none.
CREATE FUNCTION xfer_captured_column(v_captured LONGTEXT) RETURNS LONGTEXT DETERMINISTIC NO SQL
    RETURN IF(COALESCE(JSON_TYPE(v_captured) = 'ARRAY' AND JSON_LENGTH(v_captured) > 0, FALSE),
              v_captured, NULL)
;;

-- What a record moved of its posting `v_i` (from 0), exactly: the amount captured of it
-- (`v_captured`, if captured in part), else its whole amount (`v_reversed`, its postings
-- reversed) (`TransferRecord::moved_postings`).
CREATE FUNCTION xfer_moved(v_reversed LONGTEXT, v_captured LONGTEXT, v_i INT)
RETURNS DECIMAL(20, 0) DETERMINISTIC NO SQL
    RETURN COALESCE(xfer_amount(v_captured, CONCAT('$[', v_i, ']')),
                    xfer_amount(v_reversed, CONCAT('$[', v_i, '].amount')))
;;

-- As migration 1's, and a post in part (`post_part`): `v_debit` and `v_credit` move into the
-- balance, the whole intent leaves `reserved` and `incoming`. A plain post runs as before.
CREATE PROCEDURE xfer_account_op(
    IN v_k VARCHAR(16), IN v_aid VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
    IN v_tid VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
    IN v_asset VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
    IN v_debit DECIMAL(20, 0), IN v_credit DECIMAL(20, 0), IN v_deadline BIGINT,
    IN v_horizon BIGINT, IN v_bounded BOOLEAN, IN v_lb BIGINT, IN v_now BIGINT,
    OUT v_reply LONGTEXT)
BEGIN
    DECLARE v_found BOOLEAN DEFAULT TRUE;
    DECLARE v_dup BOOLEAN DEFAULT FALSE;
    DECLARE v_status VARCHAR(8);
    DECLARE v_a_asset VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_balance BIGINT;
    DECLARE v_reserved BIGINT;
    DECLARE v_incoming BIGINT;
    DECLARE v_a_lb BIGINT;
    DECLARE v_i_state VARCHAR(8);
    DECLARE v_i_debit BIGINT;
    DECLARE v_i_credit BIGINT;
    DECLARE v_res DECIMAL(21, 0);
    DECLARE v_inc DECIMAL(21, 0);
    DECLARE v_lb_new BIGINT DEFAULT IF(v_bounded, v_lb, NULL);
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = FALSE;
    DECLARE CONTINUE HANDLER FOR 1062 SET v_dup = TRUE;

    step: BEGIN
        lock_row: LOOP
            SET v_found = TRUE;
            IF v_k = 'create' THEN
                SET v_dup = FALSE;
                INSERT INTO accounts (id, asset, lower_bound, status)
                    VALUES (v_aid, v_asset, v_lb_new, 'open');
                IF NOT v_dup THEN
                    SET v_reply = xfer_account_json(v_aid);
                    LEAVE step;
                END IF;
            ELSEIF v_k = 'release' THEN
                -- A release may reach an account nobody created yet: it leaves a placeholder
                -- that holds the released mark, so a prepare arriving after the creation
                -- finds it.
                INSERT INTO accounts (id, asset, lower_bound, status)
                    VALUES (v_aid, v_asset, 0, 'unopened');
            END IF;
            SELECT status, asset, balance, reserved, incoming, lower_bound
                INTO v_status, v_a_asset, v_balance, v_reserved, v_incoming, v_a_lb
                FROM accounts WHERE id = v_aid FOR UPDATE;
            -- A placeholder found by the insert may have been pruned before the lock: again.
            IF v_found OR v_k NOT IN ('create', 'release') THEN
                LEAVE lock_row;
            END IF;
        END LOOP;
        IF NOT v_found THEN
            SET v_reply = CASE v_k
                WHEN 'prepare' THEN xfer_outcome('prepare', 'refused', 'account_not_found')
                WHEN 'post' THEN xfer_outcome('post', 'missing', NULL)
                WHEN 'post_part' THEN xfer_outcome('post', 'missing', NULL)
                ELSE JSON_OBJECT('r', 'not_found')
            END;
            LEAVE step;
        END IF;

        IF v_k IN ('prepare', 'post', 'post_part', 'release') THEN
            SET v_found = TRUE;
            SELECT state, debit, credit INTO v_i_state, v_i_debit, v_i_credit
                FROM intents WHERE account = v_aid AND transfer = v_tid;
        END IF;

        IF v_k = 'create' THEN
            IF v_status = 'unopened' THEN
                -- Keep the tombstones: a late prepare must still find them.
                UPDATE accounts SET status = 'open', asset = v_asset, lower_bound = v_lb_new
                    WHERE id = v_aid;
                SET v_reply = xfer_account_json(v_aid);
            ELSEIF v_a_asset = v_asset AND v_a_lb <=> v_lb_new THEN
                SET v_reply = xfer_account_json(v_aid);
            ELSE
                SET v_reply = xfer_refused('account_exists_with_different_body');
            END IF;

        ELSEIF v_k = 'prepare' THEN
            -- An existing intent or tombstone answers first, then the deadline, then the
            -- rules.
            IF v_found THEN
                SET v_reply = xfer_outcome('prepare', CASE v_i_state
                    WHEN 'open' THEN 'already_prepared'
                    WHEN 'posted' THEN 'already_posted'
                    ELSE 'already_released' END, NULL);
            ELSEIF v_now >= v_deadline THEN
                SET v_reply = xfer_outcome('prepare', 'too_late', NULL);
            ELSEIF v_status = 'closed' THEN
                SET v_reply = xfer_outcome('prepare', 'refused', 'account_closed');
            ELSEIF v_status = 'unopened' THEN
                SET v_reply = xfer_outcome('prepare', 'refused', 'account_not_found');
            ELSEIF v_a_asset <> v_asset THEN
                SET v_reply = xfer_outcome('prepare', 'refused', 'asset_mismatch');
            ELSEIF v_a_lb IS NOT NULL
                AND v_debit > CAST(v_balance AS DECIMAL(21, 0)) - v_reserved - v_a_lb THEN
                SET v_reply = xfer_outcome('prepare', 'refused', 'exceeds_available');
            ELSE
                -- Every number the record will ever hold must fit a BIGINT (see record.rs).
                SET v_res = CAST(v_reserved AS DECIMAL(21, 0)) + v_debit;
                SET v_inc = CAST(v_incoming AS DECIMAL(21, 0)) + v_credit;
                IF v_res > 9223372036854775807 OR v_inc > 9223372036854775807
                    OR v_balance - v_res < -9223372036854775808
                    OR v_balance + v_inc > 9223372036854775807 THEN
                    SET v_reply = xfer_outcome('prepare', 'refused', 'balance_would_overflow');
                ELSE
                    UPDATE accounts SET reserved = v_res, incoming = v_inc WHERE id = v_aid;
                    INSERT INTO intents (account, transfer, debit, credit, state, horizon)
                        VALUES (v_aid, v_tid, v_debit, v_credit, 'open', v_horizon);
                    INSERT INTO history (account, transfer) VALUES (v_aid, v_tid);
                    SET v_reply = xfer_outcome('prepare', 'prepared', NULL);
                END IF;
            END IF;

        ELSEIF v_k IN ('post', 'post_part') THEN
            -- Only an open intent moves money: all of it, or (`post_part`) `v_debit` and
            -- `v_credit`, at most the intent's, the rest given back (record.rs: `post`).
            IF NOT v_found THEN
                SET v_reply = xfer_outcome('post', 'missing', NULL);
            ELSEIF v_i_state = 'posted' THEN
                SET v_reply = xfer_outcome('post', 'already_posted', NULL);
            ELSEIF v_i_state = 'released' THEN
                SET v_reply = xfer_outcome('post', 'found_released', NULL);
            ELSEIF v_k = 'post_part' AND (v_debit > v_i_debit OR v_credit > v_i_credit) THEN
                SET v_reply = xfer_refused('capture_exceeds_hold');
            ELSE
                UPDATE intents SET state = 'posted' WHERE account = v_aid AND transfer = v_tid;
                IF v_k = 'post' THEN
                    UPDATE accounts
                        SET reserved = reserved - v_i_debit,
                            incoming = incoming - v_i_credit,
                            balance = balance + (v_i_credit - v_i_debit)
                        WHERE id = v_aid;
                ELSE
                    UPDATE accounts
                        SET reserved = reserved - v_i_debit,
                            incoming = incoming - v_i_credit,
                            balance = balance + (v_credit - v_debit)
                        WHERE id = v_aid;
                END IF;
                SET v_reply = xfer_outcome('post', 'posted', NULL);
            END IF;

        ELSEIF v_k = 'release' THEN
            IF NOT v_found THEN
                INSERT INTO intents (account, transfer, debit, credit, state, horizon)
                    VALUES (v_aid, v_tid, 0, 0, 'released', v_horizon);
                IF v_status <> 'unopened' AND v_now < v_horizon THEN
                    INSERT INTO history (account, transfer) VALUES (v_aid, v_tid);
                END IF;
                SET v_reply = xfer_outcome('release', 'marked', NULL);
            ELSEIF v_i_state = 'released' THEN
                SET v_reply = xfer_outcome('release', 'already_released', NULL);
            ELSEIF v_i_state = 'posted' THEN
                SET v_reply = xfer_outcome('release', 'found_posted', NULL);
            ELSE
                UPDATE intents SET state = 'released' WHERE account = v_aid AND transfer = v_tid;
                UPDATE accounts
                    SET reserved = reserved - v_i_debit, incoming = incoming - v_i_credit
                    WHERE id = v_aid;
                SET v_reply = xfer_outcome('release', 'released', NULL);
            END IF;

        ELSEIF v_k = 'close' THEN
            IF v_status = 'unopened' THEN
                SET v_reply = JSON_OBJECT('r', 'not_found');
            ELSEIF v_status = 'open' AND EXISTS (
                SELECT 1 FROM intents WHERE account = v_aid AND state = 'open') THEN
                SET v_reply = xfer_refused('account_has_transfers_in_flight');
            ELSE
                UPDATE accounts SET status = 'closed' WHERE id = v_aid;
                SET v_reply = xfer_account_json(v_aid);
            END IF;

        ELSEIF v_k = 'set_lower_bound' THEN
            IF v_status = 'unopened' THEN
                SET v_reply = JSON_OBJECT('r', 'not_found');
            ELSEIF v_lb_new IS NOT NULL
                AND CAST(v_balance AS DECIMAL(21, 0)) - v_reserved - v_lb_new < 0 THEN
                SET v_reply = xfer_refused('lower_bound_above_available');
            ELSE
                UPDATE accounts SET lower_bound = v_lb_new WHERE id = v_aid;
                SET v_reply = xfer_account_json(v_aid);
            END IF;

        ELSEIF v_k = 'get' THEN
            IF v_status = 'unopened' THEN
                SET v_reply = JSON_OBJECT('r', 'not_found');
            ELSE
                SET v_reply = xfer_account_json(v_aid);
            END IF;

        ELSE
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'xfer: unknown account op';
        END IF;
    END step;
END
;;

-- As migration 4's, with `captured`.
CREATE FUNCTION xfer_transfer_json(v_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
                                   v_r VARCHAR(16))
RETURNS LONGTEXT NOT DETERMINISTIC READS SQL DATA
    RETURN (SELECT JSON_OBJECT(
        'r', v_r, 'spec', JSON_EXTRACT(t.spec, '$'), 'state', t.state,
        'created_at', t.created_at, 'updated_at', t.updated_at, 'deadline', t.deadline,
        'hold_expires_at', t.hold_expires_at, 'owner', t.owner, 'lease_until', t.lease_until,
        'epoch', t.epoch, 'reason', JSON_EXTRACT(t.reason, '$'), 'refunded_by', t.refunded_by,
        'refunds', JSON_EXTRACT(t.refunds, '$'), 'captured', JSON_EXTRACT(t.captured, '$'),
        'timeline', JSON_EXTRACT(t.timeline, '$'))
    FROM transfers t WHERE t.id = v_id)
;;

-- As migration 4's, and a capture in part (`capture_part`, which keeps `v_captured` as
-- `captured`), an insert stores the record's `captured` (`v_captured`), and a refund link is
-- judged against what the original moved (`xfer_moved`).
CREATE PROCEDURE xfer_transfer_op(
    IN v_k VARCHAR(16), IN v_tid VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
    IN v_spec LONGTEXT, IN v_state VARCHAR(10), IN v_created_at BIGINT,
    IN v_updated_at BIGINT, IN v_deadline BIGINT, IN v_hold_expires_at BIGINT,
    IN v_owner VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN v_lease_until BIGINT,
    IN v_epoch BIGINT, IN v_reason LONGTEXT,
    IN v_refund VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
    IN v_replacing LONGTEXT, IN v_postings LONGTEXT, IN v_refunds LONGTEXT,
    IN v_captured LONGTEXT, IN v_at BIGINT, IN v_now BIGINT, OUT v_reply LONGTEXT)
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
                                   refunded_by, reversed, refunds, captured)
                VALUES (v_tid, v_spec, v_state, v_created_at, v_updated_at, v_deadline,
                        v_hold_expires_at, v_owner, v_lease_until, v_epoch, v_reason, v_refund,
                        v_postings, xfer_refunds_column(v_refunds),
                        xfer_captured_column(v_captured));
            IF NOT v_dup THEN
                SET v_reply = xfer_transfer_json(v_tid, 'transfer');
                LEAVE step;
            END IF;
        END IF;

        SELECT state, epoch, lease_until, hold_expires_at, refunded_by, reversed, refunds,
               captured
            INTO v_t_state, v_t_epoch, v_t_lease, v_t_hold, v_t_refunded_by, v_t_reversed,
                 v_t_refunds, v_t_captured
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
            IF v_t_state NOT IN ('done', 'canceled') AND v_t_lease > v_at THEN
                UPDATE transfers SET lease_until = v_at WHERE id = v_tid;
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

-- As migration 4's, passing `captured`.
CREATE PROCEDURE xfer_execute(IN v_ops LONGTEXT)
BEGIN
    DECLARE v_done BOOLEAN DEFAULT FALSE;
    DECLARE v_now BIGINT DEFAULT xfer_now_ms();
    DECLARE v_replies LONGTEXT DEFAULT '';
    DECLARE v_reply LONGTEXT;
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
               j.postings, j.refunds, j.captured, j.at_ms, j.legs
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
                       v_postings, v_refunds, v_captured, v_at, v_legs;
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
                                      v_refunds, v_captured, v_at, v_now, v_reply);
            END IF;
        ELSE
            -- (An extend's `until` goes as the new `hold_expires_at`.)
            CALL xfer_transfer_op(v_k, v_id, v_spec, v_state, v_created_at, v_updated_at,
                                  v_deadline, IF(v_k = 'extend', v_until, v_hold), v_owner,
                                  v_lease, v_epoch, v_reason, v_refund, v_replacing, v_postings,
                                  v_refunds, v_captured, v_at, v_now, v_reply);
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
