//! [`Intercept`]: a [`Store`] that passes every call to an inner store except `execute`,
//! which goes through a hook first. For wrappers that only change how batches are sent
//! (counting them, refusing them), so they need not restate the whole trait.

use crate::op::{Op, Reply};
use crate::store::{BoxFuture, Store, StoreError};

/// The hook: sees each batch and the inner store, and answers for it.
pub type ExecuteHook<S> = Box<
    dyn for<'a> Fn(&'a S, Vec<Op>) -> BoxFuture<'a, Result<Vec<Reply>, StoreError>> + Send + Sync,
>;

/// `inner` with `execute` replaced by `hook`; every other call goes straight to `inner`.
pub struct Intercept<S> {
    inner: S,
    hook: ExecuteHook<S>,
}

impl<S: Store> Intercept<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, hook: ExecuteHook<S>) -> Intercept<S> {
        Intercept { inner, hook }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Store> Store for Intercept<S> {
    fn execute(&self, ops: Vec<Op>) -> BoxFuture<'_, Result<Vec<Reply>, StoreError>> {
        (self.hook)(&self.inner, ops)
    }

    crate::store::forward_to_inner!(inner: scan_due, history, prune, accounts, transfers);
}
