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
//! ([`crate::baseline`]) on `--baseline-clients` connections and prints the ratio.
//!
//! Workloads: `uniform` (random accounts on both sides), `hot` (a share of the transfers
//! debit or credit one account), `multi-asset` (a USD and a POINTS posting, usually on two
//! shards), `holds` (hold, then capture), `flash-sale` (stock, per-user quota and cash in one
//! transfer). Latency is per request, submit to outcome (`done` or `canceled`: the
//! decision and every post); CPU is this process's user + system time, and the whole
//! machine's (the database server's included) per transfer.

use crate::baseline::{FreshDatabase, Native};
use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use xfer_client::{Client, Connection};
use xfer_core::transfer::TIMEOUT_MS_MAX;
use xfer_core::{
    AccountId, Amount, AssetCode, Clock, Posting, Postings, Rng, SystemClock, TransferId,
    TransferKind, TransferSpec, TransferState,
};
use xfer_engine::{Decisions, Machine, Outcome, Sleeper, TokioSleeper};
use xfer_server::config::{ServeConfig, ShardSpec, StoreKind};
use xfer_server::metrics::Stopwatch;
use xfer_server::server::Server;
use xfer_server::stores;
use xfer_server::wire::{BatchIn, TransferIn, TIMEOUT_MS_DEFAULT};
use xfer_store_redis::RedisStore;

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
    /// shard on the server of --postgres-url, dropped after the run) or Redis (the hash tags
    /// `xfer_bench_N` on --redis-url, emptied before and after the run).
    #[arg(long, value_enum, default_value_t = StoreKind::Embedded)]
    pub store: StoreKind,
    /// Shards.
    #[arg(long, default_value_t = 4)]
    pub shards: u16,
    /// The PostgreSQL server for `--store postgres` and `--baseline postgres`. Each run
    /// creates its own database next to the one named here and drops it after (the user
    /// needs the CREATEDB right). `scripts/services` starts a local server.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/xfer_bench")]
    pub postgres_url: String,
    /// The Redis server for `--store redis`, or with --redis-cluster the nodes of a Redis
    /// Cluster (repeat the flag). `scripts/services` starts a local server on 6379 and a
    /// Cluster of three masters on 7001-7003.
    #[arg(long = "redis-url", default_value = "redis://127.0.0.1:6379")]
    pub redis_urls: Vec<String>,
    /// The --redis-url nodes are one Redis Cluster.
    #[arg(long)]
    pub redis_cluster: bool,
    /// Then run the same workload without xfer, as native PostgreSQL transactions (one
    /// per transfer: conditional debit, credit, insert, commit), and print the ratio.
    #[arg(long, value_enum)]
    pub baseline: Option<Baseline>,
    /// Connections of the baseline, each running one transaction at a time.
    #[arg(long, default_value_t = 64)]
    pub baseline_clients: u64,
    /// Where the data directory goes (a fresh subdirectory is made and removed).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
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

/// How the bench names its transfers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Ids {
    /// `b<client>-<n>`: a client's ids in counting order, so the ids of one checkpoint
    /// are neighbours in the tables keyed by id (the `done` table).
    Sequential,
    /// Sixteen hex digits, a bijective mix of client and count: unique, and spread over
    /// the whole key range as random ids are.
    Scattered,
}

/// The id of `client`'s `n`th transfer, written digit by digit into a buffer on the stack:
/// `format!` and its `String` were 1.3 % of `xfer bench`'s samples, the clients' largest
/// share (`docs/benchmarks.md`).
fn transfer_id(ids: Ids, client: u64, n: u64) -> TransferId {
    let mut text = IdText::default();
    match ids {
        Ids::Sequential => {
            text.push(b'b');
            text.decimal(client);
            text.push(b'-');
            text.decimal(n);
        }
        Ids::Scattered => {
            // splitmix64's finalizer: xor-shifts and odd multiplications, each invertible,
            // so distinct inputs (n < 2^40, client < 2^24) give distinct ids.
            let mut z = (client << 40) ^ n;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            text.hex16(z ^ (z >> 31));
        }
    }
    TransferId::new(text.as_str()).expect("a bench id is valid")
}

