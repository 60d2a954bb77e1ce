//! [`Embedded`]: several shards in one data directory, each a [`Store`].
//!
//! ```text
//! execute(ops) on shard s:
//!   lock s ─▶ fetch evicted finished transfers the ops name from the tables
//!          ─▶ apply every op to the in-memory shard (MemoryShard's rules, store clock `now`)
//!          ─▶ append one log entry {s, now, the writes} ─▶ unlock
//!   wait until the committer's fdatasync covers the entry (group commit) ─▶ replies
//! execute_pending(ops): the same up to the unlock ─▶ replies with the entry's point at
//!   once (every shard appends to the one log, so the caller waits for that point only
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
//!
//! `execute` and the reads answer only after the log record holding the ops — and every
//! record before it, so everything the replies could have seen — is durable (a read may show
//! another caller's write that is applied in memory but not yet durable). `execute_pending`
//! answers at once with the last LSN appended so far (its own record's or later: whatever
//! the replies could have seen): its caller waits for it (`wait_durable`) before
//! acknowledging anything that rests on the replies.

use crate::codec::{self, Entry, EntryRef};
use crate::done_filter::DoneFilter;
use crate::fs::{lock_dir, Fs, RealFs};
use crate::log::{Log, LogConfig, LogError, SyncCount};
use crate::tables::{warm_records, ShardCut, ShardMeta, Tables, WARM_CHUNK};
use futures_channel::oneshot;
use std::borrow::Borrow;
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::Poll;
use std::thread::JoinHandle;
use std::time::Duration;
use xfer_core::{Account, AccountId, AccountStatus, Clock, Timestamp, TransferId, TransferRecord};
use xfer_store::{
    BoxFuture, Cut, FastSet, HistoryPage, LogDomain, MemoryShard, Op, Reply, Room, RoomSizes,
    Store, StoreError, TransferOp,
};

/// Settings of an embedded store.
#[derive(Clone, Copy, Debug)]
pub struct EmbeddedConfig {
    /// How many shards (fixed when the directory is created).
    pub shards: u16,
    /// Log segment size.
    pub log: LogConfig,
    /// Checkpoint after this many bytes of log: bounds replay at start-up.
    pub checkpoint_bytes: u64,
    /// Run the checkpointer thread (tests turn it off and call [`Embedded::checkpoint`]).
    pub background_checkpoints: bool,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            shards: 4,
            // Small segments: a checkpoint frees whole segments, so the log stays near
            // `checkpoint_bytes` and recovery reads little more than it replays.
            log: LogConfig {
                segment_bytes: 8 << 20,
            },
            // Every 32 MiB of log rather than 8: a checkpoint writes each account changed
            // since the last one once, and each account's history entries as one run, so
            // fewer checkpoints write fewer keys per transfer, and fjall flushes and
            // compacts fewer. `xfer bench --duration 120s`, two alternated pairs: 133,172 /
            // 136,430 -> 140,025 / 146,743 transfers/s, fjall's worker 2.2 -> 1.9 us per
            // transfer; replay at open reads up to 32 MiB more (`docs/benchmarks.md`).
            checkpoint_bytes: 32 << 20,
            background_checkpoints: true,
        }
    }
}

/// Why a data directory could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The directory is locked by another process, or could not be created or read.
    Io(std::io::Error),
    /// The log failed or is corrupted (the message names the file and offset).
    Log(LogError),
    /// The tables failed or are corrupted.
    Store(StoreError),
    /// The directory does not fit the configuration (e.g. another shard count).
    Config(String),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Io(e) => write!(f, "{e}"),
            OpenError::Log(e) => write!(f, "{e}"),
            OpenError::Store(e) => write!(f, "{e}"),
            OpenError::Config(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for OpenError {}

/// Group commit: callers wait for their LSN; one thread syncs for all of them.
#[derive(Default)]
struct CommitState {
    waiters: Vec<(u64, oneshot::Sender<Result<(), String>>)>,
    /// The committer has stopped: wait inline instead.
    stopped: bool,
    /// The committer sleeps on the condvar (only then is a wake-up worth a syscall).
    idle: bool,
    shutdown: bool,
}

/// Records evicted per hold of a shard's lock after a checkpoint.
const EVICT_SLICE: usize = 256;

/// Tombstones pruned per hold of a shard's lock (and per log entry).
const PRUNE_SLICE: usize = 128;

/// A due bucket of the pruner's index with at least this many entries is sorted without
/// the shard's lock (`EmbeddedShard::prune`); a smaller one sorts in well under a
/// millisecond when first taken from.
const SORT_APART_MIN: usize = 2_048;

/// The most records a checkpoint's cut hands over per hold of a shard's lock.
const CUT_SLICE: usize = 512;

/// Ids the scan at open adds to a shard's [`DoneFilter`] per hold of the shard's lock.
const DONE_SCAN_CHUNK: usize = 4096;

/// The `k`-th slice of `CUT_SLICE` ids (empty past the end).
fn nth_slice<T>(ids: &[T], k: usize) -> &[T] {
    let from = (k * CUT_SLICE).min(ids.len());
    &ids[from..(from + CUT_SLICE).min(ids.len())]
}

/// One shard: its records in memory, and which finished transfers were brought back from
/// the tables only to be read (dropped again at the next checkpoint).
struct ShardState {
    mem: MemoryShard,
    fetched: Vec<TransferId>,
    /// Which ids the `done` table may hold: asked before fjall is (`done_filter.rs`).
    done: DoneFilter,
}

/// A shard's lock. parking_lot's, whose fair unlock hands the lock straight to a waiting
/// call: the checkpointer takes each shard's lock once per slice, and with std's lock it
/// retook it before the call it had woken could run, slice after slice, so that call waited
/// for the whole loop (tens of milliseconds: the latency's p999, `docs/benchmarks.md`).
/// std's poisoning is kept by hand: a panic while applying leaves a record half-written,
/// so every later call refuses to go on.
struct ShardLock {
    state: parking_lot::Mutex<ShardState>,
    poisoned: AtomicBool,
}

/// A batch applied: its replies and the log point they rest on (not yet durable).
type Applied = Result<(Vec<Reply>, u64), StoreError>;

/// A held [`ShardLock`].
struct ShardGuard<'a> {
    // Declared first, so dropped first: the shard is marked before it is unlocked.
    _poison: PoisonOnPanic<'a>,
    guard: parking_lot::MutexGuard<'a, ShardState>,
}

