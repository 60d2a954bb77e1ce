//! The embedded store under power loss. Random single-record ops (refusals included: every
//! op is a deterministic function of the record and the store clock) run one at a time
//! against a store whose log is on a simulated disk; the power fails at the N-th sync, for
//! every N, with the unsynced bytes dropped, partly kept or garbled; checkpoints happen
//! along the way. After recovery the store must hold exactly the state of some prefix of
//! the ops that includes every acknowledged one: nothing invented, nothing acknowledged
//! lost.

use std::sync::Arc;
use xfer_core::{
    Account, AccountId, Amount, AssetCode, LowerBound, ManualClock, OwnerId, Posting, Rng,
    Timestamp, TransferId, TransferKind, TransferRecord, TransferSpec, TransferState,
};
use xfer_store::{same_log, AccountOp, MemoryShard, Op, SharedLog, Store, TransferOp};
use xfer_store_embedded::fs::Torn;
use xfer_store_embedded::{Embedded, EmbeddedConfig, LogConfig, SimFs};

const NOW: Timestamp = Timestamp(1_000_000);
const OPS: usize = 80;

fn account(i: u64) -> AccountId {
    AccountId::new(&format!("a{}", i % 4)).unwrap()
}
fn transfer(i: u64) -> TransferId {
    TransferId::new(&format!("t{}", i % 12)).unwrap()
}
fn usd() -> AssetCode {
    AssetCode::new("USD", "asset").unwrap()
}

fn record(id: TransferId) -> TransferRecord {
    let spec = TransferSpec {
        id,
        postings: vec![Posting {
            from: AccountId::new("a0").unwrap(),
            to: AccountId::new("a1").unwrap(),
            asset: usd(),
            amount: Amount::new(5, "amount").unwrap(),
        }]
        .into(),
        metadata: String::new(),
        kind: TransferKind::Transfer,
        refund_of: None,
        timeout_ms: 10_000,
    };
    TransferRecord::accept(spec, NOW, 100)
}

fn ops(seed: u64) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for k in 0..4 {
        let lower_bound = if k == 0 {
            LowerBound::Unbounded
        } else {
            LowerBound::Bounded(0)
        };
        out.push(Op::Account(
            account(k),
            AccountOp::Create {
                asset: usd(),
                lower_bound,
            },
        ));
    }
    while out.len() < OPS {
        let (a, t) = (account(rng.below(4)), transfer(rng.below(12)));
        let far = Timestamp(NOW.0 + 1_000_000);
        let op = match rng.below(9) {
            0 | 1 => Op::Account(
                a,
                AccountOp::Prepare {
                    transfer: t,
                    asset: usd(),
                    debit: rng.below(3) * 7,
                    credit: rng.below(3) * 5,
                    deadline: far,
                    horizon: Timestamp(NOW.0 - 1),
                },
            ),
            2 => Op::Account(
                a,
                AccountOp::Post {
                    transfer: t,
                    asset: usd(),
                },
            ),
            3 => Op::Account(
                a,
                AccountOp::Release {
                    transfer: t,
                    asset: usd(),
                    horizon: Timestamp(NOW.0 - 1),
                },
            ),
            4 => Op::Transfer(t.clone(), TransferOp::Insert(Arc::new(record(t)))),
            5 => Op::Transfer(
                t,
                TransferOp::Claim {
                    owner: OwnerId::new("o").unwrap(),
                    now: NOW,
                    lease_until: far,
                },
            ),
            6 => Op::Transfer(
                t,
                TransferOp::Decide {
                    epoch: rng.below(3),
                    to: if rng.below(2) == 0 {
                        TransferState::Applied
                    } else {
                        TransferState::Canceling
                    },
                    reason: None,
                    now: NOW,
                },
            ),
            7 => Op::Transfer(t, TransferOp::Finish { now: NOW }),
            _ => Op::Account(a, AccountOp::Get),
        };
        out.push(op);
    }
    out
}

type State = (Vec<Account>, Vec<TransferRecord>);

/// The state after each prefix of `ops`, as the Memory store's rules give it.
fn reference(ops: &[Op]) -> Vec<State> {
    let mut shard = MemoryShard::new();
    let mut states = vec![snapshot(&shard)];
    for op in ops {
        shard.apply(op, NOW);
        states.push(snapshot(&shard));
    }
    states
}

fn snapshot(shard: &MemoryShard) -> State {
    (
        shard
            .accounts()
            .filter(|a| a.status != xfer_core::AccountStatus::Unopened)
            .cloned()
            .collect(),
        shard.transfers().cloned().collect(),
    )
}

fn config() -> EmbeddedConfig {
    EmbeddedConfig {
        shards: 1,
        log: LogConfig { segment_bytes: 700 },
        background_checkpoints: false,
        ..EmbeddedConfig::default()
    }
}

