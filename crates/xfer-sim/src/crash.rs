//! `xfer-sim crash`: real processes, a real data directory, `kill -9`.
//!
//! The parent starts a child process that opens an embedded store and runs concurrent
//! clients (transfers of one and two postings, overdrafts, holds captured or voided,
//! duplicate submissions) through the tokio executor, with a sweeper finishing what earlier
//! children left behind. The child prints a line for every outcome it acknowledges to a
//! client. At a random moment the parent kills it with SIGKILL, then starts the next child
//! on the same directory. After the last cycle the parent opens the directory itself,
//! sweeps until every transfer is terminal, and checks the guarantees of SPEC §3 on the
//! records, plus: every outcome acknowledged is the transfer's outcome.

use crate::checker::Checker;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use xfer_core::{
    Account, AccountId, AccountStatus, Amount, AssetCode, Clock, LowerBound, OwnerId, Posting, Rng,
    SystemClock, TransferId, TransferKind, TransferRecord, TransferSpec,
};
use xfer_engine::{
    Cluster, Config, Executor, Outcome, Retry, RetryPolicy, Router, Sleeper, SweepConfig, Sweeper,
    TokioSleeper,
};
use xfer_store::{AccountOp, Coalesce, MemoryShard, Op, Reply, Store};
use xfer_store_embedded::{Embedded, EmbeddedConfig, OpenReport};

/// Shards of the crash test's store.
pub const SHARDS: u16 = 4;
const USERS: u64 = 16;
const FUNDING: u64 = 1_000_000;
const HOLD_TTL_MS: u64 = 3_000;

fn protocol() -> Config {
    // Short leases so that what a killed child held is taken over within a second.
    Config {
        lease_ms: 1_000,
        skew_ms: 200,
        claim_grace_ms: 1_000,
    }
}

fn usd() -> AssetCode {
    AssetCode::new("USD", "asset").expect("valid")
}
fn user(i: u64) -> AccountId {
    AccountId::new(&format!("u{i}")).expect("valid")
}
fn issuer() -> AccountId {
    AccountId::new("issuer").expect("valid")
}

/// A transfer's postings as one word: `from>to:amount;...` (what an ack line carries, so
/// the parent can check the record holds the body the client sent).
pub fn signature(spec: &TransferSpec) -> String {
    let parts: Vec<String> = spec
        .postings
        .iter()
        .map(|p| format!("{}>{}:{}", p.from, p.to, p.amount))
        .collect();
    parts.join(";")
}

/// The crash test's checkpoint interval in bytes of log, smaller than the store's, so that
/// every cycle checkpoints and kills land around checkpoints, rather than every few cycles.
/// `xfer-sim recovery` uses the store's default.
pub const CRASH_CHECKPOINT_BYTES: u64 = 8 << 20;

/// Opens the crash test's data directory ([`SHARDS`] shards, the wall clock, a checkpoint
/// every `checkpoint_bytes` of log).
pub fn open_embedded(dir: &Path, checkpoint_bytes: u64) -> Result<(Embedded, OpenReport), String> {
    let cfg = EmbeddedConfig {
        shards: SHARDS,
        checkpoint_bytes,
        ..EmbeddedConfig::default()
    };
    Embedded::open(dir, cfg, Arc::new(SystemClock)).map_err(|e| format!("open: {e}"))
}

fn open_store(dir: &Path, checkpoint_bytes: u64) -> Result<(Embedded, Arc<Cluster>), String> {
    let (store, _) = open_embedded(dir, checkpoint_bytes)?;
    // Concurrent clients' calls merged per shard, as a service runs them.
    let shards: Vec<Arc<dyn Store>> = store
        .shards()
        .into_iter()
        .map(|s| Arc::new(Coalesce::new(s, 1)) as Arc<dyn Store>)
        .collect();
    let cluster = Arc::new(Cluster::new(shards, Router::hash(usize::from(SHARDS))));
    Ok((store, cluster))
}

fn executor(cluster: Arc<Cluster>, owner: &str) -> Executor {
    let retry = Retry::new(RetryPolicy::default(), Arc::new(TokioSleeper));
    Executor::new(
        cluster,
        OwnerId::new(owner).expect("valid owner"),
        protocol(),
        Arc::new(SystemClock),
        retry,
    )
}

