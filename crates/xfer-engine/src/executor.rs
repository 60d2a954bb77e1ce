//! [`Executor`]: drives transfers through the protocol against a [`Cluster`], in the
//! caller's task (the engine never spawns).
//!
//! Every call builds [`Machine`]s and drives them in rounds (see `drive.rs`): each round
//! sends all their outstanding requests as one batch per shard, so [`Executor::submit_many`]
//! with a thousand transfers costs about six round trips per shard, not six thousand.
//! Store failures are retried after a backoff ([`Retry`]); every request is idempotent, so a
//! retry never applies anything twice. When retries run out the call answers a typed
//! [`ExecError`] and whatever the machine left is finished by a [`Sweeper`](crate::Sweeper).
//!
//! Outcomes: `Ok` is always [`Outcome::Finished`] (done or canceled, with the reason),
//! [`Outcome::Held`] (a hold waiting for capture or void) or [`Outcome::Left`] (another
//! executor runs the transfer now; it will finish without this one). Rejections, a missing
//! transfer and broken invariants come back as `Err`.

use crate::cluster::{Cluster, Durable};
use crate::drive::{drive, gave_up, run, Decisions, Drive};
use crate::error::ExecError;
use crate::machine::{Config, Machine, Outcome, Request};
use crate::precheck::Reads;
use crate::retry::Retry;
use std::sync::Arc;
use xfer_core::{
    Account, AccountId, Clock, Code, OwnerId, Rejection, Timestamp, TransferId, TransferRecord,
    TransferSpec, TransferState,
};
use xfer_store::{AccountOp, Op, Reply, StoreError, TransferOp};

/// The most transfers [`Executor::submit_many`] drives together; more go in further
/// windows of this size, each stamped with the time it starts.
pub const FLIGHTS_MAX: usize = 1_024;
/// Default for how many times [`Executor::close_account`] waits for transfers in flight.
pub const CLOSE_WAITS_MAX_DEFAULT: u32 = 20;

/// Runs transfers as one owner. See the module docs.
pub struct Executor {
    cluster: Arc<Cluster>,
    owner: OwnerId,
    cfg: Config,
    clock: Arc<dyn Clock>,
    retry: Retry,
    close_waits_max: u32,
}

impl Executor {
    /// An executor that claims transfers as `owner` (unique per process incarnation), reads
    /// time from `clock` and retries store failures as `retry` says.
    pub fn new(
        cluster: Arc<Cluster>,
        owner: OwnerId,
        cfg: Config,
        clock: Arc<dyn Clock>,
        retry: Retry,
    ) -> Executor {
        Executor {
            cluster,
            owner,
            cfg,
            clock,
            retry,
            close_waits_max: CLOSE_WAITS_MAX_DEFAULT,
        }
    }

    /// The same, waiting at most `waits` times for an account's transfers in flight before
    /// [`Executor::close_account`] gives up.
    pub fn with_close_waits_max(mut self, waits: u32) -> Executor {
        self.close_waits_max = waits;
        self
    }

    /// The shards.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Who this executor claims transfers as.
    pub fn owner(&self) -> &OwnerId {
        &self.owner
    }

    /// The protocol timing.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Its clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Its retry policy and sleeper.
    pub fn retry(&self) -> &Retry {
        &self.retry
    }

    /// Submits one transfer or hold and drives it as far as it goes: `done`, `canceled`,
    /// or `held`. The same id and body again returns the same transfer; a different body is
    /// rejected with `id_exists_with_different_body`.
    pub async fn submit(&self, spec: TransferSpec) -> Result<Outcome, ExecError> {
        let mut results = self.submit_many(vec![spec]).await;
        results.pop().expect("one result per spec")
    }

    /// Submits many transfers and drives them together: every round sends all their
    /// requests as one batch per shard. Results are in the order of `specs`.
    pub async fn submit_many(&self, specs: Vec<TransferSpec>) -> Vec<Result<Outcome, ExecError>> {
        self.submit_many_observed(specs, None).await
    }

