//! `xfer demo …`: the articles' scenarios, end to end over the HTTP API, each finishing with
//! the audit. Without `--remote` a demo starts its own server (a fast sweeper, a 1 s lease)
//! on a fresh store, and removes the store afterwards: a data directory (the embedded
//! store), or with `--store mysql|mongodb` four databases `xfer_demo_<pid>_N` on the server
//! of `--store-url`; with `--remote` it uses the server at `--url`. Ids carry the run's start
//! time, so runs never collide.
//!
//! - `bank` (seeds 000/001): many concurrent transfers between a few accounts; some are
//!   refused for lack of funds; customer money is conserved.
//! - `flash-sale` (seed 002): stock, a per-user purchase limit and the payment in one hold
//!   per order, orders arriving over a few seconds; unpaid holds expire and their stock is
//!   sold again; never oversold.
//! - `points-and-cash` (seed 004): one payment from POINTS and USD held on two shards:
//!   both legs or neither, then a refund.

use crate::remote::Remote;
use crate::table::{accounts_table, audit_table, text};
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use xfer_client::{segment, Client};
use xfer_core::{Clock, Rng, SystemClock};
use xfer_engine::{Sleeper, TokioSleeper};
use xfer_server::config::{ServeConfig, ShardSpec};
use xfer_server::metrics::Stopwatch;
use xfer_server::server::Server;
use xfer_server::wire::{AccountCreate, AssetIn, HoldIn, PostingIn, RefundIn, TransferIn};

/// The demos.
#[derive(Debug, Subcommand)]
pub enum DemoCommand {
    /// Many concurrent transfers between a few bank accounts.
    Bank {
        /// Shared options.
        #[command(flatten)]
        common: DemoArgs,
        /// Customer accounts.
        #[arg(long, default_value_t = 8)]
        accounts: u64,
        /// Transfers to make.
        #[arg(long, default_value_t = 4_000)]
        transfers: u64,
    },
    /// A flash sale: stock, a per-user limit, payment holds that expire.
    FlashSale {
        /// Shared options.
        #[command(flatten)]
        common: DemoArgs,
        /// Items in stock.
        #[arg(long, default_value_t = 100)]
        stock: u64,
        /// Shoppers.
        #[arg(long, default_value_t = 300)]
        users: u64,
        /// Items one shopper may buy.
        #[arg(long, default_value_t = 2)]
        limit: u64,
        /// The orders (three per shopper) arrive over this many ms.
        #[arg(long, default_value_t = 3_000)]
        arrive_ms: u64,
    },
    /// One payment from points and cash held on two shards.
    PointsAndCash {
        /// Shared options.
        #[command(flatten)]
        common: DemoArgs,
    },
}

/// Options every demo has.
#[derive(Clone, Debug, Args)]
pub struct DemoArgs {
    /// Use the server at --url instead of starting one.
    #[arg(long)]
    pub remote: bool,
    /// Concurrent clients.
    #[arg(long, default_value_t = 32)]
    pub clients: u64,
    /// Random seed of the scenario.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where the demo's own server keeps its shards: the embedded store, or fresh databases
    /// on the MySQL or MongoDB server of --store-url (dropped afterwards).
    #[arg(long, value_enum, default_value_t = DemoStore::Embedded)]
    pub store: DemoStore,
    /// The server for --store mysql or mongodb; by default the local one scripts/services
    /// starts (mysql://root@127.0.0.1:3306 or mongodb://127.0.0.1:27017).
    #[arg(long)]
    pub store_url: Option<String>,
}

/// The stores a demo can start its own server on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoStore {
    /// A fresh data directory.
    Embedded,
    /// Fresh databases on a MySQL or MariaDB server.
    Mysql,
    /// Fresh databases on a MongoDB deployment.
    Mongodb,
}

