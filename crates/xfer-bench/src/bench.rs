//! `xfer bench`: throughput and latency of xfer, durable (fsync on), measured the way users
//! run it. Not a test: nothing here asserts a speed; figures go to `docs/benchmarks.md`
//! with the command that produced them.
//!
//! It starts `xfer serve` in-process on a fresh store (`--store embedded`: a new data
//! directory; `--store postgres`: a new database on the server of `--postgres-url`),
//! creates and funds the accounts, then runs `in_flight / batch` clients for `duration`,
//! each submitting `batch` transfers per request and waiting for their outcomes, either
//! through the engine as a library (`--via library`: `Executor::submit_many`) or over HTTP
//! (`--via http`: `POST /v1/transfers`, or `/v1/transfers/batch` when `batch > 1`).
//! `--baseline postgres` then runs the same workload as native PostgreSQL transactions
//! ([`crate::baseline`]) on `--baseline-clients` connections and prints the ratio;
//! `--baseline redis` as one Redis function call per transfer ([`crate::native_redis`]),
//! `--baseline mysql` as one MySQL transaction per transfer ([`crate::native_mysql`]).
//!
//! Workloads: `uniform` (random accounts on both sides), `hot` (a share of the transfers
//! debit or credit one account), `multi-asset` (a USD and a POINTS posting, usually on two
//! shards), `holds` (hold, then capture), `flash-sale` (stock, per-user quota and cash in one
//! transfer). Latency is per request, submit to outcome (`done` or `canceled`: the
//! decision and every post); CPU is this process's user + system time, and the whole
//! machine's (the database server's included) per transfer.

pub use crate::args::*;
use crate::baseline::{FreshDatabase, Native};
use crate::ids::*;
use crate::latency::*;
use crate::native_mysql::NativeMysql;
use crate::native_redis::NativeRedis;
pub use crate::report::*;
use crate::target::*;
use crate::usage::*;
use crate::workload::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use xfer_client::Client;
use xfer_core::transfer::TIMEOUT_MS_MAX;
use xfer_core::{
    AccountId, AssetCode, Clock, Rng, SystemClock, TransferId, TransferKind, TransferSpec,
    TransferState,
};
use xfer_engine::{Outcome, Sleeper, TokioSleeper};
use xfer_server::config::{ServeConfig, ShardSpec, StoreKind};
use xfer_server::metrics::Stopwatch;
use xfer_server::server::Server;
use xfer_server::sink::nats::NatsConfig;
use xfer_server::stores;
use xfer_store_redis::RedisStore;

/// Runs the benchmark (see the module docs), printing progress every second; then the
/// baseline, if asked for.
pub async fn run(a: BenchArgs) -> Result<BenchRun, String> {
    if a.accounts < 2 || a.batch == 0 || a.batch > 8_192 || a.in_flight < a.batch {
        return Err("need --accounts ≥ 2, 1 ≤ --batch ≤ 8192, --in-flight ≥ --batch".into());
    }
    if a.baseline.is_some() && !matches!(a.workload, Workload::Uniform | Workload::Hot) {
        return Err("--baseline runs the uniform and hot workloads".into());
    }
    if a.rate == Some(0) {
        return Err("--rate: at least 1 transfer per second".into());
    }
    if !(1..=TIMEOUT_MS_MAX).contains(&a.timeout_ms) {
        return Err(format!("--timeout-ms: 1 to {TIMEOUT_MS_MAX}"));
    }
    if a.workload == Workload::Holds && a.timeout_ms >= HOLD_TTL_MS {
        return Err(format!(
            "--timeout-ms: below the holds' ttl_ms ({HOLD_TTL_MS}) for --workload holds"
        ));
    }
    if a.keep && a.store != StoreKind::Embedded {
        return Err("--keep keeps the embedded store's directory: not with --store".into());
    }
    if a.baseline == Some(Baseline::Redis) && a.redis_cluster {
        return Err("--baseline redis runs on one server: not with --redis-cluster".into());
    }
    if !(1..=1_000).contains(&a.store_calls_per_shard) {
        return Err("--store-calls-per-shard: 1 to 1000".into());
    }
    if a.baseline.is_some() && !(1..=1_000).contains(&a.baseline_clients) {
        return Err("--baseline-clients: 1 to 1000".into());
    }
    let xfer = run_xfer(&a).await?;
    let baseline = match a.baseline {
        Some(Baseline::Postgres) => {
            let db = FreshDatabase::create(&a.postgres_url, "native").await?;
            let result = run_native(&a, &db.url).await;
            db.drop_now().await?;
            Some(result?)
        }
        Some(Baseline::Redis) => Some(run_native_redis(&a).await?),
        Some(Baseline::Mysql) => Some(run_native_mysql(&a).await?),
        None => None,
    };
    Ok(BenchRun { xfer, baseline })
}

