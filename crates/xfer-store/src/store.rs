//! The `Store` trait: what the protocol needs from a database, and nothing more.
//!
//! A store is one shard. It promises that every [`Op`] is atomic on its one record, and
//! nothing across records: two ops in one batch may be seen half-applied by a reader, and a
//! batch that fails may have applied any prefix of itself. The engine relies on exactly
//! that and no more.
//!
//! # One round trip per step
//!
//! Every op is a protocol step executed by the store next to the data, so a hot account
//! costs one short update per step and never a read-modify-write retry loop:
//!
//! | op | PostgreSQL (`xfer-store-postgres`) | Redis (`xfer-store-redis`: one hash per record) | MongoDB |
//! |---|---|---|---|
//! | `Account::Prepare` | `account_op` (PL/pgSQL): lock the account row `FOR UPDATE`, answer an existing intent or tombstone, check deadline, status, asset and `balance - reserved - lower_bound >= debit`, then `UPDATE accounts SET reserved = reserved + d, incoming = incoming + c` and insert the intent row | `FCALL xfer_2_account … prepare` (`functions.lua`): answer an existing intent field, check deadline, status, asset and available (exact decimal arithmetic), then `HSET` reserved, incoming and the intent field, history `ZADD` | `findOneAndUpdate({_id, status:'open', asset, "intents.<t>": {$exists:false}, $expr: available >= d}, {$inc, $set: {"intents.<t>"}})` |
//! | `Account::Post` / `Release` | `account_op`: the same lock, then the intent row `open → posted / released` and the account's sums (a release's mark where none: before its horizon, on an opened account, a history row) | `FCALL xfer_2_account … post` / `release`: the intent field `open → posted / released`, the sums, the tombstone index (a mark's history `ZADD` as in PostgreSQL) | `findOneAndUpdate({"intents.<t>.state":"open"}, …)` |
//! | `Transfer::Insert` | `transfer_op`: `INSERT … ON CONFLICT DO NOTHING RETURNING`, else compare bodies | `FCALL xfer_2_transfer … insert`: `HSET` if absent, else the record (bodies compared by the client) | `insertOne`, duplicate key → read |
//! | `Transfer::Claim` / `Decide` / `Finish` / `Capture` / `Void` | `transfer_op`: lock the row, compare state and epoch, `UPDATE … RETURNING` | `FCALL xfer_2_transfer …`: compare state and epoch, `HSET`, keep the due index | `findOneAndUpdate({_id, state, epoch}, …)` |
//!
//! A batch ([`Store::execute`]) sends many transfers' ops for one shard in one round trip
//! (PostgreSQL: one `SELECT … FROM execute($ops)` statement running each op's function, its
//! rows locked in one global order; Redis: a pipeline of `FCALL`s; MongoDB: a `bulkWrite`); each op stays
//! atomic on its own record, and a refused op is an answer, not a failure of the batch.
//!
//! # Answering before the sync (one log, one order)
//!
//! A store whose shards all append to one log in one order (the embedded store) can answer
//! [`Store::execute_pending`] as soon as the ops are applied and appended, before the log
//! is synced: a crash then keeps a prefix of that log, so whatever an answer led to (the
//! next step, on any shard of the same log) is appended after what it depended on and can
//! never survive without it. Such stores name their log with [`Store::log_domain`]. The
//! engine uses this only when every shard of its cluster has the same domain, and
//! acknowledges nothing outside it (an outcome, a decision) until [`Store::wait_durable`]
//! covers the point the answers carried. Every other store keeps the defaults: `None`,
//! `execute_pending` is `execute` (durable when answered, point 0), and point 0 is always
//! durable.
//!
//! # Scans
//!
//! [`Store::scan_due`] serves the sweeper from an index on the transfer's wake time;
//! [`Store::history`] serves an account's transfers newest first from an index written by
//! each account's first write for a transfer (intent or released mark); [`Store::prune`] drops tombstones whose horizon the store's clock has passed.

use crate::op::{Op, Reply};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use xfer_core::{Account, AccountId, Timestamp, TransferId, TransferRecord};

/// A boxed, sendable future: the trait is used as `dyn Store` by the router.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a store call failed. Each variant says what the caller may do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// Nothing was applied (the store said so, or the request never left). Retry later.
    Unavailable(String),
    /// Some prefix of the batch may have been applied (a timeout, a lost reply). Retry the
    /// same ops: every op is idempotent.
    Indeterminate(String),
    /// A record failed its checks (bad checksum, impossible value). Needs a human.
    Corrupted(String),
}

