//! Driving many [`Machine`]s together, in rounds, as [`Drive`]: a state machine with no
//! I/O of its own (requests out; results, the time and the log's durable LSN in), so that
//! the simulator runs the very code production runs. Each round:
//!
//! ```text
//!   tick every live machine (deadline cancels) ─▶ drop requests it no longer wants
//!        ─▶ ONE batch per shard for all machines' requests         (Next::Send)
//!        ─▶ feed each reply to its machine; keep each failed request for the next round
//!        ─▶ if anything failed: back off, counting failed rounds   (Next::Pause)
//!   … until no machine waits for a request; then wait for the log  (Next::Sync)
//!        ─▶ the outcomes                                           (Next::Done)
//! ```
//!
//! When every shard appends to one log (the embedded store), a round's answers come before
//! they are durable, with the LSN they rest on, and the next round goes on at once: a
//! crash keeps a prefix of that log, so no step can survive without the steps it followed.
//! Nothing leaves the drive before the log is durable up to the last LSN its machines
//! saw: a decision is reported ([`Decisions`]) once its round's LSN is durable
//! ([`Drive::report`]), and the outcomes only after [`Drive::synced`] was given a
//! [`Durable`] covering [`Drive::lsn`]. If that wait fails, every outcome that rests on an
//! answer is `Indeterminate`. A transfer thus waits for one sync instead of one per step.
//!
//! A machine whose rounds fail `attempts_max` times in a row is given up: `Unavailable` if
//! nothing of it can have been applied (no reply ever came and every failure said so),
//! else `Indeterminate`. Giving up is always safe: every request is idempotent and whatever
//! the machine left is finished by a sweeper once its lease lapses. A round that answers
//! anything counts as progress and resets the count; [`ROUNDS_MAX`] bounds the whole drive.
//!
//! `run` is the production loop: `Drive` against a [`Cluster`], pausing with a [`Retry`].

use crate::cluster::{Cluster, Durable, Sent};
use crate::error::ExecError;
use crate::machine::{Machine, Outcome, Request};
use crate::retry::{Retry, RetryPolicy};
use crate::router::RouteError;
use std::collections::VecDeque;
use xfer_core::mutant::{self, Mutant};
use xfer_core::{Clock, Code, Rejection, Timestamp, TransferId};
use xfer_store::StoreError;

/// Told, while transfers are driven, of each decision this executor writes: the transfer's
/// decide step (the commit point) answered and is durable, so it is applied, held or
/// canceling now and its outcome can no longer change. `xfer bench` times submit-to-decided with it.
pub trait Decisions: Send + Sync {
    /// `id` is decided.
    fn decided(&self, id: &TransferId);
}

/// The most rounds one drive runs before giving up on every machine still live. A plain
/// transfer needs six rounds without failures, a refund about ten.
pub const ROUNDS_MAX: u32 = 1_000;

/// What a [`Drive`] needs next.
#[derive(Debug)]
pub enum Next<'a> {
    /// Send these requests, one batch per shard, and hand one result per request, in this
    /// order, to [`Drive::answered`] (or the routing error to [`Drive::unroutable`]).
    Send(&'a [Request]),
    /// Pause before the next round; the worst machine's failed rounds in a row (for
    /// [`Retry::pause`]).
    Pause(u32),
    /// Every round is over: wait until the log is durable up to this LSN and hand the
    /// result to [`Drive::synced`].
    Sync(u64),
    /// The outcomes are ready ([`Drive::outcomes`]).
    Done,
}

/// Where a drive is.
#[derive(Debug)]
enum Stage {
    Rounds,
    Syncing(u64),
    /// The wait for the log is over: `Ok` if every answer taken is durable.
    Synced(Result<(), StoreError>),
}

/// Machines driven together. See the module docs.
pub struct Drive {
    flights: Vec<Flight>,
    /// Decisions not yet reported; `None` when nobody is told of them.
    unreported: Option<Unreported>,
    /// This round's requests, and the flight each came from. One pair of lists for every
    /// round, emptied as it is answered: a round's writes go to memory the round before wrote.
    owners: Vec<usize>,
    batch: Vec<Request>,
    round: u32,
    pause: Option<u32>,
    stage: Stage,
}

impl Drive {
    /// Drives `starts` (machines and their first requests); `decisions`: whether their
    /// decisions are to be reported ([`Drive::report`]).
    pub fn new(starts: Vec<(Machine, Vec<Request>)>, decisions: bool) -> Drive {
        let flights: Vec<Flight> = starts.into_iter().map(Flight::new).collect();
        Drive {
            owners: Vec::with_capacity(2 * flights.len()),
            batch: Vec::with_capacity(2 * flights.len()),
            flights,
            unreported: decisions.then(Unreported::default),
            round: 0,
            pause: None,
            stage: Stage::Rounds,
        }
    }

