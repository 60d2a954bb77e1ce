//! Transfers: what a client asks for ([`TransferSpec`]), the per-account work it implies
//! ([`Leg`]), and what the transfer log keeps ([`TransferRecord`]) as it moves through the
//! states of SPEC §3:
//!
//! ```text
//! initial ──claim──▶ pending ──all prepared──▶ applied ──all posted──▶ done
//!                       │  (hold) ──▶ held ──capture──▶ applied
//!                       │              └──void/expire──▶ canceling
//!                       └──refused / deadline passed──▶ canceling ──all released──▶ canceled
//! ```

use crate::amount::{Amount, AssetCode, AMOUNT_MAX};
use crate::id::{AccountId, OwnerId, TransferId};
use crate::rejection::{Code, Rejection};
use crate::time::Timestamp;
use crate::timeline::{Step, Timeline};
use std::fmt;
use std::sync::Arc;

/// The most postings one transfer may carry.
pub const POSTINGS_MAX: usize = 64;
/// The longest metadata, in bytes.
pub const METADATA_LEN_MAX: usize = 2048;
/// The longest prepare timeout a transfer may ask for.
pub const TIMEOUT_MS_MAX: u64 = 3_600_000;
/// The longest a hold may wait for capture.
pub const HOLD_TTL_MS_MAX: u64 = 30 * 24 * 3_600_000;

/// Move `amount` of `asset` from `from` to `to`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Posting {
    /// Debited account.
    pub from: AccountId,
    /// Credited account.
    pub to: AccountId,
    /// What moves; both accounts must hold it.
    pub asset: AssetCode,
    /// How much, in minor units.
    pub amount: Amount,
}

/// A plain transfer, or a hold that waits for capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferKind {
    /// Posts as soon as every leg is prepared.
    Transfer,
    /// Stops at `held` once prepared; expires `ttl_ms` after creation unless captured.
    Hold {
        /// Lifetime from creation, in milliseconds; longer than the prepare timeout.
        ttl_ms: u64,
    },
}

/// A transfer's postings: one held in place (nearly every transfer has one), more in a
/// list of their own, so that a transfer does not allocate its one posting apart for the
/// checkpointer to free from another thread when the record leaves memory
/// (`docs/benchmarks.md#postings-inline`). Encoded as a sequence, as a `Vec` is.
pub type Postings = smallvec::SmallVec<[Posting; 1]>;

/// What a client submits. Its body (everything but `timeout_ms`) is what the idempotency
/// rule compares: same id and body returns the existing transfer, a different body is
/// `id_exists_with_different_body`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TransferSpec {
    /// The idempotency key.
    pub id: TransferId,
    /// 1..=[`POSTINGS_MAX`] postings that happen together or not at all.
    pub postings: Postings,
    /// Opaque client data (an order number), at most [`METADATA_LEN_MAX`] bytes.
    pub metadata: String,
    /// Transfer or hold.
    pub kind: TransferKind,
    /// For a refund: the `done` transfer it reverses.
    pub refund_of: Option<TransferId>,
    /// How long prepares may take before the transfer is canceled, in milliseconds.
    pub timeout_ms: u64,
}

/// A transfer's legs: two held in place (a transfer of one posting, nearly all of them),
/// more in a list of their own, so that a transfer does not allocate its legs at submit and
/// free them, read cold, when its machine is dropped (`docs/benchmarks.md#legs-inline`).
pub type Legs = smallvec::SmallVec<[Leg; 2]>;

/// One account's share of a transfer: the totals its single intent carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leg {
    /// The account.
    pub account: AccountId,
    /// Its asset.
    pub asset: AssetCode,
    /// Total debit (must be available at prepare).
    pub debit: u64,
    /// Total credit.
    pub credit: u64,
}

impl TransferSpec {
    /// True when `other` asks for the same thing (the idempotency comparison).
    pub fn same_body(&self, other: &TransferSpec) -> bool {
        self.id == other.id
            && self.postings == other.postings
            && self.metadata == other.metadata
            && self.kind == other.kind
            && self.refund_of == other.refund_of
    }