    /// [`Executor::submit_many`], telling `decisions` of each transfer as it is decided.
    pub async fn submit_many_observed(
        &self,
        specs: Vec<TransferSpec>,
        decisions: Option<&dyn Decisions>,
    ) -> Vec<Result<Outcome, ExecError>> {
        // Window by window, each waiting for the log before the next starts: its decisions
        // are told as they become durable, in the order they were taken.
        let mut results = Vec::with_capacity(specs.len());
        for window in windows(specs) {
            let window = self.submit_window(window, decisions).await;
            let synced = self.cluster.wait_durable(window.lsn()).await;
            results.extend(window.outcomes(synced, decisions));
        }
        results
    }

    /// [`Executor::submit_many`] up to the wait for the log: every round is driven, but on
    /// stores whose answers come before they are durable (one shared log) the outcomes
    /// wait for the log to be durable up to [`Ahead::lsn`]. The caller waits for it
    /// ([`Cluster::wait_durable`] or [`Cluster::sync_durable`]) and hands the result to
    /// [`Ahead::outcomes`].
    pub async fn submit_many_ahead(&self, specs: Vec<TransferSpec>) -> Ahead {
        let mut driven = Vec::with_capacity(specs.len().div_ceil(FLIGHTS_MAX));
        for window in windows(specs) {
            driven.push(self.submit_window(window, None).await);
        }
        Ahead {
            windows: driven,
            checked: None,
        }
    }

    /// [`Executor::submit_many_ahead`] after a check that writes nothing (`precheck.rs`):
    /// a new transfer naming an account that is missing, closed or of another asset is
    /// refused before its record is written. The check's reads may be ahead of the sync
    /// too: its refusals wait with the outcomes.
    pub async fn submit_checked_ahead(&self, specs: Vec<TransferSpec>) -> Ahead {
        let n = specs.len();
        let (refusals, lsn) = match self.check(&specs).await {
            Ok(checked) => checked,
            Err(e) => {
                let checked = Checked {
                    results: vec![Some(Err(e)); n],
                    slots: Vec::new(),
                    lsn: 0,
                };
                return Ahead {
                    windows: Vec::new(),
                    checked: Some(checked),
                };
            }
        };
        let mut results = vec![None; n];
        let (mut slots, mut go) = (Vec::new(), Vec::new());
        for (i, (spec, refusal)) in specs.into_iter().zip(refusals).enumerate() {
            match refusal {
                Some(r) => results[i] = Some(Err(ExecError::Rejected(r))),
                None => {
                    slots.push(i);
                    go.push(spec);
                }
            }
        }
        let mut ahead = self.submit_many_ahead(go).await;
        ahead.checked = Some(Checked {
            results,
            slots,
            lsn,
        });
        ahead
    }

    /// [`Executor::submit_checked_ahead`], waiting for the log: the outcomes in the order of
    /// `specs`.
    pub async fn submit_checked(
        &self,
        specs: Vec<TransferSpec>,
    ) -> Vec<Result<Outcome, ExecError>> {
        let ahead = self.submit_checked_ahead(specs).await;
        let synced = self.cluster.wait_durable(ahead.lsn()).await;
        ahead.outcomes(synced)
    }