/// Marks its shard poisoned if dropped while the thread panics.
struct PoisonOnPanic<'a>(&'a AtomicBool);

impl Drop for PoisonOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

impl ShardLock {
    fn new(state: ShardState) -> ShardLock {
        ShardLock {
            state: parking_lot::Mutex::new(state),
            poisoned: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> ShardGuard<'_> {
        self.held(self.state.lock())
    }

    /// The lock if no one holds it, without waiting.
    fn try_lock(&self) -> Option<ShardGuard<'_>> {
        self.state.try_lock().map(|guard| self.held(guard))
    }

    fn held<'a>(&'a self, guard: parking_lot::MutexGuard<'a, ShardState>) -> ShardGuard<'a> {
        // A panic while applying leaves a record half-written: refuse to go on.
        assert!(
            !self.poisoned.load(Ordering::SeqCst),
            "shard poisoned by a panic"
        );
        ShardGuard {
            _poison: PoisonOnPanic(&self.poisoned),
            guard,
        }
    }
}

impl ShardGuard<'_> {
    /// Unlocks, handing the lock to the call waiting for it, if any (see [`ShardLock`]).
    fn unlock_fair(self) {
        parking_lot::MutexGuard::unlock_fair(self.guard);
    }
}

impl std::ops::Deref for ShardGuard<'_> {
    type Target = ShardState;
    fn deref(&self) -> &ShardState {
        &self.guard
    }
}

impl std::ops::DerefMut for ShardGuard<'_> {
    fn deref_mut(&mut self) -> &mut ShardState {
        &mut self.guard
    }
}

/// How many times [`EmbeddedShard::execute_pending`] puts a busy shard off before it waits
/// for its lock.
const BUSY_DEFERRALS: u32 = 1;

struct Inner<F: Fs> {
    log: Log<F>,
    tables: Tables,
    shards: Vec<ShardLock>,
    clock: Arc<dyn Clock>,
    commit: Mutex<CommitState>,
    commit_wake: Condvar,
    /// A sync failed: everything is refused until the store is reopened.
    failed: Mutex<Option<String>>,
    /// Held by the one checkpoint at a time, with the transfers each shard's `live` table
    /// holds: a finished transfer is deleted from it only if it is there (most finish
    /// between two checkpoints and were never written live).
    checkpointing: Mutex<Vec<FastSet<TransferId>>>,
    /// Each shard's room for the changes after its next cut ([`Room`]): as much as the
    /// last cut took, and some; and the lists of the last cut saved, kept for their room.
    /// Only the checkpointer reads and sets it.
    rooms: Mutex<Vec<(RoomSizes, Room)>>,
    /// Log bytes replayed at open: they count towards the next checkpoint, so that a
    /// process killed again and again before writing `checkpoint_bytes` of its own still
    /// checkpoints, and replay stays bounded.
    backlog: u64,
    /// Log bytes (backlog plus appended) covered by the last checkpoint.
    checkpointed_at: Mutex<u64>,
    closing: AtomicBool,
    cfg: EmbeddedConfig,
}

/// An embedded store: a data directory of shards. See the module docs.
pub struct Embedded<F: Fs = RealFs> {
    inner: Arc<Inner<F>>,
    threads: Vec<JoinHandle<()>>,
    _lock: Option<std::fs::File>,
}

/// One shard of an [`Embedded`] store.
pub struct EmbeddedShard<F: Fs = RealFs> {
    inner: Arc<Inner<F>>,
    index: u16,
}

