//! The checkpoint tables: the shards' state as of their last checkpoint, in
//! [fjall](https://docs.rs/fjall) (an LSM tree with its own journal), so that recovery reads
//! only what is live and finished transfers stay on disk, indexed, out of memory.
//!
//! | table | key | value |
//! |---|---|---|
//! | `accounts` | shard ‖ account id | the account with its open intents (all loaded at start) |
//! | `tombstones` | shard ‖ checkpoint LSN ‖ number | up to 1,024 tombstones written since the previous checkpoint, with the greatest horizon among them (all loaded at start, into their accounts) |
//! | `live` | shard ‖ transfer id | a non-terminal transfer (all loaded at start) |
//! | `done` | shard ‖ transfer id | a terminal transfer (read on demand) |
//! | `history` | shard ‖ account ‖ 0 ‖ first sequence | up to 256 of the account's entries of one checkpoint: (sequence, transfer id)… (read on demand) |
//! | `meta` | `shards`, `shard` ‖ n | shard count; per shard the checkpoint LSN and history sequence |
//!
//! A checkpoint is one atomic fjall batch, synced before it returns: the tables always hold
//! every shard's state exactly as of that shard's checkpoint LSN, never a mix. Its finished
//! transfers go to `done` just before, sorted, as tables of their own (fjall's ingestion:
//! no journal, no memtable inserts; synced). A crash between the two leaves finished
//! records in `done` ahead of the checkpoint; replay ends with the same ones (see
//! [`Tables::commit`]).
//!
//! Tombstones are written once each, in the runs of the checkpoint after they were made,
//! not with their account: a tombstone stays on its account until its horizon (seconds),
//! and uniform traffic writes every account at every checkpoint, so with the account each
//! was written again and again (three quarters of a checkpoint's bytes, see
//! `docs/benchmarks.md`). A run is deleted by the first checkpoint whose cut finds none of
//! its tombstones in memory any more (the pruner takes them in horizon order: every one at
//! or below the run's greatest horizon is gone when the oldest left is later), so the
//! tables never lose a tombstone the shard still holds. A tombstone pruned from a run that
//! is still kept comes back at the next open, past its horizon: a prune drops it again,
//! and until then it answers a late prepare exactly as it did before it was pruned.

use crate::codec::{self, decode, record_key, AccountWithoutTombstones, Tombstone};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch, PersistMode};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use xfer_core::{Account, AccountId, Timestamp, TransferId, TransferRecord};
use xfer_store::{prune_at, FastMap, FastSet, HistoryEntry, MemoryShard, StoreError};

/// Where a shard's checkpoint stands.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMeta {
    /// Every log record of this shard with an LSN below this is in the tables.
    pub checkpoint_lsn: u64,
    /// The shard's history sequence at that point.
    pub sequence: u64,
    /// The first entry of the shard's pruner index at that point, `(prune_at(horizon),
    /// account, transfer)` (`None`: the shard held no tombstone). A tombstone whose entry
    /// sorts before it had been pruned, and is not restored.
    ///
    /// Directories written before the index was bucketed (`xfer_store::prune_at`) hold
    /// `(horizon, account, transfer)` here; read under the bucketed order it keeps every
    /// tombstone the old order kept (`prune_at(h) >= h`, equal only on a bucket's end),
    /// and perhaps some that were pruned, which a prune takes again.
    pub first_tombstone: Option<(Timestamp, AccountId, TransferId)>,
}

impl ShardMeta {
    /// True if the shard held, at the checkpoint, no tombstone from a run whose greatest
    /// horizon is `latest` (all of them sort before its first index entry).
    fn run_pruned(&self, latest: Timestamp) -> bool {
        self.first_tombstone
            .as_ref()
            .is_none_or(|(first, _, _)| prune_at(latest) < *first)
    }

    /// True if the shard still held `t` at the checkpoint, as far as its index tells.
    fn holds(&self, t: &Tombstone) -> bool {
        let (account, transfer, intent) = t;
        self.first_tombstone
            .as_ref()
            .is_some_and(|(h, a, tr)| (prune_at(intent.horizon), account, transfer) >= (*h, a, tr))
    }
}

