//! What travels between [`Op`]/[`Reply`] and the functions in `functions.lua`: one `FCALL`
//! per op (its keys, the step's name, the record's id, the step's arguments as strings), and
//! one flat array of strings per reply (`[kind, …]`; records as `HGETALL` gives them).
//!
//! Numbers go as decimal text both ways (the functions do exact integer arithmetic on it);
//! the parts Redis only stores (a transfer's spec, a cancel reason, an escalation) are the
//! domain types' own JSON. The functions read some such texts themselves, as text: a
//! refund's postings and the original spec's, which they reverse (amounts aside, the same
//! text; the amounts their digits), a record's refund links, which they write too, and the
//! amounts a hold captured in part keeps (`[3,5]`, the digits).

use crate::keys::Keys;
use redis::{Cmd, Value};
use serde::de::value::{Error as DeError, StrDeserializer};
use serde::Deserialize;
use std::sync::Arc;
use xfer_core::{
    Account, AccountId, AccountStatus, Amount, AssetCode, CancelReason, Code, Escalation, Intent,
    IntentState, LowerBound, OwnerId, RefundLink, Timeline, Timestamp, TransferId, TransferRecord,
    TransferSpec, TransferState,
};
use xfer_store::record::{one_phase_done, one_phase_reply};
use xfer_store::{
    AccountOp, Event, EventKind, EventPage, FeedPosition, Op, PostOutcome, PrepareOutcome,
    ReleaseOutcome, Reply, TransferOp,
};

pub(crate) const ACCOUNT_FN: &str = "xfer_7_account";
pub(crate) const TRANSFER_FN: &str = "xfer_7_transfer";
pub(crate) const ONE_PHASE_FN: &str = "xfer_7_one_phase";
pub(crate) const TOMBS_DUE_FN: &str = "xfer_7_tombs_due";
pub(crate) const EVENTS_FN: &str = "xfer_7_events";
pub(crate) const TRIM_EVENTS_FN: &str = "xfer_7_trim_events";
pub(crate) const HISTORY_FN: &str = "xfer_7_history";
pub(crate) const HISTORY_TO_LIST_FN: &str = "xfer_7_history_to_list";

/// A timestamp as the functions store it: milliseconds, a saturated "never" as `i64::MAX`.
pub(crate) fn ms(t: Timestamp) -> String {
    t.as_i64_ms().to_string()
}

fn bound(lb: LowerBound) -> String {
    match lb {
        LowerBound::Bounded(n) => n.to_string(),
        LowerBound::Unbounded => String::new(),
    }
}

/// A unit enum variant's serde name (`TransferState::Applied` → `applied`).
fn word<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        other => unreachable!("a unit variant serialises as a string, not {other:?}"),
    }
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("domain types serialise")
}

fn fcall(name: &str, keys: &[String], args: Vec<String>) -> Cmd {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(name).arg(keys.len()).arg(keys).arg(args);
    cmd
}