/// Runs `ops` until the first failure; answers how many were acknowledged.
async fn run(disk: &SimFs, tables: &std::path::Path, ops: &[Op]) -> usize {
    let clock = Arc::new(ManualClock::at(NOW));
    let Ok((store, _)) = Embedded::open_with(disk.clone(), tables, config(), clock) else {
        return 0;
    };
    let shard = store.shards().remove(0);
    let mut acked = 0;
    for (i, op) in ops.iter().enumerate() {
        if shard.execute(vec![op.clone()]).await.is_err() {
            break;
        }
        acked = i + 1;
        if i % 17 == 16 && store.checkpoint().is_err() {
            break;
        }
    }
    acked
}

async fn recovered(disk: SimFs, tables: &std::path::Path) -> State {
    let clock = Arc::new(ManualClock::at(NOW));
    let (store, _) = Embedded::open_with(disk, tables, config(), clock).expect("recovers");
    let shard = store.shards().remove(0);
    let accounts = shard.accounts(None, usize::MAX).await.unwrap();
    let transfers = shard.transfers(None, usize::MAX).await.unwrap();
    (accounts, transfers)
}

#[tokio::test]
async fn power_loss_at_every_sync_recovers_a_prefix_with_everything_acknowledged() {
    for seed in [7] {
        let ops = ops(seed);
        let states = reference(&ops);
        let total_syncs = {
            let disk = SimFs::new();
            let tables = tempfile::tempdir().unwrap();
            assert_eq!(run(&disk, tables.path(), &ops).await, ops.len());
            disk.syncs()
        };
        assert!(total_syncs as usize > OPS / 2, "{total_syncs} syncs");
        for fail_at in 1..=total_syncs + 1 {
            for torn in [
                Torn::DropUnsynced,
                Torn::KeepPrefix(9),
                Torn::KeepPrefix(usize::MAX),
                Torn::KeepGarbled(usize::MAX),
            ] {
                let disk = SimFs::new();
                let tables = tempfile::tempdir().unwrap();
                disk.fail_from_sync(fail_at);
                let acked = run(&disk, tables.path(), &ops).await;
                let got = recovered(disk.after_power_loss(torn), tables.path()).await;
                let prefix = (acked..=ops.len()).find(|&k| states[k] == got);
                assert!(
                    prefix.is_some(),
                    "seed {seed}, power lost at sync {fail_at} ({torn:?}), {acked} acknowledged: \
                     the recovered state is no prefix that keeps them"
                );
            }
        }
    }
}

/// Two shards of one log (see [`shard_of`]).
fn config_two() -> EmbeddedConfig {
    EmbeddedConfig {
        shards: 2,
        ..config()
    }
}

/// The shard of an op's record when two share the log: `a{k}` and `t{k}` on shard `k % 2`
/// (so each account's ops reach the shard that created it).
fn shard_of(op: &Op) -> usize {
    let id = match op {
        Op::Account(a, _) => a.as_str(),
        Op::Transfer(t, _) => t.as_str(),
    };
    id[1..].parse::<usize>().expect("a{k} or t{k}") % 2
}

/// Both shards' states after each prefix of `ops` (each on [`shard_of`] its record).
fn reference_two(ops: &[Op]) -> Vec<(State, State)> {
    let mut shards = [MemoryShard::new(), MemoryShard::new()];
    let mut states = vec![(snapshot(&shards[0]), snapshot(&shards[1]))];
    for op in ops {
        shards[shard_of(op)].apply(op, NOW);
        states.push((snapshot(&shards[0]), snapshot(&shards[1])));
    }
    states
}

/// Runs `ops` over two shards of one log, answered ahead of the sync (`execute_ahead`),
/// acknowledging them five at a time once the log is durable up to the last one's LSN
/// (the way the engine waits once for many steps), by turns through the committer
/// (`wait_durable`) and in the caller's thread (`sync_durable`, as the HTTP combiner's lane
/// does), until the first failure; answers how many were acknowledged.
async fn run_pending(disk: &SimFs, tables: &std::path::Path, ops: &[Op]) -> usize {
    let clock = Arc::new(ManualClock::at(NOW));
    let Ok((store, _)) = Embedded::open_with(disk.clone(), tables, config_two(), clock) else {
        return 0;
    };
    let shards = store.shards();
    let mut acked = 0;
    for (i, op) in ops.iter().enumerate() {
        let s = shard_of(op);
        let shard = &shards[s];
        let Ok((_, lsn)) = shard.execute_ahead(&[op]).await else {
            break;
        };
        if i % 5 == 4 || i + 1 == ops.len() {
            // Either shard waits for the one log.
            let other = &shards[1 - s];
            let synced = if i % 10 == 4 {
                log_of(other).wait_durable(lsn).await
            } else {
                log_of(other)
                    .sync_durable(lsn)
                    .expect("syncs in the caller's thread")
            };
            if synced.is_err() {
                break;
            }
            assert!(log_of(shard).is_durable(lsn));
            acked = i + 1;
        }
        if i % 17 == 16 && store.checkpoint().is_err() {
            break;
        }
    }
    acked
}

/// The log `shard` appends to (every shard of a data directory names the same one).
fn log_of<S: Store + ?Sized>(shard: &S) -> Arc<dyn SharedLog> {
    shard
        .log()
        .expect("an embedded shard appends to its store's log")
}

