-- xfer's MySQL/MariaDB shard, migration 4: partial refunds. A done transfer may be
-- refunded several times in part; its record keeps its refund links
-- (`TransferRecord::refunds`, `RefundLink`), and a link is added only if, posting by
-- posting, the links then take back at most the original's amount (`record::link_refund`).
-- Statements end with a line holding only `;;`, as in migration 1.
--
-- `refunds` is JSON text, an array of `RefundLink`s as serde writes them, oldest first:
-- [{"refund": id, "amounts": [n, ...]}, ...], at most 16 (`REFUNDS_MAX`). Amounts are read
-- into DECIMAL and summed there, never in floating point, so amounts up to 2^63 - 1 and
-- their sums stay exact; the amounts written are copied from the client's JSON as they are.
-- `refunded_by` stays the latest refund linked, so the timeline's trigger (migration 3),
-- which compares it before and after, makes a link's step as before, a link that replaces
-- others included.
--
-- Rows written before this migration are left as they are (no data migration, no table
-- copy): `refunds` is NULL there, and a NULL `refunds` with `refunded_by` set reads as one
-- link taking back every posting's whole amount (`xfer_transfer_op`, as
-- `TransferRecord::refund_links` does in Rust), so such a row answers exactly what it did
-- and its reader derives the same link. The first link written to it stores the links in
-- full.
--
-- Also a held transfer's expiry moved later (`TransferOp::Extend`, `{"k": "extend",
-- "until": ms, "now": ms}`): `xfer_transfer_op` sets `hold_expires_at`, and `wake_at`,
-- generated from it, follows, so the sweeper does not wake for the hold before its new
-- expiry. Only `hold_expires_at` and `updated_at` change, neither the state, the epoch nor
-- `refunded_by`: the timeline's trigger adds no step.
--
-- Replaced: `xfer_transfer_json` (answers `refunds`), `xfer_transfer_op` (the link's rules:
-- the refund's postings are checked against `reversed` posting by posting, no longer as
-- text, and `replacing` is a JSON array as text; an insert stores `refunds`; the extend
-- step), `xfer_one_phase` (stores `refunds`) and `xfer_execute` (passes `replacing` as
-- text, `refunds`, and an extend's `until` as `v_hold_expires_at`).
ALTER TABLE transfers ADD COLUMN refunds LONGTEXT NULL CHECK (refunds IS NULL OR JSON_VALID(refunds))
;;

-- What a row stores of a record's `refunds` (JSON text): NULL when it has none.
CREATE FUNCTION xfer_refunds_column(v_refunds LONGTEXT) RETURNS LONGTEXT DETERMINISTIC NO SQL
    RETURN IF(COALESCE(JSON_TYPE(v_refunds) = 'ARRAY' AND JSON_LENGTH(v_refunds) > 0, FALSE),
              v_refunds, NULL)
;;

-- Whether the strings at `v_path` in the JSON texts `v_a` and `v_b` are the same, byte for
-- byte (NULL if either is missing).
CREATE FUNCTION xfer_same_text(v_a LONGTEXT, v_b LONGTEXT, v_path VARCHAR(64))
RETURNS BOOLEAN DETERMINISTIC NO SQL
    RETURN CAST(JSON_UNQUOTE(JSON_EXTRACT(v_a, v_path)) AS BINARY)
         = CAST(JSON_UNQUOTE(JSON_EXTRACT(v_b, v_path)) AS BINARY)
;;

-- The amount at `v_path` in the JSON text `v_json`, exactly (NULL if missing).
CREATE FUNCTION xfer_amount(v_json LONGTEXT, v_path VARCHAR(64))
RETURNS DECIMAL(20, 0) DETERMINISTIC NO SQL
    RETURN CAST(JSON_UNQUOTE(JSON_EXTRACT(v_json, v_path)) AS DECIMAL(20, 0))
;;

-- As migration 3's, with the refunds.
CREATE FUNCTION xfer_transfer_json(v_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
                                   v_r VARCHAR(16))
RETURNS LONGTEXT NOT DETERMINISTIC READS SQL DATA
    RETURN (SELECT JSON_OBJECT(
        'r', v_r, 'spec', JSON_EXTRACT(t.spec, '$'), 'state', t.state,
        'created_at', t.created_at, 'updated_at', t.updated_at, 'deadline', t.deadline,
        'hold_expires_at', t.hold_expires_at, 'owner', t.owner, 'lease_until', t.lease_until,
        'epoch', t.epoch, 'reason', JSON_EXTRACT(t.reason, '$'), 'refunded_by', t.refunded_by,
        'refunds', JSON_EXTRACT(t.refunds, '$'),
        'timeline', JSON_EXTRACT(t.timeline, '$'))
    FROM transfers t WHERE t.id = v_id)
;;

-- As migration 3's, but a refund link follows `record::link_refund` (partial refunds,
-- `replacing` a list), an insert stores the record's `refunds`, and `extend` moves a held
-- transfer's expiry later, to `v_hold_expires_at`.
CREATE PROCEDURE xfer_transfer_op(
    IN v_k VARCHAR(16), IN v_tid VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
    IN v_spec LONGTEXT, IN v_state VARCHAR(10), IN v_created_at BIGINT,
    IN v_updated_at BIGINT, IN v_deadline BIGINT, IN v_hold_expires_at BIGINT,
    IN v_owner VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN v_lease_until BIGINT,
    IN v_epoch BIGINT, IN v_reason LONGTEXT,
    IN v_refund VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
    IN v_replacing LONGTEXT, IN v_postings LONGTEXT, IN v_refunds LONGTEXT, IN v_at BIGINT,
    IN v_now BIGINT, OUT v_reply LONGTEXT)
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
    DECLARE v_next VARCHAR(10);
    DECLARE v_n, v_i, v_j INT;
    DECLARE v_ok, v_repeat, v_all_taken, v_too_much BOOLEAN;
    DECLARE v_links, v_kept LONGTEXT;
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
                                   refunded_by, reversed, refunds)
                VALUES (v_tid, v_spec, v_state, v_created_at, v_updated_at, v_deadline,
                        v_hold_expires_at, v_owner, v_lease_until, v_epoch, v_reason, v_refund,
                        v_postings, xfer_refunds_column(v_refunds));
            IF NOT v_dup THEN
                SET v_reply = xfer_transfer_json(v_tid, 'transfer');
                LEAVE step;
            END IF;
        END IF;

        SELECT state, epoch, lease_until, hold_expires_at, refunded_by, reversed, refunds
            INTO v_t_state, v_t_epoch, v_t_lease, v_t_hold, v_t_refunded_by, v_t_reversed,
                 v_t_refunds
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
            -- record.rs: `link_refund`, in its order.
            IF v_t_state <> 'done' THEN
                SET v_reply = xfer_refused('original_is_not_done');
                LEAVE step;
            END IF;
            -- The refund's postings are the original's in order (`reversed` holds them with
            -- from and to swapped), each with an amount at most the original's.
            SET v_n = JSON_LENGTH(v_t_reversed);
            SET v_ok = JSON_LENGTH(v_postings) <=> v_n;
            SET v_i = 0;
            WHILE v_ok AND v_i < v_n DO
                SET v_ok = xfer_same_text(v_postings, v_t_reversed, CONCAT('$[', v_i, '].from'))
                    AND xfer_same_text(v_postings, v_t_reversed, CONCAT('$[', v_i, '].to'))
                    AND xfer_same_text(v_postings, v_t_reversed, CONCAT('$[', v_i, '].asset'))
                    AND xfer_amount(v_postings, CONCAT('$[', v_i, '].amount'))
                        <= xfer_amount(v_t_reversed, CONCAT('$[', v_i, '].amount'));
                SET v_ok = COALESCE(v_ok, FALSE);
                SET v_i = v_i + 1;
            END WHILE;
            IF NOT v_ok THEN
                SET v_reply = xfer_refused('refund_must_reverse_original');
                LEAVE step;
            END IF;
            -- Its links (`TransferRecord::refund_links`): `refunds`, or for a row written
            -- before partial refunds with `refunded_by` set, that one refund taking back
            -- every posting's whole amount.
            IF xfer_refunds_column(v_t_refunds) IS NOT NULL THEN
                SET v_links = v_t_refunds;
            ELSEIF v_t_refunded_by IS NOT NULL THEN
                SET v_links = JSON_ARRAY(JSON_OBJECT('refund', v_t_refunded_by,
                    'amounts', JSON_EXTRACT(v_t_reversed, '$[*].amount')));
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
                    SET v_original = xfer_amount(v_t_reversed, CONCAT('$[', v_i, '].amount'));
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

-- As migration 3's, storing the record's `refunds`.
CREATE PROCEDURE xfer_one_phase(
    IN v_tid VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN v_spec LONGTEXT,
    IN v_state VARCHAR(10), IN v_owner VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
    IN v_created_at BIGINT, IN v_deadline BIGINT, IN v_hold_expires_at BIGINT,
    IN v_lease_until BIGINT, IN v_epoch BIGINT, IN v_reason LONGTEXT,
    IN v_refund VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin, IN v_postings LONGTEXT,
    IN v_refunds LONGTEXT, IN v_legs LONGTEXT, IN v_now BIGINT, OUT v_reply LONGTEXT)
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
                               refunded_by, reversed, refunds, timeline)
            VALUES (v_tid, v_spec, 'done', v_created_at, v_created_at, v_deadline,
                    v_hold_expires_at, NULL, v_lease_until, v_epoch, v_reason, v_refund,
                    v_postings, xfer_refunds_column(v_refunds),
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

-- As migration 3's, passing `replacing` as text, the record's `refunds`, and an extend's
-- `until` (as the new `hold_expires_at`).
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
    DECLARE v_spec, v_reason, v_replacing, v_postings, v_refunds, v_legs LONGTEXT;
    DECLARE v_state VARCHAR(10);
    DECLARE ops CURSOR FOR
        SELECT j.on_, j.k, j.id, j.t, j.asset, j.debit, j.credit, j.deadline, j.horizon,
               j.bounded, j.lb, j.spec, j.state, j.created_at, j.updated_at, j.hold,
               j.until_ms, j.owner, j.lease, j.epoch, j.reason, j.refund, j.replacing,
               j.postings, j.refunds, j.at_ms, j.legs
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
                       v_postings, v_refunds, v_at, v_legs;
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
                                      v_refunds, v_at, v_now, v_reply);
            END IF;
        ELSE
            -- (An extend's `until` goes as the new `hold_expires_at`.)
            CALL xfer_transfer_op(v_k, v_id, v_spec, v_state, v_created_at, v_updated_at,
                                  v_deadline, IF(v_k = 'extend', v_until, v_hold), v_owner,
                                  v_lease, v_epoch, v_reason, v_refund, v_replacing, v_postings,
                                  v_refunds, v_at, v_now, v_reply);
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
