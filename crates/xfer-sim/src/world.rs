//! The simulated world: executor processes, store shards and the network between them, run
//! as a discrete-event simulation on one thread. One [`Rng`] seeded from the run's seed makes
//! every choice (workload, latencies, which message is lost, when a process dies), so a seed
//! replays exactly and its event digest is the same on every run.
//!
//! ```text
//!  clients ──Action──▶ process p (Machines, sweeper) ──Deliver(op)──▶ shard s (MemoryShard, own clock)
//!                          ▲                                              │
//!                          └──────────────Reply / lost / late─────────────┘
//! ```
//!
//! Executors drive their machines one message at a time (each request with a timer of its
//! own) or, as production does, with the engine's [`xfer_engine::Drive`] in rounds, over
//! shards that answer durably or over one shared log that answers ahead of its sync
//! ([`crate::rounds`], [`SimLog`]); the seed picks ([`Driver`]).
//!
//! The run has a safety phase, where faults are injected and checkers watch every write,
//! and a healing phase, where faults stop and every transfer must reach a terminal state.

use crate::checker::Checker;
use crate::config::{Driver, FaultKind, SimConfig};
use crate::log::{Entry, SimLog};
use crate::rounds::Driven;
use crate::workload::{Action, Told, Workload};
use std::collections::{BTreeMap, BTreeSet};
use xfer_core::{Code, OwnerId, Rng, Timestamp, TransferId, TransferKind, TransferState};
use xfer_engine::{Machine, Outcome, Request, RetryPolicy, Router, Tally};
use xfer_store::{AccountOp, MemoryShard, Op, Reply, TransferOp};

/// Simulated time at which the run starts (so skewed clocks never go below zero).
const START_MS: u64 = 10_000;
/// How long the healing phase may last before the run is declared stuck.
const HEAL_LIMIT_MS: u64 = 120_000;

/// What a run produced.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    /// Distinct transfers recorded (each id once).
    pub transfers: u64,
    /// Submissions (duplicates and client retries included).
    pub submissions: u64,
    /// Transfers that ended done / canceled.
    pub done: u64,
    /// Transfers that ended canceled.
    pub canceled: u64,
    /// Faults injected, per kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Writes that reached a shard after a write sent later (a consequence of delays).
    pub reordered: u64,
    /// Events processed.
    pub events: u64,
    /// A digest of every event and the final state: equal digests, equal runs.
    pub digest: u64,
}

#[derive(Clone, Debug)]
pub(crate) struct Msg {
    proc: usize,
    inc: u32,
    mid: u64,
    tag: u32,
    attempt: u32,
    op: Op,
    send_seq: u64,
    /// The reply-lost fault fired: apply, then send no reply.
    lose_reply: bool,
    /// A duplicate copy: apply, reply to nobody (its original carries the reply).
    silent: bool,
}

#[derive(Clone, Debug)]
pub(crate) enum Ticket {
    /// The `n`th submission of a transfer id.
    Submit(TransferId, usize),
    /// A capture or void of a hold (the outcome is checked through `acks`).
    Follow,
    /// A capture sent after the client was told the hold's expiry moved to this instant.
    AfterExtend(TransferId, Timestamp),
    /// A recovery started by this process's sweeper.
    Sweep(TransferId),
    /// A create or close.
    Admin,
}

#[derive(Clone, Debug)]
pub(crate) enum Event {
    Generate,
    Client {
        action: Action,
        ticket: Ticket,
        tries: u32,
    },
    Deliver(usize, Box<Msg>),
    Reply {
        proc: usize,
        inc: u32,
        mid: u64,
        tag: u32,
        attempt: u32,
        reply: Option<Box<Reply>>,
        /// The shared log's LSN the reply rests on (0: durable when answered).
        lsn: u64,
    },
    Timeout {
        proc: usize,
        inc: u32,
        mid: u64,
        tag: u32,
        attempt: u32,
    },
    Sweep {
        proc: usize,
        inc: u32,
    },
    /// A forming drive of process `proc` takes no more machines and starts.
    Start {
        proc: usize,
        inc: u32,
        mid: u64,
    },
    /// A drive's pause between rounds is over.
    Resume {
        proc: usize,
        inc: u32,
        mid: u64,
    },
    /// The shared log syncs.
    Sync,
    LogLoss,
    Crash(usize),
    Restart(usize),
    Pause(usize),
    ShardDown(usize),
    Heal,
}

pub(crate) enum Work {
    Machine(Box<Machine>),
    Admin(Action),
    Drive(Box<Driven>),
}

pub(crate) struct Slot {
    pub(crate) work: Work,
    sent: BTreeMap<u32, (Op, u32)>,
    /// Whom to tell: one ticket per machine (a drive's in the order of its machines).
    pub(crate) tickets: Vec<Ticket>,
}

pub(crate) struct Proc {
    skew: i64,
    pub(crate) inc: u32,
    pub(crate) alive: bool,
    pub(crate) paused_until: u64,
    sweeper: bool,
    pub(crate) slots: BTreeMap<u64, Slot>,
    next_mid: u64,
    pub(crate) recovering: BTreeSet<TransferId>,
    /// The drive taking machines before it starts.
    pub(crate) forming: Option<u64>,
}

