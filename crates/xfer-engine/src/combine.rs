//! Request combining: transfers submitted by concurrent requests are driven together.
//!
//! A request that waits for its outcome with one transfer (the common case: a payment, an
//! order) would otherwise be driven alone: its own pre-check read, then six rounds of one
//! small store call each, every call a lock, a log entry and a wake-up of the committer. Under
//! load, many such requests run at once, so the [`Combiner`] queues them and lets at most
//! `lanes` drives run; a lane takes everything queued (up to `max` transfers) as one batch,
//! so each round is one store call per shard for the whole batch (the store's batching, as
//! for a batch request). A request that arrives while a lane is free is driven at once:
//! combining adds no wait of its own, it only fills the batches that load makes anyway.
//!
//! Each request gets exactly its own transfers' answers, in its order. A transfer id never
//! appears twice in one combined batch: a request naming an id already taken waits for the
//! next batch (two requests racing with one id are answered as they always were: the
//! record's insert decides, and the other is answered from the record). The drive runs in
//! a task of its own (the engine spawns none: the caller gives [`Spawn`]), so a request
//! whose client goes away does not stop the batch it is in.
//!
//! [`Combiner::checked`] drives each batch with [`Executor::submit_checked_ahead`] and
//! waits for the log once per batch: group commit for callers that each submit a few.

use crate::cluster::Cluster;
use crate::error::ExecError;
use crate::executor::Executor;
use crate::machine::Outcome;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;
use xfer_core::{FastSet, TransferId, TransferSpec};
use xfer_store::BoxFuture;

/// Transfers waiting for a lane at most; a request that would queue more is refused with
/// [`ExecError::Busy`] instead of queued without bound.
pub const QUEUED_TRANSFERS_MAX: usize = 65_536;

/// One answer per transfer, in the order given.
pub type Answers = Vec<Result<Outcome, ExecError>>;

/// What drives a combined batch to its outcomes.
pub type Run = Arc<dyn Fn(Vec<TransferSpec>) -> BoxFuture<'static, Answers> + Send + Sync>;