/// One shard's part of a checkpoint: what changed since the previous one.
#[derive(Debug, Default)]
pub struct ShardCut {
    /// The shard.
    pub shard: u16,
    /// Its new checkpoint position.
    pub meta: ShardMeta,
    /// Accounts changed (`None`: dropped by the pruner), shared with the shard.
    pub accounts: Vec<(AccountId, Option<Arc<Account>>)>,
    /// Transfers changed, shared with the shard: terminal ones go to `done`, the others to
    /// `live`.
    pub transfers: Vec<Arc<TransferRecord>>,
    /// History entries added, in sequence order (as the shard numbered them), shared with
    /// the shard until they are saved.
    pub history: Arc<Vec<HistoryEntry>>,
    /// Tombstones made, in the order they were made.
    pub tombstones: Vec<Tombstone>,
}

/// A checkpoint's writes, not yet committed, and their size.
pub struct CheckpointBatch {
    batch: OwnedWriteBatch,
    /// Key and value bytes inserted (what fjall's journal and memtables take).
    bytes: u64,
    /// Finished transfers for `done`, key and value: ingested, sorted, before the batch.
    done: Vec<(Vec<u8>, fjall::Slice)>,
}

impl CheckpointBatch {
    /// Adds `key` → `value` encoded, straight from the encoding's scratch buffer into the
    /// bytes fjall keeps (a `Vec` in between was one more allocation and copy per record).
    fn insert<T: Serialize + ?Sized>(&mut self, ks: &Keyspace, key: Vec<u8>, value: &T) {
        let value = codec::with_encoded(value, |b| fjall::Slice::from(b));
        self.bytes += (key.len() + value.len()) as u64;
        self.batch.insert(ks, key, value);
    }

    fn remove(&mut self, ks: &Keyspace, key: Vec<u8>) {
        self.bytes += key.len() as u64;
        self.batch.remove(ks, key);
    }

    fn insert_done(&mut self, key: Vec<u8>, record: &TransferRecord) {
        self.done.push(done_entry(key, record));
    }
}

/// The indices of `entries` in the order of their keys, a key given twice only once: its
/// last entry. Sorted by each key's first 16 bytes as one number, the whole keys compared
/// only where those are equal: a checkpoint sorts tens of thousands of keys, each its own
/// allocation, and comparing them byte by byte through their pointers was most of the
/// sort (the sort was 13 % of the checkpointer's samples, `docs/benchmarks.md`).
fn key_order<V>(entries: &[(Vec<u8>, V)]) -> impl Iterator<Item = usize> {
    fn prefix(key: &[u8]) -> u128 {
        let mut b = [0u8; 16];
        let n = key.len().min(16);
        b[..n].copy_from_slice(&key[..n]);
        u128::from_be_bytes(b)
    }
    let mut order: Vec<(u128, usize)> = entries
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (prefix(k), i))
        .collect();
    // A repeated key's entries from the last to the first, so `dedup_by` keeps the last.
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| entries[a.1].0.cmp(&entries[b.1].0))
            .then(b.1.cmp(&a.1))
    });
    order.dedup_by(|later, first| later.0 == first.0 && entries[later.1].0 == entries[first.1].0);
    order.into_iter().map(|(_, i)| i)
}

/// Transfers of a cut read ahead at a time by [`warm_records`].
pub(crate) const WARM_CHUNK: usize = 64;

/// Reads, and throws away, a field on every cache line of each of `records`, of its spec
/// and of its postings (three allocations, seven or more lines), one allocation at a time
/// in loops of their own, so that their cache misses overlap: a cut's records were last
/// touched by the shard's steps, are scattered over the heap, and each pass over them (the
/// live ones noted, encoding, dropping) missed on every line in turn. (Reading only each
/// allocation's first line left the spec's id on another: a miss per record, 2.4 % of
/// `xfer bench`'s samples in `Tables::add_cut`, `docs/benchmarks.md`.) The record's
/// fields are [`xfer_store::transfer_lines`]; the spec's and postings' are less than a
/// cache line apart in the layouts rustc 1.95 gives (`offset_of!`); another layout only
/// warms less.
pub(crate) fn warm_records(records: &[Arc<TransferRecord>]) {
    use std::hint::black_box;
    for r in records {
        black_box(xfer_store::transfer_lines(r));
    }
    for r in records {
        let s = &r.spec;
        black_box((
            Arc::strong_count(s),
            s.postings.len(),
            s.metadata.len(),
            s.id.as_bytes().len(),
            s.refund_of.is_some(),
            s.timeout_ms,
        ));
    }
    for r in records {
        for p in &r.spec.postings {
            black_box((p.from.as_bytes().len(), p.to.as_bytes().len(), p.amount));
        }
    }
}

/// A finished transfer's key and encoded value for `done`.
fn done_entry(key: Vec<u8>, record: &TransferRecord) -> (Vec<u8>, fjall::Slice) {
    (key, codec::with_encoded(record, |b| fjall::Slice::from(b)))
}

