//! The change feed's events: one per change of a transfer's state that a client can observe
//! (SPEC §1, "event"), written by the store in the same atomic step as the change, so that
//! neither exists without the other.
//!
//! Which changes are events is one pure function of the record before and after a step
//! ([`events_of`]); every store calls it (the Memory and embedded stores) or mirrors it
//! (PostgreSQL's trigger, Redis's functions), and the conformance suite holds them to it.
//! Each shard numbers its events in the order their changes became visible
//! ([`FeedPosition`]); a reader pages through a shard with [`Store::events`](crate::Store::events).

use std::fmt;
use xfer_core::mutant::{self, Mutant};
use xfer_core::{Timestamp, TransferId, TransferRecord, TransferState};

/// What happened to a transfer. Each happens at most once per transfer, but `Refunded`,
/// which happens once per refund that links it (a canceled refund may be replaced).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// The record was written: the transfer exists.
    Accepted,
    /// A hold's postings are reserved, waiting for capture, void or expiry.
    Held,
    /// A hold was captured: its postings will be posted.
    Captured,
    /// A hold was voided: its postings will be released.
    Voided,
    /// A hold passed its expiry uncaptured: its postings will be released.
    Expired,
    /// Every posting applied, exactly once.
    Done,
    /// No posting applied; the record says why.
    Canceled,
    /// A refund that reverses this (done) transfer was linked to it.
    Refunded,
}

impl EventKind {
    /// Every kind, in the order a transfer may go through them.
    pub const ALL: [EventKind; 8] = [
        EventKind::Accepted,
        EventKind::Held,
        EventKind::Captured,
        EventKind::Voided,
        EventKind::Expired,
        EventKind::Done,
        EventKind::Canceled,
        EventKind::Refunded,
    ];

    /// The kind's name, as the API and the stores write it.
    pub fn word(self) -> &'static str {
        match self {
            EventKind::Accepted => "accepted",
            EventKind::Held => "held",
            EventKind::Captured => "captured",
            EventKind::Voided => "voided",
            EventKind::Expired => "expired",
            EventKind::Done => "done",
            EventKind::Canceled => "canceled",
            EventKind::Refunded => "refunded",
        }
    }

    /// The kind named `word`.
    pub fn from_word(word: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.word() == word)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

/// A place in one shard's feed. Positions increase in the order the events became visible
/// to readers, so a reader that went past one never misses an event before it. Most stores
/// number events in one sequence (`major` 0); PostgreSQL orders them by the writing
/// transaction's id first, `major`, which readers see only once every transaction before it
/// has ended (`migration_5.sql`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FeedPosition {
    /// The writing transaction (PostgreSQL), else 0.
    pub major: u64,
    /// The event's number in its shard (in its transaction, PostgreSQL).
    pub minor: u64,
}

impl FeedPosition {
    /// Before every event.
    pub const START: FeedPosition = FeedPosition { major: 0, minor: 0 };
    /// At or after every event.
    pub const END: FeedPosition = FeedPosition {
        major: u64::MAX,
        minor: u64::MAX,
    };

    /// The position `minor` of a store with one sequence.
    pub const fn seq(minor: u64) -> FeedPosition {
        FeedPosition { major: 0, minor }
    }
}

impl fmt::Display for FeedPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.major == 0 {
            write!(f, "{}", self.minor)
        } else {
            write!(f, "{}.{}", self.major, self.minor)
        }
    }
}

impl std::str::FromStr for FeedPosition {
    type Err = String;

    /// `minor` or `major.minor`, decimal.
    fn from_str(s: &str) -> Result<FeedPosition, String> {
        let number = |p: &str| {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{s:?} is not a feed position"));
            }
            p.parse::<u64>()
                .map_err(|_| format!("{s:?} is not a feed position"))
        };
        match s.split_once('.') {
            Some((major, minor)) => Ok(FeedPosition {
                major: number(major)?,
                minor: number(minor)?,
            }),
            None => Ok(FeedPosition::seq(number(s)?)),
        }
    }
}

