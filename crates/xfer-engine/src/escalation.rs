//! [`Tally`]: when a transfer whose recovery keeps failing is escalated to a person, with
//! no I/O, so that the [`Sweeper`](crate::Sweeper) and the simulator decide alike.
//!
//! A failure no retry fixes (a protocol violation, a damaged record, an unroutable op)
//! escalates at once. A failure past the retry limit with steps perhaps applied
//! (`Indeterminate`) counts, when the caller says it does (the sweeper: when other
//! transfers were finished in the same pass, so the stores work), and escalates after
//! `after` of them with no success between; a store that could not be reached (nothing
//! applied) never counts, so an outage escalates nothing. A transfer's count lasts until
//! it is recovered, whatever passes it was not due in (a failed recovery leaves it claimed
//! for a lease, longer than a pass).

use crate::error::ExecError;
use std::collections::HashMap;
use xfer_core::mutant::{self, Mutant};
use xfer_core::{Escalation, Timestamp, TransferId, TransferRecord};

/// At most this many transfers' counts are kept; past it the oldest are forgotten (a count
/// only grows while its transfer keeps failing, so this bounds memory, not escalation).
const TRACKED_MAX: usize = 100_000;

/// Failed recoveries per transfer. See the module docs.
#[derive(Debug)]
pub struct Tally {
    after: u32,
    failures: HashMap<TransferId, u32>,
}

impl Tally {
    /// A tally that escalates after `after` counted failures (at least 1).
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
    /// `counts`: whether a failure past the retry limit counts (others were finished).
    pub fn failed(
        &mut self,
        id: &TransferId,
        error: &ExecError,
        counts: bool,
        now: Timestamp,
    ) -> Option<Escalation> {
        let hopeless = Tally::is_hopeless(error);
        let counted = hopeless || (counts && matches!(error, ExecError::Indeterminate(_)));
        let n = self.failures.get(id).copied().unwrap_or(0) + u32::from(counted);
        if hopeless || n >= self.after {
            self.failures.remove(id);
            return Some(Escalation::new(n.max(1), &error.to_string(), now));
        }
        if n > 0 {
            if self.failures.len() >= TRACKED_MAX && !self.failures.contains_key(id) {
                self.failures.clear();
            }
            self.failures.insert(id.clone(), n);
        }
        None
    }

    /// `id` was recovered (or is run by someone else): its count starts again.
    pub fn recovered(&mut self, id: &TransferId) {
        self.failures.remove(id);
    }

    /// The escalation of `id` could not be written: it is tried again at the next failure.
    pub fn unwritten(&mut self, id: &TransferId, e: &Escalation) {
        self.failures.insert(id.clone(), e.attempts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tid(s: &str) -> TransferId {
        TransferId::new(s).unwrap()
    }

    #[test]
    fn hopeless_failures_escalate_at_once_others_after_the_limit() {
        let mut t = Tally::new(3);
        let now = Timestamp(7);
        let bad = ExecError::Violation("post found a released intent".into());
        let e = t.failed(&tid("v"), &bad, false, now).expect("at once");
        assert_eq!((e.attempts, e.at), (1, now));
        assert!(e.error.contains("protocol violation"), "{e:?}");
        // Nothing applied (the store unreachable): never counted.
        let down = ExecError::Unavailable("down".into());
        for _ in 0..9 {
            assert_eq!(t.failed(&tid("d"), &down, true, now), None, "uncounted");
        }
        // Past the retry limit: counted only when others were finished.
        let stuck = ExecError::Indeterminate("gave up".into());
        for _ in 0..5 {
            assert_eq!(t.failed(&tid("d"), &stuck, false, now), None, "uncounted");
        }
        assert_eq!(t.failed(&tid("d"), &stuck, true, now), None);
        assert_eq!(t.failed(&tid("d"), &down, true, now), None);
        assert_eq!(t.failed(&tid("d"), &stuck, true, now), None);
        assert_eq!(
            t.failed(&tid("d"), &stuck, true, now).map(|e| e.attempts),
            Some(3)
        );
        // A recovery between failures starts the count again.
        t.failed(&tid("x"), &stuck, true, now);
        t.failed(&tid("x"), &stuck, true, now);
        t.recovered(&tid("x"));
        assert_eq!(t.failed(&tid("x"), &stuck, true, now), None);
        let e = Escalation::new(3, "again", now);
        t.unwritten(&tid("y"), &e);
        assert!(t.failed(&tid("y"), &stuck, true, now).is_some(), "put back");
    }
}