/// fjall's memtables are flushed (and its journal let go) once checkpoints have put this
/// many bytes into them since the last flush: flushing at every checkpoint made small
/// tables that compaction then merged again and again (the bound keeps fjall's journal
/// replay at open short; see `Tables::commit`).
pub const FLUSH_AFTER_BYTES: u64 = 32 << 20;

/// The most tombstones in one run (about 40 KiB).
pub const TOMBSTONE_RUN_MAX: usize = 1024;

/// A tombstone run in the tables: its shard, key and greatest horizon.
#[derive(Debug)]
struct RunNote {
    shard: u16,
    key: Vec<u8>,
    latest_horizon: Timestamp,
}

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
/// and then copied into runs, cost a checkpoint thousands of allocations and copies
/// (1.6 % of a uniform run's samples, `docs/benchmarks.md`).
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

/// The options of the tables every checkpoint adds thousands of keys to, all over the key
/// range (transfer ids and accounts are random): `done`, `history`, `tombstones`. Leveled
/// compaction, as fjall's default, but with tables of 16 MiB instead of 64 and eight of
/// them in level 0 before they are merged into level 1 instead of four: each merge into
/// level 1 rewrites the part of it the new keys overlap, which with random keys is all of
/// it, so fewer, smaller merges rewrite less. `xfer bench --duration 25s`, alternated:
/// +6 to +7 % transfers/s, and +5.7 % over 40 s (`docs/benchmarks.md`).
fn growing() -> KeyspaceCreateOptions {
    leveled(8, 10.0)
}

/// Leveled compaction with tables of 16 MiB, `l0` tables in level 0 before a merge, and
/// each level from the second on `ratio` times the size of the one before (fjall's
/// default is ten).
fn leveled(l0: u8, ratio: f32) -> KeyspaceCreateOptions {
    let leveled = fjall::compaction::Leveled::default()
        .with_table_target_size(16 << 20)
        .with_l0_threshold(l0)
        .with_level_ratio_policy(vec![ratio]);
    KeyspaceCreateOptions::default().compaction_strategy(Arc::new(leveled))
}

/// `done`'s options: as [`growing`], but [`DONE_L0_TABLES`] tables in level 0 before they
/// are merged into level 1, not eight, and each level four times the size of the one
/// before, not ten.
///
/// Every checkpoint ingests its finished transfers as a table of its own, so level 0 fills
/// by one table per checkpoint, and each merge rewrites the level 1 the random ids overlap,
/// all of it. Level 1's size is the level-0 count times the table size, so a larger count
/// merges more new bytes per rewrite of level 1 and leaves fewer levels under it: from 8
/// to 16, `xfer bench --duration 60s`, three pairs: fjall's worker 6.1–8.1 s of CPU against
/// 10.1–13.1 s, +8 % transfers/s; from 16 to 48, `xfer bench --duration 180s`, two
/// pairs: fjall's worker 1.64 / 1.61 µs of CPU per transfer against 2.64 / 2.48, and in
/// three pairs of 30 s runs 0.28–0.30 µs against 1.31–1.56, all threads −12 %; from 48
/// to 128, `xfer bench --duration 180s`, two pairs: fjall's worker 0.98 / 0.98 µs against
/// 1.45 / 1.35, 11–13 % fewer bytes written, the whole within 2 % either way; and the 30 s
/// uniform run no longer slows for several of its seconds while a merge of 48 tables
/// takes one of the two cores (`docs/benchmarks.md`).
///
/// A point read asks each level-0 table's filter, so a read of `done` costs more with
/// more of them; `done` is read only for ids its filter of done ids may hold, and that
/// filter is sized for few false "maybe"s ([`crate::done_filter::BITS_PER_ID`]). fjall
/// slows a keyspace's writes from 20 tables in its level 0 and halts them from 30
/// (`Keyspace::local_backpressure`, on inserts and batches); `done` is only ever ingested
/// into, which neither does, so its level 0 may hold more.
///
/// `done` only grows, and its keys are random, so a byte moved into a level rewrites about
/// the ratio's worth of that level: a tree of ratio `r` rewrites each byte about `r` times
/// per level, over `log_r` of the table's size levels, least near `r = e`. Reads are rare
/// and filtered (one more level is one more filter probe), so writes decide. `xfer bench
/// --duration 180s`, three runs each: fjall's worker 1.84 / 1.80 / 1.91 µs of CPU per
/// transfer against 2.12 / 2.08 / 1.97 µs at ten (−10 %), 3 % fewer bytes written; the
/// whole CPU per transfer within the host's spread (`docs/benchmarks.md`).
///
/// fjall keeps a keyspace's options from its creation: a data directory made before keeps
/// what it was made with.
fn done_options() -> KeyspaceCreateOptions {
    leveled(DONE_L0_TABLES, 4.0)
}

