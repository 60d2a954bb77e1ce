//! [`SimLog`]: the one log every shard appends to in runs with a shared log, as the
//! embedded store's shards do. Every write is applied to its shard at once and appended;
//! the answer carries its LSN. A sync makes the log durable up to its end; a loss
//! ([`SimLog::lose`]) keeps the durable prefix only, and the shards become what that prefix
//! leaves (replayed from it). [`SimLog::durable_view`] is the shards as a loss now would
//! leave them: what a checker compares acknowledgements with.

use std::future::ready;
use xfer_core::Timestamp;
use xfer_store::{BoxFuture, MemoryShard, Op, SharedLog, StoreError};

/// One write to the log.
#[derive(Clone, Debug)]
pub enum Entry {
    /// `op` applied on shard `shard` at the shard's time `now`.
    Apply(usize, Op, Timestamp),
    /// A prune of at most `limit` tombstones on shard `shard` at `now`.
    Prune(usize, Timestamp, usize),
}

impl Entry {
    fn replay(&self, shards: &mut [MemoryShard]) {
        match self {
            Entry::Apply(s, op, now) => {
                shards[*s].apply(op, *now);
            }
            Entry::Prune(s, now, limit) => {
                shards[*s].prune(*now, *limit);
            }
        }
    }
}

/// See the module docs.
pub struct SimLog {
    /// The last LSN appended.
    last: u64,
    /// Durable up to this LSN.
    durable: u64,
    /// Appended after `durable`.
    tail: Vec<Entry>,
    /// Everything durable, in order: a loss rebuilds the shards from it.
    kept: Vec<Entry>,
    /// The shards as `kept` leaves them.
    view: Vec<MemoryShard>,
}

impl SimLog {
    /// An empty log over `shards` empty shards.
    pub fn new(shards: usize) -> SimLog {
        SimLog {
            last: 0,
            durable: 0,
            tail: Vec::new(),
            kept: Vec::new(),
            view: (0..shards).map(|_| MemoryShard::new()).collect(),
        }
    }

    /// Appends `entry` (already applied to the live shard); answers its LSN.
    pub fn append(&mut self, entry: Entry) -> u64 {
        self.tail.push(entry);
        self.last += 1;
        self.last
    }

    /// True if something appended is not durable yet.
    pub fn behind(&self) -> bool {
        !self.tail.is_empty()
    }

    /// Makes everything appended durable.
    pub fn sync(&mut self) {
        for e in self.tail.drain(..) {
            e.replay(&mut self.view);
            self.kept.push(e);
        }
        self.durable = self.last;
    }

    /// Loses what is not durable: answers the shards as the durable prefix leaves them.
    /// The lost LSNs are not handed out again, but they read as durable from now on: only
    /// sound because every executor that held one dies with the loss.
    pub fn lose(&mut self) -> Vec<MemoryShard> {
        self.tail.clear();
        self.durable = self.last;
        let mut shards: Vec<MemoryShard> = self.view.iter().map(|_| MemoryShard::new()).collect();
        self.kept.iter().for_each(|e| e.replay(&mut shards));
        shards
    }

    /// The shards as the durable prefix leaves them.
    pub fn durable_view(&self) -> &[MemoryShard] {
        &self.view
    }
}

/// The simulator moves the log by its own events: a wait answers at once whether the LSN
/// is durable now.
impl SharedLog for SimLog {
    fn wait_durable(&self, lsn: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(ready(if self.is_durable(lsn) {
            Ok(())
        } else {
            Err(StoreError::Unavailable(format!(
                "lsn {lsn} is not durable yet"
            )))
        }))
    }

    fn is_durable(&self, lsn: u64) -> bool {
        lsn <= self.durable
    }
}
