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
//! | op | PostgreSQL and MySQL (`xfer-store-postgres`, `xfer-store-mysql`) | Redis (`xfer-store-redis`: one hash per record) | MongoDB (`xfer-store-mongo`: one document per record) |
//! |---|---|---|---|
//! | `Account::Prepare` | a server-side function or procedure: lock the account row `FOR UPDATE`, answer an existing intent or tombstone, check deadline, status, asset and `balance - reserved - lower_bound >= debit` (sums in numeric/DECIMAL), then update the account's sums and insert the intent and history rows | `FCALL xfer_6_account … prepare` (`functions.lua`): answer an existing intent field, check deadline, status, asset and available (exact decimal arithmetic), then `HSET` reserved, incoming and the intent field, history `ZADD` | `findOneAndUpdate({_id}, pipeline)`: `_ok` = no intent, deadline, status, asset, available and every sum fitting (Decimal128); `$set` the sums and `intents.<t>` only where `_ok` |
//! | `Account::Post` / `Release` | the same lock, then the intent row `open → posted / released` and the account's sums (a release's mark where none: before its horizon, on an opened account, a history row) | `FCALL xfer_6_account … post` / `release`: the intent field `open → posted / released`, the sums, the tombstone index (a mark's history `ZADD` as in PostgreSQL) | the same update: `_ok` = the intent is open (a release: `_case` new placeholder / mark / release) |
//! | `Transfer::Insert` | `INSERT`, on a taken id the record (bodies compared in SQL, or by the client) | `FCALL xfer_6_transfer … insert`: `HSET` if absent, else the record (bodies compared by the client) | `insertOne`, duplicate key → read, bodies compared by the client |
//! | `Transfer::Claim` / `Decide` / `Finish` / `Capture` / `Void` | lock the row, compare state and epoch, `UPDATE` | `FCALL xfer_6_transfer …`: compare state and epoch, `HSET`, keep the due index | `findOneAndUpdate({_id}, pipeline)`: `_ok` = state and epoch as the rule asks |
//!
//! A batch ([`Store::execute`]) sends many transfers' ops for one shard in one round trip
//! (PostgreSQL: one `SELECT … FROM execute($ops)` statement running each op's function, its
//! rows locked in one global order; MySQL: one `CALL xfer_execute(?)`, likewise; Redis: a
//! pipeline of `FCALL`s; MongoDB: the documents' updates sent at once); each op stays
//! atomic on its own record, and a refused op is an answer, not a failure of the batch.
//!
//! # Answering before the sync (one log, one order)
//!
//! A store whose shards all append to one log in one order (the embedded store) can answer
//! [`Store::execute_ahead`] before the log is synced, with the LSN the answers rest
//! on; such a shard names its log with [`Store::log`] ([`SharedLog`]). The engine uses this
//! only when every shard of its cluster names the same log, and acknowledges nothing
//! outside it (an outcome, a decision) until the log is durable up to that LSN. Every
//! other store keeps the defaults: no log, `execute_ahead` is `execute` (durable when
//! answered, LSN 0).
//!
//! # Scans
//!
//! [`Store::scan_due`] serves the sweeper from an index on the transfer's wake time;
//! [`Store::history`] serves an account's transfers newest first from an index written by
//! each account's first write for a transfer (intent or released mark); [`Store::prune`] drops tombstones whose horizon the store's clock has passed.

pub use crate::error::{BoxFuture, StoreError};
use crate::event::{EventPage, FeedPosition};
use crate::log::SharedLog;
use crate::op::{Op, Reply};
use std::sync::Arc;
use xfer_core::{Account, AccountId, Asset, Timestamp, TransferId, TransferRecord};

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