/// Tables in `done`'s level 0 before they are merged into level 1 (`done_options` says why).
pub const DONE_L0_TABLES: u8 = 128;

/// The tables. See the module docs.
pub struct Tables {
    db: Database,
    accounts: Keyspace,
    live: Keyspace,
    done: Keyspace,
    history: Keyspace,
    tombstones: Keyspace,
    meta: Keyspace,
    /// The tombstone runs in the tables (noted at load and as checkpoints write them).
    runs: Mutex<Vec<RunNote>>,
    /// Bytes checkpoints put into fjall's memtables since the last flush.
    unflushed: AtomicU64,
    /// Items in the last checkpoint's batch: the next one starts with room for as many.
    batch_items: AtomicUsize,
    /// Finished transfers in the last checkpoint: the next one starts with room for as many.
    done_items: AtomicUsize,
    /// [`FLUSH_AFTER_BYTES`] (tests lower it).
    flush_after: u64,
}

fn unavailable(what: &str) -> impl FnOnce(fjall::Error) -> StoreError + '_ {
    move |e| StoreError::Unavailable(format!("checkpoint tables: {what}: {e}"))
}

fn corrupted(what: &str, key: &[u8], why: String) -> StoreError {
    StoreError::Corrupted(format!(
        "checkpoint table {what}, key {:?}: {why}",
        String::from_utf8_lossy(key)
    ))
}

const SHARDS_KEY: &[u8] = b"shards";

fn meta_key(shard: u16) -> Vec<u8> {
    let mut k = b"shard".to_vec();
    k.extend_from_slice(&shard.to_be_bytes());
    k
}

impl Tables {
    /// Opens (creating if needed) the tables in `dir`.
    pub fn open(dir: &Path) -> Result<Tables, StoreError> {
        let db = Database::builder(dir)
            // The log is our journal's source of truth; fjall's own journal only needs to
            // hold checkpoints until they are flushed.
            .worker_threads(1)
            // Bounds fjall's own journal replay at open (default 512 MiB).
            .max_journaling_size(64 << 20)
            .open()
            .map_err(unavailable("open"))?;
        let ks = |name: &str, options: fn() -> KeyspaceCreateOptions| {
            db.keyspace(name, options).map_err(unavailable(name))
        };
        Ok(Tables {
            accounts: ks("accounts", KeyspaceCreateOptions::default)?,
            live: ks("live", KeyspaceCreateOptions::default)?,
            done: ks("done", done_options)?,
            history: ks("history", growing)?,
            tombstones: ks("tombstones", growing)?,
            meta: ks("meta", KeyspaceCreateOptions::default)?,
            runs: Mutex::new(Vec::new()),
            unflushed: AtomicU64::new(0),
            batch_items: AtomicUsize::new(0),
            done_items: AtomicUsize::new(0),
            flush_after: FLUSH_AFTER_BYTES,
            db,
        })
    }

    /// The shard count recorded by the first checkpoint, if any.
    pub fn shard_count(&self) -> Result<Option<u16>, StoreError> {
        match self.meta.get(SHARDS_KEY).map_err(unavailable("meta"))? {
            None => Ok(None),
            Some(v) => decode(&v)
                .map(Some)
                .map_err(|e| corrupted("meta", SHARDS_KEY, e)),
        }
    }

    /// Where `shard`'s checkpoint stands (all zero before the first).
    pub fn shard_meta(&self, shard: u16) -> Result<ShardMeta, StoreError> {
        let key = meta_key(shard);
        match self.meta.get(&key).map_err(unavailable("meta"))? {
            None => Ok(ShardMeta::default()),
            Some(v) => decode(&v).map_err(|e| corrupted("meta", &key, e)),
        }
    }

