//! [`Committer`]: group commit. Callers wait for their LSN; one thread syncs the log for
//! all of them. [`sync_here`] makes a point durable in the caller's own thread instead.
//!
//! The waiters are bounded ([`WAITERS_MAX`]): past the bound a caller syncs in its own
//! thread, which holds it back for one sync instead of queueing without end.

use crate::fs::Fs;
use crate::shared::Shared;
use futures_channel::oneshot;
use std::sync::{Condvar, Mutex, MutexGuard};
use xfer_store::StoreError;

/// The most callers that wait for the committer at once.
pub(crate) const WAITERS_MAX: usize = 65_536;

/// Group commit: callers wait for their LSN; one thread syncs for all of them.
#[derive(Default)]
struct CommitState {
    waiters: Vec<(u64, oneshot::Sender<Result<(), String>>)>,
    /// The committer has stopped: wait inline instead.
    stopped: bool,
    /// The committer sleeps on the condvar (only then is a wake-up worth a syscall).
    idle: bool,
    shutdown: bool,
}

/// The waiters and the committer thread's wake-up. See the module docs.
pub(crate) struct Committer {
    state: Mutex<CommitState>,
    wake: Condvar,
    waiters_max: usize,
}

impl Default for Committer {
    fn default() -> Self {
        Committer::bounded(WAITERS_MAX)
    }
}

impl Committer {
    /// A committer that queues at most `waiters_max` waiters.
    pub(crate) fn bounded(waiters_max: usize) -> Committer {
        Committer {
            state: Mutex::default(),
            wake: Condvar::new(),
            waiters_max,
        }
    }

    fn lock(&self) -> MutexGuard<'_, CommitState> {
        self.state.lock().expect("commit state poisoned by a panic")
    }

    /// Waits until `lsn` is durable.
    pub(crate) async fn durable<F: Fs>(
        &self,
        shared: &Shared<F>,
        lsn: u64,
    ) -> Result<(), StoreError> {
        if lsn < shared.log.durable_lsn() {
            return Ok(());
        }
        let rx = {
            let mut st = self.lock();
            if st.stopped || st.waiters.len() >= self.waiters_max {
                drop(st);
                return sync_here(shared, lsn);
            }
            let (tx, rx) = oneshot::channel();
            st.waiters.push((lsn, tx));
            if st.idle {
                st.idle = false;
                self.wake.notify_one();
            }
            rx
        };
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(StoreError::Indeterminate(format!("embedded log: {why}"))),
            Err(_) => Err(StoreError::Indeterminate(
                "embedded store closed while waiting for the log".into(),
            )),
        }
    }

    /// The committer: syncs the log up to the highest LSN anyone waits for, then answers
    /// every waiter it covered. Waiters arriving during a sync share the next one.
    ///
    /// It syncs for waiters only, never ahead of them: an entry answered ahead of the sync is made
    /// durable by the first sync anyone waits for after it was appended. Syncing every
    /// such entry as it came would spend a sync on points nobody waits for yet, and a
    /// sync costs CPU here (`docs/benchmarks.md`).
    pub(crate) fn run<F: Fs>(&self, shared: &Shared<F>) {
        loop {
            let waiters = {
                let mut st = self.lock();
                while st.waiters.is_empty() && !st.shutdown {
                    st.idle = true;
                    st = self
                        .wake
                        .wait(st)
                        .expect("commit state poisoned by a panic");
                }
                st.idle = false;
                if st.waiters.is_empty() && st.shutdown {
                    st.stopped = true;
                    return;
                }
                std::mem::take(&mut st.waiters)
            };
            let target = waiters.iter().map(|(l, _)| *l).max().unwrap_or(0);
            let result = shared.log.sync(target).map_err(|e| e.to_string());
            if let Err(why) = &result {
                shared.fail(why.clone());
            }
            for (_, tx) in waiters {
                // A waiter that gave up (its future dropped) needs no answer.
                let _ = tx.send(result.clone());
            }
        }
    }

    /// Tells the committer to stop once no one waits.
    pub(crate) fn shutdown(&self) {
        self.lock().shutdown = true;
        self.wake.notify_all();
    }
}

/// Makes `lsn` durable in the calling thread: leads the log's next group commit, or waits
/// for the one under way (the committer's, or another caller's) and then leads.
pub(crate) fn sync_here<F: Fs>(shared: &Shared<F>, lsn: u64) -> Result<(), StoreError> {
    if lsn < shared.log.durable_lsn() {
        return Ok(());
    }
    shared.log.sync(lsn).map_err(|e| {
        shared.fail(e.to_string());
        StoreError::Indeterminate(format!("embedded log: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{one_shard, one_usd_a_to_b};
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};
    use xfer_store::{Op, TransferOp};

    fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn past_its_bound_a_waiter_syncs_in_its_own_thread() {
        let dir = tempfile::tempdir().unwrap();
        let (_store, shard) = one_shard(dir.path());
        let op = Op::Transfer(
            xfer_core::TransferId::new("t1").unwrap(),
            TransferOp::Insert(std::sync::Arc::new(xfer_core::TransferRecord::accept(
                one_usd_a_to_b("t1"),
                xfer_core::Timestamp(1),
                0,
            ))),
        );
        let (_, lsn) = shard.execute_now(&[op]).unwrap();
        let shared = &shard.inner.shared;
        assert!(lsn >= shared.log.durable_lsn(), "not durable yet");
        // A committer whose thread never runs: its two places fill and stay waiting.
        let committer = Committer::bounded(2);
        let mut first = pin!(committer.durable(shared, lsn));
        let mut second = pin!(committer.durable(shared, lsn));
        assert!(poll_once(first.as_mut()).is_pending());
        assert!(poll_once(second.as_mut()).is_pending());
        assert_eq!(committer.lock().waiters.len(), 2);
        // The third does not queue: it syncs here and is answered at once.
        let third = pin!(committer.durable(shared, lsn));
        assert!(matches!(poll_once(third), Poll::Ready(Ok(()))));
        assert_eq!(committer.lock().waiters.len(), 2);
        assert!(lsn < shared.log.durable_lsn(), "durable now");
    }
}
