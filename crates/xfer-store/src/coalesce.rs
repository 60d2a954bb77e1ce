//! [`Coalesce`]: many concurrent `execute` calls to one shard become one batch.
//!
//! At most `max_in_flight` calls to the inner store run at once. A call that arrives while
//! they are all busy waits in a queue; when a running call ends, the first waiter takes the
//! whole queue and sends it as one batch, then hands each caller its own replies. Under
//! load this is group commit on the client side: one round trip (one log entry and one
//! fsync for the embedded store, one statement for SQL, one pipeline for Redis) carries the
//! steps of every transfer in flight, so per-call costs stop scaling with concurrency.
//!
//! [`Store::execute_ahead`] is not merged: it answers without waiting for a sync, so it
//! goes straight to the inner store.
//!
//! It changes no guarantee: a store promises each op atomic on its record and nothing across
//! ops, so merging batches is invisible; a failed merged call fails every caller in it with
//! the same error (`Unavailable`: none applied; `Indeterminate`: any of them may have been).

use crate::op::{Op, Reply};
use crate::store::{BoxFuture, Store, StoreError};
use futures_channel::oneshot;
use std::sync::{Arc, Mutex};

type Answer = Result<Vec<Reply>, StoreError>;

enum Turn {
    /// Your ops were sent as part of another caller's batch: here are your replies.
    Done(Answer),
    /// Lead: send your ops and everything queued behind them.
    Lead(Lead),
}

struct Waiter {
    ops: Vec<Op>,
    tx: oneshot::Sender<Turn>,
}

#[derive(Default)]
struct State {
    running: usize,
    queue: Vec<Waiter>,
}

type Shared = Arc<Mutex<State>>;

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().expect("coalesce state poisoned by a panic")
}

/// The right to send the next batch: the queue taken, and a running slot. If it is dropped
/// unused (its receiver gave up), the queued callers are told nothing was sent and the
/// slot passes on.
struct Lead {
    state: Shared,
    /// The leader's own ops (it queued them), sent first.
    own: Vec<Op>,
    queue: Vec<Waiter>,
    armed: bool,
}

impl Drop for Lead {
    fn drop(&mut self) {
        if self.armed {
            for w in self.queue.drain(..) {
                let _ = w.tx.send(Turn::Done(Err(StoreError::Unavailable(
                    "the caller that was to send this batch gave up; nothing was sent".into(),
                ))));
            }
            finish(&self.state);
        }
    }
}

/// One merged batch in flight: the callers to answer. Whatever happens to the future
/// carrying it (done or dropped), the callers are answered and the slot passes on.
struct InFlight {
    state: Shared,
    spans: Vec<(usize, oneshot::Sender<Turn>)>,
}