/// What opening found and did, for the operator.
#[derive(Clone, Debug, Default)]
pub struct OpenReport {
    /// Accounts loaded.
    pub accounts: usize,
    /// Unfinished transfers loaded from the `live` table.
    pub live: usize,
    /// Log records replayed (records before a shard's checkpoint are skipped).
    pub replayed: usize,
    /// A torn tail cut from the log: file, offset, bytes.
    pub torn_tail: Option<(String, u64, u64)>,
    /// Milliseconds (store clock) opening the tables, loading the shards, reading and
    /// replaying the log.
    pub tables_ms: u64,
    /// See `tables_ms`.
    pub load_ms: u64,
    /// See `tables_ms`.
    pub replay_ms: u64,
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
        if cfg.shards == 0 || cfg.shards > 1024 {
            return Err(OpenError::Config(format!(
                "shards must be 1..=1024, got {}",
                cfg.shards
            )));
        }
        let t0 = clock.now();
        let tables = Tables::open(tables_dir).map_err(OpenError::Store)?;
        let t1 = clock.now();
        if let Some(n) = tables.shard_count().map_err(OpenError::Store)? {
            if n != cfg.shards {
                return Err(OpenError::Config(format!(
                    "the data directory holds {n} shards, the configuration asks for {}; \
                     records are placed by shard, so the count cannot change",
                    cfg.shards
                )));
            }
        }
        let mut report = OpenReport::default();
        let metas = (0..cfg.shards)
            .map(|s| tables.shard_meta(s))
            .collect::<Result<Vec<ShardMeta>, _>>()
            .map_err(OpenError::Store)?;
        let done_expected = tables.done_len_estimate() / usize::from(cfg.shards);
        // Shards are independent: load them on parallel threads.
        let shards = std::thread::scope(|scope| {
            let loads: Vec<_> = metas
                .iter()
                .enumerate()
                .map(|(s, meta)| {
                    let tables = &tables;
                    scope.spawn(move || {
                        let mut mem = MemoryShard::tracking();
                        let in_live = tables.load(s as u16, meta, &mut mem)?;
                        let shard = ShardState {
                            mem,
                            fetched: Vec::new(),
                            done: DoneFilter::new(done_expected),
                        };
                        Ok((shard, in_live))
                    })
                })
                .collect();
            loads
                .into_iter()
                .map(|h| h.join().expect("shard loader panicked"))
                .collect::<Result<Vec<(ShardState, FastSet<TransferId>)>, StoreError>>()
        })
        .map_err(OpenError::Store)?;
        let (mut shards, in_live): (Vec<ShardState>, Vec<FastSet<TransferId>>) =
            shards.into_iter().unzip();
        report.accounts = shards.iter().map(|s| s.mem.accounts().count()).sum();
        report.live = in_live.iter().map(|s| s.len()).sum();
        let t2 = clock.now();
        let (log, recovered) = Log::open(wal, cfg.log).map_err(OpenError::Log)?;
        report.torn_tail = recovered.torn_tail.clone();
        let oldest = metas.iter().map(|m| m.checkpoint_lsn).min().unwrap_or(0);
        let newest = metas.iter().map(|m| m.checkpoint_lsn).max().unwrap_or(0);
        if recovered.first_lsn > oldest.max(1) || log.next_lsn() < newest {
            return Err(OpenError::Log(LogError::Corrupted {
                file: "wal".into(),
                offset: 0,
                why: format!(
                    "the log holds LSNs {}..{} but the checkpoints need {oldest}..{newest}: \
                     log segments are missing",
                    recovered.first_lsn,
                    log.next_lsn()
                ),
            }));
        }
        // Records below every shard's checkpoint are not even decoded.
        let first_needed = recovered.records.partition_point(|(lsn, _)| *lsn < oldest);
        let per_shard = decode_tail(&recovered.records[first_needed..], &metas)?;
        let backlog = per_shard.iter().flatten().map(|(_, bytes, _)| *bytes).sum();
        report.replayed = per_shard.iter().map(Vec::len).sum();
        // Replay each shard's entries in log order, shards on parallel threads.
        std::thread::scope(|scope| {
            let replays: Vec<_> = shards
                .iter_mut()
                .zip(per_shard)
                .enumerate()
                .map(|(s, (shard, entries))| {
                    let tables = &tables;
                    scope.spawn(move || replay(tables, s as u16, shard, entries))
                })
                .collect();
            replays
                .into_iter()
                .try_for_each(|h| h.join().expect("replay panicked"))
        })
        .map_err(OpenError::Store)?;
        drop(recovered);
        let t3 = clock.now();
        report.tables_ms = t1.0.saturating_sub(t0.0);
        report.load_ms = t2.0.saturating_sub(t1.0);
        report.replay_ms = t3.0.saturating_sub(t2.0);
        let inner = Arc::new(Inner {
            log,
            tables,
            shards: shards.into_iter().map(ShardLock::new).collect(),
            clock,
            commit: Mutex::new(CommitState::default()),
            commit_wake: Condvar::new(),
            failed: Mutex::new(None),
            checkpointing: Mutex::new(in_live),
            rooms: Mutex::new(
                (0..cfg.shards)
                    .map(|_| (RoomSizes::default(), Room::default()))
                    .collect(),
            ),
            backlog,
            checkpointed_at: Mutex::new(0),
            closing: AtomicBool::new(false),
            cfg,
        });
        // The background threads, each with its own handle on the store.
        let spawn = |name: &str, run: fn(&Inner<F>)| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || run(&inner))
                .map_err(OpenError::Io)
        };
        let mut threads = vec![
            spawn("xfer-commit", Inner::run_committer)?,
            spawn("xfer-done-scan", Inner::run_done_scan)?,
        ];
        if cfg.background_checkpoints {
            threads.push(spawn("xfer-checkpoint", Inner::run_checkpointer)?);
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

    /// The shards, each a [`Store`], in index order (route to them with one router).
    pub fn shards(&self) -> Vec<Arc<EmbeddedShard<F>>> {
        (0..self.inner.cfg.shards)
            .map(|index| {
                Arc::new(EmbeddedShard {
                    inner: self.inner.clone(),
                    index,
                })
            })
            .collect()
    }

    /// Whether every shard's [`DoneFilter`] holds what the `done` table held at open (a
    /// background scan; until then new ids are looked up in the table).
    pub fn done_filters_complete(&self) -> bool {
        (0..self.inner.cfg.shards).all(|s| self.inner.shard(s).done.is_complete())
    }

    /// The log's count of group commits (`xfer bench` reports them per second).
    pub fn log_syncs(&self) -> SyncCount {
        self.inner.log.sync_count()
    }

    /// Writes a checkpoint now (also done in the background every `checkpoint_bytes`).
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        self.inner.checkpoint()
    }

    /// Stops the background threads after a last checkpoint (so the next open replays
    /// little) and releases the directory.
    pub fn close(mut self) -> Result<(), StoreError> {
        self.stop();
        let result = if self.inner.failure().is_none() {
            // Flushed too: the next open replays nothing of fjall's journal either.
            self.inner
                .checkpoint()
                .and_then(|()| self.inner.tables.flush())
        } else {
            Ok(())
        };
        drop(self);
        result
    }

    fn stop(&mut self) {
        self.inner.closing.store(true, Ordering::SeqCst);
        self.inner.lock_commit().shutdown = true;
        self.inner.commit_wake.notify_all();
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

/// Decodes the log's records on parallel threads and sorts them by shard, keeping log order
/// and skipping each shard's records below its checkpoint: `(lsn, payload bytes, entry)`.
#[allow(clippy::type_complexity)]
fn decode_tail(
    records: &[(u64, Vec<u8>)],
    metas: &[ShardMeta],
) -> Result<Vec<Vec<(u64, u64, Entry)>>, OpenError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = records.len().div_ceil(threads).max(1);
    let decoded = std::thread::scope(|scope| {
        let parts: Vec<_> = records
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|(lsn, payload)| {
                            codec::decode::<Entry>(payload)
                                .map(|e| (*lsn, payload.len() as u64, e))
                                .map_err(|why| {
                                    OpenError::Log(LogError::Corrupted {
                                        file: "wal".into(),
                                        offset: 0,
                                        why: format!("record at LSN {lsn} does not decode: {why}"),
                                    })
                                })
                        })
                        .collect::<Result<Vec<_>, OpenError>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .map(|h| h.join().expect("decoder panicked"))
            .collect::<Result<Vec<_>, OpenError>>()
    })?;
    let mut per_shard: Vec<Vec<(u64, u64, Entry)>> = metas.iter().map(|_| Vec::new()).collect();
    for (lsn, bytes, entry) in decoded.into_iter().flatten() {
        let s = usize::from(entry.shard());
        let Some(meta) = metas.get(s) else {
            return Err(OpenError::Config(format!(
                "log record at LSN {lsn} is for shard {s}, but there are {}",
                metas.len()
            )));
        };
        if lsn >= meta.checkpoint_lsn {
            per_shard[s].push((lsn, bytes, entry));
        }
    }
    Ok(per_shard)
}