/// The child: runs clients until killed. Prints `ack <id> <state> <signature>` for every
/// outcome it tells a client, `held <id>` for holds, `ready` once set up.
pub fn child(
    dir: &Path,
    cycle: u64,
    seed: u64,
    clients: usize,
    checkpoint_bytes: u64,
) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let (_store, cluster) = open_store(dir, checkpoint_bytes)?;
        let out = Arc::new(Mutex::new(std::io::stdout()));
        let exec = Arc::new(executor(cluster.clone(), &format!("child-{cycle}")));
        set_up(&exec, &out).await?;
        say(&out, "ready".into());
        let sweeper = Sweeper::new(
            executor(cluster, &format!("sweeper-{cycle}")),
            SweepConfig {
                interval_ms: 200,
                ..SweepConfig::default()
            },
        );
        let sweeping = tokio::spawn(async move { sweeper.run(std::future::pending()).await });
        let mut tasks = Vec::new();
        for w in 0..clients {
            let (exec, out) = (exec.clone(), out.clone());
            let rng = Rng::new(seed ^ (cycle << 32) ^ (w as u64).wrapping_mul(0x9e37));
            tasks.push(tokio::spawn(client(exec, out, rng, cycle, w)));
        }
        for t in tasks {
            t.await.map_err(|e| e.to_string())?;
        }
        sweeping.abort();
        Ok(())
    })
}

