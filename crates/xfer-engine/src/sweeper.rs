//! [`Sweeper`]: finishes transfers whose executor vanished (SPEC §3, Recovery).
//!
//! One pass:
//!
//! ```text
//!   every shard: scan_due(now, scan_limit)        (lease lapsed, or a hold past expiry)
//!        ─▶ Machine::recover for each, all driven together, one batch per shard per round
//!             initial → claim and run      pending → continue, or cancel past the deadline
//!             applied → post and finish    canceling → release and finish
//!             held past expiry → cancel
//!        ─▶ every shard: prune(prune_limit) again and again until a call drops fewer
//!           than prune_limit                       (every tombstone past its horizon)
//! ```
//!
//! Pruning drains what is due in every pass: a shard under load gains two tombstones per
//! transfer and account leg, and a pass that dropped a fixed number would fall behind them,
//! so accounts, memory, checkpoints and recovery would grow without bound
//! (`docs/benchmarks.md#prune-all-due`). `prune_limit` only sizes each call (how long one
//! holds a shard).
//!
//! A pass never fails as a whole: a shard that cannot be scanned or pruned, or a transfer
//! that cannot be finished, is reported in the [`PassReport`] and comes back next pass
//! (its wake time is still due).
//!
//! Escalation instead of retrying forever ([`Tally`]): a transfer whose recovery fails for
//! a reason no retry fixes (a protocol violation, a damaged record, an unroutable op) is
//! marked for a person at once ([`TransferOp::Escalate`]); one whose recovery gives up past
//! the retry limit [`SweepConfig::escalate_after`] times with no success between, each in a
//! pass where other transfers were finished (so the stores work; an unreachable store
//! counts nothing), is marked then. A marked transfer keeps its wake time (the stuck list
//! finds it there) but sweepers skip it, so it is reported once, not every pass, until a
//! re-drive clears the mark; a scan asks for as many more records as it skipped, so marked
//! transfers never take the place of due ones (each pass reads them all: a cost in
//! proportion to how many wait for a person). The mark changes no protocol field, so it
//! cannot change an outcome. The counts are this sweeper's: they restart with the process. Any number of sweepers may run at once: claims are
//! compare-and-set, so each transfer is taken by one of them. Recovery at start-up is the
//! first pass of [`Sweeper::run`].

use crate::error::ExecError;
use crate::escalation::Tally;
use crate::executor::Executor;
use crate::machine::{Machine, Outcome};
use futures_util::future::{join_all, select, Either};
use futures_util::FutureExt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use xfer_core::{Escalation, TransferId, TransferRecord};
use xfer_store::{BoxFuture, Op, Reply, Store, StoreError, TransferOp};

/// Default for [`SweepConfig::interval_ms`].
pub const SWEEP_INTERVAL_MS_DEFAULT: u64 = 1_000;
/// Default for [`SweepConfig::scan_limit`].
pub const SCAN_LIMIT_DEFAULT: usize = 256;
/// Default for [`SweepConfig::prune_limit`].
pub const PRUNE_LIMIT_DEFAULT: usize = 1_024;
/// Default for [`SweepConfig::escalate_after`].
pub const ESCALATE_AFTER_DEFAULT: u32 = 5;
/// The change feed keeps an event a week unless told otherwise.
pub const EVENTS_RETENTION_MS_DEFAULT: u64 = 7 * 24 * 3_600_000;

/// How a sweeper paces itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SweepConfig {
    /// The wait between the end of one pass and the start of the next.
    pub interval_ms: u64,
    /// The most due transfers taken from one shard in one pass.
    pub scan_limit: usize,
    /// The most tombstones one `prune` call drops on one shard; a pass calls it until
    /// everything due is dropped. The same bounds a call trimming the change feed.
    pub prune_limit: usize,
    /// How long the change feed keeps an event (`Store::trim_events`), in ms.
    pub events_retention_ms: u64,
    /// Failed recoveries of one transfer in a row (in passes that finished others) before
    /// it is escalated to a person; at least 1.
    pub escalate_after: u32,
}

