//! The meaning of every [`Op`], as pure functions of one record and the store's
//! clock. The Memory store runs these directly; the database backends run the same rules as
//! one conditional statement or script, and the conformance suite holds them to it.
//!
//! Each function changes the record only when it answers success; a refusal or a repeat
//! leaves it exactly as it was.

use crate::op::{AccountOp, Op, PostOutcome, PrepareOutcome, ReleaseOutcome, Reply, TransferOp};
use crate::timeline;
use std::sync::Arc;
use xfer_core::mutant::{self, Mutant};
use xfer_core::{
    Account, AccountId, AccountStatus, Code, Intent, IntentState, Leg, LowerBound, Posting,
    RefundLink, Timestamp, TransferId, TransferRecord, TransferState, REFUNDS_MAX,
};

/// What an account operation asks of the shard's indexes. It names the transfer by the
/// op's own id: the shard copies the id once, into the index, rather than into this answer
/// first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEffect<'op> {
    /// The transfer the op wrote for.
    pub transfer: &'op TransferId,
    /// The account's first write for the transfer (its intent, or a released mark on an
    /// opened account): add the transfer to the account's history.
    pub history: bool,
    /// A tombstone was written (as it now is on the account): drop it after its horizon.
    pub tombstone: Option<Intent>,
}

impl<'op> IndexEffect<'op> {
    fn history(transfer: &'op TransferId) -> IndexEffect<'op> {
        IndexEffect {
            transfer,
            history: true,
            tombstone: None,
        }
    }

    fn tombstone(transfer: &'op TransferId, intent: Intent) -> IndexEffect<'op> {
        IndexEffect {
            transfer,
            history: false,
            tombstone: Some(intent),
        }
    }
}

/// Applies `op` to the account `id`, which may not exist (`slot` is `None`).
pub fn apply_account<'op>(
    slot: &mut Option<Account>,
    id: &AccountId,
    op: &'op AccountOp,
    now: Timestamp,
) -> (Reply, Option<IndexEffect<'op>>) {
    match slot {
        Some(a) => apply_account_to(a, id, op, now),
        None => {
            let (reply, created, effect) = apply_account_absent(id, op);
            *slot = created;
            (reply, effect)
        }
    }
}

/// [`apply_account`] on a record that is absent: answers the reply, the record the op
/// creates (if any) and its index effect.
pub fn apply_account_absent<'op>(
    id: &AccountId,
    op: &'op AccountOp,
) -> (Reply, Option<Account>, Option<IndexEffect<'op>>) {
    let mut slot = None;
    let (reply, effect) = match op {
        AccountOp::Create { asset, lower_bound } => {
            let account = Account::open(id.clone(), asset.clone(), *lower_bound);
            slot = Some(account.clone());
            (Reply::Account(Arc::new(account)), None)
        }
        AccountOp::Release {
            transfer,
            asset,
            horizon,
        } => {
            if mutant::is(Mutant::NoLatePrepareDefence) {
                return (Reply::Release(ReleaseOutcome::Marked), None, None);
            }
            let mut placeholder = Account::open(id.clone(), asset.clone(), LowerBound::default());
            placeholder.status = AccountStatus::Unopened;
            let mark = tombstone(IntentState::Released, *horizon);
            placeholder.intents.insert(transfer.clone(), mark);
            slot = Some(placeholder);
            // A placeholder is no account: it has no history.
            let effect = IndexEffect::tombstone(transfer, mark);
            (Reply::Release(ReleaseOutcome::Marked), Some(effect))
        }
        AccountOp::Prepare { .. } => (
            Reply::Prepare(PrepareOutcome::Refused(Code::AccountNotFound)),
            None,
        ),
        AccountOp::Post { .. } | AccountOp::PostPart { .. } => {
            (Reply::Post(PostOutcome::Missing), None)
        }
        _ => (Reply::NotFound, None),
    };
    (reply, slot, effect)
}

