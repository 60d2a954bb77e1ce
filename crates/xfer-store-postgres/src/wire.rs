//! The JSON that travels between [`Op`]/[`Reply`] and the server-side steps in
//! `schema.sql`: one object per op (`{on, k, id, ...}`), one per reply (`{r, ...}`).
//!
//! Records come back as `to_jsonb(row)`; the domain types' own serde shapes are reused for
//! the parts PostgreSQL only stores (a transfer's spec, a cancel reason).

use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use xfer_core::{
    Account, AccountId, AccountStatus, AssetCode, CancelReason, Code, Intent, IntentState,
    LowerBound, OwnerId, Timestamp, TransferId, TransferRecord, TransferSpec, TransferState,
};
use xfer_store::{AccountOp, Op, PostOutcome, PrepareOutcome, ReleaseOutcome, Reply, TransferOp};

/// A timestamp as a bigint (a saturated "never" as `i64::MAX`, which no clock reaches).
pub(crate) fn ms(t: Timestamp) -> i64 {
    t.as_i64_ms()
}

fn bound(lb: LowerBound) -> Value {
    match lb {
        LowerBound::Bounded(n) => json!(n),
        LowerBound::Unbounded => Value::Null,
    }
}

/// The record an op addresses, as the sort key that fixes the order batches lock rows in.
pub(crate) fn lock_key(op: &Op) -> (u8, &str) {
    match op {
        Op::Account(id, _) => (0, id.as_str()),
        Op::Transfer(id, _) => (1, id.as_str()),
    }
}

/// One op as the object `execute` reads.
pub(crate) fn encode(op: &Op) -> Value {
    match op {
        Op::Account(id, op) => {
            let mut v = match op {
                AccountOp::Create { asset, lower_bound } => {
                    json!({"k": "create", "asset": asset, "lower_bound": bound(*lower_bound)})
                }
                AccountOp::Prepare {
                    transfer,
                    asset,
                    debit,
                    credit,
                    deadline,
                    horizon,
                } => json!({
                    "k": "prepare", "t": transfer, "asset": asset, "debit": debit,
                    "credit": credit, "deadline": deadline.0, "horizon": ms(*horizon),
                }),
                AccountOp::Post { transfer, .. } => json!({"k": "post", "t": transfer}),
                AccountOp::Release {
                    transfer,
                    asset,
                    horizon,
                } => {
                    json!({"k": "release", "t": transfer, "asset": asset, "horizon": ms(*horizon)})
                }
                AccountOp::Close => json!({"k": "close"}),
                AccountOp::SetLowerBound { lower_bound } => {
                    json!({"k": "set_lower_bound", "lower_bound": bound(*lower_bound)})
                }
                AccountOp::Get => json!({"k": "get"}),
            };
            v["on"] = json!("account");
            v["id"] = json!(id);
            v
        }
        Op::Transfer(id, op) => {
            let mut v = match op {
                TransferOp::Insert(rec) => json!({"k": "insert", "rec": record(rec)}),
                TransferOp::Claim {
                    owner,
                    now,
                    lease_until,
                } => {
                    json!({"k": "claim", "owner": owner, "now": ms(*now), "lease_until": ms(*lease_until)})
                }
                TransferOp::Decide {
                    epoch,
                    to,
                    reason,
                    now,
                } => {
                    json!({"k": "decide", "epoch": epoch, "to": to, "reason": reason, "now": ms(*now)})
                }
                TransferOp::Capture {
                    owner,
                    now,
                    lease_until,
                } => {
                    json!({"k": "capture", "owner": owner, "now": ms(*now), "lease_until": ms(*lease_until)})
                }
                TransferOp::Void {
                    owner,
                    now,
                    lease_until,
                } => {
                    json!({"k": "void", "owner": owner, "now": ms(*now), "lease_until": ms(*lease_until)})
                }
                TransferOp::Finish { now } => json!({"k": "finish", "now": ms(*now)}),
                TransferOp::LinkRefund {
                    refund,
                    replacing,
                    postings,
                } => {
                    json!({"k": "link_refund", "refund": refund, "replacing": replacing, "postings": postings})
                }
                TransferOp::Redrive { now } => json!({"k": "redrive", "now": ms(*now)}),
                TransferOp::Get => json!({"k": "get"}),
            };
            v["on"] = json!("transfer");
            v["id"] = json!(id);
            v
        }
    }
}

fn record(r: &TransferRecord) -> Value {
    json!({
        "spec": r.spec, "state": r.state, "created_at": ms(r.created_at),
        "updated_at": ms(r.updated_at), "deadline": ms(r.deadline),
        "hold_expires_at": r.hold_expires_at.map(ms), "owner": r.owner,
        "lease_until": ms(r.lease_until), "epoch": r.epoch, "reason": r.reason,
        "refunded_by": r.refunded_by,
    })
}

/// A transfer row as `to_jsonb(row)` gives it.
#[derive(Deserialize)]
pub(crate) struct TransferRow {
    spec: TransferSpec,
    state: TransferState,
    created_at: u64,
    updated_at: u64,
    deadline: u64,
    hold_expires_at: Option<u64>,
    owner: Option<OwnerId>,
    lease_until: u64,
    epoch: u64,
    reason: Option<CancelReason>,
    refunded_by: Option<TransferId>,
}

