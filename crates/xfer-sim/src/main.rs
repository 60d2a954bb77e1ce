//! `xfer-sim`: run seeds of the deterministic simulator and report.
//!
//! ```text
//! xfer-sim --seed 42                 one seed, with its digest
//! xfer-sim --seeds 1..=1000          many seeds on every core
//! xfer-sim --list-mutants            the known-bad protocol variants
//! xfer-sim --mutant NAME --seeds …   (built with --features mutants) must fail
//! xfer-sim crash --store embedded --cycles 30
//!                                    real processes on a data directory, killed with
//!                                    SIGKILL at random moments, then every guarantee checked
//! ```

use clap::Parser;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use xfer_core::Mutant;
use xfer_sim::{run_seed, FaultKind, RunStats, SimConfig, Violation};

/// mimalloc, as `xfer` (see its `main.rs`): the crash and recovery runs load and replay
/// millions of small records.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "xfer-sim",
    about = "Deterministic simulation of the xfer protocol under faults",
    args_conflicts_with_subcommands = true
)]
struct Args {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// Run one seed and print its digest.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run a range of seeds, `A..=B` or `A..B`.
    #[arg(long)]
    seeds: Option<String>,
    /// List the mutants and exit.
    #[arg(long)]
    list_mutants: bool,
    /// Switch on a mutant (needs `--features mutants`); the run must then fail.
    #[arg(long)]
    mutant: Option<String>,
    /// List the guarantees the checkers judge and exit.
    #[arg(long)]
    list_checkers: bool,
    /// Worker threads (default: available cores).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(clap::Subcommand, Debug)]
enum Cmd {
    /// Kill a process running transfers on a real store with SIGKILL, again and again;
    /// then recover and check every guarantee and every acknowledged outcome.
    Crash {
        /// The store under test (only `embedded` so far).
        #[arg(long, default_value = "embedded")]
        store: String,
        /// How many times to start and kill the child.
        #[arg(long, default_value_t = 30)]
        cycles: u64,
        /// Seeds the kill times and the clients' choices.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Concurrent clients in the child.
        #[arg(long, default_value_t = 64)]
        clients: usize,
        /// The data directory (default: a fresh one under the temp dir, removed at the end).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Transfers per second on the embedded store with fsync on (a measurement, not a test).
    Bench {
        /// Concurrent clients.
        #[arg(long, default_value_t = 1024)]
        clients: usize,
        /// Transfers per client request (`submit_many`).
        #[arg(long, default_value_t = 1)]
        batch: usize,
        /// Accounts.
        #[arg(long, default_value_t = 10_000)]
        accounts: u64,
        /// Store shards.
        #[arg(long, default_value_t = 4)]
        shards: u16,
        /// Measured seconds.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Tokio worker threads.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Merge concurrent store calls per shard, at most this many in flight (0: off).
        #[arg(long, default_value_t = 1)]
        coalesce: usize,
        /// The data directory (recreated; default under the temp dir, on disk).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Time from start to serving after SIGKILL, on a directory with many accounts and
    /// finished transfers (populated once, then loaded and killed).
    Recovery {
        /// The data directory (populated if it holds no tables yet).
        #[arg(long)]
        dir: std::path::PathBuf,
        /// Accounts to populate.
        #[arg(long, default_value_t = 1_000_000)]
        accounts: u64,
        /// Finished transfers to populate.
        #[arg(long, default_value_t = 10_000_000)]
        finished: u64,
        /// Seconds of load before the kill.
        #[arg(long, default_value_t = 10)]
        load_seconds: u64,
    },
    /// The child process of `crash` (not for direct use).
    #[command(hide = true)]
    CrashChild {
        #[arg(long)]
        dir: std::path::PathBuf,
        #[arg(long)]
        cycle: u64,
        #[arg(long)]
        seed: u64,
        #[arg(long)]
        clients: usize,
        /// Checkpoint every this many bytes of log.
        #[arg(long)]
        checkpoint_bytes: u64,
    },
}

fn run_command(cmd: Cmd) -> ExitCode {
    match cmd {
        Cmd::Crash {
            store,
            cycles,
            seed,
            clients,
            dir,
        } => {
            if store != "embedded" {
                eprintln!("--store {store:?}: only \"embedded\" is supported");
                return ExitCode::from(2);
            }
            let (dir, scratch) = match dir {
                Some(d) => (d, false),
                None => (xfer_sim::crash::scratch_dir(seed), true),
            };
            let result = xfer_sim::crash::parent(&dir, cycles, seed, clients);
            if scratch {
                let _ = std::fs::remove_dir_all(&dir);
            }
            match result {
                Err(e) => {
                    eprintln!("crash run failed: {e}");
                    ExitCode::FAILURE
                }
                Ok(r) => {
                    for v in &r.violations {
                        println!("VIOLATION {v}");
                    }
                    println!(
                        "store={store} cycles={} seed={seed} acknowledged={} transfers={} done={} canceled={} recovery_ms={} replayed={} violations={}",
                        r.cycles, r.acknowledged, r.transfers, r.done, r.canceled, r.recovery_ms, r.replayed, r.violations.len()
                    );
                    if r.violations.is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
            }
        }
        Cmd::Bench {
            clients,
            batch,
            accounts,
            shards,
            seconds,
            threads,
            coalesce,
            dir,
        } => {
            let args = xfer_sim::bench::BenchArgs {
                coalesce,
                clients,
                batch,
                accounts,
                shards,
                seconds,
                threads,
            };
            let dir = dir.unwrap_or_else(|| {
                std::env::temp_dir().join(format!("xfer-bench-{}", std::process::id()))
            });
            let result = xfer_sim::bench::run(&dir, &args);
            let _ = std::fs::remove_dir_all(&dir);
            match result {
                Err(e) => {
                    eprintln!("bench failed: {e}");
                    ExitCode::FAILURE
                }
                Ok(r) => {
                    println!(
                        "store=embedded fsync=on clients={clients} batch={batch} coalesce={coalesce} in_flight={} accounts={accounts} shards={shards} threads={threads} seconds={seconds} finished={} canceled={} errors={} transfers_per_s={:.0}",
                        clients * batch, r.finished, r.canceled, r.errors, r.per_second()
                    );
                    ExitCode::SUCCESS
                }
            }
        }
        Cmd::Recovery {
            dir,
            accounts,
            finished,
            load_seconds,
        } => {
            if !dir.join("tables").exists() {
                if let Err(e) = xfer_sim::recovery::populate(&dir, accounts, finished) {
                    eprintln!("populate: {e}");
                    return ExitCode::FAILURE;
                }
            }
            match xfer_sim::recovery::measure(&dir, load_seconds) {
                Err(e) => {
                    eprintln!("recovery: {e}");
                    ExitCode::FAILURE
                }
                Ok(r) => {
                    println!(
                        "store=embedded accounts_loaded={} replayed={} log_bytes={} table_bytes={} journal_bytes={} tables_ms={} load_ms={} replay_ms={} open_to_serving_ms={}",
                        r.accounts, r.replayed, r.log_bytes, r.table_bytes, r.journal_bytes, r.open.tables_ms, r.open.load_ms, r.open.replay_ms, r.open_ms
                    );
                    ExitCode::SUCCESS
                }
            }
        }
        Cmd::CrashChild {
            dir,
            cycle,
            seed,
            clients,
            checkpoint_bytes,
        } => match xfer_sim::crash::child(&dir, cycle, seed, clients, checkpoint_bytes) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("crash child: {e}");
                ExitCode::from(3)
            }
        },
    }
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("--seeds {s:?}: expected A..=B or A..B with A <= B");
    let (a, b, inclusive) = if let Some((a, b)) = s.split_once("..=") {
        (a, b, true)
    } else if let Some((a, b)) = s.split_once("..") {
        (a, b, false)
    } else {
        return Err(bad());
    };
    let a: u64 = a.trim().parse().map_err(|_| bad())?;
    let b: u64 = b.trim().parse().map_err(|_| bad())?;
    let b = if inclusive {
        b
    } else {
        b.checked_sub(1).ok_or_else(bad)?
    };
    if a > b {
        return Err(bad());
    }
    Ok((a, b))
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(cmd) = args.command {
        return run_command(cmd);
    }
    if args.list_checkers {
        println!("{}", xfer_sim::checker::GUARANTEES.join(" "));
        return ExitCode::SUCCESS;
    }
    if args.list_mutants {
        for m in Mutant::ALL {
            println!("{:<30} {}", m.name(), m.description());
        }
        return ExitCode::SUCCESS;
    }
    let mutant = match args.mutant.as_deref().map(|n| (n, Mutant::from_name(n))) {
        None => None,
        Some((n, None)) => {
            eprintln!("unknown mutant {n:?}; see --list-mutants");
            return ExitCode::from(2);
        }
        Some((_, Some(m))) => Some(m),
    };
    if let Err(e) = switch_on(mutant) {
        eprintln!("{e}");
        return ExitCode::from(2);
    }
    let (first, last) = match (&args.seed, &args.seeds) {
        (Some(s), _) => (*s, *s),
        (None, Some(r)) => match parse_range(r) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        },
        (None, None) => (1, 200),
    };
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let report = run_range(first, last, threads, mutant.is_some());
    report.print(first, last, mutant, args.seed.is_some())
}

#[cfg(feature = "mutants")]
fn switch_on(m: Option<Mutant>) -> Result<(), String> {
    xfer_core::mutant::set(m);
    Ok(())
}

#[cfg(not(feature = "mutants"))]
fn switch_on(m: Option<Mutant>) -> Result<(), String> {
    match m {
        None => Ok(()),
        Some(m) => Err(format!(
            "mutant {} needs a build with --features mutants",
            m.name()
        )),
    }
}

#[derive(Default)]
struct Report {
    runs: BTreeMap<u64, (RunStats, Vec<Violation>)>,
}

fn run_range(first: u64, last: u64, threads: usize, stop_at_first: bool) -> Report {
    let next = AtomicU64::new(first);
    let failed = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let runs = Mutex::new(BTreeMap::new());
    let total = last - first + 1;
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                if stop_at_first && failed.load(Ordering::Relaxed) {
                    return;
                }
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed > last {
                    return;
                }
                let (stats, violations) = run_seed(seed);
                if !violations.is_empty() {
                    failed.store(true, Ordering::Relaxed);
                }
                runs.lock()
                    .expect("no panics while holding")
                    .insert(seed, (stats, violations));
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if total >= 50 && n.is_multiple_of((total / 10).max(1)) {
                    eprintln!("progress: {n}/{total} seeds");
                }
            });
        }
    });
    Report {
        runs: runs.into_inner().expect("threads joined"),
    }
}