    /// What to do next, at `now`.
    pub fn next(&mut self, now: Timestamp) -> Next<'_> {
        assert!(
            self.batch.is_empty(),
            "a round's requests were not answered"
        );
        if let Some(failures) = self.pause.take() {
            return Next::Pause(failures);
        }
        if matches!(self.stage, Stage::Rounds) {
            if self.begin_round(now) {
                return Next::Send(&self.batch);
            }
            let lsn = self.lsn();
            self.stage = if lsn == 0 || mutant::is(Mutant::AckBeforeSync) {
                Stage::Synced(Ok(()))
            } else {
                Stage::Syncing(lsn)
            };
        }
        match self.stage {
            Stage::Syncing(lsn) => Next::Sync(lsn),
            _ => Next::Done,
        }
    }

    /// The results of the round's requests, in their order, answered at log `lsn` (0:
    /// durable when answered) and taken at `now`. `policy` says how many failed rounds a
    /// machine is allowed.
    pub fn answered(&mut self, sent: Vec<Sent>, lsn: u64, now: Timestamp, policy: &RetryPolicy) {
        assert_eq!(sent.len(), self.batch.len(), "one result per request");
        let mut decided = Vec::new();
        let (owners, batch) = (&mut self.owners, &mut self.batch);
        for ((i, req), sent) in owners.drain(..).zip(batch.drain(..)).zip(sent) {
            let f = &mut self.flights[i];
            if f.absorb(req, sent, now, lsn) && self.unreported.is_some() {
                decided.push(f.machine.id().clone());
            }
        }
        if let Some(u) = &mut self.unreported {
            u.push(lsn, decided);
        }
        self.pause = self
            .flights
            .iter_mut()
            .filter_map(|f| f.end_round(policy))
            .max();
    }

    /// The round could not be sent (an op no shard holds): every machine stops with it.
    pub fn unroutable(&mut self, e: RouteError) {
        self.owners.clear();
        self.batch.clear();
        self.flights
            .iter_mut()
            .for_each(|f| f.fail(ExecError::Unroutable(e.clone())));
    }

    /// The LSN every answer the machines took rests on (0: none waits).
    pub fn lsn(&self) -> u64 {
        self.flights.iter().map(|f| f.lsn).max().unwrap_or(0)
    }

    /// The wait for the log that [`Next::Sync`] asked for: if it failed, or proves an LSN
    /// short of [`Drive::lsn`], every outcome that rests on an answer is `Indeterminate`.
    /// Ignored once the drive has its answer.
    pub fn synced(&mut self, synced: Result<Durable, StoreError>) {
        let lsn = match self.stage {
            Stage::Syncing(lsn) => lsn,
            _ => return,
        };
        self.stage = Stage::Synced(Durable::cover(&synced, lsn));
    }

    /// Tells `to` of every decision whose round's LSN `is_durable` says durable (all of
    /// them once [`Drive::synced`] succeeded), in the order they were taken.
    pub fn report(&mut self, is_durable: &dyn Fn(u64) -> bool, to: &dyn Decisions) {
        let all = matches!(self.stage, Stage::Synced(Ok(())));
        if let Some(u) = &mut self.unreported {
            u.report(&|lsn| all || is_durable(lsn), to);
        }
    }

    /// The outcomes, in the order the machines came; reports what is left to `decisions`.
    /// Panics before [`Next::Done`].
    pub fn outcomes(
        mut self,
        decisions: Option<&dyn Decisions>,
    ) -> Vec<Result<Outcome, ExecError>> {
        match std::mem::replace(&mut self.stage, Stage::Rounds) {
            Stage::Synced(Ok(())) => {
                self.stage = Stage::Synced(Ok(()));
                if let Some(d) = decisions {
                    self.report(&|_| true, d);
                }
            }
            Stage::Synced(Err(e)) => self.flights.iter_mut().for_each(|f| f.unsynced(&e)),
            stage => panic!("outcomes asked for in stage {stage:?}"),
        }
        self.flights.into_iter().map(Flight::finish).collect()
    }
}

