//! [`WakeIndex`]: a shard's unfinished transfers by the time the sweeper should look at
//! them again ([`xfer_core::TransferRecord::wake_at`]), for [`crate::Store::scan_due`].
//!
//! Held as a B-tree of wake times, each with the ids that wake then in a queue, rather than
//! one B-tree of `(time, id)` pairs. Tens of a shard's transfers share each millisecond of
//! wake time (a lease from now), and a tree of pairs compares ids at every level of every
//! insert and removal, missing the caches at each (`docs/benchmarks.md#wake-index-by-time`).
//! Here a step finds its millisecond by comparing integers, and the queue of the
//! millisecond being filled is in the cache. The order the sweeper
//! sees is the same: by time, then by id, each millisecond's ids sorted when scanned
//! (rarely: only what is due).
//!
//! Each millisecond's ids are a queue kept in the order they came: transfers leave a wake
//! time in about the order they came to it (their leases' ends when decided or finished,
//! their holds' expiries when captured), so the id a step removes is near the front, where
//! the scan starts, and taking it off moves the few ids before it. Swapping the last id
//! into the gap would scramble that order, and in-order removals would then scan half the
//! millisecond on average (`docs/benchmarks.md#wake-index-queues`).

use crate::shard::list_room::push_made;
use std::collections::{BTreeMap, VecDeque};
use xfer_core::{Timestamp, TransferId};

/// See the module docs. Holds each `(time, id)` at most once; every queue held is
/// non-empty.
#[derive(Debug, Default)]
pub struct WakeIndex {
    by_time: BTreeMap<Timestamp, VecDeque<TransferId>>,
    /// Emptied queues, kept (at most [`SPARE_MAX`], of room for at most [`SPARE_ROOM_MAX`]
    /// ids each, so that a burst's are let go) for the times to come: a new millisecond's
    /// queue grown from empty is an allocation and three regrowths.
    spare: Vec<VecDeque<TransferId>>,
}

/// The most emptied queues a [`WakeIndex`] keeps.
const SPARE_MAX: usize = 64;

/// The most ids a kept queue has room for.
const SPARE_ROOM_MAX: usize = 256;

impl WakeIndex {
    /// Adds `id` at `at`. It must not be there already (a shard moves a transfer by removing
    /// it from its old time first).
    pub fn insert(&mut self, at: Timestamp, id: &TransferId) {
        let spare = &mut self.spare;
        let ids = self
            .by_time
            .entry(at)
            .or_insert_with(|| spare.pop().unwrap_or_default());
        debug_assert!(!ids.contains(id), "{id} is already due at {at:?}");
        push_made(ids, || id.clone());
    }

    /// Removes `id` from `at`, if it is there.
    pub fn remove(&mut self, at: Timestamp, id: &TransferId) {
        let Some(ids) = self.by_time.get_mut(&at) else {
            return;
        };
        if let Some(k) = ids.iter().position(|i| i == id) {
            ids.remove(k);
            if ids.is_empty() {
                let emptied = self.by_time.remove(&at).expect("found above");
                if self.spare.len() < SPARE_MAX && emptied.capacity() <= SPARE_ROOM_MAX {
                    self.spare.push(emptied);
                }
            }
        }
    }

    /// At most `limit` ids due at `now` (time at or before it), earliest first, and by id
    /// among those due at the same time.
    pub fn due(&self, now: Timestamp, limit: usize) -> Vec<&TransferId> {
        let mut due = Vec::new();
        for (_, ids) in self.by_time.range(..=now) {
            if due.len() >= limit {
                break;
            }
            let from = due.len();
            due.extend(ids);
            due[from..].sort_unstable();
        }
        due.truncate(limit);
        due
    }

    /// How many ids it holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_time.values().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use xfer_core::Rng;

    #[test]
    fn it_answers_what_a_sorted_set_of_the_pairs_answers() {
        // Random inserts of absent pairs, removals of present and absent ones, and scans at
        // random instants with random limits, against a B-tree set of (time, id): the same
        // ids in the same order, and the same size.
        // Few times and ids, and removals mostly of pairs present, so that milliseconds
        // empty and their queues are kept and taken again.
        let mut rng = Rng::new(5);
        let mut index = WakeIndex::default();
        let mut model: BTreeSet<(Timestamp, TransferId)> = BTreeSet::new();
        let (mut emptied, mut reused) = (0, 0);
        for step in 0..30_000 {
            let at = Timestamp(rng.below(40));
            let id = TransferId::new(&format!("t{}", rng.below(6))).unwrap();
            match rng.below(10) {
                0..=4 => {
                    if !model.contains(&(at, id.clone())) {
                        let spares = index.spare.len();
                        index.insert(at, &id);
                        reused += usize::from(index.spare.len() < spares);
                        model.insert((at, id));
                    }
                }
                5..=7 => {
                    // A pair present (the n-th), or the drawn one (likely absent).
                    let (at, id) = match model.len() {
                        0 => (at, id),
                        n if rng.below(4) > 0 => {
                            let k = rng.below(n as u64) as usize;
                            model.iter().nth(k).cloned().expect("k < len")
                        }
                        _ => (at, id),
                    };
                    let spares = index.spare.len();
                    index.remove(at, &id);
                    emptied += usize::from(index.spare.len() > spares);
                    model.remove(&(at, id));
                }
                _ => {
                    let now = Timestamp(rng.below(220));
                    let limit = rng.below(40) as usize;
                    let want: Vec<&TransferId> = model
                        .iter()
                        .take_while(|(w, _)| *w <= now)
                        .take(limit)
                        .map(|(_, id)| id)
                        .collect();
                    assert_eq!(index.due(now, limit), want, "step {step}");
                }
            }
            assert_eq!(index.len(), model.len(), "step {step}");
        }
        assert!(index.by_time.values().all(|ids| !ids.is_empty()));
        assert!(
            emptied > 100 && reused > 100,
            "emptied {emptied}, reused {reused}"
        );
    }
}