    /// Loads `shard`'s accounts (with the tombstones it held), its live transfers and its
    /// history sequence, as of its checkpoint `meta`, into `into`; returns the live ids.
    pub fn load(
        &self,
        shard: u16,
        meta: &ShardMeta,
        into: &mut MemoryShard,
    ) -> Result<FastSet<TransferId>, StoreError> {
        let prefix = shard.to_be_bytes();
        let mut accounts = Vec::new();
        for item in self.accounts.prefix(prefix) {
            let (k, v) = item.into_inner().map_err(unavailable("accounts"))?;
            accounts.push(decode::<Account>(&v).map_err(|e| corrupted("accounts", &k, e))?);
        }
        into.restore_accounts(accounts);
        into.restore_sequence(meta.sequence);
        let mut runs = self.runs.lock().expect("runs poisoned");
        for item in self.tombstones.prefix(prefix) {
            let (k, v) = item.into_inner().map_err(unavailable("tombstones"))?;
            let run = codec::tombstone_run(&v).map_err(|e| corrupted("tombstones", &k, e))?;
            runs.push(RunNote {
                shard,
                key: k.to_vec(),
                latest_horizon: run.latest_horizon,
            });
            into.restore_tombstones(run.tombstones.into_iter().filter(|t| meta.holds(t)));
        }
        drop(runs);
        let mut live = FastSet::default();
        for item in self.live.prefix(prefix) {
            let (k, v) = item.into_inner().map_err(unavailable("live"))?;
            let r: TransferRecord = decode(&v).map_err(|e| corrupted("live", &k, e))?;
            live.insert(r.spec.id.clone());
            into.restore_transfer(r);
        }
        Ok(live)
    }

    /// How many tombstone runs of `shard` the tables hold.
    pub fn tombstone_runs(&self, shard: u16) -> Result<usize, StoreError> {
        let mut n = 0;
        for item in self.tombstones.prefix(shard.to_be_bytes()) {
            item.into_inner().map_err(unavailable("tombstones"))?;
            n += 1;
        }
        Ok(n)
    }

    /// A finished transfer of `shard`, if the tables hold it.
    pub fn done(&self, shard: u16, id: &TransferId) -> Result<Option<TransferRecord>, StoreError> {
        let key = record_key(shard, id.as_bytes());
        match self.done.get(&key).map_err(unavailable("done"))? {
            None => Ok(None),
            Some(v) => decode(&v).map(Some).map_err(|e| corrupted("done", &key, e)),
        }
    }

    /// About how many finished transfers the `done` table holds (fjall's estimate).
    pub fn done_len_estimate(&self) -> usize {
        self.done.approximate_len()
    }

