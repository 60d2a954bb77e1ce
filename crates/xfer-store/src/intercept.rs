//! [`Intercept`]: a [`Store`] that passes every call to an inner store except `execute`,
//! which goes through a hook first. For wrappers that only change how batches are sent
//! (counting them, refusing them), so they need not restate the whole trait.
//!
//! [`Store::execute_ahead`] goes through a second hook if one is given
//! ([`Intercept::with_ahead`]); without one the wrapper answers only what is durable (no
//! log), so nothing the inner store answers early can bypass the hook.

use crate::log::SharedLog;
use crate::op::{Op, Reply};
use crate::store::{answered_durable, BoxFuture, Store, StoreError};
use std::sync::Arc;

/// The hook: sees each batch and the inner store, and answers for it.
pub type ExecuteHook<S> = Box<
    dyn for<'a> Fn(&'a S, Vec<Op>) -> BoxFuture<'a, Result<Vec<Reply>, StoreError>> + Send + Sync,
>;

/// The hook for [`Store::execute_ahead`]: answers the replies and the LSN.
pub type AheadHook<S> = Box<
    dyn for<'a> Fn(&'a S, &'a [&'a Op]) -> BoxFuture<'a, Result<(Vec<Reply>, u64), StoreError>>
        + Send
        + Sync,
>;

/// `inner` with `execute` replaced by `hook`; every other call goes straight to `inner`.
pub struct Intercept<S> {
    inner: S,
    hook: ExecuteHook<S>,
    ahead: Option<AheadHook<S>>,
}

impl<S: Store> Intercept<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, hook: ExecuteHook<S>) -> Intercept<S> {
        Intercept {
            inner,
            hook,
            ahead: None,
        }
    }

    /// Also sends [`Store::execute_ahead`] through `ahead` (and so takes the inner
    /// store's log).
    pub fn with_ahead(mut self, ahead: AheadHook<S>) -> Intercept<S> {
        self.ahead = Some(ahead);
        self
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

    fn log(&self) -> Option<Arc<dyn SharedLog>> {
        self.ahead.as_ref().and_then(|_| self.inner.log())
    }

    fn execute_ahead<'a>(
        &'a self,
        ops: &'a [&'a Op],
    ) -> BoxFuture<'a, Result<(Vec<Reply>, u64), StoreError>> {
        match &self.ahead {
            Some(hook) => hook(&self.inner, ops),
            None => answered_durable(self.execute(Op::copies(ops))),
        }
    }

    crate::store::forward_to_inner!(inner: scan_due, history, prune, accounts, transfers, events, assets);
}
