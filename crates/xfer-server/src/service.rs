//! [`Service`]: what the HTTP handlers call, in the engine's terms: results and
//! [`ExecError`]s, no HTTP status (`api.rs` decides those). It owns the executor
//! (transfers driven in the request's task), the combiner, the sweeper loop, the metrics and
//! the transfers answered "accepted" that still run in the background.
//!
//! Submitting is the engine's checked submit ([`Executor::submit_checked_ahead`]): bad
//! input changes nothing, a resubmitted id is answered from its record, and nothing is
//! answered before the log is durable under it.

pub use crate::answer::Answer;
use crate::catalog::CatalogCache;
use crate::metrics::{Metrics, Stopwatch};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;
use tracing::Instrument;
use xfer_core::{
    Account, AccountId, AccountStatus, Code, Rejection, TransferId, TransferRecord, TransferSpec,
};
use xfer_engine::combine::QUEUED_TRANSFERS_MAX;
use xfer_engine::{Cluster, Combiner, ExecError, Executor, Outcome, Spawn, Sweeper};
use xfer_store::{AccountOp, Op, Reply, TransferOp};

/// Transfers answered "accepted" and driven in the background at most; a `?wait=false`
/// request that would start more is refused with `503 overloaded` before anything is
/// written (what is accepted always runs).
pub const BACKGROUND_TRANSFERS_MAX: usize = 262_144;

/// Background drives of transfers answered "accepted".
struct Background {
    /// The most transfers they may hold ([`BACKGROUND_TRANSFERS_MAX`]).
    limit: usize,
    running: AtomicUsize,
    /// Transfers those drives hold.
    transfers: AtomicUsize,
    idle: Notify,
}

impl Background {
    fn new(limit: usize) -> Arc<Background> {
        Arc::new(Background {
            limit,
            running: AtomicUsize::new(0),
            transfers: AtomicUsize::new(0),
            idle: Notify::new(),
        })
    }
}

/// Places among the background's transfers taken by one request, given back when dropped.
struct Reserved<'a> {
    background: &'a Background,
    n: AtomicUsize,
}

impl<'a> Reserved<'a> {
    fn none(background: &'a Background) -> Reserved<'a> {
        Reserved {
            background,
            n: AtomicUsize::new(0),
        }
    }

    /// Takes `n` places, or refuses if the background is full (one request alone may
    /// always go, however large).
    fn take(&self, n: usize) -> Result<(), ExecError> {
        let b = self.background;
        let held = b.transfers.fetch_add(n, Ordering::AcqRel);
        if held + n > b.limit && held > 0 {
            b.transfers.fetch_sub(n, Ordering::AcqRel);
            return Err(ExecError::Busy(format!(
                "{held} accepted transfers are running, the limit is {}; retry shortly",
                b.limit
            )));
        }
        self.n.fetch_add(n, Ordering::AcqRel);
        Ok(())
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        let n = *self.n.get_mut();
        self.background.transfers.fetch_sub(n, Ordering::AcqRel);
    }
}

/// The service behind the API. See the module docs.
pub struct Service {
    sweeper: Sweeper,
    executor: Arc<Executor>,
    metrics: Arc<Metrics>,
    background: Arc<Background>,
    /// Small requests that wait for their outcome, driven together
    /// ([`xfer_engine::combine`]).
    combiner: Arc<Combiner>,
    ready: AtomicBool,
    stuck_after_ms: u64,
    /// The declared assets as last read (`listings.rs` reads and declares them).
    catalog: CatalogCache,
}

/// Drives at most this many combined batches at once. One: while it drives, the requests
/// that arrive queue into the next batch, and the HTTP work of the others keeps the cores
/// busy (`docs/benchmarks.md#combiner`).
pub const COMBINE_LANES: usize = 1;

/// Requests of at most this many transfers are combined; larger ones are batches already.
pub const COMBINE_REQUEST_MAX: usize = 16;

/// Combined batches hold at most this many transfers.
pub const COMBINE_BATCH_MAX: usize = 512;

impl Service {
    /// A service over `executor` (API requests) and `sweeper` (its own executor).
    pub fn new(
        executor: Executor,
        sweeper: Sweeper,
        metrics: Arc<Metrics>,
        stuck_after_ms: u64,
    ) -> Service {
        let executor = Arc::new(executor);
        // With one runtime thread, a sync in it would stop every connection.
        let sync_here =
            tokio::runtime::Handle::try_current().is_ok_and(|h| h.metrics().num_workers() > 1);
        let spawn: Spawn = Arc::new(|lane| {
            tokio::spawn(lane);
        });
        let combiner = Combiner::checked(
            executor.clone(),
            spawn,
            sync_here,
            COMBINE_LANES,
            COMBINE_BATCH_MAX,
            QUEUED_TRANSFERS_MAX,
        );
        Service {
            sweeper,
            executor,
            metrics,
            background: Background::new(BACKGROUND_TRANSFERS_MAX),
            combiner,
            ready: AtomicBool::new(false),
            stuck_after_ms,
            catalog: CatalogCache::default(),
        }
    }