/// [`apply_account`] on a record that exists (changed in place; the rules never remove
/// one).
pub fn apply_account_to<'op>(
    a: &mut Account,
    id: &AccountId,
    op: &'op AccountOp,
    now: Timestamp,
) -> (Reply, Option<IndexEffect<'op>>) {
    debug_assert_eq!(&a.id, id, "the record is the op's");
    match op {
        AccountOp::Create { asset, lower_bound } => (create_over(a, asset, *lower_bound), None),
        AccountOp::Prepare {
            transfer,
            asset,
            debit,
            credit,
            deadline,
            horizon,
        } => {
            let outcome = prepare(
                a, transfer, asset, *debit, *credit, *deadline, *horizon, now,
            );
            let effect =
                (outcome == PrepareOutcome::Prepared).then_some(IndexEffect::history(transfer));
            (Reply::Prepare(outcome), effect)
        }
        AccountOp::Post { transfer, .. } | AccountOp::PostPart { transfer, .. } => {
            let part = match op {
                AccountOp::PostPart { debit, credit, .. } => Some((*debit, *credit)),
                _ => None,
            };
            let (outcome, intent) = match post(a, transfer, part) {
                Ok(done) => done,
                Err(code) => return (Reply::Refused(code), None),
            };
            let effect = intent
                .filter(|_| outcome == PostOutcome::Posted)
                .map(|i| IndexEffect::tombstone(transfer, i));
            (Reply::Post(outcome), effect)
        }
        AccountOp::Release {
            transfer, horizon, ..
        } => {
            let outcome = release(a, transfer, *horizon);
            let effect = matches!(outcome, ReleaseOutcome::Released | ReleaseOutcome::Marked)
                .then(|| a.intents.get(transfer))
                .flatten()
                .map(|i| IndexEffect {
                    history: outcome == ReleaseOutcome::Marked
                        && marks_first_write(a.status, *horizon, now),
                    ..IndexEffect::tombstone(transfer, *i)
                });
            (Reply::Release(outcome), effect)
        }
        AccountOp::Close => (close(a), None),
        AccountOp::SetLowerBound { lower_bound } => (set_lower_bound(a, *lower_bound), None),
        AccountOp::Get => (get_account(a), None),
    }
}

/// Whether a released mark lists its transfer in the account's history: an opened
/// account's, before the horizon only (past it, an earlier tombstone of the transfer may
/// have been pruned and the release be a repeat, which must not list it twice).
fn marks_first_write(status: AccountStatus, horizon: Timestamp, now: Timestamp) -> bool {
    status != AccountStatus::Unopened && now < horizon
}

/// What `Get` answers for an account that exists (as [`apply_account_to`] does, without
/// needing the record mutably).
pub fn get_account(a: &Account) -> Reply {
    read_account(a, || Arc::new(a.clone()))
}

/// [`get_account`] on a record held shared: the answer shares it instead of a copy (a
/// later write copies the record, so the answer stays as it was).
pub fn get_account_shared(a: &Arc<Account>) -> Reply {
    read_account(a, || Arc::clone(a))
}

fn read_account(a: &Account, answer: impl FnOnce() -> Arc<Account>) -> Reply {
    if a.status == AccountStatus::Unopened {
        Reply::NotFound
    } else {
        Reply::Account(answer())
    }
}

fn tombstone(state: IntentState, horizon: Timestamp) -> Intent {
    Intent {
        debit: 0,
        credit: 0,
        state,
        horizon,
    }
}

fn create_over(a: &mut Account, asset: &xfer_core::AssetCode, lower_bound: LowerBound) -> Reply {
    if a.status == AccountStatus::Unopened {
        // Keep the tombstones: a late prepare must still find them.
        a.status = AccountStatus::Open;
        a.asset = asset.clone();
        a.lower_bound = lower_bound;
        return Reply::Account(Arc::new(a.clone()));
    }
    if &a.asset == asset && a.lower_bound == lower_bound {
        Reply::Account(Arc::new(a.clone()))
    } else {
        Reply::Refused(Code::AccountExistsWithDifferentBody)
    }
}

