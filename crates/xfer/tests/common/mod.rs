//! What the kill tests share: `xfer` processes started as children, the clients' load and
//! ledger of what each was told, and the checks after a restart.

#![allow(dead_code)] // each test file uses its own part

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use xfer_client::segment;
use xfer_client::Client;
use xfer_client::Response;
use xfer_core::Rng;
use xfer_engine::{Sleeper, TokioSleeper};

pub const CUSTOMERS: usize = 16;
pub const OPENING: u64 = 10_000;
pub const TASKS: u64 = 32;
pub const HOLD_TTL_MS: u64 = 1_500;

/// One `xfer serve` process.
pub struct Serve {
    child: Child,
    url: String,
    /// Kept open so that the server's stdout never breaks.
    _stdout: BufReader<ChildStdout>,
    /// Its stderr (logs), for failure messages.
    log: PathBuf,
}

impl Serve {
    /// Starts `xfer serve` on `data` (logs to `logs/serve-N.log`) and reads its listening line.
    pub fn start(data: &Path, logs: &Path, n: usize) -> Serve {
        let data = data.display().to_string();
        Serve::start_with(&["--data-dir", &data], logs, &format!("serve-{n}"))
    }

    /// Starts `xfer serve` with `args` besides the test's timing (logs to `logs/NAME.log`)
    /// and reads its listening line.
    pub fn start_with(args: &[&str], logs: &Path, name: &str) -> Serve {
        let mut all = vec!["--sweep-interval-ms", "100", "--lease-ms", "1000"];
        all.extend_from_slice(args);
        Serve::start_args(&all, logs, name)
    }

    /// Starts `xfer serve` with `args` and no timing of the test's (a test that sets its
    /// own sweep interval), as [`Serve::start_with`].
    pub fn start_args(args: &[&str], logs: &Path, name: &str) -> Serve {
        let log = logs.join(format!("{name}.log"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_xfer"))
            .arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .args(["--shutdown-grace-ms", "3000"])
            .env_remove("XFER_CONFIG")
            .env_remove("XFER_TOKENS")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("a log file"))
            .spawn()
            .expect("xfer serve starts");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .expect("reading the listening line");
        let Some(url) = line.trim().strip_prefix("xfer serve: listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "no listening line (got {line:?}); log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        };
        Serve {
            url: url.to_string(),
            child,
            _stdout: stdout,
            log,
        }
    }

    pub fn client(&self) -> Client {
        self.client_with(None)
    }

    /// A client sending `token`.
    pub fn client_with(&self, token: Option<&str>) -> Client {
        Client::new(&self.url, token.map(String::from)).expect("a client")
    }

    /// Where it listens (`http://…`).
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (at most 20 s) until `/readyz` answers 200.
    pub async fn ready(&self) {
        let c = self.client();
        for _ in 0..1_000 {
            if let Ok(a) = c.get("/readyz").await {
                if a.status == 200 {
                    return;
                }
            }
            TokioSleeper.sleep(20).await;
        }
        panic!("not ready after 20 s; log:\n{}", self.log_text());
    }

    /// SIGKILL, then reap.
    pub fn kill(mut self) {
        sigkill(&mut self.child);
    }

    /// SIGTERM, then wait (at most 15 s) for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let log = self.log.clone();
        sigterm(&mut self.child, &log)
    }
}

/// SIGKILL, then reap.
pub fn sigkill(child: &mut Child) {
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
}