/// One event as a store keeps it. The rest of what a reader is told (the postings, the
/// reason of a cancel) is on the transfer's record, which never changes it afterwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Where it is in its shard's feed.
    pub position: FeedPosition,
    /// The transfer that changed.
    pub transfer: TransferId,
    /// What happened.
    pub kind: EventKind,
    /// When: the record's `updated_at` after the change (its `created_at` when accepted).
    pub at: Timestamp,
    /// For `Refunded`: the refund.
    pub refund: Option<TransferId>,
}

impl Event {
    /// The event's id, the same wherever and however often it is read: the transfer, the
    /// kind, and for a refund the refund's id. A receiver drops duplicates by it.
    pub fn id(&self) -> String {
        match &self.refund {
            Some(r) => format!("{}/{}/{}", self.transfer, self.kind, r),
            None => format!("{}/{}", self.transfer, self.kind),
        }
    }
}

/// A page of one shard's events, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventPage {
    /// At most the limit asked, each after the position asked.
    pub events: Vec<Event>,
    /// The last position the shard no longer keeps (retention), or `START`: a reader asking
    /// from before it has missed events.
    pub dropped_through: FeedPosition,
}

/// The state and refund link of a record before a step: all [`events_of`] compares.
pub type Before<'a> = (TransferState, Option<&'a TransferId>);

/// Hands `emit` the events a step makes, in the order they happened, given the record
/// before it (`None`: it was absent) and after it. A step that changes nothing makes none.
/// Positions are left at `START` for the store to give.
pub fn events_of(before: Option<Before<'_>>, after: &TransferRecord, mut emit: impl FnMut(Event)) {
    let event = |kind, at| Event {
        position: FeedPosition::START,
        transfer: after.id().clone(),
        kind,
        at,
        refund: None,
    };
    let Some((state, refunded_by)) = before else {
        emit(event(EventKind::Accepted, after.created_at));
        if mutant::is(Mutant::OnePhaseSkipsDoneEvent) {
            return;
        }
        // A one-phase commit writes its record done.
        if let Some(k) = state_event(None, after) {
            emit(event(k, after.updated_at));
        }
        return;
    };
    if let Some(k) = state_event(Some(state), after) {
        emit(event(k, after.updated_at));
    }
    if after.refunded_by.is_some() && after.refunded_by.as_ref() != refunded_by {
        emit(Event {
            refund: after.refunded_by.clone(),
            ..event(EventKind::Refunded, after.updated_at)
        });
    }
}

