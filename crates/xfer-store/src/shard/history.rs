//! A shard's history entries held in memory ([`HistoryEntry`]): by account in an untracked
//! shard, which keeps them all; in a tracked one, as lists in sequence order, each dropped
//! whole once saved elsewhere.

use crate::shard::list_room::{push_made, room_or_like};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use xfer_core::{AccountId, FastMap, TransferId};

/// A history entry: `(sequence, account, transfer)`.
pub type HistoryEntry = (u64, AccountId, TransferId);

/// A shard's history entries held in memory.
#[derive(Debug)]
pub(super) enum History {
    /// An untracked shard keeps every entry, by account: account -> (sequence, transfer),
    /// sequence increasing. Only looked up by account, never iterated (a hash map's order
    /// is not deterministic).
    ByAccount(FastMap<AccountId, BTreeMap<u64, TransferId>>),
    /// A tracked shard holds only the entries not saved elsewhere yet, in sequence order:
    /// the lists handed out as [`Changes::history`](crate::shard::Changes::history) and
    /// not yet said saved ([`MemoryShard::history_saved`](crate::MemoryShard::history_saved)),
    /// then the entries since. Adding an entry is a push and a list saved is dropped whole,
    /// where an index by account costs more for both
    /// (`docs/benchmarks.md#history-as-lists`); a read scans them, newest first.
    Unsaved {
        taken: VecDeque<Arc<Vec<HistoryEntry>>>,
        since: Vec<HistoryEntry>,
    },
}

impl Default for History {
    fn default() -> History {
        History::ByAccount(FastMap::default())
    }
}

impl History {
    pub(super) fn add(&mut self, sequence: u64, account: &AccountId, transfer: &TransferId) {
        match self {
            History::ByAccount(by) => {
                by.entry(account.clone())
                    .or_default()
                    .insert(sequence, transfer.clone());
            }
            History::Unsaved { since, .. } => {
                push_made(since, || (sequence, account.clone(), transfer.clone()))
            }
        }
    }

    /// The entries added since the last take, to be saved elsewhere; still held until said
    /// saved. (Empty for an untracked shard, which keeps its entries.)
    pub(super) fn take(&mut self, room: Vec<HistoryEntry>) -> Arc<Vec<HistoryEntry>> {
        match self {
            History::ByAccount(_) => Arc::default(),
            History::Unsaved { taken, since } => {
                let room = room_or_like(room, since);
                let list = Arc::new(std::mem::replace(since, room));
                taken.push_back(Arc::clone(&list));
                list
            }
        }
    }

    /// At most `limit` entries of `account`, newest first, strictly older than `before`.
    pub(super) fn entries(
        &self,
        account: &AccountId,
        before: u64,
        limit: usize,
    ) -> Vec<(u64, TransferId)> {
        match self {
            History::ByAccount(by) => by.get(account).map_or_else(Vec::new, |h| {
                h.range(..before)
                    .rev()
                    .take(limit)
                    .map(|(s, t)| (*s, t.clone()))
                    .collect()
            }),
            History::Unsaved { taken, since } => since
                .iter()
                .rev()
                .chain(taken.iter().rev().flat_map(|l| l.iter().rev()))
                .filter(|(s, a, _)| a == account && *s < before)
                .take(limit)
                .map(|(s, _, t)| (*s, t.clone()))
                .collect(),
        }
    }
}