/// SPEC §3 step 3 on one account. Order matters: an existing intent or tombstone answers
/// first (repeats and late arrivals are no-ops), then the deadline, then business rules.
fn prepare(
    a: &mut Account,
    transfer: &TransferId,
    asset: &xfer_core::AssetCode,
    debit: u64,
    credit: u64,
    deadline: Timestamp,
    horizon: Timestamp,
    now: Timestamp,
) -> PrepareOutcome {
    let (reserved, incoming) = match prepare_check(a, transfer, asset, debit, credit, deadline, now)
    {
        Ok(sums) => sums,
        Err(outcome) => return outcome,
    };
    a.reserved = reserved;
    if mutant::is(Mutant::CreditAtPrepare) {
        a.balance += credit as i64;
    } else {
        a.incoming = incoming;
    }
    // (Over a tombstone only without the late-prepare defence, a mutant.)
    a.intents.insert(
        transfer.clone(),
        Intent {
            debit,
            credit,
            state: IntentState::Open,
            horizon,
        },
    );
    PrepareOutcome::Prepared
}

/// Whether a prepare of `debit` and `credit` for `transfer` would succeed on `a`: the new
/// reserved and incoming sums if so, else the outcome it answers, having changed nothing.
fn prepare_check(
    a: &Account,
    transfer: &TransferId,
    asset: &xfer_core::AssetCode,
    debit: u64,
    credit: u64,
    deadline: Timestamp,
    now: Timestamp,
) -> Result<(i64, i64), PrepareOutcome> {
    let no_defence = mutant::is(Mutant::NoLatePrepareDefence);
    if let Some(i) = a.intents.get(transfer) {
        match i.state {
            IntentState::Open => return Err(PrepareOutcome::AlreadyPrepared),
            IntentState::Posted if !no_defence => return Err(PrepareOutcome::AlreadyPosted),
            IntentState::Released if !no_defence => return Err(PrepareOutcome::AlreadyReleased),
            _ => {}
        }
    }
    if now >= deadline && !no_defence {
        return Err(PrepareOutcome::TooLate);
    }
    match a.status {
        AccountStatus::Open => {}
        AccountStatus::Closed => return Err(PrepareOutcome::Refused(Code::AccountClosed)),
        AccountStatus::Unopened => return Err(PrepareOutcome::Refused(Code::AccountNotFound)),
    }
    if &a.asset != asset {
        return Err(PrepareOutcome::Refused(Code::AssetMismatch));
    }
    if debit as i128 > a.available() && !mutant::is(Mutant::DebitWithoutBalanceCheck) {
        return Err(PrepareOutcome::Refused(Code::ExceedsAvailable));
    }
    // Every number the record will ever hold must fit an i64: the new reserved and
    // incoming sums themselves, and both ends of the balance's future range (lowest if
    // every reserved debit posts, highest if every incoming credit posts). Checking only
    // the balance let an unbounded issuer wrap `reserved` and create money.
    let reserved = a.reserved as i128 + debit as i128;
    let incoming = a.incoming as i128 + credit as i128;
    let lowest = a.balance as i128 - reserved;
    let highest = a.balance as i128 + incoming;
    let fits = |v: i128| (i64::MIN as i128..=i64::MAX as i128).contains(&v);
    if !(fits(reserved) && fits(incoming) && fits(lowest) && fits(highest)) {
        return Err(PrepareOutcome::Refused(Code::BalanceWouldOverflow));
    }
    Ok((reserved as i64, incoming as i64))
}

/// Whether the one-phase commit of `rec` may move `leg`'s amounts on `a` (the leg's
/// account, or `None` when absent): exactly when its prepare would succeed at `now`, so that
/// the commit changes nothing a prepare and a post would not.
pub fn one_phase_allows(
    a: Option<&Account>,
    rec: &TransferRecord,
    leg: &Leg,
    now: Timestamp,
) -> bool {
    a.is_some_and(|a| {
        prepare_check(
            a,
            rec.id(),
            &leg.asset,
            leg.debit,
            leg.credit,
            rec.deadline,
            now,
        )
        .is_ok()
    })
}

