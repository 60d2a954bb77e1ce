//! [`Checkpointer`]: writes each shard's changes since the last checkpoint into the tables,
//! then lets go of what they saved (finished transfers, history, old log segments); in the
//! background every `checkpoint_bytes` of log, and on demand.

use crate::fs::Fs;
use crate::shared::Shared;
use crate::tables::{prefetch_records, ShardCut, ShardMeta, PREFETCH_CHUNK};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use xfer_core::{FastSet, TransferId, TransferRecord};
use xfer_store::shard::{Cut, Room, RoomSizes};
use xfer_store::StoreError;

/// Records evicted per hold of a shard's lock after a checkpoint.
const EVICT_SLICE: usize = 256;

/// The most records a checkpoint's cut hands over per hold of a shard's lock.
const CUT_SLICE: usize = 512;

/// The `k`-th slice of `CUT_SLICE` ids (empty past the end).
fn nth_slice<T>(ids: &[T], k: usize) -> &[T] {
    let from = (k * CUT_SLICE).min(ids.len());
    &ids[from..(from + CUT_SLICE).min(ids.len())]
}

/// What the checkpoints of one store keep between them. See the module docs.
pub(crate) struct Checkpointer {
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
}

impl Checkpointer {
    /// The checkpointer of a store of `shards` shards just opened: `in_live` the transfers
    /// each shard's `live` table holds, `backlog` the log bytes replayed.
    pub(crate) fn new(
        in_live: Vec<FastSet<TransferId>>,
        backlog: u64,
        shards: u16,
    ) -> Checkpointer {
        Checkpointer {
            checkpointing: Mutex::new(in_live),
            rooms: Mutex::new(
                (0..shards)
                    .map(|_| (RoomSizes::default(), Room::default()))
                    .collect(),
            ),
            backlog,
            checkpointed_at: Mutex::new(0),
        }
    }

    /// The checkpointer thread: a checkpoint whenever `checkpoint_bytes` of log came since
    /// the last, until the store closes.
    pub(crate) fn run<F: Fs>(&self, shared: &Shared<F>) {
        loop {
            // Woken early by `stop`.
            std::thread::park_timeout(Duration::from_millis(50));
            if shared.closing.load(Ordering::SeqCst) {
                return;
            }
            let due = {
                let at = *self
                    .checkpointed_at
                    .lock()
                    .expect("checkpoint mark poisoned");
                self.log_bytes(shared).saturating_sub(at) >= shared.cfg.checkpoint_bytes
            };
            if due && shared.failure().is_none() {
                if let Err(e) = self.checkpoint(shared) {
                    shared.fail(format!("checkpoint: {e}"));
                }
            }
        }
    }

    /// Log bytes that a checkpoint would make unnecessary to replay (replayed at open plus
    /// appended since).
    fn log_bytes<F: Fs>(&self, shared: &Shared<F>) -> u64 {
        self.backlog + shared.log.appended_bytes()
    }