/// An id's text as [`transfer_id`] and [`Names`] write it: at most 42 bytes ("b", twenty
/// digits, "-", twenty digits; an asset code of at most sixteen letters, "-", twenty digits).
#[derive(Clone)]
struct IdText {
    bytes: [u8; 42],
    len: usize,
}

impl Default for IdText {
    fn default() -> Self {
        IdText {
            bytes: [0; 42],
            len: 0,
        }
    }
}

impl IdText {
    fn push(&mut self, b: u8) {
        self.bytes[self.len] = b;
        self.len += 1;
    }

    /// `v` in decimal, without leading zeros.
    fn decimal(&mut self, mut v: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        for &d in &digits[i..] {
            self.push(d);
        }
    }

    /// `v` as sixteen lower-case hex digits.
    fn hex16(&mut self, v: u64) {
        for shift in (0..16).rev() {
            self.push(b"0123456789abcdef"[(v >> (4 * shift)) as usize & 0xf]);
        }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).expect("ASCII digits and letters")
    }
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
}

/// The hot account's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HotSide {
    /// Debited.
    Debit,
    /// Credited.
    Credit,
}

fn parse_duration(s: &str) -> Result<u64, String> {
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

/// What was measured.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct BenchReport {
    /// The workload's name.
    pub workload: String,
    /// `library`, `http`, or `postgres-native` (the baseline).
    pub via: String,
    /// `embedded` or `postgres` (xfer's shards), or `-` for the baseline.
    pub store: String,
    /// Transfers answered in the window.
    pub transfers: u64,
    /// Of which `done`.
    pub done: u64,
    /// Of which `canceled`.
    pub canceled: u64,
    /// Failed requests' transfers.
    pub errors: u64,
    /// The window, in seconds.
    pub seconds: f64,
    /// Transfers per second.
    pub per_second: f64,
    /// Request latency percentiles, ms: p50, p99, p99.9 (submit to the answer: done or
    /// canceled; held for holds).
    pub latency_ms: [f64; 3],
    /// Submit-to-decided percentiles, ms (the commit point written), per transfer; only
    /// when driving the engine as a library.
    pub decided_ms: Option<[f64; 3]>,
    /// CPU seconds (user + system) in the window.
    pub cpu_seconds: f64,
    /// CPU per transfer, µs.
    pub cpu_us_per_transfer: f64,
    /// CPU of the whole machine (every process: xfer, the database server, the load) per
    /// transfer, µs; time the hypervisor took from this machine (steal) counts as busy.
    pub machine_cpu_us_per_transfer: f64,
    /// The whole machine's idle share of the window (idle and waiting for I/O), percent.
    pub machine_idle_percent: f64,
    /// The share of the window the hypervisor gave this machine's CPUs to others (steal,
    /// in /proc/stat), percent: a run with much of it measured a slower machine, not xfer.
    pub machine_steal_percent: f64,
    /// The embedded store's log syncs (group commits, each a write and an `fdatasync`) per
    /// second; `None` on other stores.
    pub log_syncs_per_second: Option<f64>,
    /// Bytes this process wrote to storage (`write_bytes` of `/proc/self/io`: the log and
    /// the checkpoint tables, fjall's compactions included) per transfer; only on the
    /// embedded store (elsewhere the database server writes).
    pub written_bytes_per_transfer: Option<f64>,
    /// Peak resident memory, MiB.
    pub peak_rss_mib: f64,
    /// Resident memory at the window's end less at its start, MiB: memory the process
    /// touched for the first time during the window (net of what it gave back). The kernel
    /// zeroes each new page, and on a virtual machine the hypervisor may have to back it
    /// first, which can cost milliseconds per MiB (`docs/benchmarks.md`): a run that grows
    /// much pays for it in the CPU per transfer, once.
    pub rss_growth_mib: f64,
}

