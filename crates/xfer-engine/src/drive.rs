//! Driving many [`Machine`]s together, in rounds. Each round:
//!
//! ```text
//!   tick every live machine (deadline cancels) ─▶ drop requests it no longer wants
//!        ─▶ ONE batch per shard for all machines' requests (Cluster::execute)
//!        ─▶ feed each reply to its machine; keep each failed request for the next round
//!        ─▶ if anything failed: back off (Retry), counting failed rounds per machine
//! ```
//!
//! A machine whose rounds fail `attempts_max` times in a row is given up: `Unavailable` if
//! nothing of it can have been applied (no reply ever came and every failure said so),
//! else `Indeterminate`. Giving up is always safe: every request is idempotent and whatever
//! the machine left is finished by a sweeper once its lease lapses. A round that answers
//! anything counts as progress and resets the count; [`ROUNDS_MAX`] bounds the whole drive.

use crate::cluster::{Cluster, Sent};
use crate::error::ExecError;
use crate::executor::Decisions;
use crate::machine::{Machine, Outcome, Request};
use crate::retry::{Retry, RetryPolicy};
use xfer_core::{Clock, Code, Rejection};
use xfer_store::StoreError;

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
    result: Option<Result<Outcome, ExecError>>,
}

/// Runs `starts` to their outcomes; results in the same order.
pub(crate) async fn drive(
    cluster: &Cluster,
    clock: &dyn Clock,
    retry: &Retry,
    starts: Vec<(Machine, Vec<Request>)>,
    decisions: Option<&dyn Decisions>,
) -> Vec<Result<Outcome, ExecError>> {
    let mut flights: Vec<Flight> = starts.into_iter().map(Flight::new).collect();
    for round in 0..=ROUNDS_MAX {
        let now = clock.now();
        let (mut owners, mut batch) = (Vec::new(), Vec::new());
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
        let sent = match cluster.execute(&batch).await {
            Ok(sent) => sent,
            Err(e) => {
                flights
                    .iter_mut()
                    .for_each(|f| f.fail(ExecError::Unroutable(e.clone())));
                break;
            }
        };
        let now = clock.now();
        for ((i, req), sent) in owners.into_iter().zip(batch).zip(sent) {
            flights[i].absorb(req, sent, now, decisions);
        }
        let worst = flights
            .iter_mut()
            .filter_map(|f| f.end_round(retry.policy()))
            .max();
        if let Some(failures) = worst {
            retry.pause(failures).await;
        }
    }
    flights.into_iter().map(Flight::finish).collect()
}

/// What a stopped machine means to a caller: rejections, a missing transfer and broken
/// invariants are errors; finished, held and left are outcomes.
fn settle(machine: &Machine, outcome: &Outcome) -> Result<Outcome, ExecError> {
    match outcome {
        Outcome::Rejected(r) => Err(ExecError::Rejected(r.clone())),
        Outcome::NotFound => Err(ExecError::Rejected(Rejection::new(
            Code::TransferNotFound,
            "id",
            format!("no transfer {}", machine.id()),
        ))),
        Outcome::Violation(m) => Err(ExecError::Violation(m.clone())),
        other => Ok(other.clone()),
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
        }
    }

    /// Ticks the machine and prunes the queue; true if there is something to send.
    fn begin_round(&mut self, now: xfer_core::Timestamp) -> bool {
        if self.result.is_some() {
            return false;
        }
        (self.round_ok, self.round_err) = (false, false);
        let ticked = self.machine.on_tick(now);
        self.queue.extend(ticked);
        let machine = &self.machine;
        self.queue.retain(|r| machine.wants(r.tag));
        if let Some(outcome) = self.machine.outcome() {
            self.result = Some(settle(&self.machine, outcome));
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

    /// Takes one request's result.
    fn absorb(
        &mut self,
        req: Request,
        sent: Sent,
        now: xfer_core::Timestamp,
        decisions: Option<&dyn Decisions>,
    ) {
        if self.result.is_some() {
            return;
        }
        match sent {
            Ok(reply) => {
                (self.round_ok, self.maybe_applied) = (true, true);
                if self.machine.wants(req.tag) {
                    let deciding = self.machine.is_deciding();
                    let next = self.machine.on_reply(req.tag, reply, now);
                    self.queue.extend(next);
                    if let Some(d) = decisions.filter(|_| deciding && self.machine.is_decided()) {
                        d.decided(self.machine.id());
                    }
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
            self.result = Some(Err(gave_up(
                what,
                self.last_error.as_ref(),
                self.maybe_applied,
            )));
        }
    }

    fn fail(&mut self, e: ExecError) {
        if self.result.is_none() {
            self.result = Some(Err(e));
        }
    }

    fn finish(self) -> Result<Outcome, ExecError> {
        match (self.result, self.machine.outcome()) {
            (Some(r), _) => r,
            (None, Some(o)) => settle(&self.machine, o),
            (None, None) => Err(ExecError::Indeterminate(format!(
                "{}: stopped driving in phase {}",
                self.machine.id(),
                self.machine.phase_name()
            ))),
        }
    }
}
