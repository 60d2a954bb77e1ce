//! The operations a store offers: each one reads and writes exactly one record, atomically,
//! and says what it did in a [`Reply`]. These are the protocol's steps themselves, executed
//! by the store next to the data (see the [`Store`](crate::Store) docs for how each backend
//! runs them in one round trip), never a read followed by a write.

use std::fmt;
use std::sync::Arc;
use xfer_core::{
    Account, AccountId, AssetCode, CancelReason, Code, LowerBound, OwnerId, Timestamp, TransferId,
    TransferRecord, TransferState,
};

/// One single-record operation, addressed to its record.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Op {
    /// An operation on one account record.
    Account(AccountId, AccountOp),
    /// An operation on one transfer record.
    Transfer(TransferId, TransferOp),
}

/// Operations on an account record.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AccountOp {
    /// Create it open with a zero balance, if absent (or only a tombstone placeholder).
    /// The same asset and bound again answers with the record; different ones are refused.
    Create {
        /// Its asset.
        asset: AssetCode,
        /// Its lower bound.
        lower_bound: LowerBound,
    },
    /// Step 3: write the transfer's intent and reserve its debit / note its credit.
    Prepare {
        /// The transfer.
        transfer: TransferId,
        /// The asset the transfer moves here.
        asset: AssetCode,
        /// Total debit (must be available).
        debit: u64,
        /// Total credit.
        credit: u64,
        /// Refused with [`PrepareOutcome::TooLate`] once the store's clock reaches this.
        deadline: Timestamp,
        /// When the intent's tombstone may be dropped.
        horizon: Timestamp,
    },
    /// Step 5: move an open intent's amounts into the balance; mark it posted.
    Post {
        /// The transfer.
        transfer: TransferId,
        /// The asset (so a router with asset rules can place the op).
        asset: AssetCode,
    },
    /// Step 6: give an open intent's amounts back and mark it released, or leave a released
    /// mark where no intent exists yet (creating a placeholder record if the account does
    /// not exist).
    Release {
        /// The transfer.
        transfer: TransferId,
        /// The asset (for a placeholder record).
        asset: AssetCode,
        /// When the mark may be dropped.
        horizon: Timestamp,
    },
    /// Close it if no transfer is in flight on it.
    Close,
    /// Change the lower bound if the account satisfies the new one.
    SetLowerBound {
        /// The new bound.
        lower_bound: LowerBound,
    },
    /// Read it.
    Get,
    /// Step 5 of a hold captured in part: move `debit` and `credit` (at most the open
    /// intent's) into the balance and give the rest of the intent back, in one step; mark
    /// it posted. Amounts above the intent's are refused with `capture_exceeds_hold`,
    /// changing nothing. Otherwise as [`AccountOp::Post`].
    PostPart {
        /// The transfer.
        transfer: TransferId,
        /// The asset (so a router with asset rules can place the op).
        asset: AssetCode,
        /// What leaves the balance: at most the intent's debit.
        debit: u64,
        /// What enters the balance: at most the intent's credit.
        credit: u64,
    },
}