/// The one-phase commit's write on a leg's account that [`one_phase_allows`]: its prepare
/// and post at once, with no intent left.
pub fn one_phase_move(a: &mut Account, leg: &Leg) {
    a.balance += leg.credit as i64 - leg.debit as i64;
}

/// The record a one-phase commit keeps: `rec` (as the submitter inserts it, claimed) done,
/// with no owner and `updated_at` its `created_at`, so that every store keeps the same. Its
/// timeline is the insert's and the finish's, both at `created_at`: accepted (`pending`,
/// claimed by the submitter, epoch 1), then `done`, as the two-phase path would keep them.
pub fn one_phase_done(rec: &TransferRecord) -> TransferRecord {
    let mut done = rec.clone();
    timeline::keep(None, &mut done);
    done.state = TransferState::Done;
    done.owner = None;
    done.updated_at = done.created_at;
    timeline::keep(Some(timeline::before(rec)), &mut done);
    done
}

/// The reply to `op` where a store answered its one-phase step in a word instead of
/// sending the record back (the client holds the one it sent): `committed`, the record
/// [`one_phase_done`] of it; otherwise the insert, the record as sent. `None` if `op` is no
/// one-phase step.
pub fn one_phase_reply(op: &Op, committed: bool) -> Option<Reply> {
    match op {
        Op::Transfer(_, TransferOp::OnePhase(sent)) if committed => {
            Some(Reply::Transfer(Arc::new(one_phase_done(sent))))
        }
        Op::Transfer(_, TransferOp::OnePhase(sent)) => Some(Reply::Transfer(Arc::clone(sent))),
        _ => None,
    }
}

/// SPEC §3 step 5 on one account: only an open intent moves money. Answers the intent as
/// it is after the call too (when there is one), for the tombstone index.
/// SPEC §3 step 5 on one account: move an open intent into the balance, all of it, or for
/// a hold captured in part `part`'s debit and credit (the rest given back).
fn post(
    a: &mut Account,
    transfer: &TransferId,
    part: Option<(u64, u64)>,
) -> Result<(PostOutcome, Option<Intent>), Code> {
    let Some(&intent) = a.intents.get(transfer) else {
        return Ok((PostOutcome::Missing, None));
    };
    let (debit, credit) = part.unwrap_or((intent.debit, intent.credit));
    match intent.state {
        IntentState::Open if debit > intent.debit || credit > intent.credit => {
            return Err(Code::CaptureExceedsHold)
        }
        IntentState::Open => {}
        IntentState::Posted if mutant::is(Mutant::DoublePost) => {
            a.balance += credit as i64 - debit as i64;
            return Ok((PostOutcome::Posted, Some(intent)));
        }
        IntentState::Posted => return Ok((PostOutcome::AlreadyPosted, Some(intent))),
        IntentState::Released => return Ok((PostOutcome::FoundReleased, Some(intent))),
    }
    let intent = a
        .intents
        .close(transfer, IntentState::Posted)
        .expect("the intent is open");
    a.reserved -= intent.debit as i64;
    if mutant::is(Mutant::CreditAtPrepare) {
        a.balance -= intent.debit as i64;
    } else if mutant::is(Mutant::CapturePostsWhole) {
        a.incoming -= intent.credit as i64;
        a.balance += intent.credit as i64 - intent.debit as i64;
    } else {
        a.incoming -= intent.credit as i64;
        a.balance += credit as i64 - debit as i64;
    }
    Ok((PostOutcome::Posted, Some(intent)))
}

