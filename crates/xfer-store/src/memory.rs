//! The Memory store: the reference implementation of [`Store`]. [`MemoryShard`] is the
//! synchronous heart (the simulator drives it directly, with its own clock); [`MemoryStore`]
//! puts it behind the async trait with a [`Clock`].
//!
//! All maps are ordered (`BTreeMap`/`BTreeSet`) so iteration is deterministic: a simulator
//! seed must replay exactly.

use crate::op::{Op, Reply};
use crate::record::{apply_account, apply_transfer, IndexEffect};
use crate::store::{BoxFuture, HistoryPage, Store, StoreError};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use xfer_core::mutant::{self, Mutant};
use xfer_core::{Account, AccountId, Clock, IntentState, Timestamp, TransferId, TransferRecord};

/// One shard's records and indexes, in memory.
#[derive(Debug, Default)]
pub struct MemoryShard {
    accounts: BTreeMap<AccountId, Account>,
    transfers: BTreeMap<TransferId, TransferRecord>,
    /// (wake_at, id) of every non-terminal transfer: the sweeper's index.
    wake: BTreeSet<(Timestamp, TransferId)>,
    /// (horizon, account, transfer) of every tombstone: the pruner's index.
    tombstones: BTreeSet<(Timestamp, AccountId, TransferId)>,
    /// account -> (sequence, transfer), sequence increasing: the history index.
    history: BTreeMap<AccountId, BTreeMap<u64, TransferId>>,
    sequence: u64,
}

impl MemoryShard {
    /// An empty shard.
    pub fn new() -> MemoryShard {
        MemoryShard::default()
    }

    /// Applies one op with the store's clock at `now`.
    pub fn apply(&mut self, op: &Op, now: Timestamp) -> Reply {
        match op {
            Op::Account(id, op) => {
                let mut slot = self.accounts.remove(id);
                let (reply, effect) = apply_account(&mut slot, id, op, now);
                if let Some(a) = slot {
                    self.accounts.insert(id.clone(), a);
                }
                match effect {
                    Some(IndexEffect::History(t)) => {
                        self.sequence += 1;
                        self.history
                            .entry(id.clone())
                            .or_default()
                            .insert(self.sequence, t);
                    }
                    Some(IndexEffect::Tombstone(t, horizon)) => {
                        self.tombstones.insert((horizon, id.clone(), t));
                    }
                    None => {}
                }
                reply
            }
            Op::Transfer(id, op) => {
                let mut slot = self.transfers.remove(id);
                let before = slot.as_ref().and_then(|r| r.wake_at());
                let reply = apply_transfer(&mut slot, op, now);
                if let Some(r) = slot {
                    let after = r.wake_at();
                    if before != after {
                        if let Some(w) = before {
                            self.wake.remove(&(w, id.clone()));
                        }
                        if let Some(w) = after {
                            self.wake.insert((w, id.clone()));
                        }
                    }
                    self.transfers.insert(id.clone(), r);
                }
                reply
            }
        }
    }

    /// See [`Store::scan_due`].
    pub fn scan_due(&self, now: Timestamp, limit: usize) -> Vec<TransferRecord> {
        self.wake
            .iter()
            .take_while(|(w, _)| *w <= now)
            .take(limit)
            .map(|(_, id)| self.transfers[id].clone())
            .collect()
    }

    /// See [`Store::history`].
    pub fn history(&self, account: &AccountId, before: Option<u64>, limit: usize) -> HistoryPage {
        let Some(h) = self.history.get(account) else {
            return HistoryPage {
                entries: vec![],
                next: None,
            };
        };
        let entries: Vec<(u64, TransferId)> = h
            .range(..before.unwrap_or(u64::MAX))
            .rev()
            .take(limit)
            .map(|(s, t)| (*s, t.clone()))
            .collect();
        let next = match entries.last() {
            Some((s, _)) if entries.len() == limit && h.range(..*s).next().is_some() => Some(*s),
            _ => None,
        };
        HistoryPage { entries, next }
    }

