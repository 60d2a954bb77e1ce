//! The JSON a batch travels in to `xfer_execute` (`schema.sql`): one flat object per op,
//! whose fields `JSON_TABLE` reads as typed columns. What the database only stores or reads
//! as JSON (a spec, a cancel reason, postings, refund links, the refunds a link replaces,
//! an escalation) travels as JSON text in a string.

use serde_json::{json, Value};
use xfer_core::{LowerBound, Timestamp};
use xfer_store::{AccountOp, Op, TransferOp};

/// A timestamp as a BIGINT (a saturated "never" as `i64::MAX`, which no clock reaches).
fn ms(t: Timestamp) -> i64 {
    t.as_i64_ms()
}

fn text<T: serde::Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).expect("a domain value serializes")
}

fn bound(lb: LowerBound) -> (bool, Option<i64>) {
    match lb {
        LowerBound::Bounded(n) => (true, Some(n)),
        LowerBound::Unbounded => (false, None),
    }
}

/// The legs of a one-phase step as JSON text of `[account, asset, debit, credit]`, amounts
/// as strings (`null` for any other op; a record that no longer validates has none, and is
/// only inserted). Text, so that `JSON_TABLE` hands it over as a column: a path into the
/// batch from the procedure would parse the whole batch again for every step.
fn legs(op: &TransferOp) -> Value {
    match op {
        TransferOp::OnePhase(r) => {
            let legs: Vec<Value> = r
                .spec
                .validate()
                .unwrap_or_default()
                .iter()
                .map(|l| {
                    json!([
                        l.account,
                        l.asset,
                        l.debit.to_string(),
                        l.credit.to_string()
                    ])
                })
                .collect();
            Value::String(text(&legs))
        }
        _ => Value::Null,
    }
}

/// The batch `xfer_execute` runs: `ops` in `order` (`reply_json::lock_order`), and before
/// them, among the account steps in id order, a `lock` of each account a one-phase step
/// moves, so that the batch's transaction takes every lock in one global order (a
/// one-phase step, placed among the transfers, would otherwise lock accounts after
/// transfers). A `lock` answers nothing.
pub(crate) fn batch(ops: &[Op], order: &[usize]) -> Value {
    let mut locked: Vec<&str> = ops
        .iter()
        .filter_map(|op| match op {
            Op::Transfer(_, TransferOp::OnePhase(r)) => Some(r),
            _ => None,
        })
        .flat_map(|r| r.spec.postings.iter())
        .flat_map(|p| [p.from.as_str(), p.to.as_str()])
        .collect();
    locked.sort_unstable();
    locked.dedup();
    let mut entries: Vec<((u8, &str), Value)> = locked
        .into_iter()
        .map(|id| ((0, id), json!({"on": "account", "k": "lock", "id": id})))
        .collect();
    entries.extend(
        order
            .iter()
            .map(|&i| (ops[i].record_key(), encode(&ops[i]))),
    );
    // Stable: the ops keep `order`, each lock goes before the steps on its account.
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Value::Array(entries.into_iter().map(|(_, v)| v).collect())
}

/// One op as the object `xfer_execute` reads.
pub(crate) fn encode(op: &Op) -> Value {
    match op {
        Op::Account(id, op) => {
            let mut v = match op {
                AccountOp::Create { asset, lower_bound } => {
                    let (bounded, lb) = bound(*lower_bound);
                    json!({"k": "create", "asset": asset, "bounded": bounded, "lb": lb})
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
                    "credit": credit, "deadline": ms(*deadline), "horizon": ms(*horizon),
                }),
                AccountOp::Post { transfer, .. } => json!({"k": "post", "t": transfer}),
                // The post's step, with what moves of the intent (migration 7).
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
                    let (bounded, lb) = bound(*lower_bound);
                    json!({"k": "set_lower_bound", "bounded": bounded, "lb": lb})
                }
                AccountOp::Get => json!({"k": "get"}),
            };
            v["on"] = json!("account");
            v["id"] = json!(id);
            v
        }
        Op::Transfer(id, op) => {
            let mut v = match op {
                // `postings`: its spec's postings reversed, whole, what `link_refund` checks a
                // refund's against, posting by posting (with `captured`, the amounts captured
                // of a hold captured in part, if any); `refunds`: its `RefundLink`s, if any;
                // `escalation`: its mark, if any (only an insert stores it). A
                // one-phase step carries the insert's fields too (it is that insert where it
                // cannot commit) and its legs (`batch` locks their accounts).
                TransferOp::Insert(r) | TransferOp::OnePhase(r) => json!({
                    "k": if matches!(op, TransferOp::OnePhase(_)) { "one_phase" } else { "insert" },
                    "spec": text(&*r.spec), "state": r.state,
                    "created_at": ms(r.created_at), "updated_at": ms(r.updated_at),
                    "deadline": ms(r.deadline), "hold_expires_at": r.hold_expires_at.map(ms),
                    "owner": r.owner, "lease_until": ms(r.lease_until), "epoch": r.epoch,
                    "reason": r.reason.as_ref().map(text), "refund": r.refunded_by,
                    "postings": text(&r.spec.reversed_postings()),
                    "refunds": (!r.refunds.is_empty()).then(|| text(&r.refunds)),
                    "captured": (!r.captured.is_empty()).then(|| text(&r.captured)),
                    "escalation": r.escalation.as_ref().map(text),
                    "legs": legs(op),
                }),
                TransferOp::Claim {
                    owner,
                    now,
                    lease_until,
                }
                | TransferOp::Capture {
                    owner,
                    now,
                    lease_until,
                }
                | TransferOp::Void {
                    owner,
                    now,
                    lease_until,
                } => json!({
                    "k": kind(op), "owner": owner, "now": ms(*now), "lease_until": ms(*lease_until),
                }),
                // A capture that keeps its amounts, as JSON text, as the record's `captured`.
                TransferOp::CapturePart {
                    owner,
                    now,
                    lease_until,
                    amounts,
                } => json!({
                    "k": "capture_part", "owner": owner, "now": ms(*now),
                    "lease_until": ms(*lease_until), "captured": text(amounts),
                }),
                TransferOp::Decide {
                    epoch,
                    to,
                    reason,
                    now,
                } => json!({
                    "k": "decide", "epoch": epoch, "state": to,
                    "reason": reason.as_ref().map(text), "now": ms(*now),
                }),
                TransferOp::Finish { now } => json!({"k": "finish", "now": ms(*now)}),
                TransferOp::LinkRefund {
                    refund,
                    replacing,
                    postings,
                    now,
                } => json!({
                    "k": "link_refund", "refund": refund, "replacing": text(replacing),
                    "postings": text(postings), "now": ms(*now),
                }),
                TransferOp::Redrive { now } => json!({"k": "redrive", "now": ms(*now)}),
                // The mark as JSON text, kept as the record's `escalation` (migration 8).
                TransferOp::Escalate { escalation } => {
                    json!({"k": "escalate", "escalation": text(escalation)})
                }
                TransferOp::Extend { until, now } => {
                    json!({"k": "extend", "until": ms(*until), "now": ms(*now)})
                }
                TransferOp::Get => json!({"k": "get"}),
            };
            v["on"] = json!("transfer");
            v["id"] = json!(id);
            v
        }
    }
}

fn kind(op: &TransferOp) -> &'static str {
    match op {
        TransferOp::Claim { .. } => "claim",
        TransferOp::Capture { .. } => "capture",
        _ => "void",
    }
}