/// Operations on a transfer record.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TransferOp {
    /// Step 1: insert if absent. The same body again answers `Unchanged` with the record; a
    /// different body is refused with `id_exists_with_different_body`.
    Insert(Arc<TransferRecord>),
    /// Step 2: `initial -> pending`; or take over a non-terminal transfer whose lease has
    /// lapsed (a held one only once it has expired, moving it to `canceling`). Sets owner and
    /// lease and increments the epoch.
    Claim {
        /// The new owner.
        owner: OwnerId,
        /// The claimer's clock.
        now: Timestamp,
        /// The new lease's end.
        lease_until: Timestamp,
    },
    /// Step 4, the commit point: `pending -> applied | held | canceling` if the epoch is
    /// still `epoch`.
    Decide {
        /// The decider's epoch.
        epoch: u64,
        /// `Applied`, `Held` or `Canceling`.
        to: TransferState,
        /// For `Canceling`: why.
        reason: Option<CancelReason>,
        /// The decider's clock.
        now: Timestamp,
    },
    /// `held -> applied` before the hold expires; takes ownership (new epoch).
    Capture {
        /// The capturer.
        owner: OwnerId,
        /// The capturer's clock.
        now: Timestamp,
        /// The new lease's end.
        lease_until: Timestamp,
    },
    /// `held -> canceling`; takes ownership (new epoch).
    Void {
        /// The voider.
        owner: OwnerId,
        /// The voider's clock.
        now: Timestamp,
        /// The new lease's end.
        lease_until: Timestamp,
    },
    /// `applied -> done` or `canceling -> canceled`, once every post or release is done.
    Finish {
        /// The finisher's clock.
        now: Timestamp,
    },
    /// On the original of a refund: link `refund`, which moves back part or all of it.
    /// Refused unless the original is `done` and `postings` are its postings in order,
    /// each reversed with an amount at most the original's. A repeat (`refund` linked
    /// already) changes nothing. Otherwise the links of `replacing` (refunds known to be
    /// canceled) are dropped, and the link is added if the refunds linked then still take
    /// back at most each posting's amount and number at most [`xfer_core::REFUNDS_MAX`]:
    /// `refunded_by` becomes `refund`. Encoded as it was before it had a clock when `now`
    /// is [`LINK_NOW_UNKNOWN`] and before it could replace several when `replacing` has
    /// at most one (`link_wire`), so that a log written before still reads.
    #[serde(
        serialize_with = "link_wire::serialize",
        deserialize_with = "link_wire::deserialize"
    )]
    LinkRefund {
        /// The refund.
        refund: TransferId,
        /// Canceled refunds whose links this one replaces.
        replacing: Vec<TransferId>,
        /// The refund's postings, checked against the original's reversed.
        postings: Vec<xfer_core::Posting>,
        /// The linker's clock: the record's `updated_at` and its timeline step's time.
        now: Timestamp,
    },
    /// Make a non-terminal transfer's lease lapse now, so the next sweep re-drives it, and
    /// clear its escalation (an escalated transfer is re-driven even if its lease lapsed).
    Redrive {
        /// The caller's clock.
        now: Timestamp,
    },
    /// Read it.
    Get,
    /// Steps 1 to 6 at once, for a transfer whose accounts all live on the record's shard
    /// (the one-phase commit, `docs/protocol.md`): if the record is absent and every leg's
    /// prepare would succeed, insert the record `done` (no owner, `updated_at` its
    /// `created_at`) and move every leg's amounts into its balance, all in one atomic step,
    /// with no intents; otherwise exactly an [`Insert`](TransferOp::Insert) of the record,
    /// for the two phases to go on from. A store may always answer as `Insert` does.
    OnePhase(Arc<TransferRecord>),
    /// A held transfer's expiry moved later, to `until`, while it has not passed (by the
    /// caller's clock and the store's): refused `hold_expired` once it has, and
    /// `transfer_is_not_held` before the transfer is held; an expiry at or past `until`
    /// stays as it is (a repeat changes nothing, and an expiry is never brought forward).
    /// Any other state is left as it is, for the caller to read why from the record.
    Extend {
        /// The new expiry.
        until: Timestamp,
        /// The caller's clock.
        now: Timestamp,
    },
    /// A capture in part: as [`TransferOp::Capture`], and the record keeps `amounts` as
    /// its `captured` (what its posts move of each posting; the caller checked them against
    /// the postings, which never change).
    CapturePart {
        /// The capturer.
        owner: OwnerId,
        /// The capturer's clock.
        now: Timestamp,
        /// The new lease's end.
        lease_until: Timestamp,
        /// Of each posting, in order, the amount captured.
        amounts: Vec<xfer_core::Amount>,
    },
    /// Mark a non-terminal transfer for a person (`escalation`), once: a record marked
    /// already, or terminal, is left as it is. Nothing else changes (not even `updated_at`),
    /// and no timeline step is written.
    Escalate {
        /// The mark.
        escalation: xfer_core::Escalation,
    },
}

/// What a prepare found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrepareOutcome {
    /// The intent was written.
    Prepared,
    /// The intent was already there, open (a repeat).
    AlreadyPrepared,
    /// A posted tombstone: the transfer is done here; nothing changed.
    AlreadyPosted,
    /// A released tombstone: the transfer was canceled here; nothing changed.
    AlreadyReleased,
    /// The store's clock reached the deadline; nothing changed.
    TooLate,
    /// Refused for a business reason; nothing changed.
    Refused(Code),
}

/// What a post found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostOutcome {
    /// Moved into the balance.
    Posted,
    /// Posted before (a repeat).
    AlreadyPosted,
    /// No intent: posted and its tombstone since dropped (or never prepared: a bug).
    Missing,
    /// The intent was released: the transfer's decision is broken (a bug; changed nothing).
    FoundReleased,
}

/// What a release found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// An open intent was given back.
    Released,
    /// Released before (a repeat).
    AlreadyReleased,
    /// No intent yet: a released mark was left for a prepare that may still arrive.
    Marked,
    /// The intent was posted: the transfer's decision is broken (a bug; changed nothing).
    FoundPosted,
}

