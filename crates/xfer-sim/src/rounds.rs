//! The production driver in the simulated world: an executor process runs its machines
//! with [`xfer_engine::Drive`], the code `xfer serve` and the sweeper run, instead of the
//! world's own timers and resends.
//!
//! A round's requests go out as messages (each lost, delayed, duplicated or refused as the
//! faults say); a request without an answer after `op_timeout_ms` fails with
//! `Indeterminate`, a refused one with `Unavailable`; once every request of the round has
//! a result the round goes back to the drive. Pauses between rounds are simulated time.
//! With a shared log ([`SimLog`](crate::log::SimLog)) the drive's wait for the log ends at
//! the first sync that covers it; a loss of the log's tail kills every executor (they
//! share the store's process) and drops the messages they had sent.
//!
//! The `durable` checker: an outcome told or a decision reported must already be in the
//! log's durable prefix.

use crate::config::FaultKind;
use crate::world::{Event, Slot, Ticket, Work, World};
use std::sync::Mutex;
use xfer_core::{TransferId, TransferState};
use xfer_engine::{Decisions, Drive, Durable, ExecError, Machine, Next, Outcome, Request};
use xfer_store::{Reply, SharedLog, StoreError};

/// Machines driven together, and the round in flight.
pub(crate) struct Driven {
    /// Machines gathered before the drive starts.
    starts: Vec<(Machine, Vec<Request>)>,
    drive: Option<Drive>,
    /// The round in flight (its messages carry the number), one result per request.
    round: u32,
    results: Vec<Option<Result<Reply, StoreError>>>,
    missing: usize,
    /// The highest LSN the round's answers carried.
    lsn: u64,
    /// Waits for the log to be durable up to the drive's LSN.
    syncing: bool,
}

/// Decisions the drive reports, gathered to be checked.
#[derive(Default)]
struct Reported(Mutex<Vec<TransferId>>);

impl Decisions for Reported {
    fn decided(&self, id: &TransferId) {
        self.0.lock().expect("one thread").push(id.clone());
    }
}

impl World {
    /// Adds a started machine to process `p`'s forming drive (a new one starts shortly).
    pub(crate) fn join(&mut self, p: usize, m: Machine, reqs: Vec<Request>, ticket: Ticket) {
        let forming = self.procs[p]
            .forming
            .filter(|mid| self.procs[p].slots.contains_key(mid));
        let mid = match forming {
            Some(mid) => mid,
            None => {
                let mid = self.add_slot(p, Work::Drive(Box::new(Driven::new())), Vec::new());
                self.procs[p].forming = Some(mid);
                let (inc, gather) = (self.procs[p].inc, self.rng.range(0, 3));
                self.schedule(gather, Event::Start { proc: p, inc, mid });
                mid
            }
        };
        let slot = self.procs[p].slots.get_mut(&mid).expect("present");
        slot.tickets.push(ticket);
        driven(slot).starts.push((m, reqs));
    }

    /// Drives `starts` on process `p` at once, as one drive.
    pub(crate) fn drive_now(&mut self, p: usize, starts: Vec<(Machine, Vec<Request>, Ticket)>) {
        let mut d = Driven::new();
        let mut tickets = Vec::new();
        for (m, reqs, ticket) in starts {
            d.starts.push((m, reqs));
            tickets.push(ticket);
        }
        let mid = self.add_slot(p, Work::Drive(Box::new(d)), tickets);
        self.begin(p, mid);
    }

    pub(crate) fn on_start(&mut self, ev: Event) {
        let Some((p, mid)) = self.for_drive(&ev) else {
            return;
        };
        if self.procs[p].forming == Some(mid) {
            self.procs[p].forming = None;
        }
        self.begin(p, mid);
    }

    pub(crate) fn on_resume(&mut self, ev: Event) {
        if let Some((p, mid)) = self.for_drive(&ev) {
            self.step(p, mid);
        }
    }

    /// The process and drive a `Start` or `Resume` is for, if its process still runs it
    /// now (a paused process gets the event again when it wakes).
    fn for_drive(&mut self, ev: &Event) -> Option<(usize, u64)> {
        let (Event::Start { proc, inc, mid } | Event::Resume { proc, inc, mid }) = *ev else {
            unreachable!("a drive's event")
        };
        (!self.gone(proc, inc) && !self.deferred(proc, ev)).then_some((proc, mid))
    }