async fn recovered_two(disk: SimFs, tables: &std::path::Path) -> (State, State) {
    let clock = Arc::new(ManualClock::at(NOW));
    let (store, _) = Embedded::open_with(disk, tables, config_two(), clock).expect("recovers");
    let mut states = Vec::new();
    for shard in store.shards() {
        let accounts = shard.accounts(None, usize::MAX).await.unwrap();
        let transfers = shard.transfers(None, usize::MAX).await.unwrap();
        states.push((accounts, transfers));
    }
    let second = states.pop().unwrap();
    (states.pop().unwrap(), second)
}

/// Answers ahead of the sync, over two shards of one log: the power fails at every sync
/// (the committer's, for whoever waits, and the checkpoints'), and the store
/// recovers one prefix of the ops across both shards that keeps every one acknowledged
/// after its wait (a step on one shard never survives a lost step before it on the other).
#[tokio::test]
async fn power_loss_with_answers_ahead_of_the_sync_recovers_a_prefix_with_everything_waited_for() {
    let ops = ops(11);
    let states = reference_two(&ops);
    let total_syncs = {
        let disk = SimFs::new();
        let tables = tempfile::tempdir().unwrap();
        assert_eq!(run_pending(&disk, tables.path(), &ops).await, ops.len());
        disk.syncs()
    };
    // The committer's syncs depend on timing: go a little past the count of one run.
    for fail_at in 1..=total_syncs + 3 {
        for torn in [
            Torn::DropUnsynced,
            Torn::KeepPrefix(9),
            Torn::KeepGarbled(usize::MAX),
        ] {
            let disk = SimFs::new();
            let tables = tempfile::tempdir().unwrap();
            disk.fail_from_sync(fail_at);
            let acked = run_pending(&disk, tables.path(), &ops).await;
            let got = recovered_two(disk.after_power_loss(torn), tables.path()).await;
            let prefix = (acked..=ops.len()).find(|&k| states[k] == got);
            assert!(
                prefix.is_some(),
                "power lost at sync {fail_at} ({torn:?}), {acked} acknowledged: the \
                 recovered state is no prefix that keeps them"
            );
        }
    }
}

/// Answers ahead of the sync cost no sync of their own: the committer syncs only for
/// someone waiting, and one wait, on either shard, makes every entry appended before it
/// durable on both. (It used to sync every pending entry as it came, spending a sync on
/// LSNs nobody waited for yet: this fails if it does again.)
#[tokio::test]
async fn pending_answers_are_synced_only_when_waited_for_and_one_wait_covers_both_shards() {
    let ops = ops(5);
    let disk = SimFs::new();
    let tables = tempfile::tempdir().unwrap();
    let cfg = EmbeddedConfig {
        shards: 2,
        background_checkpoints: false,
        ..EmbeddedConfig::default()
    };
    let clock = Arc::new(ManualClock::at(NOW));
    let (store, _) = Embedded::open_with(disk.clone(), tables.path(), cfg, clock).unwrap();
    let shards = store.shards();
    assert!(same_log(&log_of(&shards[0]), &log_of(&shards[1])));
    let before = disk.syncs();
    let mut lsns = Vec::new();
    for op in &ops {
        let s = shard_of(op);
        let (_, lsn) = shards[s].execute_ahead(&[op]).await.unwrap();
        lsns.push((s, lsn));
    }
    // Give a committer that syncs on its own the time to do it.
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(disk.syncs(), before, "synced with nobody waiting");
    assert!(lsns.iter().all(|&(s, p)| !log_of(&shards[s]).is_durable(p)));
    let (s, last) = *lsns.last().unwrap();
    log_of(&shards[1 - s]).wait_durable(last).await.unwrap();
    assert_eq!(disk.syncs() - before, 1, "one wait, one sync");
    assert!(lsns.iter().all(|&(s, p)| log_of(&shards[s]).is_durable(p)));
    // The same in the caller's thread: one sync covers both shards, and an LSN already
    // durable costs none.
    let more = crate::ops(6);
    let mut later = Vec::new();
    for op in &more {
        let s = shard_of(op);
        later.push((s, shards[s].execute_ahead(&[op]).await.unwrap().1));
    }
    assert!(later
        .iter()
        .all(|&(s, p)| !log_of(&shards[s]).is_durable(p)));
    let (s, last) = *later.last().unwrap();
    log_of(&shards[1 - s]).sync_durable(last).unwrap().unwrap();
    assert_eq!(disk.syncs() - before, 2, "one sync in the caller's thread");
    assert!(later.iter().all(|&(s, p)| log_of(&shards[s]).is_durable(p)));
    log_of(&shards[s]).sync_durable(last).unwrap().unwrap();
    assert_eq!(disk.syncs() - before, 2, "nothing to sync");
    drop(shards);
    store.close().unwrap();
    let (a, b) = recovered_two(disk.after_power_loss(Torn::DropUnsynced), tables.path()).await;
    assert!(
        reference_two(&[ops, more].concat()).last() == Some(&(a, b)),
        "everything waited for is there after a power loss"
    );
}
