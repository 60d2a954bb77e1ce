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
//! a timeline is one pointer (none while empty) to its steps, so a copy of a record copies
//! no steps. The steps sit in one allocation with room for three in place (accepted,
//! decided, finished: most transfers' whole timeline), and a step is appended in place
//! where no copy of the record shares them, as the shard's record mostly is: most
//! transfers allocate their timeline once or twice, where a list made anew per step cost a
//! tenth of the embedded store's throughput (`docs/benchmarks.md#timeline-in-place`).

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
    /// Why it is canceled, on a step to `canceling` or `canceled`. Boxed, as the refund: a
    /// step is moved and copied whole, and most have neither (`docs/benchmarks.md#timeline-in-place`).
    pub reason: Option<Box<CancelReason>>,
    /// The refund the write linked, on a refund link's step.
    pub refund: Option<Box<TransferId>>,
}

/// Steps held in one allocation, three of them in place.
type Steps = smallvec::SmallVec<[Step; 3]>;

/// The steps of one transfer, oldest first, at most [`TIMELINE_STEPS_MAX`]. Encoded as a
/// list of steps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline(Option<Arc<Steps>>);

impl Timeline {
    /// A timeline of `steps`, oldest first: the first and the latest kept past the bound.
    pub fn of(mut steps: Vec<Step>) -> Timeline {
        if steps.is_empty() {
            return Timeline(None);
        }
        if steps.len() > TIMELINE_STEPS_MAX {
            steps.drain(1..steps.len() + 1 - TIMELINE_STEPS_MAX);
        }
        Timeline(Some(Arc::new(Steps::from_vec(steps))))
    }

    /// A timeline of one step.
    pub fn one(step: Step) -> Timeline {
        let mut steps = Steps::new();
        steps.push(step);
        Timeline(Some(Arc::new(steps)))
    }

    /// The steps, oldest first.
    pub fn steps(&self) -> &[Step] {
        self.0.as_ref().map_or(&[], |s| s.as_slice())
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

    /// Appends `step`, dropping the oldest step after the first past the bound: in place
    /// where nothing else shares the steps, else into a copy (copies of the record that
    /// shared them keep them as they were).
    pub fn push(&mut self, step: Step) {
        let steps = Arc::make_mut(self.0.get_or_insert_with(Default::default));
        if steps.len() >= TIMELINE_STEPS_MAX {
            steps.remove(1);
        }
        steps.push(step);
        debug_assert!(steps.len() <= TIMELINE_STEPS_MAX, "bounded");
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
        let mut t = Timeline::one(step(1));
        let copy = t.clone();
        t.push(step(2));
        assert_eq!(copy.len(), 1);
        assert_eq!(t.len(), 2);
        // Unshared: appended in place, in the same allocation while there is room.
        let at = |t: &Timeline| t.0.as_ref().map(Arc::as_ptr);
        drop(copy);
        let before = at(&t);
        t.push(step(3));
        assert_eq!(at(&t), before, "in place");
        assert_eq!(t.len(), 3);
    }
}
