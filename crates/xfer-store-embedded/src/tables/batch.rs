//! A checkpoint on its way into the tables: each shard's [`ShardCut`], read ahead as it is
//! encoded ([`prefetch_records`]), and the [`CheckpointBatch`] it is encoded into.

use crate::codec::{self, Tombstone};
use crate::tables::done;
use crate::tables::meta::ShardMeta;
use fjall::{Keyspace, OwnedWriteBatch};
use serde::Serialize;
use std::sync::Arc;
use xfer_core::{Account, AccountId, TransferRecord};
use xfer_store::shard::HistoryEntry;
use xfer_store::Event;

/// One shard's part of a checkpoint: what changed since the previous one.
#[derive(Debug, Default)]
pub struct ShardCut {
    /// The shard.
    pub shard: u16,
    /// Its new checkpoint position.
    pub meta: ShardMeta,
    /// Accounts changed (`None`: dropped by the pruner), shared with the shard.
    pub accounts: Vec<(AccountId, Option<Arc<Account>>)>,
    /// Transfers changed, shared with the shard: terminal ones go to `done`, the others to
    /// `live`.
    pub transfers: Vec<Arc<TransferRecord>>,
    /// History entries added, in sequence order (as the shard numbered them), shared with
    /// the shard until they are saved.
    pub history: Arc<Vec<HistoryEntry>>,
    /// Tombstones made, in the order they were made.
    pub tombstones: Vec<Tombstone>,
    /// Change-feed events made, in position order, shared with the shard until saved.
    pub events: Arc<Vec<Event>>,
}

/// A checkpoint's writes, not yet committed, and their size.
pub struct CheckpointBatch {
    pub(super) batch: OwnedWriteBatch,
    /// Key and value bytes inserted (what fjall's journal and memtables take).
    pub(super) bytes: u64,
    /// Finished transfers for `done`, key and value: ingested, sorted, before the batch.
    pub(super) done: Vec<(Vec<u8>, fjall::Slice)>,
    /// Each shard's change-feed events: written and synced before `done`.
    pub(super) events: Vec<(u16, Arc<Vec<Event>>)>,
}

impl CheckpointBatch {
    /// Adds `key` → `value` encoded, straight from the encoding's scratch buffer into the
    /// bytes fjall keeps (a `Vec` in between would be one more allocation and copy per
    /// record).
    pub(super) fn insert<T: Serialize + ?Sized>(&mut self, ks: &Keyspace, key: Vec<u8>, value: &T) {
        let value = codec::with_encoded(value, |b| fjall::Slice::from(b));
        self.bytes += (key.len() + value.len()) as u64;
        self.batch.insert(ks, key, value);
    }

    pub(super) fn remove(&mut self, ks: &Keyspace, key: Vec<u8>) {
        self.bytes += key.len() as u64;
        self.batch.remove(ks, key);
    }

    pub(super) fn insert_done(&mut self, key: Vec<u8>, record: &TransferRecord) {
        self.done.push(done::entry(key, record));
    }
}

/// Transfers of a cut read ahead at a time by [`prefetch_records`].
pub(crate) const PREFETCH_CHUNK: usize = 64;

/// Reads, and throws away, a field on every cache line of each of `records`, of its spec,
/// of its postings and of its timeline (four allocations, nine or more lines), one
/// allocation at a time
/// in loops of their own, so that their cache misses overlap: a cut's records were last
/// touched by the shard's steps, are scattered over the heap, and each pass over them (the
/// live ones noted, encoding, dropping) would otherwise miss on every line in turn.
/// (Reading only each allocation's first line would leave the spec's id on another: a miss
/// per record.) The record's fields are [`xfer_store::shard::transfer_lines`]; the spec's and
/// postings' are less than a cache line apart in the layouts rustc 1.95 gives
/// (`offset_of!`); another layout only prefetches less.
pub(crate) fn prefetch_records(records: &[Arc<TransferRecord>]) {
    use std::hint::black_box;
    for r in records {
        black_box(xfer_store::shard::transfer_lines(r));
    }
    for r in records {
        let s = &r.spec;
        black_box((
            Arc::strong_count(s),
            s.postings.len(),
            s.metadata.len(),
            s.id.as_bytes().len(),
            s.refund_of.is_some(),
            s.timeout_ms,
        ));
    }
    for r in records {
        for p in &r.spec.postings {
            black_box((p.from.as_bytes().len(), p.to.as_bytes().len(), p.amount));
        }
    }
    // The timeline's allocation, a line per step (encoded, then freed, with the record).
    for r in records {
        for s in r.timeline.steps() {
            black_box((s.at, s.epoch));
        }
    }
}
