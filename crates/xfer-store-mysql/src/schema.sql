-- xfer's MySQL/MariaDB shard, migration 1: tables, indexes and the server-side protocol
-- steps. Statements end with a line holding only `;;` (the mysql client's `DELIMITER ;;`).
--
-- Runs in the shard's own database. Each protocol step is one procedure call on one record:
-- it locks that record's row (`SELECT ... FOR UPDATE`), checks the step's conditions and
-- writes, so the check and the write are one atomic step next to the data. `xfer_execute`
-- runs a batch of steps in one call (one round trip, one transaction, one commit); each
-- step's conditions are its own record's, and a refused step is an answer, not an error, so
-- it never undoes the others.
--
-- The rules are those of `xfer_store::record` (Rust), which the Memory store runs directly;
-- the conformance suite holds this file to them. It is the PostgreSQL store's `schema.sql`
-- in MySQL's dialect, with two differences: an insert that finds its id answers the record
-- and the client compares the bodies, and a refund's reversal check compares the postings
-- as the client wrote them (`reversed`, the original's postings reversed, as JSON text).
--
-- Timestamps are milliseconds (BIGINT); ids are ASCII compared byte-wise (`ascii_bin`) so
-- that cursors follow the same order as the other stores. Amounts are BIGINT; every sum a
-- prepare makes is checked in DECIMAL first (see record.rs).

CREATE TABLE accounts (
    id          VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    asset       VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    balance     BIGINT NOT NULL DEFAULT 0,
    reserved    BIGINT NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    incoming    BIGINT NOT NULL DEFAULT 0 CHECK (incoming >= 0),
    lower_bound BIGINT NULL,  -- NULL: unbounded (an issuer)
    status      VARCHAR(8) CHARACTER SET ascii NOT NULL CHECK (status IN ('open', 'closed', 'unopened'))
) ENGINE = InnoDB
;;

-- One transfer's intent on one account; posted and released ones are tombstones until the
-- store's clock passes their horizon.
CREATE TABLE intents (
    account  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    transfer VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    debit    BIGINT NOT NULL CHECK (debit >= 0),
    credit   BIGINT NOT NULL CHECK (credit >= 0),
    state    VARCHAR(8) CHARACTER SET ascii NOT NULL CHECK (state IN ('open', 'posted', 'released')),
    horizon  BIGINT NOT NULL,
    PRIMARY KEY (account, transfer),
    KEY intents_tombstones (state, horizon)
) ENGINE = InnoDB
;;

-- An account's transfers, newest first by seq: its first write for each (an intent, or a
-- released mark before its horizon on an opened account).
CREATE TABLE history (
    seq      BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    account  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    transfer VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    KEY history_account (account, seq)
) ENGINE = InnoDB
;;

CREATE TABLE transfers (
    id              VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    spec            LONGTEXT NOT NULL CHECK (JSON_VALID(spec)),
    state           VARCHAR(10) CHARACTER SET ascii NOT NULL CHECK (state IN
                        ('initial', 'pending', 'applied', 'held', 'canceling', 'done', 'canceled')),
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    deadline        BIGINT NOT NULL,
    hold_expires_at BIGINT NULL,
    owner           VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    lease_until     BIGINT NOT NULL,
    epoch           BIGINT NOT NULL,
    reason          LONGTEXT NULL CHECK (reason IS NULL OR JSON_VALID(reason)),
    refunded_by     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    -- The spec's postings with from and to swapped, as the client wrote them: what a
    -- refund of this transfer must post.
    reversed        LONGTEXT NOT NULL,
    -- TransferRecord::wake_at: when a sweeper should next look at it.
    wake_at         BIGINT AS (
                        CASE
                            WHEN state IN ('done', 'canceled') THEN NULL
                            WHEN state = 'held'
                                THEN GREATEST(lease_until, COALESCE(hold_expires_at, 9223372036854775807))
                            ELSE lease_until
                        END) STORED,
    KEY transfers_due (wake_at)
) ENGINE = InnoDB
;;

-- The store's clock: the server's, in milliseconds since the Unix epoch (the session's
-- time zone is UTC, so the round trip through a DATETIME is exact).
CREATE FUNCTION xfer_now_ms() RETURNS BIGINT NOT DETERMINISTIC NO SQL
    RETURN CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED)