/// The demo's shards on `store`: none for the embedded store (its `shards` in the data
/// directory), else four fresh databases.
fn demo_layout(store: DemoStore, url: Option<String>) -> Vec<ShardSpec> {
    let database = |n: usize| Some(format!("xfer_demo_{}_{n}", std::process::id()));
    match store {
        DemoStore::Embedded => Vec::new(),
        DemoStore::Mysql => {
            let url = url.unwrap_or_else(|| "mysql://root@127.0.0.1:3306".into());
            (0..4)
                .map(|n| ShardSpec::Mysql {
                    url: url.clone(),
                    database: database(n),
                })
                .collect()
        }
        DemoStore::Mongodb => {
            let url = url.unwrap_or_else(|| "mongodb://127.0.0.1:27017".into());
            (0..4)
                .map(|n| ShardSpec::Mongodb {
                    url: url.clone(),
                    database: database(n),
                })
                .collect()
        }
    }
}

/// Runs a demo; `Ok(code)` is the exit code (0: scenario checks and audit clean).
pub async fn run(cmd: DemoCommand, remote: &Remote) -> Result<i32, String> {
    let common = match &cmd {
        DemoCommand::Bank { common, .. }
        | DemoCommand::FlashSale { common, .. }
        | DemoCommand::PointsAndCash { common } => common.clone(),
    };
    if common.remote && (common.store != DemoStore::Embedded || common.store_url.is_some()) {
        return Err(
            "--store and --store-url choose the demo's own server's store; with \
                    --remote the server at --url has its own"
                .into(),
        );
    }
    if common.store == DemoStore::Embedded && common.store_url.is_some() {
        return Err("--store-url needs --store mysql or --store mongodb".into());
    }
    let own = if common.remote {
        None
    } else {
        let dir = std::env::temp_dir().join(format!(
            "xfer-demo-{}-{}",
            std::process::id(),
            SystemClock.now().as_ms()
        ));
        let layout = demo_layout(common.store, common.store_url.clone());
        let cfg = ServeConfig {
            listen: "127.0.0.1:0".parse().expect("an address"),
            data_dir: dir.clone(),
            layout: layout.clone(),
            sweep_interval_ms: 100,
            // A held transfer is swept (voided once expired) only after both its expiry
            // and its submitter's lease: a short lease lets the flash sale's abandoned holds
            // give their stock back about when they expire, not 5 s later.
            lease_ms: 1_000,
            ..ServeConfig::default()
        };
        let server = Server::start(cfg).await?;
        let place = match layout.first() {
            Some(ShardSpec::Mysql { url, .. } | ShardSpec::Mongodb { url, .. }) => {
                format!(
                    "{} databases xfer_demo_{}_0..3 on {url}",
                    layout.len(),
                    std::process::id()
                )
            }
            _ => dir.display().to_string(),
        };
        println!(
            "demo: started xfer serve on http://{} (data in {place})",
            server.addr(),
        );
        Some((server, dir, layout))
    };
    let url = match &own {
        Some((s, _, _)) => format!("http://{}", s.addr()),
        None => remote.url.clone(),
    };
    let client = Client::new(&url, remote.token.clone())?;
    let prefix = format!("d{}", SystemClock.now().as_ms());
    let scenario = match declare_assets(&client).await {
        Err(e) => Err(e),
        Ok(()) => match cmd {
            DemoCommand::Bank {
                accounts,
                transfers,
                ..
            } => bank(&client, &prefix, &common, accounts, transfers).await,
            DemoCommand::FlashSale {
                stock,
                users,
                limit,
                arrive_ms,
                ..
            } => {
                let sale = Sale {
                    stock,
                    users,
                    limit,
                    arrive_ms,
                };
                flash_sale(&client, &prefix, &common, sale).await
            }
            DemoCommand::PointsAndCash { .. } => points_and_cash(&client, &prefix).await,
        },
    };
    if let Err(e) = &scenario {
        println!("FAILED: {e}");
    }
    // The audit after a failure too: it shows what went wrong.
    let audit = final_audit(&client).await;
    if let Some((server, dir, layout)) = own {
        server.shutdown().await?;
        let _ = std::fs::remove_dir_all(dir);
        xfer_server::stores::drop_databases(&layout).await?;
    }
    scenario?;
    Ok(if audit? { 0 } else { 3 })
}