/// The `FCALL` that runs `op`.
pub(crate) fn command(keys: &Keys, op: &Op) -> Cmd {
    match op {
        Op::Account(id, op) => {
            let mut args = vec![String::new(), id.to_string()];
            args[0] = match op {
                AccountOp::Create { asset, lower_bound } => {
                    args.extend([asset.to_string(), bound(*lower_bound)]);
                    "create"
                }
                AccountOp::Prepare {
                    transfer,
                    asset,
                    debit,
                    credit,
                    deadline,
                    horizon,
                } => {
                    args.extend([
                        transfer.to_string(),
                        asset.to_string(),
                        debit.to_string(),
                        credit.to_string(),
                        ms(*deadline),
                        ms(*horizon),
                    ]);
                    "prepare"
                }
                AccountOp::Post { transfer, .. } => {
                    args.push(transfer.to_string());
                    "post"
                }
                AccountOp::PostPart {
                    transfer,
                    debit,
                    credit,
                    ..
                } => {
                    args.extend([transfer.to_string(), debit.to_string(), credit.to_string()]);
                    "post_part"
                }
                AccountOp::Release {
                    transfer,
                    asset,
                    horizon,
                } => {
                    args.extend([transfer.to_string(), asset.to_string(), ms(*horizon)]);
                    "release"
                }
                AccountOp::Close => "close",
                AccountOp::SetLowerBound { lower_bound } => {
                    args.push(bound(*lower_bound));
                    "set_lower_bound"
                }
                AccountOp::Get => "get",
            }
            .into();
            fcall(ACCOUNT_FN, &account_keys(keys, id), args)
        }
        Op::Transfer(id, op) => {
            let mut args = vec![String::new(), id.to_string()];
            let lease = |args: &mut Vec<String>, o: &OwnerId, now, until| {
                args.extend([o.to_string(), ms(now), ms(until)]);
            };
            args[0] = match op {
                TransferOp::OnePhase(rec) => return one_phase(keys, rec),
                TransferOp::Insert(rec) => {
                    args.extend(record_fields(rec));
                    "insert"
                }
                TransferOp::Claim {
                    owner,
                    now,
                    lease_until,
                } => {
                    lease(&mut args, owner, *now, *lease_until);
                    "claim"
                }
                TransferOp::Decide {
                    epoch,
                    to,
                    reason,
                    now,
                } => {
                    args.extend([
                        epoch.to_string(),
                        word(to),
                        reason.as_ref().map(json).unwrap_or_default(),
                        ms(*now),
                    ]);
                    "decide"
                }
                TransferOp::Capture {
                    owner,
                    now,
                    lease_until,
                } => {
                    lease(&mut args, owner, *now, *lease_until);
                    "capture"
                }
                TransferOp::CapturePart {
                    owner,
                    now,
                    lease_until,
                    amounts,
                } => {
                    // The amounts as the record keeps them (none: all of each posting).
                    lease(&mut args, owner, *now, *lease_until);
                    args.push(if amounts.is_empty() {
                        String::new()
                    } else {
                        json(amounts)
                    });
                    "capture_part"
                }
                TransferOp::Void {
                    owner,
                    now,
                    lease_until,
                } => {
                    lease(&mut args, owner, *now, *lease_until);
                    "void"
                }
                TransferOp::Finish { now } => {
                    args.push(ms(*now));
                    "finish"
                }
                TransferOp::LinkRefund {
                    refund,
                    replacing,
                    postings,
                    now,
                } => {
                    // The refunds replaced last: as many as there are.
                    args.extend([refund.to_string(), json(postings), ms(*now)]);
                    args.extend(replacing.iter().map(|r| r.to_string()));
                    "link_refund"
                }
                TransferOp::Redrive { now } => {
                    args.push(ms(*now));
                    "redrive"
                }
                TransferOp::Escalate { escalation } => {
                    // Stored as it is: the function never reads it.
                    args.push(json(escalation));
                    "escalate"
                }
                TransferOp::Extend { until, now } => {
                    args.extend([ms(*until), ms(*now)]);
                    "extend"
                }
                TransferOp::Get => "get",
            }
            .into();
            fcall(TRANSFER_FN, &transfer_keys(keys, id), args)
        }
    }
}

/// The `FCALL` that drops the tombstone `transfer` on `account` if it is due.
pub(crate) fn prune_command(keys: &Keys, account: &AccountId, transfer: &str) -> Cmd {
    let args = vec!["prune".into(), account.to_string(), transfer.to_string()];
    fcall(ACCOUNT_FN, &account_keys(keys, account), args)
}

fn account_keys(keys: &Keys, id: &AccountId) -> [String; 4] {
    [
        keys.account(id),
        keys.history(id),
        keys.accounts(),
        keys.tombs(),
    ]
}

/// The `FCALL` of a one-phase commit: the transfer's keys, each leg's account and history,
/// and the change feed; the deadline, the legs and the record's fields (a record that no
/// longer validates has no legs, and is only inserted).
fn one_phase(keys: &Keys, rec: &TransferRecord) -> Cmd {
    let id = rec.id();
    let legs = rec.spec.validate().unwrap_or_default();
    let [record, transfers, due, events] = transfer_keys(keys, id);
    let mut k = vec![record, transfers, due];
    let mut args = vec![
        "one_phase".to_string(),
        id.to_string(),
        ms(rec.deadline),
        legs.len().to_string(),
    ];
    for leg in &legs {
        k.extend([keys.account(&leg.account), keys.history(&leg.account)]);
        args.extend([
            leg.account.to_string(),
            leg.asset.to_string(),
            leg.debit.to_string(),
            leg.credit.to_string(),
        ]);
    }
    k.push(events);
    args.extend(record_fields(rec));
    fcall(ONE_PHASE_FN, &k, args)
}