    /// Checks every rule that needs no store, in field order, and returns the legs: one per
    /// account, in order of first appearance.
    pub fn validate(&self) -> Result<Legs, Rejection> {
        if self.postings.is_empty() {
            return Err(Rejection::new(
                Code::PostingsMustNotBeEmpty,
                "postings",
                "need 1 or more",
            ));
        }
        if self.postings.len() > POSTINGS_MAX {
            return Err(Rejection::new(
                Code::TooManyPostings,
                "postings",
                format!("{} postings, at most {POSTINGS_MAX}", self.postings.len()),
            ));
        }
        if self.metadata.len() > METADATA_LEN_MAX {
            return Err(Rejection::new(
                Code::MetadataTooLarge,
                "metadata",
                format!("{} bytes, at most {METADATA_LEN_MAX}", self.metadata.len()),
            ));
        }
        if self.timeout_ms == 0 || self.timeout_ms > TIMEOUT_MS_MAX {
            return Err(Rejection::new(
                Code::TimeoutOutOfRange,
                "timeout_ms",
                format!("{} ms, must be 1..={TIMEOUT_MS_MAX}", self.timeout_ms),
            ));
        }
        if let TransferKind::Hold { ttl_ms } = self.kind {
            if ttl_ms <= self.timeout_ms || ttl_ms > HOLD_TTL_MS_MAX {
                return Err(Rejection::new(
                    Code::HoldExpiryOutOfRange,
                    "hold.ttl_ms",
                    format!(
                        "{ttl_ms} ms, must exceed the timeout {} ms and be at most {HOLD_TTL_MS_MAX}",
                        self.timeout_ms
                    ),
                ));
            }
        }
        let mut legs = Legs::with_capacity(2 * self.postings.len());
        for (i, p) in self.postings.iter().enumerate() {
            if p.from == p.to {
                return Err(Rejection::new(
                    Code::AccountsMustBeDifferent,
                    format!("postings[{i}].to"),
                    format!("{} is both from and to", p.from),
                ));
            }
            for (account, side) in [(&p.from, "from"), (&p.to, "to")] {
                let leg = match legs.iter_mut().position(|l| &l.account == account) {
                    Some(k) => &mut legs[k],
                    None => {
                        legs.push(Leg {
                            account: account.clone(),
                            asset: p.asset.clone(),
                            debit: 0,
                            credit: 0,
                        });
                        legs.last_mut().expect("just pushed")
                    }
                };
                if leg.asset != p.asset {
                    return Err(Rejection::new(
                        Code::AccountUsedWithTwoAssets,
                        // Named only on error: formatting it for every leg would allocate
                        // twice per posting on every submit.
                        format!("postings[{i}].{side}"),
                        format!("{account} appears with {} and {}", leg.asset, p.asset),
                    ));
                }
                let total = if side == "from" {
                    &mut leg.debit
                } else {
                    &mut leg.credit
                };
                *total = total
                    .checked_add(p.amount.units())
                    .filter(|t| *t <= AMOUNT_MAX)
                    .ok_or_else(|| {
                        Rejection::new(
                            Code::AmountExceedsMaximum,
                            format!("postings[{i}].amount"),
                            format!("{account}'s total passes {AMOUNT_MAX}"),
                        )
                    })?;
            }
        }
        Ok(legs)
    }

    /// The postings that undo `self`: each one reversed, in order, whole (a record's
    /// [`TransferRecord::reversed_postings`] undoes what it moved).
    pub fn reversed_postings(&self) -> Vec<Posting> {
        reversed(&self.postings)
    }

    /// Checks the amounts of a capture in part against the held postings: one per
    /// posting, in order, each at most the posting's amount. `Ok(true)` when they capture
    /// every posting whole (an ordinary capture).
    pub fn check_capture(&self, amounts: &[Amount]) -> Result<bool, Rejection> {
        let n = self.postings.len();
        if amounts.len() != n {
            return Err(Rejection::new(
                Code::CaptureMustMatchHold,
                "amounts",
                format!(
                    "{} amounts for {n} held postings: give one for each, in order",
                    amounts.len()
                ),
            ));
        }
        for (i, (p, a)) in self.postings.iter().zip(amounts).enumerate() {
            if *a > p.amount {
                return Err(Rejection::new(
                    Code::CaptureExceedsHold,
                    format!("amounts[{i}]"),
                    format!("{} is more than the {} held", a.units(), p.amount.units()),
                ));
            }
        }
        Ok(self
            .postings
            .iter()
            .zip(amounts)
            .all(|(p, a)| p.amount == *a))
    }

    /// The legs of these postings with `amounts` instead of theirs (checked by
    /// [`TransferSpec::check_capture`]): the same accounts in the same order as
    /// [`TransferSpec::validate`]'s legs, with what each account moves.
    pub fn legs_with(&self, amounts: &[Amount]) -> Result<Legs, Rejection> {
        let mut moved = self.clone();
        for (p, a) in moved.postings.iter_mut().zip(amounts) {
            p.amount = *a;
        }
        moved.validate()
    }
}