/// The demos' assets, declared (again, on a server that has them: answered as they are).
async fn declare_assets(c: &Client) -> Result<(), String> {
    for (code, scale) in [("USD", 2), ("POINTS", 0), ("SKU-42", 0), ("QUOTA-42", 0)] {
        let body = AssetIn {
            code: code.to_string(),
            scale,
        };
        c.post_body("/v1/assets", &body).await?.ok()?;
    }
    Ok(())
}

async fn create(c: &Client, id: &str, asset: &str, bound: Value) -> Result<(), String> {
    let body = AccountCreate {
        id: id.to_string(),
        asset: asset.to_string(),
        lower_bound: Some(bound),
        metadata: None,
    };
    c.post_body("/v1/accounts", &body).await?.ok().map(|_| ())
}

fn posting(from: &str, to: &str, asset: &str, amount: u64) -> PostingIn {
    PostingIn::new(from, to, asset, amount)
}

/// A transfer of `postings`, as a client sends it.
fn transfer_in(id: &str, postings: Vec<PostingIn>) -> TransferIn {
    TransferIn {
        id: id.to_string(),
        postings,
        metadata: String::new(),
        hold: None,
        timeout_ms: None,
    }
}

async fn transfer(c: &Client, id: &str, postings: Vec<PostingIn>) -> Result<Value, String> {
    submit(c, &transfer_in(id, postings)).await
}

/// Submits a transfer and answers it once it stopped (see [`stopped`]).
async fn submit(c: &Client, body: &TransferIn) -> Result<Value, String> {
    let t = c.post_body("/v1/transfers", body).await?.ok()?;
    stopped(c, t).await
}

/// `t` once it is done, canceled or held: a 202 (still running, say because the sweeper
/// took it over from a slow executor on a busy machine) is read again until then.
async fn stopped(c: &Client, mut t: Value) -> Result<Value, String> {
    let id = t["id"].as_str().unwrap_or("").to_string();
    for _ in 0..600 {
        if matches!(t["state"].as_str(), Some("done" | "canceled" | "held")) {
            return Ok(t);
        }
        TokioSleeper.sleep(50).await;
        t = c
            .get(&format!("/v1/transfers/{}", segment(&id)))
            .await?
            .ok()?;
    }
    Err(format!("{id} is still {} after 30 s", t["state"]))
}

async fn account(c: &Client, id: &str) -> Result<Value, String> {
    c.get(&format!("/v1/accounts/{}", segment(id))).await?.ok()
}

async fn balance(c: &Client, id: &str) -> Result<i64, String> {
    Ok(account(c, id).await?["balance"].as_i64().unwrap_or(0))
}

/// Runs `clients` tasks, each calling `work(client_index)` until it says stop, printing
/// progress every second from `progress`. Answers the seconds it took.
async fn crowd<F, Fut>(clients: u64, progress: impl Fn() -> String, work: F) -> Result<f64, String>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..clients.max(1) {
        tasks.spawn(work(i));
    }
    let watch = Stopwatch::start();
    let mut tick = TokioSleeper.sleep(1_000);
    let mut last = String::new();
    loop {
        tokio::select! {
            next = tasks.join_next() => match next {
                None => break,
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(e))) => return Err(e),
                Some(Err(e)) => return Err(e.to_string()),
            },
            _ = &mut tick => {
                last = progress();
                println!("  {:>5.1}s  {last}", watch.seconds());
                tick = TokioSleeper.sleep(1_000);
            }
        }
    }
    let seconds = watch.seconds();
    let now = progress();
    if now != last {
        println!("  {seconds:>5.1}s  {now}");
    }
    Ok(seconds)
}

