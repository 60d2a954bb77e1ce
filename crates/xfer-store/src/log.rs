//! [`SharedLog`]: the one log that several shards append to in one order, as a handle of
//! its own.
//!
//! A store whose shards all append to one log (the embedded store) answers
//! [`Store::execute_ahead`](crate::Store::execute_ahead) as soon as the ops are applied
//! and appended, before the log is synced, with the LSN the answers rest on. A crash
//! keeps a prefix of that log, so whatever an answer led to (the next step, on any shard of
//! the same log) is appended after what it depended on and can never survive without it.
//! What leaves the log (an outcome told to a client, a decision reported) waits for the
//! LSN to be durable, through this handle.

use crate::error::{BoxFuture, StoreError};
use std::sync::Arc;

/// A log shared by shards: how far it is durable, and the waits for it.
pub trait SharedLog: Send + Sync {
    /// Waits until the log is durable up to `lsn`; an error means it may never be (the
    /// answers that carried the LSN must not be acknowledged). LSN 0 is durable.
    fn wait_durable(&self, lsn: u64) -> BoxFuture<'_, Result<(), StoreError>>;

    /// True if the log is durable up to `lsn` now (no wait).
    fn is_durable(&self, lsn: u64) -> bool;

    /// As [`SharedLog::wait_durable`], but syncing in the calling thread, which it blocks,
    /// where the log can; `None` where it cannot (then wait with `wait_durable`). For a
    /// caller whose wait is the critical path of many others: a wait handed to another
    /// thread costs that thread's wake-up and then the caller's.
    fn sync_durable(&self, lsn: u64) -> Option<Result<(), StoreError>> {
        let _ = lsn;
        None
    }
}

/// True if `a` and `b` are handles of the same log (the same allocation).
pub fn same_log(a: &Arc<dyn SharedLog>, b: &Arc<dyn SharedLog>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}
