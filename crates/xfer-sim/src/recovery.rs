//! `xfer-sim recovery`: time from start to serving after `kill -9`, on a big data directory.
//!
//! 1. Populate (once per directory): write `accounts` accounts and `finished` finished
//!    transfers straight into the checkpoint tables, exactly as checkpoints write them
//!    (running 10 million transfers through the protocol first would only take longer).
//! 2. Load: start a `crash-child` process on the directory (64 clients running transfers
//!    through the protocol), let it run `load_seconds`, kill it with SIGKILL: the log now
//!    holds a tail of operations since the last checkpoint.
//! 3. Measure: open the directory (lock, load accounts and live transfers, replay the log)
//!    and time it until the shards answer.

use crate::crash::SHARDS;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use xfer_core::{
    Account, AccountId, Amount, AssetCode, Clock, LowerBound, OwnerId, Posting, SystemClock,
    Timestamp, TransferId, TransferKind, TransferRecord, TransferSpec, TransferState,
};
use xfer_engine::Router;
use xfer_store::Store;
use xfer_store_embedded::tables::{ShardCut, Tables};

/// What was measured.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    /// Accounts loaded at open.
    pub accounts: usize,
    /// Log records replayed at open.
    pub replayed: usize,
    /// Milliseconds from calling open to the first answered read.
    pub open_ms: u64,
    /// Bytes of the log directory at open.
    pub log_bytes: u64,
    /// Bytes of the tables directory at open.
    pub table_bytes: u64,
    /// Bytes of fjall's journals among them (what fjall replays).
    pub journal_bytes: u64,
    /// The store's own account of the open.
    pub open: xfer_store_embedded::OpenReport,
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Writes the accounts and finished transfers into the tables of `dir`.
pub fn populate(dir: &Path, accounts: u64, finished: u64) -> Result<(), String> {
    let tables = Tables::open(&dir.join("tables")).map_err(|e| e.to_string())?;
    let router = Router::hash(usize::from(SHARDS));
    let usd = AssetCode::new("USD", "asset").expect("valid");
    let account = |i: u64| AccountId::new(&format!("acct-{i}")).expect("valid");
    let chunk = 200_000u64;
    let mut written = 0;
    while written < accounts {
        let mut cuts = cuts();
        for i in written..(written + chunk).min(accounts) {
            let id = account(i);
            let s = router
                .shard_of_account(&id, Some(&usd))
                .map_err(|e| format!("{e:?}"))?;
            let a = Account::open(id.clone(), usd.clone(), LowerBound::Unbounded);
            cuts[s].accounts.push((id, Some(std::sync::Arc::new(a))));
        }
        let batch = tables.batch(SHARDS, &mut cuts);
        tables.commit(batch).map_err(|e| e.to_string())?;
        written = (written + chunk).min(accounts);
        eprintln!("populate: {written}/{accounts} accounts");
    }
    let owner = OwnerId::new("populate").expect("valid");
    let mut written = 0;
    while written < finished {
        let mut cuts = cuts();
        for n in written..(written + chunk).min(finished) {
            let spec = TransferSpec {
                id: TransferId::new(&format!("old-{n}")).expect("valid"),
                postings: vec![Posting {
                    from: account(n % accounts),
                    to: account((n * 7 + 1) % accounts),
                    asset: usd.clone(),
                    amount: Amount::new(1 + n % 1000, "amount").expect("positive"),
                }]
                .into(),
                metadata: String::new(),
                kind: TransferKind::Transfer,
                refund_of: None,
                timeout_ms: 5_000,
            };
            let mut r = TransferRecord::accept(spec, Timestamp(1_700_000_000_000 + n), 5_000);
            r.state = TransferState::Done;
            r.owner = Some(owner.clone());
            r.epoch = 1;
            let s = router.shard_of_transfer(r.id());
            cuts[s].transfers.push(std::sync::Arc::new(r));
        }
        let batch = tables.batch(SHARDS, &mut cuts);
        tables.commit(batch).map_err(|e| e.to_string())?;
        written = (written + chunk).min(finished);
        eprintln!("populate: {written}/{finished} finished transfers");
    }
    Ok(())
}

fn cuts() -> Vec<ShardCut> {
    (0..SHARDS)
        .map(|shard| ShardCut {
            shard,
            ..ShardCut::default()
        })
        .collect()
}

fn checkpoint_bytes() -> u64 {
    xfer_store_embedded::EmbeddedConfig::default().checkpoint_bytes
}

/// Runs load in a child for `load_seconds`, kills it, and times the open.
pub fn measure(dir: &Path, load_seconds: u64) -> Result<RecoveryReport, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .arg("crash-child")
        .arg("--dir")
        .arg(dir)
        .args(["--cycle", "1", "--seed", "1", "--clients", "64"])
        // The store's default interval: recovery is measured as `xfer serve` runs.
        .args(["--checkpoint-bytes", &checkpoint_bytes().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    std::thread::sleep(Duration::from_secs(load_seconds));
    if let Ok(Some(status)) = child.try_wait() {
        return Err(format!("the load child exited by itself: {status}"));
    }
    child.kill().map_err(|e| e.to_string())?; // SIGKILL
    child.wait().map_err(|e| e.to_string())?;
    let mut report = RecoveryReport {
        log_bytes: dir_bytes(&dir.join("wal")),
        table_bytes: dir_bytes(&dir.join("tables")),
        journal_bytes: std::fs::read_dir(dir.join("tables"))
            .map_err(|e| e.to_string())?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".jnl"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum(),
        ..RecoveryReport::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())?;
    let clock = SystemClock;
    let started = clock.now();
    let (store, open) = crate::crash::open_embedded(dir, checkpoint_bytes())?;
    let shard = store.shards().remove(0);
    // Serving: a read answered (it waits for the log like any call).
    rt.block_on(shard.scan_due(Timestamp(0), 1))
        .map_err(|e| format!("first read: {e}"))?;
    report.open_ms = clock.now().0.saturating_sub(started.0);
    report.accounts = open.accounts;
    report.replayed = open.replayed;
    report.open = open;
    drop(shard);
    drop(store);
    Ok(report)
}