/// An asset the workloads use; a posting names its asset by this, not by its code, so
/// that the clients find its names by place rather than by comparing text: the comparison
/// (a call to libc's `memcmp` for three bytes) was 2.2 % of the runtime threads' samples
/// (`docs/benchmarks.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BenchAsset {
    Usd,
    Points,
    Sku,
    Quota,
}

impl BenchAsset {
    /// Every asset, in the order of their places.
    const ALL: [BenchAsset; 4] = [
        BenchAsset::Usd,
        BenchAsset::Points,
        BenchAsset::Sku,
        BenchAsset::Quota,
    ];

    /// Its asset code.
    fn code(self) -> &'static str {
        match self {
            BenchAsset::Usd => "USD",
            BenchAsset::Points => "POINTS",
            BenchAsset::Sku => "SKU-1",
            BenchAsset::Quota => "QUOTA-1",
        }
    }
}

use BenchAsset::{Points, Quota, Sku, Usd};
/// How long the holds workload's holds last before they expire.
const HOLD_TTL_MS: u64 = 60_000;

fn acct(asset: &str, i: u64) -> String {
    format!("{}-{i}", asset.to_ascii_lowercase())
}

fn posting(from: String, to: String, asset: &str, amount: u64) -> Posting {
    Posting {
        from: AccountId::new(&from).expect("valid id"),
        to: AccountId::new(&to).expect("valid id"),
        asset: AssetCode::new(asset, "asset").expect("valid asset"),
        amount: Amount::new(amount, "amount").expect("positive"),
    }
}

/// The names a workload's transfers use, made once: the clients pick accounts by number
/// and write each id digit by digit after its asset's prefix, instead of formatting and
/// validating two ids and an asset code per posting with `format!` (most of the clients'
/// own CPU once), or reading them from a table of every account's id (made once: its two
/// reads per posting missed the cache, 1.6 % of `xfer bench`'s samples,
/// `docs/benchmarks.md`).
struct Names {
    /// (asset code, its accounts' ids up to the number: the code in lower case and "-")
    /// for each asset, at its place in [`BenchAsset::ALL`].
    assets: [(AssetCode, IdText); BenchAsset::ALL.len()],
}

impl Names {
    fn new() -> Names {
        let assets = BenchAsset::ALL.map(|asset| {
            let code = AssetCode::new(asset.code(), "asset").expect("valid asset");
            let mut prefix = IdText::default();
            for b in asset.code().to_ascii_lowercase().bytes() {
                prefix.push(b);
            }
            prefix.push(b'-');
            (code, prefix)
        });
        Names { assets }
    }

    /// A posting of `amount` of `asset` from account number `from` to number `to`.
    fn posting(&self, asset: BenchAsset, from: u64, to: u64, amount: u64) -> Posting {
        let (code, prefix) = &self.assets[asset as usize];
        let account = |n: u64| {
            let mut text = prefix.clone();
            text.decimal(n);
            AccountId::new(text.as_str()).expect("a bench id is valid")
        };
        Posting {
            from: account(from),
            to: account(to),
            asset: code.clone(),
            amount: Amount::new(amount, "amount").expect("positive"),
        }
    }
}

/// The assets a workload uses.
fn assets(w: Workload) -> &'static [BenchAsset] {
    match w {
        Workload::Uniform | Workload::Hot | Workload::Holds => &[Usd],
        Workload::MultiAsset => &[Usd, Points],
        Workload::FlashSale => &[Usd, Sku, Quota],
    }
}