fn transfer_keys(keys: &Keys, id: &TransferId) -> [String; 4] {
    [
        keys.transfer(id),
        keys.transfers(),
        keys.due(),
        keys.events(),
    ]
}

/// A new transfer record as the hash's field/value pairs (absent fields: none).
fn record_fields(r: &TransferRecord) -> Vec<String> {
    let mut f: Vec<String> = [
        ("spec", json(&r.spec)),
        ("state", word(&r.state)),
        ("created", ms(r.created_at)),
        ("updated", ms(r.updated_at)),
        ("deadline", ms(r.deadline)),
        ("lease", ms(r.lease_until)),
        ("epoch", r.epoch.to_string()),
    ]
    .into_iter()
    .flat_map(|(k, v)| [k.to_string(), v])
    .collect();
    let optional = [
        ("hold", r.hold_expires_at.map(ms)),
        ("owner", r.owner.as_ref().map(|o| o.to_string())),
        ("reason", r.reason.as_ref().map(json)),
        ("refunded_by", r.refunded_by.as_ref().map(|t| t.to_string())),
        // None in a record no refund links, or one written before partial refunds.
        ("refunds", (!r.refunds.is_empty()).then(|| json(&r.refunds))),
        // None but in a hold captured in part.
        (
            "captured",
            (!r.captured.is_empty()).then(|| json(&r.captured)),
        ),
        // None but in an escalated record.
        ("escalation", r.escalation.as_ref().map(json)),
    ];
    for (k, v) in optional {
        if let Some(v) = v {
            f.extend([k.to_string(), v]);
        }
    }
    f
}

/// A stream entry id `<ms>-<seq>` as the position it is.
pub(crate) fn position(id: &str) -> Result<FeedPosition, String> {
    let bad = || format!("stream entry id {id:?}");
    let (ms, seq) = id.split_once('-').ok_or_else(bad)?;
    Ok(FeedPosition {
        major: ms.parse().map_err(|_| bad())?,
        minor: seq.parse().map_err(|_| bad())?,
    })
}

/// The answer of `xfer_7_events`: the last id the stream dropped, and its entries.
pub(crate) fn event_page(v: Value) -> Result<EventPage, String> {
    let Value::Array(mut parts) = v else {
        return Err(format!("expected an array, got {v:?}"));
    };
    let entries = match parts.pop() {
        Some(Value::Array(entries)) => entries,
        other => return Err(format!("expected the entries, got {other:?}")),
    };
    let dropped = strings(Value::Array(parts))?;
    let [dropped] = &dropped[..] else {
        return Err(format!("expected the last id dropped, got {dropped:?}"));
    };
    let mut events = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(mut entry) = entry else {
            return Err(format!("expected an entry, got {entry:?}"));
        };
        let fields = strings(entry.pop().unwrap_or(Value::Nil))?;
        let id = strings(Value::Array(entry))?;
        let [id] = &id[..] else {
            return Err(format!("expected an entry id, got {id:?}"));
        };
        let field = |name: &str| {
            fields
                .chunks(2)
                .find(|kv| kv[0] == name)
                .and_then(|kv| kv.get(1))
                .map(String::as_str)
        };
        let need = |name: &str| field(name).ok_or_else(|| format!("event {id} without {name}"));
        let transfer = TransferId::new(need("t")?).map_err(|e| format!("event {id}: {e}"))?;
        let kind = need("k")?;
        events.push(Event {
            position: position(id)?,
            transfer,
            kind: EventKind::from_word(kind).ok_or_else(|| format!("event kind {kind:?}"))?,
            at: Timestamp(num(need("at")?, "event time")?),
            refund: field("r")
                .map(TransferId::new)
                .transpose()
                .map_err(|e| format!("event {id}: {e}"))?,
        });
    }
    Ok(EventPage {
        events,
        dropped_through: position(dropped)?,
    })
}

/// A reply as strings; `Err` says what was wrong with it.
pub(crate) fn strings(v: Value) -> Result<Vec<String>, String> {
    match v {
        Value::Array(items) => items
            .into_iter()
            .map(|i| match i {
                Value::BulkString(b) => String::from_utf8(b).map_err(|e| e.to_string()),
                Value::SimpleString(s) => Ok(s),
                Value::Int(n) => Ok(n.to_string()),
                other => Err(format!("unexpected reply element {other:?}")),
            })
            .collect(),
        other => Err(format!("expected an array, got {other:?}")),
    }
}

