//! [`MemoryStore`]: a [`MemoryShard`] behind the async [`Store`] trait, the reference
//! implementation of the trait, for tests.

use crate::op::{Op, Reply};
use crate::shard::apply::MemoryShard;
use crate::store::{BoxFuture, HistoryPage, Metadata, Store, StoreError};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use xfer_core::{Account, AccountId, Asset, Clock, Timestamp, TransferId, TransferRecord};

/// A [`MemoryShard`] behind the async [`Store`] trait, stamped by a [`Clock`].
pub struct MemoryStore {
    shard: Mutex<MemoryShard>,
    clock: Arc<dyn Clock>,
    /// The asset catalog, by code.
    assets: Mutex<BTreeMap<String, Asset>>,
    /// Account metadata, by account.
    metadata: Mutex<BTreeMap<AccountId, Metadata>>,
}

impl MemoryStore {
    /// An empty store reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore::with_shard(MemoryShard::new(), clock)
    }

    /// A store holding `shard`'s records (tests that start from a given state).
    pub fn with_shard(shard: MemoryShard, clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            shard: Mutex::new(shard),
            clock,
            assets: Mutex::new(BTreeMap::new()),
            metadata: Mutex::new(BTreeMap::new()),
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
        let out = self
            .shard()
            .accounts_after(after)
            .filter(|a| a.status != xfer_core::AccountStatus::Unopened)
            .take(limit)
            .cloned()
            .collect();
        Box::pin(std::future::ready(Ok(out)))
    }

    fn transfers<'a>(
        &'a self,
        after: Option<&'a TransferId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<TransferRecord>, StoreError>> {
        let out = self
            .shard()
            .transfers_after(after, limit)
            .cloned()
            .collect();
        Box::pin(std::future::ready(Ok(out)))
    }

    fn events(
        &self,
        after: crate::event::FeedPosition,
        limit: usize,
    ) -> BoxFuture<'_, Result<crate::event::EventPage, StoreError>> {
        let shard = self.shard();
        let page = crate::event::EventPage {
            events: shard.events_after(after, limit),
            dropped_through: shard.events_dropped_through(),
        };
        Box::pin(std::future::ready(Ok(page)))
    }

    fn events_before(
        &self,
        before: crate::event::FeedPosition,
        limit: usize,
    ) -> BoxFuture<'_, Result<crate::event::EventPage, StoreError>> {
        let shard = self.shard();
        let page = crate::event::EventPage {
            events: shard.events_before(before, limit),
            dropped_through: shard.events_dropped_through(),
        };
        Box::pin(std::future::ready(Ok(page)))
    }

    fn trim_events(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(std::future::ready(Ok(self
            .shard()
            .trim_events(before, limit))))
    }

    fn declare_asset<'a>(&'a self, asset: &'a Asset) -> BoxFuture<'a, Result<Asset, StoreError>> {
        let mut assets = self
            .assets
            .lock()
            .expect("asset catalog poisoned by a panic");
        let held = assets
            .entry(asset.code.as_str().to_string())
            .or_insert_with(|| asset.clone())
            .clone();
        Box::pin(std::future::ready(Ok(held)))
    }

    fn assets(&self) -> BoxFuture<'_, Result<Vec<Asset>, StoreError>> {
        let assets = self
            .assets
            .lock()
            .expect("asset catalog poisoned by a panic");
        Box::pin(std::future::ready(Ok(assets.values().cloned().collect())))
    }

    fn set_account_metadata<'a>(
        &'a self,
        account: &'a AccountId,
        metadata: &'a Metadata,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut held = self.metadata.lock().expect("metadata poisoned by a panic");
        if metadata.is_empty() {
            held.remove(account);
        } else {
            held.insert(account.clone(), metadata.clone());
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn account_metadata<'a>(
        &'a self,
        accounts: &'a [AccountId],
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        let held = self.metadata.lock().expect("metadata poisoned by a panic");
        let out = accounts
            .iter()
            .filter_map(|a| held.get(a).map(|m| (a.clone(), m.clone())))
            .collect();
        Box::pin(std::future::ready(Ok(out)))
    }

    fn accounts_with_metadata<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        let held = self.metadata.lock().expect("metadata poisoned by a panic");
        let out = held
            .iter()
            .filter(|(a, _)| after.is_none_or(|after| *a > after))
            .filter(|(_, m)| m.get(key).map(String::as_str) == Some(value))
            .take(limit)
            .map(|(a, m)| (a.clone(), m.clone()))
            .collect();
        Box::pin(std::future::ready(Ok(out)))
    }
}
