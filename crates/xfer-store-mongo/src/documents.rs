//! The documents: an account is one document holding its intents (seed 003's
//! `pendingTransactions`, with the amounts reserved and the tombstones kept), a transfer
//! another. Field names are short where they repeat per intent.
//!
//! ```text
//! accounts:  {_id, asset, balance, reserved, incoming, lower_bound (null: unbounded),
//!             status: open|closed|unopened, intents: {<key>: {d, c, s, h, q?}},
//!             hseq, tomb_min?, _op?}
//! transfers: {_id, spec (JSON text), reversed (JSON text), state, created_at, updated_at,
//!             deadline, hold_expires_at, owner, lease_until, epoch, reason (JSON text),
//!             refunded_by, refunds?: [{refund, amounts: [Int64]}], captured?: [Int64],
//!             escalation? (JSON text), timeline: [{at, state, owner, epoch, reason,
//!             refund}], wake?, _op?}
//! history:   {_id: {a: account, q: seq}, t: transfer}
//! ```
//!
//! An intent's key is its transfer id with `.` written `~` (a dot would be a path in an
//! update; `~` is not in the id alphabet). Amounts and timestamps are Int64 (timestamps in
//! milliseconds, "never" saturated at `i64::MAX` as in the SQL stores). `q` is the intent's
//! place in the account's history (the account's `hseq` when it was written), kept so that
//! a repeated step can write the history entry again if the first one's reply was lost.
//! `tomb_min` is the earliest horizon among the account's tombstones (the pruner's index);
//! `wake` is [`TransferRecord::wake_at`] (the sweeper's), absent once terminal. `_op`
//! names the last step that changed the document (see `steps.rs`). `refunds` are the refund
//! links, oldest first, absent while there are none; a document written before partial
//! refunds has only `refunded_by`, read as its one refund of everything
//! ([`TransferRecord::refund_links`]). `captured` is what a hold captured in part captured
//! of each posting, in order, absent in every other transfer. `escalation` is an escalated
//! transfer's mark (`Escalation`'s JSON: only stored, and tested for being there), absent in
//! every other.

use mongodb::bson::{doc, Bson, Document};
use xfer_core::{
    Account, AccountId, AccountStatus, Amount, AssetCode, Intent, IntentState, LowerBound, OwnerId,
    RefundLink, Step, Timeline, Timestamp, TransferId, TransferRecord, TransferState,
    TIMELINE_STEPS_MAX,
};

/// The key of `transfer`'s intent in an account's `intents`.
pub(crate) fn intent_key(transfer: &TransferId) -> String {
    transfer.as_str().replace('.', "~")
}

fn transfer_of_key(key: &str) -> Result<TransferId, String> {
    TransferId::new(&key.replace('~', "."))
        .map_err(|e| format!("intent key {key:?}: {}", e.message))
}

/// A timestamp as Int64 (a saturated "never" as `i64::MAX`, which no clock reaches).
pub(crate) fn ms(t: Timestamp) -> i64 {
    t.as_i64_ms()
}

pub(crate) fn state_word(s: TransferState) -> &'static str {
    match s {
        TransferState::Initial => "initial",
        TransferState::Pending => "pending",
        TransferState::Applied => "applied",
        TransferState::Held => "held",
        TransferState::Canceling => "canceling",
        TransferState::Done => "done",
        TransferState::Canceled => "canceled",
    }
}

fn word<T: serde::de::DeserializeOwned>(w: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(w.into())).map_err(|e| format!("{w:?}: {e}"))
}

fn int(d: &Document, f: &str) -> Result<i64, String> {
    match d.get(f) {
        Some(Bson::Int64(n)) => Ok(*n),
        Some(Bson::Int32(n)) => Ok(i64::from(*n)),
        other => Err(format!("{f}: not an integer: {other:?}")),
    }
}

fn unsigned(d: &Document, f: &str) -> Result<u64, String> {
    u64::try_from(int(d, f)?).map_err(|_| format!("{f}: negative"))
}

fn text<'a>(d: &'a Document, f: &str) -> Result<&'a str, String> {
    d.get_str(f).map_err(|e| format!("{f}: {e}"))
}

fn opt_text<'a>(d: &'a Document, f: &str) -> Result<Option<&'a str>, String> {
    match d.get(f) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::String(s)) => Ok(Some(s)),
        other => Err(format!("{f}: not a string: {other:?}")),
    }
}