/// SIGTERM, then wait (at most 15 s) for the exit status; past that, kill it and fail with
/// its log.
pub fn sigterm(child: &mut Child, log: &Path) -> std::process::ExitStatus {
    let pid = child.id().to_string();
    let sent = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(sent.success(), "kill -TERM {pid} failed");
    for _ in 0..1_500 {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!(
        "still running 15 s after SIGTERM; log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// Kills and reaps `child` if it still runs (a failing test must not leave it running).
pub fn reap(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        reap(&mut self.child);
    }
}

/// What a client was told about a transfer.
#[derive(Clone, Debug, PartialEq)]
pub enum Known {
    /// 200 with a terminal state (`done`, `canceled`): it must stay exactly that.
    Terminal(String),
    /// 200 `held`, and no capture was sent: it must expire (`canceled`).
    Held,
    /// 200 `held`, then a capture whose answer was lost: `done` or `canceled`.
    HeldCaptureUnknown,
    /// 202: durably accepted; it must exist and finish.
    Accepted,
    /// The request failed (connection lost, 5xx): absent, or present and finishing.
    Unknown,
}

/// Everything the clients were told, and every id they ever sent.
#[derive(Default)]
pub struct Ledger {
    pub known: Mutex<BTreeMap<String, Known>>,
    /// Every submission's path and body, to retry the unanswered ones.
    pub sent: Mutex<BTreeMap<String, (String, Value)>>,
    /// Answers that should never happen (4xx on well-formed requests), for the assertion.
    pub odd: Mutex<Vec<String>>,
    pub requests: AtomicU64,
    /// The longest a check's request was answered 503 before another answer, in ms
    /// ([`through_503`]).
    pub unavailable_ms: AtomicU64,
}

impl Ledger {
    pub fn set(&self, id: &str, k: Known) {
        self.known.lock().unwrap().insert(id.to_string(), k);
    }

    pub fn odd(&self, what: String) {
        self.odd.lock().unwrap().push(what);
    }

    /// What the clients were told about the transfers whose ids start with `prefix`.
    pub fn counts(&self, prefix: &str) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        let known = self.known.lock().unwrap();
        for (_, k) in known.iter().filter(|(id, _)| id.starts_with(prefix)) {
            let name = match k {
                Known::Terminal(s) if s == "done" => "done",
                Known::Terminal(_) => "canceled",
                Known::Held | Known::HeldCaptureUnknown => "held",
                Known::Accepted => "accepted",
                Known::Unknown => "unknown",
            };
            *out.entry(name).or_default() += 1;
        }
        out
    }
}

pub fn customer(i: usize) -> String {
    format!("c{i}")
}

pub fn posting(from: &str, to: &str, amount: u64) -> Value {
    json!({"from": from, "to": to, "asset": "USD", "amount": amount})
}

/// The issuer and the customers, each funded with [`OPENING`] (transfers `fund-i`).
pub async fn setup(c: &Client, ledger: &Ledger) {
    let usd = c
        .post("/v1/assets", &json!({"code": "USD", "scale": 2}))
        .await;
    assert_eq!(usd.expect("declare USD").status, 201, "declare USD");
    let mut accounts = vec![("issuer".to_string(), json!("unbounded"))];
    accounts.extend((0..CUSTOMERS).map(|i| (customer(i), json!(0))));
    for (id, bound) in accounts {
        let a = c
            .post(
                "/v1/accounts",
                &json!({"id": id, "asset": "USD", "lower_bound": bound}),
            )
            .await
            .expect("create account");
        assert_eq!(a.status, 201, "create {id}: {}", a.text);
    }
    for i in 0..CUSTOMERS {
        let id = format!("fund-{i}");
        let body = json!({"id": id, "postings": [posting("issuer", &customer(i), OPENING)]});
        let t = c.post("/v1/transfers", &body).await.expect("fund").ok();
        assert_eq!(t.expect("funded")["state"], "done");
        ledger.set(&id, Known::Terminal("done".into()));
    }
}

/// One client task: random transfers between customers until `stop` or a failed request.
pub async fn client_task(
    c: Client,
    ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
    tag: String,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let id = format!("{tag}-{n}");
        let from = rng.below(CUSTOMERS as u64) as usize;
        let to = (from + 1 + rng.below(CUSTOMERS as u64 - 1) as usize) % CUSTOMERS;
        // Balances average OPENING: the larger amounts are often refused.
        let amount = 1 + rng.below(OPENING / 2);
        let roll = rng.below(100);
        let mut body =
            json!({"id": id, "postings": [posting(&customer(from), &customer(to), amount)]});
        let hold = roll < 20;
        let wait = roll >= 45;
        if hold {
            body["hold"] = json!({"ttl_ms": HOLD_TTL_MS});
            body["timeout_ms"] = json!(1_000);
        }
        let path = if hold || wait {
            "/v1/transfers"
        } else {
            "/v1/transfers?wait=false"
        };
        ledger.requests.fetch_add(1, Ordering::Relaxed);
        // Unknown until answered: a kill can come at any instant.
        ledger.set(&id, Known::Unknown);
        ledger
            .sent
            .lock()
            .unwrap()
            .insert(id.clone(), (path.to_string(), body.clone()));
        let a = match c.post(path, &body).await {
            Ok(a) => a,
            Err(_) => return,
        };
        let state = a.body["state"].as_str().unwrap_or("").to_string();
        match (a.status, state.as_str()) {
            (200, "done" | "canceled") => ledger.set(&id, Known::Terminal(state.clone())),
            (200, "held") if hold => ledger.set(&id, Known::Held),
            // 202: accepted (or, rarely, a wait ran out of retries: still running).
            (202, _) => ledger.set(&id, Known::Accepted),
            (s, _) if s >= 500 => continue,
            _ => {
                ledger.odd(format!("{path} {id}: {} {}", a.status, a.text));
                continue;
            }
        }
        if !(hold && state == "held" && rng.chance(700_000)) {
            continue;
        }
        // Capture most holds after a short pause; the rest expire.
        TokioSleeper.sleep(rng.below(100)).await;
        ledger.set(&id, Known::HeldCaptureUnknown);
        let capture = format!("/v1/transfers/{}/capture", segment(&id));
        let a = match c.post(&capture, &json!({})).await {
            Ok(a) => a,
            Err(_) => return,
        };
        match (a.status, a.body["state"].as_str(), a.code()) {
            (200, Some("done"), _) => ledger.set(&id, Known::Terminal("done".into())),
            // Refused as expired: still held until a sweeper takes it (its lease must lapse
            // too), then canceled for its expiry — what Held promises.
            (400..=499, _, "hold_expired") => ledger.set(&id, Known::Held),
            // The capture came (or was retried through a database outage) after the hold
            // expired and a sweeper took it: canceled, or canceling (decided; 202 while the
            // sweeper finishes it).
            (200, Some("canceled"), _) if a.body["reason"]["code"] == "hold_expired" => {
                ledger.set(&id, Known::Terminal("canceled".into()))
            }
            (202, Some("canceling"), _) if a.body["reason"]["code"] == "hold_expired" => {
                ledger.set(&id, Known::Held)
            }
            // Captured (decided), finished by whoever holds it now.
            (202, Some("applied"), _) => ledger.set(&id, Known::Accepted),
            (s, _, _) if s >= 500 => {}
            _ => ledger.odd(format!("capture {id}: {} {}", a.status, a.text)),
        }
    }
}