    /// See [`Store::prune`]: drops tombstones with horizon `<= now`.
    pub fn prune(&mut self, now: Timestamp, limit: usize) -> usize {
        if mutant::is(Mutant::TombstonesNeverPruned) {
            return 0;
        }
        let now = if mutant::is(Mutant::PruneIgnoresHorizon) {
            Timestamp::NEVER
        } else {
            now
        };
        let due: Vec<_> = self
            .tombstones
            .iter()
            .take_while(|(h, _, _)| *h <= now)
            .take(limit)
            .cloned()
            .collect();
        let mut dropped = 0;
        for key in due {
            self.tombstones.remove(&key);
            let (_, account, transfer) = key;
            let Some(a) = self.accounts.get_mut(&account) else {
                continue;
            };
            // The index may be stale (a mutant, or a tombstone rewritten): re-check the record.
            if a.intents
                .get(&transfer)
                .is_some_and(|i| i.state != IntentState::Open && i.horizon <= now)
            {
                a.intents.remove(&transfer);
                dropped += 1;
            }
            if a.status == xfer_core::AccountStatus::Unopened && a.intents.is_empty() {
                self.accounts.remove(&account);
            }
        }
        dropped
    }

    /// Every account, in id order (including placeholders that hold tombstones).
    pub fn accounts(&self) -> impl Iterator<Item = &Account> {
        self.accounts.values()
    }

    /// Every transfer, in id order.
    pub fn transfers(&self) -> impl Iterator<Item = &TransferRecord> {
        self.transfers.values()
    }

    /// One account, if present.
    pub fn account(&self, id: &AccountId) -> Option<&Account> {
        self.accounts.get(id)
    }

    /// One transfer, if present.
    pub fn transfer(&self, id: &TransferId) -> Option<&TransferRecord> {
        self.transfers.get(id)
    }
}

/// A [`MemoryShard`] behind the async [`Store`] trait, stamped by a [`Clock`].
pub struct MemoryStore {
    shard: Mutex<MemoryShard>,
    clock: Arc<dyn Clock>,
}

impl MemoryStore {
    /// An empty store reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            shard: Mutex::new(MemoryShard::new()),
            clock,
        }
    }

    fn shard(&self) -> std::sync::MutexGuard<'_, MemoryShard> {
        // A panic while holding the lock leaves a record half-written: refuse to go on.
        self.shard.lock().expect("memory shard poisoned by a panic")
    }
}

impl Store for MemoryStore {
    fn execute(&self, ops: Vec<Op>) -> BoxFuture<'_, Result<Vec<Reply>, StoreError>> {
        let now = self.clock.now();
        let mut shard = self.shard();
        let replies = ops.iter().map(|op| shard.apply(op, now)).collect();
        Box::pin(std::future::ready(Ok(replies)))
    }

    fn scan_due(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<TransferRecord>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.shard().scan_due(now, limit))))
    }

    fn history<'a>(
        &'a self,
        account: &'a AccountId,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<HistoryPage, StoreError>> {
        Box::pin(std::future::ready(Ok(self
            .shard()
            .history(account, before, limit))))
    }

    fn prune(&self, limit: usize) -> BoxFuture<'_, Result<usize, StoreError>> {
        let now = self.clock.now();
        Box::pin(std::future::ready(Ok(self.shard().prune(now, limit))))
    }

    fn accounts<'a>(
        &'a self,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Account>, StoreError>> {
        let shard = self.shard();
        let out = match after {
            Some(a) => shard
                .accounts
                .range::<AccountId, _>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded)),
            None => shard.accounts.range::<AccountId, _>(..),
        }
        .filter(|(_, a)| a.status != xfer_core::AccountStatus::Unopened)
        .take(limit)
        .map(|(_, a)| a.clone())
        .collect();
        Box::pin(std::future::ready(Ok(out)))
    }

    fn transfers<'a>(
        &'a self,
        after: Option<&'a TransferId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<TransferRecord>, StoreError>> {
        let shard = self.shard();
        let out = match after {
            Some(a) => shard
                .transfers
                .range::<TransferId, _>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded)),
            None => shard.transfers.range::<TransferId, _>(..),
        }
        .take(limit)
        .map(|(_, r)| r.clone())
        .collect();
        Box::pin(std::future::ready(Ok(out)))
    }
}