/// The account an account document holds.
pub(crate) fn account(d: &Document) -> Result<Account, String> {
    let id = text(d, "_id")?;
    let lower_bound = match d.get("lower_bound") {
        None | Some(Bson::Null) => LowerBound::Unbounded,
        Some(_) => LowerBound::Bounded(int(d, "lower_bound")?),
    };
    let mut intents = Vec::new();
    if let Ok(all) = d.get_document("intents") {
        for (key, i) in all {
            let i = i
                .as_document()
                .ok_or_else(|| format!("intent {key}: not a document"))?;
            let intent = Intent {
                debit: unsigned(i, "d")?,
                credit: unsigned(i, "c")?,
                state: word::<IntentState>(text(i, "s")?)?,
                horizon: Timestamp(unsigned(i, "h")?),
            };
            intents.push((transfer_of_key(key)?, intent));
        }
    }
    Ok(Account {
        id: AccountId::new(id).map_err(|e| format!("_id: {}", e.message))?,
        asset: AssetCode::new(text(d, "asset")?, "asset").map_err(|e| e.message)?,
        balance: int(d, "balance")?,
        reserved: int(d, "reserved")?,
        incoming: int(d, "incoming")?,
        lower_bound,
        status: word::<AccountStatus>(text(d, "status")?)?,
        intents: intents.into_iter().collect(),
    })
}

/// The account a step's snapshot holds (`steps::snapshot`), with only the step's own
/// intent; `None` where the document did not exist (no status).
pub(crate) fn account_as_found(
    id: &AccountId,
    transfer: &TransferId,
    snapshot: &Document,
) -> Result<Option<Account>, String> {
    if snapshot.get("status").is_none() {
        return Ok(None);
    }
    let mut d = snapshot.clone();
    d.insert("_id", id.as_str());
    let mut intents = Document::new();
    if let Ok(intent) = snapshot.get_document("intent") {
        intents.insert(intent_key(transfer), intent.clone());
    }
    d.insert("intents", intents);
    account(&d).map(Some)
}

/// A new transfer's document.
pub(crate) fn transfer_document(r: &TransferRecord) -> Document {
    let mut d = doc! {
        "_id": r.spec.id.as_str(),
        "spec": json(&*r.spec),
        "reversed": json(&r.spec.reversed_postings()),
        "state": state_word(r.state),
        "created_at": ms(r.created_at),
        "updated_at": ms(r.updated_at),
        "deadline": ms(r.deadline),
        "hold_expires_at": r.hold_expires_at.map(ms),
        "owner": r.owner.as_ref().map(|o| o.as_str()),
        "lease_until": ms(r.lease_until),
        "epoch": i64::try_from(r.epoch).unwrap_or(i64::MAX),
        "reason": r.reason.as_ref().map(json),
        "refunded_by": r.refunded_by.as_ref().map(|t| t.as_str()),
        // Its first step (`timeline::step_of` of a record written new).
        "timeline": xfer_store::timeline::step_of(None, r).iter().map(step_document).collect::<Vec<_>>(),
    };
    if !r.refunds.is_empty() {
        d.insert(
            "refunds",
            r.refunds.iter().map(link_document).collect::<Vec<_>>(),
        );
    }
    if !r.captured.is_empty() {
        d.insert("captured", amounts_bson(&r.captured));
    }
    if let Some(e) = &r.escalation {
        d.insert("escalation", json(e));
    }
    if let Some(w) = r.wake_at() {
        d.insert("wake", ms(w));
    }
    d
}

/// Amounts as the documents keep them: an array of Int64.
pub(crate) fn amounts_bson(amounts: &[Amount]) -> Vec<Bson> {
    amounts
        .iter()
        .map(|a| Bson::Int64(amount_i64(*a)))
        .collect()
}

/// Amounts an array of Int64 holds; `what` names it in errors.
fn amounts_of(all: &[Bson], what: &str) -> Result<Vec<Amount>, String> {
    all.iter()
        .map(|a| match a {
            Bson::Int64(n) => u64::try_from(*n).ok(),
            Bson::Int32(n) => u64::try_from(*n).ok(),
            _ => None,
        })
        .map(|n| {
            n.and_then(|n| Amount::new(n, "amount").ok())
                .ok_or_else(|| format!("{what}: amounts {all:?}"))
        })
        .collect()
}

/// What a hold captured in part captured (`captured`); none in any other transfer.
fn captured(d: &Document) -> Result<Vec<Amount>, String> {
    match d.get("captured") {
        None | Some(Bson::Null) => Ok(Vec::new()),
        Some(Bson::Array(all)) => amounts_of(all, "captured"),
        Some(other) => Err(format!("captured: {other}")),
    }
}

/// A refund link as the document keeps it: `{refund, amounts: [Int64]}`.
fn link_document(l: &RefundLink) -> Document {
    doc! {"refund": l.refund.as_str(), "amounts": amounts_bson(&l.amounts)}
}

/// An amount as Int64 (at most `i64::MAX`, `AMOUNT_MAX`).
pub(crate) fn amount_i64(a: Amount) -> i64 {
    i64::try_from(a.units()).expect("an amount is at most i64::MAX")
}