/// Runs [`TASKS`] client tasks spread over `clients` and calls `stop` (blocking: kills,
/// waits) after `load_ms`, while they run. Answers when every task has ended.
pub async fn load<F>(clients: &[Client], ledger: &Arc<Ledger>, cycle: u64, load_ms: u64, stop: F)
where
    F: FnOnce() + Send + 'static,
{
    let halt = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        tasks.spawn(client_task(
            clients[t as usize % clients.len()].clone(),
            ledger.clone(),
            halt.clone(),
            format!("k{cycle}-{t}"),
            cycle * 1_000 + t,
        ));
    }
    TokioSleeper.sleep(load_ms).await;
    // Blocking (waitpid): off the runtime's workers, while the clients keep sending.
    tokio::task::spawn_blocking(stop).await.expect("stopping");
    halt.store(true, Ordering::Relaxed);
    while let Some(r) = tasks.join_next().await {
        r.expect("a client task");
    }
}

/// How long a check asks again through 503 answers before it fails. A server whose store
/// lost its database answers 503 ("retry") until its database client has reconnected; after
/// a whole Redis Cluster restarts that can take seconds, as redis-rs backs off up to 1 s
/// between attempts at each node.
pub const UNAVAILABLE_MAX_MS: u64 = 30_000;

/// What a client does with a 503: asks again after a pause, here for at most
/// [`UNAVAILABLE_MAX_MS`]. Answers the first other answer; the ledger keeps the longest
/// time a request was answered 503, which the tests print.
pub async fn through_503<F, Fut>(ledger: &Ledger, what: &str, send: F) -> Response
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Response, String>>,
{
    let watch = xfer_server::metrics::Stopwatch::start();
    loop {
        let a = send().await.unwrap_or_else(|e| panic!("{what}: {e}"));
        if a.status != 503 {
            return a;
        }
        let waited = (watch.seconds() * 1_000.0) as u64;
        ledger.unavailable_ms.fetch_max(waited, Ordering::Relaxed);
        assert!(
            waited < UNAVAILABLE_MAX_MS,
            "{what}: still 503 after {waited} ms: {}",
            a.text
        );
        TokioSleeper.sleep(100).await;
    }
}

