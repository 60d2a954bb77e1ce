//! [`EmbeddedShard`]: one shard of an [`Embedded`](crate::Embedded) store, a [`Store`]: its
//! calls, its reads and its pruner.
//!
//! `execute` and the reads answer only after the log record holding the ops — and every
//! record before it, so everything the replies could have seen — is durable (a read may show
//! another caller's write that is applied in memory but not yet durable). `execute_ahead`
//! answers at once with the last LSN appended so far (its own record's or later: whatever
//! the replies could have seen): its caller waits for it (the shard's [`Store::log`]) before
//! acknowledging anything that rests on the replies.

use crate::codec::EntryRef;
use crate::fs::{Fs, RealFs};
use crate::inner::Inner;
use crate::shard_state::{fetch_finished, ShardState};
use crate::tables::Tables;
use std::borrow::Borrow;
use std::sync::Arc;
use std::task::Poll;
use xfer_core::{
    Account, AccountId, AccountStatus, Asset, Timestamp, TransferId, TransferRecord, TransferState,
};
use xfer_store::{
    BoxFuture, Event, EventPage, FeedPosition, HistoryPage, MemoryShard, Metadata, Op, Reply,
    SharedLog, Store, StoreError, TransferOp,
};

/// Tombstones pruned per hold of a shard's lock (and per log entry).
const PRUNE_SLICE: usize = 128;

/// A due bucket of the pruner's index with at least this many entries is sorted without
/// the shard's lock (`EmbeddedShard::prune`); a smaller one sorts in well under a
/// millisecond when first taken from.
const SORT_APART_MIN: usize = 2_048;

/// A batch applied: its replies and the LSN they rest on (not yet durable).
type Applied = Result<(Vec<Reply>, u64), StoreError>;

/// How many times [`EmbeddedShard::execute_ahead`] puts a busy shard off before it waits
/// for its lock.
const BUSY_DEFERRALS: u32 = 1;

/// One shard of an [`Embedded`](crate::Embedded) store.
pub struct EmbeddedShard<F: Fs = RealFs> {
    pub(crate) inner: Arc<Inner<F>>,
    pub(crate) index: u16,
}

impl<F: Fs> EmbeddedShard<F> {
    pub(crate) fn execute_now(&self, ops: &[Op]) -> Applied {
        self.inner.shared.check_open()?;
        self.execute_locked(&mut self.inner.shared.shard(self.index), ops)
    }

    /// Applies `ops` to the shard `shard`, locked, and appends them to the log: the ops
    /// themselves or, from [`Store::execute_ahead`], references to the caller's.
    fn execute_locked<O: Borrow<Op>>(&self, shard: &mut ShardState, ops: &[O]) -> Applied {
        let now = self.inner.shared.clock.now();
        shard.mem.prefetch(ops);
        fetch_finished(&self.inner.shared.tables, self.index, shard, ops)?;
        // Each step's events, counted as it is applied, are positioned once its log entry's
        // LSN is known (`xfer_store::shard::feed`).
        let mut made = Vec::with_capacity(ops.len() + 1);
        made.push(shard.mem.events_added());
        let replies: Vec<Reply> = ops
            .iter()
            .map(|op| {
                let reply = shard.mem.apply(op.borrow(), now);
                made.push(shard.mem.events_added());
                reply
            })
            .collect();
        // A one-phase step that did not commit is logged as the insert it was.
        let inserts: Vec<Op> = ops
            .iter()
            .zip(&replies)
            .filter(|(op, reply)| fell_back((*op).borrow(), reply))
            .map(|(op, _)| as_insert(op.borrow()))
            .collect();
        let mut inserts = inserts.iter();
        // Room for them all: collected through the filter, the list would grow by doubling.
        let mut writes: Vec<&Op> = Vec::with_capacity(ops.len());
        writes.extend(
            ops.iter()
                .zip(&replies)
                .filter(|(op, _)| !is_read((*op).borrow()))
                .map(|(op, reply)| {
                    if fell_back(op.borrow(), reply) {
                        inserts
                            .next()
                            .expect("an insert for each step that fell back")
                    } else {
                        op.borrow()
                    }
                }),
        );
        if !writes.is_empty() {
            let lsn = self.inner.shared.append(&EntryRef::Ops {
                shard: self.index,
                now,
                ops: writes,
            })?;
            let mut step = 0;
            for (op, made) in ops.iter().zip(made.windows(2)) {
                if made[0] < made[1] {
                    shard.mem.stamp_events(made[0]..made[1], lsn, step);
                }
                step += u64::from(!is_read(op.borrow()));
            }
        }
        Ok((replies, self.inner.shared.last_lsn()))
    }