impl From<TransferRow> for TransferRecord {
    fn from(r: TransferRow) -> TransferRecord {
        TransferRecord {
            spec: r.spec.into(),
            state: r.state,
            created_at: Timestamp(r.created_at),
            updated_at: Timestamp(r.updated_at),
            deadline: Timestamp(r.deadline),
            hold_expires_at: r.hold_expires_at.map(Timestamp),
            owner: r.owner,
            lease_until: Timestamp(r.lease_until),
            epoch: r.epoch,
            reason: r.reason,
            refunded_by: r.refunded_by,
        }
    }
}

/// An account as `account_json` gives it; intents as `[transfer, debit, credit, state,
/// horizon]`.
#[derive(Deserialize)]
pub(crate) struct AccountRow {
    id: AccountId,
    asset: AssetCode,
    balance: i64,
    reserved: i64,
    incoming: i64,
    lower_bound: Option<i64>,
    status: AccountStatus,
    intents: Vec<(TransferId, u64, u64, IntentState, u64)>,
}

impl From<AccountRow> for Account {
    fn from(r: AccountRow) -> Account {
        Account {
            id: r.id,
            asset: r.asset,
            balance: r.balance,
            reserved: r.reserved,
            incoming: r.incoming,
            lower_bound: r
                .lower_bound
                .map_or(LowerBound::Unbounded, LowerBound::Bounded),
            status: r.status,
            intents: r
                .intents
                .into_iter()
                .map(|(t, debit, credit, state, horizon)| {
                    let horizon = Timestamp(horizon);
                    let intent = Intent {
                        debit,
                        credit,
                        state,
                        horizon,
                    };
                    (t, intent)
                })
                .collect(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum PrepareWord {
    Prepared,
    AlreadyPrepared,
    AlreadyPosted,
    AlreadyReleased,
    TooLate,
    Refused,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum PostWord {
    Posted,
    AlreadyPosted,
    Missing,
    FoundReleased,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum ReleaseWord {
    Released,
    AlreadyReleased,
    Marked,
    FoundPosted,
}

/// One reply as a step returns it.
#[derive(Deserialize)]
#[serde(tag = "r", rename_all = "snake_case")]
enum ReplyRow {
    Account(AccountRow),
    Prepare { o: PrepareWord, code: Option<Code> },
    Post { o: PostWord },
    Release { o: ReleaseWord },
    Transfer(TransferRow),
    Unchanged(TransferRow),
    Refused { code: Code },
    NotFound,
}

/// Parses one reply; `Err` says what was wrong with it.
pub(crate) fn decode(text: &str) -> Result<Reply, String> {
    let row: ReplyRow = serde_json::from_str(text).map_err(|e| format!("{e} in {text}"))?;
    Ok(match row {
        ReplyRow::Account(a) => Reply::Account(Arc::new(a.into())),
        ReplyRow::Prepare { o, code } => Reply::Prepare(match o {
            PrepareWord::Prepared => PrepareOutcome::Prepared,
            PrepareWord::AlreadyPrepared => PrepareOutcome::AlreadyPrepared,
            PrepareWord::AlreadyPosted => PrepareOutcome::AlreadyPosted,
            PrepareWord::AlreadyReleased => PrepareOutcome::AlreadyReleased,
            PrepareWord::TooLate => PrepareOutcome::TooLate,
            PrepareWord::Refused => PrepareOutcome::Refused(
                code.ok_or_else(|| format!("a refused prepare without a code: {text}"))?,
            ),
        }),
        ReplyRow::Post { o } => Reply::Post(match o {
            PostWord::Posted => PostOutcome::Posted,
            PostWord::AlreadyPosted => PostOutcome::AlreadyPosted,
            PostWord::Missing => PostOutcome::Missing,
            PostWord::FoundReleased => PostOutcome::FoundReleased,
        }),
        ReplyRow::Release { o } => Reply::Release(match o {
            ReleaseWord::Released => ReleaseOutcome::Released,
            ReleaseWord::AlreadyReleased => ReleaseOutcome::AlreadyReleased,
            ReleaseWord::Marked => ReleaseOutcome::Marked,
            ReleaseWord::FoundPosted => ReleaseOutcome::FoundPosted,
        }),
        ReplyRow::Transfer(t) => Reply::Transfer(Arc::new(t.into())),
        ReplyRow::Unchanged(t) => Reply::Unchanged(Arc::new(t.into())),
        ReplyRow::Refused { code } => Reply::Refused(code),
        ReplyRow::NotFound => Reply::NotFound,
    })
}

/// Parses a row of `accounts` as `account_json` gives it.
pub(crate) fn decode_account(text: &str) -> Result<Account, String> {
    serde_json::from_str::<AccountRow>(text)
        .map(Account::from)
        .map_err(|e| format!("{e} in {text}"))
}

/// Parses a row of `transfers` as `to_jsonb` gives it.
pub(crate) fn decode_transfer(text: &str) -> Result<TransferRecord, String> {
    serde_json::from_str::<TransferRow>(text)
        .map(TransferRecord::from)
        .map_err(|e| format!("{e} in {text}"))
}
