//! Which steps of a transfer its record's [`Timeline`] keeps: one pure function of the
//! record before and after a step ([`step_of`]), as the change feed's events are
//! ([`events_of`](crate::event::events_of)). The Memory and embedded stores call it in the
//! step that changes the record (`shard/apply.rs`, `record::one_phase_done`); the database
//! stores mirror it in the same atomic update (PostgreSQL's trigger, `migration_6.sql`;
//! MySQL's procedures; Redis's functions; MongoDB's update pipelines), and the conformance
//! suite holds them to the Memory store's timelines.
//!
//! A step is kept when the write changed the state, the epoch (a claim, a take-over, a
//! capture or void: every change of owner but the finish's, which changes the state) or the
//! refund link; a write that changed none of these (a repeat, a zombie's refused write, a
//! re-drive, which only moves the lease) keeps none. The step's time is the record's
//! `updated_at` after the write, the writer's clock (`created_at` when accepted).

use xfer_core::mutant::{self, Mutant};
use xfer_core::{Step, Timeline, Timestamp, TransferId, TransferRecord, TransferState};

/// What [`step_of`] compares of a record before a step: its state, epoch and refund link.
/// (An owner changes only with the epoch or, at the finish, with the state.)
pub type Before<'a> = (TransferState, u64, Option<&'a TransferId>);

/// The [`Before`] of `r`.
pub fn before(r: &TransferRecord) -> Before<'_> {
    (r.state, r.epoch, r.refunded_by.as_ref())
}

/// The step a write makes of the record `after`, given the record before it (`None`: it
/// was absent), or `None` if the write changed nothing the timeline keeps.
pub fn step_of(before: Option<Before<'_>>, after: &TransferRecord) -> Option<Step> {
    let Some((state, epoch, refunded_by)) = before else {
        return Some(after.step_at(after.created_at));
    };
    if state != after.state {
        return Some(after.step_at(after.updated_at));
    }
    if epoch != after.epoch {
        if mutant::is(Mutant::TimelineSkipsTakeover) {
            return None;
        }
        return Some(after.step_at(after.updated_at));
    }
    if after.refunded_by.is_some() && after.refunded_by.as_ref() != refunded_by {
        return Some(Step {
            refund: after.refunded_by.clone().map(Box::new),
            ..after.step_at(after.updated_at)
        });
    }
    None
}

/// Keeps on `after` the step of a write from `before` ([`step_of`]): a record written new
/// gets its first step as its whole timeline; another gets the step appended, if any.
pub fn keep(before: Option<Before<'_>>, after: &mut TransferRecord) {
    let Some(step) = step_of(before, after) else {
        return;
    };
    if before.is_none() {
        after.timeline = Timeline::one(step);
    } else {
        after.timeline.push(step);
    }
}

/// Whether `r`'s timeline is what an insert of it keeps: its first step alone. A record
/// the engine made (`TransferRecord::accept`) has it; one decoded from a log entry, which
/// does not carry the timeline, has none.
pub fn is_as_inserted(r: &TransferRecord) -> bool {
    // Field by field, without making the step: this is every insert's cost.
    let [s] = r.timeline.steps() else {
        return false;
    };
    let canceled = matches!(r.state, TransferState::Canceling | TransferState::Canceled);
    s.at == r.created_at
        && s.state == r.state
        && s.epoch == r.epoch
        && s.owner == r.owner
        && s.refund.is_none()
        && s.reason.as_deref() == r.reason.as_ref().filter(|_| canceled)
}

/// The timeline a record read from a store written before timelines gets: its one step as
/// it is now, at its last change (`updated_at`). What came before is unknown.
pub fn derived(r: &TransferRecord) -> Timeline {
    Timeline::one(Step {
        refund: r.refunded_by.clone().map(Box::new),
        ..r.step_at(r.updated_at)
    })
}

/// The time of a timeline's first step, if any.
pub fn first_at(t: &Timeline) -> Option<Timestamp> {
    t.steps().first().map(|s| s.at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfer_core::{
        AccountId, Amount, AssetCode, CancelReason, Code, OwnerId, Posting, TransferKind,
        TransferSpec,
    };

    fn record() -> TransferRecord {
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
        TransferRecord::accept(spec, Timestamp(10), 0)
    }

    fn step(r: &mut TransferRecord, at: u64, change: impl FnOnce(&mut TransferRecord)) {
        let was = r.clone();
        change(r);
        r.updated_at = Timestamp(at);
        keep(Some(before(&was)), r);
    }

    #[test]
    fn each_change_of_state_epoch_or_refund_is_a_step_and_a_repeat_none() {
        use TransferState::*;
        let mut r = record();
        assert!(is_as_inserted(&r));
        let e1 = OwnerId::new("e1").unwrap();
        step(&mut r, 20, |r| {
            r.state = Pending;
            r.owner = Some(e1.clone());
            r.epoch = 1;
        });
        step(&mut r, 25, |_| {}); // a repeat
        step(&mut r, 30, |r| {
            r.owner = Some(OwnerId::new("sweeper").unwrap());
            r.epoch = 2;
        });
        step(&mut r, 35, |r| r.lease_until = Timestamp(35)); // a re-drive
        step(&mut r, 40, |r| {
            r.state = Canceling;
            r.reason = Some(CancelReason::Refused {
                account: AccountId::new("a").unwrap(),
                code: Code::ExceedsAvailable,
            });
        });
        step(&mut r, 50, |r| {
            r.state = Canceled;
            r.owner = None;
        });
        let seen: Vec<_> = r
            .timeline
            .steps()
            .iter()
            .map(|s| (s.at.0, s.state, s.epoch, s.reason.is_some()))
            .collect();
        assert_eq!(
            seen,
            [
                (10, Initial, 0, false),
                (20, Pending, 1, false),
                (30, Pending, 2, false),
                (40, Canceling, 2, true),
                (50, Canceled, 2, true),
            ]
        );
    }

    #[test]
    fn a_refund_link_is_a_step_carrying_the_refund() {
        let mut r = record();
        step(&mut r, 20, |r| r.state = TransferState::Done);
        step(&mut r, 30, |r| {
            r.refunded_by = Some(TransferId::new("r1").unwrap())
        });
        step(&mut r, 40, |_| {});
        let last = r.timeline.last().unwrap();
        assert_eq!(
            (last.at.0, last.refund.as_ref().map(|r| r.as_str())),
            (30, Some("r1"))
        );
        assert_eq!(r.timeline.len(), 3);
    }

    #[test]
    fn many_takeovers_keep_the_first_step_and_the_latest() {
        let mut r = record();
        for epoch in 1..=40 {
            step(&mut r, 10 + epoch, |r| {
                r.state = TransferState::Pending;
                r.epoch = epoch;
            });
        }
        let t = r.timeline.steps();
        assert_eq!(t.len(), xfer_core::TIMELINE_STEPS_MAX);
        assert_eq!(t[0].state, TransferState::Initial);
        assert_eq!(t[1].epoch, 26);
        assert_eq!(t.last().unwrap().epoch, 40);
    }
}