fn links(d: &Document) -> Result<Vec<RefundLink>, String> {
    let all = match d.get("refunds") {
        None | Some(Bson::Null) => return Ok(Vec::new()),
        Some(Bson::Array(all)) => all,
        Some(other) => return Err(format!("refunds: {other}")),
    };
    all.iter()
        .map(|l| {
            let l = l
                .as_document()
                .ok_or_else(|| format!("refund link {l}: not a document"))?;
            let refund = TransferId::new(text(l, "refund")?)
                .map_err(|e| format!("refund link: {}", e.message))?;
            let amounts = match l.get("amounts") {
                Some(Bson::Array(a)) => a,
                other => return Err(format!("refund link {refund}: amounts {other:?}")),
            };
            let amounts = amounts_of(amounts, &format!("refund link {refund}"))?;
            Ok(RefundLink { refund, amounts })
        })
        .collect()
}

/// The record a transfer document holds.
pub(crate) fn transfer(d: &Document) -> Result<TransferRecord, String> {
    let spec = text(d, "spec")?;
    let spec = serde_json::from_str(spec).map_err(|e| format!("spec: {e}"))?;
    let reason = match opt_text(d, "reason")? {
        Some(r) => Some(serde_json::from_str(r).map_err(|e| format!("reason: {e}"))?),
        None => None,
    };
    let hold_expires_at = match d.get("hold_expires_at") {
        None | Some(Bson::Null) => None,
        Some(_) => Some(Timestamp(unsigned(d, "hold_expires_at")?)),
    };
    let id = |s: &str, f: &str| TransferId::new(s).map_err(|e| format!("{f}: {}", e.message));
    let record = TransferRecord {
        spec,
        state: word(text(d, "state")?)?,
        created_at: Timestamp(unsigned(d, "created_at")?),
        updated_at: Timestamp(unsigned(d, "updated_at")?),
        deadline: Timestamp(unsigned(d, "deadline")?),
        hold_expires_at,
        owner: match opt_text(d, "owner")? {
            Some(o) => Some(OwnerId::new(o).map_err(|e| format!("owner: {}", e.message))?),
            None => None,
        },
        lease_until: Timestamp(unsigned(d, "lease_until")?),
        epoch: unsigned(d, "epoch")?,
        reason,
        refunded_by: opt_text(d, "refunded_by")?
            .map(|t| id(t, "refunded_by"))
            .transpose()?,
        refunds: links(d)?,
        captured: captured(d)?,
        escalation: match opt_text(d, "escalation")? {
            Some(e) => Some(serde_json::from_str(e).map_err(|e| format!("escalation: {e}"))?),
            None => None,
        },
        timeline: Timeline::default(),
    };
    let timeline = match d.get("timeline") {
        // Written before timelines (`timeline::derived`).
        None | Some(Bson::Null) => xfer_store::timeline::derived(&record),
        Some(Bson::Array(steps)) => {
            if steps.len() > TIMELINE_STEPS_MAX {
                return Err(format!("a timeline of {} steps", steps.len()));
            }
            let steps = steps
                .iter()
                .map(|s| match s {
                    Bson::Document(s) => step(s),
                    other => Err(format!("timeline step {other}")),
                })
                .collect::<Result<Vec<_>, String>>()?;
            Timeline::of(steps)
        }
        Some(other) => return Err(format!("timeline {other}")),
    };
    Ok(TransferRecord { timeline, ..record })
}

/// A timeline step as the document keeps it: `{at, state, owner, epoch, reason (JSON text),
/// refund}`.
pub(crate) fn step_document(s: &Step) -> Document {
    doc! {
        "at": ms(s.at),
        "state": state_word(s.state),
        "owner": s.owner.as_ref().map(|o| o.as_str()),
        "epoch": i64::try_from(s.epoch).unwrap_or(i64::MAX),
        "reason": s.reason.as_ref().map(json),
        "refund": s.refund.as_ref().map(|t| t.as_str()),
    }
}

fn step(d: &Document) -> Result<Step, String> {
    Ok(Step {
        at: Timestamp(unsigned(d, "at")?),
        state: word(text(d, "state")?)?,
        owner: match opt_text(d, "owner")? {
            Some(o) => Some(OwnerId::new(o).map_err(|e| format!("owner: {}", e.message))?),
            None => None,
        },
        epoch: unsigned(d, "epoch")?,
        reason: match opt_text(d, "reason")? {
            Some(r) => Some(serde_json::from_str(r).map_err(|e| format!("reason: {e}"))?),
            None => None,
        },
        refund: opt_text(d, "refund")?
            .map(|t| TransferId::new(t).map_err(|e| format!("refund: {}", e.message)))
            .transpose()?
            .map(Box::new),
    })
}

/// JSON text of a domain value (what the database only stores).
pub(crate) fn json<T: serde::Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).expect("a domain value serializes")
}