    /// Runs `read` on the shard and answers once everything it could have seen is durable.
    fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Tables, &MemoryShard) -> Result<T, StoreError>,
    ) -> BoxFuture<'_, Result<T, StoreError>> {
        let result = self.inner.shared.check_open().and_then(|()| {
            let shard = self.inner.shared.shard(self.index);
            Ok((
                read(&self.inner.shared.tables, &shard.mem)?,
                self.inner.shared.last_lsn(),
            ))
        });
        Box::pin(async move {
            let (value, lsn) = result?;
            self.inner
                .committer
                .durable(&self.inner.shared, lsn)
                .await?;
            Ok(value)
        })
    }
}

/// Whether `op` is a one-phase step that did not commit (its `reply` is not the record
/// done). The log keeps a one-phase step only where it committed, and the others as the
/// insert they were ([`as_insert`]), so that replay repeats each commit whatever the tables
/// hold of its record (`open.rs`, `replay`).
fn fell_back(op: &Op, reply: &Reply) -> bool {
    matches!(op, Op::Transfer(_, TransferOp::OnePhase(_)))
        && !matches!(reply, Reply::Transfer(r) if r.state == TransferState::Done)
}

/// The insert a one-phase step `op` otherwise is.
fn as_insert(op: &Op) -> Op {
    match op {
        Op::Transfer(id, TransferOp::OnePhase(rec)) => {
            Op::Transfer(id.clone(), TransferOp::Insert(Arc::clone(rec)))
        }
        other => other.clone(),
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
            self.inner
                .committer
                .durable(&self.inner.shared, lsn)
                .await?;
            Ok(replies)
        })
    }

    /// Every shard of one data directory appends to its one log.
    fn log(&self) -> Option<Arc<dyn SharedLog>> {
        Some(self.inner.clone())
    }

    /// Runs when first polled. A shard whose lock is held (by the other runtime thread's
    /// batch, the checkpointer's slice, the pruner) is put off: the call wakes its task and
    /// answers "not yet" `BUSY_DEFERRALS` times, so that the task's calls to the other
    /// shards go first (`join_all` polls them all) and the runtime runs other tasks
    /// meanwhile, instead of its thread spinning and sleeping on the lock; then it waits.
    fn execute_ahead<'a>(&'a self, ops: &'a [&'a Op]) -> BoxFuture<'a, Applied> {
        let mut deferred = 0;
        Box::pin(std::future::poll_fn(move |cx| {
            self.inner.shared.check_open()?;
            let lock = &self.inner.shared.shards[usize::from(self.index)];
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

    fn events(
        &self,
        after: FeedPosition,
        limit: usize,
    ) -> BoxFuture<'_, Result<EventPage, StoreError>> {
        let index = self.index;
        self.read(move |tables, mem| {
            // Memory first: a list the checkpointer drops from it meanwhile is saved
            // before (the shard's lock is held here anyway). The two may hold the same
            // event (saved, not yet dropped; or made again by a replay): one is kept.
            // Nothing at or before what retention dropped (a replay may have saved one
            // again).
            let dropped_through = tables.events_dropped(index)?;
            let after = after.max(dropped_through);
            let held = mem.events_after(after, limit);
            let saved = tables.events(index, after, limit)?;
            let mut events: Vec<Event> = Vec::with_capacity(limit.min(held.len() + saved.len()));
            let (mut a, mut b) = (held.into_iter().peekable(), saved.into_iter().peekable());
            while events.len() < limit {
                let next = match (a.peek(), b.peek()) {
                    (Some(x), Some(y)) if x.position == y.position => {
                        b.next();
                        a.next()
                    }
                    (Some(x), Some(y)) if x.position < y.position => a.next(),
                    (Some(_), None) => a.next(),
                    _ => b.next(),
                };
                match next {
                    Some(e) => events.push(e),
                    None => break,
                }
            }
            Ok(EventPage {
                events,
                dropped_through,
            })
        })
    }

    fn events_before(
        &self,
        before: FeedPosition,
        limit: usize,
    ) -> BoxFuture<'_, Result<EventPage, StoreError>> {
        let index = self.index;
        self.read(move |tables, mem| {
            // As `events`, backwards: memory holds the newest, the tables the older, the two
            // may hold the same event, and nothing at or before what retention dropped.
            let dropped_through = tables.events_dropped(index)?;
            let held = mem.events_before(before, limit);
            let saved = tables.events_before(index, before, limit)?;
            let mut events: Vec<Event> = Vec::with_capacity(limit.min(held.len() + saved.len()));
            let (mut a, mut b) = (held.into_iter().peekable(), saved.into_iter().peekable());
            while events.len() < limit {
                let next = match (a.peek(), b.peek()) {
                    (Some(x), Some(y)) if x.position == y.position => {
                        b.next();
                        a.next()
                    }
                    (Some(x), Some(y)) if x.position > y.position => a.next(),
                    (Some(_), None) => a.next(),
                    _ => b.next(),
                };
                match next {
                    Some(e) if e.position > dropped_through => events.push(e),
                    _ => break,
                }
            }
            Ok(EventPage {
                events,
                dropped_through,
            })
        })
    }

    fn trim_events(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        let trimmed = self.inner.shared.check_open().and_then(|()| {
            self.inner
                .shared
                .tables
                .trim_events(self.index, before, limit)
        });
        Box::pin(std::future::ready(trimmed))
    }

    fn prune(&self, limit: usize) -> BoxFuture<'_, Result<usize, StoreError>> {
        let result = self.inner.shared.check_open().and_then(|()| {
            let now = self.inner.shared.clock.now();
            // A slice per hold of the shard's lock, each its own log entry (replayed as it
            // was applied, between the same calls): a whole call in one hold would stall
            // every step on the shard (the latency tail).
            // A slice with nothing due is not applied (nor logged: it would change nothing).
            let mut dropped = 0;
            let mut left = limit;
            // A slice stays within the first due bucket, and is logged as the entries it
            // took: it never runs on into a bucket whose entries another call has out being
            // sorted (which replay would find in place), nor sorts the next bucket under
            // the lock.
            while left > 0 {
                let mut shard = self.inner.shared.shard(self.index);
                // A due bucket of the index not sorted yet, if big, is sorted without the
                // lock: its entries taken out under it, sorted, and put back under it, so
                // that no step on the shard waits for the sort (`docs/benchmarks.md`).
                // Meanwhile no slice takes from the bucket, and a checkpoint still finds
                // its least entry. The sort is of the bucket's entries as a set, so the
                // order, and what each logged slice takes, is the one replay finds.
                if let Some((at, mut entries)) = shard.mem.tombstones_to_sort(now, SORT_APART_MIN) {
                    drop(shard);
                    xfer_store::shard::sort_bucket(&mut entries);
                    self.inner
                        .shared
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
                self.inner.shared.append(&EntryRef::Prune {
                    shard: self.index,
                    now,
                    limit: u32::try_from(taken).unwrap_or(u32::MAX),
                })?;
                drop(shard);
                dropped += n;
                left -= slice;
            }
            Ok((dropped, self.inner.shared.last_lsn()))
        });
        Box::pin(async move {
            let (dropped, lsn) = result?;
            self.inner
                .committer
                .durable(&self.inner.shared, lsn)
                .await?;
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

    /// The catalog lives in the tables every shard shares, outside the log: a declaration
    /// is rare, so it is written and synced by itself, on the caller's thread.
    fn declare_asset<'a>(&'a self, asset: &'a Asset) -> BoxFuture<'a, Result<Asset, StoreError>> {
        let shared = &self.inner.shared;
        let result = shared
            .check_open()
            .and_then(|()| shared.tables.declare_asset(asset));
        Box::pin(std::future::ready(result))
    }

    fn assets(&self) -> BoxFuture<'_, Result<Vec<Asset>, StoreError>> {
        let shared = &self.inner.shared;
        let result = shared.check_open().and_then(|()| shared.tables.assets());
        Box::pin(std::future::ready(result))
    }

    /// Kept in the tables outside the log, as the catalog is: rare, written and synced by
    /// itself.
    fn set_account_metadata<'a>(
        &'a self,
        account: &'a AccountId,
        metadata: &'a Metadata,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let shared = &self.inner.shared;
        let result = shared.check_open().and_then(|()| {
            shared
                .tables
                .set_account_metadata(self.index, account, metadata)
        });
        Box::pin(std::future::ready(result))
    }

    fn account_metadata<'a>(
        &'a self,
        accounts: &'a [AccountId],
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        let shared = &self.inner.shared;
        let result = shared
            .check_open()
            .and_then(|()| shared.tables.account_metadata(self.index, accounts));
        Box::pin(std::future::ready(result))
    }

    fn accounts_with_metadata<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        let shared = &self.inner.shared;
        let result = shared.check_open().and_then(|()| {
            let tables = &shared.tables;
            tables.accounts_with_metadata(self.index, (key, value), after, limit)
        });
        Box::pin(std::future::ready(result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::one_shard;
    use std::sync::atomic::Ordering;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A waker that counts its wakes.
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// `execute_ahead` on a shard someone holds: the first poll applies nothing, wakes its
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
                let guard = inner.shared.shard(0);
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
        let mut call = shard.execute_ahead(&ops);
        assert!(call.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            1,
            "it asks to be polled again"
        );
        assert!(
            shard.inner.shared.shards[0].try_lock().is_none(),
            "still held by the other thread"
        );
        let Poll::Ready(answer) = call.as_mut().poll(&mut cx) else {
            panic!("the second poll must wait for the lock and apply");
        };
        let (replies, lsn) = answer.unwrap();
        assert!(matches!(replies[..], [Reply::Account(_)]), "{replies:?}");
        assert!(lsn > 0, "answered ahead of the sync, with its LSN");
        holder.join().unwrap();
        release.join().unwrap();
        assert!(shard.inner.shared.shard(0).mem.account(&id).is_some());
    }
}
