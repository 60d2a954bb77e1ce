//! [`HistoryTable`]: the `history` table, each account's history entries in runs, one run
//! of up to [`HISTORY_RUN_MAX`] entries per account per checkpoint, read on demand.

use crate::codec;
use crate::tables::batch::CheckpointBatch;
use crate::tables::keyspace::{corrupted, growing, unavailable};
use fjall::{Database, Keyspace};
use xfer_core::{AccountId, FastMap, TransferId};
use xfer_store::shard::HistoryEntry;
use xfer_store::StoreError;

/// The most entries in one history run: a hot account gains tens of thousands per
/// checkpoint, and a read decodes a whole run (under the shard's lock) to page it.
pub const HISTORY_RUN_MAX: usize = 256;

/// A checkpoint's history entries grouped by account: every account's entries one after
/// the other in `entries`, in sequence order, and `runs` the slices of at most
/// [`HISTORY_RUN_MAX`] of them, each with its account.
struct HistoryRuns<'a> {
    entries: Vec<(u64, &'a TransferId)>,
    runs: Vec<(&'a AccountId, std::ops::Range<usize>)>,
}

impl<'a> HistoryRuns<'a> {
    /// Each run with its account.
    fn iter(&self) -> impl Iterator<Item = (&'a AccountId, &[(u64, &'a TransferId)])> + '_ {
        self.runs
            .iter()
            .map(|(account, range)| (*account, &self.entries[range.clone()]))
    }
}

/// `entries` (in sequence order) grouped by account into runs of consecutive entries, at
/// most [`HISTORY_RUN_MAX`] each; grouping keeps the order.
///
/// By counting: each entry's account numbered by one hash lookup, then every entry placed
/// in one list at its account's next place. A list per account, grown as its entries came
/// and then copied into runs, would cost a checkpoint thousands of allocations and copies
/// (`docs/benchmarks.md`).
fn history_runs(entries: &[HistoryEntry]) -> HistoryRuns<'_> {
    let mut number: FastMap<&AccountId, u32> = FastMap::default();
    let mut accounts: Vec<(&AccountId, usize)> = Vec::new();
    let numbered: Vec<u32> = entries
        .iter()
        .map(|(_, account, _)| {
            let n = *number.entry(account).or_insert_with(|| {
                accounts.push((account, 0));
                u32::try_from(accounts.len() - 1).expect("fewer than 2^32 accounts")
            });
            accounts[n as usize].1 += 1;
            n
        })
        .collect();
    // Each account's first place, then its next place as its entries are placed.
    let mut next = Vec::with_capacity(accounts.len());
    let mut runs = Vec::with_capacity(accounts.len());
    let mut at = 0;
    for &(account, count) in &accounts {
        next.push(at);
        let end = at + count;
        while at < end {
            let run_end = end.min(at + HISTORY_RUN_MAX);
            runs.push((account, at..run_end));
            at = run_end;
        }
    }
    let Some((_, _, any)) = entries.first() else {
        return HistoryRuns {
            entries: Vec::new(),
            runs,
        };
    };
    let mut grouped = vec![(0, any); entries.len()];
    for ((seq, _, transfer), n) in entries.iter().zip(numbered) {
        let place = &mut next[n as usize];
        grouped[*place] = (*seq, transfer);
        *place += 1;
    }
    HistoryRuns {
        entries: grouped,
        runs,
    }
}

/// The `history` table. See the module docs.
pub(super) struct HistoryTable {
    pub(super) keyspace: Keyspace,
}

impl HistoryTable {
    /// Opens (creating if needed) `history` in `db`.
    pub(super) fn open(db: &Database) -> Result<HistoryTable, StoreError> {
        let keyspace = db
            .keyspace("history", growing)
            .map_err(unavailable("history"))?;
        Ok(HistoryTable { keyspace })
    }

    /// `account`'s history entries in the table, newest first, older than `before`.
    pub(super) fn read(
        &self,
        shard: u16,
        account: &AccountId,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, TransferId)>, StoreError> {
        let start = codec::history_key(shard, account, 0);
        let end = codec::history_key(shard, account, before.unwrap_or(u64::MAX));
        // Runs starting below `before`, newest first; the newest may reach past it.
        let mut out = Vec::new();
        for item in self.keyspace.range(start..end).rev() {
            if out.len() == limit {
                break;
            }
            let (k, v) = item.into_inner().map_err(unavailable("history"))?;
            let run = codec::history_run(&k, &v).map_err(|e| corrupted("history", &k, e))?;
            let older = run
                .into_iter()
                .rev()
                .filter(|(seq, _)| before.is_none_or(|b| *seq < b));
            out.extend(older.take(limit - out.len()));
        }
        Ok(out)
    }

    /// Adds shard `s`'s history entries of one checkpoint to `batch`, as runs.
    pub(super) fn add(&self, batch: &mut CheckpointBatch, s: u16, history: &[HistoryEntry]) {
        // One key per account per checkpoint, not per entry: fjall's cost is mostly per
        // key (its journal, memtable, flush and compaction), and a checkpoint adds a few
        // entries to each of thousands of accounts.
        for (account, run) in history_runs(history).iter() {
            let first = run[0].0;
            batch.insert(&self.keyspace, codec::history_key(s, account, first), &run);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_runs_are_each_accounts_entries_in_order_in_bounded_runs() {
        let a = AccountId::new("a").unwrap();
        let b = AccountId::new("b").unwrap();
        let mut entries = Vec::new();
        for seq in 1..=(2 * HISTORY_RUN_MAX as u64 + 10) {
            let account = if seq % 3 == 0 { &b } else { &a };
            let t = TransferId::new(&format!("t{seq}")).unwrap();
            entries.push((seq, account.clone(), t));
        }
        let grouped = history_runs(&entries);
        let runs: Vec<_> = grouped.iter().collect();
        for account in [&a, &b] {
            let mut theirs: Vec<_> = runs.iter().filter(|(x, _)| *x == account).collect();
            theirs.sort_by_key(|(_, run)| run[0].0);
            assert!(theirs
                .iter()
                .all(|(_, run)| (1..=HISTORY_RUN_MAX).contains(&run.len())));
            let joined: Vec<(u64, &TransferId)> =
                theirs.iter().flat_map(|(_, r)| r.iter().copied()).collect();
            let want: Vec<(u64, &TransferId)> = entries
                .iter()
                .filter(|(_, x, _)| x == account)
                .map(|(s, _, t)| (*s, t))
                .collect();
            assert_eq!(joined, want);
        }
        assert_eq!(runs.len(), 3, "a's 348 entries in two runs, b's 174 in one");
        assert_eq!(history_runs(&[]).iter().count(), 0);
    }
}