fn say(out: &Mutex<std::io::Stdout>, line: String) {
    let mut o = out.lock().expect("stdout lock");
    // The parent reads lines as they come: a line is an acknowledgement only once whole.
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

async fn set_up(exec: &Executor, out: &Mutex<std::io::Stdout>) -> Result<(), String> {
    let mut accounts = vec![(issuer(), LowerBound::Unbounded)];
    accounts.extend((0..USERS).map(|i| (user(i), LowerBound::Bounded(0))));
    for (id, lower_bound) in accounts {
        let op = Op::Account(
            id.clone(),
            AccountOp::Create {
                asset: usd(),
                lower_bound,
            },
        );
        match exec.execute_op(op).await {
            Ok(Reply::Account(_)) => {}
            other => return Err(format!("create {id}: {other:?}")),
        }
    }
    for i in 0..USERS {
        let spec = TransferSpec {
            id: TransferId::new(&format!("fund-{i}")).expect("valid"),
            postings: vec![posting(issuer(), user(i), FUNDING)].into(),
            metadata: String::new(),
            kind: TransferKind::Transfer,
            refund_of: None,
            timeout_ms: 5_000,
        };
        if let Ok(Outcome::Finished(r)) = exec.submit(spec.clone()).await {
            say(out, ack_line(&r, &spec));
        }
    }
    Ok(())
}

fn posting(from: AccountId, to: AccountId, amount: u64) -> Posting {
    Posting {
        from,
        to,
        asset: usd(),
        amount: Amount::new(amount, "amount").expect("positive"),
    }
}

fn ack_line(r: &TransferRecord, spec: &TransferSpec) -> String {
    format!("ack {} {} {}", r.spec.id, r.state, signature(spec))
}

async fn client(
    exec: Arc<Executor>,
    out: Arc<Mutex<std::io::Stdout>>,
    mut rng: Rng,
    cycle: u64,
    w: usize,
) {
    let mut last: Option<TransferSpec> = None;
    for n in 0.. {
        let spec = match &last {
            Some(prev) if rng.below(10) == 0 => prev.clone(),
            _ => random_spec(&mut rng, format!("c{cycle}-w{w}-{n}")),
        };
        let outcome = exec.submit(spec.clone()).await;
        let record = match outcome {
            Ok(Outcome::Finished(r)) => Some(r),
            Ok(Outcome::Held(r)) => {
                say(&out, format!("held {}", r.spec.id));
                let id = r.spec.id.clone();
                let next = if rng.below(2) == 0 {
                    exec.capture(id).await
                } else {
                    exec.void(id).await
                };
                match next {
                    Ok(Outcome::Finished(r)) => Some(r),
                    _ => None,
                }
            }
            Ok(Outcome::Violation(v)) => {
                say(&out, format!("violation {} {v}", spec.id));
                None
            }
            _ => None,
        };
        if let Some(r) = record {
            say(&out, ack_line(&r, &spec));
        }
        last = Some(spec);
    }
}

fn random_spec(rng: &mut Rng, id: String) -> TransferSpec {
    let legs = 1 + rng.below(2);
    let mut postings = Vec::new();
    for _ in 0..legs {
        let from = rng.below(USERS);
        let to = (from + 1 + rng.below(USERS - 1)) % USERS;
        postings.push(posting(user(from), user(to), 1 + rng.below(FUNDING / 3)));
    }
    let kind = if rng.below(8) == 0 {
        TransferKind::Hold {
            ttl_ms: HOLD_TTL_MS,
        }
    } else {
        TransferKind::Transfer
    };
    TransferSpec {
        id: TransferId::new(&id).expect("valid"),
        postings: postings.into(),
        metadata: String::new(),
        kind,
        refund_of: None,
        timeout_ms: 2_000,
    }
}

/// What the parent saw and judged.
#[derive(Debug, Default)]
pub struct CrashReport {
    /// Children killed.
    pub cycles: u64,
    /// Outcomes acknowledged to clients (distinct transfers).
    pub acknowledged: usize,
    /// Transfers on record at the end.
    pub transfers: usize,
    /// Of which done.
    pub done: usize,
    /// Of which canceled.
    pub canceled: usize,
    /// Milliseconds from open to serving at the final recovery.
    pub recovery_ms: u64,
    /// Log records replayed at the final recovery.
    pub replayed: usize,
    /// Every broken guarantee.
    pub violations: Vec<String>,
}

/// The parent: `cycles` children killed at random moments, then recovery and the checks.
pub fn parent(dir: &Path, cycles: u64, seed: u64, clients: usize) -> Result<CrashReport, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut rng = Rng::new(seed);
    let mut report = CrashReport::default();
    let mut acked: BTreeMap<String, (String, String)> = BTreeMap::new();
    for cycle in 1..=cycles {
        let mut child = Command::new(&exe)
            .arg("crash-child")
            .arg("--dir")
            .arg(dir)
            .args(["--cycle", &cycle.to_string()])
            .args(["--seed", &seed.to_string()])
            .args(["--clients", &clients.to_string()])
            .args(["--checkpoint-bytes", &CRASH_CHECKPOINT_BYTES.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawn child: {e}"))?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Wait for the child to be serving, then let it run for a random while.
        let ready = rx.recv_timeout(Duration::from_secs(60));
        let mut lines = Vec::new();
        match ready {
            Ok(l) if l == "ready" => {}
            Ok(l) => lines.push(l),
            Err(_) => {
                let _ = child.kill();
                return Err(format!("cycle {cycle}: the child never became ready"));
            }
        }
        std::thread::sleep(Duration::from_millis(100 + rng.below(1_400)));
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "cycle {cycle}: the child exited by itself: {status}"
            ));
        }
        child.kill().map_err(|e| format!("kill: {e}"))?; // SIGKILL on Unix
        child.wait().map_err(|e| e.to_string())?;
        reader.join().map_err(|_| "reader panicked".to_string())?;
        lines.extend(rx.try_iter());
        for line in lines {
            read_line(&line, &mut acked, &mut report.violations);
        }
        report.cycles = cycle;
        eprintln!(
            "cycle {cycle}/{cycles}: killed; {} outcomes acknowledged so far",
            acked.len()
        );
    }
    report.acknowledged = acked.len();
    finish_and_check(dir, &acked, &mut report)?;
    Ok(report)
}

/// Reads one line the child printed. The child writes each line with one `write` of far
/// less than `PIPE_BUF` bytes, which a pipe delivers whole or not at all, so a kill never
/// leaves half a line; anything that is not an ack or a violation is ignored.
fn read_line(
    line: &str,
    acked: &mut BTreeMap<String, (String, String)>,
    violations: &mut Vec<String>,
) {
    let words: Vec<&str> = line.split(' ').collect();
    match words.as_slice() {
        ["ack", id, state, sig] => {
            let now = (state.to_string(), sig.to_string());
            if let Some(before) = acked.get(*id) {
                if *before != now {
                    violations.push(format!(
                        "idempotency: {id} acknowledged as {before:?} and later as {now:?}"
                    ));
                }
            }
            acked.insert(id.to_string(), now);
        }
        ["violation", ..] => violations.push(format!("atomicity: child saw {line}")),
        _ => {}
    }
}