/// SPEC §3 step 6 on one account: give back an open intent, or leave a released mark.
fn release(a: &mut Account, transfer: &TransferId, horizon: Timestamp) -> ReleaseOutcome {
    let Some(&intent) = a.intents.get(transfer) else {
        if mutant::is(Mutant::NoLatePrepareDefence) {
            return ReleaseOutcome::Marked;
        }
        a.intents
            .insert(transfer.clone(), tombstone(IntentState::Released, horizon));
        return ReleaseOutcome::Marked;
    };
    match intent.state {
        IntentState::Open => {}
        IntentState::Released => return ReleaseOutcome::AlreadyReleased,
        IntentState::Posted => return ReleaseOutcome::FoundPosted,
    }
    let intent = a
        .intents
        .close(transfer, IntentState::Released)
        .expect("the intent is open");
    if mutant::is(Mutant::ReleaseIgnoresAmount) {
        return ReleaseOutcome::Released;
    }
    if mutant::is(Mutant::ReleasePosts) {
        a.reserved -= intent.debit as i64;
        a.incoming -= intent.credit as i64;
        a.balance += intent.credit as i64 - intent.debit as i64;
        return ReleaseOutcome::Released;
    }
    a.reserved -= intent.debit as i64;
    if mutant::is(Mutant::CreditAtPrepare) {
        a.balance -= intent.credit as i64;
    } else {
        a.incoming -= intent.credit as i64;
    }
    ReleaseOutcome::Released
}

fn close(a: &mut Account) -> Reply {
    match a.status {
        AccountStatus::Unopened => Reply::NotFound,
        AccountStatus::Closed => Reply::Account(Arc::new(a.clone())),
        AccountStatus::Open if a.open_intents() > 0 => {
            Reply::Refused(Code::AccountHasTransfersInFlight)
        }
        AccountStatus::Open => {
            a.status = AccountStatus::Closed;
            Reply::Account(Arc::new(a.clone()))
        }
    }
}

fn set_lower_bound(a: &mut Account, lower_bound: LowerBound) -> Reply {
    if a.status == AccountStatus::Unopened {
        return Reply::NotFound;
    }
    let old = std::mem::replace(&mut a.lower_bound, lower_bound);
    if !a.is_within_bound() {
        a.lower_bound = old;
        return Reply::Refused(Code::LowerBoundAboveAvailable);
    }
    Reply::Account(Arc::new(a.clone()))
}

/// A transfer op on a record that is absent: the record the op creates (an `Insert`'s, if
/// any) and the reply. The record kept is the op's own, shared: a store that holds records
/// as `Arc`s keeps it without a copy (the engine's op and the store's record were two
/// copies of it).
pub fn apply_transfer_absent(op: &TransferOp) -> (Option<Arc<TransferRecord>>, Reply) {
    match op {
        TransferOp::Insert(new) | TransferOp::OnePhase(new) => {
            // Its timeline its first step: as the engine made it, else (decoded from a log
            // entry, which does not carry it, or made by hand) a copy made so.
            let kept = if timeline::is_as_inserted(new) {
                Arc::clone(new)
            } else {
                let mut r = TransferRecord::clone(new);
                timeline::keep(None, &mut r);
                Arc::new(r)
            };
            (Some(Arc::clone(&kept)), Reply::Transfer(kept))
        }
        _ => (None, Reply::NotFound),
    }
}

/// What a transfer op did to a record that exists ([`apply_transfer_to`]).
#[derive(Debug)]
pub enum TransferStep {
    /// It changed the record: the answer is the record after ([`Reply::Transfer`]).
    Changed,
    /// The op's condition did not hold: the answer is the record ([`Reply::Unchanged`]).
    Unchanged,
    /// An answer without the record (a refusal); nothing changed.
    Answered(Reply),
}

impl TransferStep {
    /// The reply, with `rec`, the record after the step, shared.
    pub fn reply(self, rec: &Arc<TransferRecord>) -> Reply {
        match self {
            TransferStep::Changed => Reply::Transfer(Arc::clone(rec)),
            TransferStep::Unchanged => Reply::Unchanged(Arc::clone(rec)),
            TransferStep::Answered(reply) => reply,
        }
    }
}