impl Report {
    fn print(&self, first: u64, last: u64, mutant: Option<Mutant>, single: bool) -> ExitCode {
        let mut faults: BTreeMap<&str, u64> =
            FaultKind::ALL.iter().map(|k| (k.name(), 0)).collect();
        let (mut transfers, mut submissions, mut done, mut canceled, mut reordered, mut events) =
            (0, 0, 0, 0, 0, 0);
        let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
        let mut violations = 0;
        let mut first_failure: Option<(u64, &Violation)> = None;
        let mut tripped: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
        for (seed, (s, v)) in &self.runs {
            transfers += s.transfers;
            submissions += s.submissions;
            done += s.done;
            canceled += s.canceled;
            reordered += s.reordered;
            events += s.events;
            for (k, n) in &s.faults {
                *faults.entry(k).or_default() += n;
            }
            digest = (digest ^ s.digest).wrapping_mul(0x0000_0100_0000_01b3);
            violations += v.len();
            tripped.extend(v.iter().map(|v| v.guarantee));
            if first_failure.is_none() {
                first_failure = v.first().map(|v| (*seed, v));
            }
        }
        if single {
            let cfg = SimConfig::from_seed(first);
            println!(
                "seed {first}: shards={} procs={} users={} hotness={:?} driver={:?} faults=[{}]",
                cfg.shards,
                cfg.procs,
                cfg.users,
                cfg.hotness,
                cfg.driver,
                cfg.fault_names().join(",")
            );
        }
        let mutant_flag = mutant
            .map(|m| format!(" --features mutants -- --mutant {}", m.name()))
            .unwrap_or_default();
        if let Some((seed, v)) = first_failure {
            let sep = if mutant.is_some() { "" } else { " --" };
            println!(
                "VIOLATION guarantee={} seed={seed} at={}ms: {}",
                v.guarantee, v.at_ms, v.detail
            );
            println!("reproduce: cargo run --release -p xfer-sim{mutant_flag}{sep} --seed {seed}");
        }
        let fault_list: Vec<String> = faults.iter().map(|(k, n)| format!("{k}={n}")).collect();
        let seeds = if first == last {
            format!("{first}")
        } else {
            format!("{first}..={last}")
        };
        let ran = self.runs.len();
        println!(
            "seeds={seeds} ran={ran} transfers={transfers} submissions={submissions} done={done} canceled={canceled} events={events} reordered={reordered} faults: {} digest={digest:016x} violations={violations}",
            fault_list.join(" ")
        );
        if violations == 0 {
            ExitCode::SUCCESS
        } else {
            let tripped: Vec<&str> = tripped.into_iter().collect();
            println!("tripped: {}", tripped.join(" "));
            ExitCode::from(1)
        }
    }
}