async fn run_xfer(a: &BenchArgs) -> Result<BenchReport, String> {
    let base = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!(
        "xfer-bench-{}-{}",
        std::process::id(),
        SystemClock.now().as_ms()
    ));
    let sink = a.sink_nats.as_ref().map(|url| NatsConfig {
        url: url.clone(),
        stream: format!("XFER_BENCH_{}", std::process::id()),
        subject: format!("xfer_bench_{}", std::process::id()),
    });
    let mut cfg = ServeConfig {
        listen: "127.0.0.1:0".parse().expect("an address"),
        data_dir: dir.clone(),
        shards: a.shards,
        store_calls_per_shard: a.store_calls_per_shard,
        sink_nats: sink.clone(),
        ..ServeConfig::default()
    };
    // PostgreSQL: one fresh database per shard.
    let mut dbs = Vec::new();
    if a.store == StoreKind::Postgres {
        for n in 0..a.shards {
            dbs.push(FreshDatabase::create(&a.postgres_url, &format!("xfer{n}")).await?);
        }
        cfg.store = StoreKind::Postgres;
        cfg.postgres_urls = dbs.iter().map(|d| d.url.clone()).collect();
    }
    // Redis: prefixes (hash tags) `xfer_bench_N`, emptied before and after the run; on a
    // Cluster chosen so that the shards go round robin over its masters (`placement`).
    // Fixed names, so that every run places the shards alike.
    let mut redis = Vec::new();
    if a.store == StoreKind::Redis {
        let prefixes: Vec<String> = if a.redis_cluster {
            let url = a
                .redis_urls
                .first()
                .ok_or("--redis-cluster needs a --redis-url")?;
            let spread = crate::placement::spread(url, usize::from(a.shards)).await?;
            println!(
                "cluster placement: shards on masters round robin: {}",
                spread.join(" ")
            );
            spread
        } else {
            (0..a.shards).map(|n| format!("xfer_bench_{n}")).collect()
        };
        for (n, prefix) in prefixes.into_iter().enumerate() {
            let (url, cluster) = if a.redis_cluster {
                (None, a.redis_urls.clone())
            } else {
                (Some(a.redis_urls[n % a.redis_urls.len()].clone()), vec![])
            };
            let spec = ShardSpec::Redis {
                url,
                cluster,
                prefix: Some(prefix),
            };
            redis.extend(stores::redis_config(&spec, n));
            cfg.layout.push(spec);
        }
        for rc in &redis {
            let store = RedisStore::open(rc).await.map_err(|e| e.to_string())?;
            store.destroy().await.map_err(|e| e.to_string())?;
        }
    }
    // MySQL and MongoDB: databases `xfer_bench_N`, dropped before and after the run.
    let fresh = |n: u16| Some(format!("xfer_bench_{n}"));
    if a.store == StoreKind::Mysql {
        for n in 0..a.shards {
            let url = a.mysql_url.clone();
            cfg.layout.push(ShardSpec::Mysql {
                url,
                database: fresh(n),
            });
        }
    }
    if a.store == StoreKind::Mongodb {
        for n in 0..a.shards {
            let url = a.mongodb_url.clone();
            cfg.layout.push(ShardSpec::Mongodb {
                url,
                database: fresh(n),
            });
        }
    }
    let databases = cfg.layout.clone();
    stores::drop_databases(&databases).await?;
    let server = Arc::new(Server::start(cfg).await?);
    let client = Client::new(&format!("http://{}", server.addr()), None)?;
    let target = match a.via {
        Via::Library => Target::Library(server.clone()),
        Via::Http => Target::Http(client.clone()),
    };
    let result = match setup(a, &server).await {
        Ok(()) => {
            let syncs = || server.log_syncs();
            measure(a, target, &name(a.via), &name(a.store), &syncs).await
        }
        Err(e) => {
            // The target holds the server: let it go, so that the error is the setup's.
            drop(target);
            Err(e)
        }
    };
    if a.sink_nats.is_some() {
        let m = server.service().metrics().render();
        let metric = |name: &str| {
            m.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.rsplit(' ').next())
                .unwrap_or("?")
                .to_string()
        };
        println!(
            "sink nats at the end: published {}, lag {} s, pending {}",
            metric("xfer_sink_published_total"),
            metric("xfer_sink_lag_seconds"),
            metric("xfer_sink_pending_events")
        );
    }
    match Arc::try_unwrap(server) {
        Ok(s) => s.shutdown().await?,
        Err(_) => return Err("the server is still in use".into()),
    }
    if let Some(nats) = sink {
        xfer_server::sink::nats::delete_stream(&nats).await?;
    }
    if a.keep {
        println!(
            "data directory kept: {} (xfer serve --data-dir {} --shards {})",
            dir.display(),
            dir.display(),
            a.shards
        );
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    for db in dbs {
        db.drop_now().await?;
    }
    for rc in redis {
        let store = RedisStore::open(&rc).await.map_err(|e| e.to_string())?;
        store.destroy().await.map_err(|e| e.to_string())?;
    }
    stores::drop_databases(&databases).await?;
    result
}