/// The answer to one [`Op`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The account as it is after the operation. Shared: the Memory and embedded stores
    /// answer a read with the record they hold, not a copy of it and its intents (the
    /// service's pre-check reads two accounts per transfer).
    Account(std::sync::Arc<Account>),
    /// Outcome of a prepare.
    Prepare(PrepareOutcome),
    /// Outcome of a post.
    Post(PostOutcome),
    /// Outcome of a release.
    Release(ReleaseOutcome),
    /// The operation changed the transfer; here it is after. Shared, as `Account` is: the
    /// Memory and embedded stores answer with the record they hold, not a copy of it in a
    /// box of its own (three per transfer, made under the shard's lock); a write to the
    /// record while an answer still holds it copies the record first.
    Transfer(std::sync::Arc<TransferRecord>),
    /// The operation's condition did not hold; the transfer as it is, unchanged.
    Unchanged(std::sync::Arc<TransferRecord>),
    /// Refused for a business reason; nothing changed.
    Refused(Code),
    /// No such record; nothing changed.
    NotFound,
}

impl Op {
    /// Copies of borrowed ops, for a store that keeps what it is given
    /// ([`crate::Store::execute_ahead`]'s default).
    pub fn copies(ops: &[&Op]) -> Vec<Op> {
        ops.iter().map(|&op| op.clone()).collect()
    }

    /// The record it addresses, as a sort key: stores that lock records sort a batch by it
    /// so that two batches never wait for each other in a cycle (accounts, then transfers,
    /// each by id).
    pub fn record_key(&self) -> (u8, &str) {
        match self {
            Op::Account(id, _) => (0, id.as_str()),
            Op::Transfer(id, _) => (1, id.as_str()),
        }
    }

    /// The asset an account op names, if it names one (for routing by asset).
    pub fn asset(&self) -> Option<&AssetCode> {
        match self {
            Op::Account(_, AccountOp::Create { asset, .. })
            | Op::Account(_, AccountOp::Prepare { asset, .. })
            | Op::Account(_, AccountOp::Post { asset, .. })
            | Op::Account(_, AccountOp::PostPart { asset, .. })
            | Op::Account(_, AccountOp::Release { asset, .. }) => Some(asset),
            _ => None,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Account(id, op) => match op {
                AccountOp::Create { asset, lower_bound } => {
                    write!(f, "account {id}: create {asset} bound={lower_bound:?}")
                }
                AccountOp::Prepare { transfer, asset, debit, credit, deadline, horizon } => write!(
                    f,
                    "account {id}: prepare {transfer} {asset} debit={debit} credit={credit} deadline={deadline} horizon={horizon}"
                ),
                AccountOp::Post { transfer, .. } => write!(f, "account {id}: post {transfer}"),
                AccountOp::PostPart { transfer, debit, credit, .. } => {
                    write!(f, "account {id}: post-part {transfer} debit={debit} credit={credit}")
                }
                AccountOp::Release { transfer, horizon, .. } => {
                    write!(f, "account {id}: release {transfer} horizon={horizon}")
                }
                AccountOp::Close => write!(f, "account {id}: close"),
                AccountOp::SetLowerBound { lower_bound } => {
                    write!(f, "account {id}: set-lower-bound {lower_bound:?}")
                }
                AccountOp::Get => write!(f, "account {id}: get"),
            },
            Op::Transfer(id, op) => match op {
                TransferOp::Insert(r) => write!(f, "transfer {id}: insert {} deadline={}", r.state, r.deadline),
                TransferOp::Claim { owner, lease_until, .. } => {
                    write!(f, "transfer {id}: claim owner={owner} lease_until={lease_until}")
                }
                TransferOp::Decide { epoch, to, reason, .. } => match reason {
                    Some(r) => write!(f, "transfer {id}: decide epoch={epoch} -> {to} ({r})"),
                    None => write!(f, "transfer {id}: decide epoch={epoch} -> {to}"),
                },
                TransferOp::Capture { owner, .. } => write!(f, "transfer {id}: capture owner={owner}"),
                TransferOp::CapturePart { owner, amounts, .. } => {
                    write!(f, "transfer {id}: capture-part owner={owner} amounts=")?;
                    for (i, a) in amounts.iter().enumerate() {
                        write!(f, "{}{}", if i == 0 { "" } else { "," }, a.units())?;
                    }
                    Ok(())
                }
                TransferOp::Void { owner, .. } => write!(f, "transfer {id}: void owner={owner}"),
                TransferOp::Finish { .. } => write!(f, "transfer {id}: finish"),
                TransferOp::LinkRefund { refund, replacing, postings, .. } => {
                    write!(f, "transfer {id}: link-refund {refund}")?;
                    for (i, p) in postings.iter().enumerate() {
                        write!(f, "{}{}", if i == 0 { " amounts=" } else { "," }, p.amount.units())?;
                    }
                    for (i, r) in replacing.iter().enumerate() {
                        write!(f, "{}{r}", if i == 0 { " replacing=" } else { "," })?;
                    }
                    Ok(())
                }
                TransferOp::Redrive { .. } => write!(f, "transfer {id}: redrive"),
                TransferOp::Escalate { escalation } => write!(
                    f,
                    "transfer {id}: escalate attempts={} error={:?}",
                    escalation.attempts, escalation.error
                ),
                TransferOp::Get => write!(f, "transfer {id}: get"),
                TransferOp::OnePhase(r) => write!(f, "transfer {id}: one-phase deadline={}", r.deadline),
                TransferOp::Extend { until, .. } => write!(f, "transfer {id}: extend until={until}"),
            },
        }
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Account(a) => {
                let open = a.open_intents();
                write!(
                    f,
                    "account balance={} reserved={} incoming={} intents={} open={} {:?}",
                    a.balance,
                    a.reserved,
                    a.incoming,
                    a.intents.len(),
                    open,
                    a.status
                )
            }
            Reply::Prepare(o) => write!(f, "{o:?}"),
            Reply::Post(o) => write!(f, "{o:?}"),
            Reply::Release(o) => write!(f, "{o:?}"),
            Reply::Transfer(r) => write!(f, "ok: {} epoch={}", r.state, r.epoch),
            Reply::Unchanged(r) => write!(f, "unchanged: {} epoch={}", r.state, r.epoch),
            Reply::Refused(c) => write!(f, "refused: {c}"),
            Reply::NotFound => f.write_str("not found"),
        }
    }
}