/// How long the checks since the last call were answered 503, as a clause of a cycle's
/// summary ("" when never), and starts counting again.
pub fn unavailable(ledger: &Ledger) -> String {
    match ledger.unavailable_ms.swap(0, Ordering::Relaxed) {
        0 => String::new(),
        ms => format!(" (answered 503 for up to {ms} ms first)"),
    }
}

pub async fn get_transfer(c: &Client, ledger: &Ledger, id: &str) -> Option<Value> {
    let path = format!("/v1/transfers/{}", segment(id));
    let a = through_503(ledger, &format!("GET {id}"), || c.get(&path)).await;
    match a.status {
        200 => Some(a.body),
        404 => None,
        s => panic!("GET {id}: {s} {}", a.text),
    }
}

/// Every transfer in `known`, read by 16 concurrent readers: `None` when absent.
pub async fn get_all(
    c: &Client,
    ledger: &Arc<Ledger>,
    known: &BTreeMap<String, Known>,
) -> BTreeMap<String, Option<Value>> {
    let ids: Vec<String> = known.keys().cloned().collect();
    let mut readers = tokio::task::JoinSet::new();
    for chunk in ids.chunks(ids.len().div_ceil(16).max(1)) {
        let (c, ledger, chunk) = (c.clone(), ledger.clone(), chunk.to_vec());
        readers.spawn(async move {
            let mut out = Vec::with_capacity(chunk.len());
            for id in chunk {
                let t = get_transfer(&c, &ledger, &id).await;
                out.push((id, t));
            }
            out
        });
    }
    let mut all = BTreeMap::new();
    while let Some(r) = readers.join_next().await {
        all.extend(r.expect("a reader"));
    }
    all
}

/// Right after a restart: every acknowledged outcome is there. Answers how many transfers
/// were found unfinished (left to the sweeper, or holds).
pub async fn check_acknowledged(c: &Client, ledger: &Arc<Ledger>) -> usize {
    let known = ledger.known.lock().unwrap().clone();
    let found = get_all(c, ledger, &known).await;
    let mut unfinished = 0;
    for (id, k) in &known {
        let t = &found[id];
        let state = t.as_ref().and_then(|t| t["state"].as_str()).unwrap_or("");
        if t.is_some() && state != "done" && state != "canceled" {
            unfinished += 1;
        }
        match k {
            Known::Terminal(s) => assert_eq!(state, s, "{id} was answered {s}: now {t:?}"),
            Known::Held | Known::HeldCaptureUnknown | Known::Accepted => {
                assert!(t.is_some(), "{id} was answered {k:?} and is gone")
            }
            Known::Unknown => {}
        }
    }
    unfinished
}

/// What a client does after losing an answer: it sends the same request again (same id,
/// same body) to the restarted server, and must get an answer consistent with whatever
/// happened before. Answers how many were retried.
pub async fn retry_unknown(c: &Client, ledger: &Ledger) -> usize {
    let unknown: Vec<String> = ledger
        .known
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, k)| **k == Known::Unknown)
        .map(|(id, _)| id.clone())
        .collect();
    for id in &unknown {
        let (path, body) = ledger.sent.lock().unwrap()[id].clone();
        let a = through_503(ledger, &format!("retry of {id}"), || c.post(&path, &body)).await;
        let state = a.body["state"].as_str().unwrap_or("").to_string();
        let k = match (a.status, state.as_str()) {
            (200, "done" | "canceled") => Known::Terminal(state),
            (200, "held") => Known::Held,
            (202, _) => Known::Accepted,
            _ => panic!("retry of {id}: {} {}", a.status, a.text),
        };
        ledger.set(id, k);
    }
    unknown.len()
}

