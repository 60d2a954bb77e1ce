//! [`Tally`]: when a transfer whose recovery keeps failing is escalated to a person, with
//! no I/O, so that the [`Sweeper`](crate::Sweeper) and the simulator decide alike.
//!
//! A failure no retry fixes (a protocol violation, a damaged record, an unroutable op)
//! escalates at once. Others count, when the caller says they do (the sweeper: when other
//! transfers were finished in the same pass, so the stores work), and escalate after
//! `after` in a row; a transfer that did not fail in a pass starts again from zero.

use crate::error::ExecError;
use std::collections::HashMap;
use xfer_core::mutant::{self, Mutant};
use xfer_core::{Escalation, Timestamp, TransferId, TransferRecord};

/// Failed recoveries in a row, per transfer. See the module docs.
#[derive(Debug)]
pub struct Tally {
    after: u32,
    failures: HashMap<TransferId, u32>,
}

impl Tally {
    /// A tally that escalates after `after` counted failures in a row (at least 1).
    pub fn new(after: u32) -> Tally {
        Tally {
            after: after.max(1),
            failures: HashMap::new(),
        }
    }

    /// True when sweepers leave `rec` alone: it is escalated.
    pub fn skips(rec: &TransferRecord) -> bool {
        rec.escalation.is_some() && !mutant::is(Mutant::EscalationIgnored)
    }

    /// True for a failure that no retry fixes.
    pub fn is_hopeless(error: &ExecError) -> bool {
        matches!(
            error,
            ExecError::Violation(_) | ExecError::Corrupted(_) | ExecError::Unroutable(_)
        )
    }

    /// A recovery of `id` failed with `error`: the escalation to write now, if it is time
    /// (then the count is dropped; [`Tally::unwritten`] puts it back if the write fails).
    /// `counts`: whether a failure that retrying might fix counts toward the limit.
    pub fn failed(
        &mut self,
        id: &TransferId,
        error: &ExecError,
        counts: bool,
        now: Timestamp,
    ) -> Option<Escalation> {
        if mutant::is(Mutant::EscalationIgnored) {
            return None;
        }
        let hopeless = Tally::is_hopeless(error);
        let n = self.failures.get(id).copied().unwrap_or(0) + u32::from(hopeless || counts);
        if hopeless || n >= self.after {
            self.failures.remove(id);
            Some(Escalation::new(n.max(1), &error.to_string(), now))
        } else {
            self.failures.insert(id.clone(), n);
            None
        }
    }

    /// The escalation of `id` could not be written: it is tried again at the next failure.
    pub fn unwritten(&mut self, id: &TransferId, e: &Escalation) {
        self.failures.insert(id.clone(), e.attempts);
    }

    /// Ends a pass: only the transfers in `failed` keep their counts (failures in a row).
    pub fn keep_only<'a>(&mut self, failed: impl IntoIterator<Item = &'a TransferId>) {
        let keep: std::collections::HashSet<&TransferId> = failed.into_iter().collect();
        self.failures.retain(|id, _| keep.contains(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tid(s: &str) -> TransferId {
        TransferId::new(s).unwrap()
    }

    #[test]
    fn hopeless_failures_escalate_at_once_others_after_the_limit_in_a_row() {
        let mut t = Tally::new(3);
        let now = Timestamp(7);
        let bad = ExecError::Violation("post found a released intent".into());
        let e = t.failed(&tid("v"), &bad, false, now).expect("at once");
        assert_eq!((e.attempts, e.at), (1, now));
        assert!(e.error.contains("protocol violation"), "{e:?}");
        let down = ExecError::Unavailable("down".into());
        for _ in 0..5 {
            assert_eq!(t.failed(&tid("d"), &down, false, now), None, "uncounted");
        }
        assert_eq!(t.failed(&tid("d"), &down, true, now), None);
        assert_eq!(t.failed(&tid("d"), &down, true, now), None);
        t.keep_only([&tid("d")]);
        assert_eq!(
            t.failed(&tid("d"), &down, true, now).map(|e| e.attempts),
            Some(3)
        );
        // Not in a row: a pass without the failure starts the count again.
        t.failed(&tid("x"), &down, true, now);
        t.failed(&tid("x"), &down, true, now);
        t.keep_only([]);
        assert_eq!(t.failed(&tid("x"), &down, true, now), None);
        let e = Escalation::new(3, "again", now);
        t.unwritten(&tid("y"), &e);
        assert!(t.failed(&tid("y"), &down, true, now).is_some(), "put back");
    }
}
