//! The pruner's side of a shard: due tombstones dropped ([`MemoryShard::prune`]), a chunk
//! of the pruner's index at a time, looked up ahead; and the index's first entry and due
//! bucket, for a caller to record or to sort apart.

use crate::shard::apply::MemoryShard;
use crate::shard::prefetch::prefetch_prune;
use std::sync::Arc;
use xfer_core::mutant::{self, Mutant};
use xfer_core::{Account, AccountId, AccountStatus, Timestamp, TransferId};

/// How many due tombstones [`MemoryShard::prune`] looks up ahead at a time.
const PRUNE_CHUNK: usize = 128;

/// The id of the account the pruner leaves, if it is a placeholder it emptied (to drop).
fn emptied_placeholder(left: Option<(AccountId, Option<&mut Account>)>) -> Option<AccountId> {
    match left? {
        (id, Some(a)) if a.status == AccountStatus::Unopened && a.intents.is_empty() => Some(id),
        _ => None,
    }
}

impl MemoryShard {
    /// The first entry of the pruner's index, `(prune_at(horizon), account, transfer)`, if
    /// the shard holds any tombstone: the pruner takes entries from the front, so a
    /// tombstone saved elsewhere whose entry sorts before this one is not held any more.
    pub fn first_tombstone(&self) -> Option<(Timestamp, AccountId, TransferId)> {
        self.tombstones.first()
    }

    /// The entries of the pruner's first bucket, if it is due at `now`, unsorted and holds
    /// at least `at_least`: for a caller to sort ([`sort_bucket`](crate::shard::sort_bucket))
    /// without holding the shard, then hand back with [`MemoryShard::sorted_tombstones`].
    /// Until then [`MemoryShard::prune`] takes nothing (see
    /// [`PruneIndex::take_to_sort`](crate::shard::PruneIndex::take_to_sort)).
    pub fn tombstones_to_sort(
        &mut self,
        now: Timestamp,
        at_least: usize,
    ) -> Option<(Timestamp, Vec<(AccountId, TransferId)>)> {
        self.tombstones.take_to_sort(now, at_least)
    }

    /// Hands back, sorted, the entries [`MemoryShard::tombstones_to_sort`] answered.
    pub fn sorted_tombstones(&mut self, at: Timestamp, sorted: Vec<(AccountId, TransferId)>) {
        self.tombstones.put_sorted(at, sorted);
    }

    /// How many entries the pruner's first bucket holds, if it is due at `now` and none of
    /// its entries are out being sorted (else 0): a [`MemoryShard::prune`] of at most
    /// that many takes from that bucket alone.
    pub fn first_due_tombstones(&self, now: Timestamp) -> usize {
        self.tombstones.first_due_len(now)
    }

    /// See [`Store::prune`](crate::Store::prune): drops tombstones with horizon `<= now`.
    pub fn prune(&mut self, now: Timestamp, limit: usize) -> usize {
        self.prune_counted(now, limit).0
    }

    /// [`MemoryShard::prune`], answering how many tombstones it dropped and how many
    /// entries of the pruner's index it took (at most `limit`): a `prune(now, taken)` on
    /// the same shard takes the same entries, which is what a log of prunes must replay.
    pub fn prune_counted(&mut self, now: Timestamp, limit: usize) -> (usize, usize) {
        if mutant::is(Mutant::TombstonesNeverPruned) {
            return (0, 0);
        }
        let now = if mutant::is(Mutant::PruneIgnoresHorizon) {
            Timestamp::NEVER
        } else {
            now
        };
        let mut dropped = 0;
        let mut emptied = Vec::new();
        let mut left = limit;
        {
            let (accounts, index) = (&mut self.accounts, &mut self.tombstones);
            // Due entries are the first ones: take them off the front (no key comparisons,
            // where looking each one up again to remove it would compare ids all the way down),
            // a chunk at a time, whose tombstones are looked up once ahead (`prefetch_prune`).
            let mut chunk = Vec::with_capacity(limit.min(PRUNE_CHUNK));
            while left > 0 {
                chunk.extend(std::iter::from_fn(|| index.pop_due(now)).take(left.min(PRUNE_CHUNK)));
                if chunk.is_empty() {
                    break;
                }
                left -= chunk.len();
                prefetch_prune(accounts, &chunk);
                // The account the last entry named, taken once for all its entries in a row
                // (a bucket's entries are in account order: `prune_index.rs`).
                // (`None` for an account the shard no longer holds: its entries are stale.)
                let mut at: Option<(AccountId, Option<&mut Account>)> = None;
                for (account, transfer) in chunk.drain(..) {
                    if at.as_ref().is_none_or(|(id, _)| *id != account) {
                        emptied.extend(emptied_placeholder(at.take()));
                        // Not a change of the account's written form (tombstones are listed
                        // apart, see `Changes::tombstones`), unless a placeholder left empty
                        // and dropped.
                        let a = accounts.get_mut_unmarked(&account).map(Arc::make_mut);
                        at = Some((account, a));
                    }
                    let Some((_, Some(a))) = &mut at else {
                        continue;
                    };
                    // The index may be stale (a mutant, or a tombstone rewritten): re-check
                    // the record.
                    if a.intents.drop_due_tombstone(&transfer, now) {
                        dropped += 1;
                    }
                }
                emptied.extend(emptied_placeholder(at));
            }
        }
        for id in &emptied {
            self.drop_account(id);
        }
        (dropped, limit - left)
    }