/// Waits (at most 30 s) until nothing is in flight; answers the audit report.
pub async fn quiet(c: &Client, ledger: &Ledger, logs: &Path) -> Value {
    for _ in 0..300 {
        let a = through_503(ledger, "GET /v1/audit", || c.get("/v1/audit")).await;
        assert_eq!(a.status, 200, "audit: {}", a.text);
        if a.body["in_flight"]
            .as_object()
            .is_some_and(|m| m.is_empty())
        {
            return a.body;
        }
        TokioSleeper.sleep(100).await;
    }
    let stuck = c.get("/v1/admin/stuck").await.map(|a| a.text);
    panic!(
        "transfers still in flight after 30 s: {stuck:?}; warnings:\n{}",
        log_warnings(logs).join("\n")
    );
}

/// Once quiet: every transfer is terminal and agrees with what its client was told, the
/// audit is clean, and the done transfers replay to every customer's balance.
pub async fn check_settled(c: &Client, ledger: &Arc<Ledger>, report: &Value) {
    assert_eq!(report["clean"], true, "audit not clean: {report}");
    let known = ledger.known.lock().unwrap().clone();
    let found = get_all(c, ledger, &known).await;
    let mut net: BTreeMap<String, i64> = BTreeMap::new();
    for (id, k) in &known {
        let Some(t) = &found[id] else {
            assert_eq!(k, &Known::Unknown, "{id} was answered {k:?} and is gone");
            continue;
        };
        let state = t["state"].as_str().unwrap_or("");
        let fine = match k {
            Known::Terminal(s) => state == s,
            Known::Held => state == "canceled" && t["reason"]["code"] == "hold_expired",
            Known::HeldCaptureUnknown | Known::Accepted | Known::Unknown => {
                state == "done" || state == "canceled"
            }
        };
        assert!(fine, "{id} was answered {k:?}; now {t}");
        if state == "done" {
            for p in t["postings"].as_array().expect("postings") {
                let amount = p["amount"].as_i64().expect("an amount");
                *net.entry(p["from"].as_str().unwrap().into()).or_default() -= amount;
                *net.entry(p["to"].as_str().unwrap().into()).or_default() += amount;
            }
        }
    }
    let mut total = 0;
    for i in 0..CUSTOMERS {
        let id = customer(i);
        let a = c
            .get(&format!("/v1/accounts/{id}"))
            .await
            .expect("GET account")
            .ok()
            .expect("the account");
        let balance = a["balance"].as_i64().expect("a balance");
        assert_eq!(
            balance,
            net.get(&id).copied().unwrap_or(0),
            "{id}: the balance is not the replay of its done transfers: {a}"
        );
        assert_eq!(
            (a["reserved"].as_i64(), a["incoming"].as_i64()),
            (Some(0), Some(0)),
            "{a}"
        );
        total += balance;
    }
    assert_eq!(
        total,
        (CUSTOMERS as u64 * OPENING) as i64,
        "customer money is conserved"
    );
}

pub fn summary(counts: &BTreeMap<&'static str, usize>) -> String {
    counts
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The servers' log lines at WARN or ERROR (ANSI colours stripped).
pub fn log_warnings(logs: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(logs)
        .expect("the log dir")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for line in text.lines() {
            let plain = strip_ansi(line);
            if plain.contains(" WARN ") || plain.contains(" ERROR ") {
                let name = f.file_name().unwrap().to_string_lossy().into_owned();
                out.push(format!("{name}: {plain}"));
            }
        }
    }
    out
}

pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(ch);
        }
    }
    out
}

pub fn odd_answers(ledger: &Ledger) {
    let odd = ledger.odd.lock().unwrap();
    assert!(odd.is_empty(), "unexpected answers: {odd:#?}");
}