    /// See [`Embedded::checkpoint`](crate::Embedded::checkpoint).
    pub(crate) fn checkpoint<F: Fs>(&self, shared: &Shared<F>) -> Result<(), StoreError> {
        // One at a time; with the transfers each shard's `live` table holds.
        let mut in_live = self.checkpointing.lock().expect("checkpoint lock poisoned");
        let covered = self.log_bytes(shared);
        let mut cuts = Vec::new();
        let mut batch = shared.tables.begin_batch(shared.cfg.shards);
        let mut rooms = self.rooms.lock().expect("rooms poisoned");
        let mut lists = Vec::with_capacity(usize::from(shared.cfg.shards));
        for s in 0..shared.cfg.shards {
            // The lists that follow the cut: the last cut's where they have room enough,
            // else new ones, their pages written here, before the shard's lock is taken,
            // rather than by the shard's steps under it.
            let (sizes, spent) = &mut rooms[usize::from(s)];
            let room = Room::touched_from(std::mem::take(spent), *sizes);
            let mut shard = shared.shard(s);
            let meta = ShardMeta {
                checkpoint_lsn: shared.log.next_lsn(),
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
                events: changes.events,
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
                let mut shard = shared.shard(s);
                shard.mem.cut_slice(a, t, &mut records);
                shard.unlock_fair();
                shared
                    .tables
                    .add_accounts(&mut batch, s, records.accounts.drain(..));
            }
            let mut shard = shared.shard(s);
            shard.mem.end_cut(&mut records);
            shard.unlock_fair();
            cut.accounts = records.accounts;
            cut.transfers = records.transfers;
            // The rest (accounts handed over by `end_cut`, transfers, history, tombstones)
            // encoded at once, before the next shard's cut and before the log's sync: a
            // shard copies a transfer it writes while a cut still holds it, so the sooner
            // the cut lets go the fewer copies. Nothing is written until the commit. The
            // finished ones' ids noted for eviction as they are encoded (a pass over the
            // records after the commit would miss on each one's record and spec again).
            let in_live = &mut in_live[usize::from(s)];
            let mut finished = Vec::with_capacity(cut.transfers.len());
            shared.tables.add_cut_with(&mut batch, &mut cut, |r| {
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
            shared.log.sync(newest - 1).map_err(|e| {
                shared.fail(e.to_string());
                StoreError::Unavailable(format!("embedded log: {e}"))
            })?;
        }
        shared.tables.commit(batch)?;
        // Evict in slices, taking the shard's lock for each: a checkpoint covers thousands
        // of transfers per shard, and evicting them all in one hold of the lock would stall
        // every call to the shard (the latency tail). Each eviction re-checks its record,
        // so calls in between change nothing here. The records' last references are the
        // cut's, dropped after the lock.
        for (cut, finished) in &cuts {
            let mut shard = shared.shard(cut.shard);
            let fetched = std::mem::take(&mut shard.fetched);
            shard.unlock_fair();
            let evict: Vec<&TransferId> = finished.iter().chain(&fetched).collect();
            for slice in evict.chunks(EVICT_SLICE) {
                let mut shard = shared.shard(cut.shard);
                // In the filter before they leave memory: a call that no longer finds one
                // there must be sent to the table (`done_filter.rs`).
                shard.done.insert_all(slice);
                shard.mem.prefetch_evictions(slice);
                for id in slice {
                    shard.mem.evict_transfer(id);
                }
                shard.unlock_fair();
            }
            let mut shard = shared.shard(cut.shard);
            shard.mem.history_saved(&cut.history);
            shard.mem.events_saved(&cut.events);
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
        shared.log.remove_before(oldest).map_err(|e| {
            StoreError::Unavailable(format!("embedded log: removing old segments: {e}"))
        })?;
        Ok(())
    }
}

/// Drops a cut's transfers, most of them the last references to their records and specs
/// (the shard let go of what it evicted), a chunk at a time from the end, each chunk read
/// first ([`prefetch_records`]): dropping one after the other would wait for each record's
/// misses in turn.
fn drop_records(mut records: Vec<Arc<TransferRecord>>) {
    while !records.is_empty() {
        let from = records.len().saturating_sub(PREFETCH_CHUNK);
        prefetch_records(&records[from..]);
        records.truncate(from);
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::one_shard;
    use std::sync::Arc;
    use xfer_core::{Clock, OwnerId, SystemClock, TransferId, TransferRecord, TransferState};
    use xfer_store::shard::RoomSizes;
    use xfer_store::{Op, Reply, TransferOp};

    /// A checkpoint lets go of the finished transfers it saved (their ids noted for
    /// eviction as they are encoded) and keeps the unfinished ones; one that finishes
    /// after a checkpoint saved it live goes at the next. Without the eviction nothing
    /// else notices: every call still answers, from memory, which only grows.
    #[test]
    fn a_checkpoint_lets_go_of_the_finished_transfers_it_saved() {
        let dir = tempfile::tempdir().unwrap();
        let (store, shard) = one_shard(dir.path());
        let id = |s: &str| TransferId::new(s).unwrap();
        let now = SystemClock.now();
        let insert = |s: &str| {
            let spec = crate::testing::one_usd_a_to_b(s);
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
        let inner = &shard.inner;
        let in_memory = |s: &str| inner.shared.shard(0).mem.has_transfer(&id(s));
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
        assert_eq!(inner.shared.shard(0).fetched, vec![id("finished")]);
        store.checkpoint().unwrap();
        assert!(!in_memory("finished"), "a fetched transfer leaves again");
        // The lists the cut took are kept, for their room, for the next cut.
        let kept = inner.checkpointer.rooms.lock().unwrap()[0].1.sizes();
        assert_ne!(kept, RoomSizes::default(), "the cut's lists kept");
        shard.execute_now(&finish("later")).unwrap();
        store.checkpoint().unwrap();
        assert!(!in_memory("later"));
        assert!(in_memory("running"));
    }
}