/// `execute`'s answer as `execute_ahead`'s: durable when answered, so LSN 0.
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

    /// The log this shard appends to, if it answers [`Store::execute_ahead`] before its
    /// writes are durable (see the module docs). `None` (the default): every answer is
    /// durable.
    fn log(&self) -> Option<Arc<dyn SharedLog>> {
        None
    }

    /// As [`Store::execute`], but may answer before the ops are durable: with the replies
    /// comes the LSN of the log (0: nothing to wait for) that [`Store::log`] must make
    /// durable before anything that depends on them is acknowledged. The ops are
    /// borrowed: a store that answers ahead of its log applies and logs them where they
    /// are, since the engine keeps every op it sends until answered and a copy of each per
    /// call would be wasted work (`docs/benchmarks.md#ops-borrowed`). The default is
    /// `execute` on copies, durable when answered.
    fn execute_ahead<'a>(
        &'a self,
        ops: &'a [&'a Op],
    ) -> BoxFuture<'a, Result<(Vec<Reply>, u64), StoreError>> {
        answered_durable(self.execute(Op::copies(ops)))
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

    /// The shard's change feed (`event.rs`): at most `limit` events strictly after `after`,
    /// oldest first, each durable (a crash never takes back an event once read), and none
    /// that a later read could place before one already answered. The default:
    /// `Unsupported`, for a store that keeps no feed.
    fn events(
        &self,
        after: FeedPosition,
        limit: usize,
    ) -> BoxFuture<'_, Result<EventPage, StoreError>> {
        let _ = (after, limit);
        Box::pin(async { Err(StoreError::Unsupported("a change feed".into())) })
    }

    /// The change feed read backwards: at most `limit` events strictly before `before`
    /// (`FeedPosition::END`: from the newest), newest first, under the same promises as
    /// [`Store::events`] (durable, and none that a later read could place after one
    /// answered); none at or before what retention dropped. The default: `Unsupported`.
    fn events_before(
        &self,
        before: FeedPosition,
        limit: usize,
    ) -> BoxFuture<'_, Result<EventPage, StoreError>> {
        let _ = (before, limit);
        Box::pin(async { Err(StoreError::Unsupported("a change feed".into())) })
    }

    /// Retention: drops at most `limit` of the feed's oldest events, a prefix by position,
    /// each made before `before` (by its time, or the store's clock at its write); answers
    /// how many. Readers from a position before the last one dropped are told
    /// ([`EventPage::dropped_through`]). The default (no feed) drops nothing.
    fn trim_events(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        let _ = (before, limit);
        Box::pin(async { Ok(0) })
    }

    /// The asset catalog, kept by a cluster's first shard: declares `asset` unless its code
    /// is declared already, atomically, and answers the declaration the catalog holds for
    /// the code (`asset` itself, or an earlier one, perhaps of another scale). A declaration
    /// is never changed nor dropped. The default: `Unsupported`.
    fn declare_asset<'a>(&'a self, asset: &'a Asset) -> BoxFuture<'a, Result<Asset, StoreError>> {
        let _ = asset;
        Box::pin(async { Err(StoreError::Unsupported("an asset catalog".into())) })
    }

    /// Every declared asset, in code order. The default: `Unsupported`.
    fn assets(&self) -> BoxFuture<'_, Result<Vec<Asset>, StoreError>> {
        Box::pin(async { Err(StoreError::Unsupported("an asset catalog".into())) })
    }

    /// Account metadata, kept on the account's shard beside its record and never read by a
    /// protocol step: replaces `account`'s map with `metadata` (an empty one removes it),
    /// durably. The default: `Unsupported`.
    fn set_account_metadata<'a>(
        &'a self,
        account: &'a AccountId,
        metadata: &'a Metadata,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = (account, metadata);
        Box::pin(async { Err(StoreError::Unsupported("account metadata".into())) })
    }

    /// The metadata of those of `accounts` that have some, in the order asked. The
    /// default: `Unsupported`.
    fn account_metadata<'a>(
        &'a self,
        accounts: &'a [AccountId],
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        let _ = accounts;
        Box::pin(async { Err(StoreError::Unsupported("account metadata".into())) })
    }

    /// Accounts whose metadata maps `key` to `value`, in id order strictly after `after`,
    /// at most `limit`, with their metadata. The default: `Unsupported`.
    fn accounts_with_metadata<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        let _ = (key, value, after, limit);
        Box::pin(async { Err(StoreError::Unsupported("account metadata".into())) })
    }
}

/// An account's metadata: a small map of text (owner, labels), bounded by the API.
pub type Metadata = std::collections::BTreeMap<String, String>;

/// What [`Store::account_metadata`] answers from the maps a store `found` in any order:
/// those of `accounts` that have one, in the order asked.
pub fn metadata_in_order(
    accounts: &[AccountId],
    found: Vec<(AccountId, Metadata)>,
) -> Vec<(AccountId, Metadata)> {
    let mut found: std::collections::HashMap<AccountId, Metadata> = found.into_iter().collect();
    accounts
        .iter()
        .filter_map(|a| found.remove(a).map(|m| (a.clone(), m)))
        .collect()
}

