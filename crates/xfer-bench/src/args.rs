//! The command line of `xfer bench`: what to run, where, how long.

use crate::ids::*;
use clap::{Args, ValueEnum};
use xfer_server::config::StoreKind;
use xfer_server::wire::TIMEOUT_MS_DEFAULT;

/// What `xfer bench` runs.
#[derive(Clone, Debug, Args)]
pub struct BenchArgs {
    /// The mix of transfers.
    #[arg(long, value_enum, default_value_t = Workload::Uniform)]
    pub workload: Workload,
    /// Through the engine as a library, or the service over HTTP.
    #[arg(long, value_enum, default_value_t = Via::Library)]
    pub via: Via,
    /// Accounts per asset.
    #[arg(long, default_value_t = 10_000)]
    pub accounts: u64,
    /// Transfers in flight (clients × batch). Eight clients of the default batch, so that
    /// some client always has work while others wait for the log's sync.
    #[arg(long, default_value_t = 2_048)]
    pub in_flight: u64,
    /// Transfers per request (1 to 8,192).
    #[arg(long, default_value_t = 256)]
    pub batch: u64,
    /// How long to measure, e.g. `30s` or `2m`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: u64,
    /// `hot`: the share of transfers on the hot account, in percent.
    #[arg(long, default_value_t = 90)]
    pub hot_percent: u64,
    /// `hot`: whether the hot account is debited (a merchant paying out) or credited (a
    /// merchant being paid).
    #[arg(long, value_enum, default_value_t = HotSide::Debit)]
    pub hot_side: HotSide,
    /// Offer at most this many transfers per second (spread over the clients, each pacing
    /// its requests), to measure latency below saturation, e.g. at half of the peak an
    /// unpaced run reaches. [default: as fast as answered]
    #[arg(long)]
    pub rate: Option<u64>,
    /// Where xfer's shards live: the embedded store, PostgreSQL (a fresh database per
    /// shard on the server of --postgres-url, dropped after the run), MySQL or MongoDB (the
    /// databases `xfer_bench_N` on --mysql-url or --mongodb-url, dropped before and after
    /// the run) or Redis (the hash tags `xfer_bench_N` on --redis-url, emptied before and
    /// after the run).
    #[arg(long, value_enum, default_value_t = StoreKind::Embedded)]
    pub store: StoreKind,
    /// Shards.
    #[arg(long, default_value_t = 4)]
    pub shards: u16,
    /// Store calls in flight per shard, as `xfer serve --store-calls-per-shard` (concurrent
    /// requests to a shard merge into that many calls).
    #[arg(long, default_value_t = 4)]
    pub store_calls_per_shard: usize,
    /// Publish the change feed to this NATS server's JetStream during the run, as
    /// `xfer serve --sink-nats` (a stream of the run's own, deleted after): what a sink
    /// costs. The report says how far behind it was at the end.
    #[arg(long)]
    pub sink_nats: Option<String>,
    /// The PostgreSQL server for `--store postgres` and `--baseline postgres`. Each run
    /// creates its own database next to the one named here and drops it after (the user
    /// needs the CREATEDB right). `scripts/services` starts a local server.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/xfer_bench")]
    pub postgres_url: String,
    /// The MySQL or MariaDB server for `--store mysql` and `--baseline mysql`.
    /// `scripts/services` starts a local MariaDB.
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
    pub mysql_url: String,
    /// The MongoDB deployment for `--store mongodb`. `scripts/services` starts a local
    /// MongoDB-wire test server.
    #[arg(long, default_value = "mongodb://127.0.0.1:27017")]
    pub mongodb_url: String,
    /// The Redis server for `--store redis`, or with --redis-cluster the nodes of a Redis
    /// Cluster (repeat the flag). `scripts/services` starts a local server on 6379 and a
    /// Cluster of three masters on 7001-7003.
    #[arg(long = "redis-url", default_value = "redis://127.0.0.1:6379")]
    pub redis_urls: Vec<String>,
    /// The --redis-url nodes are one Redis Cluster.
    #[arg(long)]
    pub redis_cluster: bool,
    /// Then run the same workload without xfer, natively, and print the ratio: PostgreSQL
    /// transactions (one per transfer: conditional debit, credit, insert, commit) or Redis
    /// function calls (one per transfer, on the first --redis-url).
    #[arg(long, value_enum)]
    pub baseline: Option<Baseline>,
    /// Connections of the baseline, each running one transaction at a time.
    #[arg(long, default_value_t = 64)]
    pub baseline_clients: u64,
    /// Where the data directory goes (a fresh subdirectory is made and removed).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Keep the embedded store's data directory after the run and print where it is, for
    /// `xfer serve --data-dir` (an audit or a replay of what the run left).
    #[arg(long)]
    pub keep: bool,
    /// How transfer ids are made: in counting order per client, or scattered over the
    /// whole key range as a client's random ids (UUIDs) are.
    #[arg(long, value_enum, default_value_t = Ids::Sequential)]
    pub ids: Ids,
    /// Each transfer's `timeout_ms`, its prepare deadline after submission (the API's
    /// default unless given). Its tombstones stay until the deadline plus the skew bound,
    /// so it sets how many an account holds.
    #[arg(long, default_value_t = TIMEOUT_MS_DEFAULT)]
    pub timeout_ms: u64,
}

/// The mixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// Random accounts on both sides.
    Uniform,
    /// A share of the transfers on one account.
    Hot,
    /// Two postings in two assets (usually two shards).
    MultiAsset,
    /// Hold, then capture.
    Holds,
    /// Stock, per-user quota and cash in one transfer.
    FlashSale,
}

/// How the load reaches xfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Via {
    /// `Executor::submit_many` in-process.
    Library,
    /// The HTTP API on loopback.
    Http,
}

/// What xfer is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Baseline {
    /// Native PostgreSQL transactions, one per transfer.
    Postgres,
    /// One Redis function call per transfer (conditional debit, credit, record), on the
    /// first --redis-url (one server).
    Redis,
    /// Native MySQL (MariaDB) transactions, one per transfer, on --mysql-url.
    Mysql,
}

/// The hot account's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HotSide {
    /// Debited.
    Debit,
    /// Credited.
    Credit,
}

pub(crate) fn parse_duration(s: &str) -> Result<u64, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: expected e.g. 30s or 2m"))?;
    match unit {
        "" | "s" => Ok(n),
        "m" => Ok(n * 60),
        _ => Err(format!("{s:?}: expected e.g. 30s or 2m")),
    }
}