fn enum_word<'de, T: Deserialize<'de>>(s: &'de str, what: &str) -> Result<T, String> {
    T::deserialize(StrDeserializer::<DeError>::new(s)).map_err(|e| format!("{what} {s:?}: {e}"))
}

fn num<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
    s.parse()
        .map_err(|_| format!("{what} is not a number: {s:?}"))
}

/// Parses one reply of the step `op`.
pub(crate) fn decode(op: &Op, v: Value) -> Result<Reply, String> {
    let s = strings(v)?;
    let (kind, rest) = s.split_first().ok_or("an empty reply")?;
    let arg = |n: usize| rest.get(n).map(String::as_str).ok_or("a short reply");
    Ok(match kind.as_str() {
        "account" => match op {
            Op::Account(id, _) => Reply::Account(Arc::new(account(id, rest)?)),
            Op::Transfer(..) => return Err("an account reply to a transfer step".into()),
        },
        "prepare" => Reply::Prepare(match arg(0)? {
            "prepared" => PrepareOutcome::Prepared,
            "already_prepared" => PrepareOutcome::AlreadyPrepared,
            "already_posted" => PrepareOutcome::AlreadyPosted,
            "already_released" => PrepareOutcome::AlreadyReleased,
            "too_late" => PrepareOutcome::TooLate,
            "refused" => PrepareOutcome::Refused(enum_word(arg(1)?, "code")?),
            o => return Err(format!("unknown prepare outcome {o:?}")),
        }),
        "post" => Reply::Post(match arg(0)? {
            "posted" => PostOutcome::Posted,
            "already_posted" => PostOutcome::AlreadyPosted,
            "missing" => PostOutcome::Missing,
            "found_released" => PostOutcome::FoundReleased,
            o => return Err(format!("unknown post outcome {o:?}")),
        }),
        "release" => Reply::Release(match arg(0)? {
            "released" => ReleaseOutcome::Released,
            "already_released" => ReleaseOutcome::AlreadyReleased,
            "marked" => ReleaseOutcome::Marked,
            "found_posted" => ReleaseOutcome::FoundPosted,
            o => return Err(format!("unknown release outcome {o:?}")),
        }),
        "transfer" => Reply::Transfer(Arc::new(transfer(rest)?)),
        "unchanged" => {
            let rec = transfer(rest)?;
            // An insert over an existing id changes nothing either way; the same body is a
            // repeat, a different one a refusal (TransferSpec::same_body).
            match op {
                Op::Transfer(_, TransferOp::Insert(new) | TransferOp::OnePhase(new))
                    if !rec.spec.same_body(&new.spec) =>
                {
                    Reply::Refused(Code::IdExistsWithDifferentBody)
                }
                _ => Reply::Unchanged(Arc::new(rec)),
            }
        }
        // A one-phase step's answers in a word: the client holds the record it sent.
        "committed" | "inserted" => one_phase_reply(op, kind == "committed")
            .ok_or_else(|| format!("a one-phase step's answer {kind:?} to {op}"))?,
        "refused" => Reply::Refused(enum_word(arg(0)?, "code")?),
        "not_found" => Reply::NotFound,
        k => return Err(format!("unknown reply kind {k:?}")),
    })
}

fn pairs(flat: &[String]) -> Result<impl Iterator<Item = (&str, &str)>, String> {
    if !flat.len().is_multiple_of(2) {
        return Err("a record with an odd number of fields".into());
    }
    Ok(flat.chunks(2).map(|p| (p[0].as_str(), p[1].as_str())))
}

