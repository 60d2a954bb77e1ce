//! [`Service`]: what the HTTP handlers call. It owns the executor (transfers driven in the
//! request's task), the sweeper loop, the metrics and the transfers answered "accepted" that
//! still run in the background.
//!
//! Submitting checks, in one read round trip per shard, whether the transfer already
//! exists and whether every account it names exists, is open and holds its asset; only then
//! is anything written. So bad input changes nothing, while a resubmitted id is always
//! answered from its record (idempotency wins over the checks).

pub use crate::answer::Answer;
use crate::combine::{Combiner, Run};
use crate::error::{ApiCode, ApiError};
use crate::metrics::{Metrics, Stopwatch};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;
use tracing::Instrument;
use xfer_core::{
    Account, AccountId, AccountStatus, Code, Rejection, TransferId, TransferRecord, TransferSpec,
};
use xfer_engine::{Cluster, ExecError, Executor, Outcome, Sweeper};
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

/// Places among the background's transfers, given back when dropped.
struct Reserved<'a> {
    background: &'a Background,
    n: usize,
}

impl<'a> Reserved<'a> {
    fn take(background: &'a Background, n: usize) -> Reserved<'a> {
        background.transfers.fetch_add(n, Ordering::AcqRel);
        Reserved { background, n }
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.background
            .transfers
            .fetch_sub(self.n, Ordering::AcqRel);
    }
}

/// The service behind the API. See the module docs.
pub struct Service {
    sweeper: Sweeper,
    /// The executor and metrics, with what submitting needs.
    submitter: Submitter,
    /// Single requests that wait for their outcome, driven together ([`crate::combine`]).
    combiner: Arc<Combiner>,
    ready: AtomicBool,
    stuck_after_ms: u64,
}

/// Drives at most this many combined batches at once. One: while it drives, the requests
/// that arrive queue into the next batch, and the HTTP work of the others keeps the cores
/// busy (`xfer bench --via http --in-flight 64 --batch 1`: 1 lane 25,574 / 26,286
/// transfers/s, 2 lanes 21,627 / 23,462, 4 lanes 22,217 / 22,128, not combined 19,581 /
/// 20,694; `docs/benchmarks.md`).
pub const COMBINE_LANES: usize = 1;

/// Requests of at most this many transfers are combined; larger ones are batches already.
pub const COMBINE_REQUEST_MAX: usize = 16;

/// Combined batches hold at most this many transfers.
pub const COMBINE_BATCH_MAX: usize = 512;

/// What submitting needs, shared with the combiner's lanes (which run in tasks of their own).
#[derive(Clone)]
struct Submitter {
    executor: Arc<Executor>,
    metrics: Arc<Metrics>,
    background: Arc<Background>,
}

/// A submit pre-checked and driven through every round ([`Submitter::start`]), its
/// answers waiting for the log: the pre-check's reads and the rounds' answers may rest on
/// entries not yet durable, so nothing is answered before the log is durable up to both.
struct Started {
    submitter: Submitter,
    watch: Stopwatch,
    /// Answers known before any write: refusals of the pre-check (or its failure).
    results: Vec<Option<Result<Answer, ApiError>>>,
    /// Where the driven transfers' answers go in `results`.
    slots: Vec<usize>,
    refused: usize,
    /// The pre-check's log point.
    point: u64,
    go: Go,
}

/// What happened to the transfers that passed the pre-check.
enum Go {
    /// Driven through every round ([`Executor::submit_many_ahead`]), one per slot.
    Ahead(xfer_engine::Ahead),
    /// Answered already (inserted for the background, durably).
    Answered(Vec<Result<Answer, ApiError>>),
}

impl Started {
    /// Waits for the log to be durable up to everything the answers rest on, then answers
    /// each transfer in the order submitted. If the wait fails, every answer is that error.
    ///
    /// `inline`: sync in this thread where the store can ([`Cluster::sync_durable`]),
    /// blocking it for one sync, instead of handing the wait to the store's committer
    /// thread and being woken by it. Only the combiner's one lane does: its wait is the
    /// critical path of every combined request, and the hand-over cost each batch two
    /// thread wake-ups, in time and in CPU (`xfer bench --via http --in-flight 64 --batch
    /// 1`: about a fifth more transfers/s, `docs/benchmarks.md`). At most one runtime
    /// thread is blocked so, for one sync at a time; the others run the connections (the
    /// lane does so only when the runtime has another thread).
    async fn answer(self, inline: bool) -> Vec<Result<Answer, ApiError>> {
        let Started {
            submitter: s,
            watch,
            mut results,
            slots,
            refused,
            point,
            go,
        } = self;
        let point = match &go {
            Go::Ahead(ahead) => point.max(ahead.point()),
            Go::Answered(_) => point,
        };
        let cluster = s.executor.cluster();
        let synced = match inline.then(|| cluster.sync_durable(point)).flatten() {
            Some(synced) => synced,
            None => cluster.wait_durable(point).await,
        };
        let mut answers: Vec<Result<Answer, ApiError>> = match go {
            Go::Ahead(ahead) => {
                s.metrics.in_flight(-(slots.len() as i64));
                let outcomes = ahead.outcomes(synced.clone());
                outcomes.into_iter().map(answer).collect()
            }
            Go::Answered(a) => a,
        };
        match synced {
            Ok(_) => (0..refused).for_each(|_| s.metrics.transfer("rejected", 0.0)),
            Err(e) => {
                let e = ApiError::from(ExecError::unsynced(&e));
                answers = vec![Err(e.clone()); answers.len()];
                results = vec![Some(Err(e)); results.len()];
                (0..refused).for_each(|_| s.metrics.transfer("failed", 0.0));
            }
        }
        for (i, answer) in slots.into_iter().zip(answers) {
            let outcome = match &answer {
                Ok(Answer::Accepted(_)) => "accepted",
                Ok(a) => a.record().state.as_str(),
                Err(e) if e.status().is_client_error() => "rejected",
                Err(_) => "failed",
            };
            s.metrics.transfer(outcome, watch.seconds());
            results[i] = Some(answer);
        }
        results
            .into_iter()
            .map(|r| r.expect("every transfer answered"))
            .collect()
    }
}

impl Service {
    /// A service over `executor` (API requests) and `sweeper` (its own executor).
    pub fn new(
        executor: Executor,
        sweeper: Sweeper,
        metrics: Arc<Metrics>,
        stuck_after_ms: u64,
    ) -> Service {
        let submitter = Submitter {
            executor: Arc::new(executor),
            metrics,
            background: Background::new(BACKGROUND_TRANSFERS_MAX),
        };
        let lane = submitter.clone();
        let run: Run = Arc::new(move |specs| {
            let lane = lane.clone();
            Box::pin(async move {
                // With one runtime thread, a sync in it would stop every connection.
                let inline = tokio::runtime::Handle::current().metrics().num_workers() > 1;
                lane.start(specs, true).await.answer(inline).await
            })
        });
        Service {
            sweeper,
            submitter,
            combiner: Combiner::new(
                run,
                COMBINE_LANES,
                COMBINE_BATCH_MAX,
                crate::combine::QUEUED_TRANSFERS_MAX,
            ),
            ready: AtomicBool::new(false),
            stuck_after_ms,
        }
    }