/// The baseline: the same workload, one native transaction per transfer, on
/// `--baseline-clients` connections.
async fn run_native(a: &BenchArgs, url: &str) -> Result<BenchReport, String> {
    let watch = Stopwatch::start();
    let native = Native::setup(url, a.accounts, a.baseline_clients as usize).await?;
    println!(
        "baseline setup: {} accounts created and funded in {:.1}s",
        a.accounts,
        watch.seconds()
    );
    measure_baseline(a, Target::Native(native), "postgres-native").await
}

/// The Redis baseline: the same workload, one function call per transfer, on
/// `--baseline-clients` connections to the first `--redis-url`.
async fn run_native_redis(a: &BenchArgs) -> Result<BenchReport, String> {
    let url = a
        .redis_urls
        .first()
        .ok_or("--baseline redis needs a --redis-url")?;
    let watch = Stopwatch::start();
    let (native, durability) =
        NativeRedis::setup(url, a.accounts, a.baseline_clients as usize).await?;
    println!(
        "baseline setup: {} accounts created and funded in {:.1}s on {url} ({durability})",
        a.accounts,
        watch.seconds()
    );
    let result = measure_baseline(a, Target::NativeRedis(native.clone()), "redis-native").await;
    native.clear().await?;
    result
}

/// The MySQL baseline: the same workload, one InnoDB transaction per transfer, on
/// `--baseline-clients` connections to `--mysql-url`, in a database of its own.
async fn run_native_mysql(a: &BenchArgs) -> Result<BenchReport, String> {
    let watch = Stopwatch::start();
    let (native, durability) =
        NativeMysql::setup(&a.mysql_url, a.accounts, a.baseline_clients as usize).await?;
    println!(
        "baseline setup: {} accounts created and funded in {:.1}s on {} ({durability})",
        a.accounts,
        watch.seconds(),
        a.mysql_url
    );
    let result = measure_baseline(a, Target::NativeMysql(native.clone()), "mysql-native").await;
    native.drop_now().await?;
    result
}

/// Runs the workload on a baseline: one transfer per request from each of the
/// `--baseline-clients`.
async fn measure_baseline(a: &BenchArgs, target: Target, via: &str) -> Result<BenchReport, String> {
    let b = BenchArgs {
        batch: 1,
        in_flight: a.baseline_clients,
        ..a.clone()
    };
    measure(&b, target, via, "-", &|| None).await
}