async fn bank(
    c: &Client,
    p: &str,
    common: &DemoArgs,
    accounts: u64,
    transfers: u64,
) -> Result<(), String> {
    const OPENING: u64 = 100_000; // 1,000.00 USD
    if accounts < 2 {
        return Err("--accounts: need at least 2".to_string());
    }
    println!("bank: {accounts} customers with 1,000.00 USD each, {transfers} random transfers from {} clients", common.clients);
    let bank = format!("{p}:bank");
    create(c, &bank, "USD", json!("unbounded")).await?;
    let names: Vec<String> = (0..accounts).map(|i| format!("{p}:c{i}")).collect();
    for (i, n) in names.iter().enumerate() {
        create(c, n, "USD", json!(0)).await?;
        transfer(
            c,
            &format!("{p}:open{i}"),
            vec![posting(&bank, n, "USD", OPENING)],
        )
        .await?;
    }
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let canceled = Arc::new(AtomicU64::new(0));
    let names = Arc::new(names);
    let (n2, d2, c2) = (next.clone(), done.clone(), canceled.clone());
    let seconds = crowd(
        common.clients,
        move || {
            format!(
                "{} transfers: done {} canceled {}",
                n2.load(Ordering::Relaxed).min(transfers),
                d2.load(Ordering::Relaxed),
                c2.load(Ordering::Relaxed)
            )
        },
        |i| {
            let (c, p, names) = (c.clone(), p.to_string(), names.clone());
            let (next, done, canceled) = (next.clone(), done.clone(), canceled.clone());
            let mut rng = Rng::new(common.seed.wrapping_mul(1_000_003).wrapping_add(i));
            async move {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= transfers {
                        return Ok(());
                    }
                    let from = rng.below(names.len() as u64) as usize;
                    let to = (from + 1 + rng.below(names.len() as u64 - 1) as usize) % names.len();
                    let amount = 1 + rng.below(30_000);
                    let t = transfer(
                        &c,
                        &format!("{p}:t{k}"),
                        vec![posting(&names[from], &names[to], "USD", amount)],
                    )
                    .await?;
                    match t["state"].as_str() {
                        Some("done") => done.fetch_add(1, Ordering::Relaxed),
                        Some("canceled") => canceled.fetch_add(1, Ordering::Relaxed),
                        other => return Err(format!("{p}:t{k} answered {other:?}")),
                    };
                }
            }
        },
    )
    .await?;
    println!(
        "{transfers} transfers in {seconds:.1} s: {:.0} transfers/s over HTTP, each waited for its outcome",
        transfers as f64 / seconds.max(1e-9)
    );
    let mut rows = Vec::new();
    let mut total = 0;
    for n in names.iter() {
        let a = account(c, n).await?;
        total += a["balance"].as_i64().unwrap_or(0);
        rows.push(a);
    }
    accounts_table(&rows);
    let expected = (accounts * OPENING) as i64;
    println!("customers hold {total} cents in all; they were given {expected}");
    if total != expected {
        return Err(format!("money was created or lost: {total} != {expected}"));
    }
    Ok(())
}

