//! Driving many [`Machine`]s together, in rounds. Each round:
//!
//! ```text
//!   tick every live machine (deadline cancels) ─▶ drop requests it no longer wants
//!        ─▶ ONE batch per shard for all machines' requests (Cluster::execute)
//!        ─▶ feed each reply to its machine; keep each failed request for the next round
//!        ─▶ if anything failed: back off (Retry), counting failed rounds per machine
//! ```
//!
//! When every shard appends to one log (the embedded store), a round's answers come before
//! they are durable ([`Cluster::execute_pending`]) and the next round goes on at once: a
//! crash keeps a prefix of that log, so no step can survive without the steps it followed.
//! Nothing leaves the drive before the log is durable up to the last point its machines
//! saw: a decision is reported ([`Decisions`]) once its round's point is durable, and the
//! outcomes are returned after one wait for the highest point. If that wait fails, every
//! outcome that rests on an answer is `Indeterminate`. A transfer thus waits for one sync
//! instead of one per step.
//!
//! A machine whose rounds fail `attempts_max` times in a row is given up: `Unavailable` if
//! nothing of it can have been applied (no reply ever came and every failure said so),
//! else `Indeterminate`. Giving up is always safe: every request is idempotent and whatever
//! the machine left is finished by a sweeper once its lease lapses. A round that answers
//! anything counts as progress and resets the count; [`ROUNDS_MAX`] bounds the whole drive.

use crate::cluster::{Cluster, Durable, Sent};
use crate::error::ExecError;
use crate::machine::{Machine, Outcome, Request};
use crate::retry::{Retry, RetryPolicy};
use std::collections::VecDeque;
use xfer_core::{Clock, Code, Rejection, TransferId};
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
    /// The highest log point of the answers it took (0: all were durable when answered).
    point: u64,
}

/// Why a flight is no longer driven.
enum Ended {
    /// Its machine stopped: the outcome is the machine's, taken (not copied) at the end.
    Stopped,
    /// The driver stopped it: given up, a broken invariant, a corrupted store.
    Failed(ExecError),
}

/// Decisions taken from answers not yet durable, reported once their point is.
#[derive(Default)]
struct Unreported {
    rounds: VecDeque<(u64, Vec<TransferId>)>,
}

impl Unreported {
    /// Queues `ids`, decided from answers at log `point`.
    fn push(&mut self, point: u64, ids: Vec<TransferId>) {
        if !ids.is_empty() {
            self.rounds.push_back((point, ids));
        }
    }

    /// Reports every round whose point is durable (all of them if `cluster` is `None`: the
    /// caller waited for the last).
    fn report(&mut self, cluster: Option<&Cluster>, to: &dyn Decisions) {
        while let Some((point, _)) = self.rounds.front() {
            if cluster.is_some_and(|c| !c.is_durable(*point)) {
                return;
            }
            let (_, ids) = self.rounds.pop_front().expect("front exists");
            ids.iter().for_each(|id| to.decided(id));
        }
    }
}

/// Machines driven through all their rounds, on answers that may not be durable yet: the
/// outcomes, once the log is durable up to [`Rounds::point`] ([`Rounds::outcomes`]).
pub(crate) struct Rounds {
    flights: Vec<Flight>,
    unreported: Unreported,
}

impl Rounds {
    /// The log point every answer the machines took rests on (0: none waits).
    pub(crate) fn point(&self) -> u64 {
        self.flights.iter().map(|f| f.point).max().unwrap_or(0)
    }

    /// The outcomes, in the order the machines came, given the wait for [`Rounds::point`]:
    /// if it failed, every outcome that rests on an answer is `Indeterminate`.
    pub(crate) fn outcomes(
        mut self,
        synced: Result<Durable, StoreError>,
        decisions: Option<&dyn Decisions>,
    ) -> Vec<Result<Outcome, ExecError>> {
        let point = self.point();
        let synced = synced.and_then(|d| {
            if d.covers(point) {
                Ok(())
            } else {
                Err(StoreError::Indeterminate(format!(
                    "the log is durable up to {}, not {point}: nothing ahead of it is told",
                    d.point()
                )))
            }
        });
        match synced {
            Ok(()) => {
                if let Some(d) = decisions {
                    self.unreported.report(None, d);
                }
            }
            Err(e) => self.flights.iter_mut().for_each(|f| f.unsynced(&e)),
        }
        self.flights.into_iter().map(Flight::finish).collect()
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
    let driven = rounds(cluster, clock, retry, starts, decisions).await;
    let synced = cluster.wait_durable(driven.point()).await;
    driven.outcomes(synced, decisions)
}

/// Runs `starts` through all their rounds, without waiting for the log at the end.
pub(crate) async fn rounds(
    cluster: &Cluster,
    clock: &dyn Clock,
    retry: &Retry,
    starts: Vec<(Machine, Vec<Request>)>,
    decisions: Option<&dyn Decisions>,
) -> Rounds {
    let mut flights: Vec<Flight> = starts.into_iter().map(Flight::new).collect();
    let mut unreported = Unreported::default();
    // One pair of lists for every round, emptied as it is answered: a round's writes go to
    // memory the round before wrote (new lists each round were fresh memory, and a miss
    // per request written: 1 % of `xfer bench`'s samples).
    let (mut owners, mut batch) = (
        Vec::with_capacity(2 * flights.len()),
        Vec::with_capacity(2 * flights.len()),
    );
    for round in 0..=ROUNDS_MAX {
        let now = clock.now();
        for (i, f) in flights.iter_mut().enumerate() {
            if f.begin_round(now) {
                for req in f.queue.drain(..) {
                    owners.push(i);
                    batch.push(req);
                }
            }
        }
        if batch.is_empty() {
            break;
        }
        if round == ROUNDS_MAX {
            let why = format!("still running after {ROUNDS_MAX} rounds");
            flights.iter_mut().for_each(|f| f.give_up(&why));
            break;
        }
        let (sent, point) = match cluster.execute_pending(&batch).await {
            Ok(sent) => sent,
            Err(e) => {
                flights
                    .iter_mut()
                    .for_each(|f| f.fail(ExecError::Unroutable(e.clone())));
                break;
            }
        };
        let now = clock.now();
        let mut decided = Vec::new();
        for ((i, req), sent) in owners.drain(..).zip(batch.drain(..)).zip(sent) {
            let f = &mut flights[i];
            if f.absorb(req, sent, now, point) && decisions.is_some() {
                decided.push(f.machine.id().clone());
            }
        }
        if let Some(d) = decisions {
            unreported.push(point, decided);
            unreported.report(Some(cluster), d);
        }
        let worst = flights
            .iter_mut()
            .filter_map(|f| f.end_round(retry.policy()))
            .max();
        if let Some(failures) = worst {
            retry.pause(failures).await;
        }
    }
    Rounds {
        flights,
        unreported,
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
            point: 0,
        }
    }

    /// Ticks the machine and prunes the queue; true if there is something to send.
    fn begin_round(&mut self, now: xfer_core::Timestamp) -> bool {
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

    /// Takes one request's result, answered at log `point`; true if it decided the
    /// transfer.
    fn absorb(&mut self, req: Request, sent: Sent, now: xfer_core::Timestamp, point: u64) -> bool {
        if self.result.is_some() {
            return false;
        }
        match sent {
            Ok(reply) => {
                (self.round_ok, self.maybe_applied) = (true, true);
                self.point = self.point.max(point);
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
        if self.point == 0 {
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