    /// The same service with room for `limit` background transfers.
    #[cfg(test)]
    fn with_background_max(mut self, limit: usize) -> Service {
        self.submitter.background = Background::new(limit);
        self
    }

    /// The executor.
    pub fn executor(&self) -> &Executor {
        &self.submitter.executor
    }

    /// The shards.
    pub fn cluster(&self) -> &Cluster {
        self.submitter.executor.cluster()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.submitter.metrics
    }

    /// True once the first sweep (recovery of what a previous run left) has finished.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The clock's now.
    pub fn now(&self) -> xfer_core::Timestamp {
        self.submitter.executor.clock().now()
    }

    /// One sweep: finish abandoned transfers, drop old tombstones, count the stuck.
    pub async fn sweep(&self) {
        let report = self.sweeper.pass().await;
        self.submitter.metrics.sweep(report.finished, report.pruned);
        for (id, e) in &report.failed {
            tracing::warn!(transfer_id = %id, error = %e, "sweeper could not finish transfer");
        }
        for (shard, e) in &report.shard_errors {
            tracing::warn!(shard, error = %e, "sweeper could not scan shard");
        }
        if report.finished > 0 {
            tracing::info!(
                finished = report.finished,
                "sweeper finished abandoned transfers"
            );
        }
        if let Ok(stuck) = self.stuck(usize::MAX >> 1).await {
            self.submitter.metrics.set_stuck(stuck.len());
        }
        self.ready.store(true, Ordering::Release);
    }