    /// Checks `specs` as [`Executor::submit_checked_ahead`] does and inserts each that
    /// passes, durably, without driving it: one record per spec (a resubmitted id answers
    /// its record as it is), answered once everything it rests on is durable. The caller
    /// drives the unfinished ones ([`Executor::submit_many`]; else a sweeper does).
    ///
    /// `admit` is asked, after the check and before any write, to take the specs that
    /// passed (how many); if it refuses, they get its error and nothing is written.
    pub async fn insert_checked(
        &self,
        specs: &[TransferSpec],
        admit: &(dyn Fn(usize) -> Result<(), ExecError> + Sync),
    ) -> Vec<Result<TransferRecord, ExecError>> {
        let (refusals, lsn) = match self.check(specs).await {
            Ok(checked) => checked,
            Err(e) => return vec![Err(e); specs.len()],
        };
        let (now, grace) = (self.clock.now(), self.cfg.claim_grace_ms);
        let (mut slots, mut ops) = (Vec::new(), Vec::new());
        let mut results: Vec<Option<Result<TransferRecord, ExecError>>> = vec![None; specs.len()];
        for (i, (spec, refusal)) in specs.iter().zip(refusals).enumerate() {
            match refusal {
                Some(r) => results[i] = Some(Err(ExecError::Rejected(r))),
                None => {
                    let record = Arc::new(TransferRecord::accept(spec.clone(), now, grace));
                    ops.push(Op::Transfer(spec.id.clone(), TransferOp::Insert(record)));
                    slots.push(i);
                }
            }
        }
        let inserted = match admit(slots.len()) {
            Ok(()) if ops.is_empty() => Vec::new(),
            Ok(()) => match self.execute_ops(ops).await {
                Ok(replies) => replies,
                Err(e) => {
                    slots
                        .iter()
                        .for_each(|i| results[*i] = Some(Err(e.clone())));
                    Vec::new()
                }
            },
            Err(e) => {
                slots
                    .iter()
                    .for_each(|i| results[*i] = Some(Err(e.clone())));
                Vec::new()
            }
        };
        if let Err(e) = self.wait_durable(lsn).await {
            return vec![Err(e); specs.len()];
        }
        for (i, reply) in slots.into_iter().zip(inserted) {
            let id = &specs[i].id;
            results[i] = Some(match reply {
                Reply::Transfer(r) | Reply::Unchanged(r) => Ok(Arc::unwrap_or_clone(r)),
                Reply::Refused(code) => Err(rejected(
                    code,
                    "id",
                    format!("{id} exists with a different body"),
                )),
                other => Err(ExecError::Violation(format!(
                    "{id}: insert answered {other}"
                ))),
            });
        }
        results
            .into_iter()
            .map(|r| r.expect("every spec has a result"))
            .collect()
    }

    /// The check's refusals for `specs`, and the LSN its reads rest on.
    async fn check(
        &self,
        specs: &[TransferSpec],
    ) -> Result<(Vec<Option<Rejection>>, u64), ExecError> {
        let (reads, ops) = Reads::of(specs);
        let (replies, lsn) = self.execute_ops_ahead(ops).await?;
        Ok((reads.refusals(&replies), lsn))
    }

    async fn submit_window(
        &self,
        specs: Vec<TransferSpec>,
        decisions: Option<&dyn Decisions>,
    ) -> Window {
        let now = self.clock.now();
        let mut results: Vec<Option<Result<Outcome, ExecError>>> = vec![None; specs.len()];
        let mut slots = Vec::with_capacity(specs.len());
        let mut starts = Vec::with_capacity(specs.len());
        for (i, spec) in specs.into_iter().enumerate() {
            let local = self.cluster.router().is_local(&spec);
            match Machine::submit_placed(spec, self.owner.clone(), now, self.cfg, local) {
                Ok(start) => {
                    slots.push(i);
                    starts.push(start);
                }
                Err(r) => results[i] = Some(Err(ExecError::Rejected(r))),
            }
        }
        let mut drive = Drive::new(starts, decisions.is_some());
        let clock = self.clock.as_ref();
        run(&mut drive, &self.cluster, clock, &self.retry, decisions).await;
        Window {
            results,
            slots,
            drive,
        }
    }

    /// Captures the hold `id` and posts it: `done` (a repeat answers the same), or rejected
    /// with `hold_expired`, `hold_already_voided` or `transfer_is_not_held`.
    pub async fn capture(&self, id: TransferId) -> Result<Outcome, ExecError> {
        let start = Machine::capture(id, self.owner.clone(), self.clock.now(), self.cfg);
        self.drive_one(start).await
    }

    /// Captures `amounts` of the hold `id`, one per posting in order, and posts them,
    /// giving the rest back in the same steps: `done` (a repeat answers the same), or
    /// rejected with `capture_exceeds_hold` (field `amounts[i]`, nothing written),
    /// `hold_already_captured` (captured before, whole or with other amounts),
    /// `hold_expired`, `hold_already_voided` or `transfer_is_not_held`.
    pub async fn capture_part(
        &self,
        id: TransferId,
        amounts: Vec<xfer_core::Amount>,
    ) -> Result<Outcome, ExecError> {
        let start = Machine::capture_part(id, amounts, self.owner.clone(), self.cfg);
        self.drive_one(start).await
    }