/// An account from its hash's fields.
pub(crate) fn account(id: &AccountId, flat: &[String]) -> Result<Account, String> {
    let (mut asset, mut status) = (None, None);
    let (mut balance, mut reserved, mut incoming) = (None, None, None);
    let mut lower_bound = LowerBound::Unbounded;
    let mut intents = xfer_core::Intents::new();
    for (k, v) in pairs(flat)? {
        match k {
            "asset" => asset = Some(AssetCode::new(v, "asset").map_err(|e| e.to_string())?),
            "balance" => balance = Some(num::<i64>(v, "balance")?),
            "reserved" => reserved = Some(num::<i64>(v, "reserved")?),
            "incoming" => incoming = Some(num::<i64>(v, "incoming")?),
            "lower" => lower_bound = LowerBound::Bounded(num(v, "lower")?),
            "status" => status = Some(enum_word::<AccountStatus>(v, "status")?),
            _ => {
                let Some(t) = k.strip_prefix("i:") else {
                    return Err(format!("unknown account field {k:?}"));
                };
                let parts: Vec<&str> = v.split(' ').collect();
                let [state, debit, credit, horizon] = parts[..] else {
                    return Err(format!("intent {t}: {v:?}"));
                };
                let t = TransferId::new(t).map_err(|e| e.to_string())?;
                let intent = Intent {
                    state: enum_word::<IntentState>(state, "intent state")?,
                    debit: num(debit, "debit")?,
                    credit: num(credit, "credit")?,
                    horizon: Timestamp(num(horizon, "horizon")?),
                };
                intents.insert(t, intent);
            }
        }
    }
    let missing = |f: &str| format!("account without {f}");
    Ok(Account {
        id: id.clone(),
        asset: asset.ok_or_else(|| missing("asset"))?,
        balance: balance.ok_or_else(|| missing("balance"))?,
        reserved: reserved.ok_or_else(|| missing("reserved"))?,
        incoming: incoming.ok_or_else(|| missing("incoming"))?,
        lower_bound,
        status: status.ok_or_else(|| missing("status"))?,
        intents,
    })
}

