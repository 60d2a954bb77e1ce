//! [`Shared`]: what a store's shards and background threads all use — the log, the tables,
//! the shards' locks, the clock — and whether the store failed or is closing.

use crate::codec::{self, EntryRef};
use crate::config::EmbeddedConfig;
use crate::fs::Fs;
use crate::log::Log;
use crate::shard_lock::{ShardGuard, ShardLock};
use crate::tables::Tables;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use xfer_core::Clock;
use xfer_store::StoreError;

/// See the module docs.
pub(crate) struct Shared<F: Fs> {
    pub(crate) log: Log<F>,
    pub(crate) tables: Tables,
    pub(crate) shards: Vec<ShardLock>,
    pub(crate) clock: Arc<dyn Clock>,
    /// A sync failed: everything is refused until the store is reopened.
    failed: Mutex<Option<String>>,
    pub(crate) closing: AtomicBool,
    pub(crate) cfg: EmbeddedConfig,
}

impl<F: Fs> Shared<F> {
    pub(crate) fn new(
        log: Log<F>,
        tables: Tables,
        shards: Vec<ShardLock>,
        clock: Arc<dyn Clock>,
        cfg: EmbeddedConfig,
    ) -> Shared<F> {
        Shared {
            log,
            tables,
            shards,
            clock,
            failed: Mutex::new(None),
            closing: AtomicBool::new(false),
            cfg,
        }
    }

    pub(crate) fn shard(&self, s: u16) -> ShardGuard<'_> {
        self.shards[usize::from(s)].lock()
    }

    pub(crate) fn failure(&self) -> Option<String> {
        self.failed.lock().expect("failure flag poisoned").clone()
    }

    pub(crate) fn fail(&self, why: String) {
        self.failed
            .lock()
            .expect("failure flag poisoned")
            .get_or_insert(why);
    }

    /// Refuses calls once a sync failed or the store is closing (nothing applied).
    pub(crate) fn check_open(&self) -> Result<(), StoreError> {
        if let Some(why) = self.failure() {
            return Err(StoreError::Unavailable(format!(
                "embedded store failed ({why}); reopen it"
            )));
        }
        if self.closing.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("embedded store is closing".into()));
        }
        Ok(())
    }

    /// Appends an entry for `shard` (called with its lock held, so the log's order of a
    /// shard's entries is the order they were applied in); answers its LSN.
    pub(crate) fn append(&self, entry: &EntryRef<'_>) -> Result<u64, StoreError> {
        codec::with_encoded(entry, |bytes| self.log.append(bytes)).map_err(|e| {
            self.fail(e.to_string());
            StoreError::Indeterminate(format!("embedded log: {e}"))
        })
    }

    /// The LSN every reply given now must wait for: the last one appended.
    pub(crate) fn last_lsn(&self) -> u64 {
        self.log.next_lsn() - 1
    }
}
