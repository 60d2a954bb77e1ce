//! A transfer's [`Timeline`]: the states it passed through, each with the time and the
//! executor of the write, kept on its record by the protocol's own record updates (which
//! step makes which entry is `xfer_store::timeline::step_of`, one pure function every store
//! calls or mirrors).
//!
//! ```text
//! accepted (pending, e1, epoch 1) ─▶ canceling (e1, 1, exceeds_available on b) ─▶ canceled
//! accepted (initial) ─▶ pending (e1, 1) ─▶ pending (sweeper, 2: a take-over) ─▶ applied ─▶ done
//! ```
//!
//! Bounded: at most [`TIMELINE_STEPS_MAX`] steps, the first (accepted) and the latest; a
//! step past the bound drops the oldest step after the first. Sixteen hold every path of
//! the state diagram (accepted, claimed, held, captured, posted, done and a refund link are
//! seven) with nine take-overs to spare; only a transfer whose executors keep dying makes
//! more, and of those the latest say what is going on. So a record never grows past about
//! 16 × 60 bytes encoded, however long it is stuck.
//!
//! Shared, not copied: a record is copied at every step (see `TransferRecord::spec`), and
//! a timeline is one pointer (`Arc<[Step]>`, none while empty), so a copy of a record
//! copies no steps; a step that appends makes one new list (`docs/benchmarks.md#timeline`).

use crate::id::{OwnerId, TransferId};
use crate::time::Timestamp;
use crate::transfer::{CancelReason, TransferState};
use std::sync::Arc;

/// The most steps a timeline keeps: the first and the latest.
pub const TIMELINE_STEPS_MAX: usize = 16;

/// One state a transfer passed through: its record as one write left it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Step {
    /// The writer's clock of the write (as `updated_at` took it; `created_at` when
    /// accepted).
    pub at: Timestamp,
    /// The state after the write.
    pub state: TransferState,
    /// The owner after the write (none once finished).
    pub owner: Option<OwnerId>,
    /// The epoch after the write.
    pub epoch: u64,
    /// Why it is canceled, on a step to `canceling` or `canceled`.
    pub reason: Option<CancelReason>,
    /// The refund the write linked, on a refund link's step.
    pub refund: Option<TransferId>,
}

/// The steps of one transfer, oldest first, at most [`TIMELINE_STEPS_MAX`]. Encoded as a
/// list of steps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline(Option<Arc<[Step]>>);

impl Timeline {
    /// A timeline of `steps`, oldest first: the first and the latest kept past the bound.
    pub fn of(mut steps: Vec<Step>) -> Timeline {
        if steps.is_empty() {
            return Timeline(None);
        }
        if steps.len() > TIMELINE_STEPS_MAX {
            steps.drain(1..steps.len() + 1 - TIMELINE_STEPS_MAX);
        }
        Timeline(Some(steps.into()))
    }

    /// The steps, oldest first.
    pub fn steps(&self) -> &[Step] {
        self.0.as_deref().unwrap_or(&[])
    }

    /// The latest step, if any.
    pub fn last(&self) -> Option<&Step> {
        self.steps().last()
    }

    /// Number of steps kept.
    pub fn len(&self) -> usize {
        self.steps().len()
    }

    /// True with no step (a record read from a store written before timelines).
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Appends `step`, dropping the oldest step after the first past the bound. Makes one
    /// new list; copies of the record that shared the old one keep it.
    pub fn push(&mut self, step: Step) {
        let old = self.steps();
        let keep_from = if old.len() >= TIMELINE_STEPS_MAX {
            2
        } else {
            1
        };
        let mut steps = Vec::with_capacity(old.len().min(TIMELINE_STEPS_MAX - 1) + 1);
        if let Some(first) = old.first() {
            steps.push(first.clone());
            steps.extend(old.iter().skip(keep_from).cloned());
        }
        steps.push(step);
        debug_assert!(steps.len() <= TIMELINE_STEPS_MAX, "bounded");
        self.0 = Some(steps.into());
    }
}

impl serde::Serialize for Timeline {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.steps().serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for Timeline {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Timeline, D::Error> {
        let steps = Vec::<Step>::deserialize(d)?;
        if steps.len() > TIMELINE_STEPS_MAX {
            return Err(serde::de::Error::custom(format!(
                "a timeline of {} steps, more than {TIMELINE_STEPS_MAX}",
                steps.len()
            )));
        }
        Ok(Timeline::of(steps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(at: u64) -> Step {
        Step {
            at: Timestamp(at),
            state: TransferState::Pending,
            owner: None,
            epoch: at,
            reason: None,
            refund: None,
        }
    }

    #[test]
    fn past_the_bound_the_first_and_the_latest_are_kept() {
        let mut t = Timeline::default();
        assert!(t.is_empty());
        for at in 0..40 {
            t.push(step(at));
            assert!(t.len() <= TIMELINE_STEPS_MAX);
        }
        let ats: Vec<u64> = t.steps().iter().map(|s| s.at.0).collect();
        let mut want = vec![0];
        want.extend(25..40);
        assert_eq!(ats, want);
        let again = Timeline::of((0..40).map(step).collect());
        assert_eq!(again, t, "of() bounds as push() does");
    }

    #[test]
    fn a_copy_shares_the_steps_and_a_push_leaves_the_copy_as_it_was() {
        let mut t = Timeline::of(vec![step(1)]);
        let copy = t.clone();
        t.push(step(2));
        assert_eq!(copy.len(), 1);
        assert_eq!(t.len(), 2);
    }
}
