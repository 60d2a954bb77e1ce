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
//! | `events` | shard ‖ position (major ‖ minor, big-endian) | a change-feed event: transfer, kind, time, refund (read on demand) |
//! | `account_meta` | shard ‖ account id | the account's metadata (written and synced by its own call, never by a checkpoint; never read by a step) |
//! | `meta` | `shards`, `shard` ‖ n, `events_dropped` ‖ n, `asset` ‖ code | shard count; per shard the checkpoint LSN and history sequence, and the last event position retention dropped; the asset catalog (a scale byte per code, written and synced by its own call, never by a checkpoint) |
//!
//! A checkpoint is one atomic fjall batch, synced before it returns: the tables always hold
//! every shard's state exactly as of that shard's checkpoint LSN, never a mix. Its finished
//! transfers go to `done` just before, sorted, as tables of their own (fjall's ingestion:
//! no journal, no memtable inserts; synced). A crash between the two leaves finished
//! records in `done` ahead of the checkpoint; replay ends with the same ones (see
//! [`Tables::commit`]).
//!
//! [`Tables`] holds `accounts`, `live` and `meta` itself; the tables that grow over the
//! whole key range have a module each (a module uses only those listed before it):
//!
//! - `keyspace`: how a table sits in fjall (compaction options), and fjall's errors as the
//!   store's.
//! - `meta`: [`ShardMeta`], where a shard's checkpoint stands.
//! - `done`: the `done` table, finished transfers, ingested sorted ([`DONE_L0_TABLES`]).
//! - `batch`: a checkpoint on its way in: [`ShardCut`], [`CheckpointBatch`], and the cut's
//!   transfers read ahead.
//! - `history`: the `history` table, runs of an account's entries ([`HISTORY_RUN_MAX`]).
//! - `events`: the `events` table, the change feed, written first by a checkpoint.
//! - `tombstones`: the `tombstones` table, runs of tombstones written once each
//!   ([`TOMBSTONE_RUN_MAX`]).

mod batch;
mod done;
mod events;
mod history;
mod keyspace;
mod meta;
mod tombstones;

pub(crate) use batch::{prefetch_records, PREFETCH_CHUNK};
pub use batch::{CheckpointBatch, ShardCut};
pub use done::DONE_L0_TABLES;
pub use history::HISTORY_RUN_MAX;
pub use meta::ShardMeta;
pub use tombstones::TOMBSTONE_RUN_MAX;

use crate::codec::{
    decode, decode_record, encode, record_key, AccountWithoutTombstones, StoredRecord,
};
use crate::tables::done::DoneTable;
use crate::tables::events::EventsTable;
use crate::tables::history::HistoryTable;
use crate::tables::keyspace::{corrupted, unavailable};
use crate::tables::tombstones::TombstoneTable;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch, PersistMode};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use xfer_core::{Account, AccountId, Asset, FastSet, TransferId, TransferRecord};
use xfer_store::{Event, FeedPosition, MemoryShard, Metadata, StoreError};

/// fjall's memtables are flushed (and its journal let go) once checkpoints have put this
/// many bytes into them since the last flush: flushing at every checkpoint would make small
/// tables that compaction then merges again and again (the bound keeps fjall's journal
/// replay at open short; see `Tables::commit`).
pub const FLUSH_AFTER_BYTES: u64 = 32 << 20;

/// The tables. See the module docs.
pub struct Tables {
    db: Database,
    accounts: Keyspace,
    live: Keyspace,
    done: DoneTable,
    history: HistoryTable,
    events: EventsTable,
    tombstones: TombstoneTable,
    meta: Keyspace,
    account_meta: Keyspace,
    /// Bytes checkpoints put into fjall's memtables since the last flush.
    unflushed: AtomicU64,
    /// Items in the last checkpoint's batch: the next one starts with room for as many.
    batch_items: AtomicUsize,
    /// Finished transfers in the last checkpoint: the next one starts with room for as many.
    done_items: AtomicUsize,
    /// [`FLUSH_AFTER_BYTES`] (tests lower it).
    flush_after: u64,
    /// Held while a declaration reads and writes the asset catalog.
    catalog: Mutex<()>,
}

const ASSET_KEY: &[u8] = b"asset";

const SHARDS_KEY: &[u8] = b"shards";

fn events_dropped_key(shard: u16) -> Vec<u8> {
    let mut k = b"events_dropped".to_vec();
    k.extend_from_slice(&shard.to_be_bytes());
    k
}