/// A transfer op on a record that exists (changed in place); [`TransferStep::reply`] makes
/// the reply from the record after. `store_now` is the store's own clock: it judges a
/// hold's expiry at capture together with the caller's clock, so a capture resent long
/// after it was made cannot beat the expiry.
pub fn apply_transfer_to(
    rec: &mut TransferRecord,
    op: &TransferOp,
    store_now: Timestamp,
) -> TransferStep {
    use TransferState::*;
    // What the timeline compares (`timeline::step_of`); the link is nearly always none.
    let (state, epoch, refunded_by) = (rec.state, rec.epoch, rec.refunded_by.clone());
    let changed = match op {
        TransferOp::Insert(new) | TransferOp::OnePhase(new) => {
            if rec.spec.same_body(&new.spec) {
                false
            } else if mutant::is(Mutant::InsertOverwritesBody) {
                rec.spec = new.spec.clone();
                true
            } else {
                return TransferStep::Answered(Reply::Refused(Code::IdExistsWithDifferentBody));
            }
        }
        TransferOp::Claim {
            owner,
            now,
            lease_until,
        } => {
            let expired = rec.lease_until <= *now;
            let next = match rec.state {
                _ if mutant::is(Mutant::ClaimWithoutCas) => Some(Pending),
                Initial => Some(Pending),
                Pending | Applied | Canceling if expired => Some(rec.state),
                Held if expired && rec.hold_expires_at.is_some_and(|e| e <= *now) => {
                    Some(Canceling)
                }
                _ => None,
            };
            match next {
                Some(next) => {
                    if next == Canceling && rec.state == Held {
                        rec.reason = Some(xfer_core::CancelReason::Expired);
                    }
                    rec.state = next;
                    take_ownership(rec, owner, *now, *lease_until);
                    true
                }
                None => false,
            }
        }
        TransferOp::Decide {
            epoch,
            to,
            reason,
            now,
        } => {
            let from_ok = rec.state == Pending
                || (rec.state == Applied
                    && *to == Canceling
                    && mutant::is(Mutant::CancelAfterApplied));
            let ok = from_ok && rec.epoch == *epoch && matches!(to, Applied | Held | Canceling);
            if ok {
                rec.state = *to;
                rec.reason = reason.clone();
                rec.updated_at = *now;
            }
            ok
        }
        TransferOp::Capture {
            owner,
            now,
            lease_until,
        }
        | TransferOp::CapturePart {
            owner,
            now,
            lease_until,
            ..
        } => match rec.state {
            Held if rec
                .hold_expires_at
                .is_some_and(|e| e <= (*now).max(store_now)) =>
            {
                return TransferStep::Answered(Reply::Refused(Code::HoldExpired))
            }
            Held => {
                rec.state = Applied;
                if let TransferOp::CapturePart { amounts, .. } = op {
                    rec.captured = amounts.clone();
                }
                take_ownership(rec, owner, *now, *lease_until);
                true
            }
            Initial | Pending => {
                return TransferStep::Answered(Reply::Refused(Code::TransferIsNotHeld))
            }
            _ => false,
        },
        TransferOp::Void {
            owner,
            now,
            lease_until,
        } => match rec.state {
            Held => {
                rec.state = Canceling;
                rec.reason = Some(xfer_core::CancelReason::Voided);
                take_ownership(rec, owner, *now, *lease_until);
                true
            }
            Initial | Pending => {
                return TransferStep::Answered(Reply::Refused(Code::TransferIsNotHeld))
            }
            _ => false,
        },
        TransferOp::Finish { now } => {
            let next = match rec.state {
                Applied => Some(Done),
                Canceling => Some(Canceled),
                _ => None,
            };
            if let Some(next) = next {
                rec.state = next;
                rec.owner = None;
                rec.updated_at = *now;
            }
            next.is_some()
        }
        TransferOp::LinkRefund {
            refund,
            replacing,
            postings,
            now,
        } => match link_refund(rec, refund, replacing, postings) {
            Err(code) => return TransferStep::Answered(Reply::Refused(code)),
            Ok(None) => false,
            Ok(Some(links)) => {
                rec.refunds = links;
                rec.refunded_by = Some(refund.clone());
                rec.updated_at = *now;
                true
            }
        },
        TransferOp::Redrive { now } => {
            let ok =
                !rec.state.is_terminal() && (rec.lease_until > *now || rec.escalation.is_some());
            if ok {
                rec.lease_until = rec.lease_until.min(*now);
                rec.escalation = None;
            }
            ok
        }
        TransferOp::Escalate { escalation } => {
            let ok = !rec.state.is_terminal() && rec.escalation.is_none();
            if ok {
                rec.escalation = Some(escalation.clone());
            }
            ok
        }
        TransferOp::Extend { until, now } => match rec.state {
            Held if rec
                .hold_expires_at
                .is_some_and(|e| e <= (*now).max(store_now)) =>
            {
                return TransferStep::Answered(Reply::Refused(Code::HoldExpired))
            }
            Held if rec.hold_expires_at.is_some_and(|e| e < *until) => {
                if !mutant::is(Mutant::ExtendForgotten) {
                    rec.hold_expires_at = Some(*until);
                }
                rec.updated_at = *now;
                true
            }
            Initial | Pending => {
                return TransferStep::Answered(Reply::Refused(Code::TransferIsNotHeld))
            }
            _ => false,
        },
        TransferOp::Get => false,
    };
    if changed {
        timeline::keep(Some((state, epoch, refunded_by.as_ref())), rec);
        TransferStep::Changed
    } else {
        TransferStep::Unchanged
    }
}

