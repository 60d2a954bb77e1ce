//! `xfer-sim bench`: the protocol on the embedded store, fsync on, measured.
//!
//! Single-posting transfers between random accounts of a uniform population, driven by the
//! tokio executor exactly as a service would: `in_flight` clients each submit one transfer
//! and wait for its outcome, or (`--batch N`) submit N at a time with `submit_many`. The
//! figure is transfers finished (`done` or `canceled`) per second of wall time. Not a test:
//! nothing here asserts a speed.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use xfer_core::{
    AccountId, Amount, AssetCode, Clock, LowerBound, OwnerId, Posting, Rng, SystemClock,
    TransferId, TransferKind, TransferSpec,
};
use xfer_engine::{
    Cluster, Config, Executor, Outcome, Retry, RetryPolicy, Router, Sleeper, SweepConfig, Sweeper,
    TokioSleeper,
};
use xfer_store::{AccountOp, Coalesce, Op, Reply, Store};
use xfer_store_embedded::{Embedded, EmbeddedConfig};

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchArgs {
    /// Transfers in flight: clients, each with `batch` transfers outstanding.
    pub clients: usize,
    /// Transfers per client request.
    pub batch: usize,
    /// Accounts (uniform choice of both sides).
    pub accounts: u64,
    /// Store shards.
    pub shards: u16,
    /// Measured seconds.
    pub seconds: u64,
    /// Tokio worker threads.
    pub threads: usize,
    /// Merge concurrent calls per shard ([`xfer_store::Coalesce`]) with at most this many
    /// calls in flight per shard; 0: off.
    pub coalesce: usize,
}

/// What was measured.
#[derive(Clone, Debug, Default)]
pub struct BenchReport {
    /// Transfers finished in the measured window.
    pub finished: u64,
    /// Of which canceled (none expected: accounts are funded far beyond the amounts).
    pub canceled: u64,
    /// Calls that failed (retried by the client).
    pub errors: u64,
    /// Wall milliseconds of the measured window.
    pub elapsed_ms: u64,
}

impl BenchReport {
    /// Finished transfers per second.
    pub fn per_second(&self) -> f64 {
        self.finished as f64 * 1000.0 / self.elapsed_ms.max(1) as f64
    }
}

/// Prepare timeout of the benchmark's transfers: tombstones live this long (plus the clock
/// skew bound) before the sweeper prunes them.
pub const TIMEOUT_MS: u64 = 5_000;

fn usd() -> AssetCode {
    AssetCode::new("USD", "asset").expect("valid")
}
fn account(i: u64) -> AccountId {
    AccountId::new(&format!("acct-{i}")).expect("valid")
}

/// Runs the benchmark on a fresh store in `dir` (removed first if it exists).
pub fn run(dir: &Path, args: &BenchArgs) -> Result<BenchReport, String> {
    let _ = std::fs::remove_dir_all(dir);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let cfg = EmbeddedConfig {
            shards: args.shards,
            ..EmbeddedConfig::default()
        };
        let (store, _) =
            Embedded::open(dir, cfg, Arc::new(SystemClock)).map_err(|e| format!("open: {e}"))?;
        let shards: Vec<Arc<dyn Store>> = store
            .shards()
            .into_iter()
            .map(|s| match args.coalesce {
                0 => s as Arc<dyn Store>,
                n => Arc::new(Coalesce::new(s, n)) as Arc<dyn Store>,
            })
            .collect();
        let router = Router::hash(usize::from(args.shards));
        create_accounts(&shards, &router, args.accounts).await?;
        let cluster = Arc::new(Cluster::new(shards, router));
        let executor = |owner: &str| {
            Executor::new(
                cluster.clone(),
                OwnerId::new(owner).expect("valid"),
                Config::default(),
                Arc::new(SystemClock),
                Retry::new(RetryPolicy::default(), Arc::new(TokioSleeper)),
            )
        };
        let exec = Arc::new(executor("bench"));
        // As in a deployment: a sweeper prunes tombstones once no late prepare can come.
        let sweeper = Sweeper::new(executor("bench-sweeper"), SweepConfig::default());
        let sweeping = tokio::spawn(async move { sweeper.run(std::future::pending()).await });
        let stop = Arc::new(AtomicBool::new(false));
        let (finished, canceled, errors) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        );
        let clock = SystemClock;
        let started = clock.now();
        let mut tasks = Vec::new();
        for c in 0..args.clients {
            let (exec, stop) = (exec.clone(), stop.clone());
            let (finished, canceled, errors) = (finished.clone(), canceled.clone(), errors.clone());
            let (accounts, batch) = (args.accounts, args.batch);
            tasks.push(tokio::spawn(async move {
                let mut rng = Rng::new(c as u64 + 1);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let specs: Vec<TransferSpec> = (0..batch)
                        .map(|_| {
                            n += 1;
                            spec(&mut rng, accounts, format!("b{c}-{n}"))
                        })
                        .collect();
                    for r in exec.submit_many(specs).await {
                        match r {
                            Ok(Outcome::Finished(r))
                                if r.state == xfer_core::TransferState::Done =>
                            {
                                finished.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(Outcome::Finished(_)) => {
                                finished.fetch_add(1, Ordering::Relaxed);
                                canceled.fetch_add(1, Ordering::Relaxed);
                            }
                            _ => {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
            }));
        }
        TokioSleeper.sleep(args.seconds * 1000).await;
        let counted = finished.load(Ordering::Relaxed);
        let elapsed_ms = clock.now().0.saturating_sub(started.0);
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.map_err(|e| e.to_string())?;
        }
        sweeping.abort();
        let _ = sweeping.await;
        drop(exec);
        store.close().map_err(|e| format!("close: {e}"))?;
        Ok(BenchReport {
            finished: counted,
            canceled: canceled.load(Ordering::Relaxed),
            errors: errors.load(Ordering::Relaxed),
            elapsed_ms,
        })
    })
}

fn spec(rng: &mut Rng, accounts: u64, id: String) -> TransferSpec {
    let from = rng.below(accounts);
    let to = (from + 1 + rng.below(accounts - 1)) % accounts;
    TransferSpec {
        id: TransferId::new(&id).expect("valid"),
        postings: vec![Posting {
            from: account(from),
            to: account(to),
            asset: usd(),
            amount: Amount::new(1, "amount").expect("positive"),
        }]
        .into(),
        metadata: String::new(),
        kind: TransferKind::Transfer,
        refund_of: None,
        timeout_ms: TIMEOUT_MS,
    }
}

/// Creates the accounts, unbounded so that no transfer is refused for funds: the
/// benchmark measures the protocol, and refusals are cheaper than transfers.
async fn create_accounts(
    shards: &[Arc<dyn Store>],
    router: &Router,
    accounts: u64,
) -> Result<(), String> {
    let mut per_shard: Vec<Vec<Op>> = vec![Vec::new(); shards.len()];
    for i in 0..accounts {
        let op = Op::Account(
            account(i),
            AccountOp::Create {
                asset: usd(),
                lower_bound: LowerBound::Unbounded,
            },
        );
        per_shard[router.shard_of_op(&op).map_err(|e| format!("{e:?}"))?].push(op);
    }
    for (shard, ops) in shards.iter().zip(per_shard) {
        for chunk in ops.chunks(10_000) {
            let replies = shard
                .execute(chunk.to_vec())
                .await
                .map_err(|e| e.to_string())?;
            if let Some(bad) = replies.iter().find(|r| !matches!(r, Reply::Account(_))) {
                return Err(format!("create: {bad}"));
            }
        }
    }
    Ok(())
}