    /// Voids the hold `id` and releases it: `canceled` with reason `voided` (a repeat
    /// answers the same), or rejected with `hold_expired`, `hold_already_captured` or
    /// `transfer_is_not_held`.
    pub async fn void(&self, id: TransferId) -> Result<Outcome, ExecError> {
        let start = Machine::void(id, self.owner.clone(), self.clock.now(), self.cfg);
        self.drive_one(start).await
    }

    /// Re-drives the unfinished transfer `id` now: makes its lease lapse (whoever held it
    /// can no longer decide: their epoch is stale after our claim), claims it and finishes
    /// it from whatever state it is in. A terminal transfer is answered as it is.
    pub async fn redrive(&self, id: TransferId) -> Result<Outcome, ExecError> {
        let op = Op::Transfer(
            id.clone(),
            TransferOp::Redrive {
                now: self.clock.now(),
            },
        );
        match self.execute_op(op).await? {
            Reply::Transfer(_) | Reply::Unchanged(_) => {}
            Reply::NotFound => return Err(not_found(&id)),
            other => {
                return Err(ExecError::Violation(format!(
                    "{id}: redrive answered {other}"
                )))
            }
        }
        let start = Machine::recover(id, self.owner.clone(), self.clock.now(), self.cfg);
        // The lease change above was applied: from here on "nothing applied" is untrue.
        match self.drive_one(start).await {
            Err(ExecError::Unavailable(why)) => Err(ExecError::Indeterminate(why)),
            other => other,
        }
    }

    /// Moves the hold `id`'s expiry later, to `until`, while it has not passed. Answers the
    /// record: held, expiring at `until` or later (a repeat, or an expiry already later:
    /// never brought forward). A settled, expired or unheld transfer is refused with why.
    pub async fn extend(
        &self,
        id: TransferId,
        until: Timestamp,
    ) -> Result<TransferRecord, ExecError> {
        let op = Op::Transfer(
            id.clone(),
            TransferOp::Extend {
                until,
                now: self.clock.now(),
            },
        );
        let refused = |rejection: Rejection| Err(ExecError::Rejected(rejection));
        match self.execute_op(op).await? {
            Reply::Transfer(r) => Ok(Arc::unwrap_or_clone(r)),
            Reply::Unchanged(r) if r.state == TransferState::Held => Ok(Arc::unwrap_or_clone(r)),
            Reply::Unchanged(r) => match crate::machine::settled_otherwise(&r, TransferState::Held)
            {
                Some(rejection) => refused(rejection),
                None => refused(Rejection::new(
                    Code::TransferIsNotHeld,
                    "id",
                    format!("{id} is {}, not held", r.state),
                )),
            },
            // The field a capture's and a settled hold's `hold_expired` name too.
            Reply::Refused(Code::HoldExpired) => refused(Rejection::new(
                Code::HoldExpired,
                "hold",
                format!("{id} expired uncaptured; it can no longer be extended"),
            )),
            Reply::Refused(code) => refused(Rejection::new(
                code,
                "id",
                format!("{id} is not held: a transfer, or a hold whose prepares are under way"),
            )),
            Reply::NotFound => Err(not_found(&id)),
            other => Err(ExecError::Violation(format!(
                "{id}: extend answered {other}"
            ))),
        }
    }

    /// Closes the account `id`, waiting (with backoff) while it has transfers in flight, at
    /// most the configured number of times; then rejected with
    /// `account_has_transfers_in_flight` (retryable). Closing a closed account answers it.
    /// Needs no asset, so it is [`ExecError::Unroutable`] under asset placement rules.
    pub async fn close_account(&self, id: AccountId) -> Result<Account, ExecError> {
        let op = Op::Account(id.clone(), AccountOp::Close);
        let mut waits = 0;
        loop {
            match self.execute_op(op.clone()).await? {
                Reply::Account(a) => return Ok(std::sync::Arc::unwrap_or_clone(a)),
                Reply::Refused(Code::AccountHasTransfersInFlight)
                    if waits < self.close_waits_max =>
                {
                    waits += 1;
                    self.retry.pause(waits).await;
                }
                Reply::Refused(code) => {
                    let why = format!("{id} cannot be closed (waited {waits} times)");
                    return Err(rejected(code, "account_id", why));
                }
                Reply::NotFound => {
                    let why = format!("no account {id}");
                    return Err(rejected(Code::AccountNotFound, "account_id", why));
                }
                other => {
                    return Err(ExecError::Violation(format!(
                        "{id}: close answered {other}"
                    )))
                }
            }
        }
    }