/// Runs `drive` against `cluster` until it waits for the log (`Some(lsn)`) or is done
/// (`None`), pausing as `retry` says and reporting decisions to `decisions` as their
/// LSNs become durable.
pub(crate) async fn run(
    drive: &mut Drive,
    cluster: &Cluster,
    clock: &dyn Clock,
    retry: &Retry,
    decisions: Option<&dyn Decisions>,
) -> Option<u64> {
    loop {
        match drive.next(clock.now()) {
            Next::Send(batch) => match cluster.execute_ahead(batch).await {
                Ok((sent, lsn)) => {
                    drive.answered(sent, lsn, clock.now(), retry.policy());
                    if let Some(d) = decisions {
                        drive.report(&|p| cluster.is_durable(p), d);
                    }
                }
                Err(e) => drive.unroutable(e),
            },
            Next::Pause(failures) => retry.pause(failures).await,
            Next::Sync(lsn) => return Some(lsn),
            Next::Done => return None,
        }
    }
}

/// Runs `starts` to their outcomes; results in the same order.
pub(crate) async fn drive(
    cluster: &Cluster,
    clock: &dyn Clock,
    retry: &Retry,
    starts: Vec<(Machine, Vec<Request>)>,
    decisions: Option<&dyn Decisions>,
) -> Vec<Result<Outcome, ExecError>> {
    let mut drive = Drive::new(starts, decisions.is_some());
    if let Some(lsn) = run(&mut drive, cluster, clock, retry, decisions).await {
        drive.synced(cluster.wait_durable(lsn).await);
    }
    drive.outcomes(decisions)
}

/// One machine and the requests it waits on.
struct Flight {
    machine: Machine,
    /// Requests to send next round: new ones, and failed ones still wanted.
    queue: Vec<Request>,
    /// Failed rounds in a row.
    failures: u32,
    /// A reply came, or a failure may have applied something.
    maybe_applied: bool,
    last_error: Option<StoreError>,
    round_ok: bool,
    round_err: bool,
    /// Why it is no longer driven, once it is not.
    result: Option<Ended>,
    /// The highest LSN of the answers it took (0: all were durable when answered).
    lsn: u64,
}

/// Why a flight is no longer driven.
enum Ended {
    /// Its machine stopped: the outcome is the machine's, taken (not copied) at the end.
    Stopped,
    /// The driver stopped it: given up, a broken invariant, a corrupted store.
    Failed(ExecError),
}

/// Decisions taken from answers not yet durable, reported once their LSN is.
#[derive(Default)]
struct Unreported {
    rounds: VecDeque<(u64, Vec<TransferId>)>,
}

impl Unreported {
    /// Queues `ids`, decided from answers at log `lsn`.
    fn push(&mut self, lsn: u64, ids: Vec<TransferId>) {
        if !ids.is_empty() {
            self.rounds.push_back((lsn, ids));
        }
    }

    /// Reports every round, oldest first, up to the first whose LSN is not durable.
    fn report(&mut self, is_durable: &dyn Fn(u64) -> bool, to: &dyn Decisions) {
        while let Some((lsn, _)) = self.rounds.front() {
            if !(is_durable(*lsn) || mutant::is(Mutant::ReportUndurableDecision)) {
                return;
            }
            let (_, ids) = self.rounds.pop_front().expect("front exists");
            ids.iter().for_each(|id| to.decided(id));
        }
    }
}

impl Drive {
    /// Ticks every live machine and gathers the round's requests; false when there are
    /// none (or the drive ran out of rounds and gave every machine up).
    fn begin_round(&mut self, now: Timestamp) -> bool {
        for (i, f) in self.flights.iter_mut().enumerate() {
            if f.begin_round(now) {
                for req in f.queue.drain(..) {
                    self.owners.push(i);
                    self.batch.push(req);
                }
            }
        }
        if self.batch.is_empty() {
            return false;
        }
        if self.round == ROUNDS_MAX {
            let why = format!("still running after {ROUNDS_MAX} rounds");
            self.flights.iter_mut().for_each(|f| f.give_up(&why));
            self.owners.clear();
            self.batch.clear();
            return false;
        }
        self.round += 1;
        true
    }
}

/// What a stopped machine means to a caller: rejections, a missing transfer and broken
/// invariants are errors; finished, held and left are outcomes.
fn finished(id: &TransferId, outcome: Outcome) -> Result<Outcome, ExecError> {
    match outcome {
        Outcome::Rejected(r) => Err(ExecError::Rejected(r)),
        Outcome::NotFound => Err(ExecError::Rejected(Rejection::new(
            Code::TransferNotFound,
            "id",
            format!("no transfer {id}"),
        ))),
        Outcome::Violation(m) => Err(ExecError::Violation(m)),
        other => Ok(other),
    }
}

