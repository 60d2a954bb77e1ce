//! [`Faulty`]: a [`Store`] wrapper that fails on purpose, to test that callers survive what
//! real networks and databases do: refuse a call outright (nothing applied), or apply some
//! prefix of a batch and lose the reply (the caller cannot tell how much happened).
//! Deterministic: the same seed fails the same calls.

use crate::op::{Op, Reply};
use crate::store::{BoxFuture, Store, StoreError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use xfer_core::{Rng, Timestamp, TransferRecord};

/// How often to fail, in calls per million.
#[derive(Clone, Copy, Debug, Default)]
pub struct FaultPlan {
    /// Fail before applying anything: [`StoreError::Unavailable`].
    pub unavailable_per_million: u32,
    /// Apply a random prefix of the batch (possibly all of it), then answer
    /// [`StoreError::Indeterminate`].
    pub reply_lost_per_million: u32,
}

/// Counts of the faults injected so far.
#[derive(Debug, Default)]
pub struct FaultCounts {
    /// Calls refused before applying anything.
    pub unavailable: AtomicU64,
    /// Calls whose reply was lost after a prefix was applied.
    pub reply_lost: AtomicU64,
}

/// Wraps `S`, failing calls as its [`FaultPlan`] says.
pub struct Faulty<S> {
    inner: S,
    plan: FaultPlan,
    rng: Mutex<Rng>,
    /// What was injected.
    pub counts: FaultCounts,
}

impl<S: Store> Faulty<S> {
    /// Wraps `inner`; `seed` decides which calls fail.
    pub fn new(inner: S, plan: FaultPlan, seed: u64) -> Faulty<S> {
        Faulty {
            inner,
            plan,
            rng: Mutex::new(Rng::new(seed)),
            counts: FaultCounts::default(),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn roll(&self, per_million: u32) -> bool {
        self.rng.lock().expect("rng lock").chance(per_million)
    }
}

impl<S: Store> Store for Faulty<S> {
    fn execute(&self, ops: Vec<Op>) -> BoxFuture<'_, Result<Vec<Reply>, StoreError>> {
        if self.roll(self.plan.unavailable_per_million) {
            self.counts.unavailable.fetch_add(1, Ordering::Relaxed);
            return Box::pin(std::future::ready(Err(StoreError::Unavailable(
                "injected".into(),
            ))));
        }
        if self.roll(self.plan.reply_lost_per_million) {
            self.counts.reply_lost.fetch_add(1, Ordering::Relaxed);
            let keep = self
                .rng
                .lock()
                .expect("rng lock")
                .range(0, ops.len() as u64) as usize;
            let prefix: Vec<Op> = ops.into_iter().take(keep).collect();
            return Box::pin(async move {
                let _ = self.inner.execute(prefix).await;
                Err(StoreError::Indeterminate("injected: reply lost".into()))
            });
        }
        self.inner.execute(ops)
    }

    fn scan_due(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<TransferRecord>, StoreError>> {
        if self.roll(self.plan.unavailable_per_million) {
            self.counts.unavailable.fetch_add(1, Ordering::Relaxed);
            return Box::pin(std::future::ready(Err(StoreError::Unavailable(
                "injected".into(),
            ))));
        }
        self.inner.scan_due(now, limit)
    }

    crate::store::forward_to_inner!(inner: history, prune, accounts, transfers, events, assets);
}
