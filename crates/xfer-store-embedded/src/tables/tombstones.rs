//! [`TombstoneTable`]: the `tombstones` table, tombstones in runs of up to
//! [`TOMBSTONE_RUN_MAX`], all restored into their accounts at open.
//!
//! Tombstones are written once each, in the runs of the checkpoint after they were made,
//! not with their account: a tombstone stays on its account until its horizon (seconds),
//! and uniform traffic writes every account at every checkpoint, so with the account each
//! would be written again and again (`docs/benchmarks.md`). A run is deleted by the first
//! checkpoint whose cut finds none of its tombstones in memory any more (the pruner takes
//! them in horizon order: every one at or below the run's greatest horizon is gone when
//! the oldest left is later), so the tables never lose a tombstone the shard still holds.
//! A tombstone pruned from a run that is still kept comes back at the next open, past its
//! horizon: a prune drops it again, and until then it answers a late prepare exactly as it
//! did before it was pruned.

use crate::codec;
use crate::tables::batch::{CheckpointBatch, ShardCut};
use crate::tables::keyspace::{corrupted, growing, unavailable};
use crate::tables::meta::ShardMeta;
use fjall::{Database, Keyspace};
use std::sync::Mutex;
use xfer_core::Timestamp;
use xfer_store::{MemoryShard, StoreError};

/// The most tombstones in one run (about 40 KiB).
pub const TOMBSTONE_RUN_MAX: usize = 1024;

/// A tombstone run in the tables: its shard, key and greatest horizon.
#[derive(Debug)]
struct RunNote {
    shard: u16,
    key: Vec<u8>,
    latest_horizon: Timestamp,
}

/// The `tombstones` table. See the module docs.
pub(super) struct TombstoneTable {
    pub(super) keyspace: Keyspace,
    /// The tombstone runs in the tables (noted at load and as checkpoints write them).
    runs: Mutex<Vec<RunNote>>,
}

impl TombstoneTable {
    /// Opens (creating if needed) `tombstones` in `db`.
    pub(super) fn open(db: &Database) -> Result<TombstoneTable, StoreError> {
        let keyspace = db
            .keyspace("tombstones", growing)
            .map_err(unavailable("tombstones"))?;
        Ok(TombstoneTable {
            keyspace,
            runs: Mutex::new(Vec::new()),
        })
    }

    /// Puts the tombstones of `shard`'s runs that it still held at its checkpoint `meta`
    /// into their accounts in `into`, noting the runs.
    pub(super) fn load(
        &self,
        shard: u16,
        meta: &ShardMeta,
        into: &mut MemoryShard,
    ) -> Result<(), StoreError> {
        let prefix = shard.to_be_bytes();
        let mut runs = self.runs.lock().expect("runs poisoned");
        for item in self.keyspace.prefix(prefix) {
            let (k, v) = item.into_inner().map_err(unavailable("tombstones"))?;
            let run = codec::tombstone_run(&v).map_err(|e| corrupted("tombstones", &k, e))?;
            runs.push(RunNote {
                shard,
                key: k.to_vec(),
                latest_horizon: run.latest_horizon,
            });
            into.restore_tombstones(run.tombstones.into_iter().filter(|t| meta.holds(t)));
        }
        drop(runs);
        Ok(())
    }

    /// How many runs of `shard` the table holds.
    pub(super) fn run_count(&self, shard: u16) -> Result<usize, StoreError> {
        let mut n = 0;
        for item in self.keyspace.prefix(shard.to_be_bytes()) {
            item.into_inner().map_err(unavailable("tombstones"))?;
            n += 1;
        }
        Ok(n)
    }

    /// Adds `cut`'s tombstones to `batch` as runs, and deletes the runs it finds pruned.
    pub(super) fn write_runs(&self, batch: &mut CheckpointBatch, cut: &ShardCut) {
        let mut runs = self.runs.lock().expect("runs poisoned");
        runs.retain(|run| {
            let pruned = run.shard == cut.shard && cut.meta.run_pruned(run.latest_horizon);
            if pruned {
                batch.remove(&self.keyspace, run.key.clone());
            }
            !pruned
        });
        for (number, tombstones) in cut.tombstones.chunks(TOMBSTONE_RUN_MAX).enumerate() {
            let latest_horizon = tombstones
                .iter()
                .map(|(_, _, i)| i.horizon)
                .max()
                .expect("chunks are not empty");
            let key = codec::tombstone_run_key(
                cut.shard,
                cut.meta.checkpoint_lsn,
                u32::try_from(number).expect("fewer than 2^32 runs"),
            );
            let value = codec::TombstoneRunRef {
                latest_horizon,
                tombstones,
            };
            batch.insert(&self.keyspace, key.clone(), &value);
            runs.push(RunNote {
                shard: cut.shard,
                key,
                latest_horizon,
            });
        }
    }
}