;;

CREATE FUNCTION xfer_account_json(v_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin)
RETURNS LONGTEXT NOT DETERMINISTIC READS SQL DATA
    RETURN (SELECT JSON_OBJECT(
        'r', 'account', 'id', a.id, 'asset', a.asset, 'balance', a.balance,
        'reserved', a.reserved, 'incoming', a.incoming, 'lower_bound', a.lower_bound,
        'status', a.status,
        'intents', COALESCE((
            SELECT JSON_ARRAYAGG(JSON_ARRAY(i.transfer, i.debit, i.credit, i.state, i.horizon))
            FROM intents i WHERE i.account = a.id), JSON_ARRAY()))
    FROM accounts a WHERE a.id = v_id)
;;

-- The transfer `v_id` tagged `r` (`transfer`, `unchanged` or `existing`).
CREATE FUNCTION xfer_transfer_json(v_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
                                   v_r VARCHAR(16))
RETURNS LONGTEXT NOT DETERMINISTIC READS SQL DATA
    RETURN (SELECT JSON_OBJECT(
        'r', v_r, 'spec', JSON_EXTRACT(t.spec, '$'), 'state', t.state,
        'created_at', t.created_at, 'updated_at', t.updated_at, 'deadline', t.deadline,
        'hold_expires_at', t.hold_expires_at, 'owner', t.owner, 'lease_until', t.lease_until,
        'epoch', t.epoch, 'reason', JSON_EXTRACT(t.reason, '$'), 'refunded_by', t.refunded_by)
    FROM transfers t WHERE t.id = v_id)
;;

CREATE FUNCTION xfer_outcome(v_r VARCHAR(16), v_o VARCHAR(32), v_code VARCHAR(64))
RETURNS LONGTEXT DETERMINISTIC NO SQL
    RETURN IF(v_code IS NULL, JSON_OBJECT('r', v_r, 'o', v_o),
              JSON_OBJECT('r', v_r, 'o', v_o, 'code', v_code))
;;

CREATE FUNCTION xfer_refused(v_code VARCHAR(64)) RETURNS LONGTEXT DETERMINISTIC NO SQL
    RETURN JSON_OBJECT('r', 'refused', 'code', v_code)
;;

-- One step on one account record; see `wire.rs` for the parameters.
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
                ELSE JSON_OBJECT('r', 'not_found')
            END;
            LEAVE step;
        END IF;

        IF v_k IN ('prepare', 'post', 'release') THEN
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

        ELSEIF v_k = 'post' THEN
            -- Only an open intent moves money.
            IF NOT v_found THEN
                SET v_reply = xfer_outcome('post', 'missing', NULL);
            ELSEIF v_i_state = 'posted' THEN
                SET v_reply = xfer_outcome('post', 'already_posted', NULL);
            ELSEIF v_i_state = 'released' THEN
                SET v_reply = xfer_outcome('post', 'found_released', NULL);
            ELSE
                UPDATE intents SET state = 'posted' WHERE account = v_aid AND transfer = v_tid;
                UPDATE accounts
                    SET reserved = reserved - v_i_debit,
                        incoming = incoming - v_i_credit,
                        balance = balance + (v_i_credit - v_i_debit)
                    WHERE id = v_aid;
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

-- One step on one transfer record; see `wire.rs` for the parameters.
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
                UPDATE transfers SET refunded_by = v_refund WHERE id = v_tid;
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