pub(crate) struct Shard {
    pub(crate) store: MemoryShard,
    skew: i64,
    down_until: u64,
    newest_send: u64,
}

/// One simulated run.
pub struct World {
    pub(crate) cfg: SimConfig,
    pub(crate) rng: Rng,
    pub(crate) now: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Event>,
    pub(crate) procs: Vec<Proc>,
    pub(crate) shards: Vec<Shard>,
    pub(crate) router: Router,
    pub(crate) workload: Workload,
    /// The checkers and what they found.
    pub checker: Checker,
    stats: RunStats,
    generated: usize,
    pub(crate) heal_at: Option<u64>,
    messages_in_flight: u64,
    clients_waiting: u64,
    account_writes: u64,
    pub(crate) acks: Vec<(TransferId, TransferState)>,
    pub(crate) send_seq: u64,
    /// The log every shard appends to, in runs with a shared log.
    pub(crate) log: Option<SimLog>,
    /// Messages sent up to this one died with a log loss.
    pub(crate) lost_before: u64,
    /// How drives back off between failed rounds.
    pub(crate) policy: RetryPolicy,
    /// The transfer no retry can finish (the `poison` fault), if any.
    poisoned: Option<TransferId>,
    /// The sweepers' count of failed recoveries (one for all: they decide alike).
    tally: Tally,
}

impl World {
    /// Sets up the run of `cfg`: accounts, funding, the workload and the faults.
    pub fn new(cfg: SimConfig) -> World {
        let mut rng = Rng::new(cfg.seed);
        let workload = Workload::new(&cfg, rng.fork());
        let skewed = cfg.has(FaultKind::Skew);
        let clock_skew_ms = cfg.protocol.skew_ms;
        let half = cfg.protocol.skew_ms as i64 / 2;
        let skew = |rng: &mut Rng| {
            if skewed {
                rng.range(0, 2 * half as u64) as i64 - half
            } else {
                0
            }
        };
        let procs = (0..cfg.procs)
            .map(|p| Proc {
                skew: skew(&mut rng),
                inc: 0,
                alive: true,
                paused_until: 0,
                sweeper: p == 0 || (p == 1 && cfg.has(FaultKind::TwoSweepers)),
                slots: BTreeMap::new(),
                next_mid: 0,
                recovering: BTreeSet::new(),
                forming: None,
            })
            .collect();
        let shards = (0..cfg.shards)
            .map(|_| Shard {
                store: MemoryShard::new(),
                skew: skew(&mut rng),
                down_until: 0,
                newest_send: 0,
            })
            .collect();
        let log = (cfg.driver == Driver::RoundsSharedLog).then(|| SimLog::new(cfg.shards));
        let policy = RetryPolicy {
            attempts_max: cfg.attempts_max,
            backoff_ms_min: 10,
            backoff_ms_max: 200,
        };
        let mut w = World {
            router: Router::hash(cfg.shards),
            cfg,
            rng,
            now: START_MS,
            seq: 0,
            queue: BTreeMap::new(),
            procs,
            shards,
            workload,
            checker: Checker {
                clock_skew_ms,
                ..Checker::default()
            },
            stats: RunStats::default(),
            generated: 0,
            heal_at: None,
            messages_in_flight: 0,
            clients_waiting: 0,
            account_writes: 0,
            acks: Vec::new(),
            send_seq: 0,
            log,
            lost_before: 0,
            policy,
            poisoned: None,
            tally: Tally::new(xfer_engine::sweeper::ESCALATE_AFTER_DEFAULT),
        };
        let clocks = w
            .procs
            .iter()
            .map(|p| p.skew)
            .chain(w.shards.iter().map(|s| s.skew));
        let skewed_clocks = clocks.filter(|s| *s != 0).count() as u64;
        w.count_n(FaultKind::Skew, skewed_clocks);
        w.setup();
        w
    }

    fn setup(&mut self) {
        for (id, asset, lower_bound) in self.workload.initial_accounts() {
            let shard = self
                .router
                .shard_of_account(&id, Some(&asset))
                .expect("hash router");
            let op = Op::Account(id, AccountOp::Create { asset, lower_bound });
            self.shards[shard].store.apply(&op, Timestamp(START_MS));
            if let Some(log) = &mut self.log {
                log.append(Entry::Apply(shard, op, Timestamp(START_MS)));
            }
        }
        if let Some(log) = &mut self.log {
            log.sync();
            let ms = self.rng.range(self.cfg.sync_ms.0, self.cfg.sync_ms.1);
            self.schedule(ms, Event::Sync);
        }
        for spec in self.workload.funding() {
            let n = self.workload.submission_count(&spec.id) - 1;
            let ticket = Ticket::Submit(spec.id.clone(), n);
            self.client(0, Action::Submit(spec), ticket, 0);
        }
        self.schedule(100, Event::Generate);
        for p in 0..self.procs.len() {
            if self.procs[p].sweeper {
                self.schedule(0, Event::Sweep { proc: p, inc: 0 });
            }
        }
        let safety_ms = 100 + self.cfg.operations as u64 * self.cfg.arrival_ms;
        let plan = [
            (FaultKind::Crash, safety_ms / 300),
            (FaultKind::Pause, safety_ms / 500),
            (FaultKind::Unavailable, safety_ms / 600),
            (FaultKind::LogLoss, safety_ms / 900),
        ];
        for (kind, n) in plan {
            if !self.cfg.has(kind) {
                continue;
            }
            for _ in 0..n.max(1) {
                let at = self.rng.range(0, safety_ms);
                let ev = match kind {
                    FaultKind::Crash => {
                        Event::Crash(self.rng.below(self.procs.len() as u64) as usize)
                    }
                    FaultKind::Pause => {
                        Event::Pause(self.rng.below(self.procs.len() as u64) as usize)
                    }
                    FaultKind::LogLoss => Event::LogLoss,
                    _ => Event::ShardDown(self.rng.below(self.shards.len() as u64) as usize),
                };
                self.schedule(at, ev);
            }
        }
        self.schedule(safety_ms + 1, Event::Heal);
    }

