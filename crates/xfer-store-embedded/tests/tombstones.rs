//! Tombstones are checkpointed apart from their accounts, in runs (`tables.rs`): an account
//! is written without them, each tombstone once. Across restarts the shard must hold
//! exactly the tombstones it held (a late prepare still finds them), a run must go once
//! the pruner has taken all of it, and what the pruner took must not come back.

use std::sync::Arc;
use xfer_core::{Account, AccountId, AssetCode, LowerBound, ManualClock, Timestamp, TransferId};
use xfer_store::{AccountOp, MemoryShard, Op, PrepareOutcome, Reply, Store};
use xfer_store_embedded::tables::Tables;
use xfer_store_embedded::{Embedded, EmbeddedConfig, SimFs};

const NOW: Timestamp = Timestamp(1_000_000);

fn usd() -> AssetCode {
    AssetCode::new("USD", "asset").unwrap()
}
fn account(s: &str) -> AccountId {
    AccountId::new(s).unwrap()
}
fn transfer(s: &str) -> TransferId {
    TransferId::new(s).unwrap()
}

fn config() -> EmbeddedConfig {
    EmbeddedConfig {
        shards: 1,
        background_checkpoints: false,
        ..EmbeddedConfig::default()
    }
}

fn prepare(t: &str, debit: u64, credit: u64, horizon: u64) -> AccountOp {
    AccountOp::Prepare {
        transfer: transfer(t),
        asset: usd(),
        debit,
        credit,
        deadline: Timestamp(NOW.0 + 500),
        horizon: Timestamp(horizon),
    }
}

fn post(t: &str) -> AccountOp {
    AccountOp::Post {
        transfer: transfer(t),
        asset: usd(),
    }
}

/// Two transfers posted on a0 → a1 (horizons +2,000 and +5,000) and a release on an
/// account nobody created (a placeholder, horizon +2,000): five tombstones.
fn ops() -> Vec<Op> {
    let mut ops = vec![
        Op::Account(
            account("a0"),
            AccountOp::Create {
                asset: usd(),
                lower_bound: LowerBound::Unbounded,
            },
        ),
        Op::Account(
            account("a1"),
            AccountOp::Create {
                asset: usd(),
                lower_bound: LowerBound::Bounded(0),
            },
        ),
    ];
    for (t, horizon) in [("t1", NOW.0 + 2_000), ("t2", NOW.0 + 5_000)] {
        ops.push(Op::Account(account("a0"), prepare(t, 5, 0, horizon)));
        ops.push(Op::Account(account("a1"), prepare(t, 0, 5, horizon)));
        ops.push(Op::Account(account("a0"), post(t)));
        ops.push(Op::Account(account("a1"), post(t)));
    }
    ops.push(Op::Account(
        account("ghost"),
        AccountOp::Release {
            transfer: transfer("t3"),
            asset: usd(),
            horizon: Timestamp(NOW.0 + 2_000),
        },
    ));
    ops
}

struct Disk {
    wal: SimFs,
    tables: tempfile::TempDir,
    clock: Arc<ManualClock>,
}

impl Disk {
    fn new() -> Disk {
        Disk {
            wal: SimFs::new(),
            tables: tempfile::tempdir().unwrap(),
            clock: Arc::new(ManualClock::at(NOW)),
        }
    }

    fn open(&self) -> Embedded<SimFs> {
        Embedded::open_with(
            self.wal.clone(),
            self.tables.path(),
            config(),
            self.clock.clone(),
        )
        .expect("opens")
        .0
    }

    /// Checkpoints, closes, and answers how many tombstone runs the tables hold.
    fn checkpoint_and_close(&self, store: Embedded<SimFs>) -> usize {
        store.checkpoint().unwrap();
        store.close().unwrap();
        let tables = Tables::open(self.tables.path()).unwrap();
        tables.tombstone_runs(0).unwrap()
    }
}

/// The accounts a listing shows (placeholders are not listed: see [`late_prepare`]).
async fn accounts(store: &Embedded<SimFs>) -> Vec<Account> {
    store.shards()[0].accounts(None, usize::MAX).await.unwrap()
}

/// What a late prepare of `t` on `a` finds (a tombstone answers first, even on a
/// placeholder, even past the deadline).
async fn late_prepare(store: &Embedded<SimFs>, a: &str, t: &str) -> Reply {
    let mut replies = store.shards()[0]
        .execute(vec![Op::Account(account(a), prepare(t, 0, 5, NOW.0))])
        .await
        .unwrap();
    replies.remove(0)
}

fn tombstones(accounts: &[Account]) -> usize {
    accounts
        .iter()
        .map(|a| a.intents.len() - a.open_intents())
        .sum()
}