    fn begin(&mut self, p: usize, mid: u64) {
        let Some(slot) = self.procs[p].slots.get_mut(&mid) else {
            return;
        };
        let d = driven(slot);
        d.drive = Some(Drive::new(std::mem::take(&mut d.starts), true));
        self.step(p, mid);
    }

    /// Runs the drive on process `p`'s slot `mid` until it waits: for a round's answers, a
    /// pause, the log, or nothing more (then its clients are told).
    fn step(&mut self, p: usize, mid: u64) {
        let (now, inc) = (self.clock(p), self.procs[p].inc);
        loop {
            let Some(slot) = self.procs[p].slots.get_mut(&mid) else {
                return;
            };
            let d = driven(slot);
            let drive = d.drive.as_mut().expect("started");
            match drive.next(now) {
                Next::Send(batch) => {
                    let batch: Vec<Request> = batch.to_vec();
                    d.round += 1;
                    d.results = vec![None; batch.len()];
                    d.missing = batch.len();
                    d.lsn = 0;
                    let round = d.round;
                    for (i, r) in batch.into_iter().enumerate() {
                        self.transmit(p, mid, i as u32, round, r.op);
                    }
                    return;
                }
                Next::Pause(failures) => {
                    let ms = self.policy.backoff_ms(failures);
                    self.schedule(ms, Event::Resume { proc: p, inc, mid });
                    return;
                }
                Next::Sync(lsn) => {
                    let log = self.log.as_ref().expect("only a shared log hands out lsns");
                    match Durable::of(log, lsn) {
                        Some(durable) => drive.synced(Ok(durable)),
                        None => {
                            d.syncing = true;
                            return;
                        }
                    }
                }
                Next::Done => return self.finish_drive(p, mid),
            }
        }
    }

    /// The result of request `tag` of round `round` of the drive `mid` on process `p`.
    pub(crate) fn on_round_result(
        &mut self,
        p: usize,
        mid: u64,
        tag: u32,
        round: u32,
        sent: Result<Reply, StoreError>,
        lsn: u64,
    ) {
        let Some(slot) = self.procs[p].slots.get_mut(&mid) else {
            return;
        };
        let d = driven(slot);
        let i = tag as usize;
        if d.round != round || d.results.get(i).is_none_or(|r| r.is_some()) {
            return; // an earlier round's, or after the request's timeout
        }
        d.results[i] = Some(sent);
        d.lsn = d.lsn.max(lsn);
        d.missing -= 1;
        if d.missing > 0 {
            return;
        }
        if self.faulty(FaultKind::Crash, 300) {
            self.crash(p); // dies with the round answered, before acting on it
            return;
        }
        let now = self.clock(p);
        let policy = self.policy;
        let slot = self.procs[p].slots.get_mut(&mid).expect("present");
        let d = driven(slot);
        let results = d.results.drain(..).map(|r| r.expect("every one")).collect();
        let drive = d.drive.as_mut().expect("started");
        drive.answered(results, d.lsn, now, &policy);
        let reported = Reported::default();
        let log = self.log.as_ref();
        drive.report(&|at| log.is_none_or(|l| l.is_durable(at)), &reported);
        self.check_reported(reported);
        self.step(p, mid);
    }

    /// Tells every client of the finished drive `mid` its outcome.
    fn finish_drive(&mut self, p: usize, mid: u64) {
        let slot = self.procs[p].slots.remove(&mid).expect("present");
        self.untrack(p, &slot);
        let Work::Drive(d) = slot.work else {
            unreachable!("a drive's slot")
        };
        let reported = Reported::default();
        let outcomes = d.drive.expect("started").outcomes(Some(&reported));
        self.check_reported(reported);
        for (ticket, outcome) in slot.tickets.iter().zip(outcomes) {
            let outcome = match outcome {
                Ok(o) => Some(o),
                Err(ExecError::Rejected(r)) => Some(Outcome::Rejected(r)),
                Err(ExecError::Violation(v)) => Some(Outcome::Violation(v)),
                Err(_) => None,
            };
            self.conclude(ticket, outcome);
        }
    }

