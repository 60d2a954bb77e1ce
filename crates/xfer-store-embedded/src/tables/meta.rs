//! [`ShardMeta`]: where a shard's checkpoint stands, as the `meta` table keeps it.

use crate::codec::Tombstone;
use serde::{Deserialize, Serialize};
use xfer_core::{AccountId, Timestamp, TransferId};
use xfer_store::shard::prune_at;

/// Where a shard's checkpoint stands.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMeta {
    /// Every log record of this shard with an LSN below this is in the tables.
    pub checkpoint_lsn: u64,
    /// The shard's history sequence at that point.
    pub sequence: u64,
    /// The first entry of the shard's pruner index at that point, `(prune_at(horizon),
    /// account, transfer)` (`None`: the shard held no tombstone). A tombstone whose entry
    /// sorts before it had been pruned, and is not restored.
    ///
    /// Directories written before the index was bucketed (`xfer_store::shard::prune_at`) hold
    /// `(horizon, account, transfer)` here; read under the bucketed order it keeps every
    /// tombstone the old order kept (`prune_at(h) >= h`, equal only on a bucket's end),
    /// and perhaps some that were pruned, which a prune takes again.
    pub first_tombstone: Option<(Timestamp, AccountId, TransferId)>,
}

impl ShardMeta {
    /// True if the shard held, at the checkpoint, no tombstone from a run whose greatest
    /// horizon is `latest` (all of them sort before its first index entry).
    pub(super) fn run_pruned(&self, latest: Timestamp) -> bool {
        self.first_tombstone
            .as_ref()
            .is_none_or(|(first, _, _)| prune_at(latest) < *first)
    }

    /// True if the shard still held `t` at the checkpoint, as far as its index tells.
    pub(super) fn holds(&self, t: &Tombstone) -> bool {
        let (account, transfer, intent) = t;
        self.first_tombstone
            .as_ref()
            .is_some_and(|(h, a, tr)| (prune_at(intent.horizon), account, transfer) >= (*h, a, tr))
    }
}