impl Default for SweepConfig {
    fn default() -> Self {
        SweepConfig {
            interval_ms: SWEEP_INTERVAL_MS_DEFAULT,
            scan_limit: SCAN_LIMIT_DEFAULT,
            prune_limit: PRUNE_LIMIT_DEFAULT,
            events_retention_ms: EVENTS_RETENTION_MS_DEFAULT,
            escalate_after: ESCALATE_AFTER_DEFAULT,
        }
    }
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Due transfers found.
    pub due: usize,
    /// Driven to `done` or `canceled`.
    pub finished: usize,
    /// Found held and not yet expired (another sweeper or a capture got there first).
    pub held: usize,
    /// Run by someone else now.
    pub left: usize,
    /// Could not be finished this pass, and why.
    pub failed: Vec<(TransferId, ExecError)>,
    /// Escalated to a person in this pass, with the mark (each is reported here once).
    pub escalated: Vec<(TransferId, Escalation)>,
    /// Due transfers skipped because they were escalated before.
    pub escalated_waiting: usize,
    /// Tombstones dropped.
    pub pruned: usize,
    /// Change-feed events dropped by retention.
    pub events_trimmed: usize,
    /// Shards that could not be scanned or pruned, by index.
    pub shard_errors: Vec<(usize, StoreError)>,
}

/// Finishes abandoned transfers, using an [`Executor`] (give it an owner of its own).
#[derive(Debug)]
pub struct Sweeper {
    executor: Executor,
    cfg: SweepConfig,
    /// Failed recoveries per transfer.
    tally: Mutex<Tally>,
}

impl Sweeper {
    /// A sweeper that drives recoveries with `executor`.
    pub fn new(executor: Executor, cfg: SweepConfig) -> Sweeper {
        Sweeper {
            executor,
            cfg,
            tally: Mutex::new(Tally::new(cfg.escalate_after)),
        }
    }

    /// The executor it drives recoveries with.
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// One pass: recover every due transfer (up to the scan limit per shard), then prune.
    pub async fn pass(&self) -> PassReport {
        let mut report = PassReport::default();
        let ids = self.scan(&mut report).await;
        report.due = ids.len();
        let (owner, cfg, now) = (
            self.executor.owner(),
            *self.executor.config(),
            self.executor.clock().now(),
        );
        let starts = ids
            .iter()
            .map(|id| Machine::recover(id.clone(), owner.clone(), now, cfg))
            .collect();
        let results = self.executor.drive(starts).await;
        {
            let mut tally = self.tally.lock().expect("not poisoned");
            for (id, result) in ids.into_iter().zip(results) {
                match result {
                    Ok(outcome) => {
                        tally.recovered(&id);
                        match outcome {
                            Outcome::Finished(_) => report.finished += 1,
                            Outcome::Held(_) => report.held += 1,
                            _ => report.left += 1,
                        }
                    }
                    Err(e) => report.failed.push((id, e)),
                }
            }
        }
        self.escalate(&mut report).await;
        self.prune(&mut report).await;
        self.trim_events(&mut report).await;
        report
    }

    /// Runs passes until `shutdown` completes: the first at once (recovery at start-up),
    /// then one every `interval_ms`. A pass under way is finished before stopping, so a
    /// shutdown leaves no half-driven batch behind. Answers how many passes ran.
    pub async fn run<F: Future<Output = ()>>(&self, shutdown: F) -> u64 {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut passes = 0;
        loop {
            if shutdown.as_mut().now_or_never().is_some() {
                return passes;
            }
            self.pass().await;
            passes += 1;
            let pause = self.executor.retry().sleeper().sleep(self.cfg.interval_ms);
            if let Either::Left(_) = select(shutdown.as_mut(), pause).await {
                return passes;
            }
        }
    }

    /// The due transfers of every shard, scanned concurrently, at most `scan_limit` of
    /// each, less the escalated ones (counted in the report).
    async fn scan(&self, report: &mut PassReport) -> Vec<TransferId> {
        let now = self.executor.clock().now();
        let shards = self.executor.cluster().shards();
        let scans = join_all(shards.iter().map(|s| self.scan_shard(s, now))).await;
        let mut ids = Vec::new();
        for (shard, scan) in scans.into_iter().enumerate() {
            match scan {
                Ok((due, escalated)) => {
                    report.escalated_waiting += escalated;
                    ids.extend(due);
                }
                Err(e) => report.shard_errors.push((shard, e)),
            }
        }
        ids
    }