/// Runs the workload on `target` for the window and reports it. `log_syncs` counts the
/// embedded store's log syncs (`None` for any other store): then the bytes this process
/// wrote are the store's, and are reported too.
async fn measure(
    a: &BenchArgs,
    target: Target,
    via: &str,
    store: &str,
    log_syncs: &(dyn Fn() -> Option<u64> + Sync),
) -> Result<BenchReport, String> {
    let clients = a.in_flight / a.batch;
    println!(
        "bench: workload={} via={via} store={store} accounts={} in_flight={} batch={} clients={clients} duration={}s shards={} rate={}",
        name(a.workload),
        a.accounts,
        a.in_flight, a.batch, a.duration, a.shards,
        a.rate.map_or("max".to_string(), |r| format!("{r}/s"))
    );
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<[AtomicU64; 4]> = Arc::new(Default::default()); // done, canceled, errors, all
    let names = Arc::new(Names::new());
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let (target, stop, counts, a) = (target.clone(), stop.clone(), counts.clone(), a.clone());
        let names = names.clone();
        tasks.spawn(async move {
            // Over HTTP each client has a connection of its own, as a real client would.
            let mut conn = match &target {
                Target::Http(client) => Some(client.connect().await?),
                _ => None,
            };
            let mut rng = Rng::new(c + 1);
            let mut latencies = Latencies::new();
            let clock = DecidedClock::new();
            let mut n = 0u64;
            // With --rate: this client's requests are due every `every_ms`, the clients'
            // schedules spread evenly over that interval (client c starts c/clients of it
            // late). Started together, every client sent at the same instants: bursts of
            // the whole in-flight window, each request waiting behind all the others.
            let every_ms = a
                .rate
                .map(|r| (a.batch * clients) as f64 * 1e3 / r.max(1) as f64);
            let offset = c as f64 / clients as f64;
            let paced = Stopwatch::start();
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let specs: Vec<TransferSpec> = (0..a.batch)
                    .map(|_| {
                        n += 1;
                        next_spec(&a, &names, &mut rng, transfer_id(a.ids, c, n))
                    })
                    .collect();
                let k = specs.len() as u64;
                if let Some(every) = every_ms {
                    let due = (sent as f64 + offset) * every - paced.seconds() * 1e3;
                    if due >= 1.0 {
                        TokioSleeper.sleep(due as u64).await;
                    }
                    sent += 1;
                }
                let watch = Stopwatch::start();
                clock.restart();
                let result = target.run(conn.as_mut(), specs, &clock).await;
                if stop.load(Ordering::Relaxed) {
                    break; // finished after the window: not counted
                }
                latencies.record(watch.seconds());
                counts[3].fetch_add(k, Ordering::Relaxed);
                match result {
                    Ok(states) => {
                        for s in states {
                            let i = if s == TransferState::Done { 0 } else { 1 };
                            counts[i].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(_) => {
                        counts[2].fetch_add(k, Ordering::Relaxed);
                    }
                }
            }
            Ok::<_, String>((latencies, clock.take()))
        });
    }
    let usage0 = usage();
    let machine0 = machine_times();
    let (syncs0, written0) = (log_syncs(), written_bytes());
    let watch = Stopwatch::start();
    let mut last = 0;
    for s in 1..=a.duration {
        TokioSleeper.sleep(1_000).await;
        let all = counts[3].load(Ordering::Relaxed);
        println!(
            "  {s:>4}s  {:>9} transfers/s  (errors {})",
            all - last,
            counts[2].load(Ordering::Relaxed)
        );
        last = all;
    }
    stop.store(true, Ordering::Relaxed);
    let seconds = watch.seconds();
    let usage1 = usage();
    let machine = machine_times() - machine0;
    let machine_all = (machine.busy + machine.idle).max(f64::MIN_POSITIVE);
    let syncs = log_syncs().zip(syncs0).map(|(b, a)| b - a);
    let written = written_bytes()
        .zip(written0)
        .map(|(b, a)| b.saturating_sub(a));
    let (mut latencies, mut decided) = (Latencies::new(), Latencies::new());
    while let Some(r) = tasks.join_next().await {
        let (l, d) = r.map_err(|e| e.to_string())??;
        latencies.add(&l);
        decided.add(&d);
    }
    let transfers = counts[3].load(Ordering::Relaxed);
    let cpu = usage1.cpu_seconds - usage0.cpu_seconds;
    Ok(BenchReport {
        workload: name(a.workload),
        via: via.to_string(),
        store: store.to_string(),
        transfers,
        done: counts[0].load(Ordering::Relaxed),
        canceled: counts[1].load(Ordering::Relaxed),
        errors: counts[2].load(Ordering::Relaxed),
        seconds,
        per_second: transfers as f64 / seconds,
        latency_ms: latencies.percentiles_ms(),
        decided_ms: (!decided.is_empty()).then(|| decided.percentiles_ms()),
        cpu_seconds: cpu,
        cpu_us_per_transfer: cpu * 1e6 / transfers.max(1) as f64,
        machine_cpu_us_per_transfer: machine.busy * 1e6 / transfers.max(1) as f64,
        machine_idle_percent: 100.0 * machine.idle / machine_all,
        machine_steal_percent: 100.0 * machine.steal / machine_all,
        log_syncs_per_second: syncs.map(|n| n as f64 / seconds),
        written_bytes_per_transfer: syncs
            .and(written)
            .map(|w| w as f64 / transfers.max(1) as f64),
        peak_rss_mib: usage1.peak_rss_mib,
        rss_growth_mib: usage1.rss_mib - usage0.rss_mib,
    })
}