    /// Sends one op to its shard, retrying store failures as the policy says. For account
    /// and read operations outside the transfer protocol (create, get, set a bound).
    pub async fn execute_op(&self, op: Op) -> Result<Reply, ExecError> {
        let mut replies = self.execute_ops(vec![op]).await?;
        Ok(replies.pop().expect("one reply per op"))
    }

    /// Sends ops as one batch per shard and answers one reply per op, in order, each
    /// durable; the ops a store failed are sent again (every op is idempotent) as the retry
    /// policy says.
    pub async fn execute_ops(&self, ops: Vec<Op>) -> Result<Vec<Reply>, ExecError> {
        let (replies, _) = self.send_ops(ops, false).await?;
        Ok(replies)
    }

    /// As [`Executor::execute_ops`], but when the shards share one log the replies may come
    /// before they are durable, with the LSN to pass to [`Executor::wait_durable`]
    /// before acting on them outside that log (answering a client). Writes made because
    /// of them may go on meanwhile (they are appended after); the wait is the caller's, on
    /// every path that answers, whatever else it waited for.
    pub async fn execute_ops_ahead(&self, ops: Vec<Op>) -> Result<(Vec<Reply>, u64), ExecError> {
        self.send_ops(ops, true).await
    }

    /// Waits until the shards' log is durable up to `lsn` (0: at once).
    pub async fn wait_durable(&self, lsn: u64) -> Result<Durable, ExecError> {
        self.cluster
            .wait_durable(lsn)
            .await
            .map_err(|e| ExecError::unsynced(&e))
    }

    async fn send_ops(&self, ops: Vec<Op>, ahead: bool) -> Result<(Vec<Reply>, u64), ExecError> {
        let mut lsn = 0;
        let mut replies: Vec<Option<Reply>> = vec![None; ops.len()];
        let mut failures = 0;
        let mut maybe_applied = false;
        loop {
            let unanswered: Vec<Request> = ops
                .iter()
                .enumerate()
                .filter(|(i, _)| replies[*i].is_none())
                .map(|(i, op)| Request {
                    tag: i as u32,
                    op: op.clone(),
                })
                .collect();
            let mut last = None;
            let sent = if ahead {
                let (sent, at) = self.cluster.execute_ahead(&unanswered).await?;
                lsn = lsn.max(at);
                sent
            } else {
                self.cluster.execute(&unanswered).await?
            };
            for (req, sent) in unanswered.iter().zip(sent) {
                match sent {
                    Ok(reply) => replies[req.tag as usize] = Some(reply),
                    Err(e) => {
                        maybe_applied |= matches!(e, StoreError::Indeterminate(_));
                        last = Some(e);
                    }
                }
            }
            let Some(e) = last else {
                return Ok((replies.into_iter().flatten().collect(), lsn));
            };
            failures += 1;
            if !e.is_retryable() || !self.retry.policy().allows(failures) {
                let what = match unanswered.as_slice() {
                    [one] => one.op.to_string(),
                    many => format!("{} ops", many.len()),
                };
                let what = format!("{what}: gave up after {failures} failed attempts");
                return Err(gave_up(what, Some(&e), maybe_applied));
            }
            self.retry.pause(failures).await;
        }
    }

    /// Drives already started machines together to their outcomes (results in order). The
    /// sweeper's entry point; callers bound how many they pass.
    pub async fn drive(
        &self,
        starts: Vec<(Machine, Vec<Request>)>,
    ) -> Vec<Result<Outcome, ExecError>> {
        drive(
            &self.cluster,
            self.clock.as_ref(),
            &self.retry,
            starts,
            None,
        )
        .await
    }

