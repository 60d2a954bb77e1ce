//! The JSON an op travels in to the server-side steps in `schema.sql`: one object per op
//! (`{on, k, id, ...}`). The replies come back in [`xfer_store::reply_json`]'s shape,
//! records as `to_jsonb(row)`.

use serde_json::{json, Value};
use xfer_core::{LowerBound, Timestamp, TransferRecord};
use xfer_store::{AccountOp, Op, TransferOp};

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
                // What moves of the intent: the same step, with the amounts (migration 10).
                AccountOp::PostPart {
                    transfer,
                    debit,
                    credit,
                    ..
                } => json!({"k": "post_part", "t": transfer, "debit": debit, "credit": credit}),
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
                TransferOp::CapturePart {
                    owner,
                    now,
                    lease_until,
                    amounts,
                } => {
                    json!({"k": "capture_part", "owner": owner, "now": ms(*now), "lease_until": ms(*lease_until), "amounts": amounts})
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
                    now,
                } => {
                    json!({"k": "link_refund", "refund": refund, "replacing": replacing, "postings": postings, "now": ms(*now)})
                }
                TransferOp::Redrive { now } => json!({"k": "redrive", "now": ms(*now)}),
                // The mark as serde writes it, kept as it is (migration 11).
                TransferOp::Escalate { escalation } => {
                    json!({"k": "escalate", "escalation": escalation})
                }
                TransferOp::Extend { until, now } => {
                    json!({"k": "extend", "until": ms(*until), "now": ms(*now)})
                }
                TransferOp::Get => json!({"k": "get"}),
                TransferOp::OnePhase(rec) => one_phase(rec),
            };
            v["on"] = json!("transfer");
            v["id"] = json!(id);
            v
        }
    }
}

/// A one-phase commit: the record, and its legs as `[account, asset, debit, credit]` (a
/// record that no longer validates has none, and is only inserted).
fn one_phase(rec: &TransferRecord) -> Value {
    let legs: Vec<Value> = rec
        .spec
        .validate()
        .unwrap_or_default()
        .iter()
        .map(|l| json!([l.account, l.asset, l.debit, l.credit]))
        .collect();
    json!({"k": "one_phase", "rec": record(rec), "legs": legs})
}

fn record(r: &TransferRecord) -> Value {
    json!({
        "spec": r.spec, "state": r.state, "created_at": ms(r.created_at),
        "updated_at": ms(r.updated_at), "deadline": ms(r.deadline),
        "hold_expires_at": r.hold_expires_at.map(ms), "owner": r.owner,
        "lease_until": ms(r.lease_until), "epoch": r.epoch, "reason": r.reason,
        "refunded_by": r.refunded_by,
        // `RefundLink`s, oldest first; none (a record before partial refunds) as null.
        "refunds": (!r.refunds.is_empty()).then_some(&r.refunds),
        // Of a hold captured in part, each posting's captured amount; none as null.
        "captured": (!r.captured.is_empty()).then_some(&r.captured),
        // Its escalation, if marked; none as null.
        "escalation": r.escalation,
    })
}