fn finish_and_check(
    dir: &Path,
    acked: &BTreeMap<String, (String, String)>,
    report: &mut CrashReport,
) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let clock = SystemClock;
        let started = clock.now();
        let (store, open) = open_embedded(dir, CRASH_CHECKPOINT_BYTES)?;
        report.recovery_ms = clock.now().0.saturating_sub(started.0);
        report.replayed = open.replayed;
        let shards = store.shards();
        let dyn_shards: Vec<Arc<dyn Store>> =
            shards.iter().map(|s| s.clone() as Arc<dyn Store>).collect();
        let router = Router::hash(usize::from(SHARDS));
        let cluster = Arc::new(Cluster::new(dyn_shards, router.clone()));
        let sweeper = Sweeper::new(executor(cluster, "finisher"), SweepConfig::default());
        // Leases of the last child lapse within a second, holds expire within their TTL.
        let mut state = read_all(&shards).await?;
        for _ in 0..200 {
            if state
                .iter()
                .all(|s| s.transfers().all(|r| r.state.is_terminal()))
            {
                break;
            }
            sweeper.pass().await;
            TokioSleeper.sleep(100).await;
            state = read_all(&shards).await?;
        }
        let mut feeds = Vec::with_capacity(shards.len());
        for s in &shards {
            let page = s
                .events(xfer_store::FeedPosition::START, usize::MAX)
                .await
                .map_err(|e| format!("events: {e}"))?;
            feeds.push(page.events);
        }
        check(&state, feeds, &router, acked, report);
        drop(sweeper);
        drop(shards);
        store.close().map_err(|e| format!("close: {e}"))
    })
}

async fn read_all(
    shards: &[Arc<xfer_store_embedded::EmbeddedShard>],
) -> Result<Vec<MemoryShard>, String> {
    let mut out = Vec::new();
    for s in shards {
        let mut mem = MemoryShard::new();
        mem.restore_accounts(
            s.accounts(None, usize::MAX)
                .await
                .map_err(|e| e.to_string())?,
        );
        for r in s
            .transfers(None, usize::MAX)
            .await
            .map_err(|e| e.to_string())?
        {
            mem.restore_transfer(r);
        }
        out.push(mem);
    }
    Ok(out)
}

fn check(
    shards: &[MemoryShard],
    feeds: Vec<Vec<xfer_store::Event>>,
    router: &Router,
    acked: &BTreeMap<String, (String, String)>,
    report: &mut CrashReport,
) {
    let mut checker = Checker::default();
    let refs: Vec<&MemoryShard> = shards.iter().collect();
    checker.at_rest_state(&refs, router, 0);
    checker.feed(shards.iter().flat_map(|s| s.transfers()), feeds, 0);
    let accounts: Vec<&Account> = shards.iter().flat_map(|s| s.accounts()).collect();
    for a in &accounts {
        checker.after_account_write(Some(a), 0);
        let open = a.open_intents();
        if a.reserved != 0 || a.incoming != 0 || open != 0 || a.status == AccountStatus::Unopened {
            checker.record(
                "no_leaks",
                0,
                format!(
                    "{}: reserved {} incoming {} open intents {open} {:?}",
                    a.id, a.reserved, a.incoming, a.status
                ),
            );
        }
    }
    let transfers: BTreeMap<&str, &TransferRecord> = shards
        .iter()
        .flat_map(|s| s.transfers())
        .map(|r| (r.spec.id.as_str(), r))
        .collect();
    report.transfers = transfers.len();
    report.done = transfers
        .values()
        .filter(|r| r.state == xfer_core::TransferState::Done)
        .count();
    report.canceled = transfers
        .values()
        .filter(|r| r.state == xfer_core::TransferState::Canceled)
        .count();
    for (id, (state, sig)) in acked {
        match transfers.get(id.as_str()) {
            None => checker.record(
                "acknowledged",
                0,
                format!("{id} was acknowledged {state} but has no record"),
            ),
            Some(r) if r.state.as_str() != state || signature(&r.spec) != *sig => checker.record(
                "acknowledged",
                0,
                format!(
                    "{id} was acknowledged {state} {sig}, the record says {} {}",
                    r.state,
                    signature(&r.spec)
                ),
            ),
            Some(_) => {}
        }
    }
    report.violations.extend(
        checker
            .violations
            .into_iter()
            .map(|v| format!("{}: {}", v.guarantee, v.detail)),
    );
}

/// A fresh directory for a run (removed by the caller unless kept).
pub fn scratch_dir(seed: u64) -> PathBuf {
    std::env::temp_dir().join(format!("xfer-crash-{}-{seed}", std::process::id()))
}