impl StoreError {
    /// True when retrying the same ops later may succeed.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, StoreError::Corrupted(_))
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Unavailable(m) => write!(f, "store unavailable: {m}"),
            StoreError::Indeterminate(m) => write!(f, "store outcome unknown: {m}"),
            StoreError::Corrupted(m) => write!(f, "store corrupted: {m}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// One page of an account's history, newest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryPage {
    /// `(cursor, transfer)` pairs, newest first.
    pub entries: Vec<(u64, TransferId)>,
    /// Pass as `before` to get the next page; `None` at the end.
    pub next: Option<u64>,
}

impl HistoryPage {
    /// The page of `limit` entries out of `entries`, which holds up to one more than the
    /// page (asked for `limit + 1`): the extra one only tells whether a next page exists.
    pub fn from_one_extra(entries: &mut Vec<(u64, TransferId)>, limit: usize) -> HistoryPage {
        let more = entries.len() > limit;
        entries.truncate(limit);
        let next = match entries.last() {
            Some((s, _)) if more => Some(*s),
            _ => None,
        };
        HistoryPage {
            entries: std::mem::take(entries),
            next,
        }
    }
}

/// A log that several shards append to in one order (see the module docs): equal domains
/// share every crash's prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LogDomain(usize);

impl LogDomain {
    /// The domain of the log `owner` holds (its allocation's address: unique while it
    /// lives, and every shard of that log holds it).
    pub fn of<T: ?Sized>(owner: &std::sync::Arc<T>) -> LogDomain {
        LogDomain(std::sync::Arc::as_ptr(owner) as *const () as usize)
    }
}

/// `execute`'s answer as `execute_pending`'s: durable when answered, so point 0.
pub fn answered_durable<'a>(
    call: BoxFuture<'a, Result<Vec<Reply>, StoreError>>,
) -> BoxFuture<'a, Result<(Vec<Reply>, u64), StoreError>> {
    Box::pin(async move { call.await.map(|replies| (replies, 0)) })
}

/// One shard of records with single-record atomic operations. See the module docs.
pub trait Store: Send + Sync {
    /// Applies `ops` in order, each atomically on its own record, and answers one reply per
    /// op once they are durable. Ops of one batch must address records of this shard.
    fn execute(&self, ops: Vec<Op>) -> BoxFuture<'_, Result<Vec<Reply>, StoreError>>;

    /// The log this shard appends to, if it can answer before its writes are durable (see
    /// the module docs). `None` (the default): every answer is durable.
    fn log_domain(&self) -> Option<LogDomain> {
        None
    }

    /// As [`Store::execute`], but may answer before the ops are durable: with the replies
    /// comes the point of the log (0: nothing to wait for) that [`Store::wait_durable`]
    /// must reach before anything that depends on them is acknowledged. The ops are
    /// borrowed: a store that answers ahead of its log applies and logs them where they
    /// are (the engine keeps every op it sends until answered, and copying each one per
    /// call was 1.15 % of `xfer bench`'s samples, `docs/benchmarks.md`). The default is
    /// `execute` on copies, durable when answered.
    fn execute_pending<'a>(
        &'a self,
        ops: &'a [&'a Op],
    ) -> BoxFuture<'a, Result<(Vec<Reply>, u64), StoreError>> {
        answered_durable(self.execute(Op::copies(ops)))
    }

    /// Waits until the log is durable up to `point` (from [`Store::execute_pending`]); an
    /// error means it may never be (the answers that carried it must not be acknowledged).
    /// The default knows only point 0.
    fn wait_durable(&self, point: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(std::future::ready(if point == 0 {
            Ok(())
        } else {
            Err(StoreError::Corrupted(format!(
                "asked to wait for log point {point} of a store that answers only what is durable"
            )))
        }))
    }

    /// True if the log is durable up to `point` now (no wait).
    fn is_durable(&self, point: u64) -> bool {
        point == 0
    }

    /// As [`Store::wait_durable`], but syncing in the calling thread, which it blocks, where
    /// the store can; `None` where it cannot (then wait with `wait_durable`). For a caller
    /// whose wait is the critical path of many others (the HTTP combiner's lane): a wait
    /// handed to another thread costs that thread's wake-up and then the caller's.
    fn sync_durable(&self, point: u64) -> Option<Result<(), StoreError>> {
        let _ = point;
        None
    }

    /// Non-terminal transfers whose wake time ([`TransferRecord::wake_at`]) is at or before
    /// `now`, earliest first, at most `limit`.
    fn scan_due(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<TransferRecord>, StoreError>>;

    /// The transfers that wrote an intent or a released mark on `account` (each once, by
    /// its first write; a mark only before its horizon, see `record.rs`), newest first,
    /// strictly older than the cursor `before`, at most `limit`.
    fn history<'a>(
        &'a self,
        account: &'a AccountId,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<HistoryPage, StoreError>>;

    /// Drops at most `limit` tombstones whose horizon the store's clock has passed; answers
    /// how many it dropped. Open intents are never dropped.
    fn prune(&self, limit: usize) -> BoxFuture<'_, Result<usize, StoreError>>;

    /// Accounts in id order strictly after `after`, at most `limit` (audit and checks).
    fn accounts<'a>(
        &'a self,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Account>, StoreError>>;

    /// Transfers in id order strictly after `after`, at most `limit` (audit and checks).
    fn transfers<'a>(
        &'a self,
        after: Option<&'a TransferId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<TransferRecord>, StoreError>>;
}