/// One transfer of the workload.
fn next_spec(a: &BenchArgs, names: &Names, rng: &mut Rng, id: TransferId) -> TransferSpec {
    let n = a.accounts;
    let pair = |rng: &mut Rng| {
        let from = rng.below(n);
        (from, (from + 1 + rng.below(n - 1)) % n)
    };
    // Built in place: one posting needs no list of its own (`Postings`).
    let postings = match a.workload {
        Workload::Uniform | Workload::Holds => {
            let (f, t) = pair(rng);
            Postings::from_buf([names.posting(Usd, f, t, 1 + rng.below(100))])
        }
        Workload::Hot => {
            let (mut f, mut t) = pair(rng);
            if rng.below(100) < a.hot_percent {
                match a.hot_side {
                    HotSide::Debit => (f, t) = (0, 1 + rng.below(n - 1)),
                    HotSide::Credit => (f, t) = (1 + rng.below(n - 1), 0),
                }
            }
            Postings::from_buf([names.posting(Usd, f, t, 1 + rng.below(100))])
        }
        Workload::MultiAsset => {
            let (f, t) = pair(rng);
            Postings::from_iter([
                names.posting(Usd, f, t, 1 + rng.below(100)),
                names.posting(Points, f, t, 1 + rng.below(100)),
            ])
        }
        Workload::FlashSale => {
            // Shopper u buys one item from the shop's stock (account 0 of SKU), pays the
            // shop (USD account 0), and spends one unit of their quota.
            let u = 1 + rng.below(n - 1);
            Postings::from_iter([
                names.posting(Sku, 0, u, 1),
                names.posting(Usd, u, 0, 999),
                names.posting(Quota, u, 0, 1),
            ])
        }
    };
    TransferSpec {
        id,
        postings,
        metadata: String::new(),
        kind: match a.workload {
            Workload::Holds => TransferKind::Hold {
                ttl_ms: HOLD_TTL_MS,
            },
            _ => TransferKind::Transfer,
        },
        refund_of: None,
        timeout_ms: a.timeout_ms,
    }
}

/// Of a transfer answered, the bench reads only its state.
#[derive(serde::Deserialize)]
struct Stated {
    state: TransferState,
}

#[derive(serde::Deserialize)]
struct BatchAnswer {
    results: Vec<BatchItem>,
}

#[derive(serde::Deserialize)]
struct BatchItem {
    transfer: Option<Stated>,
    #[serde(default)]
    error: Option<Value>,
}

/// A distribution of latencies: recorded in microseconds (three significant digits, so
/// a percentile is off by at most 0.1 %), read in milliseconds. A run records one time per
/// transfer; kept as a list of them, that list and its regrowth were a few percent of the
/// run's CPU and a good part of its memory.
#[derive(Clone)]
struct Latencies(hdrhistogram::Histogram<u64>);

impl Latencies {
    fn new() -> Latencies {
        Latencies(hdrhistogram::Histogram::new(3).expect("3 significant digits are allowed"))
    }

    fn record(&mut self, seconds: f64) {
        // Grows to take the value (`saturating_record` would clamp it to the range so far).
        self.0
            .record((seconds * 1e6) as u64)
            .expect("auto-resizing histograms take any value");
    }

    fn add(&mut self, other: &Latencies) {
        self.0
            .add(&other.0)
            .expect("auto-resizing histograms take any value");
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// p50, p99 and p99.9, ms (0 when nothing was recorded).
    fn percentiles_ms(&self) -> [f64; 3] {
        [0.5, 0.99, 0.999].map(|q| {
            if self.is_empty() {
                0.0
            } else {
                self.0.value_at_quantile(q) as f64 / 1e3
            }
        })
    }
}

/// Submit-to-decided times of one client's requests.
struct DecidedClock {
    since: std::sync::Mutex<Stopwatch>,
    times: std::sync::Mutex<Latencies>,
}

impl DecidedClock {
    fn new() -> DecidedClock {
        DecidedClock {
            since: std::sync::Mutex::new(Stopwatch::start()),
            times: std::sync::Mutex::new(Latencies::new()),
        }
    }

    /// A request is submitted now.
    fn restart(&self) {
        *self.since.lock().expect("not poisoned") = Stopwatch::start();
    }