    /// Runs to the end and returns the statistics; violations are in [`World::checker`].
    pub fn run(mut self) -> (RunStats, Checker) {
        let mut drain_until = None;
        while let Some(((at, _), ev)) = self.queue.pop_first() {
            self.now = at;
            self.stats.events += 1;
            self.mix(at);
            self.handle(ev);
            match drain_until {
                // Settled: judge, then let only the sweepers run past every horizon.
                None if self.at_rest() => {
                    self.judge();
                    drain_until = Some(self.now + self.horizon_wait_ms());
                }
                Some(until) if self.now >= until => break,
                _ => {}
            }
            if self.heal_at.is_some_and(|h| self.now > h + HEAL_LIMIT_MS) {
                break;
            }
        }
        if drain_until.is_none() {
            self.judge(); // never at rest: termination reports what is stuck
        }
        self.finish()
    }

    /// Judges the run at rest: termination, atomicity, history, idempotency, and every
    /// outcome a client was told.
    fn judge(&mut self) {
        let bound = self.cfg.termination_bound_ms();
        let heal = self.heal_at.unwrap_or(self.now);
        let skew = self.cfg.protocol.skew_ms;
        let due = move |r: &xfer_core::TransferRecord| {
            let wall = |t: Timestamp| t.as_ms() + skew;
            let mut due = heal.max(wall(r.deadline));
            if let Some(e) = r.hold_expires_at {
                due = due.max(wall(e));
            }
            due + bound
        };
        let stores: Vec<&MemoryShard> = self.shards.iter().map(|s| &s.store).collect();
        self.checker
            .at_rest(&stores, &self.router, &self.workload, &due, self.now);
        for (id, state) in &self.acks {
            let shard = stores[self.router.shard_of_transfer(id)];
            let actual = shard.transfer(id).map(|r| r.state);
            if actual != Some(*state) {
                let detail = format!("{id}: acknowledged {state}, record says {actual:?}");
                self.checker.record("acknowledged", self.now, detail);
            }
        }
    }

    /// How long the sweepers need, from now, to pass every tombstone's horizon on every
    /// shard's clock (the end of its bucket, when the store's pruner takes it:
    /// `xfer_store::shard::prune_at`) and prune the backlog 256 a pass.
    fn horizon_wait_ms(&self) -> u64 {
        let mut wait = 0;
        for (i, s) in self.shards.iter().enumerate() {
            // A count and a maximum: the intents' order does not matter.
            let tombstones = s
                .store
                .accounts()
                .flat_map(|a| a.intents.unordered().map(|(_, i)| i));
            let (count, latest) = tombstones.fold((0u64, 0u64), |(n, h), t| {
                (n + 1, h.max(xfer_store::shard::prune_at(t.horizon).as_ms()))
            });
            let passes = count / 256 + 2;
            let until_horizon = latest.saturating_sub(self.shard_clock(i).as_ms());
            wait = wait.max(until_horizon + passes * self.cfg.sweep_interval_ms);
        }
        wait + self.cfg.protocol.skew_ms + self.cfg.sweep_interval_ms
    }

    fn finish(mut self) -> (RunStats, Checker) {
        // The stores as the sweepers left them, past every horizon: nothing may remain.
        let stores: Vec<MemoryShard> = self.shards.drain(..).map(|s| s.store).collect();
        self.checker.no_leaks(&stores, self.now);
        self.checker.history_index(&stores, self.now);
        self.checker.events(&stores, self.now);
        if std::env::var_os("XFER_SIM_REASONS").is_some() {
            let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
            for r in stores.iter().flat_map(|s| s.transfers()) {
                let key = r
                    .reason
                    .as_ref()
                    .map(|x| format!("{x}"))
                    .unwrap_or_else(|| r.state.to_string());
                let key: String = key.split(" on ").next().unwrap_or("").to_string();
                *reasons.entry(key).or_default() += 1;
            }
            eprintln!("reasons: {reasons:?}");
        }
        for r in stores.iter().flat_map(|s| s.transfers()) {
            match r.state {
                TransferState::Done => self.stats.done += 1,
                TransferState::Canceled => self.stats.canceled += 1,
                _ => {}
            }
            self.stats.digest = mix(self.stats.digest, r.epoch ^ (r.state as u64) << 32);
        }
        for a in stores.iter().flat_map(|s| s.accounts()) {
            self.stats.digest = mix(self.stats.digest, a.balance as u64);
        }
        self.stats.transfers = stores.iter().map(|s| s.transfers().count() as u64).sum();
        self.stats.submissions = self.workload.transfers;
        (self.stats, self.checker)
    }