/// The error for giving up on `what` after store failures.
pub(crate) fn gave_up(what: String, last: Option<&StoreError>, maybe_applied: bool) -> ExecError {
    let what = match last {
        Some(e) => format!("{what}: {e}"),
        None => what,
    };
    match last {
        Some(StoreError::Corrupted(_)) => ExecError::Corrupted(what),
        _ if maybe_applied => ExecError::Indeterminate(what),
        _ => ExecError::Unavailable(what),
    }
}

impl Flight {
    fn new((machine, queue): (Machine, Vec<Request>)) -> Flight {
        Flight {
            machine,
            queue,
            failures: 0,
            maybe_applied: false,
            last_error: None,
            round_ok: false,
            round_err: false,
            result: None,
            lsn: 0,
        }
    }

    /// Ticks the machine and prunes the queue; true if there is something to send.
    fn begin_round(&mut self, now: Timestamp) -> bool {
        if self.result.is_some() {
            return false;
        }
        (self.round_ok, self.round_err) = (false, false);
        self.machine.on_tick_into(now, &mut self.queue);
        let machine = &self.machine;
        self.queue.retain(|r| machine.wants(r.tag));
        if self.machine.outcome().is_some() {
            self.result = Some(Ended::Stopped);
            return false;
        }
        if self.queue.is_empty() {
            let why = format!(
                "{}: machine in phase {} waits for no request",
                self.machine.id(),
                self.machine.phase_name()
            );
            self.fail(ExecError::Violation(why));
            return false;
        }
        true
    }

    /// Takes one request's result, answered at log `lsn`; true if it decided the
    /// transfer.
    fn absorb(&mut self, req: Request, sent: Sent, now: Timestamp, lsn: u64) -> bool {
        if self.result.is_some() {
            return false;
        }
        match sent {
            Ok(reply) => {
                (self.round_ok, self.maybe_applied) = (true, true);
                self.lsn = self.lsn.max(lsn);
                if self.machine.wants(req.tag) {
                    let deciding = self.machine.is_deciding();
                    self.machine
                        .on_reply_into(req.tag, reply, now, &mut self.queue);
                    return deciding && self.machine.is_decided();
                }
            }
            Err(StoreError::Corrupted(m)) => self.fail(ExecError::Corrupted(m)),
            Err(e) => {
                self.round_err = true;
                self.maybe_applied |= matches!(e, StoreError::Indeterminate(_));
                self.last_error = Some(e);
                self.queue.push(req); // resent next round if still wanted
            }
        }
        false
    }

    /// The log could not be made durable up to the answers this machine took: whatever it
    /// concluded from them may be lost, so its outcome is unknown (errors that say more,
    /// like corruption, stay).
    fn unsynced(&mut self, e: &StoreError) {
        if self.lsn == 0 {
            return;
        }
        // What says more than "unknown" stays: an error other than a rejection.
        let keep = match &self.result {
            Some(Ended::Failed(e)) => !matches!(e, ExecError::Rejected(_)),
            Some(Ended::Stopped) => matches!(self.machine.outcome(), Some(Outcome::Violation(_))),
            None => false,
        };
        if !keep {
            self.result = Some(Ended::Failed(ExecError::Indeterminate(format!(
                "{}: the log could not be synced after phase {}: {e}",
                self.machine.id(),
                self.machine.phase_name()
            ))));
        }
    }

    /// Counts the round; gives up after too many failures. `Some(failures)` asks for a
    /// pause before the next round.
    fn end_round(&mut self, policy: &RetryPolicy) -> Option<u32> {
        if self.result.is_some() || !self.round_err {
            self.failures = 0;
            return None;
        }
        self.failures = if self.round_ok { 1 } else { self.failures + 1 };
        if !self.round_ok && !policy.allows(self.failures) {
            let why = format!("{} failed rounds in a row", self.failures);
            self.give_up(&why);
            return None;
        }
        Some(self.failures)
    }

    fn give_up(&mut self, why: &str) {
        if self.result.is_none() {
            let what = format!(
                "{}: gave up in phase {}, {why}",
                self.machine.id(),
                self.machine.phase_name()
            );
            self.result = Some(Ended::Failed(gave_up(
                what,
                self.last_error.as_ref(),
                self.maybe_applied,
            )));
        }
    }

    fn fail(&mut self, e: ExecError) {
        if self.result.is_none() {
            self.result = Some(Ended::Failed(e));
        }
    }

    fn finish(self) -> Result<Outcome, ExecError> {
        if let Some(Ended::Failed(e)) = self.result {
            return Err(e);
        }
        let id = self.machine.id().clone();
        let phase = self.machine.phase_name();
        match self.machine.into_outcome() {
            Some(o) => finished(&id, o),
            None => Err(ExecError::Indeterminate(format!(
                "{id}: stopped driving in phase {phase}"
            ))),
        }
    }
}