/// Applies one shard's log entries, in order, as the original calls did.
fn replay(
    tables: &Tables,
    s: u16,
    shard: &mut ShardState,
    entries: Vec<(u64, u64, Entry)>,
) -> Result<(), StoreError> {
    for (_, _, entry) in entries {
        match entry {
            Entry::Ops { now, ops, .. } => {
                fetch_finished(tables, s, shard, &ops)?;
                for op in &ops {
                    shard.mem.apply(op, now);
                }
            }
            Entry::Prune { now, limit, .. } => {
                shard.mem.prune(now, limit as usize);
            }
        }
    }
    Ok(())
}

/// Brings back from the tables the finished transfers `ops` name that are not in memory.
fn fetch_finished<O: Borrow<Op>>(
    tables: &Tables,
    s: u16,
    shard: &mut ShardState,
    ops: &[O],
) -> Result<(), StoreError> {
    // The ids not in memory (new ones, nearly all), then the filter's lines of each read
    // ahead (`DoneFilter::warm`), then asked.
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
    let hashes = shard.done.warm(&absent);
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

impl<F: Fs> Inner<F> {
    fn lock_commit(&self) -> MutexGuard<'_, CommitState> {
        self.commit
            .lock()
            .expect("commit state poisoned by a panic")
    }

    fn shard(&self, s: u16) -> ShardGuard<'_> {
        self.shards[usize::from(s)].lock()
    }

    fn failure(&self) -> Option<String> {
        self.failed.lock().expect("failure flag poisoned").clone()
    }

    fn fail(&self, why: String) {
        self.failed
            .lock()
            .expect("failure flag poisoned")
            .get_or_insert(why);
    }

    /// Refuses calls once a sync failed or the store is closing (nothing applied).
    fn check_open(&self) -> Result<(), StoreError> {
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
    /// shard's entries is the order they were applied in).
    fn append(&self, entry: &EntryRef<'_>) -> Result<(), StoreError> {
        codec::with_encoded(entry, |bytes| self.log.append(bytes))
            .map(|_| ())
            .map_err(|e| {
                self.fail(e.to_string());
                StoreError::Indeterminate(format!("embedded log: {e}"))
            })
    }

    /// The LSN every reply given now must wait for: the last one appended.
    fn horizon(&self) -> u64 {
        self.log.next_lsn() - 1
    }

    /// Waits until `lsn` is durable.
    async fn durable(&self, lsn: u64) -> Result<(), StoreError> {
        if lsn < self.log.durable_lsn() {
            return Ok(());
        }
        let rx = {
            let mut st = self.lock_commit();
            if st.stopped {
                drop(st);
                return self.sync_here(lsn);
            }
            let (tx, rx) = oneshot::channel();
            st.waiters.push((lsn, tx));
            if st.idle {
                st.idle = false;
                self.commit_wake.notify_one();
            }
            rx
        };
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(StoreError::Indeterminate(format!("embedded log: {why}"))),
            Err(_) => Err(StoreError::Indeterminate(
                "embedded store closed while waiting for the log".into(),
            )),
        }
    }

    /// Makes `lsn` durable in the calling thread: leads the log's next group commit, or
    /// waits for the one under way (the committer's, or another caller's) and then leads.
    fn sync_here(&self, lsn: u64) -> Result<(), StoreError> {
        if lsn < self.log.durable_lsn() {
            return Ok(());
        }
        self.log.sync(lsn).map_err(|e| {
            self.fail(e.to_string());
            StoreError::Indeterminate(format!("embedded log: {e}"))
        })
    }

    /// The committer: syncs the log up to the highest LSN anyone waits for, then answers
    /// every waiter it covered. Waiters arriving during a sync share the next one.
    ///
    /// It syncs for waiters only, never ahead of them: a pending call's entry is made
    /// durable by the first sync anyone waits for after it was appended. Syncing every
    /// pending entry as it came (tried: the committer syncing on its own while pending
    /// calls arrived) spent a sync on points nobody waited for yet, and a sync costs CPU
    /// here (about a tenth of the process's at 1,900 syncs/s): `docs/benchmarks.md`.
    fn run_committer(&self) {
        loop {
            let waiters = {
                let mut st = self.lock_commit();
                while st.waiters.is_empty() && !st.shutdown {
                    st.idle = true;
                    st = self
                        .commit_wake
                        .wait(st)
                        .expect("commit state poisoned by a panic");
                }
                st.idle = false;
                if st.waiters.is_empty() && st.shutdown {
                    st.stopped = true;
                    return;
                }
                std::mem::take(&mut st.waiters)
            };
            let target = waiters.iter().map(|(l, _)| *l).max().unwrap_or(0);
            let result = self.log.sync(target).map_err(|e| e.to_string());
            if let Err(why) = &result {
                self.fail(why.clone());
            }
            for (_, tx) in waiters {
                // A waiter that gave up (its future dropped) needs no answer.
                let _ = tx.send(result.clone());
            }
        }
    }

    /// Adds every id the `done` table held at open to its shard's filter, a chunk per hold
    /// of the shard's lock, then marks the filter complete. Ids the checkpointer writes
    /// meanwhile it adds itself. A read error leaves the filter incomplete: every new id is
    /// then looked up in the table, as before the filter, and nothing is wrong.
    fn run_done_scan(&self) {
        for s in 0..self.cfg.shards {
            let hasher = self.shard(s).done.hasher();
            // Adds the chunk under the shard's lock, answering the still-held shard.
            let add = |chunk: &mut Vec<u64>| {
                let mut shard = self.shard(s);
                for h in chunk.drain(..) {
                    shard.done.insert_hash(h);
                }
                shard
            };
            let mut chunk = Vec::with_capacity(DONE_SCAN_CHUNK);
            let scanned = self.tables.scan_done_ids(s, |id| {
                chunk.push(DoneFilter::hash_with(&hasher, id));
                if chunk.len() == DONE_SCAN_CHUNK {
                    add(&mut chunk).unlock_fair();
                }
                !self.closing.load(Ordering::SeqCst)
            });
            if scanned.is_err() || self.closing.load(Ordering::SeqCst) {
                return;
            }
            add(&mut chunk).done.set_complete();
        }
    }

    fn run_checkpointer(&self) {
        loop {
            // Woken early by `stop`.
            std::thread::park_timeout(Duration::from_millis(50));
            if self.closing.load(Ordering::SeqCst) {
                return;
            }
            let due = {
                let at = *self
                    .checkpointed_at
                    .lock()
                    .expect("checkpoint mark poisoned");
                self.log_bytes().saturating_sub(at) >= self.cfg.checkpoint_bytes
            };
            if due && self.failure().is_none() {
                if let Err(e) = self.checkpoint() {
                    self.fail(format!("checkpoint: {e}"));
                }
            }
        }
    }

    /// Log bytes that a checkpoint would make unnecessary to replay (replayed at open plus
    /// appended since).
    fn log_bytes(&self) -> u64 {
        self.backlog + self.log.appended_bytes()
    }

    /// See [`Embedded::checkpoint`].
    fn checkpoint(&self) -> Result<(), StoreError> {
        // One at a time; with the transfers each shard's `live` table holds.
        let mut in_live = self.checkpointing.lock().expect("checkpoint lock poisoned");
        let covered = self.log_bytes();
        let mut cuts = Vec::new();
        let mut batch = self.tables.begin_batch(self.cfg.shards);
        let mut rooms = self.rooms.lock().expect("rooms poisoned");
        let mut lists = Vec::with_capacity(usize::from(self.cfg.shards));
        for s in 0..self.cfg.shards {
            // The lists that follow the cut: the last cut's where they have room enough,
            // else new ones, their pages written here, before the shard's lock is taken,
            // rather than by the shard's steps under it.
            let (sizes, spent) = &mut rooms[usize::from(s)];
            let room = Room::touched_from(std::mem::take(spent), *sizes);
            let mut shard = self.shard(s);
            let meta = ShardMeta {
                checkpoint_lsn: self.log.next_lsn(),
                sequence: shard.mem.sequence(),
                first_tombstone: shard.mem.first_tombstone(),
            };
            let changes = shard.mem.begin_cut_with(room);
            shard.unlock_fair();
            *sizes = RoomSizes::after(&changes);
            let mut cut = ShardCut {
                shard: s,
                meta,
                history: changes.history,
                tombstones: changes.tombstones,
                ..ShardCut::default()
            };
            // The records as they were at the cut, a slice per hold of the lock
            // (transfers shared: a reference count each; accounts copied without their
            // tombstones); each slice's accounts encoded (and let go) before the next
            // slice is taken.
            let mut records = Cut::default();
            let (a, t) = (&changes.accounts, &changes.transfers);
            for k in 0..a.len().max(t.len()).div_ceil(CUT_SLICE) {
                let (a, t) = (nth_slice(a, k), nth_slice(t, k));
                let mut shard = self.shard(s);
                shard.mem.cut_slice(a, t, &mut records);
                shard.unlock_fair();
                self.tables
                    .add_accounts(&mut batch, s, records.accounts.drain(..));
            }
            let mut shard = self.shard(s);
            shard.mem.end_cut(&mut records);
            shard.unlock_fair();
            cut.accounts = records.accounts;
            cut.transfers = records.transfers;
            // The rest (accounts handed over by `end_cut`, transfers, history, tombstones)
            // encoded at once, before the next shard's cut and before the log's sync: a
            // shard copies a transfer it writes while a cut still holds it, so the sooner
            // the cut lets go the fewer copies. Nothing is written until the commit. The
            // finished ones' ids noted for eviction as they are encoded (a pass over the
            // records after the commit missed on each one's record and spec again).
            let in_live = &mut in_live[usize::from(s)];
            let mut finished = Vec::with_capacity(cut.transfers.len());
            self.tables.add_cut_with(&mut batch, &mut cut, |r| {
                let id = &r.spec.id;
                if r.state.is_terminal() {
                    finished.push(id.clone());
                    in_live.remove(id)
                } else {
                    in_live.insert(id.clone());
                    false
                }
            });
            cuts.push((cut, finished));
            lists.push((changes.accounts, changes.transfers));
        }
        // Everything cut is in the log at an LSN below its shard's checkpoint LSN; the
        // tables must not get ahead of what is durable there.
        let newest = cuts
            .iter()
            .map(|(c, _)| c.meta.checkpoint_lsn)
            .max()
            .unwrap_or(1);
        if newest > 1 {
            self.log.sync(newest - 1).map_err(|e| {
                self.fail(e.to_string());
                StoreError::Unavailable(format!("embedded log: {e}"))
            })?;
        }
        self.tables.commit(batch)?;
        // Evict in slices, taking the shard's lock for each: a checkpoint covers thousands
        // of transfers per shard, and evicting them all at once held the lock for tens of
        // milliseconds, stalling every call to the shard (the latency tail). Each eviction
        // re-checks its record, so calls in between change nothing here. The records'
        // last references are the cut's, dropped after the lock.
        for (cut, finished) in &cuts {
            let mut shard = self.shard(cut.shard);
            let fetched = std::mem::take(&mut shard.fetched);
            shard.unlock_fair();
            let evict: Vec<&TransferId> = finished.iter().chain(&fetched).collect();
            for slice in evict.chunks(EVICT_SLICE) {
                let mut shard = self.shard(cut.shard);
                // In the filter before they leave memory: a call that no longer finds one
                // there must be sent to the table (`done_filter.rs`).
                shard.done.insert_all(slice);
                shard.mem.warm_evictions(slice);
                for id in slice {
                    shard.mem.evict_transfer(id);
                }
                shard.unlock_fair();
            }
            let mut shard = self.shard(cut.shard);
            shard.mem.history_saved(&cut.history);
            shard.unlock_fair();
        }
        *self
            .checkpointed_at
            .lock()
            .expect("checkpoint mark poisoned") = covered;
        let oldest = cuts
            .iter()
            .map(|(c, _)| c.meta.checkpoint_lsn)
            .min()
            .unwrap_or(1);
        for ((cut, _), (accounts, transfers)) in cuts.into_iter().zip(lists) {
            drop_records(cut.transfers);
            // Saved, so the shard let go of the history list: the cut's is the last.
            let history = Arc::try_unwrap(cut.history).unwrap_or_default();
            rooms[usize::from(cut.shard)].1 =
                Room::spent(accounts, transfers, cut.tombstones, history);
        }
        self.log.remove_before(oldest).map_err(|e| {
            StoreError::Unavailable(format!("embedded log: removing old segments: {e}"))
        })?;
        Ok(())
    }
}