fn decode_asset(key: &[u8], value: &[u8]) -> Result<Asset, StoreError> {
    let code = std::str::from_utf8(&key[ASSET_KEY.len()..]).unwrap_or("");
    match value {
        [scale] => Asset::new(code, *scale).map_err(|e| corrupted("meta", key, e.message)),
        _ => Err(corrupted(
            "meta",
            key,
            format!("{} bytes of scale", value.len()),
        )),
    }
}

fn account_meta_key(shard: u16, account: &AccountId) -> Vec<u8> {
    let mut k = shard.to_be_bytes().to_vec();
    k.extend_from_slice(account.as_str().as_bytes());
    k
}

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
            done: DoneTable::open(&db)?,
            history: HistoryTable::open(&db)?,
            events: EventsTable::open(&db)?,
            tombstones: TombstoneTable::open(&db)?,
            meta: ks("meta", KeyspaceCreateOptions::default)?,
            account_meta: ks("account_meta", KeyspaceCreateOptions::default)?,
            unflushed: AtomicU64::new(0),
            batch_items: AtomicUsize::new(0),
            done_items: AtomicUsize::new(0),
            flush_after: FLUSH_AFTER_BYTES,
            catalog: Mutex::new(()),
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

    /// Declares `asset` unless its code is declared, synced before it answers; answers the
    /// declaration held (see `Store::declare_asset`).
    pub fn declare_asset(&self, asset: &Asset) -> Result<Asset, StoreError> {
        let _one_at_a_time = self.catalog.lock().unwrap_or_else(|e| e.into_inner());
        let mut key = ASSET_KEY.to_vec();
        key.extend_from_slice(asset.code.as_str().as_bytes());
        if let Some(v) = self.meta.get(&key).map_err(unavailable("meta"))? {
            return decode_asset(&key, &v);
        }
        self.meta
            .insert(&key, [asset.scale])
            .map_err(unavailable("meta"))?;
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(unavailable("persist"))?;
        Ok(asset.clone())
    }

    /// Replaces `account`'s metadata on `shard` (empty: removes it), synced before it
    /// answers.
    pub fn set_account_metadata(
        &self,
        shard: u16,
        account: &AccountId,
        metadata: &Metadata,
    ) -> Result<(), StoreError> {
        let key = account_meta_key(shard, account);
        if metadata.is_empty() {
            self.account_meta
                .remove(&key)
                .map_err(unavailable("account_meta"))?;
        } else {
            self.account_meta
                .insert(&key, encode(metadata))
                .map_err(unavailable("account_meta"))?;
        }
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(unavailable("persist"))
    }

    /// The metadata of those of `accounts` on `shard` that have some, in the order asked.
    pub fn account_metadata(
        &self,
        shard: u16,
        accounts: &[AccountId],
    ) -> Result<Vec<(AccountId, Metadata)>, StoreError> {
        let mut out = Vec::new();
        for account in accounts {
            let key = account_meta_key(shard, account);
            if let Some(v) = self
                .account_meta
                .get(&key)
                .map_err(unavailable("account_meta"))?
            {
                let m = decode(&v).map_err(|e| corrupted("account_meta", &key, e))?;
                out.push((account.clone(), m));
            }
        }
        Ok(out)
    }

    /// Accounts of `shard` whose metadata maps `key` to `value`, in id order after
    /// `after`, at most `limit`.
    pub fn accounts_with_metadata(
        &self,
        shard: u16,
        (key, value): (&str, &str),
        after: Option<&AccountId>,
        limit: usize,
    ) -> Result<Vec<(AccountId, Metadata)>, StoreError> {
        let mut out = Vec::new();
        for item in self.account_meta.prefix(shard.to_be_bytes()) {
            if out.len() == limit {
                break;
            }
            let (k, v) = item.into_inner().map_err(unavailable("account_meta"))?;
            let id = std::str::from_utf8(&k[2..])
                .ok()
                .and_then(|id| AccountId::new(id).ok())
                .ok_or_else(|| corrupted("account_meta", &k, "not an account id".into()))?;
            if after.is_some_and(|after| &id <= after) {
                continue;
            }
            let m: Metadata = decode(&v).map_err(|e| corrupted("account_meta", &k, e))?;
            if m.get(key).map(String::as_str) == Some(value) {
                out.push((id, m));
            }
        }
        Ok(out)
    }

    /// Every declared asset, in code order.
    pub fn assets(&self) -> Result<Vec<Asset>, StoreError> {
        let mut out = Vec::new();
        for item in self.meta.prefix(ASSET_KEY) {
            let (k, v) = item.into_inner().map_err(unavailable("meta"))?;
            out.push(decode_asset(&k, &v)?);
        }
        Ok(out)
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
        self.tombstones.load(shard, meta, into)?;
        let mut live = FastSet::default();
        for item in self.live.prefix(prefix) {
            let (k, v) = item.into_inner().map_err(unavailable("live"))?;
            let r = decode_record(&v).map_err(|e| corrupted("live", &k, e))?;
            live.insert(r.spec.id.clone());
            into.restore_transfer(r);
        }
        Ok(live)
    }

    /// How many tombstone runs of `shard` the tables hold.
    pub fn tombstone_runs(&self, shard: u16) -> Result<usize, StoreError> {
        self.tombstones.run_count(shard)
    }

    /// A finished transfer of `shard`, if the tables hold it.
    pub fn done(&self, shard: u16, id: &TransferId) -> Result<Option<TransferRecord>, StoreError> {
        self.done.get(shard, id)
    }

    /// About how many finished transfers the `done` table holds (fjall's estimate).
    pub fn done_len_estimate(&self) -> usize {
        self.done.len_estimate()
    }

    /// Calls `f` with the id (its bytes) of every finished transfer of `shard` in the
    /// table, in id order, until `f` answers false.
    pub fn scan_done_ids(
        &self,
        shard: u16,
        f: impl FnMut(&[u8]) -> bool,
    ) -> Result<(), StoreError> {
        self.done.scan_ids(shard, f)
    }

    /// Finished transfers of `shard` in id order strictly after `after`, at most `limit`.
    pub fn done_after(
        &self,
        shard: u16,
        after: Option<&TransferId>,
        limit: usize,
    ) -> Result<Vec<TransferRecord>, StoreError> {
        self.done.after(shard, after, limit)
    }

    /// `account`'s history entries in the tables, newest first, older than `before`.
    pub fn history(
        &self,
        shard: u16,
        account: &AccountId,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, TransferId)>, StoreError> {
        self.history.read(shard, account, before, limit)
    }

    /// Retention: drops at most `limit` of shard `shard`'s oldest saved events, while made
    /// before `before`; answers how many.
    pub fn trim_events(
        &self,
        shard: u16,
        before: xfer_core::Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        self.events.trim(
            &self.db,
            &self.meta,
            events_dropped_key(shard),
            shard,
            before,
            limit,
        )
    }

    /// The last position of shard `shard`'s feed dropped by retention (`START`: none).
    pub fn events_dropped(&self, shard: u16) -> Result<FeedPosition, StoreError> {
        let key = events_dropped_key(shard);
        match self.meta.get(&key).map_err(unavailable("meta"))? {
            None => Ok(FeedPosition::START),
            Some(v) => decode::<(u64, u64)>(&v)
                .map(|(major, minor)| FeedPosition { major, minor })
                .map_err(|e| corrupted("meta", &key, e)),
        }
    }

    /// At most `limit` of shard `shard`'s saved events after `after`, oldest first.
    pub fn events(
        &self,
        shard: u16,
        after: FeedPosition,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        self.events.read(shard, after, limit)
    }

    /// At most `limit` of shard `shard`'s saved events before `before`, newest first.
    pub fn events_before(
        &self,
        shard: u16,
        before: FeedPosition,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        self.events.read_before(shard, before, limit)
    }

    /// Encodes one checkpoint into a batch for [`Tables::commit`], nothing written yet. The
    /// cut's accounts are taken out and released as they are encoded: a shard copies an
    /// account it writes while the cut still holds it, and the batch is committed and
    /// flushed only hundreds of milliseconds later.
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
        // them would be copied over and over).
        let items = xfer_store::shard::room_for(self.batch_items.load(Ordering::Relaxed));
        let mut batch = CheckpointBatch {
            batch: OwnedWriteBatch::with_capacity(self.db.clone(), items)
                .durability(Some(PersistMode::SyncAll)),
            bytes: 0,
            done: Vec::with_capacity(xfer_store::shard::room_for(
                self.done_items.load(Ordering::Relaxed),
            )),
            events: Vec::with_capacity(usize::from(shards)),
        };
        batch.insert(&self.meta, SHARDS_KEY.to_vec(), &shards);
        batch
    }

    /// Encodes accounts of shard `s`'s cut into `batch` and releases them (`None`: dropped).
    /// The checkpointer calls it for each slice of the cut as soon as it is handed over, so
    /// a cut's copies of accounts (`xfer_store::shard::cut`, `CutCopy`) do not pile up over the shard.
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
    /// and which to evict, where a pass of its own over the cut would miss on every record
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
        for chunk in cut.transfers.chunks(PREFETCH_CHUNK) {
            prefetch_records(chunk);
            for r in chunk {
                let key = record_key(s, r.spec.id.as_bytes());
                let left_live = each(r);
                if r.state.is_terminal() {
                    if left_live {
                        batch.remove(&self.live, key.clone());
                    }
                    batch.insert_done(key, r);
                } else {
                    batch.insert(&self.live, key, &StoredRecord(r));
                }
            }
        }
        self.history.add(batch, s, &cut.history);
        batch.events.push((s, Arc::clone(&cut.events)));
        self.tombstones.write_runs(batch, cut);
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
    /// nothing on it (no step moves a terminal transfer, `record.rs`), except the one-phase
    /// commit that made it, which replay repeats (`open.rs`). The next checkpoint writes it
    /// again, the same (`docs/storage-format.md`).
    pub fn commit(&self, batch: CheckpointBatch) -> Result<(), StoreError> {
        self.batch_items.store(batch.batch.len(), Ordering::Relaxed);
        self.done_items.store(batch.done.len(), Ordering::Relaxed);
        let events: Vec<(u16, &[Event])> = batch.events.iter().map(|(s, e)| (*s, &e[..])).collect();
        self.events.write(&self.db, &events)?;
        self.done.ingest(batch.done)?;
        batch.batch.commit().map_err(unavailable("checkpoint"))?;
        let unflushed = self.unflushed.fetch_add(batch.bytes, Ordering::Relaxed) + batch.bytes;
        if unflushed >= self.flush_after {
            self.flush_behind()?;
        }
        Ok(())
    }

    /// Writes change-feed events of shard `shard` as a checkpoint's commit does first, and
    /// nothing else (tests: a crash after it).
    pub fn write_events(&self, shard: u16, events: &[Event]) -> Result<(), StoreError> {
        self.events.write(&self.db, &[(shard, events)])
    }

    /// Writes finished transfers of shard `shard` into `done` as a checkpoint's commit does
    /// after its events, and nothing else (tests: a crash between the two).
    pub fn write_done(&self, shard: u16, records: &[TransferRecord]) -> Result<(), StoreError> {
        self.done.write(shard, records)
    }

    /// Seals fjall's memtables for its worker to flush, and goes on without waiting for the
    /// flush, so that fjall's journal holds at most about [`FLUSH_AFTER_BYTES`] plus what
    /// checkpoints write while the worker flushes. Waiting for it here (as [`Tables::flush`]
    /// does) would hold the checkpointer for about a checkpoint's time every 32 MiB: the
    /// next cut would take twice the usual number of changes, so the shards' change lists
    /// would outgrow their room under the shard's lock (`docs/benchmarks.md`).
    fn flush_behind(&self) -> Result<(), StoreError> {
        for ks in self.keyspaces() {
            ks.rotate_memtable().map_err(unavailable("flush"))?;
        }
        self.unflushed.store(0, Ordering::Relaxed);
        Ok(())
    }

    fn keyspaces(&self) -> [&Keyspace; 7] {
        [
            &self.accounts,
            &self.live,
            &self.done.keyspace,
            &self.history.keyspace,
            &self.events.keyspace,
            &self.tombstones.keyspace,
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
    use xfer_core::Timestamp;

    /// `done`'s level 0 holds more tables than fjall lets an inserted-into keyspace hold
    /// (it slows writes from 20 and halts them from 30): `done` is only ingested into, so
    /// neither its ingestions nor the checkpoint batches after them wait, and a read finds
    /// every id across all of its tables. With a lower [`DONE_L0_TABLES`] (48, say), fjall's
    /// worker merges them once there are that many, and fewer than 56 are left.
    #[test]
    fn done_takes_more_level_0_tables_than_fjall_lets_writes_pile_up_and_finds_every_id() {
        let dir = tempfile::tempdir().unwrap();
        let tables = Arc::new(Tables::open(dir.path()).unwrap());
        let record = |i: usize| {
            let spec = crate::testing::one_usd_a_to_b(&format!("t-{i:04}"));
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
            tables.done.keyspace.l0_table_count() >= 56,
            "{} tables in done's level 0",
            tables.done.keyspace.l0_table_count()
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
}