/// Each of `postings` reversed, in order.
fn reversed(postings: &[Posting]) -> Vec<Posting> {
    postings
        .iter()
        .map(|p| Posting {
            from: p.to.clone(),
            to: p.from.clone(),
            asset: p.asset.clone(),
            amount: p.amount,
        })
        .collect()
}

/// Where a transfer is in the protocol.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum TransferState {
    /// Accepted, nobody runs it yet.
    Initial,
    /// Claimed; prepares under way. Not decided.
    Pending,
    /// Decided: commit. Posts under way.
    Applied,
    /// A hold: prepared, waiting for capture, void or expiry.
    Held,
    /// Decided: cancel. Releases under way.
    Canceling,
    /// Every posting applied exactly once.
    Done,
    /// No posting applied.
    Canceled,
}

impl TransferState {
    /// `done` or `canceled`.
    pub fn is_terminal(self) -> bool {
        matches!(self, TransferState::Done | TransferState::Canceled)
    }

    /// True once the commit/cancel decision is made (`applied` and after, or `canceling`
    /// and after). `held` is prepared but undecided.
    pub fn is_decided(self) -> bool {
        matches!(
            self,
            TransferState::Applied
                | TransferState::Done
                | TransferState::Canceling
                | TransferState::Canceled
        )
    }

    /// The transitions of the state diagram (staying put is a takeover, also allowed for
    /// non-terminal states). Guarantee 4 is this function.
    pub fn can_become(self, next: TransferState) -> bool {
        use TransferState::*;
        matches!(
            (self, next),
            (Initial, Pending)
                | (Pending, Applied | Held | Canceling)
                | (Held, Applied | Canceling)
                | (Applied, Done)
                | (Canceling, Canceled)
        ) || (self == next && !self.is_terminal())
    }

    /// The lower-case name used in records, logs and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            TransferState::Initial => "initial",
            TransferState::Pending => "pending",
            TransferState::Applied => "applied",
            TransferState::Held => "held",
            TransferState::Canceling => "canceling",
            TransferState::Done => "done",
            TransferState::Canceled => "canceled",
        }
    }
}

impl fmt::Display for TransferState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a transfer was canceled.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelReason {
    /// A prepare on `account` was refused for a business reason.
    Refused {
        /// The account that refused.
        account: AccountId,
        /// Why.
        code: Code,
    },
    /// Not every leg was prepared by the prepare deadline.
    DeadlinePassed,
    /// A hold was voided.
    Voided,
    /// A hold was not captured before its expiry.
    Expired,
    /// A refund whose original could not be refunded.
    RefundRefused {
        /// Why.
        code: Code,
    },
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CancelReason::Refused { account, code } => write!(f, "{code} on {account}"),
            CancelReason::DeadlinePassed => f.write_str("deadline_passed"),
            CancelReason::Voided => f.write_str("voided"),
            CancelReason::Expired => f.write_str("hold_expired"),
            CancelReason::RefundRefused { code } => write!(f, "refund_refused: {code}"),
        }
    }
}

/// The longest error an [`Escalation`] keeps, in bytes.
pub const ESCALATION_ERROR_LEN_MAX: usize = 512;

/// A transfer marked for a person: recovering it kept failing for a reason retrying will not
/// fix (a protocol violation, a damaged record, a store error past the retry limit).
/// Sweepers leave it alone until a re-drive clears the mark. It changes nothing of the
/// protocol's fields (state, owner, epoch, lease), so it cannot change an outcome.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Escalation {
    /// Failed recoveries in a row when it was marked.
    pub attempts: u32,
    /// The last failure, at most [`ESCALATION_ERROR_LEN_MAX`] bytes.
    pub error: String,
    /// When it was marked (the sweeper's clock).
    pub at: Timestamp,
}

impl Escalation {
    /// An escalation of `error` (a NUL, which some stores' JSON cannot hold, made U+FFFD;
    /// cut to [`ESCALATION_ERROR_LEN_MAX`] bytes on a character boundary) after `attempts`
    /// failures, at `at`.
    pub fn new(attempts: u32, error: &str, at: Timestamp) -> Escalation {
        let error = error.replace('\0', "\u{FFFD}");
        let mut end = error.len().min(ESCALATION_ERROR_LEN_MAX);
        while !error.is_char_boundary(end) {
            end -= 1;
        }
        Escalation {
            attempts,
            error: error[..end].to_string(),
            at,
        }
    }
}