/// A transfer from its hash's fields.
pub(crate) fn transfer(flat: &[String]) -> Result<TransferRecord, String> {
    let (mut spec, mut state, mut created, mut updated) = (None, None, None, None);
    let (mut deadline, mut lease, mut epoch) = (None, None, None);
    let (mut hold, mut owner, mut reason, mut refunded_by) = (None, None, None, None);
    let (mut timeline, mut refunds, mut captured) = (None, Vec::new(), Vec::new());
    let (mut escalation, mut one_phase) = (None, None);
    let stamp = |v: &str, what| num::<u64>(v, what).map(Timestamp);
    for (k, v) in pairs(flat)? {
        match k {
            "spec" => {
                spec = Some(
                    serde_json::from_str::<TransferSpec>(v).map_err(|e| format!("spec: {e}"))?,
                )
            }
            // Kept by records written before xfer_7; the functions derive it from the spec.
            "rev" => {}
            "state" => state = Some(enum_word::<TransferState>(v, "state")?),
            "created" => created = Some(stamp(v, "created")?),
            "updated" => updated = Some(stamp(v, "updated")?),
            "deadline" => deadline = Some(stamp(v, "deadline")?),
            "lease" => lease = Some(stamp(v, "lease")?),
            "epoch" => epoch = Some(num::<u64>(v, "epoch")?),
            "hold" => hold = Some(stamp(v, "hold")?),
            "owner" => owner = Some(OwnerId::new(v).map_err(|e| e.to_string())?),
            "reason" => {
                reason = Some(
                    serde_json::from_str::<CancelReason>(v).map_err(|e| format!("reason: {e}"))?,
                )
            }
            "refunded_by" => refunded_by = Some(TransferId::new(v).map_err(|e| e.to_string())?),
            "tl" => {
                timeline = Some(
                    serde_json::from_str::<Timeline>(v).map_err(|e| format!("timeline: {e}"))?,
                )
            }
            "tn" => {}
            "tp" => {
                let (first, by) = v.split_once(' ').ok_or_else(|| format!("tp {v:?}"))?;
                let by = (!by.is_empty())
                    .then(|| OwnerId::new(by).map_err(|e| e.to_string()))
                    .transpose()?;
                one_phase = Some((enum_word::<TransferState>(first, "tp")?, by));
            }
            "refunds" => {
                refunds = serde_json::from_str::<Vec<RefundLink>>(v)
                    .map_err(|e| format!("refunds: {e}"))?
            }
            "captured" => {
                captured =
                    serde_json::from_str::<Vec<Amount>>(v).map_err(|e| format!("captured: {e}"))?
            }
            "escalation" => {
                escalation = Some(
                    serde_json::from_str::<Escalation>(v)
                        .map_err(|e| format!("escalation: {e}"))?,
                )
            }
            _ => return Err(format!("unknown transfer field {k:?}")),
        }
    }
    let missing = |f: &str| format!("transfer without {f}");
    let record = TransferRecord {
        spec: spec.ok_or_else(|| missing("spec"))?.into(),
        state: state.ok_or_else(|| missing("state"))?,
        created_at: created.ok_or_else(|| missing("created"))?,
        updated_at: updated.ok_or_else(|| missing("updated"))?,
        deadline: deadline.ok_or_else(|| missing("deadline"))?,
        hold_expires_at: hold,
        owner,
        lease_until: lease.ok_or_else(|| missing("lease"))?,
        epoch: epoch.ok_or_else(|| missing("epoch"))?,
        reason,
        refunded_by,
        refunds,
        captured,
        escalation,
        timeline: Timeline::default(),
    };
    let timeline = match (timeline, one_phase) {
        (Some(timeline), _) => timeline,
        // A one-phase commit's, not stored: the record as sent gives it.
        (None, Some((state, owner))) => {
            let sent = TransferRecord {
                state,
                owner,
                updated_at: record.created_at,
                ..record.clone()
            };
            one_phase_done(&sent).timeline
        }
        // A record written before timelines.
        (None, None) => xfer_store::timeline::derived(&record),
    };
    Ok(TransferRecord { timeline, ..record })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reasons_the_functions_write_are_the_domain_types_json() {
        // functions.lua writes these two itself (a hold that expires, a void).
        assert_eq!(json(&CancelReason::Expired), r#""expired""#);
        assert_eq!(json(&CancelReason::Voided), r#""voided""#);
    }

    #[test]
    fn the_postings_and_links_the_functions_read_are_the_domain_types_json() {
        // functions.lua reads amounts after '"amount":' and writes links in this form.
        let amount = |n| xfer_core::Amount::new(n, "amount").unwrap();
        let posting = xfer_core::Posting {
            from: AccountId::new("a.1").unwrap(),
            to: AccountId::new("b").unwrap(),
            asset: AssetCode::new("USD", "asset").unwrap(),
            amount: amount(9_223_372_036_854_775_807),
        };
        assert_eq!(
            json(&vec![posting]),
            r#"[{"from":"a.1","to":"b","asset":"USD","amount":9223372036854775807}]"#
        );
        let links = vec![RefundLink {
            refund: TransferId::new("r:1").unwrap(),
            amounts: vec![amount(2), amount(9_223_372_036_854_775_807)],
        }];
        let text = r#"[{"refund":"r:1","amounts":[2,9223372036854775807]}]"#;
        assert_eq!(json(&links), text);
        assert_eq!(
            serde_json::from_str::<Vec<RefundLink>>(text).unwrap(),
            links
        );
        // And a hold's captured amounts, as digits between commas.
        let captured = vec![amount(3), amount(9_223_372_036_854_775_807)];
        assert_eq!(json(&captured), "[3,9223372036854775807]");
    }

    #[test]
    fn an_escalated_record_keeps_its_mark_through_the_hash() {
        // Any text: quotes, backslashes, non-ASCII, `$` and dots.
        let spec = TransferSpec {
            id: TransferId::new("e.1").unwrap(),
            postings: vec![xfer_core::Posting {
                from: AccountId::new("a").unwrap(),
                to: AccountId::new("b").unwrap(),
                asset: AssetCode::new("USD", "asset").unwrap(),
                amount: Amount::new(5, "amount").unwrap(),
            }]
            .into(),
            metadata: String::new(),
            kind: xfer_core::TransferKind::Transfer,
            refund_of: None,
            timeout_ms: 1_000,
        };
        let mut r = TransferRecord::accept(spec, Timestamp(7), 100);
        r.escalation = Some(Escalation::new(3, "\"x\" \\ é $a.b\n", Timestamp(9)));
        let fields = record_fields(&r);
        let back = transfer(&fields).unwrap();
        assert_eq!(back.escalation, r.escalation);
        // (The function writes the timeline itself.)
        let timeline = r.timeline.clone();
        assert_eq!(TransferRecord { timeline, ..back }, r);
        r.escalation = None;
        assert!(!record_fields(&r).iter().any(|f| f == "escalation"));
    }

    #[test]
    fn states_travel_as_their_serde_words() {
        assert_eq!(word(&TransferState::Canceling), "canceling");
        let s: TransferState = enum_word("held", "state").unwrap();
        assert_eq!(s, TransferState::Held);
        let c: Code = enum_word("exceeds_available", "code").unwrap();
        assert_eq!(c, Code::ExceedsAvailable);
    }
}