    fn at_rest(&self) -> bool {
        self.heal_at.is_some()
            && self.messages_in_flight == 0
            && self.clients_waiting == 0
            && self.procs.iter().all(|p| p.slots.is_empty())
            && self.shards.iter().all(|s| {
                s.store
                    .transfers()
                    .all(|r| r.state.is_terminal() || Tally::skips(r))
            })
    }

    // --- plumbing -------------------------------------------------------------------------

    pub(crate) fn schedule(&mut self, after_ms: u64, ev: Event) {
        self.seq += 1;
        self.queue.insert((self.now + after_ms, self.seq), ev);
    }

    /// Schedules the resend timer of request `tag` of machine `mid` on process `p`.
    pub(crate) fn timer(
        &mut self,
        after_ms: u64,
        p: usize,
        inc: u32,
        mid: u64,
        tag: u32,
        attempt: u32,
    ) {
        self.schedule(
            after_ms,
            Event::Timeout {
                proc: p,
                inc,
                mid,
                tag,
                attempt,
            },
        );
    }

    fn mix(&mut self, v: u64) {
        self.stats.digest = mix(self.stats.digest, v);
    }

    pub(crate) fn count(&mut self, kind: FaultKind) {
        self.count_n(kind, 1);
    }

    fn count_n(&mut self, kind: FaultKind, n: u64) {
        *self.stats.faults.entry(kind.name()).or_default() += n;
    }

    pub(crate) fn faulty(&mut self, kind: FaultKind, per_million: u32) -> bool {
        self.heal_at.is_none() && self.cfg.has(kind) && self.rng.chance(per_million)
    }

    pub(crate) fn clock(&self, proc: usize) -> Timestamp {
        Timestamp((self.now as i64 + self.procs[proc].skew) as u64)
    }

    pub(crate) fn shard_clock(&self, shard: usize) -> Timestamp {
        Timestamp((self.now as i64 + self.shards[shard].skew) as u64)
    }

    pub(crate) fn latency(&mut self) -> u64 {
        if self.faulty(FaultKind::Delay, 30_000) {
            self.count(FaultKind::Delay);
            self.rng.range(self.cfg.delay_ms.0, self.cfg.delay_ms.1)
        } else {
            self.rng.range(self.cfg.latency_ms.0, self.cfg.latency_ms.1)
        }
    }

    /// Process `p` is dead (or a later incarnation) for an event of incarnation `inc`.
    pub(crate) fn gone(&self, p: usize, inc: u32) -> bool {
        !self.procs[p].alive || self.procs[p].inc != inc
    }

    /// Defers `ev` if process `p` is paused; true if it did.
    pub(crate) fn deferred(&mut self, p: usize, ev: &Event) -> bool {
        let until = self.procs[p].paused_until;
        if until > self.now {
            self.seq += 1;
            self.queue.insert((until, self.seq), ev.clone());
            return true;
        }
        false
    }