    /// Drops an account from memory, as a change.
    fn drop_account(&mut self, id: &AccountId) {
        self.accounts.remove(id);
        if let Some(c) = &mut self.changes {
            // It may be listed already: `take_changes` removes the repeat.
            c.accounts.push(id.clone());
            c.dropped_account = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{AccountOp, Op};
    use crate::shard::testing::create;
    use xfer_core::AssetCode;

    /// Prepares transfer `transfer` on account `a` (a debit of 1 with `horizon`), and posts
    /// it unless `open`: a tombstone, or an open intent.
    fn intent(shard: &mut MemoryShard, a: &AccountId, transfer: &str, horizon: u64, open: bool) {
        let usd = || AssetCode::new("USD", "asset").unwrap();
        let transfer = TransferId::new(transfer).unwrap();
        let mut step = |op: AccountOp| shard.apply(&Op::Account(a.clone(), op), Timestamp(2));
        step(AccountOp::Prepare {
            transfer: transfer.clone(),
            asset: usd(),
            debit: 1,
            credit: 0,
            deadline: Timestamp(5),
            horizon: Timestamp(horizon),
        });
        if !open {
            step(AccountOp::Post {
                transfer,
                asset: usd(),
            });
        }
    }

    /// The pruner drops exactly an account's due tombstones, few or most of its intents:
    /// open intents and tombstones of a later bucket stay (even past their horizon), and
    /// the count is right; a call cut by its limit leaves the rest to the next.
    #[test]
    fn prune_drops_exactly_the_due_tombstones() {
        // `due` tombstones with horizon 10, `later` with horizon 1,030 (past at 1,100 but
        // in the next bucket, due at 2,048), and one open intent.
        let run = |due: usize, later: usize| {
            let mut shard = MemoryShard::tracking();
            let a = create(&mut shard, "a");
            for i in 0..due + later {
                let horizon = if i < due { 10 } else { 1_030 };
                intent(&mut shard, &a, &format!("t{i}"), horizon, false);
            }
            intent(&mut shard, &a, "open", 10, true);
            let dropped = shard.prune(Timestamp(1_100), 10_000);
            let left = shard.account(&a).unwrap().intents.len();
            (
                dropped,
                left,
                shard.prune(Timestamp(1_100), 10_000),
                shard.prune(Timestamp(2_048), 10_000),
            )
        };
        // One due among 41, 40 due among 41.
        assert_eq!(run(1, 40), (1, 41, 0, 40));
        assert_eq!(run(40, 1), (40, 2, 0, 1));
        // Runs longer than the pruner's chunk of look-ahead, one account across chunks.
        let long = 2 * PRUNE_CHUNK + 3;
        assert_eq!(run(long, 5), (long, 6, 0, 5));
        assert_eq!(run(5, long), (5, long + 1, 0, long));
        // A placeholder's marks across chunks: emptied, the placeholder is dropped.
        let mut shard = MemoryShard::tracking();
        let p = AccountId::new("p").unwrap();
        for i in 0..PRUNE_CHUNK + 7 {
            let release = AccountOp::Release {
                transfer: TransferId::new(&format!("t{i}")).unwrap(),
                asset: AssetCode::new("USD", "asset").unwrap(),
                horizon: Timestamp(10),
            };
            shard.apply(&Op::Account(p.clone(), release), Timestamp(2));
        }
        assert_eq!(shard.account(&p).unwrap().intents.len(), PRUNE_CHUNK + 7);
        assert_eq!(shard.prune(Timestamp(1_100), 10_000), PRUNE_CHUNK + 7);
        assert!(
            shard.account(&p).is_none(),
            "the emptied placeholder is gone"
        );
        // An account's due entries taken over three calls (the limit cuts its run).
        let mut shard = MemoryShard::tracking();
        let a = create(&mut shard, "a");
        for i in 0..10 {
            intent(&mut shard, &a, &format!("t{i}"), 10, false);
        }
        assert_eq!(shard.prune(Timestamp(1_100), 4), 4);
        assert_eq!(shard.prune(Timestamp(1_100), 4), 4);
        assert_eq!(shard.prune(Timestamp(1_100), 4), 2);
        assert!(shard.account(&a).unwrap().intents.is_empty());
        assert!(
            shard.first_due_tombstones(Timestamp(u64::MAX - 1)) == 0,
            "the index is empty"
        );
    }
}
