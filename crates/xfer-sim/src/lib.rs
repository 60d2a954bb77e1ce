//! xfer's deterministic simulator. One seed drives the workload, the interleaving of
//! processes, the clocks and the faults; the checkers judge every guarantee of SPEC §3.
//!
//! - [`config`]: the scenario a seed names ([`SimConfig`]) and the [`FaultKind`]s.
//! - [`workload`]: the simulated clients and what they were told.
//! - [`world`]: processes, shards and network as a discrete-event simulation ([`World`]).
//! - [`rounds`](mod@rounds): the production driver ([`xfer_engine::Drive`]) in that world.
//! - [`log`]: the one log shards may share, synced and lost by events ([`log::SimLog`]).
//! - [`checker`]: the guarantees ([`Checker`], [`Violation`]).
//! - [`bench`](mod@bench): `xfer-sim bench`, the protocol on the embedded store with fsync, measured.
//! - [`recovery`]: `xfer-sim recovery`, time to serve after `kill -9` on a big directory.
//! - [`crash`]: `xfer-sim crash`, real processes on the embedded store killed with SIGKILL.

pub mod bench;
pub mod checker;
pub mod config;
pub mod crash;
pub mod log;
pub mod recovery;
pub mod rounds;
pub mod workload;
pub mod world;

pub use checker::{Checker, Violation};
pub use config::{Driver, FaultKind, SimConfig};
pub use world::{RunStats, World};

/// Runs the scenario of `seed` and returns what happened and what broke.
pub fn run_seed(seed: u64) -> (RunStats, Vec<Violation>) {
    let mut cfg = SimConfig::from_seed(seed);
    if let Ok(only) = std::env::var("XFER_SIM_ONLY") {
        let kinds: Vec<FaultKind> = FaultKind::ALL
            .into_iter()
            .filter(|k| only.split(',').any(|n| n == k.name()))
            .collect();
        cfg = cfg.with_only(&kinds);
    }
    let (stats, checker) = World::new(cfg).run();
    (stats, checker.violations)
}