/// Drops a cut's transfers, most of them the last references to their records and specs
/// (the shard let go of what it evicted), a chunk at a time from the end, each chunk read
/// first ([`warm_records`]): dropping one after the other waited for each record's misses
/// in turn (dropping the cut was 3.5 % of `xfer bench`'s samples).
fn drop_records(mut records: Vec<Arc<TransferRecord>>) {
    while !records.is_empty() {
        let from = records.len().saturating_sub(WARM_CHUNK);
        warm_records(&records[from..]);
        records.truncate(from);
    }
}

impl<F: Fs> EmbeddedShard<F> {
    fn execute_now(&self, ops: &[Op]) -> Applied {
        self.inner.check_open()?;
        self.execute_locked(&mut self.inner.shard(self.index), ops)
    }

    /// Applies `ops` to the shard `shard`, locked, and appends them to the log: the ops
    /// themselves or, from [`Store::execute_pending`], references to the caller's.
    fn execute_locked<O: Borrow<Op>>(&self, shard: &mut ShardState, ops: &[O]) -> Applied {
        let now = self.inner.clock.now();
        shard.mem.warm(ops);
        fetch_finished(&self.inner.tables, self.index, shard, ops)?;
        let replies = ops
            .iter()
            .map(|op| shard.mem.apply(op.borrow(), now))
            .collect();
        // Room for them all: collected through the filter, the list grew by doubling.
        let mut writes: Vec<&Op> = Vec::with_capacity(ops.len());
        writes.extend(ops.iter().map(Borrow::borrow).filter(|op| !is_read(op)));
        if !writes.is_empty() {
            self.inner.append(&EntryRef::Ops {
                shard: self.index,
                now,
                ops: writes,
            })?;
        }
        Ok((replies, self.inner.horizon()))
    }