    /// One shard's due transfers, at most `scan_limit`, and how many escalated ones it
    /// skipped: escalated transfers keep their early wake times, so the scan asks again for
    /// as many more as it skipped until it has `scan_limit` others or the shard has no more.
    async fn scan_shard(
        &self,
        shard: &Arc<dyn Store>,
        now: xfer_core::Timestamp,
    ) -> Result<(Vec<TransferId>, usize), StoreError> {
        let mut limit = self.cfg.scan_limit.max(1);
        loop {
            let records = shard.scan_due(now, limit).await?;
            let full = records.len() >= limit;
            let (escalated, due): (Vec<TransferRecord>, Vec<TransferRecord>) =
                records.into_iter().partition(Tally::skips);
            if !full || due.len() >= self.cfg.scan_limit || escalated.is_empty() {
                let due = due.into_iter().take(self.cfg.scan_limit);
                return Ok((due.map(|r| r.spec.id.clone()).collect(), escalated.len()));
            }
            limit = self.cfg.scan_limit + escalated.len();
        }
    }

    /// Counts this pass's failures and marks the transfers that are to be escalated.
    async fn escalate(&self, report: &mut PassReport) {
        let others_finished = report.finished + report.held + report.left > 0;
        let now = self.executor.clock().now();
        let marks: Vec<(TransferId, Escalation)> = {
            let mut tally = self.tally.lock().expect("not poisoned");
            report
                .failed
                .iter()
                .filter_map(|(id, e)| {
                    Some((id.clone(), tally.failed(id, e, others_finished, now)?))
                })
                .collect()
        };
        if marks.is_empty() {
            return;
        }
        let ops: Vec<Op> = marks
            .iter()
            .map(|(id, escalation)| {
                let escalation = escalation.clone();
                Op::Transfer(id.clone(), TransferOp::Escalate { escalation })
            })
            .collect();
        let replies = self.executor.execute_ops(ops).await;
        let mut tally = self.tally.lock().expect("not poisoned");
        match replies {
            Ok(replies) => {
                for ((id, e), reply) in marks.into_iter().zip(replies) {
                    match reply {
                        Reply::Transfer(_) => report.escalated.push((id, e)),
                        // Finished meanwhile, or marked by another sweeper.
                        Reply::Unchanged(_) | Reply::NotFound => {}
                        _ => tally.unwritten(&id, &e),
                    }
                }
            }
            // Marked at the next failure: the counts stay.
            Err(_) => marks.iter().for_each(|(id, e)| tally.unwritten(id, e)),
        }
    }

    /// Retention: each shard's change feed trimmed of the events older than it keeps.
    async fn trim_events(&self, report: &mut PassReport) {
        let before = self
            .executor
            .clock()
            .now()
            .minus_ms(self.cfg.events_retention_ms);
        let limit = self.cfg.prune_limit.max(1);
        let trims = self.until_short(|s| s.trim_events(before, limit)).await;
        for (shard, trimmed) in trims.into_iter().enumerate() {
            match trimmed {
                Ok(n) => report.events_trimmed += n,
                Err(e) => report.shard_errors.push((shard, e)),
            }
        }
    }

    async fn prune(&self, report: &mut PassReport) {
        let limit = self.cfg.prune_limit.max(1);
        let prunes = self.until_short(|s| s.prune(limit)).await;
        for (shard, pruned) in prunes.into_iter().enumerate() {
            match pruned {
                Ok(n) => report.pruned += n,
                Err(e) => report.shard_errors.push((shard, e)),
            }
        }
    }

    /// Runs `call` on every shard, the shards at once, again on a shard until it answers
    /// fewer than the prune limit: each shard's total.
    async fn until_short<'a>(
        &'a self,
        call: impl Fn(&'a Arc<dyn Store>) -> BoxFuture<'a, Result<usize, StoreError>> + Copy,
    ) -> Vec<Result<usize, StoreError>> {
        let limit = self.cfg.prune_limit.max(1);
        let shards = self.executor.cluster().shards();
        join_all(shards.iter().map(|s| async move {
            let mut total = 0;
            loop {
                let n = call(s).await?;
                total += n;
                if n < limit {
                    return Ok::<_, StoreError>(total);
                }
            }
        }))
        .await
    }
}
