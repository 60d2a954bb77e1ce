//! The reply to a step, from the document its update returned (see `steps.rs`): the
//! step's own success where `_op` carries its token; otherwise `xfer_store::record`'s rules
//! on the document, which the step found and left as it is. Those rules must then agree
//! that nothing changes: if they would change the document, the pipeline and the rules
//! disagree, and the store says so rather than answer.

use crate::documents;
use mongodb::bson::{Bson, Document};
use std::sync::Arc;
use xfer_core::{AccountId, Timestamp, TransferRecord};
use xfer_store::record::{apply_account_absent, apply_account_to, apply_transfer_to, TransferStep};
use xfer_store::{AccountOp, PostOutcome, PrepareOutcome, ReleaseOutcome, Reply, TransferOp};

/// The outcome word the step with `token` left in `_op`, if it changed the document.
fn changed_by(d: &Document, token: i64) -> Option<&str> {
    let op = d.get_document("_op").ok()?;
    match op.get("k") {
        Some(Bson::Int64(k)) if *k == token => op.get_str("o").ok(),
        _ => None,
    }
}

/// The reply to a create, close, lower-bound change or read of `id`, from the document
/// after it (`None`: absent).
pub(crate) fn account(
    id: &AccountId,
    op: &AccountOp,
    after: Option<&Document>,
    now: Timestamp,
    token: i64,
) -> Result<Reply, String> {
    let Some(d) = after else {
        return Ok(apply_account_absent(id, op).0);
    };
    let account = documents::account(d)?;
    if let Some(outcome) = changed_by(d, token) {
        return Ok(match (op, outcome) {
            (AccountOp::Create { .. } | AccountOp::Close | AccountOp::SetLowerBound { .. }, _) => {
                Reply::Account(Arc::new(account))
            }
            _ => return Err(format!("{op:?} left the outcome {outcome:?}")),
        });
    }
    unchanged(id, op, account, now)
}

/// The reply to a prepare, post or release on `id` from its entry in `_r` (`steps.rs`).
pub(crate) fn account_entry(
    id: &AccountId,
    op: &AccountOp,
    entry: &Document,
    now: Timestamp,
) -> Result<Reply, String> {
    if let Ok(outcome) = entry.get_str("o") {
        return Ok(match (op, outcome) {
            (AccountOp::Prepare { .. }, "prepared") => Reply::Prepare(PrepareOutcome::Prepared),
            (AccountOp::Post { .. } | AccountOp::PostPart { .. }, "posted") => {
                Reply::Post(PostOutcome::Posted)
            }
            (AccountOp::Release { .. }, "released") => Reply::Release(ReleaseOutcome::Released),
            (AccountOp::Release { .. }, "marked") => Reply::Release(ReleaseOutcome::Marked),
            _ => return Err(format!("{op:?} left the outcome {outcome:?}")),
        });
    }
    let (AccountOp::Prepare { transfer, .. }
    | AccountOp::Post { transfer, .. }
    | AccountOp::PostPart { transfer, .. }
    | AccountOp::Release { transfer, .. }) = op
    else {
        return Err(format!("{op:?} has no entry"));
    };
    let found = entry
        .get_document("f")
        .map_err(|_| format!("an entry without an outcome: {entry}"))?;
    let Some(account) = documents::account_as_found(id, transfer, found)? else {
        let (reply, created, _) = apply_account_absent(id, op);
        if created.is_some() {
            return Err(format!(
                "the update did not create {id} where the rules do: {op:?}"
            ));
        }
        return Ok(reply);
    };
    unchanged(id, op, account, now)
}

/// The rules' reply to `op` on `account`, which the update left as it was; an error if the
/// rules would change it.
fn unchanged(
    id: &AccountId,
    op: &AccountOp,
    account: xfer_core::Account,
    now: Timestamp,
) -> Result<Reply, String> {
    let mut probe = account.clone();
    let (reply, _) = apply_account_to(&mut probe, id, op, now);
    if probe != account {
        return Err(format!(
            "the update left {id} unchanged where the rules change it: {op:?} answers {reply}"
        ));
    }
    Ok(reply)
}

/// The reply to transfer step `op`, from the document after it (`None`: absent).
pub(crate) fn transfer(
    op: &TransferOp,
    after: Option<&Document>,
    store_now: Timestamp,
    token: i64,
) -> Result<Reply, String> {
    let Some(d) = after else {
        return Ok(Reply::NotFound);
    };
    let record = Arc::new(documents::transfer(d)?);
    if changed_by(d, token).is_some() {
        return Ok(Reply::Transfer(record));
    }
    let mut probe: TransferRecord = (*record).clone();
    match apply_transfer_to(&mut probe, op, store_now) {
        TransferStep::Changed => Err(format!(
            "the update left {} unchanged where the rules change it: {op:?}",
            record.spec.id
        )),
        step => Ok(step.reply(&record)),
    }
}