/// A [`TransferOp::LinkRefund`] read from an encoding made before the op had a clock (the
/// embedded store's log): its reader gives it one (the log entry's clock).
pub const LINK_NOW_UNKNOWN: Timestamp = Timestamp(0);

/// The encoding of [`TransferOp::LinkRefund`]: its fields in order, as a struct variant's,
/// but `replacing` and `now` share one tag byte, bit 0 for one refund replaced (as an
/// `Option`'s tag was), bit 1 for a clock that follows and bit 2 for a list of replaced
/// refunds. An op encoded before it had a clock reads with [`LINK_NOW_UNKNOWN`]; one with
/// that clock and at most one refund replaced encodes as it did.
mod link_wire {
    use super::LINK_NOW_UNKNOWN;
    use serde::de::{Error, SeqAccess, Visitor};
    use serde::ser::SerializeTuple;
    use serde::{Deserializer, Serializer};
    use std::fmt;
    use xfer_core::{Posting, Timestamp, TransferId};

    type Fields = (TransferId, Vec<TransferId>, Vec<Posting>, Timestamp);

    pub(super) fn serialize<S: Serializer>(
        refund: &TransferId,
        replacing: &Vec<TransferId>,
        postings: &Vec<Posting>,
        now: &Timestamp,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let clock = *now != LINK_NOW_UNKNOWN;
        let list = replacing.len() > 1;
        let tag = u8::from(replacing.len() == 1) | (u8::from(clock) << 1) | (u8::from(list) << 2);
        let mut t = s.serialize_tuple(5)?;
        t.serialize_element(refund)?;
        t.serialize_element(&tag)?;
        match replacing.as_slice() {
            [] => {}
            [one] => t.serialize_element(one)?,
            many => t.serialize_element(many)?,
        }
        if clock {
            t.serialize_element(now)?;
        }
        t.serialize_element(postings)?;
        t.end()
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Fields, D::Error> {
        struct Fields4;
        impl<'de> Visitor<'de> for Fields4 {
            type Value = Fields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a refund link")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Fields, A::Error> {
                let missing = || A::Error::custom("a refund link ends early");
                let refund: TransferId = seq.next_element()?.ok_or_else(missing)?;
                let tag: u8 = seq.next_element()?.ok_or_else(missing)?;
                if tag > 7 || tag & 5 == 5 {
                    return Err(A::Error::custom(format!("refund link tag {tag}")));
                }
                let replacing = match tag & 5 {
                    1 => vec![seq.next_element::<TransferId>()?.ok_or_else(missing)?],
                    4 => seq.next_element::<Vec<TransferId>>()?.ok_or_else(missing)?,
                    _ => Vec::new(),
                };
                let now = match tag & 2 {
                    2 => seq.next_element::<Timestamp>()?.ok_or_else(missing)?,
                    _ => LINK_NOW_UNKNOWN,
                };
                let postings: Vec<Posting> = seq.next_element()?.ok_or_else(missing)?;
                Ok((refund, replacing, postings, now))
            }
        }
        d.deserialize_tuple(5, Fields4)
    }
}
