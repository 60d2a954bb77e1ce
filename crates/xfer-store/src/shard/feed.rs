//! A shard's change feed held in memory ([`Feed`]). An untracked shard (the Memory store,
//! the simulator) numbers its events itself and keeps them all. A tracked one (the embedded
//! store) holds only the events not yet saved elsewhere: their positions are given by its
//! owner once the step that made them is logged (`MemoryShard::stamp_events`), from the
//! log entry's LSN and the step's place in it, so that a replay of the same entry gives the
//! same positions whatever it finds already saved.

use crate::event::{events_of, Before, Event, FeedPosition};
use std::collections::VecDeque;
use std::sync::Arc;

/// Events per step at most: a position leaves room for this many after each step's.
pub const EVENTS_PER_STEP: u64 = 4;

/// The most events an untracked shard keeps: past it, the older half is dropped (its
/// readers are told, `Feed::dropped_through`).
pub const KEPT_UNTRACKED: usize = 1 << 20;

/// A shard's events held in memory.
#[derive(Debug, Default)]
pub(super) struct Feed {
    /// A tracked shard's lists handed out by [`Feed::take`] and not yet said saved.
    taken: VecDeque<Arc<Vec<Event>>>,
    /// The events since (an untracked shard: every event), in position order once stamped.
    since: Vec<Event>,
    /// The last position an untracked shard handed out.
    last: u64,
    /// The last position an untracked shard dropped (retention).
    dropped: FeedPosition,
}

impl Feed {
    /// Adds the events a step made of a record, `before` it and `after` (`events_of`).
    pub(super) fn add_made(
        &mut self,
        tracked: bool,
        before: Option<Before<'_>>,
        after: &xfer_core::TransferRecord,
    ) {
        let mut nth = 0;
        events_of(before, after, |e| {
            self.add(tracked, e, nth);
            nth += 1;
        });
    }

    /// Adds an event made by a step. An untracked shard numbers it; a tracked one leaves
    /// its position as the step's own count of it (`minor`, from 0), to be stamped.
    fn add(&mut self, tracked: bool, mut event: Event, nth: u64) {
        event.position = if tracked {
            FeedPosition::seq(nth)
        } else {
            self.last += 1;
            FeedPosition::seq(self.last)
        };
        if !tracked && self.since.len() >= KEPT_UNTRACKED {
            self.dropped = self.since[KEPT_UNTRACKED / 2 - 1].position;
            self.since.drain(..KEPT_UNTRACKED / 2);
        }
        self.since.push(event);
    }

    /// Retention of an untracked shard: drops at most `limit` of its oldest events, while
    /// made before `before`; answers how many. (A tracked shard's owner trims what it saved.)
    pub(super) fn trim(
        &mut self,
        tracked: bool,
        before: xfer_core::Timestamp,
        limit: usize,
    ) -> usize {
        if tracked {
            return 0;
        }
        let n = self
            .since
            .iter()
            .take(limit)
            .take_while(|e| e.at < before)
            .count();
        if n > 0 {
            self.dropped = self.since[n - 1].position;
            self.since.drain(..n);
        }
        n
    }

    /// The last position dropped by retention (`START`: none).
    pub(super) fn dropped_through(&self) -> FeedPosition {
        self.dropped
    }

    /// How many events were added since the last take.
    pub(super) fn added(&self) -> usize {
        self.since.len()
    }

    /// Gives the events added in `made` (marks of [`Feed::added`]), made by the step
    /// logged at `step` of the log entry `lsn`, their positions.
    pub(super) fn stamp(&mut self, made: std::ops::Range<usize>, lsn: u64, step: u64) {
        for e in &mut self.since[made] {
            e.position = FeedPosition {
                major: lsn,
                minor: step * EVENTS_PER_STEP + e.position.minor,
            };
        }
    }

    /// The events added since the last take, to be saved elsewhere; still held until said
    /// saved.
    pub(super) fn take(&mut self) -> Arc<Vec<Event>> {
        let list = Arc::new(std::mem::take(&mut self.since));
        self.taken.push_back(Arc::clone(&list));
        list
    }

    /// Drops a list handed out by [`Feed::take`], now saved elsewhere.
    pub(super) fn saved(&mut self, list: &Arc<Vec<Event>>) {
        self.taken.retain(|l| !Arc::ptr_eq(l, list));
    }

    /// At most `limit` events held here after `after`, oldest first.
    pub(super) fn after(&self, after: FeedPosition, limit: usize) -> Vec<Event> {
        let mut found = Vec::new();
        for list in self.taken.iter().map(|l| &l[..]).chain([&self.since[..]]) {
            let from = list.partition_point(|e| e.position <= after);
            found.extend(list[from..].iter().take(limit - found.len()).cloned());
        }
        found
    }

    /// At most `limit` events held here before `before`, newest first.
    pub(super) fn before(&self, before: FeedPosition, limit: usize) -> Vec<Event> {
        let mut found = Vec::new();
        for list in [&self.since[..]]
            .into_iter()
            .chain(self.taken.iter().rev().map(|l| &l[..]))
        {
            let to = list.partition_point(|e| e.position < before);
            found.extend(list[..to].iter().rev().take(limit - found.len()).cloned());
        }
        found
    }
}