/// Writes the named [`Store`] methods of a wrapper as calls to the same method of its
/// `$inner` field: wrappers that change one or two calls (`Intercept`, `Coalesce`, `Faulty`)
/// forward the rest with this instead of repeating the signatures.
macro_rules! forward_to_inner {
    ($inner:ident: $($method:ident),+ $(,)?) => {
        $(crate::store::forward_to_inner!(@ $inner $method);)+
    };
    (@ $inner:ident pending) => {
        fn log_domain(&self) -> Option<crate::store::LogDomain> {
            self.$inner.log_domain()
        }
        fn execute_pending<'a>(
            &'a self,
            ops: &'a [&'a crate::op::Op],
        ) -> crate::store::BoxFuture<'a, Result<(Vec<crate::op::Reply>, u64), crate::store::StoreError>> {
            self.$inner.execute_pending(ops)
        }
        fn wait_durable(&self, point: u64) -> crate::store::BoxFuture<'_, Result<(), crate::store::StoreError>> {
            self.$inner.wait_durable(point)
        }
        fn is_durable(&self, point: u64) -> bool {
            self.$inner.is_durable(point)
        }
        fn sync_durable(&self, point: u64) -> Option<Result<(), crate::store::StoreError>> {
            self.$inner.sync_durable(point)
        }
    };
    (@ $inner:ident scan_due) => {
        fn scan_due(
            &self,
            now: xfer_core::Timestamp,
            limit: usize,
        ) -> crate::store::BoxFuture<'_, Result<Vec<xfer_core::TransferRecord>, crate::store::StoreError>> {
            self.$inner.scan_due(now, limit)
        }
    };
    (@ $inner:ident history) => {
        fn history<'a>(
            &'a self,
            account: &'a xfer_core::AccountId,
            before: Option<u64>,
            limit: usize,
        ) -> crate::store::BoxFuture<'a, Result<crate::store::HistoryPage, crate::store::StoreError>> {
            self.$inner.history(account, before, limit)
        }
    };
    (@ $inner:ident prune) => {
        fn prune(&self, limit: usize) -> crate::store::BoxFuture<'_, Result<usize, crate::store::StoreError>> {
            self.$inner.prune(limit)
        }
    };
    (@ $inner:ident accounts) => {
        fn accounts<'a>(
            &'a self,
            after: Option<&'a xfer_core::AccountId>,
            limit: usize,
        ) -> crate::store::BoxFuture<'a, Result<Vec<xfer_core::Account>, crate::store::StoreError>> {
            self.$inner.accounts(after, limit)
        }
    };
    (@ $inner:ident transfers) => {
        fn transfers<'a>(
            &'a self,
            after: Option<&'a xfer_core::TransferId>,
            limit: usize,
        ) -> crate::store::BoxFuture<'a, Result<Vec<xfer_core::TransferRecord>, crate::store::StoreError>> {
            self.$inner.transfers(after, limit)
        }
    };
}
pub(crate) use forward_to_inner;

/// A shared store is a store (so wrappers like [`Coalesce`](crate::Coalesce) take an `Arc`).
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn execute(&self, ops: Vec<Op>) -> BoxFuture<'_, Result<Vec<Reply>, StoreError>> {
        (**self).execute(ops)
    }

    fn log_domain(&self) -> Option<LogDomain> {
        (**self).log_domain()
    }

    fn execute_pending<'a>(
        &'a self,
        ops: &'a [&'a Op],
    ) -> BoxFuture<'a, Result<(Vec<Reply>, u64), StoreError>> {
        (**self).execute_pending(ops)
    }

    fn wait_durable(&self, point: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        (**self).wait_durable(point)
    }

    fn is_durable(&self, point: u64) -> bool {
        (**self).is_durable(point)
    }

    fn sync_durable(&self, point: u64) -> Option<Result<(), StoreError>> {
        (**self).sync_durable(point)
    }

    fn scan_due(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<TransferRecord>, StoreError>> {
        (**self).scan_due(now, limit)
    }

    fn history<'a>(
        &'a self,
        account: &'a AccountId,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<HistoryPage, StoreError>> {
        (**self).history(account, before, limit)
    }

    fn prune(&self, limit: usize) -> BoxFuture<'_, Result<usize, StoreError>> {
        (**self).prune(limit)
    }

    fn accounts<'a>(
        &'a self,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Account>, StoreError>> {
        (**self).accounts(after, limit)
    }

    fn transfers<'a>(
        &'a self,
        after: Option<&'a TransferId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<TransferRecord>, StoreError>> {
        (**self).transfers(after, limit)
    }
}