/// Creates every account of the workload and funds it from an unbounded issuer, so that
/// no transfer is refused for funds (except quotas running out in `flash-sale`).
async fn setup(a: &BenchArgs, server: &Server) -> Result<(), String> {
    let e = server.service().executor();
    let watch = Stopwatch::start();
    for &bench_asset in assets(a.workload) {
        let asset = bench_asset.code();
        let code = AssetCode::new(asset, "asset").expect("valid");
        let issuer = format!("{}-issuer", asset.to_ascii_lowercase());
        let mut ops = vec![create_op(&issuer, &code, xfer_core::LowerBound::Unbounded)];
        ops.extend(
            (0..a.accounts)
                .map(|i| create_op(&acct(asset, i), &code, xfer_core::LowerBound::default())),
        );
        for chunk in ops.chunks(10_000) {
            for r in e
                .execute_ops(chunk.to_vec())
                .await
                .map_err(|e| e.to_string())?
            {
                if !matches!(r, xfer_store::Reply::Account(_)) {
                    return Err(format!("creating accounts: {r}"));
                }
            }
        }
        let fund = if bench_asset == BenchAsset::Quota {
            1_000_000
        } else {
            1_000_000_000_000
        };
        let specs: Vec<TransferSpec> = (0..a.accounts)
            .map(|i| TransferSpec {
                id: TransferId::new(&format!("fund-{}-{i}", asset.to_ascii_lowercase()))
                    .expect("valid"),
                postings: vec![posting(issuer.clone(), acct(asset, i), asset, fund)].into(),
                metadata: String::new(),
                kind: TransferKind::Transfer,
                refund_of: None,
                timeout_ms: 30_000,
            })
            .collect();
        for r in e.submit_many(specs).await {
            match r {
                Ok(Outcome::Finished(r)) if r.state == TransferState::Done => {}
                other => return Err(format!("funding: {other:?}")),
            }
        }
    }
    println!(
        "setup: {} accounts per asset created and funded in {:.1}s",
        a.accounts,
        watch.seconds()
    );
    Ok(())
}