#[tokio::test]
async fn tombstones_survive_restarts_in_runs_that_go_once_pruned() {
    let disk = Disk::new();
    let store = disk.open();
    let mut reference = MemoryShard::new();
    for op in ops() {
        store.shards()[0].execute(vec![op.clone()]).await.unwrap();
        reference.apply(&op, NOW);
    }
    let before = accounts(&store).await;
    assert_eq!(tombstones(&before), 4, "and the placeholder's");
    assert_eq!(disk.checkpoint_and_close(store), 1, "one run of five");

    // Reopened from the tables alone (the log before the checkpoint is not replayed): the
    // same accounts, tombstones and placeholder included, and a late prepare finds its
    // tombstone.
    let store = disk.open();
    assert_eq!(accounts(&store).await, before);
    assert_eq!(
        late_prepare(&store, "a1", "t1").await,
        Reply::Prepare(PrepareOutcome::AlreadyPosted)
    );
    assert_eq!(
        late_prepare(&store, "ghost", "t3").await,
        Reply::Prepare(PrepareOutcome::AlreadyReleased)
    );

    // Past the first horizon, the pruner takes the three tombstones of t1 and t3 (and the
    // placeholder with its only one); the run keeps t2's two, and t1's and t3's stay gone
    // across a restart.
    disk.clock.set(Timestamp(NOW.0 + 3_000));
    assert_eq!(store.shards()[0].prune(100).await.unwrap(), 3);
    reference.prune(Timestamp(NOW.0 + 3_000), 100);
    assert_eq!(
        disk.checkpoint_and_close(store),
        1,
        "t2's tombstones are held"
    );
    let store = disk.open();
    let after_first = accounts(&store).await;
    assert_eq!(tombstones(&after_first), 2, "{after_first:#?}");
    assert_eq!(
        late_prepare(&store, "ghost", "t3").await,
        Reply::Prepare(PrepareOutcome::Refused(xfer_core::Code::AccountNotFound)),
        "the placeholder went with its tombstone"
    );
    assert_eq!(
        after_first,
        reference.accounts().cloned().collect::<Vec<_>>()
    );

    // Past the last horizon: everything pruned, and the run is deleted.
    disk.clock.set(Timestamp(NOW.0 + 6_000));
    assert_eq!(store.shards()[0].prune(100).await.unwrap(), 2);
    assert_eq!(disk.checkpoint_and_close(store), 0, "the run is gone");
    let store = disk.open();
    assert_eq!(tombstones(&accounts(&store).await), 0);
    store.close().unwrap();
}

#[tokio::test]
async fn a_run_pruned_in_part_restores_only_what_the_shard_still_held() {
    let disk = Disk::new();
    let store = disk.open();
    for op in ops() {
        store.shards()[0].execute(vec![op]).await.unwrap();
    }
    assert_eq!(disk.checkpoint_and_close(store), 1);
    // One slice of two: the pruner takes entries in (horizon, account, transfer) order.
    let store = disk.open();
    disk.clock.set(Timestamp(NOW.0 + 3_000));
    assert_eq!(store.shards()[0].prune(2).await.unwrap(), 2);
    let held = accounts(&store).await;
    assert_eq!(tombstones(&held), 2, "t2's (and the placeholder's t3)");
    assert_eq!(
        disk.checkpoint_and_close(store),
        1,
        "the run is still needed"
    );
    let store = disk.open();
    assert_eq!(
        accounts(&store).await,
        held,
        "the two pruned tombstones of the run stay pruned"
    );
    assert_eq!(
        late_prepare(&store, "ghost", "t3").await,
        Reply::Prepare(PrepareOutcome::AlreadyReleased),
        "the one held is restored"
    );
    store.close().unwrap();
}

/// A bucket of the pruner's index big enough to be sorted without the shard's lock
/// (`SORT_APART_MIN` in `store.rs`: 2,048 entries), pruned part way in slices: what the
/// pruner took is what the Memory store's pruner takes (the same order), and stays taken
/// both when the next open restores a checkpoint and when it replays the log.
#[tokio::test]
async fn a_big_bucket_sorted_apart_is_pruned_in_order_across_checkpoints_and_replay() {
    let mut ops = ops();
    for n in 0..1_200 {
        let t = format!("big-{n:04}");
        // Most in the first bucket; every tenth a bucket later.
        let horizon = NOW.0 + if n % 10 == 0 { 5_000 } else { 2_000 };
        ops.push(Op::Account(account("a0"), prepare(&t, 1, 0, horizon)));
        ops.push(Op::Account(account("a1"), prepare(&t, 0, 1, horizon)));
        ops.push(Op::Account(account("a0"), post(&t)));
        ops.push(Op::Account(account("a1"), post(&t)));
    }
    let later = Timestamp(NOW.0 + 3_000);
    for checkpointed in [true, false] {
        let disk = Disk::new();
        let store = disk.open();
        let mut reference = MemoryShard::new();
        for chunk in ops.chunks(500) {
            store.shards()[0].execute(chunk.to_vec()).await.unwrap();
            for op in chunk {
                reference.apply(op, NOW);
            }
        }
        disk.clock.set(later);
        // 2,163 tombstones due (two per transfer of the first bucket, t1's two and t3's),
        // 1,000 taken: a part of the bucket, in slices (a0's, in transfer order).
        assert_eq!(store.shards()[0].prune(1_000).await.unwrap(), 1_000);
        assert_eq!(reference.prune(later, 1_000), 1_000);
        let held = accounts(&store).await;
        assert_eq!(held, listed(&reference));
        if checkpointed {
            disk.checkpoint_and_close(store);
        } else {
            drop(store); // no checkpoint: the next open replays the prunes from the log
        }
        let store = disk.open();
        assert_eq!(
            accounts(&store).await,
            held,
            "checkpointed: {checkpointed}: the same tombstones held, none taken come back"
        );
        // The rest of what is due goes the same way too.
        let rest = store.shards()[0].prune(10_000).await.unwrap();
        assert_eq!(rest, reference.prune(later, 10_000));
        assert_eq!(rest, 1_163);
        assert_eq!(accounts(&store).await, listed(&reference));
        store.close().unwrap();
    }
}

/// The accounts a listing shows, of a Memory shard (placeholders are not listed).
fn listed(shard: &MemoryShard) -> Vec<Account> {
    shard
        .accounts()
        .filter(|a| a.status != xfer_core::AccountStatus::Unopened)
        .cloned()
        .collect()
}