impl InFlight {
    /// Splits the merged replies among the callers; answers the carrier's own (`own_len`).
    fn answer(mut self, result: Answer, own_len: usize) -> Answer {
        let spans = std::mem::take(&mut self.spans);
        match result {
            Ok(mut replies) => {
                let mut rest = replies.split_off(own_len.min(replies.len()));
                for (n, tx) in spans {
                    let tail = rest.split_off(n.min(rest.len()));
                    // A caller that gave up needs no answer.
                    let _ = tx.send(Turn::Done(Ok(std::mem::replace(&mut rest, tail))));
                }
                Ok(replies)
            }
            Err(e) => {
                for (_, tx) in spans {
                    let _ = tx.send(Turn::Done(Err(e.clone())));
                }
                Err(e)
            }
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        for (_, tx) in self.spans.drain(..) {
            let _ = tx.send(Turn::Done(Err(StoreError::Indeterminate(
                "the caller carrying this batch gave up while it was in flight".into(),
            ))));
        }
        finish(&self.state);
    }
}

/// A running call ended: hand the queue to its first waiter, or free the slot.
fn finish(state: &Shared) {
    let mut st = lock(state);
    loop {
        if st.queue.is_empty() {
            st.running -= 1;
            return;
        }
        let mut queue = std::mem::take(&mut st.queue);
        let Waiter { ops, tx } = queue.remove(0);
        let lead = Lead {
            state: state.clone(),
            own: ops,
            queue,
            armed: true,
        };
        match tx.send(Turn::Lead(lead)) {
            Ok(()) => return,
            Err(Turn::Lead(mut back)) => {
                // That caller gave up before its turn: its ops are dropped, unsent.
                back.armed = false;
                st.queue = std::mem::take(&mut back.queue);
            }
            Err(Turn::Done(_)) => unreachable!("only Lead was sent"),
        }
    }
}

/// A [`Store`] that merges concurrent `execute` calls. See the module docs.
pub struct Coalesce<S> {
    inner: S,
    max_in_flight: usize,
    state: Shared,
}

impl<S: Store> Coalesce<S> {
    /// Wraps `inner`, running at most `max_in_flight` (at least 1) calls on it at once.
    pub fn new(inner: S, max_in_flight: usize) -> Coalesce<S> {
        Coalesce {
            inner,
            max_in_flight: max_in_flight.max(1),
            state: Shared::default(),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Sends `own` followed by the queued callers' ops as one call.
    async fn send(&self, own: Vec<Op>, others: Vec<Waiter>) -> Answer {
        let own_len = own.len();
        let mut ops = own;
        let mut flight = InFlight {
            state: self.state.clone(),
            spans: Vec::with_capacity(others.len()),
        };
        for w in others {
            flight.spans.push((w.ops.len(), w.tx));
            ops.extend(w.ops);
        }
        let result = self.inner.execute(ops).await;
        flight.answer(result, own_len)
    }
}

impl<S: Store> Store for Coalesce<S> {
    fn execute(&self, ops: Vec<Op>) -> BoxFuture<'_, Result<Vec<Reply>, StoreError>> {
        Box::pin(async move {
            let rx = {
                let mut st = lock(&self.state);
                if st.running < self.max_in_flight {
                    st.running += 1;
                    Err(ops)
                } else {
                    let (tx, rx) = oneshot::channel();
                    st.queue.push(Waiter { ops, tx });
                    Ok(rx)
                }
            };
            let rx = match rx {
                Ok(rx) => rx,
                Err(ops) => return self.send(ops, Vec::new()).await,
            };
            match rx.await {
                Ok(Turn::Done(answer)) => answer,
                Ok(Turn::Lead(mut lead)) => {
                    // From here the slot is carried by `send`'s in-flight guard.
                    lead.armed = false;
                    let own = std::mem::take(&mut lead.own);
                    let queue = std::mem::take(&mut lead.queue);
                    drop(lead);
                    self.send(own, queue).await
                }
                Err(_) => Err(StoreError::Unavailable(
                    "coalesced batch dropped before it was sent".into(),
                )),
            }
        })
    }

    // Pending calls go straight through: they do not wait for a sync, so there is no
    // round trip to share, and the log's committer already covers many in one fsync.
    crate::store::forward_to_inner!(inner: ahead, scan_due, history, prune, accounts, transfers, events, assets);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::AccountOp;
    use crate::shard::MemoryStore;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use xfer_core::{AccountId, AssetCode, LowerBound, ManualClock, Timestamp};

    /// Counts calls and holds each one until released, so that callers pile up.
    struct Slow {
        inner: MemoryStore,
        calls: AtomicUsize,
    }

    impl Store for Slow {
        fn execute(&self, ops: Vec<Op>) -> BoxFuture<'_, Result<Vec<Reply>, StoreError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                // Yield a few times: other callers run meanwhile and queue up.
                for _ in 0..10 {
                    tokio::task::yield_now().await;
                }
                self.inner.execute(ops).await
            })
        }
        crate::store::forward_to_inner!(inner: scan_due, history, prune, accounts, transfers, events, assets);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn concurrent_calls_share_batches_and_each_gets_its_own_replies() {
        let store = Arc::new(Coalesce::new(
            Slow {
                inner: MemoryStore::new(Arc::new(ManualClock::at(Timestamp(1)))),
                calls: AtomicUsize::new(0),
            },
            1,
        ));
        let usd = AssetCode::new("USD", "asset").unwrap();
        let mut tasks = Vec::new();
        for i in 0..50 {
            let (store, usd) = (store.clone(), usd.clone());
            tasks.push(tokio::spawn(async move {
                let id = AccountId::new(&format!("a{i}")).unwrap();
                let create = Op::Account(
                    id.clone(),
                    AccountOp::Create {
                        asset: usd,
                        lower_bound: LowerBound::Bounded(0),
                    },
                );
                let replies = store
                    .execute(vec![create, Op::Account(id.clone(), AccountOp::Get)])
                    .await
                    .unwrap();
                (id, replies)
            }));
        }
        for t in tasks {
            let (id, replies) = t.await.unwrap();
            assert_eq!(replies.len(), 2, "{id}: one reply per op");
            for r in replies {
                match r {
                    Reply::Account(a) => assert_eq!(a.id, id, "replies go to their caller"),
                    other => panic!("{id}: {other}"),
                }
            }
        }
        let calls = store.inner().calls.load(Ordering::SeqCst);
        assert!(calls < 10, "50 concurrent callers made {calls} calls");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_conformance_suite_passes_through_it() {
        crate::conformance::run_all(|| {
            Coalesce::new(
                MemoryStore::new(Arc::new(ManualClock::at(Timestamp(10_000)))),
                1,
            )
        })
        .await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn callers_that_give_up_never_wedge_the_others() {
        let store = Arc::new(Coalesce::new(
            Slow {
                inner: MemoryStore::new(Arc::new(ManualClock::at(Timestamp(1)))),
                calls: AtomicUsize::new(0),
            },
            1,
        ));
        let get = || vec![Op::Account(AccountId::new("x").unwrap(), AccountOp::Get)];
        // A carrier aborted in flight, then a queued caller aborted before its turn.
        let carrier = tokio::spawn({
            let s = store.clone();
            async move { s.execute(get()).await }
        });
        tokio::task::yield_now().await;
        let queued = tokio::spawn({
            let s = store.clone();
            async move { s.execute(get()).await }
        });
        let patient = tokio::spawn({
            let s = store.clone();
            async move { s.execute(get()).await }
        });
        tokio::task::yield_now().await;
        carrier.abort();
        queued.abort();
        let answer = patient.await.unwrap();
        assert!(
            matches!(
                answer,
                Ok(_) | Err(StoreError::Indeterminate(_)) | Err(StoreError::Unavailable(_))
            ),
            "{answer:?}"
        );
        // The slot was handed on: a later call goes through.
        assert!(store.execute(get()).await.is_ok());
    }
}