fn create_op(id: &str, asset: &AssetCode, lower_bound: xfer_core::LowerBound) -> xfer_store::Op {
    xfer_store::Op::Account(
        AccountId::new(id).expect("valid id"),
        xfer_store::AccountOp::Create {
            asset: asset.clone(),
            lower_bound,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use xfer_server::wire::{TransferIn, TIMEOUT_MS_DEFAULT};

    #[test]
    fn latencies_answer_their_percentiles_within_a_thousandth() {
        let (mut low, mut high) = (Latencies::new(), Latencies::new());
        assert_eq!(low.percentiles_ms(), [0.0; 3], "nothing recorded");
        for ms in 1..=1_000 {
            let half = if ms <= 500 { &mut low } else { &mut high };
            half.record(f64::from(ms) / 1e3);
        }
        let mut all = Latencies::new();
        all.add(&low);
        all.add(&high);
        for (got, want) in all.percentiles_ms().into_iter().zip([500.0, 990.0, 999.0]) {
            assert!((got - want).abs() <= want / 1e3, "{got} against {want}");
        }
        let top = low.percentiles_ms()[2];
        assert!(
            (top - 500.0).abs() <= 0.5,
            "the low half tops out at 500 ms, not {top}"
        );
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("30s"), Ok(30));
        assert_eq!(parse_duration("2m"), Ok(120));
        assert_eq!(parse_duration("7"), Ok(7));
        assert!(parse_duration("3h").is_err());
    }

    fn args(workload: Workload, via: Via, in_flight: u64, batch: u64) -> BenchArgs {
        BenchArgs {
            workload,
            via,
            accounts: 100,
            in_flight,
            batch,
            duration: 1,
            hot_percent: 90,
            hot_side: HotSide::Debit,
            rate: None,
            store: StoreKind::Embedded,
            shards: 2,
            store_calls_per_shard: 4,
            sink_nats: None,
            postgres_url: String::new(),
            mysql_url: String::new(),
            mongodb_url: String::new(),
            redis_urls: vec![],
            redis_cluster: false,
            baseline: None,
            baseline_clients: 1,
            dir: None,
            keep: false,
            ids: Ids::Sequential,
            timeout_ms: TIMEOUT_MS_DEFAULT,
        }
    }

    /// Over HTTP each client submits on a connection of its own and reads the states from
    /// typed answers: one transfer per request, batches, and holds captured after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn over_http_every_transfer_submitted_is_counted_done() {
        for (workload, in_flight, batch) in [
            (Workload::Uniform, 4, 1),
            (Workload::Uniform, 8, 4),
            (Workload::Holds, 4, 1),
            (Workload::Holds, 8, 4),
        ] {
            let a = args(workload, Via::Http, in_flight, batch);
            let r = run(a).await.expect("the bench runs").xfer;
            let what = format!("{workload:?} in_flight={in_flight} batch={batch}: {r:?}");
            assert!(r.transfers > 0, "{what}");
            assert_eq!((r.errors, r.canceled), (0, 0), "{what}");
            assert_eq!(r.done, r.transfers, "{what}");
        }
    }

    /// On the embedded store a run counts the log's syncs and the bytes written in its
    /// window; the machine's idle share is a share.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_on_the_embedded_store_reports_its_syncs_and_bytes_written() {
        // In the crate's directory, not the temporary one, which may be a tmpfs (whose
        // writes the kernel does not count as storage writes).
        let a = BenchArgs {
            dir: Some(env!("CARGO_MANIFEST_DIR").into()),
            ..args(Workload::Uniform, Via::Library, 64, 16)
        };
        let r = run(a).await.expect("the bench runs").xfer;
        assert!(r.transfers > 0, "{r:?}");
        // Every drive waits for a sync before it answers.
        let syncs = r
            .log_syncs_per_second
            .expect("the embedded store counts its syncs");
        assert!(syncs >= 1.0, "{r:?}");
        assert!(
            syncs * r.seconds <= r.transfers as f64,
            "no more syncs than transfers: {r:?}"
        );
        match written_bytes() {
            Some(_) => {
                // At the least each transfer's log entries.
                let w = r
                    .written_bytes_per_transfer
                    .expect("bytes written are read");
                assert!(w.is_finite() && w > 0.0, "{r:?}");
            }
            None => assert_eq!(r.written_bytes_per_transfer, None, "{r:?}"),
        }
        assert!((0.0..=100.0).contains(&r.machine_idle_percent), "{r:?}");
        assert!((0.0..=100.0).contains(&r.machine_steal_percent), "{r:?}");
        assert!(r.rss_growth_mib <= r.peak_rss_mib, "{r:?}");
    }

    /// Memory touched for the first time shows in the resident size `usage` reads, which
    /// is what the report's growth is made of; the peak is never below it.
    #[test]
    fn touching_memory_grows_the_resident_size_read() {
        const MIB: usize = 128;
        let before = usage();
        // Every page written: ones, not zeros (zeroed memory can be mapped untouched).
        let touched = vec![1u8; MIB << 20];
        let after = usage();
        std::hint::black_box(&touched);
        drop(touched);
        let grown = after.rss_mib - before.rss_mib;
        assert!(
            grown >= 0.75 * MIB as f64,
            "{MIB} MiB touched, resident grew {grown:.1} MiB"
        );
        assert!(
            after.peak_rss_mib >= after.rss_mib,
            "peak {} < {}",
            after.peak_rss_mib,
            after.rss_mib
        );
        assert!(after.cpu_seconds >= before.cpu_seconds);
    }

    /// Scattered ids are unique (the mix is a bijection) and do not sort in the order they
    /// were made, as sequential ones nearly do.
    #[test]
    fn scattered_ids_are_unique_and_out_of_order() {
        let made: Vec<String> = (0..4u64)
            .flat_map(|c| {
                (1..=5_000u64).map(move |n| transfer_id(Ids::Scattered, c, n).as_str().to_string())
            })
            .collect();
        let unique: std::collections::HashSet<&String> = made.iter().collect();
        assert_eq!(unique.len(), made.len());
        assert!(made.iter().all(|id| id.len() == 16));
        let in_order = made.windows(2).filter(|w| w[0] < w[1]).count();
        assert!(
            in_order < made.len() * 3 / 5,
            "{in_order} of {} in order",
            made.len()
        );
        assert_eq!(transfer_id(Ids::Sequential, 3, 7).as_str(), "b3-7");
    }

    /// The ids written digit by digit are the text `format!` writes, at the ends of the
    /// range too.
    #[test]
    fn ids_are_written_as_format_writes_them() {
        let values = [
            0,
            1,
            9,
            10,
            99,
            100,
            12_345,
            1 << 40,
            u64::MAX - 1,
            u64::MAX,
        ];
        for client in values {
            for n in values {
                assert_eq!(
                    transfer_id(Ids::Sequential, client, n).as_str(),
                    format!("b{client}-{n}")
                );
            }
        }
        for (c, n) in [(0u64, 0u64), (0, 1), (3, 7), (1 << 23, (1 << 40) - 1)] {
            let mut z = (c << 40) ^ n;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let id = transfer_id(Ids::Scattered, c, n);
            assert_eq!(id.as_str(), format!("{:016x}", z ^ (z >> 31)));
        }
    }

    /// The accounts a posting names, written digit by digit, are the accounts the setup
    /// made (`acct`), in every asset of every workload and at the ends of the range.
    #[test]
    fn postings_name_the_accounts_the_setup_made() {
        for workload in [Workload::Uniform, Workload::MultiAsset, Workload::FlashSale] {
            let names = Names::new();
            for &asset in assets(workload) {
                let code = asset.code();
                for n in [0, 1, 9, 10, 9_999, 10_000, u64::MAX] {
                    let p = names.posting(asset, n, 7, 1);
                    assert_eq!(p.from.as_str(), acct(code, n), "{code} {n}");
                    assert_eq!(p.to.as_str(), acct(code, 7));
                    assert_eq!(p.asset.as_str(), code);
                }
            }
        }
    }

    #[test]
    fn hot_transfers_touch_the_hot_account() {
        let a = BenchArgs {
            hot_percent: 100,
            hot_side: HotSide::Credit,
            ..args(Workload::Hot, Via::Library, 1, 1)
        };
        let (mut rng, names) = (Rng::new(1), Names::new());
        for i in 0..50 {
            let s = next_spec(
                &a,
                &names,
                &mut rng,
                TransferId::new(&format!("t{i}")).unwrap(),
            );
            assert_eq!(s.postings[0].to.as_str(), "usd-0");
            assert!(s.validate().is_ok());
        }
    }

    /// `--timeout-ms` reaches every transfer, by library and over HTTP (where the body
    /// names it only when it is not the API's default), and a value the API would refuse
    /// is refused before anything runs.
    #[tokio::test]
    async fn the_timeout_reaches_every_transfer_and_bad_values_are_refused() {
        for (workload, timeout_ms) in [(Workload::Uniform, 1_000), (Workload::Holds, 59_999)] {
            let a = BenchArgs {
                timeout_ms,
                ..args(workload, Via::Library, 1, 1)
            };
            let (mut rng, names) = (Rng::new(1), Names::new());
            let s = next_spec(&a, &names, &mut rng, TransferId::new("t1").unwrap());
            assert_eq!(s.timeout_ms, timeout_ms);
            assert!(s.validate().is_ok(), "{s:?}");
            let body = serde_json::to_value(TransferIn::from(&s)).expect("encodes");
            assert_eq!(body["timeout_ms"], json!(timeout_ms), "{body}");
        }
        let a = args(Workload::Uniform, Via::Library, 1, 1);
        let (mut rng, names) = (Rng::new(1), Names::new());
        let s = next_spec(&a, &names, &mut rng, TransferId::new("t1").unwrap());
        assert_eq!(s.timeout_ms, TIMEOUT_MS_DEFAULT);
        let body = serde_json::to_value(TransferIn::from(&s)).expect("encodes");
        assert!(body.get("timeout_ms").is_none(), "{body}");

        for (workload, timeout_ms, says) in [
            (Workload::Uniform, 0, "--timeout-ms: 1 to"),
            (Workload::Uniform, TIMEOUT_MS_MAX + 1, "--timeout-ms: 1 to"),
            (Workload::Holds, HOLD_TTL_MS, "below the holds' ttl_ms"),
        ] {
            let a = BenchArgs {
                timeout_ms,
                dir: Some("/nonexistent/refused-before-anything-runs".into()),
                ..args(workload, Via::Library, 1, 1)
            };
            match run(a).await {
                Err(e) => assert!(e.contains(says), "{timeout_ms}: {e}"),
                Ok(_) => panic!("--timeout-ms {timeout_ms} ran"),
            }
        }
    }
}