    /// The shared log syncs; the drives waiting for it go on.
    pub(crate) fn on_sync(&mut self) {
        let Some(log) = &mut self.log else { return };
        log.sync();
        let ms = self.rng.range(self.cfg.sync_ms.0, self.cfg.sync_ms.1);
        self.schedule(ms, Event::Sync);
        self.wake_syncing(None);
    }

    /// The drives waiting for the log go on, told the sync `failed` if it did. A paused
    /// process is left waiting: it sees a later sync when it wakes.
    fn wake_syncing(&mut self, failed: Option<StoreError>) {
        for p in 0..self.procs.len() {
            if !self.procs[p].alive || self.procs[p].paused_until > self.now {
                continue;
            }
            let waiting: Vec<u64> = self.procs[p]
                .slots
                .iter_mut()
                .filter_map(|(mid, slot)| match &mut slot.work {
                    Work::Drive(d) if d.syncing => {
                        if let Some(e) = &failed {
                            d.drive.as_mut().expect("started").synced(Err(e.clone()));
                        }
                        d.syncing = false;
                        Some(*mid)
                    }
                    _ => None,
                })
                .collect();
            for mid in waiting {
                self.step(p, mid);
            }
        }
    }

    /// A sync fails, and the store's process dies: the drives waiting for the log hear of
    /// the failure first (the embedded store fails closed on it, until reopened); then the
    /// log keeps its durable prefix, the shards become what it leaves, and the executors,
    /// which share the process, die with it.
    pub(crate) fn on_log_loss(&mut self) {
        if self.heal_at.is_none() && self.log.is_some() {
            self.sync_failed();
            self.lose_log();
        }
    }

    /// A sync fails (as an `fdatasync` can): the drives waiting for the log are told so and
    /// answer what they know, every outcome resting on an answer unknown.
    fn sync_failed(&mut self) {
        let why = StoreError::Indeterminate("the log's sync failed".into());
        self.wake_syncing(Some(why));
    }

    /// The store's process dies with its log's undurable tail (see `on_log_loss`).
    fn lose_log(&mut self) {
        let Some(log) = &mut self.log else { return };
        let shards = log.lose();
        self.count(FaultKind::LogLoss);
        for (shard, kept) in self.shards.iter_mut().zip(shards) {
            shard.store = kept;
        }
        // A transfer whose end was lost ends again later: termination is judged by that.
        let (shards, router) = (&self.shards, &self.router);
        self.checker.terminal_at.retain(|id, _| {
            let kept = shards[router.shard_of_transfer(id)].store.transfer(id);
            kept.is_some_and(|r| r.state.is_terminal())
        });
        self.lost_before = self.send_seq;
        for p in 0..self.procs.len() {
            if self.procs[p].alive {
                self.die(p);
            }
        }
    }

    /// The `durable` checker: the transfer `id` is `told` (or past it) in the log's durable
    /// prefix (always, without a shared log: every answer was durable).
    pub(crate) fn durable_holds(&mut self, id: &TransferId, told: TransferState, what: &str) {
        let Some(log) = &self.log else { return };
        let shard = self.router.shard_of_transfer(id);
        let kept = log.durable_view()[shard].transfer(id).map(|r| r.state);
        let holds = match told {
            TransferState::Done | TransferState::Canceled => kept == Some(told),
            _ => kept.is_some_and(|s| s == TransferState::Held || s.is_decided()),
        };
        if !holds {
            let detail = format!("{id}: {what} {told} while the durable log holds {kept:?}");
            self.checker.record("durable", self.now, detail);
        }
    }

    fn check_reported(&mut self, reported: Reported) {
        let ids = reported.0.into_inner().expect("one thread");
        for id in ids {
            // Any decision: applied, canceling or held.
            self.durable_holds(&id, TransferState::Applied, "reported decided, as");
        }
    }
}

impl Driven {
    fn new() -> Driven {
        Driven {
            starts: Vec::new(),
            drive: None,
            round: 0,
            results: Vec::new(),
            missing: 0,
            lsn: 0,
            syncing: false,
        }
    }
}

/// The drive of a drive's slot.
fn driven(slot: &mut Slot) -> &mut Driven {
    match &mut slot.work {
        Work::Drive(d) => d,
        _ => unreachable!("a drive's slot"),
    }
}
