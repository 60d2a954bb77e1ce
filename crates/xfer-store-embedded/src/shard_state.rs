//! [`ShardState`]: one shard's state under its lock, and how a batch brings back from the
//! `done` table the finished transfers it names ([`fetch_finished`]).

use crate::done_filter::DoneFilter;
use crate::tables::Tables;
use std::borrow::Borrow;
use xfer_core::TransferId;
use xfer_store::{MemoryShard, Op, StoreError};

/// One shard: its records in memory, and which finished transfers were brought back from
/// the tables only to be read (dropped again at the next checkpoint).
pub(crate) struct ShardState {
    pub(crate) mem: MemoryShard,
    pub(crate) fetched: Vec<TransferId>,
    /// Which ids the `done` table may hold: asked before fjall is (`done_filter.rs`).
    pub(crate) done: DoneFilter,
}

/// Brings back from the tables the finished transfers `ops` name that are not in memory.
pub(crate) fn fetch_finished<O: Borrow<Op>>(
    tables: &Tables,
    s: u16,
    shard: &mut ShardState,
    ops: &[O],
) -> Result<(), StoreError> {
    // The ids not in memory (new ones, nearly all), then the filter's lines of each read
    // ahead (`DoneFilter::prefetch`), then asked.
    let absent: Vec<&TransferId> = ops
        .iter()
        .filter_map(|op| match op.borrow() {
            Op::Transfer(id, _) if !shard.mem.has_transfer(id) => Some(id),
            _ => None,
        })
        .collect();
    if absent.is_empty() {
        return Ok(());
    }
    let hashes = shard.done.prefetch(&absent);
    for (id, h) in absent.into_iter().zip(hashes) {
        // Asked again: an id named twice in the batch is fetched once.
        if shard.done.may_hold_hash(h) && !shard.mem.has_transfer(id) {
            if let Some(r) = tables.done(s, id)? {
                shard.mem.restore_transfer(r);
                shard.fetched.push(id.clone());
            }
        }
    }
    Ok(())
}