    /// Runs `read` on the shard and answers once everything it could have seen is durable.
    fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Tables, &MemoryShard) -> Result<T, StoreError>,
    ) -> BoxFuture<'_, Result<T, StoreError>> {
        let result = self.inner.check_open().and_then(|()| {
            let shard = self.inner.shard(self.index);
            Ok((read(&self.inner.tables, &shard.mem)?, self.inner.horizon()))
        });
        Box::pin(async move {
            let (value, lsn) = result?;
            self.inner.durable(lsn).await?;
            Ok(value)
        })
    }
}

fn is_read(op: &Op) -> bool {
    matches!(
        op,
        Op::Account(_, xfer_store::AccountOp::Get) | Op::Transfer(_, TransferOp::Get)
    )
}

impl<F: Fs> Store for EmbeddedShard<F> {
    fn execute(&self, ops: Vec<Op>) -> BoxFuture<'_, Result<Vec<Reply>, StoreError>> {
        let result = self.execute_now(&ops);
        Box::pin(async move {
            let (replies, lsn) = result?;
            self.inner.durable(lsn).await?;
            Ok(replies)
        })
    }

    /// Every shard of one data directory appends to its one log.
    fn log_domain(&self) -> Option<LogDomain> {
        Some(LogDomain::of(&self.inner))
    }

    /// Runs when first polled. A shard whose lock is held (by the other runtime thread's
    /// batch, the checkpointer's slice, the pruner) is put off: the call wakes its task and
    /// answers "not yet" `BUSY_DEFERRALS` times, so that the task's calls to the other
    /// shards go first (`join_all` polls them all) and the runtime runs other tasks
    /// meanwhile, instead of its thread spinning and sleeping on the lock; then it waits.
    fn execute_pending<'a>(&'a self, ops: &'a [&'a Op]) -> BoxFuture<'a, Applied> {
        let mut deferred = 0;
        Box::pin(std::future::poll_fn(move |cx| {
            self.inner.check_open()?;
            let lock = &self.inner.shards[usize::from(self.index)];
            let mut shard = match lock.try_lock() {
                Some(shard) => shard,
                None if deferred < BUSY_DEFERRALS => {
                    deferred += 1;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                None => lock.lock(),
            };
            Poll::Ready(self.execute_locked(&mut shard, ops))
        }))
    }

    fn wait_durable(&self, point: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.inner.durable(point))
    }

    fn is_durable(&self, point: u64) -> bool {
        point < self.inner.log.durable_lsn()
    }

    fn sync_durable(&self, point: u64) -> Option<Result<(), StoreError>> {
        Some(self.inner.sync_here(point))
    }

    fn scan_due(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<TransferRecord>, StoreError>> {
        self.read(move |_, mem| Ok(mem.scan_due(now, limit)))
    }

    fn history<'a>(
        &'a self,
        account: &'a AccountId,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<HistoryPage, StoreError>> {
        let index = self.index;
        let account = account.clone();
        self.read(move |tables, mem| {
            let want = limit.saturating_add(1);
            let mut entries = mem.history_entries(&account, before, want);
            if entries.len() < want {
                // Every entry in the tables is older than every entry in memory.
                let older = entries.last().map(|(s, _)| *s).or(before);
                entries.extend(tables.history(index, &account, older, want - entries.len())?);
            }
            Ok(HistoryPage::from_one_extra(&mut entries, limit))
        })
    }

    fn prune(&self, limit: usize) -> BoxFuture<'_, Result<usize, StoreError>> {
        let result = self.inner.check_open().and_then(|()| {
            let now = self.inner.clock.now();
            // A slice per hold of the shard's lock, each its own log entry (replayed as it
            // was applied, between the same calls): a whole call held the lock for up to
            // 7 ms, stalling every step on the shard (the latency tail).
            // A slice with nothing due is not applied (nor logged: it would change nothing).
            let mut dropped = 0;
            let mut left = limit;
            // A slice stays within the first due bucket, and is logged as the entries it
            // took: it never runs on into a bucket whose entries another call has out being
            // sorted (which replay would find in place), nor sorts the next bucket under
            // the lock.
            while left > 0 {
                let mut shard = self.inner.shard(self.index);
                // A due bucket of the index not sorted yet, if big, is sorted without the
                // lock: its entries taken out under it, sorted, and put back under it. A
                // bucket of 100,000 entries took 20–40 ms to sort on a slow host, every
                // step on the shard waiting (`docs/benchmarks.md`). Meanwhile no slice
                // takes from the bucket, and a checkpoint still finds its least entry. The
                // sort is of the bucket's entries as a set, so the order, and what each
                // logged slice takes, is the one replay finds.
                if let Some((at, mut entries)) = shard.mem.tombstones_to_sort(now, SORT_APART_MIN) {
                    drop(shard);
                    xfer_store::sort_bucket(&mut entries);
                    self.inner
                        .shard(self.index)
                        .mem
                        .sorted_tombstones(at, entries);
                    continue;
                }
                let slice = left
                    .min(PRUNE_SLICE)
                    .min(shard.mem.first_due_tombstones(now));
                if slice == 0 {
                    break;
                }
                let (n, taken) = shard.mem.prune_counted(now, slice);
                self.inner.append(&EntryRef::Prune {
                    shard: self.index,
                    now,
                    limit: u32::try_from(taken).unwrap_or(u32::MAX),
                })?;
                drop(shard);
                dropped += n;
                left -= slice;
            }
            Ok((dropped, self.inner.horizon()))
        });
        Box::pin(async move {
            let (dropped, lsn) = result?;
            self.inner.durable(lsn).await?;
            Ok(dropped)
        })
    }

    fn accounts<'a>(
        &'a self,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Account>, StoreError>> {
        let after = after.cloned();
        self.read(move |_, mem| {
            Ok(mem
                .accounts_after(after.as_ref())
                .filter(|a| a.status != AccountStatus::Unopened)
                .take(limit)
                .cloned()
                .collect())
        })
    }

    fn transfers<'a>(
        &'a self,
        after: Option<&'a TransferId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<TransferRecord>, StoreError>> {
        let index = self.index;
        let after = after.cloned();
        self.read(move |tables, mem| {
            // Memory holds the newest version of everything it has; the tables hold the
            // rest. Merge the two id-ordered runs, memory winning ties.
            let hot: Vec<TransferRecord> = mem
                .transfers_after(after.as_ref(), limit)
                .cloned()
                .collect();
            let cold = tables.done_after(index, after.as_ref(), limit)?;
            let mut merged: std::collections::BTreeMap<TransferId, TransferRecord> =
                cold.into_iter().map(|r| (r.spec.id.clone(), r)).collect();
            merged.extend(hot.into_iter().map(|r| (r.spec.id.clone(), r)));
            let out: Vec<TransferRecord> = merged.into_values().take(limit).collect();
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn shard_lock() -> Arc<ShardLock> {
        Arc::new(ShardLock::new(ShardState {
            mem: MemoryShard::new(),
            fetched: Vec::new(),
            done: DoneFilter::new(0),
        }))
    }

    /// A store of one shard in `dir`, checkpointed only when a test asks, and its shard.
    fn one_shard(dir: &Path) -> (Embedded, Arc<EmbeddedShard>) {
        let cfg = EmbeddedConfig {
            shards: 1,
            background_checkpoints: false,
            ..EmbeddedConfig::default()
        };
        let clock = Arc::new(xfer_core::SystemClock);
        let (store, _) = Embedded::open(dir, cfg, clock).unwrap();
        let shard = store.shards().remove(0);
        (store, shard)
    }

    #[test]
    fn a_panic_while_a_shard_is_held_poisons_it_for_every_later_call() {
        let lock = shard_lock();
        let held = Arc::clone(&lock);
        let first = std::thread::spawn(move || {
            let _shard = held.lock();
            panic!("half-written");
        })
        .join();
        assert!(first.is_err());
        let again = Arc::clone(&lock);
        let later = std::thread::spawn(move || drop(again.lock())).join();
        let why = later.expect_err("a later call must refuse to go on");
        assert_eq!(
            why.downcast_ref::<&str>(),
            Some(&"shard poisoned by a panic")
        );
    }

    /// A waker that counts its wakes.
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// `execute_pending` on a shard someone holds: the first poll applies nothing, wakes its
    /// task and answers "not yet" (the task's other calls go first); the next waits for the
    /// lock, and applies once it is let go.
    #[test]
    fn a_call_to_a_held_shard_is_put_off_once_then_waits_for_it() {
        use xfer_core::{AssetCode, LowerBound};
        let dir = tempfile::tempdir().unwrap();
        let (_store, shard) = one_shard(dir.path());
        let id = AccountId::new("a").unwrap();
        let create = Op::Account(
            id.clone(),
            xfer_store::AccountOp::Create {
                asset: AssetCode::new("USD", "asset").unwrap(),
                lower_bound: LowerBound::Bounded(0),
            },
        );
        let wakes = Arc::new(Wakes(Default::default()));
        let waker = std::task::Waker::from(Arc::clone(&wakes));
        let mut cx = std::task::Context::from_waker(&waker);
        let (holding, held) = mpsc::channel();
        let (letting_go, let_go) = mpsc::channel::<()>();
        let holder = {
            let inner = Arc::clone(&shard.inner);
            std::thread::spawn(move || {
                let guard = inner.shard(0);
                holding.send(()).unwrap();
                let_go.recv().unwrap();
                drop(guard);
            })
        };
        held.recv().unwrap();
        // Let go a little later: a first poll that waited for the lock would answer then.
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            letting_go.send(()).unwrap();
        });
        let ops = [&create];
        let mut call = shard.execute_pending(&ops);
        assert!(call.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            1,
            "it asks to be polled again"
        );
        assert!(
            shard.inner.shards[0].try_lock().is_none(),
            "still held by the other thread"
        );
        let Poll::Ready(answer) = call.as_mut().poll(&mut cx) else {
            panic!("the second poll must wait for the lock and apply");
        };
        let (replies, point) = answer.unwrap();
        assert!(matches!(replies[..], [Reply::Account(_)]), "{replies:?}");
        assert!(point > 0, "answered ahead of the sync, with its log point");
        holder.join().unwrap();
        release.join().unwrap();
        assert!(shard.inner.shard(0).mem.account(&id).is_some());
    }

    /// The checkpointer's slice loop: unlock, then take the lock again at once. A call that
    /// was waiting must get the shard in between. With std's `Mutex` (the lock before) the
    /// loop took it back first, slice after slice: the same steps on it, run 20 times, never
    /// let the call in first.
    #[test]
    fn a_fair_unlock_hands_the_shard_to_the_call_waiting_for_it() {
        let lock = shard_lock();
        let order = Arc::new(Mutex::new(Vec::new()));
        let guard = lock.lock();
        let (waiting, waits) = mpsc::channel();
        let call = {
            let (lock, order) = (Arc::clone(&lock), Arc::clone(&order));
            std::thread::spawn(move || {
                waiting.send(()).unwrap();
                let _shard = lock.lock();
                order.lock().unwrap().push("call");
            })
        };
        waits.recv().unwrap();
        // Long enough for the call to be parked on the lock.
        std::thread::sleep(Duration::from_millis(100));
        guard.unlock_fair();
        let _slice = lock.lock();
        order.lock().unwrap().push("next slice");
        drop(_slice);
        call.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["call", "next slice"]);
    }

    /// A checkpoint lets go of the finished transfers it saved (their ids noted for
    /// eviction as they are encoded) and keeps the unfinished ones; one that finishes
    /// after a checkpoint saved it live goes at the next. Without the eviction nothing
    /// else notices: every call still answers, from memory, which only grows.
    #[test]
    fn a_checkpoint_lets_go_of_the_finished_transfers_it_saved() {
        use xfer_core::{OwnerId, SystemClock, TransferState};
        let dir = tempfile::tempdir().unwrap();
        let (store, shard) = one_shard(dir.path());
        let id = |s: &str| TransferId::new(s).unwrap();
        let now = SystemClock.now();
        let insert = |s: &str| {
            let spec = crate::one_usd_a_to_b(s);
            let owner = OwnerId::new("me").unwrap();
            let r = TransferRecord::accept_claimed(spec, now, owner, now.plus_ms(60_000));
            Op::Transfer(id(s), TransferOp::Insert(Arc::new(r)))
        };
        let finish = |s: &str| {
            let decide = TransferOp::Decide {
                epoch: 1,
                to: TransferState::Canceling,
                reason: None,
                now,
            };
            [
                Op::Transfer(id(s), decide),
                Op::Transfer(id(s), TransferOp::Finish { now }),
            ]
        };
        let in_memory = |s: &str| store.inner.shard(0).mem.has_transfer(&id(s));
        let mut ops = vec![insert("finished"), insert("running"), insert("later")];
        ops.extend(finish("finished"));
        shard.execute_now(&ops).unwrap();
        store.checkpoint().unwrap();
        assert!(!in_memory("finished"));
        assert!(in_memory("running") && in_memory("later"));
        // A batch naming a saved transfer twice brings it back from `done` once, and both
        // reads answer it.
        let get = || Op::Transfer(id("finished"), TransferOp::Get);
        let (replies, _) = shard.execute_now(&[get(), get()]).unwrap();
        for reply in &replies {
            assert!(
                matches!(reply, Reply::Unchanged(r) if r.state == TransferState::Canceled),
                "{reply:?}"
            );
        }
        assert!(in_memory("finished"));
        assert_eq!(store.inner.shard(0).fetched, vec![id("finished")]);
        store.checkpoint().unwrap();
        assert!(!in_memory("finished"), "a fetched transfer leaves again");
        // The lists the cut took are kept, for their room, for the next cut.
        let kept = store.inner.rooms.lock().unwrap()[0].1.sizes();
        assert_ne!(kept, RoomSizes::default(), "the cut's lists kept");
        shard.execute_now(&finish("later")).unwrap();
        store.checkpoint().unwrap();
        assert!(!in_memory("later"));
        assert!(in_memory("running"));
    }
}