    /// Unfinished transfers whose owner lapsed more than `stuck_after_ms` ago (or, for a
    /// hold, whose expiry passed that long ago), earliest first.
    pub async fn stuck(&self, limit: usize) -> Result<Vec<TransferRecord>, ExecError> {
        let before = self.now().minus_ms(self.stuck_after_ms);
        let mut all = Vec::new();
        for shard in self.cluster().shards() {
            let due = shard
                .scan_due(before, limit)
                .await
                .map_err(|e| ExecError::Unavailable(format!("scan: {e}")))?;
            all.extend(due);
        }
        all.sort_by_key(|r| r.wake_at());
        all.truncate(limit);
        Ok(all)
    }

    /// Submits transfers (see the module docs). `wait`: drive them to their outcome before
    /// answering; otherwise answer once each is durably inserted and drive it in the
    /// background. Results in the order of `specs`. Small requests that wait are driven
    /// together with the others queued at the same time ([`crate::combine`]).
    pub async fn submit(
        &self,
        specs: Vec<TransferSpec>,
        wait: bool,
    ) -> Vec<Result<Answer, ApiError>> {
        if wait && specs.len() <= COMBINE_REQUEST_MAX {
            self.combiner.submit(specs).await
        } else {
            self.submitter.submit(specs, wait).await
        }
    }

    /// Waits until no background drive runs, at most `ms`; answers how many still run.
    pub async fn drain_background(&self, ms: u64) -> usize {
        let wait = async {
            loop {
                let idle = self.submitter.background.idle.notified();
                if self.submitter.background.running.load(Ordering::Acquire) == 0 {
                    return;
                }
                idle.await;
            }
        };
        let _ = tokio::time::timeout(std::time::Duration::from_millis(ms), wait).await;
        self.submitter.background.running.load(Ordering::Acquire)
    }

    /// Reads one transfer.
    pub async fn get_transfer(&self, id: &TransferId) -> Result<TransferRecord, ApiError> {
        match self
            .submitter
            .executor
            .execute_op(Op::Transfer(id.clone(), TransferOp::Get))
            .await?
        {
            Reply::Transfer(r) | Reply::Unchanged(r) => Ok(Arc::unwrap_or_clone(r)),
            _ => Err(
                Rejection::new(Code::TransferNotFound, "id", format!("no transfer {id}")).into(),
            ),
        }
    }

    /// Reads one account.
    pub async fn get_account(&self, id: &AccountId) -> Result<Account, ApiError> {
        match self
            .submitter
            .executor
            .execute_op(Op::Account(id.clone(), AccountOp::Get))
            .await?
        {
            Reply::Account(a) if a.status != AccountStatus::Unopened => Ok(Arc::unwrap_or_clone(a)),
            _ => Err(no_account(id, "id")),
        }
    }