/// The test PostgreSQL server (`XFER_TEST_POSTGRES_BASE`, by default the local server
/// `scripts/services` starts), without a database name.
pub fn postgres_base() -> String {
    std::env::var("XFER_TEST_POSTGRES_BASE")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

/// The nodes of the test Redis Cluster (`XFER_TEST_REDIS_CLUSTER`, comma-separated; by
/// default the three masters `scripts/services` starts on 7001-7003).
pub fn redis_cluster_nodes() -> Vec<String> {
    std::env::var("XFER_TEST_REDIS_CLUSTER")
        .unwrap_or_else(|_| {
            "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003".into()
        })
        .split(',')
        .map(str::to_string)
        .collect()
}

/// Runs one statement on the test server's maintenance database.
pub async fn postgres_admin(sql: &str) {
    let url = format!("{}/postgres", postgres_base());
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("{url}: {e} (run scripts/services to start PostgreSQL)"));
    tokio::spawn(conn);
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The test MySQL/MariaDB server (`XFER_TEST_MYSQL_URL`, by default the local MariaDB
/// `scripts/services` starts), without a database name.
pub fn mongodb_url() -> String {
    std::env::var("XFER_TEST_MONGODB_URL").unwrap_or_else(|_| "mongodb://127.0.0.1:27017".into())
}

/// The MongoDB shard `database` on the test server, opened again (to read it back or drop
/// it).
pub async fn mongodb_shard(database: &str) -> xfer_store_mongo::MongoStore {
    let cfg = xfer_store_mongo::MongoConfig::new(mongodb_url(), database);
    xfer_store_mongo::MongoStore::open(&cfg, std::sync::Arc::new(xfer_core::SystemClock))
        .await
        .unwrap_or_else(|e| panic!("{e} (run scripts/services)"))
}

pub fn mysql_url() -> String {
    std::env::var("XFER_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
}

/// A connection to the test MySQL server, in `database` when given.
pub async fn mysql_connect(database: Option<&str>) -> mysql_async::Conn {
    let url = mysql_url();
    let opts = mysql_async::Opts::from_url(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
    let opts = mysql_async::OptsBuilder::from_opts(opts).db_name(database);
    mysql_async::Conn::new(opts)
        .await
        .unwrap_or_else(|e| panic!("{url}: {e} (run scripts/services to start MariaDB)"))
}

/// Runs one statement on the test MySQL server.
pub async fn mysql_admin(sql: &str) {
    use mysql_async::prelude::Queryable;
    let mut conn = mysql_connect(None).await;
    conn.query_drop(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let _ = conn.disconnect().await;
}

/// Every message of the JetStream stream `stream` on the server at `url`, in order: its
/// `Nats-Msg-Id`, its subject and its JSON body.
pub async fn jetstream_messages(url: &str, stream: &str) -> Vec<(String, String, Value)> {
    let client = async_nats::connect(url).await.expect("nats");
    let js = async_nats::jetstream::new(client);
    let mut stream = js.get_stream(stream).await.expect("the stream");
    let n = stream
        .info()
        .await
        .expect("stream info")
        .state
        .last_sequence;
    let mut out = Vec::new();
    for seq in 1..=n {
        let m = stream.get_raw_message(seq).await.expect("a message");
        let id = m
            .headers
            .get("Nats-Msg-Id")
            .map(|v| v.to_string())
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&m.payload).expect("JSON");
        out.push((id, m.subject.to_string(), body));
    }
    out
}

/// Every event of the change feed, by the API (`GET /v1/events`, page after page).
pub async fn all_events(client: &Client) -> Vec<Value> {
    let mut all = Vec::new();
    let mut path = "/v1/events?limit=1000".to_string();
    loop {
        let page = client.get(&path).await.expect("the feed");
        assert_eq!(page.status, 200, "{}", page.text);
        let events = page.body["events"].as_array().expect("events").clone();
        if events.is_empty() {
            return all;
        }
        all.extend(events);
        path = format!(
            "/v1/events?limit=1000&after={}",
            page.body["next"].as_str().unwrap()
        );
    }
}
