//! What one simulated run looks like: sizes, timings, and which faults are on. Everything
//! is drawn from the seed, so a seed names a whole scenario.

use xfer_core::Rng;
use xfer_engine::Config;

/// The kinds of fault the simulator injects. Each seed turns on a random subset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// An executor process dies between two steps and restarts later.
    Crash,
    /// A write is applied but its reply never arrives.
    ReplyLost,
    /// A request or reply takes far longer than usual (so writes arrive late and reordered).
    Delay,
    /// A request is delivered twice.
    Duplicate,
    /// A request is lost before it reaches the store.
    Drop,
    /// An executor stops past its lease, then wakes up and carries on (a zombie).
    Pause,
    /// Two processes sweep at once.
    TwoSweepers,
    /// Clocks of processes and stores disagree, within the configured bound.
    Skew,
    /// A shard refuses every request for a while.
    Unavailable,
    /// The shared log loses what it had not synced: the store's process dies, and with it
    /// the executors that share its log (only in runs with a shared log).
    LogLoss,
    /// One transfer is poisoned: every step on its accounts answers what the protocol
    /// forbids, so no retry can finish it; a sweeper must escalate it, once.
    Poison,
}

impl FaultKind {
    /// Every kind, in report order.
    pub const ALL: [FaultKind; 11] = [
        FaultKind::Crash,
        FaultKind::ReplyLost,
        FaultKind::Delay,
        FaultKind::Duplicate,
        FaultKind::Drop,
        FaultKind::Pause,
        FaultKind::TwoSweepers,
        FaultKind::Skew,
        FaultKind::Unavailable,
        FaultKind::LogLoss,
        FaultKind::Poison,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Crash => "crash",
            FaultKind::ReplyLost => "reply_lost",
            FaultKind::Delay => "delay",
            FaultKind::Duplicate => "duplicate",
            FaultKind::Drop => "drop",
            FaultKind::Pause => "pause",
            FaultKind::TwoSweepers => "two_sweepers",
            FaultKind::Skew => "skew",
            FaultKind::Unavailable => "unavailable",
            FaultKind::LogLoss => "log_loss",
            FaultKind::Poison => "poison",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// How concentrated the workload is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hotness {
    /// Accounts picked uniformly.
    Uniform,
    /// 90 % of plain transfers debit one account.
    DebitHot,
    /// 90 % of plain transfers credit one account.
    CreditHot,
}

/// How the executors drive their machines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    /// Each machine on its own, each request with a timer and resends of its own: every
    /// interleaving of single steps.
    Messages,
    /// The production driver ([`xfer_engine::Drive`]): machines in rounds, one round's
    /// requests sent together, failed ones resent the next round; every answer durable.
    Rounds,
    /// The production driver over one log shared by every shard, answering before its
    /// sync (the embedded store): outcomes and decisions wait for the log.
    RoundsSharedLog,
}

/// One run's scenario.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The seed it came from.
    pub seed: u64,
    /// Protocol timings shared by every process.
    pub protocol: Config,
    /// Number of shards.
    pub shards: usize,
    /// Number of executor processes.
    pub procs: usize,
    /// Users per asset.
    pub users: usize,
    /// Client operations generated in the safety phase.
    pub operations: usize,
    /// Mean gap between client operations.
    pub arrival_ms: u64,
    /// Prepare timeouts are drawn from this range.
    pub timeout_ms: (u64, u64),
    /// A resend happens after this long without a reply.
    pub op_timeout_ms: u64,
    /// An executor gives a transfer up (leaving it to the sweeper) after this many sends.
    pub attempts_max: u32,
    /// Sweep period.
    pub sweep_interval_ms: u64,
    /// Ordinary one-way latency range.
    pub latency_ms: (u64, u64),
    /// Latency range of a delayed message.
    pub delay_ms: (u64, u64),
    /// How long a pause lasts beyond the lease.
    pub pause_extra_ms: (u64, u64),
    /// The workload's concentration.
    pub hotness: Hotness,
    /// How executors drive their machines.
    pub driver: Driver,
    /// The shared log syncs every so often, in this range.
    pub sync_ms: (u64, u64),
    faults: u32,
}

impl SimConfig {
    /// The scenario of `seed`.
    pub fn from_seed(seed: u64) -> SimConfig {
        let mut rng = Rng::new(seed ^ CONFIG_SALT);
        let mut faults = 0;
        for k in FaultKind::ALL {
            if rng.chance(550_000) {
                faults |= k.bit();
            }
        }
        let skew_ms = 40;
        let hotness = match rng.below(3) {
            0 => Hotness::Uniform,
            1 => Hotness::DebitHot,
            _ => Hotness::CreditHot,
        };
        SimConfig {
            seed,
            protocol: Config {
                lease_ms: 300,
                skew_ms,
                claim_grace_ms: 300,
            },
            shards: rng.range(1, 4) as usize,
            procs: rng.range(2, 3) as usize,
            users: rng.range(4, 24) as usize,
            operations: 1_400,
            arrival_ms: rng.range(1, 3),
            timeout_ms: (150, 1_500),
            op_timeout_ms: 60,
            attempts_max: 12,
            sweep_interval_ms: 100,
            latency_ms: (1, 12),
            delay_ms: (80, 900),
            pause_extra_ms: (50, 700),
            hotness,
            driver: match rng.below(3) {
                0 => Driver::Messages,
                1 => Driver::Rounds,
                _ => Driver::RoundsSharedLog,
            },
            sync_ms: (2, 10),
            faults,
        }
    }

    /// The same scenario with only the faults in `kinds` (for focused tests).
    pub fn with_only(mut self, kinds: &[FaultKind]) -> SimConfig {
        self.faults = kinds.iter().fold(0, |acc, k| acc | k.bit());
        self
    }

    /// The same scenario driven by `driver`.
    pub fn with_driver(mut self, driver: Driver) -> SimConfig {
        self.driver = driver;
        self
    }

    /// True when `kind` is injected in this run.
    pub fn has(&self, kind: FaultKind) -> bool {
        let possible = kind != FaultKind::LogLoss || self.driver == Driver::RoundsSharedLog;
        possible && self.faults & kind.bit() != 0
    }

    /// The faults on in this run, by name.
    pub fn fault_names(&self) -> Vec<&'static str> {
        FaultKind::ALL
            .into_iter()
            .filter(|k| self.has(*k))
            .map(|k| k.name())
            .collect()
    }

    /// The longest any transfer may take after the faults stop: lease lapse, a sweep, the
    /// resends of a few steps, a delayed message and a pause still in progress.
    pub fn termination_bound_ms(&self) -> u64 {
        self.protocol.lease_ms
            + self.protocol.claim_grace_ms
            + self.protocol.skew_ms
            + 2 * self.sweep_interval_ms
            + 6 * self.op_timeout_ms
            + self.delay_ms.1
            + self.protocol.lease_ms
            + self.pause_extra_ms.1
    }
}

/// Mixed into the seed so the scenario draws differ from the run's own draws.
const CONFIG_SALT: u64 = 0x5eed_c0de_f00d_0001;