    /// The times recorded so far, taken.
    fn take(&self) -> Latencies {
        std::mem::replace(
            &mut *self.times.lock().expect("not poisoned"),
            Latencies::new(),
        )
    }
}

impl Decisions for DecidedClock {
    fn decided(&self, _: &TransferId) {
        let seconds = self.since.lock().expect("not poisoned").seconds();
        self.times.lock().expect("not poisoned").record(seconds);
    }
}

/// Where requests go.
#[derive(Clone)]
enum Target {
    Library(Arc<Server>),
    Http(Client),
    Native(Native),
}

impl Target {
    /// Submits `specs` (and captures the holds) and answers the final states; a library
    /// target tells `decisions` of each decision. Over HTTP the submit goes on the
    /// client's own connection `conn`, the captures over the shared client, at once.
    async fn run(
        &self,
        conn: Option<&mut Connection>,
        specs: Vec<TransferSpec>,
        decisions: &DecidedClock,
    ) -> Result<Vec<TransferState>, String> {
        let holds = matches!(
            specs.first().map(|s| s.kind),
            Some(TransferKind::Hold { .. })
        );
        let ids: Vec<TransferId> = specs.iter().map(|s| s.id.clone()).collect();
        let mut states = match self {
            Target::Library(s) => {
                let e = s.service().executor();
                finished_states(e.submit_many_observed(specs, Some(decisions)).await)?
            }
            Target::Http(_) => {
                let conn = conn.ok_or("an HTTP client needs its connection")?;
                http_submit(conn, &specs).await?
            }
            Target::Native(n) => {
                let mut out = Vec::with_capacity(specs.len());
                for s in &specs {
                    out.push(n.transfer(s).await?);
                }
                return Ok(out);
            }
        };
        if holds {
            let held: Vec<TransferId> = ids
                .into_iter()
                .zip(&states)
                .filter(|(_, s)| **s == TransferState::Held)
                .map(|(id, _)| id)
                .collect();
            let captured = match self {
                Target::Library(s) => {
                    let e = s.service().executor();
                    let now = e.clock().now();
                    let starts = held
                        .iter()
                        .map(|id| Machine::capture(id.clone(), e.owner().clone(), now, *e.config()))
                        .collect();
                    finished_states(e.drive(starts).await)?
                }
                Target::Native(_) => unreachable!("answered above"),
                Target::Http(c) => {
                    let calls = held.iter().map(|id| async move {
                        let path = format!(
                            "/v1/transfers/{}/capture",
                            xfer_client::segment(id.as_str())
                        );
                        c.post(&path, &json!({})).await
                    });
                    let mut out = Vec::new();
                    for a in futures_util::future::join_all(calls).await {
                        out.push(state_of(&a?.ok()?)?);
                    }
                    out
                }
            };
            let mut captured = captured.into_iter();
            for s in states.iter_mut().filter(|s| **s == TransferState::Held) {
                *s = captured.next().unwrap_or(*s);
            }
        }
        Ok(states)
    }
}

fn finished_states(
    outcomes: Vec<Result<Outcome, xfer_engine::ExecError>>,
) -> Result<Vec<TransferState>, String> {
    outcomes
        .into_iter()
        .map(|o| match o.map_err(|e| e.to_string())? {
            Outcome::Finished(r) | Outcome::Held(r) | Outcome::Left(r) => Ok(r.state),
            other => Err(format!("{other:?}")),
        })
        .collect()
}

fn state_of(v: &Value) -> Result<TransferState, String> {
    let s = v["state"].as_str().unwrap_or("");
    serde_json::from_value(json!(s)).map_err(|_| format!("no state in {v}"))
}

async fn http_submit(
    conn: &mut Connection,
    specs: &[TransferSpec],
) -> Result<Vec<TransferState>, String> {
    let (path, body) = match specs {
        [one] => ("/v1/transfers", serde_json::to_vec(&TransferIn::from(one))),
        _ => {
            let transfers = specs.iter().map(TransferIn::from).collect();
            (
                "/v1/transfers/batch",
                serde_json::to_vec(&BatchIn { transfers }),
            )
        }
    };
    let bytes = conn
        .post_json(path, body.map_err(|e| e.to_string())?)
        .await?;
    let unreadable = |e: serde_json::Error| format!("POST {path}: answer unreadable: {e}");
    if specs.len() == 1 {
        let t: Stated = serde_json::from_slice(bytes).map_err(unreadable)?;
        return Ok(vec![t.state]);
    }
    let answer: BatchAnswer = serde_json::from_slice(bytes).map_err(unreadable)?;
    answer
        .results
        .into_iter()
        .map(|r| match r.transfer {
            Some(t) => Ok(t.state),
            None => Err(format!(
                "batch item failed: {}",
                r.error.unwrap_or(Value::Null)
            )),
        })
        .collect()
}

/// The whole machine's CPU seconds (all cores, every process), from /proc/stat.
#[derive(Clone, Copy, Default)]
struct MachineTimes {
    /// Busy, steal included.
    busy: f64,
    /// Idle, waiting for I/O included.
    idle: f64,
    /// Taken by the hypervisor for others.
    steal: f64,
}

impl std::ops::Sub for MachineTimes {
    type Output = MachineTimes;
    fn sub(self, before: MachineTimes) -> MachineTimes {
        MachineTimes {
            busy: self.busy - before.busy,
            idle: self.idle - before.idle,
            steal: self.steal - before.steal,
        }
    }
}

fn machine_times() -> MachineTimes {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let f: Vec<f64> = s
                .lines()
                .next()?
                .split_whitespace()
                .skip(1)
                .filter_map(|v| v.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq steal.
            let idle = f.get(3)? + f.get(4)?;
            let busy = f.iter().take(8).sum::<f64>() - idle;
            Some(MachineTimes {
                busy: busy / 100.0,
                idle: idle / 100.0,
                steal: f.get(7)? / 100.0,
            })
        })
        .unwrap_or_default()
}