    // --- events ---------------------------------------------------------------------------

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Generate => self.generate(),
            Event::Client {
                action,
                ticket,
                tries,
            } => {
                self.clients_waiting -= 1;
                self.on_client(action, ticket, tries)
            }
            Event::Deliver(shard, msg) => {
                self.messages_in_flight -= 1;
                self.deliver(shard, *msg)
            }
            ev @ Event::Reply { .. } => self.on_reply(ev),
            ev @ Event::Timeout { .. } => self.on_timeout(ev),
            ev @ Event::Sweep { .. } => self.on_sweep(ev),
            ev @ Event::Start { .. } => self.on_start(ev),
            ev @ Event::Resume { .. } => self.on_resume(ev),
            Event::Sync => self.on_sync(),
            Event::LogLoss => self.on_log_loss(),
            Event::Crash(p) => self.crash(p),
            Event::Restart(p) => {
                self.procs[p].alive = true;
                if self.procs[p].sweeper {
                    let inc = self.procs[p].inc;
                    self.schedule(0, Event::Sweep { proc: p, inc });
                }
            }
            Event::Pause(p) => {
                if self.procs[p].alive {
                    let extra = self
                        .rng
                        .range(self.cfg.pause_extra_ms.0, self.cfg.pause_extra_ms.1);
                    self.procs[p].paused_until = self.now + self.cfg.protocol.lease_ms + extra;
                    self.count(FaultKind::Pause);
                }
            }
            Event::ShardDown(s) => {
                self.shards[s].down_until = self.now + self.rng.range(50, 400);
                self.count(FaultKind::Unavailable);
            }
            Event::Heal => {
                self.heal_at = Some(self.now);
                for s in &mut self.shards {
                    s.down_until = 0;
                }
            }
        }
    }

    fn generate(&mut self) {
        if self.generated >= self.cfg.operations {
            return;
        }
        self.generated += 1;
        let action = self.workload.next_action();
        if let Action::Submit(spec) = &action {
            // Halfway, a new plain transfer of two phases (a one-phase commit takes no
            // account step) is poisoned before anything of it is sent.
            let plain = spec.kind == TransferKind::Transfer
                && spec.refund_of.is_none()
                && self.workload.submission_count(&spec.id) == 1;
            if self.cfg.has(FaultKind::Poison)
                && self.poisoned.is_none()
                && self.generated >= self.cfg.operations / 2
                && plain
                && !self.router.is_local(spec)
            {
                self.poisoned = Some(spec.id.clone());
                self.checker.poisoned = Some(spec.id.clone());
                self.count(FaultKind::Poison);
            }
        }
        let ticket = match &action {
            Action::Submit(spec) => Ticket::Submit(
                spec.id.clone(),
                self.workload.submission_count(&spec.id) - 1,
            ),
            Action::Capture(_)
            | Action::CapturePart(..)
            | Action::Void(_)
            | Action::Extend { .. } => Ticket::Follow,
            Action::Create(..) | Action::Close(_) => Ticket::Admin,
        };
        self.client(0, action, ticket, 0);
        let gap = self.rng.range(0, 2 * self.cfg.arrival_ms);
        self.schedule(gap, Event::Generate);
    }

    pub(crate) fn client(&mut self, after_ms: u64, action: Action, ticket: Ticket, tries: u32) {
        self.clients_waiting += 1;
        self.schedule(
            after_ms,
            Event::Client {
                action,
                ticket,
                tries,
            },
        );
    }

    fn on_client(&mut self, action: Action, ticket: Ticket, tries: u32) {
        let p = self.rng.below(self.procs.len() as u64) as usize;
        if !self.procs[p].alive || self.procs[p].paused_until > self.now {
            // The client's connection fails; it tries again, maybe elsewhere.
            if tries < 20 {
                self.client(50, action, ticket, tries + 1);
            }
            return;
        }
        let (now, cfg) = (self.clock(p), self.cfg.protocol);
        let owner = self.owner(p);
        let started = match action {
            Action::Submit(spec) => {
                let local = self.router.is_local(&spec);
                match Machine::submit_placed(spec, owner, now, cfg, local) {
                    Ok((m, reqs)) => Some((Work::Machine(Box::new(m)), reqs)),
                    Err(r) => {
                        self.tell(&ticket, Told::Rejected(r.code));
                        None
                    }
                }
            }
            Action::Capture(id) => Some(Machine::capture(id, owner, now, cfg))
                .map(|(m, r)| (Work::Machine(Box::new(m)), r)),
            Action::CapturePart(id, amounts) => {
                Some(Machine::capture_part(id, amounts, owner, cfg))
                    .map(|(m, r)| (Work::Machine(Box::new(m)), r))
            }
            Action::Void(id) => Some(Machine::void(id, owner, now, cfg))
                .map(|(m, r)| (Work::Machine(Box::new(m)), r)),
            Action::Create(ref id, ref asset, lower_bound) => {
                let op = Op::Account(
                    id.clone(),
                    AccountOp::Create {
                        asset: asset.clone(),
                        lower_bound,
                    },
                );
                Some((Work::Admin(action.clone()), vec![Request { tag: 0, op }]))
            }
            Action::Close(ref id) => {
                let op = Op::Account(id.clone(), AccountOp::Close);
                Some((Work::Admin(action.clone()), vec![Request { tag: 0, op }]))
            }
            Action::Extend { ref id, until, .. } => {
                let op = Op::Transfer(id.clone(), TransferOp::Extend { until, now });
                Some((Work::Admin(action.clone()), vec![Request { tag: 0, op }]))
            }
        };
        match started {
            Some((Work::Machine(m), reqs)) if self.cfg.driver != Driver::Messages => {
                self.join(p, *m, reqs, ticket)
            }
            Some((work, reqs)) => self.start(p, work, reqs, ticket),
            None => {}
        }
    }

    pub(crate) fn owner(&self, p: usize) -> OwnerId {
        OwnerId::new(&format!("p{p}.{}", self.procs[p].inc)).expect("valid owner")
    }

    pub(crate) fn start(&mut self, p: usize, work: Work, reqs: Vec<Request>, ticket: Ticket) {
        let mid = self.add_slot(p, work, vec![ticket]);
        self.send_all(p, mid, reqs);
    }

    /// Gives process `p` a new slot; answers its id.
    pub(crate) fn add_slot(&mut self, p: usize, work: Work, tickets: Vec<Ticket>) -> u64 {
        let mid = self.procs[p].next_mid;
        self.procs[p].next_mid += 1;
        let slot = Slot {
            work,
            sent: BTreeMap::new(),
            tickets,
        };
        self.procs[p].slots.insert(mid, slot);
        mid
    }

    fn send_all(&mut self, p: usize, mid: u64, reqs: Vec<Request>) {
        for r in reqs {
            if let Some(slot) = self.procs[p].slots.get_mut(&mid) {
                slot.sent.insert(r.tag, (r.op.clone(), 1));
            }
            self.transmit(p, mid, r.tag, 1, r.op);
        }
    }

    pub(crate) fn transmit(&mut self, p: usize, mid: u64, tag: u32, attempt: u32, op: Op) {
        let inc = self.procs[p].inc;
        self.timer(self.cfg.op_timeout_ms, p, inc, mid, tag, attempt);
        if self.faulty(FaultKind::Drop, 15_000) {
            self.count(FaultKind::Drop);
            return;
        }
        let shard = self
            .router
            .shard_of_op(&op)
            .expect("hash router places every op");
        self.send_seq += 1;
        let lose_reply = self.faulty(FaultKind::ReplyLost, 25_000);
        let msg = Msg {
            proc: p,
            inc,
            mid,
            tag,
            attempt,
            op,
            send_seq: self.send_seq,
            lose_reply,
            silent: false,
        };
        if self.faulty(FaultKind::Duplicate, 25_000) {
            self.count(FaultKind::Duplicate);
            let later = self.rng.range(self.cfg.latency_ms.0, self.cfg.delay_ms.1);
            let mut copy = msg.clone();
            copy.silent = true;
            self.messages_in_flight += 1;
            self.schedule(later, Event::Deliver(shard, Box::new(copy)));
        }
        let latency = self.latency();
        self.messages_in_flight += 1;
        self.schedule(latency, Event::Deliver(shard, Box::new(msg)));
    }

    fn deliver(&mut self, s: usize, msg: Msg) {
        if msg.send_seq <= self.lost_before {
            return; // sent by a process that died with the log's loss
        }
        if msg.send_seq < self.shards[s].newest_send {
            self.stats.reordered += 1;
        }
        self.shards[s].newest_send = self.shards[s].newest_send.max(msg.send_seq);
        let (reply, lsn) = if self.shards[s].down_until > self.now {
            (None, 0)
        } else {
            let (reply, lsn) = self.apply(s, &msg.op);
            (Some(Box::new(reply)), lsn)
        };
        if msg.silent {
            return;
        }
        if msg.lose_reply && reply.is_some() {
            self.count(FaultKind::ReplyLost);
            return;
        }
        let latency = self.latency();
        let (proc, inc, mid, tag, attempt) = (msg.proc, msg.inc, msg.mid, msg.tag, msg.attempt);
        self.schedule(
            latency,
            Event::Reply {
                proc,
                inc,
                mid,
                tag,
                attempt,
                reply,
                lsn,
            },
        );
    }

    /// Applies `op` on shard `s` with the shard's clock, under the step-by-step checkers;
    /// with a shared log, appends it: answers the reply and the LSN it rests on.
    fn apply(&mut self, s: usize, op: &Op) -> (Reply, u64) {
        if self.is_poisoned(op) {
            // Answers what no step may answer, and changes nothing.
            return (Reply::NotFound, 0);
        }
        let reply = self.apply_checked(s, op);
        let now = self.shard_clock(s);
        let lsn = match &mut self.log {
            Some(log) => log.append(Entry::Apply(s, op.clone(), now)),
            None => 0,
        };
        (reply, lsn)
    }

    /// An account step of the poisoned transfer.
    fn is_poisoned(&self, op: &Op) -> bool {
        let Some(poisoned) = &self.poisoned else {
            return false;
        };
        let transfer = match op {
            Op::Account(
                _,
                AccountOp::Prepare { transfer, .. }
                | AccountOp::Post { transfer, .. }
                | AccountOp::PostPart { transfer, .. }
                | AccountOp::Release { transfer, .. },
            ) => transfer,
            _ => return false,
        };
        transfer == poisoned
    }

    fn apply_checked(&mut self, s: usize, op: &Op) -> Reply {
        let now = self.shard_clock(s);
        let store = &mut self.shards[s].store;
        match op {
            Op::Transfer(id, _) => {
                let before = store.transfer(id).map(|r| r.state);
                let reply = store.apply(op, now);
                let after = self.shards[s].store.transfer(id);
                self.checker.after_transfer_write(before, after, self.now);
                reply
            }
            Op::Account(id, _) => {
                let reply = store.apply(op, now);
                self.checker
                    .after_account_write(self.shards[s].store.account(id), self.now);
                self.account_writes += 1;
                if self.account_writes.is_multiple_of(16) {
                    let views: Vec<&MemoryShard> = self.shards.iter().map(|s| &s.store).collect();
                    self.checker.conservation(&views, &self.router, self.now);
                }
                reply
            }
        }
    }

    fn on_reply(&mut self, ev: Event) {
        let Event::Reply {
            proc: p,
            inc,
            mid,
            tag,
            attempt,
            ref reply,
            ..
        } = ev
        else {
            unreachable!()
        };
        if self.gone(p, inc) || self.deferred(p, &ev) {
            return;
        }
        if let Some(Slot {
            work: Work::Drive(_),
            ..
        }) = self.procs[p].slots.get(&mid)
        {
            let sent = match reply {
                Some(r) => Ok((**r).clone()),
                None => Err(xfer_store::StoreError::Unavailable("shard down".into())),
            };
            let Event::Reply { lsn, .. } = ev else {
                unreachable!()
            };
            return self.on_round_result(p, mid, tag, attempt, sent, lsn);
        }
        let Some(reply) = reply.clone() else {
            // Unavailable: retry after a short backoff, as the timeout would.
            let backoff = self.rng.range(10, 40);
            self.timer(backoff, p, inc, mid, tag, attempt);
            return;
        };
        if !self.procs[p].slots.contains_key(&mid) {
            return;
        }
        if self.faulty(FaultKind::Crash, 300) {
            self.crash(p); // dies between receiving this reply and acting on it
            return;
        }
        let now = self.clock(p);
        let slot = self.procs[p].slots.get_mut(&mid).expect("checked");
        slot.sent.remove(&tag);
        match &mut slot.work {
            Work::Machine(m) => {
                let reqs = m.on_reply(tag, *reply, now);
                slot.sent.retain(|t, _| m.wants(*t));
                let done = m.outcome().is_some();
                if self.faulty(FaultKind::Crash, 300) {
                    self.crash(p); // dies after the step, before sending the next ones
                    return;
                }
                self.send_all(p, mid, reqs);
                if done {
                    self.complete(p, mid);
                }
            }
            Work::Admin(action) => {
                let action = action.clone();
                self.procs[p].slots.remove(&mid);
                if let Action::Extend { id, from, until } = &action {
                    return self.on_extended(id, *from, *until, &reply);
                }
                if *reply == Reply::Refused(Code::AccountHasTransfersInFlight)
                    && self.workload.chance(500_000)
                {
                    self.client(200, action, Ticket::Admin, 0); // the close waits and tries again
                }
            }
            Work::Drive(_) => unreachable!("a drive's results go to on_round_result"),
        }
    }

    fn on_timeout(&mut self, ev: Event) {
        let Event::Timeout {
            proc: p,
            inc,
            mid,
            tag,
            attempt,
        } = ev
        else {
            unreachable!()
        };
        if self.gone(p, inc) || self.deferred(p, &ev) {
            return;
        }
        if let Some(Slot {
            work: Work::Drive(_),
            ..
        }) = self.procs[p].slots.get(&mid)
        {
            let why = format!("no answer within {} ms", self.cfg.op_timeout_ms);
            let sent = Err(xfer_store::StoreError::Indeterminate(why));
            return self.on_round_result(p, mid, tag, attempt, sent, 0);
        }
        let now = self.clock(p);
        let Some(slot) = self.procs[p].slots.get_mut(&mid) else {
            return;
        };
        if let Work::Machine(m) = &mut slot.work {
            let reqs = m.on_tick(now);
            if !reqs.is_empty() || m.outcome().is_some() {
                slot.sent.retain(|t, _| m.wants(*t));
                let done = m.outcome().is_some();
                self.send_all(p, mid, reqs);
                if done {
                    self.complete(p, mid);
                }
                return;
            }
        }
        let Some(slot) = self.procs[p].slots.get_mut(&mid) else {
            return;
        };
        let Some((op, sent_attempt)) = slot.sent.get_mut(&tag) else {
            return;
        };
        if *sent_attempt != attempt {
            return; // an older timer; a newer send is in flight
        }
        if attempt >= self.cfg.attempts_max {
            // The executor gives up; the transfer is left to the sweeper.
            let slot = self.procs[p].slots.remove(&mid).expect("present");
            self.untrack(p, &slot);
            self.tell(&slot.tickets[0], Told::Unknown);
            return;
        }
        *sent_attempt += 1;
        let op = op.clone();
        self.transmit(p, mid, tag, attempt + 1, op);
    }

    fn on_sweep(&mut self, ev: Event) {
        let Event::Sweep { proc: p, inc } = ev else {
            unreachable!()
        };
        if self.gone(p, inc) || self.deferred(p, &ev) {
            return;
        }
        if p > 0 {
            self.count(FaultKind::TwoSweepers);
        }
        let (now, cfg) = (self.clock(p), self.cfg.protocol);
        for s in 0..self.shards.len() {
            if self.shards[s].down_until > self.now {
                continue;
            }
            let due = self.shards[s].store.scan_due(now, 32);
            let mut starts = Vec::new();
            for r in due {
                let id = r.id().clone();
                if Tally::skips(&r) {
                    continue;
                }
                if r.escalation.is_some() {
                    self.checker.retried_escalated(&id, self.now);
                }
                if self.procs[p].recovering.insert(id.clone()) {
                    let (m, reqs) = Machine::recover(id.clone(), self.owner(p), now, cfg);
                    starts.push((m, reqs, Ticket::Sweep(id)));
                }
            }
            if self.cfg.driver == Driver::Messages {
                for (m, reqs, ticket) in starts {
                    self.start(p, Work::Machine(Box::new(m)), reqs, ticket);
                }
            } else if !starts.is_empty() {
                self.drive_now(p, starts); // the sweeper drives a pass's machines together
            }
            let shard_now = self.shard_clock(s);
            self.shards[s].store.prune(shard_now, 256);
            if let Some(log) = &mut self.log {
                log.append(Entry::Prune(s, shard_now, 256));
            }
        }
        self.schedule(self.cfg.sweep_interval_ms, Event::Sweep { proc: p, inc });
    }

    pub(crate) fn crash(&mut self, p: usize) {
        if self.procs[p].alive {
            self.count(FaultKind::Crash);
            self.die(p);
        }
    }

    /// Process `p` dies: what it ran is lost, its clients are told nothing.
    pub(crate) fn die(&mut self, p: usize) {
        if !self.procs[p].alive {
            return;
        }
        let slots = std::mem::take(&mut self.procs[p].slots);
        for ticket in slots.values().flat_map(|s| &s.tickets) {
            self.tell(ticket, Told::Unknown);
            // A client whose request died with the process often sends it again.
            if let (Ticket::Submit(id, n), true) = (ticket, self.workload.chance(500_000)) {
                if let Some(spec) = self
                    .workload
                    .submissions
                    .get(id)
                    .and_then(|v| v.get(*n))
                    .map(|s| s.spec.clone())
                {
                    let n = self.workload.resubmit(&spec);
                    self.client(100, Action::Submit(spec), Ticket::Submit(id.clone(), n), 0);
                }
            }
        }
        let proc = &mut self.procs[p];
        proc.recovering.clear();
        proc.forming = None;
        proc.alive = false;
        proc.inc += 1;
        let back = self.rng.range(20, 400);
        self.schedule(back, Event::Restart(p));
    }

    fn complete(&mut self, p: usize, mid: u64) {
        let Some(slot) = self.procs[p].slots.remove(&mid) else {
            return;
        };
        self.untrack(p, &slot);
        let Work::Machine(m) = &slot.work else { return };
        self.conclude(&slot.tickets[0], m.outcome().cloned());
    }

    /// Tells the client of `ticket` what its machine ended with (`None`: nothing known).
    pub(crate) fn conclude(&mut self, ticket: &Ticket, outcome: Option<Outcome>) {
        match outcome {
            Some(Outcome::Finished(r)) => {
                self.durable_holds(r.id(), r.state, "told");
                self.acks.push((r.id().clone(), r.state));
                self.tell(ticket, Told::State(r.state));
            }
            Some(Outcome::Held(r)) => {
                self.durable_holds(r.id(), TransferState::Held, "told");
                self.tell(ticket, Told::State(TransferState::Held));
                if let (Ticket::Submit(..), TransferKind::Hold { ttl_ms }) = (ticket, r.spec.kind) {
                    let expires = r.hold_expires_at.expect("a held transfer has an expiry");
                    if let Some((after, action)) =
                        self.workload.after_held(&r.spec, ttl_ms, expires)
                    {
                        self.client(after, action, Ticket::Follow, 0);
                    }
                }
            }
            Some(Outcome::Rejected(r)) => {
                if let (Ticket::AfterExtend(id, until), Code::HoldExpired) = (ticket, r.code) {
                    let skew = self.cfg.protocol.skew_ms;
                    self.checker
                        .capture_after_extension(id, *until, self.now, skew);
                }
                self.tell(ticket, Told::Rejected(r.code))
            }
            Some(Outcome::Violation(v)) => {
                let poisoned = self
                    .poisoned
                    .as_ref()
                    .is_some_and(|id| v.starts_with(&format!("{id}:")));
                match ticket {
                    Ticket::Sweep(id) if poisoned => self.escalate(id, v),
                    _ if poisoned => {} // its submitter's machine, failing as it must
                    _ => self.checker.machine_violation(v, self.now),
                }
            }
            Some(Outcome::Left(_) | Outcome::NotFound) | None => self.tell(ticket, Told::Unknown),
        }
    }

    /// A sweeper's recovery of `id` failed with the violation `v`: marks it for a person
    /// when the tally says so, written at once on its record's shard.
    fn escalate(&mut self, id: &TransferId, v: String) {
        let now = Timestamp(self.now);
        let error = xfer_engine::ExecError::Violation(v);
        if let Some(escalation) = self.tally.failed(id, &error, true, now) {
            let shard = self.router.shard_of_transfer(id);
            let op = Op::Transfer(id.clone(), TransferOp::Escalate { escalation });
            self.apply(shard, &op);
        }
    }

    pub(crate) fn untrack(&mut self, p: usize, slot: &Slot) {
        for ticket in &slot.tickets {
            if let Ticket::Sweep(id) = ticket {
                self.procs[p].recovering.remove(id);
            }
        }
    }

    /// A hold's extension answered: told it moved (the record, held), the client captures
    /// it halfway between the expiry it knew and the new one.
    fn on_extended(&mut self, id: &TransferId, from: Timestamp, until: Timestamp, reply: &Reply) {
        let told = match reply {
            Reply::Transfer(_) => true,
            Reply::Unchanged(r) => r.state == TransferState::Held,
            _ => false,
        };
        let halfway = from.as_ms() + (until.as_ms() - from.as_ms()) / 2;
        if told && halfway > self.now {
            let ticket = Ticket::AfterExtend(id.clone(), until);
            self.client(halfway - self.now, Action::Capture(id.clone()), ticket, 0);
        }
    }

    pub(crate) fn tell(&mut self, ticket: &Ticket, told: Told) {
        if let Ticket::Submit(id, n) = ticket {
            self.workload.told(id, *n, told);
        }
    }
}

fn mix(h: u64, v: u64) -> u64 {
    let mut h = h ^ 0xcbf2_9ce4_8422_2325;
    for b in v.to_le_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