    async fn drive_one(&self, start: (Machine, Vec<Request>)) -> Result<Outcome, ExecError> {
        let mut results = self.drive(vec![start]).await;
        results.pop().expect("one result per machine")
    }
}

/// Transfers driven through all their rounds by [`Executor::submit_many_ahead`], whose
/// outcomes wait for the log to be durable up to [`Ahead::lsn`].
pub struct Ahead {
    windows: Vec<Window>,
    /// The check's answers, from [`Executor::submit_checked_ahead`].
    checked: Option<Checked>,
}

/// What the check before a submit answered: refusals (or its failure) at their places, the
/// places of the driven transfers, and the LSN its reads rest on.
struct Checked {
    results: Vec<Option<Result<Outcome, ExecError>>>,
    slots: Vec<usize>,
    lsn: u64,
}

/// One window of at most [`FLIGHTS_MAX`] transfers: those refused before they started, and
/// the drive of the others (at `slots`), every round run.
struct Window {
    results: Vec<Option<Result<Outcome, ExecError>>>,
    slots: Vec<usize>,
    drive: Drive,
}

impl Ahead {
    /// The LSN the outcomes rest on (0: nothing to wait for).
    pub fn lsn(&self) -> u64 {
        let checked = self.checked.as_ref().map_or(0, |c| c.lsn);
        self.windows.iter().map(Window::lsn).fold(checked, u64::max)
    }

    /// The outcomes, in the order of the specs, given the result of waiting for
    /// [`Ahead::lsn`] (`Cluster::wait_durable` or `Cluster::sync_durable`, whose
    /// [`Durable`] only a log makes): if the wait failed, or proves an LSN short of this one, every
    /// outcome that rests on an answer is `Indeterminate`.
    pub fn outcomes(self, synced: Result<Durable, StoreError>) -> Vec<Result<Outcome, ExecError>> {
        let lsn = self.lsn();
        let driven = self
            .windows
            .into_iter()
            .flat_map(|w| w.outcomes(synced.clone(), None));
        let Some(checked) = self.checked else {
            return driven.collect();
        };
        // The check's refusals rest on its reads: told only if they are durable.
        let unsynced = Durable::cover(&synced, lsn)
            .err()
            .map(|e| ExecError::unsynced(&e));
        let mut results = checked.results;
        for (i, r) in checked.slots.into_iter().zip(driven) {
            results[i] = Some(r);
        }
        results
            .into_iter()
            .map(|r| match (r.expect("every spec has a result"), &unsynced) {
                (Err(ExecError::Rejected(_)), Some(e)) => Err(e.clone()),
                (r, _) => r,
            })
            .collect()
    }
}

impl Window {
    /// The LSN its outcomes rest on.
    fn lsn(&self) -> u64 {
        self.drive.lsn()
    }

    /// Its outcomes in the order of its specs, given the wait for [`Window::lsn`].
    fn outcomes(
        mut self,
        synced: Result<Durable, StoreError>,
        decisions: Option<&dyn Decisions>,
    ) -> Vec<Result<Outcome, ExecError>> {
        self.drive.synced(synced);
        let mut results = self.results;
        for (i, r) in self.slots.into_iter().zip(self.drive.outcomes(decisions)) {
            results[i] = Some(r);
        }
        results
            .into_iter()
            .map(|r| r.expect("every spec has a result"))
            .collect()
    }
}

/// `specs` in windows of at most [`FLIGHTS_MAX`], in order.
fn windows(specs: Vec<TransferSpec>) -> impl Iterator<Item = Vec<TransferSpec>> {
    let mut specs = specs.into_iter().peekable();
    std::iter::from_fn(move || {
        specs
            .peek()
            .is_some()
            .then(|| specs.by_ref().take(FLIGHTS_MAX).collect())
    })
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("owner", &self.owner)
            .field("cfg", &self.cfg)
            .field("retry", &self.retry)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

fn not_found(id: &TransferId) -> ExecError {
    rejected(Code::TransferNotFound, "id", format!("no transfer {id}"))
}

fn rejected(code: Code, field: &str, message: String) -> ExecError {
    ExecError::Rejected(Rejection::new(code, field, message))
}