async fn flash_sale(c: &Client, p: &str, common: &DemoArgs, sale: Sale) -> Result<(), String> {
    const PRICE: u64 = 999; // 9.99 USD
    const BUDGET: u64 = 5_000; // 50.00 USD
    const TTL_MS: u64 = 1_500;
    let Sale {
        stock,
        users,
        limit,
        arrive_ms,
    } = sale;
    let orders = users * 3;
    let window = arrive_ms as f64 / 1e3;
    println!(
        "flash sale: {stock} items at 9.99 USD; {users} shoppers with 50.00 USD each, \
         at most {limit} items each, {orders} orders arriving over {window:.1} s"
    );
    println!(
        "  one hold per order = item + payment + quota; 30% never pay: their holds expire after {TTL_MS} ms \
         and the item goes back on sale"
    );
    let (factory, store) = (format!("{p}:factory"), format!("{p}:stock"));
    let (bank, shop) = (format!("{p}:bank"), format!("{p}:shop"));
    let (quota_src, quota_used) = (format!("{p}:quota-issuer"), format!("{p}:quota-used"));
    create(c, &factory, "SKU-42", json!("unbounded")).await?;
    create(c, &store, "SKU-42", json!(0)).await?;
    create(c, &bank, "USD", json!("unbounded")).await?;
    create(c, &shop, "USD", json!(0)).await?;
    create(c, &quota_src, "QUOTA-42", json!("unbounded")).await?;
    create(c, &quota_used, "QUOTA-42", json!(0)).await?;
    transfer(
        c,
        &format!("{p}:restock"),
        vec![posting(&factory, &store, "SKU-42", stock)],
    )
    .await?;

    // The shoppers' accounts, funded with cash and quota, from all the clients at once.
    let next = Arc::new(AtomicU64::new(0));
    let n2 = next.clone();
    crowd(
        common.clients,
        move || {
            format!(
                "shoppers ready {}/{users}",
                n2.load(Ordering::Relaxed).min(users)
            )
        },
        |_| {
            let (c, p, next) = (c.clone(), p.to_string(), next.clone());
            let (bank, quota_src) = (bank.clone(), quota_src.clone());
            async move {
                loop {
                    let u = next.fetch_add(1, Ordering::Relaxed);
                    if u >= users {
                        return Ok(());
                    }
                    let (cash, items, quota) = (
                        format!("{p}:u{u}:cash"),
                        format!("{p}:u{u}:items"),
                        format!("{p}:u{u}:quota"),
                    );
                    create(&c, &cash, "USD", json!(0)).await?;
                    create(&c, &items, "SKU-42", json!(0)).await?;
                    create(&c, &quota, "QUOTA-42", json!(0)).await?;
                    transfer(
                        &c,
                        &format!("{p}:u{u}:setup"),
                        vec![
                            posting(&bank, &cash, "USD", BUDGET),
                            posting(&quota_src, &quota, "QUOTA-42", limit),
                        ],
                    )
                    .await?;
                }
            }
        },
    )
    .await?;

    // Paid, abandoned, paid too late (the hold had expired), refused as sold out, refused
    // by the shopper's quota or cash, orders placed.
    let counters: Arc<[AtomicU64; 6]> = Arc::new(Default::default());
    let next = Arc::new(AtomicU64::new(0));
    let k2 = counters.clone();
    // Each client pauses a random [0, 2 × mean) before each order: arrivals spread evenly.
    let mean_pause = arrive_ms * common.clients.max(1) / orders.max(1);
    crowd(
        common.clients,
        move || {
            let k = |i: usize| k2[i].load(Ordering::Relaxed);
            let (paid, abandoned, late) = (k(0), k(1), k(2));
            let (sold_out, limit) = (k(3), k(4));
            format!(
                "orders {}: paid {paid}, abandoned {abandoned}, paid too late {late}; \
                 refused: sold out {sold_out}, shopper's limit {limit}",
                k(5)
            )
        },
        |i| {
            let (c, p) = (c.clone(), p.to_string());
            let (store, shop, quota_used) = (store.clone(), shop.clone(), quota_used.clone());
            let (counters, next) = (counters.clone(), next.clone());
            let mut rng = Rng::new(common.seed.wrapping_mul(7_919).wrapping_add(i));
            async move {
                loop {
                    TokioSleeper.sleep(rng.below(2 * mean_pause + 1)).await;
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= orders {
                        return Ok(());
                    }
                    counters[5].fetch_add(1, Ordering::Relaxed);
                    let u = k % users; // each shopper comes back three times
                    let order = format!("{p}:order{k}");
                    let (cash, quota) = (format!("{p}:u{u}:cash"), format!("{p}:u{u}:quota"));
                    let postings = vec![
                        posting(&store, &format!("{p}:u{u}:items"), "SKU-42", 1),
                        posting(&cash, &shop, "USD", PRICE),
                        posting(&quota, &quota_used, "QUOTA-42", 1),
                    ];
                    let body = TransferIn {
                        hold: Some(HoldIn { ttl_ms: TTL_MS }),
                        timeout_ms: Some(1_000),
                        ..transfer_in(&order, postings)
                    };
                    let t = submit(&c, &body).await?;
                    match t["state"].as_str() {
                        Some("held") => {}
                        Some("canceled") => {
                            let refused_by = t["reason"]["account"].as_str().unwrap_or("");
                            if refused_by == store {
                                counters[3].fetch_add(1, Ordering::Relaxed);
                            } else if refused_by == quota || refused_by == cash {
                                counters[4].fetch_add(1, Ordering::Relaxed);
                            } else {
                                return Err(format!("{order} was canceled: {}", t["reason"]));
                            }
                            continue;
                        }
                        other => return Err(format!("{order} answered {other:?}")),
                    }
                    // The shopper thinks it over, then pays (70%) or walks away.
                    TokioSleeper.sleep(rng.below(300)).await;
                    if !rng.chance(700_000) {
                        counters[1].fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let path = format!("/v1/transfers/{}/capture", segment(&order));
                    let a = c.post(&path, &json!({})).await?;
                    if a.code() == "hold_expired" {
                        // Too slow (a busy machine): the hold had lapsed; nothing is taken.
                        counters[2].fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let t = stopped(&c, a.ok()?).await?;
                    if t["state"] != "done" {
                        return Err(format!("capture of {order} answered {}", t["state"]));
                    }
                    counters[0].fetch_add(1, Ordering::Relaxed);
                }
            }
        },
    )
    .await?;
    println!(
        "waiting for the abandoned holds to expire ({TTL_MS} ms) and the sweeper to void them…"
    );
    wait_quiet(c).await?;
    let paid = counters[0].load(Ordering::Relaxed);
    let left = balance(c, &store).await?;
    let mut sold = 0;
    let mut over_limit = 0;
    for u in 0..users {
        let items = balance(c, &format!("{p}:u{u}:items")).await?;
        sold += items;
        if items as u64 > limit {
            over_limit += 1;
        }
    }
    let unpaid = counters[1].load(Ordering::Relaxed) + counters[2].load(Ordering::Relaxed);
    println!(
        "sold {sold} (paid orders {paid}), left in stock {left}, shoppers over the limit {over_limit}; \
         {unpaid} unpaid holds expired and gave their items back"
    );
    accounts_table(&[
        account(c, &store).await?,
        account(c, &shop).await?,
        account(c, &quota_used).await?,
    ]);
    if sold as u64 != paid || sold + left != stock as i64 || left < 0 || over_limit > 0 {
        return Err("oversold, lost stock, or a limit broken".to_string());
    }
    if balance(c, &shop).await? != paid as i64 * PRICE as i64 {
        return Err("the shop's takings do not match the paid orders".to_string());
    }
    if balance(c, &quota_used).await? != paid as i64 {
        return Err("the quota used does not match the paid orders".to_string());
    }
    Ok(())
}

/// A flash sale's parameters.
#[derive(Clone, Copy, Debug)]
struct Sale {
    stock: u64,
    users: u64,
    limit: u64,
    arrive_ms: u64,
}

async fn points_and_cash(c: &Client, p: &str) -> Result<(), String> {
    println!("points and cash: pay 3,000 POINTS + 15.00 USD in one transfer; POINTS and USD accounts on different shards");
    let cash = format!("{p}:cash:alice");
    create(c, &cash, "USD", json!(0)).await?;
    let cash_shard = account(c, &cash).await?["shard"].clone();
    // Pick a points account name that the router places on another shard than the cash.
    let mut points = String::new();
    for k in 0..64 {
        let candidate = format!("{p}:points:alice{k}");
        create(c, &candidate, "POINTS", json!(0)).await?;
        if account(c, &candidate).await?["shard"] != cash_shard {
            points = candidate;
            break;
        }
    }
    if points.is_empty() {
        return Err(
            "every points account landed on the cash shard: is there only one shard?".to_string(),
        );
    }
    let (points_bank, cash_bank) = (format!("{p}:points:issuer"), format!("{p}:cash:bank"));
    let (points_shop, cash_shop) = (format!("{p}:points:shop"), format!("{p}:cash:shop"));
    create(c, &points_bank, "POINTS", json!("unbounded")).await?;
    create(c, &cash_bank, "USD", json!("unbounded")).await?;
    create(c, &points_shop, "POINTS", json!(0)).await?;
    create(c, &cash_shop, "USD", json!(0)).await?;
    transfer(
        c,
        &format!("{p}:fund"),
        vec![
            posting(&points_bank, &points, "POINTS", 5_000),
            posting(&cash_bank, &cash, "USD", 2_000),
        ],
    )
    .await?;
    let show = || async {
        let rows = vec![
            account(c, &points).await?,
            account(c, &cash).await?,
            account(c, &points_shop).await?,
            account(c, &cash_shop).await?,
        ];
        accounts_table(&rows);
        Ok::<(), String>(())
    };
    show().await?;
    let pay = |id: String, pts: u64, cents: u64| {
        let (points, cash, points_shop, cash_shop) = (
            points.clone(),
            cash.clone(),
            points_shop.clone(),
            cash_shop.clone(),
        );
        async move {
            transfer(
                c,
                &id,
                vec![
                    posting(&points, &points_shop, "POINTS", pts),
                    posting(&cash, &cash_shop, "USD", cents),
                ],
            )
            .await
        }
    };
    let first = pay(format!("{p}:order1"), 3_000, 1_500).await?;
    println!(
        "order1 (3,000 POINTS + 15.00 USD): {}",
        text(&first["state"])
    );
    let second = pay(format!("{p}:order2"), 3_000, 100).await?;
    println!(
        "order2 (3,000 POINTS + 1.00 USD, only 2,000 POINTS left): {} — {}",
        text(&second["state"]),
        second["reason"]["message"].as_str().unwrap_or("")
    );
    show().await?;
    if first["state"] != "done" || second["state"] != "canceled" {
        return Err("expected order1 done and order2 canceled".to_string());
    }
    if balance(c, &cash).await? != 500 || balance(c, &points).await? != 2_000 {
        return Err("order2 moved one leg without the other".to_string());
    }
    let refund = c
        .post_body(
            &format!("/v1/transfers/{}/refund", segment(&format!("{p}:order1"))),
            &RefundIn {
                id: format!("{p}:order1.refund"),
                amount: None,
                amounts: None,
                metadata: String::new(),
            },
        )
        .await?
        .ok()?;
    let refund = stopped(c, refund).await?;
    println!(
        "refund of order1: {} (refund_of {})",
        text(&refund["state"]),
        text(&refund["refund_of"])
    );
    show().await?;
    if balance(c, &cash).await? != 2_000 || balance(c, &points).await? != 5_000 {
        return Err("the refund did not restore both legs".to_string());
    }
    Ok(())
}

/// Waits (at most 30 s) until no transfer is in flight.
async fn wait_quiet(c: &Client) -> Result<Value, String> {
    for _ in 0..300 {
        let report = c.get("/v1/audit").await?.ok()?;
        if report["in_flight"]
            .as_object()
            .is_some_and(|m| m.is_empty())
        {
            return Ok(report);
        }
        TokioSleeper.sleep(100).await;
    }
    Err("transfers still in flight after 30 s".to_string())
}

async fn final_audit(c: &Client) -> Result<bool, String> {
    let report = wait_quiet(c).await?;
    println!("audit:");
    audit_table(&report);
    Ok(report["clean"] == json!(true))
}