/// Writes the named [`Store`] methods of a wrapper as calls to the same method of its
/// `$inner` field: wrappers that change one or two calls (`Intercept`, `Coalesce`, `Faulty`)
/// forward the rest with this instead of repeating the signatures.
macro_rules! forward_to_inner {
    ($inner:ident: $($method:ident),+ $(,)?) => {
        $(crate::store::forward_to_inner!(@ $inner $method);)+
    };
    (@ $inner:ident ahead) => {
        fn log(&self) -> Option<std::sync::Arc<dyn crate::log::SharedLog>> {
            self.$inner.log()
        }
        fn execute_ahead<'a>(
            &'a self,
            ops: &'a [&'a crate::op::Op],
        ) -> crate::store::BoxFuture<'a, Result<(Vec<crate::op::Reply>, u64), crate::store::StoreError>> {
            self.$inner.execute_ahead(ops)
        }
    };
    (@ $inner:ident events) => {
        fn events(
            &self,
            after: crate::event::FeedPosition,
            limit: usize,
        ) -> crate::store::BoxFuture<'_, Result<crate::event::EventPage, crate::store::StoreError>> {
            self.$inner.events(after, limit)
        }
        fn events_before(
            &self,
            before: crate::event::FeedPosition,
            limit: usize,
        ) -> crate::store::BoxFuture<'_, Result<crate::event::EventPage, crate::store::StoreError>> {
            self.$inner.events_before(before, limit)
        }
        fn trim_events(
            &self,
            before: xfer_core::Timestamp,
            limit: usize,
        ) -> crate::store::BoxFuture<'_, Result<usize, crate::store::StoreError>> {
            self.$inner.trim_events(before, limit)
        }
    };
    (@ $inner:ident assets) => {
        fn declare_asset<'a>(
            &'a self,
            asset: &'a xfer_core::Asset,
        ) -> crate::store::BoxFuture<'a, Result<xfer_core::Asset, crate::store::StoreError>> {
            self.$inner.declare_asset(asset)
        }
        fn assets(&self) -> crate::store::BoxFuture<'_, Result<Vec<xfer_core::Asset>, crate::store::StoreError>> {
            self.$inner.assets()
        }
        fn set_account_metadata<'a>(
            &'a self,
            account: &'a xfer_core::AccountId,
            metadata: &'a crate::store::Metadata,
        ) -> crate::store::BoxFuture<'a, Result<(), crate::store::StoreError>> {
            self.$inner.set_account_metadata(account, metadata)
        }
        fn account_metadata<'a>(
            &'a self,
            accounts: &'a [xfer_core::AccountId],
        ) -> crate::store::BoxFuture<'a, Result<Vec<(xfer_core::AccountId, crate::store::Metadata)>, crate::store::StoreError>> {
            self.$inner.account_metadata(accounts)
        }
        fn accounts_with_metadata<'a>(
            &'a self,
            key: &'a str,
            value: &'a str,
            after: Option<&'a xfer_core::AccountId>,
            limit: usize,
        ) -> crate::store::BoxFuture<'a, Result<Vec<(xfer_core::AccountId, crate::store::Metadata)>, crate::store::StoreError>> {
            self.$inner.accounts_with_metadata(key, value, after, limit)
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

    fn log(&self) -> Option<Arc<dyn SharedLog>> {
        (**self).log()
    }

    fn execute_ahead<'a>(
        &'a self,
        ops: &'a [&'a Op],
    ) -> BoxFuture<'a, Result<(Vec<Reply>, u64), StoreError>> {
        (**self).execute_ahead(ops)
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

    fn events(
        &self,
        after: FeedPosition,
        limit: usize,
    ) -> BoxFuture<'_, Result<EventPage, StoreError>> {
        (**self).events(after, limit)
    }

    fn events_before(
        &self,
        before: FeedPosition,
        limit: usize,
    ) -> BoxFuture<'_, Result<EventPage, StoreError>> {
        (**self).events_before(before, limit)
    }

    fn trim_events(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        (**self).trim_events(before, limit)
    }

    fn declare_asset<'a>(&'a self, asset: &'a Asset) -> BoxFuture<'a, Result<Asset, StoreError>> {
        (**self).declare_asset(asset)
    }

    fn assets(&self) -> BoxFuture<'_, Result<Vec<Asset>, StoreError>> {
        (**self).assets()
    }

    fn set_account_metadata<'a>(
        &'a self,
        account: &'a AccountId,
        metadata: &'a Metadata,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).set_account_metadata(account, metadata)
    }

    fn account_metadata<'a>(
        &'a self,
        accounts: &'a [AccountId],
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        (**self).account_metadata(accounts)
    }

    fn accounts_with_metadata<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        (**self).accounts_with_metadata(key, value, after, limit)
    }
}