/// Runs a lane's future in a task of its own (`tokio::spawn`, for one).
pub type Spawn = Arc<dyn Fn(BoxFuture<'static, ()>) + Send + Sync>;

/// See the module docs.
pub struct Combiner {
    run: Run,
    spawn: Spawn,
    /// Drives at most this many batches at once.
    lanes: usize,
    /// Puts at most this many transfers in one batch (a request larger than that alone).
    max: usize,
    /// Refuses a request that would queue more transfers than this.
    queued_max: usize,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
    /// The transfers in `waiting`.
    queued: usize,
    /// Lanes running; each takes from `waiting` until it finds it empty.
    running: usize,
}

struct Waiting {
    specs: Vec<TransferSpec>,
    answer: oneshot::Sender<Answers>,
}

impl Combiner {
    /// A combiner that drives batches with `run` in lanes started by `spawn` (see the
    /// fields).
    pub fn new(
        run: Run,
        spawn: Spawn,
        lanes: usize,
        max: usize,
        queued_max: usize,
    ) -> Arc<Combiner> {
        Arc::new(Combiner {
            run,
            spawn,
            lanes: lanes.max(1),
            max: max.max(1),
            queued_max,
            queue: Mutex::default(),
        })
    }

    /// A combiner whose batches are checked and driven by `executor`
    /// ([`Executor::submit_checked_ahead`]), each waiting once for the log. `sync_here`:
    /// the lane syncs the log in its own thread where the store can
    /// ([`Cluster::sync_durable`]), blocking it for one sync, instead of handing the wait to
    /// the store's committer thread and being woken by it: a lane's wait is the critical
    /// path of every request in its batch, and the hand-over costs two thread wake-ups
    /// (`docs/benchmarks.md`, lane-syncs-inline). Only worth it, and only safe, where the
    /// runtime has another thread for everything else.
    pub fn checked(
        executor: Arc<Executor>,
        spawn: Spawn,
        sync_here: bool,
        lanes: usize,
        max: usize,
        queued_max: usize,
    ) -> Arc<Combiner> {
        let run: Run = Arc::new(move |specs| {
            let executor = executor.clone();
            Box::pin(async move {
                let ahead = executor.submit_checked_ahead(specs).await;
                let cluster: &Cluster = executor.cluster();
                let lsn = ahead.lsn();
                let synced = match sync_here.then(|| cluster.sync_durable(lsn)).flatten() {
                    Some(synced) => synced,
                    None => cluster.wait_durable(lsn).await,
                };
                ahead.outcomes(synced)
            })
        });
        Combiner::new(run, spawn, lanes, max, queued_max)
    }

    /// Submits `specs` (waiting for their outcomes), combined with whatever other requests
    /// are queued; answers in the order of `specs`.
    pub async fn submit(self: &Arc<Self>, specs: Vec<TransferSpec>) -> Answers {
        let n = specs.len();
        let (tx, rx) = oneshot::channel();
        let start_lane = {
            let mut q = self.lock();
            if q.queued + n > self.queued_max && !q.waiting.is_empty() {
                let e = ExecError::Busy(format!(
                    "{} transfers are waiting to run; retry shortly",
                    q.queued
                ));
                return vec![Err(e); n];
            }
            q.queued += n;
            q.waiting.push_back(Waiting { specs, answer: tx });
            let start = q.running < self.lanes;
            if start {
                q.running += 1;
            }
            start
        };
        if start_lane {
            let me = Arc::clone(self);
            (self.spawn)(Box::pin(async move { me.lane().await }));
        }
        rx.await.unwrap_or_else(|_| {
            // The lane's task ended without answering: it panicked (a bug). Whether the
            // transfers ran is not known; the sweeper finishes any that started.
            let e = ExecError::Indeterminate(
                "the batch this transfer was driven in failed; retry with the same id".into(),
            );
            vec![Err(e); n]
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .expect("combiner queue poisoned by a panic")
    }

    /// Drives batches until the queue is empty.
    async fn lane(&self) {
        let _running = Lane(self);
        loop {
            let batch = self.take();
            if batch.is_empty() {
                return;
            }
            let mut specs = Vec::with_capacity(batch.iter().map(|w| w.specs.len()).sum());
            let mut sizes = Vec::with_capacity(batch.len());
            let mut txs = Vec::with_capacity(batch.len());
            for w in batch {
                sizes.push(w.specs.len());
                specs.extend(w.specs);
                txs.push(w.answer);
            }
            let mut answers = (self.run)(specs).await.into_iter();
            for (n, tx) in sizes.into_iter().zip(txs) {
                // A request that went away needs no answer.
                let _ = tx.send(answers.by_ref().take(n).collect());
            }
            // A batch may be driven without the lane ever waiting (the embedded store
            // answers at once and the lane syncs in its own thread): let the thread's
            // other tasks, timers and I/O run between batches.
            tokio::task::yield_now().await;
        }
    }

    /// The next batch: queued requests in order, while they fit in `max` transfers and
    /// name no id already taken (the first always); empty (and the lane stopped) if none.
    fn take(&self) -> Vec<Waiting> {
        let mut q = self.lock();
        let mut batch: Vec<Waiting> = Vec::new();
        let mut ids: FastSet<TransferId> = FastSet::default();
        let mut total = 0;
        while let Some(next) = q.waiting.front() {
            let fits = batch.is_empty()
                || (total + next.specs.len() <= self.max
                    && next.specs.iter().all(|s| !ids.contains(&s.id)));
            if !fits {
                break;
            }
            let next = q.waiting.pop_front().expect("front exists");
            q.queued -= next.specs.len();
            total += next.specs.len();
            ids.extend(next.specs.iter().map(|s| s.id.clone()));
            batch.push(next);
        }
        if batch.is_empty() {
            q.running -= 1;
        }
        batch
    }
}

/// Gives a lane's place back if its task ends by a panic (after `take` found the queue
/// empty, `take` already did).
struct Lane<'a>(&'a Combiner);

impl Drop for Lane<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.lock().running -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::Notify;
    use xfer_core::{AccountId, AssetCode, Posting, TransferKind, TransferRecord};

    fn spec(id: &str, amount: u64) -> TransferSpec {
        TransferSpec {
            id: TransferId::new(id).unwrap(),
            postings: vec![Posting {
                from: AccountId::new("a").unwrap(),
                to: AccountId::new("b").unwrap(),
                asset: AssetCode::new("USD", "asset").unwrap(),
                amount: xfer_core::Amount::new(amount, "amount").unwrap(),
            }]
            .into(),
            metadata: String::new(),
            kind: TransferKind::Transfer,
            refund_of: None,
            timeout_ms: 1_000,
        }
    }

    /// Runs record every batch's ids and answer each transfer with its own spec; the first
    /// batch waits for `gate`, so that requests queue behind it.
    struct Recorder {
        batches: Mutex<Vec<Vec<String>>>,
        gate: Notify,
        calls: AtomicUsize,
    }

    fn combiner(lanes: usize, max: usize) -> (Arc<Combiner>, Arc<Recorder>) {
        combiner_queueing(lanes, max, QUEUED_TRANSFERS_MAX)
    }

    fn combiner_queueing(
        lanes: usize,
        max: usize,
        queued_max: usize,
    ) -> (Arc<Combiner>, Arc<Recorder>) {
        let rec = Arc::new(Recorder {
            batches: Mutex::default(),
            gate: Notify::new(),
            calls: AtomicUsize::new(0),
        });
        let r = Arc::clone(&rec);
        let run: Run = Arc::new(move |specs: Vec<TransferSpec>| {
            let r = Arc::clone(&r);
            Box::pin(async move {
                let first = r.calls.fetch_add(1, Ordering::SeqCst) == 0;
                r.batches
                    .lock()
                    .unwrap()
                    .push(specs.iter().map(|s| s.id.to_string()).collect());
                if first {
                    r.gate.notified().await;
                }
                specs
                    .into_iter()
                    .map(|s| {
                        let rec = TransferRecord::accept(s, xfer_core::Timestamp::ZERO, 0);
                        Ok(Outcome::Finished(rec))
                    })
                    .collect()
            })
        });
        (Combiner::new(run, spawn(), lanes, max, queued_max), rec)
    }

    fn ids(a: &Answers) -> Vec<String> {
        a.iter()
            .map(|r| match r {
                Ok(Outcome::Finished(rec)) => rec.spec.id.to_string(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    fn spawn() -> Spawn {
        Arc::new(|f| {
            tokio::spawn(f);
        })
    }

    async fn let_others_run() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    /// Submits `specs` in a task of its own and lets it reach the combiner.
    async fn queue(
        c: &Arc<Combiner>,
        specs: Vec<TransferSpec>,
    ) -> tokio::task::JoinHandle<Answers> {
        let c = Arc::clone(c);
        let h = tokio::spawn(async move { c.submit(specs).await });
        let_others_run().await;
        h
    }

    #[tokio::test]
    async fn requests_queued_behind_a_busy_lane_are_driven_as_one_batch() {
        let (c, rec) = combiner(1, 100);
        let first = queue(&c, vec![spec("t0", 1)]).await;
        let mut later = Vec::new();
        for i in 1..=5 {
            let specs = vec![spec(&format!("t{i}a"), 1), spec(&format!("t{i}b"), 2)];
            later.push(queue(&c, specs).await);
        }
        // Nothing more ran while the first batch held the only lane.
        assert_eq!(rec.batches.lock().unwrap().len(), 1);
        rec.gate.notify_one();
        assert_eq!(ids(&first.await.unwrap()), ["t0"]);
        for (i, h) in later.into_iter().enumerate() {
            let i = i + 1;
            assert_eq!(ids(&h.await.unwrap()), [format!("t{i}a"), format!("t{i}b")]);
        }
        let batches = rec.batches.lock().unwrap().clone();
        assert_eq!(batches.len(), 2, "{batches:?}");
        assert_eq!(
            batches[1].len(),
            10,
            "the five queued requests in one batch"
        );
        let_others_run().await;
        assert_eq!(
            c.lock().running,
            0,
            "the lane stops once the queue is empty"
        );
    }

    #[tokio::test]
    async fn a_batch_holds_at_most_max_transfers_and_never_one_id_twice() {
        let (c, rec) = combiner(1, 3);
        let first = queue(&c, vec![spec("x", 1)]).await;
        let mut later = Vec::new();
        for specs in [
            vec![spec("a", 1), spec("b", 1)],
            vec![spec("a", 1)], // a second time: not with the first
            vec![spec("c", 1)],
            vec![spec("d", 1), spec("e", 1), spec("f", 1), spec("g", 1)], // over max: alone
        ] {
            later.push(queue(&c, specs).await);
        }
        rec.gate.notify_one();
        first.await.unwrap();
        for h in later {
            h.await.unwrap();
        }
        let batches = rec.batches.lock().unwrap().clone();
        assert_eq!(
            batches,
            [
                vec!["x"],
                vec!["a", "b"],
                vec!["a", "c"],
                vec!["d", "e", "f", "g"]
            ]
        );
    }

    /// A lane whose batches never wait (the embedded store answers at once, and the lane
    /// syncs in its own thread) still lets the thread's other tasks run between batches:
    /// each batch starts a task, which has run by the time the next batch is driven.
    #[tokio::test(flavor = "current_thread")]
    async fn a_lane_lets_other_tasks_run_between_batches() {
        let ran = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (r, s) = (Arc::clone(&ran), Arc::clone(&seen));
        let run: Run = Arc::new(move |specs: Vec<TransferSpec>| {
            s.lock().unwrap().push(r.swap(0, Ordering::SeqCst));
            let r = Arc::clone(&r);
            tokio::spawn(async move { r.store(1, Ordering::SeqCst) });
            let answers = specs
                .into_iter()
                .map(|s| {
                    let rec = TransferRecord::accept(s, xfer_core::Timestamp::ZERO, 0);
                    Ok(Outcome::Finished(rec))
                })
                .collect();
            Box::pin(std::future::ready(answers))
        });
        let c = Combiner::new(run, spawn(), 1, 1, QUEUED_TRANSFERS_MAX); // one transfer per batch
        let requests: Vec<_> = (0..3)
            .map(|i| {
                let c = Arc::clone(&c);
                tokio::spawn(async move { c.submit(vec![spec(&format!("t{i}"), 1)]).await })
            })
            .collect();
        for r in requests {
            r.await.unwrap();
        }
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [0, 1, 1],
            "the task a batch started ran before the next"
        );
    }

    #[tokio::test]
    async fn a_request_past_the_queue_bound_is_refused_and_the_queued_ones_run() {
        let (c, rec) = combiner_queueing(1, 100, 4);
        let first = queue(&c, vec![spec("t0", 1)]).await;
        let a = queue(&c, vec![spec("a1", 1), spec("a2", 1)]).await;
        let b = queue(&c, vec![spec("b1", 1), spec("b2", 1)]).await;
        let refused = Arc::clone(&c).submit(vec![spec("c1", 1)]).await;
        let e = refused[0].as_ref().expect_err("refused");
        assert!(matches!(e, ExecError::Busy(_)), "{e:?}");
        rec.gate.notify_one();
        first.await.unwrap();
        assert_eq!(ids(&a.await.unwrap()), ["a1", "a2"]);
        assert_eq!(ids(&b.await.unwrap()), ["b1", "b2"]);
        assert!(rec
            .batches
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .all(|id| id != "c1"));
        // Once the queue drained, requests are taken again.
        assert_eq!(
            ids(&Arc::clone(&c).submit(vec![spec("c1", 1)]).await),
            ["c1"]
        );
    }

    #[tokio::test]
    async fn lanes_run_at_once_up_to_their_number() {
        let (c, rec) = combiner(2, 100);
        let first = queue(&c, vec![spec("t0", 1)]).await;
        // A second lane is free: this request is driven at once, not queued.
        let second = Arc::clone(&c).submit(vec![spec("t1", 1)]).await;
        assert_eq!(ids(&second), ["t1"]);
        assert_eq!(rec.batches.lock().unwrap().len(), 2);
        rec.gate.notify_one();
        first.await.unwrap();
    }
}