    /// Calls `f` with the id (its bytes) of every finished transfer of `shard` in the
    /// table, in id order, until `f` answers false.
    pub fn scan_done_ids(
        &self,
        shard: u16,
        mut f: impl FnMut(&[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let start = record_key(shard, b"");
        let end = record_key(shard + 1, b"");
        for item in self.done.range(start..end) {
            let key = item.key().map_err(unavailable("done"))?;
            if !f(&key[2..]) {
                break;
            }
        }
        Ok(())
    }

    /// Finished transfers of `shard` in id order strictly after `after`, at most `limit`.
    pub fn done_after(
        &self,
        shard: u16,
        after: Option<&TransferId>,
        limit: usize,
    ) -> Result<Vec<TransferRecord>, StoreError> {
        let start = record_key(shard, after.map_or(&[], |a| a.as_bytes()));
        let end = record_key(shard + 1, b"");
        let mut out = Vec::new();
        for item in self.done.range(start..end) {
            if out.len() == limit {
                break;
            }
            let (k, v) = item.into_inner().map_err(unavailable("done"))?;
            let r: TransferRecord = decode(&v).map_err(|e| corrupted("done", &k, e))?;
            if Some(&r.spec.id) != after {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// `account`'s history entries in the tables, newest first, older than `before`.
    pub fn history(
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
        for item in self.history.range(start..end).rev() {
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

    /// Encodes one checkpoint into a batch for [`Tables::commit`], nothing written yet. The
    /// cut's accounts are taken out and released as they are encoded: a shard copies an
    /// account it writes while the cut still holds it, and until the batch is committed and
    /// flushed (hundreds of milliseconds) that was nearly every account.
    pub fn batch(&self, shards: u16, cuts: &mut [ShardCut]) -> CheckpointBatch {
        let mut batch = self.begin_batch(shards);
        for cut in cuts {
            self.add_cut(&mut batch, cut);
        }
        batch
    }

    /// An empty checkpoint batch for a store of `shards` shards: [`Tables::add_cut`] adds
    /// each shard's cut, [`Tables::commit`] writes it.
    pub fn begin_batch(&self, shards: u16) -> CheckpointBatch {
        // As many items as the last checkpoint's, and some (grown from empty, fjall's list of
        // them was copied over and over: 0.8 % of `xfer bench`'s samples).
        let items = xfer_store::room_for(self.batch_items.load(Ordering::Relaxed));
        let mut batch = CheckpointBatch {
            batch: OwnedWriteBatch::with_capacity(self.db.clone(), items)
                .durability(Some(PersistMode::SyncAll)),
            bytes: 0,
            done: Vec::with_capacity(xfer_store::room_for(
                self.done_items.load(Ordering::Relaxed),
            )),
        };
        batch.insert(&self.meta, SHARDS_KEY.to_vec(), &shards);
        batch
    }

    /// Encodes accounts of shard `s`'s cut into `batch` and releases them (`None`: dropped).
    /// The checkpointer calls it for each slice of the cut as soon as it is handed over, so
    /// a cut's copies of accounts (`memory.rs`, `CutCopy`) do not pile up over the shard.
    pub fn add_accounts(
        &self,
        batch: &mut CheckpointBatch,
        s: u16,
        accounts: impl IntoIterator<Item = (AccountId, Option<Arc<Account>>)>,
    ) {
        for (id, account) in accounts {
            let key = record_key(s, id.as_bytes());
            match account {
                Some(a) => batch.insert(&self.accounts, key, &AccountWithoutTombstones(&a)),
                None => batch.remove(&self.accounts, key),
            }
        }
    }

    /// Encodes one shard's cut into `batch`, taking out and releasing its accounts (those
    /// not already added with [`Tables::add_accounts`]) as they are encoded.
    pub fn add_cut(&self, batch: &mut CheckpointBatch, cut: &mut ShardCut) {
        self.add_cut_with(batch, cut, |_| false);
    }

    /// [`Tables::add_cut`], handing `each` every transfer of the cut as it is encoded, while
    /// its lines are in the cache: the checkpointer notes there which transfers are live
    /// and which to evict, where a pass of its own over the cut missed on every record
    /// again. `each` answers whether the transfer's row in `live` is to be deleted (it was
    /// written there and has finished).
    pub fn add_cut_with(
        &self,
        batch: &mut CheckpointBatch,
        cut: &mut ShardCut,
        mut each: impl FnMut(&TransferRecord) -> bool,
    ) {
        let s = cut.shard;
        batch.insert(&self.meta, meta_key(s), &cut.meta);
        self.add_accounts(batch, s, std::mem::take(&mut cut.accounts));
        for chunk in cut.transfers.chunks(WARM_CHUNK) {
            warm_records(chunk);
            for r in chunk {
                let key = record_key(s, r.spec.id.as_bytes());
                let left_live = each(r);
                if r.state.is_terminal() {
                    if left_live {
                        batch.remove(&self.live, key.clone());
                    }
                    batch.insert_done(key, r);
                } else {
                    batch.insert(&self.live, key, &**r);
                }
            }
        }
        // One key per account per checkpoint, not per entry: fjall's cost is mostly per
        // key (its journal, memtable, flush and compaction), and a checkpoint adds a few
        // entries to each of thousands of accounts.
        for (account, run) in history_runs(&cut.history).iter() {
            let first = run[0].0;
            batch.insert(&self.history, codec::history_key(s, account, first), &run);
        }
        self.write_tombstone_runs(batch, cut);
    }

    /// Adds `cut`'s tombstones to `batch` as runs, and deletes the runs it finds pruned.
    fn write_tombstone_runs(&self, batch: &mut CheckpointBatch, cut: &ShardCut) {
        let mut runs = self.runs.lock().expect("runs poisoned");
        runs.retain(|run| {
            let pruned = run.shard == cut.shard && cut.meta.run_pruned(run.latest_horizon);
            if pruned {
                batch.remove(&self.tombstones, run.key.clone());
            }
            !pruned
        });
        for (number, tombstones) in cut.tombstones.chunks(TOMBSTONE_RUN_MAX).enumerate() {
            let latest_horizon = tombstones
                .iter()
                .map(|(_, _, i)| i.horizon)
                .max()
                .expect("chunks are not empty");
            let key = codec::tombstone_run_key(
                cut.shard,
                cut.meta.checkpoint_lsn,
                u32::try_from(number).expect("fewer than 2^32 runs"),
            );
            let value = codec::TombstoneRunRef {
                latest_horizon,
                tombstones,
            };
            batch.insert(&self.tombstones, key.clone(), &value);
            runs.push(RunNote {
                shard: cut.shard,
                key,
                latest_horizon,
            });
        }
    }

    /// Writes a checkpoint: its finished transfers into `done` (ingested: sorted, written as
    /// tables of their own and synced, without fjall's journal and memtable, whose inserts
    /// and flushes cost more than the sort), then its batch atomically and durably; then
    /// flushes fjall's memtables if checkpoints have put [`FLUSH_AFTER_BYTES`] into them
    /// since the last flush.
    ///
    /// A crash between the two leaves records in `done` that the tables' checkpoint does
    /// not know of yet: each is a finished transfer as of a point the log was synced to
    /// before this call. Replay ends with the same record: one the tables held live is in
    /// memory, which wins over `done`; any other is brought back from `done` by the first
    /// replayed op naming it, and the ops it went through before it finished then change
    /// nothing on it (no step moves a terminal transfer, `record.rs`). The next checkpoint
    /// writes it again, the same (`docs/storage-format.md`).
    pub fn commit(&self, batch: CheckpointBatch) -> Result<(), StoreError> {
        self.batch_items.store(batch.batch.len(), Ordering::Relaxed);
        self.done_items.store(batch.done.len(), Ordering::Relaxed);
        self.ingest_done(batch.done)?;
        batch.batch.commit().map_err(unavailable("checkpoint"))?;
        let unflushed = self.unflushed.fetch_add(batch.bytes, Ordering::Relaxed) + batch.bytes;
        if unflushed >= self.flush_after {
            self.flush_behind()?;
        }
        Ok(())
    }

    /// Writes finished transfers of shard `shard` into `done` as a checkpoint's commit does
    /// first, and nothing else (tests: a crash between the two).
    pub fn write_done(&self, shard: u16, records: &[TransferRecord]) -> Result<(), StoreError> {
        let entries = records
            .iter()
            .map(|r| done_entry(record_key(shard, r.spec.id.as_bytes()), r))
            .collect();
        self.ingest_done(entries)
    }

    /// Writes `records` into `done` with fjall's ingestion, in key order (a key given twice
    /// keeps its last record).
    fn ingest_done(&self, mut records: Vec<(Vec<u8>, fjall::Slice)>) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let order = key_order(&records);
        let mut ingestion = self
            .done
            .start_ingestion()
            .map_err(unavailable("done ingestion"))?;
        for i in order {
            let (key, value) = &mut records[i];
            ingestion
                .write(
                    std::mem::take(key),
                    std::mem::replace(value, fjall::Slice::empty()),
                )
                .map_err(unavailable("done ingestion"))?;
        }
        ingestion.finish().map_err(unavailable("done ingestion"))
    }

    /// Seals fjall's memtables for its worker to flush, and goes on without waiting for the
    /// flush, so that fjall's journal holds at most about [`FLUSH_AFTER_BYTES`] plus what
    /// checkpoints write while the worker flushes. Waiting for it here (as [`Tables::flush`]
    /// does) held the checkpointer for about a checkpoint's time every 32 MiB: the next cut
    /// took twice the usual number of changes, so the shards' change lists outgrew their
    /// room under the shard's lock (a copy of megabytes into fresh pages), and the next
    /// rooms doubled (`docs/benchmarks.md`).
    fn flush_behind(&self) -> Result<(), StoreError> {
        for ks in self.keyspaces() {
            ks.rotate_memtable().map_err(unavailable("flush"))?;
        }
        self.unflushed.store(0, Ordering::Relaxed);
        Ok(())
    }

    fn keyspaces(&self) -> [&Keyspace; 6] {
        [
            &self.accounts,
            &self.live,
            &self.done,
            &self.history,
            &self.tombstones,
            &self.meta,
        ]
    }

    /// Flushes what checkpoints wrote into fjall's tables and waits (on the checkpointer's
    /// thread, off the hot path), so that fjall's journal, which fjall replays at open,
    /// holds at most about [`FLUSH_AFTER_BYTES`] plus one checkpoint.
    pub fn flush(&self) -> Result<(), StoreError> {
        for ks in self.keyspaces() {
            ks.rotate_memtable_and_wait()
                .map_err(unavailable("flush"))?;
        }
        self.unflushed.store(0, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `key_order` against the order it replaced: reversed, sorted stably, the first of
    /// each key kept. Keys that share their first 16 bytes, end in zero bytes, are
    /// prefixes of each other and repeat, many times over.
    #[test]
    fn key_order_is_the_keys_order_with_each_keys_last_entry() {
        let mut rng = xfer_core::Rng::new(7);
        for round in 0..200 {
            let n = 1 + rng.below(300) as usize;
            let stems: [&[u8]; 4] = [b"", b"\0\x01b0-", b"\0\x01b0-12345678901", b"\0\x02"];
            let entries: Vec<(Vec<u8>, usize)> = (0..n)
                .map(|i| {
                    let mut k = stems[rng.below(4) as usize].to_vec();
                    for _ in 0..rng.below(24) {
                        k.push([0u8, 1, b'0', b'9', 0xff][rng.below(5) as usize]);
                    }
                    (k, i)
                })
                .collect();
            let mut expected = entries.clone();
            expected.reverse();
            expected.sort_by(|a, b| a.0.cmp(&b.0));
            expected.dedup_by(|later, first| later.0 == first.0);
            let got: Vec<(Vec<u8>, usize)> =
                key_order(&entries).map(|i| entries[i].clone()).collect();
            assert_eq!(got, expected, "round {round}");
        }
    }

    /// `done`'s level 0 holds more tables than fjall lets an inserted-into keyspace hold
    /// (it slows writes from 20 and halts them from 30): `done` is only ingested into, so
    /// neither its ingestions nor the checkpoint batches after them wait, and a read finds
    /// every id across all of its tables. With 48 tables before a merge (the value before
    /// [`DONE_L0_TABLES`] became 128), fjall's worker merged them once there were 48.
    #[test]
    fn done_takes_more_level_0_tables_than_fjall_lets_writes_pile_up_and_finds_every_id() {
        let dir = tempfile::tempdir().unwrap();
        let tables = Arc::new(Tables::open(dir.path()).unwrap());
        let record = |i: usize| {
            let spec = crate::one_usd_a_to_b(&format!("t-{i:04}"));
            TransferRecord::accept(spec, Timestamp(1), 100)
        };
        let tables_made = 64;
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = Arc::clone(&tables);
        std::thread::spawn(move || {
            for n in 0..tables_made {
                // One table per checkpoint, its ids spread over the whole range (as random
                // ids are), then the checkpoint's batch.
                let records: Vec<TransferRecord> =
                    (0..8).map(|k| record(k * tables_made + n)).collect();
                writer.write_done(0, &records).unwrap();
                let mut cut = ShardCut {
                    meta: ShardMeta {
                        checkpoint_lsn: n as u64 + 1,
                        ..ShardMeta::default()
                    },
                    ..ShardCut::default()
                };
                writer
                    .commit(writer.batch(1, std::slice::from_mut(&mut cut)))
                    .unwrap();
            }
            tx.send(()).unwrap();
        });
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("64 ingestions and checkpoints within 60 s: nothing waited on level 0");
        assert!(
            tables.done.l0_table_count() >= 56,
            "{} tables in done's level 0",
            tables.done.l0_table_count()
        );
        for i in 0..8 * tables_made {
            let id = TransferId::new(&format!("t-{i:04}")).unwrap();
            let found = tables
                .done(0, &id)
                .unwrap()
                .expect("every id ingested is found");
            assert_eq!(found.spec.id, id);
        }
        let absent = TransferId::new("t-9999").unwrap();
        assert_eq!(tables.done(0, &absent).unwrap(), None);
        assert_eq!(
            tables.shard_meta(0).unwrap().checkpoint_lsn,
            tables_made as u64
        );
    }

    #[test]
    fn memtables_are_flushed_once_checkpoints_put_enough_into_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut tables = Tables::open(dir.path()).unwrap();
        tables.flush_after = 1_000;
        let commit = |lsn: u64| {
            let mut cut = ShardCut {
                meta: ShardMeta {
                    checkpoint_lsn: lsn,
                    ..ShardMeta::default()
                },
                ..ShardCut::default()
            };
            let batch = tables.batch(1, std::slice::from_mut(&mut cut));
            let bytes = batch.bytes;
            tables.commit(batch).unwrap();
            bytes
        };
        let mut put = 0;
        let mut lsn = 1;
        while put + 100 < 1_000 {
            put += commit(lsn);
            lsn += 1;
            assert_eq!(tables.meta.table_count(), 0, "flushed after {put} bytes");
        }
        // The commit that reaches the bound seals the memtables and does not wait for the
        // flush: the table comes from fjall's worker.
        while tables.unflushed.load(Ordering::Relaxed) != 0 {
            assert!(put < 1_100, "not sealed after {put} bytes");
            put += commit(lsn);
            lsn += 1;
        }
        let mut waits = 0;
        while tables.meta.table_count() == 0 {
            waits += 1;
            assert!(waits <= 6_000, "sealed memtables not flushed within 30 s");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(tables.shard_meta(0).unwrap().checkpoint_lsn, lsn - 1);
    }

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