    /// Reads many transfers, in order; missing ones are skipped.
    pub async fn get_transfers(&self, ids: &[TransferId]) -> Result<Vec<TransferRecord>, ApiError> {
        let ops = ids
            .iter()
            .map(|id| Op::Transfer(id.clone(), TransferOp::Get))
            .collect();
        Ok(self
            .submitter
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
    pub async fn settle(&self, id: TransferId, action: Settle) -> Result<Answer, ApiError> {
        let span = tracing::info_span!("transfer", transfer_id = %id, action = action.as_str());
        let watch = Stopwatch::start();
        self.submitter.metrics.in_flight(1);
        let outcome = async {
            match action {
                Settle::Capture => self.submitter.executor.capture(id).await,
                Settle::Void => self.submitter.executor.void(id).await,
                Settle::Redrive => self.submitter.executor.redrive(id).await,
            }
        }
        .instrument(span)
        .await;
        self.submitter.metrics.in_flight(-1);
        let a = answer(outcome);
        let label = match &a {
            Ok(a) => a.record().state.as_str(),
            Err(e) if e.status().is_client_error() => "rejected",
            Err(_) => "failed",
        };
        self.submitter.metrics.transfer(label, watch.seconds());
        a
    }
}

impl Submitter {
    /// [`Service::submit`], each call driven on its own.
    async fn submit(&self, specs: Vec<TransferSpec>, wait: bool) -> Vec<Result<Answer, ApiError>> {
        self.start(specs, wait).await.answer(false).await
    }

    /// Pre-checks `specs`, then drives the good ones through every round (`wait`) or
    /// inserts them for the background: all but the wait for the log, which
    /// [`Started::answer`] does.
    async fn start(&self, specs: Vec<TransferSpec>, wait: bool) -> Started {
        let watch = Stopwatch::start();
        let n = specs.len();
        let mut results: Vec<Option<Result<Answer, ApiError>>> = vec![None; n];
        let (checks, point) = match self.precheck(&specs).await {
            Ok(c) => c,
            Err(e) => {
                return Started {
                    submitter: self.clone(),
                    watch,
                    results: vec![Some(Err(ApiError::from(e))); n],
                    slots: Vec::new(),
                    refused: 0,
                    point: 0,
                    go: Go::Answered(Vec::new()),
                }
            }
        };
        let mut go = Vec::new();
        let mut slots = Vec::new();
        let mut refused = 0;
        for (i, (spec, check)) in specs.into_iter().zip(checks).enumerate() {
            match check {
                Some(r) => {
                    refused += 1;
                    results[i] = Some(Err(r.into()));
                }
                None => {
                    slots.push(i);
                    go.push(spec);
                }
            }
        }
        let go = if wait {
            let span = match go.as_slice() {
                [one] => tracing::info_span!("transfer", transfer_id = %one.id),
                _ => tracing::info_span!("transfers", count = go.len()),
            };
            self.metrics.in_flight(go.len() as i64);
            Go::Ahead(self.executor.submit_many_ahead(go).instrument(span).await)
        } else {
            Go::Answered(self.accept(go).await)
        };
        Started {
            submitter: self.clone(),
            watch,
            results,
            slots,
            refused,
            point,
            go,
        }
    }

    /// Inserts each transfer (durably) and drives the accepted ones in a background task.
    async fn accept(&self, specs: Vec<TransferSpec>) -> Vec<Result<Answer, ApiError>> {
        // Places for these transfers among the background's, taken for as long as this
        // runs (a drive started holds its own), so that concurrent requests cannot all pass
        // the check at once.
        let n = specs.len();
        let _reserved = Reserved::take(&self.background, n);
        let held = self.background.transfers.load(Ordering::Acquire) - n;
        let limit = self.background.limit;
        if held + n > limit && held > 0 {
            let e = ApiError::api(
                ApiCode::Overloaded,
                None,
                format!(
                    "{held} accepted transfers are running, the limit is {limit}; \
                     retry shortly"
                ),
            );
            return vec![Err(e); n];
        }
        let now = self.executor.clock().now();
        let grace = self.executor.config().claim_grace_ms;
        let ops = specs
            .iter()
            .map(|s| {
                let record = TransferRecord::accept(s.clone(), now, grace);
                Op::Transfer(s.id.clone(), TransferOp::Insert(Arc::new(record)))
            })
            .collect();
        let replies = match self.executor.execute_ops(ops).await {
            Ok(r) => r,
            Err(e) => return vec![Err(ApiError::from(e)); specs.len()],
        };
        let mut run = Vec::new();
        let mut answers = Vec::with_capacity(specs.len());
        for (spec, reply) in specs.into_iter().zip(replies) {
            answers.push(match reply {
                Reply::Transfer(r) | Reply::Unchanged(r) => {
                    if !r.state.is_terminal() {
                        run.push(spec);
                    }
                    Ok(Answer::Accepted(Box::new(Arc::unwrap_or_clone(r))))
                }
                Reply::Refused(code) => Err(ApiError::from(Rejection::new(
                    code,
                    "id",
                    format!("{} exists with a different body", spec.id),
                ))),
                other => Err(ApiError::from(ExecError::Violation(format!(
                    "{}: insert answered {other}",
                    spec.id
                )))),
            });
        }
        if !run.is_empty() {
            self.spawn_background(run);
        }
        answers
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
                for (id, r) in specs
                    .iter()
                    .map(|s| s.id.clone())
                    .collect::<Vec<_>>()
                    .into_iter()
                    .zip(executor.submit_many(specs).await)
                {
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

    /// For each spec, `Some(rejection)` if it must not be written: it does not exist yet
    /// and one of its accounts is missing, closed or holds another asset. With the log
    /// point the reads saw (wait for it before answering from them: they need not be
    /// durable yet, so the drive that follows does not wait for a sync first).
    #[allow(clippy::type_complexity)]
    async fn precheck(
        &self,
        specs: &[TransferSpec],
    ) -> Result<(Vec<Option<Rejection>>, u64), ExecError> {
        let mut accounts: BTreeMap<&AccountId, usize> = BTreeMap::new();
        let mut ops = Vec::new();
        for s in specs {
            ops.push(Op::Transfer(s.id.clone(), TransferOp::Get));
        }
        for p in specs.iter().flat_map(|s| &s.postings) {
            for a in [&p.from, &p.to] {
                accounts.entry(a).or_insert_with(|| {
                    ops.push(Op::Account(a.clone(), AccountOp::Get));
                    ops.len() - 1
                });
            }
        }
        let (replies, point) = self.executor.execute_ops_pending(ops).await?;
        let checks = specs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if !matches!(replies[i], Reply::NotFound) {
                    return None; // exists: the submit answers it (same body or conflict)
                }
                s.postings.iter().enumerate().find_map(|(k, p)| {
                    [(&p.from, "from"), (&p.to, "to")]
                        .into_iter()
                        .find_map(|(a, side)| {
                            let field = format!("postings[{k}].{side}");
                            account_problem(&replies[accounts[a]], a, &p.asset, field)
                        })
                })
            })
            .collect();
        Ok((checks, point))
    }
}

/// A hold's settlement or a re-drive.
#[derive(Clone, Copy, Debug)]
pub enum Settle {
    /// Post the hold.
    Capture,
    /// Release the hold.
    Void,
    /// Finish an unfinished transfer now.
    Redrive,
}

impl Settle {
    fn as_str(self) -> &'static str {
        match self {
            Settle::Capture => "capture",
            Settle::Void => "void",
            Settle::Redrive => "redrive",
        }
    }
}

fn answer(outcome: Result<Outcome, ExecError>) -> Result<Answer, ApiError> {
    match outcome? {
        Outcome::Finished(r) | Outcome::Held(r) | Outcome::Left(r) => {
            Ok(Answer::Record(Box::new(r)))
        }
        Outcome::Rejected(r) => Err(r.into()),
        Outcome::NotFound => {
            Err(Rejection::new(Code::TransferNotFound, "id", "no such transfer").into())
        }
        Outcome::Violation(v) => Err(ExecError::Violation(v).into()),
    }
}

fn no_account(id: &AccountId, field: &str) -> ApiError {
    Rejection::new(Code::AccountNotFound, field, format!("no account {id}")).into()
}

fn account_problem(
    reply: &Reply,
    id: &AccountId,
    asset: &xfer_core::AssetCode,
    field: String,
) -> Option<Rejection> {
    match reply {
        Reply::Account(a) => match a.status {
            AccountStatus::Unopened => Some(Rejection::new(
                Code::AccountNotFound,
                field,
                format!("no account {id}"),
            )),
            AccountStatus::Closed => Some(Rejection::new(
                Code::AccountClosed,
                field,
                format!("{id} is closed"),
            )),
            AccountStatus::Open if &a.asset != asset => Some(Rejection::new(
                Code::AssetMismatch,
                field,
                format!("{id} holds {}, not {asset}", a.asset),
            )),
            AccountStatus::Open => None,
        },
        _ => Some(Rejection::new(
            Code::AccountNotFound,
            field,
            format!("no account {id}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ApiCode;
    use xfer_core::{AssetCode, LowerBound, Posting, SystemClock, TransferKind};
    use xfer_engine::{Config, Retry, RetryPolicy, Router, SweepConfig, TokioSleeper};
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
        let cluster = Arc::new(Cluster::new(
            vec![Arc::new(store) as Arc<dyn Store>],
            Router::hash(1),
        ));
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
        let service =
            Service::new(executor("api"), sweeper, Arc::default(), 60_000).with_background_max(2);
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
            [Err(e)] => assert_eq!(
                (e.code, e.status().as_u16()),
                (ApiCode::Overloaded.as_str(), 503)
            ),
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