/// The event of a record's move from `before` (`None`: written new) to its state.
fn state_event(before: Option<TransferState>, after: &TransferRecord) -> Option<EventKind> {
    use TransferState::*;
    if before == Some(after.state) {
        return None;
    }
    match (before, after.state) {
        (_, Held) => Some(EventKind::Held),
        (Some(Held), Applied) => Some(EventKind::Captured),
        (Some(Held), Canceling) => match after.reason {
            Some(xfer_core::CancelReason::Voided) => Some(EventKind::Voided),
            _ => Some(EventKind::Expired),
        },
        (_, Done) => Some(EventKind::Done),
        (_, Canceled) => Some(EventKind::Canceled),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfer_core::{
        AccountId, Amount, AssetCode, CancelReason, Posting, TransferKind, TransferSpec,
    };

    fn record(state: TransferState) -> TransferRecord {
        let spec = TransferSpec {
            id: TransferId::new("t1").unwrap(),
            postings: vec![Posting {
                from: AccountId::new("a").unwrap(),
                to: AccountId::new("b").unwrap(),
                asset: AssetCode::new("USD", "asset").unwrap(),
                amount: Amount::new(5, "amount").unwrap(),
            }]
            .into(),
            metadata: String::new(),
            kind: TransferKind::Transfer,
            refund_of: None,
            timeout_ms: 1_000,
        };
        let mut r = TransferRecord::accept(spec, Timestamp(10), 0);
        r.state = state;
        r.updated_at = Timestamp(20);
        r
    }

    fn made(before: Option<&TransferRecord>, after: &TransferRecord) -> Vec<Event> {
        let mut made = Vec::new();
        let before = before.map(|b| (b.state, b.refunded_by.as_ref()));
        events_of(before, after, |e| made.push(e));
        made
    }

    fn kinds(before: Option<&TransferRecord>, after: &TransferRecord) -> Vec<EventKind> {
        made(before, after).iter().map(|e| e.kind).collect()
    }

    #[test]
    fn each_observable_change_is_one_event_and_the_others_none() {
        use TransferState::*;
        let r = record;
        assert_eq!(kinds(None, &r(Initial)), [EventKind::Accepted]);
        assert_eq!(kinds(None, &r(Pending)), [EventKind::Accepted]);
        assert_eq!(
            kinds(None, &r(Done)),
            [EventKind::Accepted, EventKind::Done]
        );
        assert_eq!(kinds(Some(&r(Initial)), &r(Pending)), []);
        assert_eq!(kinds(Some(&r(Pending)), &r(Applied)), []);
        assert_eq!(kinds(Some(&r(Pending)), &r(Canceling)), []);
        assert_eq!(kinds(Some(&r(Pending)), &r(Held)), [EventKind::Held]);
        assert_eq!(kinds(Some(&r(Held)), &r(Applied)), [EventKind::Captured]);
        let mut voided = r(Canceling);
        voided.reason = Some(CancelReason::Voided);
        assert_eq!(kinds(Some(&r(Held)), &voided), [EventKind::Voided]);
        let mut expired = r(Canceling);
        expired.reason = Some(CancelReason::Expired);
        assert_eq!(kinds(Some(&r(Held)), &expired), [EventKind::Expired]);
        assert_eq!(kinds(Some(&r(Applied)), &r(Done)), [EventKind::Done]);
        assert_eq!(
            kinds(Some(&r(Canceling)), &r(Canceled)),
            [EventKind::Canceled]
        );
        assert_eq!(kinds(Some(&r(Done)), &r(Done)), []);
    }

    #[test]
    fn a_refund_linked_or_replaced_is_an_event_carrying_the_refund() {
        let done = record(TransferState::Done);
        let mut linked = done.clone();
        linked.refunded_by = Some(TransferId::new("r1").unwrap());
        let linked_made = made(Some(&done), &linked);
        assert_eq!(linked_made.len(), 1);
        assert_eq!(linked_made[0].kind, EventKind::Refunded);
        assert_eq!(linked_made[0].id(), "t1/refunded/r1");
        assert_eq!(made(Some(&linked), &linked), []);
        let mut replaced = linked.clone();
        replaced.refunded_by = Some(TransferId::new("r2").unwrap());
        assert_eq!(made(Some(&linked), &replaced)[0].id(), "t1/refunded/r2");
    }

    #[test]
    fn events_carry_the_time_of_their_change_and_stable_ids() {
        let one_phase = made(None, &record(TransferState::Done));
        assert_eq!(one_phase[0].at, Timestamp(10));
        assert_eq!(one_phase[1].at, Timestamp(20));
        assert_eq!(one_phase[0].id(), "t1/accepted");
        assert_eq!(one_phase[1].id(), "t1/done");
    }

    #[test]
    fn positions_order_by_transaction_then_number_and_read_back() {
        let a = FeedPosition { major: 2, minor: 1 };
        assert!(FeedPosition::seq(9) < a && a < FeedPosition { major: 2, minor: 2 });
        for p in [FeedPosition::START, FeedPosition::seq(17), a] {
            assert_eq!(p.to_string().parse::<FeedPosition>(), Ok(p));
        }
        for bad in ["", "x", "1.", ".1", "-1", "1.2.3", "99999999999999999999"] {
            assert!(bad.parse::<FeedPosition>().is_err(), "{bad}");
        }
        for k in EventKind::ALL {
            assert_eq!(EventKind::from_word(k.word()), Some(k));
        }
    }
}
