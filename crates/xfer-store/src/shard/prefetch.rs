//! Read-ahead: what a batch's steps ([`MemoryShard::prefetch`]), a checkpoint's evictions and
//! the pruner will read first, read and thrown away in short loops of their own, so that
//! the lookups' cache misses overlap instead of being waited for one after the other
//! (`docs/benchmarks.md#lookups-ahead`).

use crate::op::{AccountOp, Op};
use crate::shard::apply::MemoryShard;
use crate::shard::id_map::IdMap;
use std::sync::Arc;
use xfer_core::{Account, AccountId, TransferId, TransferRecord};

impl MemoryShard {
    /// Reads, and throws away, what [`MemoryShard::apply`] of each of `ops` will read
    /// first: its record and, for a step of a transfer on an account, the account's intent.
    /// It changes nothing. It is for the memory latency: a record is found by hash
    /// among hundreds of MiB, so each op's first reads miss the caches, and one after the
    /// other inside `apply` they are a chain of misses. Here the lookups of different ops
    /// do not depend on each other, so the processor has several in flight at once, and
    /// `apply` then finds the lines in cache. In stages (records, then their intents), so
    /// that a stage's loop is short enough for many of its misses to overlap.
    pub fn prefetch<O: std::borrow::Borrow<Op>>(&self, ops: &[O]) {
        let mut accounts: Vec<(&Arc<Account>, &TransferId)> = Vec::with_capacity(ops.len());
        for op in ops {
            match op.borrow() {
                Op::Account(id, op) => {
                    let transfer = match op {
                        AccountOp::Prepare { transfer, .. }
                        | AccountOp::Post { transfer, .. }
                        | AccountOp::Release { transfer, .. } => transfer,
                        _ => continue,
                    };
                    if let Some(a) = self.accounts.get(id) {
                        accounts.push((a, transfer));
                    }
                }
                Op::Transfer(id, _) => {
                    std::hint::black_box(self.transfers.get(id).map(transfer_lines));
                }
            }
        }
        prefetch_intents(&accounts);
    }

    /// Reads, and throws away, what [`MemoryShard::evict_transfer`] of each of `ids` reads
    /// first (the record's slot and its state), in a short loop of its own so that their
    /// cache misses overlap, as [`MemoryShard::prefetch`] does for a batch's steps: the records
    /// a checkpoint evicts were last touched long before, and looked up one after the
    /// other inside the eviction each miss would be waited for in turn.
    pub fn prefetch_evictions(&self, ids: &[&TransferId]) {
        for id in ids {
            std::hint::black_box(self.transfers.get(id).map(|r| r.state));
        }
    }
}

/// [`MemoryShard::prefetch`] for a chunk of the pruner's entries: their accounts, then their
/// tombstones, read and thrown away, so that the lookups' cache misses overlap.
pub(super) fn prefetch_prune(
    accounts: &IdMap<AccountId, Arc<Account>>,
    chunk: &[(AccountId, TransferId)],
) {
    let mut last: Option<(&AccountId, Option<&Arc<Account>>)> = None;
    let mut found: Vec<(&Arc<Account>, &TransferId)> = Vec::with_capacity(chunk.len());
    for (account, transfer) in chunk {
        if last.is_none_or(|(id, _)| id != account) {
            last = Some((account, accounts.get(account)));
        }
        if let Some((_, Some(a))) = last {
            found.push((a, transfer));
        }
    }
    prefetch_intents(&found);
}

/// The second and third stages of [`MemoryShard::prefetch`]: each account (a field on every
/// cache line of it, its shared count first, which the write's `Arc::make_mut` reads, else
/// that line is still a miss in `apply`: `docs/benchmarks.md#steps-read-every-line`), then
/// the intent of each transfer in it, read and thrown away.
/// (The fields read are less than a cache line apart in the layout rustc 1.95 gives,
/// `offset_of!`; another layout only prefetches less.)
fn prefetch_intents(found: &[(&Arc<Account>, &TransferId)]) {
    use std::hint::black_box;
    for (a, _) in found {
        black_box((
            Arc::strong_count(a),
            a.id.as_bytes().len(),
            a.intents.len(),
            a.balance,
            a.status,
        ));
    }
    for (a, transfer) in found {
        black_box(a.intents.get(transfer).map(|i| i.state));
    }
}

/// A field on every cache line of transfer record `r`, its shared count first (what a
/// write's `Arc::make_mut` reads), for read-ahead loops to throw away (`black_box`): the
/// shard's steps ([`MemoryShard::prefetch`]) and a checkpoint's passes over its cut. The fields
/// are less than a cache line apart in the layout rustc 1.95 gives (`offset_of!`); another
/// layout only prefetches less.
#[inline(always)]
pub fn transfer_lines(r: &Arc<TransferRecord>) -> impl Sized {
    (
        Arc::strong_count(r),
        r.owner.is_some(),
        r.reason.is_some(),
        r.deadline,
        r.state,
        // The timeline's own allocation: its counts and first step, which a step that
        // appends in place reads and writes next to.
        r.timeline.steps().first().map(|s| s.epoch),
    )
}