-- A batch of steps, in order, one reply each, in one transaction: answers one row, the
-- replies as a JSON array. The client sorts a batch by record so that concurrent batches
-- lock rows in one global order.
CREATE PROCEDURE xfer_execute(IN v_ops LONGTEXT)
BEGIN
    DECLARE v_done BOOLEAN DEFAULT FALSE;
    DECLARE v_now BIGINT DEFAULT xfer_now_ms();
    DECLARE v_replies LONGTEXT DEFAULT '';
    DECLARE v_reply LONGTEXT;
    DECLARE v_on VARCHAR(8);
    DECLARE v_k VARCHAR(16);
    DECLARE v_id, v_t, v_owner, v_refund, v_replacing VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_asset VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_debit, v_credit DECIMAL(20, 0);
    DECLARE v_deadline, v_horizon, v_lb, v_created_at, v_updated_at, v_hold, v_lease,
            v_epoch, v_at BIGINT;
    DECLARE v_bounded BOOLEAN;
    DECLARE v_spec, v_reason, v_postings LONGTEXT;
    DECLARE v_state VARCHAR(10);
    DECLARE ops CURSOR FOR
        SELECT j.on_, j.k, j.id, j.t, j.asset, j.debit, j.credit, j.deadline, j.horizon,
               j.bounded, j.lb, j.spec, j.state, j.created_at, j.updated_at, j.hold,
               j.owner, j.lease, j.epoch, j.reason, j.refund, j.replacing, j.postings, j.at_ms
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
            at_ms      BIGINT PATH '$.now')) AS j
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
                       v_at;
        IF v_done THEN
            LEAVE each_op;
        END IF;
        IF v_on = 'account' THEN
            CALL xfer_account_op(v_k, v_id, v_t, v_asset, v_debit, v_credit, v_deadline,
                                 v_horizon, v_bounded, v_lb, v_now, v_reply);
        ELSE
            CALL xfer_transfer_op(v_k, v_id, v_spec, v_state, v_created_at, v_updated_at,
                                  v_deadline, v_hold, v_owner, v_lease, v_epoch, v_reason,
                                  v_refund, v_replacing, v_postings, v_at, v_now, v_reply);
        END IF;
        -- A nested call's last statement may have set NOT FOUND: only the cursor ends it.
        SET v_done = FALSE;
        SET v_replies = IF(v_replies = '', v_reply, CONCAT(v_replies, ',', v_reply));
    END LOOP;
    CLOSE ops;
    COMMIT;
    SELECT CONCAT('[', v_replies, ']');
END
;;

-- Drops up to `v_limit` tombstones whose horizon the store's clock has passed, and
-- placeholder accounts left with no intents; answers how many tombstones it dropped. Takes
-- each account's lock as the steps do, in id order (the order batches lock in), so it never
-- waits for them in a cycle.
CREATE PROCEDURE xfer_prune(IN v_limit INT)
BEGIN
    DECLARE v_done BOOLEAN DEFAULT FALSE;
    DECLARE v_now BIGINT DEFAULT xfer_now_ms();
    DECLARE v_dropped INT DEFAULT 0;
    DECLARE v_account, v_transfer VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE v_locked VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE due CURSOR FOR
        SELECT d.account, d.transfer FROM (
            SELECT account, transfer FROM intents
            WHERE state IN ('posted', 'released') AND horizon <= v_now
            ORDER BY horizon LIMIT v_limit) AS d
        ORDER BY d.account, d.transfer;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = TRUE;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;

    START TRANSACTION;
    OPEN due;
    each_due: LOOP
        FETCH due INTO v_account, v_transfer;
        IF v_done THEN
            LEAVE each_due;
        END IF;
        SELECT id INTO v_locked FROM accounts WHERE id = v_account FOR UPDATE;
        SET v_done = FALSE;
        DELETE FROM intents
            WHERE account = v_account AND transfer = v_transfer
              AND state <> 'open' AND horizon <= v_now;
        SET v_dropped = v_dropped + ROW_COUNT();
        DELETE FROM accounts
            WHERE id = v_account AND status = 'unopened'
              AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.account = v_account);
    END LOOP;
    CLOSE due;
    COMMIT;
    SELECT v_dropped;
END
;;