/// [`TransferOp::LinkRefund`]'s rules on the original `rec`: the refused code, `None` for
/// a repeat, or the links after. Every store's link step follows them; a caller may ask
/// them first, to refuse a refund before it writes anything.
pub fn link_refund(
    rec: &TransferRecord,
    refund: &TransferId,
    replacing: &[TransferId],
    postings: &[Posting],
) -> Result<Option<Vec<RefundLink>>, Code> {
    if rec.state != TransferState::Done {
        return Err(Code::OriginalIsNotDone);
    }
    let original = rec.moved_postings();
    let reverses = postings.len() == original.len()
        && postings.iter().zip(original.iter()).all(|(r, o)| {
            r.from == o.to && r.to == o.from && r.asset == o.asset && r.amount <= o.amount
        });
    if !reverses {
        return Err(Code::RefundMustReverseOriginal);
    }
    let links = rec.refund_links();
    if links.iter().any(|l| l.refund == *refund) {
        return Ok(None);
    }
    let mut kept: Vec<RefundLink> = links
        .iter()
        .filter(|l| !replacing.contains(&l.refund))
        .cloned()
        .collect();
    // In u128: 16 links of up to 2^63 - 1 each cannot overflow it, whatever a store holds.
    let taken = |links: &[RefundLink], i: usize| -> u128 {
        links
            .iter()
            .map(|l| l.amounts.get(i).map_or(0, |a| u128::from(a.units())))
            .sum()
    };
    let moved = |i: usize| u128::from(original[i].amount.units());
    let full = (0..original.len()).all(|i| taken(&kept, i) == moved(i));
    if full {
        return Err(Code::OriginalAlreadyRefunded);
    }
    let exceeds = (0..original.len())
        .any(|i| taken(&kept, i) + u128::from(postings[i].amount.units()) > moved(i));
    if exceeds && !mutant::is(Mutant::RefundSumUnchecked) {
        return Err(Code::RefundExceedsOriginal);
    }
    if kept.len() >= REFUNDS_MAX {
        return Err(Code::TooManyRefunds);
    }
    kept.push(RefundLink {
        refund: refund.clone(),
        amounts: postings.iter().map(|p| p.amount).collect(),
    });
    Ok(Some(kept))
}

fn take_ownership(
    rec: &mut TransferRecord,
    owner: &xfer_core::OwnerId,
    now: Timestamp,
    lease_until: Timestamp,
) {
    rec.owner = Some(owner.clone());
    rec.lease_until = lease_until;
    rec.epoch += 1;
    rec.updated_at = now;
}