    /// The same service with room for `limit` background transfers.
    #[cfg(test)]
    fn with_background_max(mut self, limit: usize) -> Service {
        self.background = Background::new(limit);
        self
    }

    /// The executor.
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// The shards.
    pub fn cluster(&self) -> &Cluster {
        self.executor.cluster()
    }

    /// The declared assets as last read.
    pub fn catalog_cache(&self) -> &CatalogCache {
        &self.catalog
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// True once the first sweep (recovery of what a previous run left) has finished.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The clock's now.
    pub fn now(&self) -> xfer_core::Timestamp {
        self.executor.clock().now()
    }

    /// One sweep: finish abandoned transfers, drop old tombstones, count the stuck.
    pub async fn sweep(&self) {
        let report = self.sweeper.pass().await;
        self.metrics.sweep(report.finished, report.pruned);
        for (id, e) in &report.failed {
            tracing::warn!(transfer_id = %id, error = %e, "sweeper could not finish transfer");
        }
        for (shard, e) in &report.shard_errors {
            tracing::warn!(shard, error = %e, "sweeper could not scan shard");
        }
        // Once per transfer: sweepers leave it alone from now on.
        for (id, e) in &report.escalated {
            tracing::error!(
                transfer_id = %id,
                attempts = e.attempts,
                error = %e.error,
                "transfer escalated: its recovery keeps failing; fix it, then re-drive it"
            );
        }
        if report.finished > 0 {
            tracing::info!(
                finished = report.finished,
                "sweeper finished abandoned transfers"
            );
        }
        if let Ok(stuck) = self.stuck(usize::MAX >> 1).await {
            self.metrics.set_stuck(stuck.len());
            let escalated = stuck.iter().filter(|r| r.escalation.is_some()).count();
            self.metrics.set_escalated(escalated);
        }
        // Declarations made by other processes reach this one's answers within a pass.
        if let Err(e) = self.read_assets().await {
            tracing::warn!(error = %e, "could not read the asset catalog");
        }
        self.ready.store(true, Ordering::Release);
    }

    /// Unfinished transfers whose owner lapsed more than `stuck_after_ms` ago (or, for a
    /// hold, whose expiry passed that long ago), and the escalated ones once their lease
    /// lapsed, earliest first.
    pub async fn stuck(&self, limit: usize) -> Result<Vec<TransferRecord>, ExecError> {
        let before = self.now().minus_ms(self.stuck_after_ms);
        let mut all = Vec::new();
        for shard in self.cluster().shards() {
            // Escalated transfers are stuck as soon as they are due; others after a while.
            let due = shard
                .scan_due(self.now(), limit)
                .await
                .map_err(|e| ExecError::Unavailable(format!("scan: {e}")))?;
            all.extend(
                due.into_iter()
                    .filter(|r| r.escalation.is_some() || r.wake_at().is_some_and(|w| w <= before)),
            );
        }
        all.sort_by_key(|r| r.wake_at());
        all.truncate(limit);
        Ok(all)
    }

    /// Why `r`, listed by [`Service::stuck`], is stuck, as of `now`.
    pub fn why_stuck(r: &TransferRecord, now: xfer_core::Timestamp) -> String {
        if let Some(e) = &r.escalation {
            return format!(
                "{} and escalated {} ms ago after {} failed recoveries, sweepers leave it alone until it is re-driven; last error: {}",
                r.state,
                now.as_ms().saturating_sub(e.at.as_ms()),
                e.attempts,
                e.error
            );
        }
        match (r.state, r.hold_expires_at) {
            (xfer_core::TransferState::Held, Some(at)) => format!(
                "hold expired {} ms ago and was not voided yet",
                now.as_ms().saturating_sub(at.as_ms())
            ),
            _ => format!(
                "{} since {} ms ago: owner {} lapsed and no sweeper finished it",
                r.state,
                now.as_ms().saturating_sub(r.updated_at.as_ms()),
                r.owner
                    .as_ref()
                    .map_or("(none)".to_string(), |o| o.to_string()),
            ),
        }
    }

    /// Submits transfers (see the module docs). `wait`: drive them to their outcome before
    /// answering; otherwise answer once each is durably inserted and drive it in the
    /// background. Results in the order of `specs`. Small requests that wait are driven
    /// together with the others queued at the same time ([`xfer_engine::combine`]).
    pub async fn submit(
        &self,
        specs: Vec<TransferSpec>,
        wait: bool,
    ) -> Vec<Result<Answer, ExecError>> {
        let watch = Stopwatch::start();
        let n = specs.len();
        let answers: Vec<Result<Answer, ExecError>> = if wait {
            let span = match specs.as_slice() {
                [one] => tracing::info_span!("transfer", transfer_id = %one.id),
                _ => tracing::info_span!("transfers", count = n),
            };
            self.metrics.in_flight(n as i64);
            let outcomes = if n <= COMBINE_REQUEST_MAX {
                self.combiner.submit(specs).instrument(span).await
            } else {
                self.executor.submit_checked(specs).instrument(span).await
            };
            self.metrics.in_flight(-(n as i64));
            outcomes.into_iter().map(answer).collect()
        } else {
            self.accept(specs).await
        };
        for a in &answers {
            let label = match a {
                Ok(Answer::Accepted(_)) => "accepted",
                Ok(a) => a.record().state.as_str(),
                Err(ExecError::Rejected(_)) => "rejected",
                Err(_) => "failed",
            };
            self.metrics.transfer(label, watch.seconds());
        }
        answers
    }

    /// Checks and inserts each transfer (durably) and drives the unfinished ones in a
    /// background task.
    async fn accept(&self, specs: Vec<TransferSpec>) -> Vec<Result<Answer, ExecError>> {
        // Places among the background's for the transfers that pass the check, taken before
        // they are written and held for as long as this runs (a drive started holds its
        // own), so that concurrent requests cannot all pass at once.
        let reserved = Reserved::none(&self.background);
        let admit = |n| reserved.take(n);
        let records = self.executor.insert_checked(&specs, &admit).await;
        let run: Vec<TransferSpec> = specs
            .into_iter()
            .zip(&records)
            .filter(|(_, r)| r.as_ref().is_ok_and(|r| !r.state.is_terminal()))
            .map(|(s, _)| s)
            .collect();
        if !run.is_empty() {
            self.spawn_background(run);
        }
        records
            .into_iter()
            .map(|r| r.map(|r| Answer::Accepted(Box::new(r))))
            .collect()
    }

    fn spawn_background(&self, specs: Vec<TransferSpec>) {
        let executor = self.executor.clone();
        let metrics = self.metrics.clone();
        let background = self.background.clone();
        background.running.fetch_add(1, Ordering::AcqRel);
        let count = specs.len();
        background.transfers.fetch_add(count, Ordering::AcqRel);
        let n = specs.len() as i64;
        metrics.in_flight(n);
        let span = tracing::info_span!("accepted", count = specs.len());
        tokio::spawn(
            async move {
                let ids: Vec<TransferId> = specs.iter().map(|s| s.id.clone()).collect();
                for (id, r) in ids.into_iter().zip(executor.submit_many(specs).await) {
                    if let Err(e) = r {
                        // The sweeper finishes it: nothing acknowledged is lost.
                        tracing::warn!(transfer_id = %id, error = %e, "left to the sweeper");
                    }
                }
                metrics.in_flight(-n);
                background.transfers.fetch_sub(count, Ordering::AcqRel);
                if background.running.fetch_sub(1, Ordering::AcqRel) == 1 {
                    background.idle.notify_waiters();
                }
            }
            .instrument(span),
        );
    }

    /// Waits until no background drive runs, at most `ms`; answers how many still run.
    pub async fn drain_background(&self, ms: u64) -> usize {
        let wait = async {
            loop {
                let idle = self.background.idle.notified();
                if self.background.running.load(Ordering::Acquire) == 0 {
                    return;
                }
                idle.await;
            }
        };
        let _ = tokio::time::timeout(std::time::Duration::from_millis(ms), wait).await;
        self.background.running.load(Ordering::Acquire)
    }

    /// Reads one transfer.
    pub async fn get_transfer(&self, id: &TransferId) -> Result<TransferRecord, ExecError> {
        match self
            .executor
            .execute_op(Op::Transfer(id.clone(), TransferOp::Get))
            .await?
        {
            Reply::Transfer(r) | Reply::Unchanged(r) => Ok(Arc::unwrap_or_clone(r)),
            _ => Err(ExecError::Rejected(Rejection::new(
                Code::TransferNotFound,
                "id",
                format!("no transfer {id}"),
            ))),
        }
    }

    /// Reads one account.
    pub async fn get_account(&self, id: &AccountId) -> Result<Account, ExecError> {
        match self
            .executor
            .execute_op(Op::Account(id.clone(), AccountOp::Get))
            .await?
        {
            Reply::Account(a) if a.status != AccountStatus::Unopened => Ok(Arc::unwrap_or_clone(a)),
            _ => Err(no_account(id, "id")),
        }
    }

    /// Reads many transfers, in order; missing ones are skipped.
    pub async fn get_transfers(
        &self,
        ids: &[TransferId],
    ) -> Result<Vec<TransferRecord>, ExecError> {
        let ops = ids
            .iter()
            .map(|id| Op::Transfer(id.clone(), TransferOp::Get))
            .collect();
        Ok(self
            .executor
            .execute_ops(ops)
            .await?
            .into_iter()
            .filter_map(|r| match r {
                Reply::Transfer(r) | Reply::Unchanged(r) => Some(Arc::unwrap_or_clone(r)),
                _ => None,
            })
            .collect())
    }

    /// Captures, voids or re-drives `id` and answers its record.
    pub async fn act(&self, id: TransferId, action: Action) -> Result<Answer, ExecError> {
        let span = tracing::info_span!("transfer", transfer_id = %id, action = action.as_str());
        let watch = Stopwatch::start();
        self.metrics.in_flight(1);
        let outcome = async {
            match action {
                Action::Capture => self.executor.capture(id).await,
                Action::CapturePart(amounts) => self.executor.capture_part(id, amounts).await,
                Action::Void => self.executor.void(id).await,
                Action::Redrive => self.executor.redrive(id).await,
            }
        }
        .instrument(span)
        .await;
        self.metrics.in_flight(-1);
        let a = answer(outcome);
        let label = match &a {
            Ok(a) => a.record().state.as_str(),
            Err(ExecError::Rejected(_)) => "rejected",
            Err(_) => "failed",
        };
        self.metrics.transfer(label, watch.seconds());
        a
    }
}
/// An action on an existing transfer: a hold's capture or void, or a re-drive.
#[derive(Clone, Debug)]
pub enum Action {
    /// Post the hold.
    Capture,
    /// Post these amounts of the hold, one per posting, and release the rest.
    CapturePart(Vec<xfer_core::Amount>),
    /// Release the hold.
    Void,
    /// Finish an unfinished transfer now.
    Redrive,
}

impl Action {
    fn as_str(&self) -> &'static str {
        match self {
            Action::Capture | Action::CapturePart(_) => "capture",
            Action::Void => "void",
            Action::Redrive => "redrive",
        }
    }
}

fn answer(outcome: Result<Outcome, ExecError>) -> Result<Answer, ExecError> {
    match outcome? {
        Outcome::Finished(r) | Outcome::Held(r) | Outcome::Left(r) => {
            Ok(Answer::Record(Box::new(r)))
        }
        Outcome::Rejected(r) => Err(ExecError::Rejected(r)),
        Outcome::NotFound => Err(ExecError::Rejected(Rejection::new(
            Code::TransferNotFound,
            "id",
            "no such transfer",
        ))),
        Outcome::Violation(v) => Err(ExecError::Violation(v)),
    }
}

pub(crate) fn no_account(id: &AccountId, field: &str) -> ExecError {
    ExecError::Rejected(Rejection::new(
        Code::AccountNotFound,
        field,
        format!("no account {id}"),
    ))
}

/// A service over `store` alone (one shard) with default settings, for unit tests.
#[cfg(test)]
pub(crate) fn over_one_store(
    store: Arc<dyn xfer_store::Store>,
    clock: Arc<dyn xfer_core::Clock>,
) -> Service {
    over_stores(vec![store], clock)
}

/// A service over `stores`, one shard each, accounts placed by hash (tests).
#[cfg(test)]
pub(crate) fn over_stores(
    stores: Vec<Arc<dyn xfer_store::Store>>,
    clock: Arc<dyn xfer_core::Clock>,
) -> Service {
    use xfer_engine::{Config, Retry, RetryPolicy, Router, SweepConfig, TokioSleeper};
    let n = stores.len();
    let cluster = Arc::new(Cluster::new(stores, Router::hash(n)));
    let executor = |name: &str| {
        let retry = Retry::new(RetryPolicy::default(), Arc::new(TokioSleeper));
        let owner = xfer_core::OwnerId::new(name).unwrap();
        Executor::new(
            cluster.clone(),
            owner,
            Config::default(),
            clock.clone(),
            retry,
        )
    };
    let sweeper = Sweeper::new(executor("sweep"), SweepConfig::default());
    Service::new(executor("api"), sweeper, Arc::default(), 60_000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfer_core::{AssetCode, LowerBound, Posting, SystemClock, TransferKind};
    use xfer_store::{ExecuteHook, Intercept, MemoryStore, Store};

    fn spec(id: &str) -> TransferSpec {
        TransferSpec {
            id: TransferId::new(id).unwrap(),
            postings: vec![Posting {
                from: AccountId::new("a").unwrap(),
                to: AccountId::new("b").unwrap(),
                asset: AssetCode::new("USD", "asset").unwrap(),
                amount: xfer_core::Amount::new(1, "amount").unwrap(),
            }]
            .into(),
            metadata: String::new(),
            kind: TransferKind::Transfer,
            refund_of: None,
            timeout_ms: 60_000,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_the_background_limit_a_request_is_refused_and_writes_nothing() {
        // Claims wait at the gate: accepted transfers stay in their background drives.
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let held = gate.clone();
        let hook: ExecuteHook<MemoryStore> = Box::new(move |inner, ops| {
            let gate = held.clone();
            Box::pin(async move {
                let claims = ops
                    .iter()
                    .any(|op| matches!(op, Op::Transfer(_, TransferOp::Claim { .. })));
                if claims {
                    drop(gate.acquire().await.expect("open"));
                }
                inner.execute(ops).await
            })
        });
        let clock: Arc<dyn xfer_core::Clock> = Arc::new(SystemClock);
        let store = Intercept::new(MemoryStore::new(clock.clone()), hook);
        let service = over_one_store(Arc::new(store), clock).with_background_max(2);
        for (id, lower_bound) in [("a", LowerBound::Unbounded), ("b", LowerBound::default())] {
            let create = AccountOp::Create {
                asset: AssetCode::new("USD", "asset").unwrap(),
                lower_bound,
            };
            let op = Op::Account(AccountId::new(id).unwrap(), create);
            service.executor().execute_op(op).await.unwrap();
        }

        let accepted = service.submit(vec![spec("t1"), spec("t2")], false).await;
        assert!(
            accepted
                .iter()
                .all(|a| matches!(a, Ok(Answer::Accepted(_)))),
            "{accepted:?}"
        );
        let refused = service.submit(vec![spec("t3")], false).await;
        match &refused[..] {
            [Err(e)] => assert!(matches!(e, ExecError::Busy(_)), "{e:?}"),
            other => panic!("{other:?}"),
        }
        // Bad input is refused for what it is, full or not.
        let mut unknown = spec("t4");
        unknown.postings[0].to = AccountId::new("nobody").unwrap();
        match &service.submit(vec![unknown], false).await[..] {
            [Err(e)] => assert_eq!(e.code(), Some(Code::AccountNotFound), "{e:?}"),
            other => panic!("{other:?}"),
        }
        let t3 = Op::Transfer(TransferId::new("t3").unwrap(), TransferOp::Get);
        assert_eq!(
            service.executor().execute_op(t3).await.unwrap(),
            Reply::NotFound
        );

        // Once the drives finish there is room again.
        gate.add_permits(1_000);
        assert_eq!(service.drain_background(10_000).await, 0);
        let again = service.submit(vec![spec("t3")], false).await;
        assert!(matches!(&again[..], [Ok(Answer::Accepted(_))]), "{again:?}");
    }
}