/// At most this many refunds link to one transfer (a canceled refund's link is replaced).
pub const REFUNDS_MAX: usize = 16;

/// A refund linked to the transfer it reverses: the refund, and how much it takes back of
/// each of the original's postings, in their order.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RefundLink {
    /// The refund.
    pub refund: TransferId,
    /// Of each of the original's postings, in order, the amount the refund moves back.
    pub amounts: Vec<Amount>,
}

/// The transfer log's record of one transfer.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TransferRecord {
    /// What was asked: never changes, so shared. A record is copied at every step (the
    /// store's reply, the machine's copy, a write while a checkpoint holds the old one),
    /// and sharing the spec spares copying its postings and ids each time
    /// (`docs/benchmarks.md#shared-spec`). Encoded as the spec itself.
    pub spec: Arc<TransferSpec>,
    /// Where it is.
    pub state: TransferState,
    /// When it was accepted (the acceptor's clock).
    pub created_at: Timestamp,
    /// Last state, owner or refund link change (the writer's clock).
    pub updated_at: Timestamp,
    /// Stores refuse its prepares from this instant on (their own clocks).
    pub deadline: Timestamp,
    /// For a hold: when an uncaptured hold is canceled.
    pub hold_expires_at: Option<Timestamp>,
    /// The executor running it, if any.
    pub owner: Option<OwnerId>,
    /// The owner's claim lapses at this instant; then the sweeper may take over.
    pub lease_until: Timestamp,
    /// Incremented by every claim; decisions compare it so a zombie's write fails.
    pub epoch: u64,
    /// Why it was canceled.
    pub reason: Option<CancelReason>,
    /// For a `done` transfer: the latest refund linked to it (the last of `refunds`). Its
    /// change is the timeline's refund step and the `refunded` event.
    pub refunded_by: Option<TransferId>,
    /// For a `done` transfer: the refunds linked to it, oldest first, at most
    /// [`REFUNDS_MAX`]; their amounts never sum above the original's, posting by posting.
    /// Empty in a record written before partial refunds, whose one refund took everything
    /// back ([`TransferRecord::refund_links`]). Not part of this type's serde encoding, as
    /// `timeline`.
    #[serde(skip)]
    pub refunds: Vec<RefundLink>,
    /// For a hold captured in part: of each posting, in order, the amount captured (at
    /// least 1, at most the posting's); the rest was released by the same posts. Empty when
    /// every posting moves its whole amount. Set with the capture decision, never changed
    /// after. Not part of this type's serde encoding, as `refunds`.
    #[serde(skip)]
    pub captured: Vec<Amount>,
    /// Marked for a person ([`Escalation`]): sweepers skip it until a re-drive clears this.
    /// Not part of this type's serde encoding, as `refunds`.
    #[serde(skip)]
    pub escalation: Option<Escalation>,
    /// The states it passed through (`timeline.rs`): its first step and its latest, at most
    /// 16; older steps in the middle are dropped. Written by the store in the step that
    /// changes the record (`xfer_store::timeline::step_of`). Not part of this type's serde
    /// encoding, which the embedded store's log keeps as it was: an inserted record's
    /// timeline is its first step, made again from the record; the embedded store's tables
    /// write it after the record.
    #[serde(skip)]
    pub timeline: Timeline,
}

impl TransferRecord {
    /// A freshly accepted record in `initial`, claimable by anyone after `claim_grace_ms`
    /// (so a sweeper runs it if the acceptor dies before its claim).
    pub fn accept(spec: TransferSpec, now: Timestamp, claim_grace_ms: u64) -> TransferRecord {
        TransferRecord::unstepped(spec, now, claim_grace_ms).accepted()
    }

    /// [`TransferRecord::accept`]'s record without its timeline.
    fn unstepped(spec: TransferSpec, now: Timestamp, claim_grace_ms: u64) -> TransferRecord {
        let deadline = now.plus_ms(spec.timeout_ms);
        let hold_expires_at = match spec.kind {
            TransferKind::Hold { ttl_ms } => Some(now.plus_ms(ttl_ms)),
            TransferKind::Transfer => None,
        };
        TransferRecord {
            spec: Arc::new(spec),
            state: TransferState::Initial,
            created_at: now,
            updated_at: now,
            deadline,
            hold_expires_at,
            owner: None,
            lease_until: now.plus_ms(claim_grace_ms),
            epoch: 0,
            reason: None,
            refunded_by: None,
            refunds: Vec::new(),
            captured: Vec::new(),
            escalation: None,
            timeline: Timeline::default(),
        }
    }