/// Bytes this process has caused to be written to storage, from /proc/self/io (`None`
/// where the kernel does not say).
fn written_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    let line = io.lines().find(|l| l.starts_with("write_bytes:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// This process's CPU seconds (user + system) and its memory, from /proc.
fn usage() -> Usage {
    let cpu = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the command name (which may hold spaces) start after ") ".
            let rest = s.rsplit_once(") ")?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            Some(ticks / 100.0)
        })
        .unwrap_or(0.0);
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mib = |field: &str| {
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    Usage {
        cpu_seconds: cpu,
        peak_rss_mib: mib("VmHWM:"),
        rss_mib: mib("VmRSS:"),
    }
}

/// What [`usage`] reads.
struct Usage {
    cpu_seconds: f64,
    peak_rss_mib: f64,
    rss_mib: f64,
}

/// xfer's figures and, with `--baseline`, the baseline's from the same run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchRun {
    /// xfer.
    pub xfer: BenchReport,
    /// The baseline, if asked for.
    pub baseline: Option<BenchReport>,
}

/// Runs the benchmark (see the module docs), printing progress every second; then the
/// baseline, if asked for.
pub async fn run(a: BenchArgs) -> Result<BenchRun, String> {
    if a.accounts < 2 || a.batch == 0 || a.batch > 8_192 || a.in_flight < a.batch {
        return Err("need --accounts ≥ 2, 1 ≤ --batch ≤ 8192, --in-flight ≥ --batch".into());
    }
    if a.baseline.is_some() && !matches!(a.workload, Workload::Uniform | Workload::Hot) {
        return Err("--baseline postgres runs the uniform and hot workloads".into());
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
    let mut cfg = ServeConfig {
        listen: "127.0.0.1:0".parse().expect("an address"),
        data_dir: dir.clone(),
        shards: a.shards,
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
    // Redis: prefixes (hash tags) `xfer_bench_N`, emptied before and after the run. Fixed
    // names, so that a Cluster places the shards on the same masters every run.
    let mut redis = Vec::new();
    if a.store == StoreKind::Redis {
        for n in 0..usize::from(a.shards) {
            let (url, cluster) = if a.redis_cluster {
                (None, a.redis_urls.clone())
            } else {
                (Some(a.redis_urls[n % a.redis_urls.len()].clone()), vec![])
            };
            let spec = ShardSpec::Redis {
                url,
                cluster,
                prefix: Some(format!("xfer_bench_{n}")),
            };
            redis.extend(stores::redis_config(&spec, n));
            cfg.layout.push(spec);
        }
        for rc in &redis {
            let store = RedisStore::open(rc).await.map_err(|e| e.to_string())?;
            store.destroy().await.map_err(|e| e.to_string())?;
        }
    }
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
        Err(e) => Err(e),
    };
    match Arc::try_unwrap(server) {
        Ok(s) => s.shutdown().await?,
        Err(_) => return Err("the server is still in use".into()),
    }
    let _ = std::fs::remove_dir_all(&dir);
    for db in dbs {
        db.drop_now().await?;
    }
    for rc in redis {
        let store = RedisStore::open(&rc).await.map_err(|e| e.to_string())?;
        store.destroy().await.map_err(|e| e.to_string())?;
    }
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
    let b = BenchArgs {
        batch: 1,
        in_flight: a.baseline_clients,
        ..a.clone()
    };
    measure(&b, Target::Native(native), "postgres-native", "-", &|| None).await
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
        let fund = if bench_asset == Quota {
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

/// The name a value has on the command line (`multi-asset`).
fn name(v: impl ValueEnum) -> String {
    v.to_possible_value()
        .map_or_else(String::new, |p| p.get_name().to_string())
}

/// Prints a run: one `result:` line per report, and the ratio when there is a baseline.
pub fn print(run: &BenchRun) {
    for r in std::iter::once(&run.xfer).chain(&run.baseline) {
        println!(
            "result: workload={} via={} store={} transfers={} per_second={:.0} done={} canceled={} errors={} \
             latency_ms p50={:.2} p99={:.2} p999={:.2} decided_ms {} cpu_s={:.1} cpu_us_per_transfer={:.1} \
             machine_cpu_us_per_transfer={:.1} machine_idle_pct={:.1} machine_steal_pct={:.1} log_syncs_per_s={} \
             written_bytes_per_transfer={} peak_rss_mib={:.0} rss_growth_mib={:.0}",
            r.workload, r.via, r.store, r.transfers, r.per_second, r.done, r.canceled, r.errors,
            r.latency_ms[0], r.latency_ms[1], r.latency_ms[2],
            r.decided_ms.map_or("-".to_string(), |d| format!("p50={:.2} p99={:.2} p999={:.2}", d[0], d[1], d[2])),
            r.cpu_seconds, r.cpu_us_per_transfer, r.machine_cpu_us_per_transfer, r.machine_idle_percent, r.machine_steal_percent,
            r.log_syncs_per_second.map_or("-".to_string(), |v| format!("{v:.0}")),
            r.written_bytes_per_transfer.map_or("-".to_string(), |v| format!("{v:.0}")),
            r.peak_rss_mib,
            r.rss_growth_mib
        );
    }
    if let Some(b) = &run.baseline {
        println!(
            "compare: xfer {:.0} transfers/s vs postgres native {:.0} transfers/s: {:.2}x",
            run.xfer.per_second,
            b.per_second,
            run.xfer.per_second / b.per_second.max(f64::MIN_POSITIVE)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            postgres_url: String::new(),
            redis_urls: vec![],
            redis_cluster: false,
            baseline: None,
            baseline_clients: 1,
            dir: None,
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
