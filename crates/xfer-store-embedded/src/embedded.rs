//! [`Embedded`]: several shards in one data directory, each a [`Store`](xfer_store::Store)
//! ([`EmbeddedShard`]).
//!
//! ```text
//! execute(ops) on shard s:
//!   lock s ─▶ fetch evicted finished transfers the ops name from the tables
//!          ─▶ apply every op to the in-memory shard (MemoryShard's rules, store clock `now`)
//!          ─▶ append one log entry {s, now, the writes} ─▶ unlock
//!   wait until the committer's fdatasync covers the entry (group commit) ─▶ replies
//! execute_ahead(ops): the same up to the unlock ─▶ replies with the entry's LSN at
//!   once (every shard appends to the one log, so the caller waits for that LSN only
//!   before it acknowledges anything: wait_durable; the committer syncs only for waiters,
//!   and one sync covers every entry appended before it)
//! checkpointer (every `checkpoint_bytes` of log): per shard, under its lock, note the
//!   log position and what changed, then take those records a slice per hold of the lock
//!   (as they were at the noting: transfers shared, accounts copied without their
//!   tombstones; each slice's accounts encoded at once) ─▶ one atomic
//!   synced batch into the tables ─▶ evict finished transfers from memory, a slice per
//!   hold of the lock, and the checkpoint's history list at once ─▶ delete log segments
//!   before the oldest shard position
//! open: lock the directory ─▶ load accounts and live transfers from the tables ─▶ replay
//!   each shard's log entries from its checkpoint position
//! ```

use crate::config::EmbeddedConfig;
use crate::fs::{lock_dir, Fs, RealFs};
use crate::inner::Inner;
use crate::log::SyncCount;
use crate::open::{recover, scan_done, OpenError, OpenReport};
use crate::shard::EmbeddedShard;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use xfer_core::Clock;
use xfer_store::StoreError;

/// An embedded store: a data directory of shards. See the module docs.
pub struct Embedded<F: Fs = RealFs> {
    inner: Arc<Inner<F>>,
    threads: Vec<JoinHandle<()>>,
    _lock: Option<std::fs::File>,
}

impl Embedded<RealFs> {
    /// Opens (creating if needed) the data directory `dir`: takes its lock, recovers, and
    /// starts the committer and checkpointer threads.
    pub fn open(
        dir: &Path,
        cfg: EmbeddedConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<(Embedded<RealFs>, OpenReport), OpenError> {
        let lock = lock_dir(dir).map_err(OpenError::Io)?;
        let wal = RealFs::open_unlocked(&dir.join("wal")).map_err(OpenError::Io)?;
        let (mut e, report) = Embedded::open_with(wal, &dir.join("tables"), cfg, clock)?;
        e._lock = Some(lock);
        Ok((e, report))
    }
}

impl<F: Fs> Embedded<F> {
    /// Opens a store whose log lives in `wal` and tables in `tables_dir` (tests use a
    /// simulated disk for the log). The caller is responsible for exclusive access.
    pub fn open_with(
        wal: F,
        tables_dir: &Path,
        cfg: EmbeddedConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<(Embedded<F>, OpenReport), OpenError> {
        let (inner, report) = recover(wal, tables_dir, cfg, clock)?;
        let inner = Arc::new(inner);
        // The background threads, each with its own handle on the store.
        let spawn = |name: &str, run: fn(&Inner<F>)| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || run(&inner))
                .map_err(OpenError::Io)
        };
        let mut threads = vec![
            spawn("xfer-commit", |inner| inner.committer.run(&inner.shared))?,
            spawn("xfer-done-scan", |inner| scan_done(&inner.shared))?,
        ];
        if cfg.background_checkpoints {
            threads.push(spawn("xfer-checkpoint", |inner| {
                inner.checkpointer.run(&inner.shared)
            })?);
        }
        Ok((
            Embedded {
                inner,
                threads,
                _lock: None,
            },
            report,
        ))
    }

    /// The shards, each a [`Store`](xfer_store::Store), in index order (route to them with
    /// one router).
    pub fn shards(&self) -> Vec<Arc<EmbeddedShard<F>>> {
        (0..self.inner.shared.cfg.shards)
            .map(|index| {
                Arc::new(EmbeddedShard {
                    inner: self.inner.clone(),
                    index,
                })
            })
            .collect()
    }

    /// Whether every shard's [`DoneFilter`](crate::done_filter::DoneFilter) holds what the
    /// `done` table held at open (a background scan; until then new ids are looked up in
    /// the table).
    pub fn done_filters_complete(&self) -> bool {
        (0..self.inner.shared.cfg.shards).all(|s| self.inner.shared.shard(s).done.is_complete())
    }

    /// The log's count of group commits (`xfer bench` reports them per second).
    pub fn log_syncs(&self) -> SyncCount {
        self.inner.shared.log.sync_count()
    }

    /// Writes a checkpoint now (also done in the background every `checkpoint_bytes`).
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        self.inner.checkpointer.checkpoint(&self.inner.shared)
    }

    /// Stops the background threads after a last checkpoint (so the next open replays
    /// little) and releases the directory.
    pub fn close(mut self) -> Result<(), StoreError> {
        self.stop();
        let result = if self.inner.shared.failure().is_none() {
            // Flushed too: the next open replays nothing of fjall's journal either.
            self.inner
                .checkpointer
                .checkpoint(&self.inner.shared)
                .and_then(|()| self.inner.shared.tables.flush())
        } else {
            Ok(())
        };
        drop(self);
        result
    }

    fn stop(&mut self) {
        self.inner.shared.closing.store(true, Ordering::SeqCst);
        self.inner.committer.shutdown();
        for t in self.threads.drain(..) {
            t.thread().unpark();
            // A panicked background thread already reported itself; nothing to add.
            let _ = t.join();
        }
    }
}

impl<F: Fs> Drop for Embedded<F> {
    fn drop(&mut self) {
        self.stop();
    }
}