    /// The refunds linked to it, oldest first: `refunds`, or for a record written before
    /// partial refunds its one refund taking back every posting's whole amount.
    pub fn refund_links(&self) -> std::borrow::Cow<'_, [RefundLink]> {
        match (&self.refunded_by, self.refunds.is_empty()) {
            (Some(refund), true) => std::borrow::Cow::Owned(vec![RefundLink {
                refund: refund.clone(),
                amounts: self.moved_postings().iter().map(|p| p.amount).collect(),
            }]),
            _ => std::borrow::Cow::Borrowed(&self.refunds),
        }
    }

    /// The postings as they move money: the spec's, with the captured amounts of a hold
    /// captured in part.
    pub fn moved_postings(&self) -> std::borrow::Cow<'_, Postings> {
        if self.captured.is_empty() {
            return std::borrow::Cow::Borrowed(&self.spec.postings);
        }
        let mut postings = self.spec.postings.clone();
        for (p, a) in postings.iter_mut().zip(&self.captured) {
            p.amount = *a;
        }
        std::borrow::Cow::Owned(postings)
    }

    /// Of a hold captured in part, the legs of what it captured
    /// ([`TransferSpec::legs_with`]): `None` when it moves its postings whole, or when the
    /// captured amounts do not fit its postings (a damaged record: the capture checked them).
    pub fn captured_legs(&self) -> Option<Legs> {
        if self.captured.is_empty() {
            return None;
        }
        self.spec.check_capture(&self.captured).ok()?;
        self.spec.legs_with(&self.captured).ok()
    }

    /// The postings that undo what it moved: each of [`TransferRecord::moved_postings`]
    /// reversed, in order.
    pub fn reversed_postings(&self) -> Vec<Posting> {
        reversed(&self.moved_postings())
    }

    /// How much of each posting the linked refunds take back, in the postings' order
    /// (canceled refunds whose links were not yet replaced included).
    pub fn refunded_units(&self) -> Vec<u64> {
        self.refunded_units_except(&[])
    }

    /// [`TransferRecord::refunded_units`] without the refunds `skip` (those read canceled).
    pub fn refunded_units_except(&self, skip: &[TransferId]) -> Vec<u64> {
        let mut sums = vec![0u64; self.spec.postings.len()];
        for link in self.refund_links().iter() {
            if skip.contains(&link.refund) {
                continue;
            }
            for (sum, a) in sums.iter_mut().zip(&link.amounts) {
                *sum = sum.saturating_add(a.units());
            }
        }
        sums
    }

    /// The record with its timeline its first step: accepted as it is, at `created_at`.
    pub fn accepted(mut self) -> TransferRecord {
        self.timeline = Timeline::one(self.step_at(self.created_at));
        self
    }

    /// The timeline step of this record as it is, written at `at` (the cancel reason only
    /// on a step to `canceling` or `canceled`; no refund).
    pub fn step_at(&self, at: Timestamp) -> Step {
        let canceled = matches!(
            self.state,
            TransferState::Canceling | TransferState::Canceled
        );
        Step {
            at,
            state: self.state,
            owner: self.owner.clone(),
            epoch: self.epoch,
            reason: if canceled {
                self.reason.clone().map(Box::new)
            } else {
                None
            },
            refund: None,
        }
    }

    /// A freshly accepted record already claimed by `owner` until `lease_until`: `pending`,
    /// epoch 1, as [`TransferRecord::accept`] followed by a claim would leave it. An executor
    /// that submits a transfer inserts it so, which makes its insert its claim: one
    /// single-record step (one round trip, one durable write) instead of two. If it dies,
    /// the lease lapses and a sweeper claims the record (epoch 2) as it would any other.
    pub fn accept_claimed(
        spec: TransferSpec,
        now: Timestamp,
        owner: OwnerId,
        lease_until: Timestamp,
    ) -> TransferRecord {
        TransferRecord {
            state: TransferState::Pending,
            owner: Some(owner),
            lease_until,
            epoch: 1,
            ..TransferRecord::unstepped(spec, now, 0)
        }
        .accepted()
    }

    /// The transfer's id.
    pub fn id(&self) -> &TransferId {
        &self.spec.id
    }

    /// When a sweeper should next look at it: `None` once terminal; for a hold, not before
    /// it expires; otherwise when the lease lapses. Stores index this.
    pub fn wake_at(&self) -> Option<Timestamp> {
        match self.state {
            TransferState::Done | TransferState::Canceled => None,
            TransferState::Held => Some(
                self.lease_until
                    .max(self.hold_expires_at.unwrap_or(Timestamp::NEVER)),
            ),
            _ => Some(self.lease_until),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acct(s: &str) -> AccountId {
        AccountId::new(s).unwrap()
    }

    fn posting(from: &str, to: &str, asset: &str, amount: u64) -> Posting {
        Posting {
            from: acct(from),
            to: acct(to),
            asset: AssetCode::new(asset, "asset").unwrap(),
            amount: Amount::new(amount, "amount").unwrap(),
        }
    }

    fn spec(postings: Vec<Posting>) -> TransferSpec {
        TransferSpec {
            id: TransferId::new("t1").unwrap(),
            postings: postings.into(),
            metadata: String::new(),
            kind: TransferKind::Transfer,
            refund_of: None,
            timeout_ms: 1000,
        }
    }

    #[test]
    fn postings_held_in_place_are_encoded_as_a_list_is() {
        // One posting held in the spec itself, three in a list of their own: either way the
        // encoding is a `Vec`'s, so what is stored and answered did not change with it.
        for n in [1, 3] {
            let list: Vec<Posting> = (0..n)
                .map(|i| posting(&format!("a{i}"), "b", "USD", 5))
                .collect();
            let s = spec(list.clone());
            assert_eq!(s.postings.spilled(), n > 1);
            let json = serde_json::to_value(&s).unwrap();
            assert_eq!(json["postings"], serde_json::to_value(&list).unwrap());
            let back: TransferSpec = serde_json::from_value(json).unwrap();
            assert_eq!(back, s);
        }
    }

    #[test]
    fn legs_merge_one_account_into_one_intent() {
        let s = spec(vec![
            posting("a", "b", "USD", 5),
            posting("b", "c", "USD", 3),
            posting("a", "c", "USD", 1),
        ]);
        let legs = s.validate().unwrap();
        let got: Vec<_> = legs
            .iter()
            .map(|l| (l.account.as_str(), l.debit, l.credit))
            .collect();
        assert_eq!(got, vec![("a", 6, 0), ("b", 3, 5), ("c", 0, 4)]);
    }

    #[test]
    fn rejections_name_the_field() {
        let r = spec(vec![posting("a", "a", "USD", 5)])
            .validate()
            .unwrap_err();
        assert_eq!(
            (r.code, r.field.as_str()),
            (Code::AccountsMustBeDifferent, "postings[0].to")
        );
        let r = spec(vec![]).validate().unwrap_err();
        assert_eq!(r.code, Code::PostingsMustNotBeEmpty);
        let r = spec(vec![posting("a", "b", "USD", 1); POSTINGS_MAX + 1])
            .validate()
            .unwrap_err();
        assert_eq!(r.code, Code::TooManyPostings);
        let r = spec(vec![
            posting("a", "b", "USD", 1),
            posting("a", "c", "EUR", 1),
        ])
        .validate()
        .unwrap_err();
        assert_eq!(
            (r.code, r.field.as_str()),
            (Code::AccountUsedWithTwoAssets, "postings[1].from")
        );
        let r = spec(vec![
            posting("a", "b", "USD", AMOUNT_MAX),
            posting("a", "c", "USD", 1),
        ])
        .validate()
        .unwrap_err();
        assert_eq!(
            (r.code, r.field.as_str()),
            (Code::AmountExceedsMaximum, "postings[1].amount")
        );
        let mut s = spec(vec![posting("a", "b", "USD", 1)]);
        s.kind = TransferKind::Hold { ttl_ms: 1000 };
        assert_eq!(s.validate().unwrap_err().code, Code::HoldExpiryOutOfRange);
        s.timeout_ms = 0;
        assert_eq!(s.validate().unwrap_err().code, Code::TimeoutOutOfRange);
    }

    #[test]
    fn decisions_are_stable() {
        use TransferState::*;
        assert!(!Applied.can_become(Canceling));
        assert!(!Applied.can_become(Canceled));
        assert!(!Canceling.can_become(Done));
        assert!(!Canceling.can_become(Applied));
        assert!(!Done.can_become(Done));
        assert!(Held.can_become(Applied) && Held.can_become(Canceling));
        assert!(Pending.can_become(Pending));
    }
}
