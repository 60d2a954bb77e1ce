//! Opening a data directory: one process at a time, the shard count it was made with, and a
//! log that still covers the checkpoints.

use std::sync::Arc;
use xfer_core::{
    AccountId, Amount, AssetCode, Clock, LowerBound, OwnerId, Posting, SystemClock, TransferId,
    TransferKind, TransferRecord, TransferSpec, TransferState,
};
use xfer_store::{AccountOp, Op, Reply, Store, TransferOp};
use xfer_store_embedded::{Embedded, EmbeddedConfig, OpenError};

fn cfg(shards: u16) -> EmbeddedConfig {
    EmbeddedConfig {
        shards,
        background_checkpoints: false,
        ..EmbeddedConfig::default()
    }
}

#[test]
fn a_second_opener_gets_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (_first, _) = Embedded::open(dir.path(), cfg(2), Arc::new(SystemClock)).unwrap();
    let Err(e) = Embedded::open(dir.path(), cfg(2), Arc::new(SystemClock)) else {
        panic!("a second open succeeded");
    };
    assert!(
        e.to_string().contains("is in use by another process"),
        "{e}"
    );
}

#[tokio::test]
async fn the_shard_count_cannot_change() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Embedded::open(dir.path(), cfg(2), Arc::new(SystemClock)).unwrap();
    let shard = store.shards().remove(0);
    let create = Op::Account(
        AccountId::new("a").unwrap(),
        AccountOp::Create {
            asset: AssetCode::new("USD", "asset").unwrap(),
            lower_bound: LowerBound::Bounded(0),
        },
    );
    shard.execute(vec![create]).await.unwrap();
    drop(shard);
    store.close().unwrap();
    match Embedded::open(dir.path(), cfg(3), Arc::new(SystemClock)) {
        Err(OpenError::Config(m)) => assert!(m.contains("holds 2 shards"), "{m}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("opened with another shard count"),
    }
    // The right count still opens, with the account.
    let (store, report) = Embedded::open(dir.path(), cfg(2), Arc::new(SystemClock)).unwrap();
    assert_eq!(report.accounts, 1);
    drop(store);
}

#[tokio::test]
async fn a_missing_log_is_refused_not_silently_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Embedded::open(dir.path(), cfg(1), Arc::new(SystemClock)).unwrap();
    let shard = store.shards().remove(0);
    for i in 0..3 {
        let create = Op::Account(
            AccountId::new(&format!("a{i}")).unwrap(),
            AccountOp::Create {
                asset: AssetCode::new("USD", "asset").unwrap(),
                lower_bound: LowerBound::Bounded(0),
            },
        );
        shard.execute(vec![create]).await.unwrap();
    }
    drop(shard);
    store.close().unwrap();
    std::fs::remove_dir_all(dir.path().join("wal")).unwrap();
    match Embedded::open(dir.path(), cfg(1), Arc::new(SystemClock)) {
        Err(OpenError::Log(e)) => assert!(e.to_string().contains("missing"), "{e}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("opened with its log gone: new writes would get LSNs the checkpoint skips"),
    }
}

fn transfer_op(id: &str, op: TransferOp) -> Op {
    Op::Transfer(TransferId::new(id).unwrap(), op)
}

/// Inserts `id` claimed (`pending`, unfinished) through the first shard.
async fn start(store: &Embedded, id: &str) {
    let reply = insert(store, id).await;
    assert!(matches!(reply, Reply::Transfer(_)), "{reply}");
}

/// Transfer `id` of `amount` from `from` to `to`, accepted now and claimed.
fn claimed(id: &str, from: &str, to: &str, amount: u64) -> Arc<TransferRecord> {
    let spec = TransferSpec {
        id: TransferId::new(id).unwrap(),
        postings: vec![Posting {
            from: AccountId::new(from).unwrap(),
            to: AccountId::new(to).unwrap(),
            asset: AssetCode::new("USD", "asset").unwrap(),
            amount: Amount::new(amount, "amount").unwrap(),
        }]
        .into(),
        metadata: String::new(),
        kind: TransferKind::Transfer,
        refund_of: None,
        timeout_ms: 10_000,
    };
    let now = SystemClock.now();
    let owner = OwnerId::new("me").unwrap();
    Arc::new(TransferRecord::accept_claimed(
        spec,
        now,
        owner,
        now.plus_ms(60_000),
    ))
}

/// Inserts `id` claimed through the first shard (always the same body) and answers the reply.
async fn insert(store: &Embedded, id: &str) -> Reply {
    let op = transfer_op(id, TransferOp::Insert(claimed(id, "a", "b", 1)));
    store.shards()[0].execute(vec![op]).await.unwrap().remove(0)
}

/// Cancels and finishes `id` (epoch 1).
async fn finish(store: &Embedded, id: &str) {
    let now = SystemClock.now();
    let decide = TransferOp::Decide {
        epoch: 1,
        to: TransferState::Canceling,
        reason: None,
        now,
    };
    let ops = vec![
        transfer_op(id, decide),
        transfer_op(id, TransferOp::Finish { now }),
    ];
    let replies = store.shards()[0].execute(ops).await.unwrap();
    assert!(matches!(&replies[1], Reply::Transfer(r) if r.state == TransferState::Canceled));
}

async fn state(store: &Embedded, id: &str) -> TransferState {
    let replies = store.shards()[0]
        .execute(vec![transfer_op(id, TransferOp::Get)])
        .await
        .unwrap();
    match &replies[0] {
        Reply::Unchanged(r) => r.state,
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn a_transfer_leaves_the_live_table_when_it_finishes_however_the_store_was_opened() {
    // A transfer unfinished at a checkpoint is written to `live`; one that finishes later
    // must be deleted from it (or the next open would load it unfinished, stale), whether
    // it was written live by this process or found there at open.
    let dir = tempfile::tempdir().unwrap();
    let open = || Embedded::open(dir.path(), cfg(1), Arc::new(SystemClock)).unwrap();
    let (store, _) = open();
    start(&store, "t1").await;
    start(&store, "t2").await;
    store.checkpoint().unwrap();
    finish(&store, "t1").await;
    store.close().unwrap();

    let (store, report) = open();
    assert_eq!(report.live, 1, "t2 only");
    assert_eq!(state(&store, "t1").await, TransferState::Canceled);
    assert_eq!(state(&store, "t2").await, TransferState::Pending);
    finish(&store, "t2").await;
    // Started and finished between two checkpoints: never live.
    start(&store, "t3").await;
    finish(&store, "t3").await;
    store.close().unwrap();

    let (store, report) = open();
    assert_eq!(report.live, 0);
    for id in ["t1", "t2", "t3"] {
        assert_eq!(state(&store, id).await, TransferState::Canceled, "{id}");
    }
    drop(store);
}

/// Waits (up to 10 s) until the scan at open has filled every shard's filter of done ids.
/// (The scan runs on a thread of its own: blocking this one holds nothing up.)
fn until_done_filters_complete(store: &Embedded) {
    for _ in 0..1000 {
        if store.done_filters_complete() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the done filters were not complete after 10 s");
}

#[tokio::test]
async fn a_finished_transfer_that_left_memory_keeps_its_id_before_and_after_a_restart() {
    // A finished transfer leaves memory at the checkpoint after it finished; its id must
    // still be taken: inserting it again is answered with the record, never a second
    // transfer. New ids are first asked of the shard's filter of done ids (filled by the
    // checkpointer, and at open by a scan of the table), so both fillings are checked with
    // the filter complete, when a "no" from it is believed.
    let dir = tempfile::tempdir().unwrap();
    let open = || Embedded::open(dir.path(), cfg(1), Arc::new(SystemClock)).unwrap();
    let (store, _) = open();
    until_done_filters_complete(&store);
    start(&store, "t1").await;
    finish(&store, "t1").await;
    store.checkpoint().unwrap();
    let again = insert(&store, "t1").await;
    assert!(
        matches!(&again, Reply::Unchanged(r) if r.state == TransferState::Canceled),
        "{again}"
    );
    store.close().unwrap();

    let (store, _) = open();
    until_done_filters_complete(&store);
    let again = insert(&store, "t1").await;
    assert!(
        matches!(&again, Reply::Unchanged(r) if r.state == TransferState::Canceled),
        "{again}"
    );
    start(&store, "t2").await;
    drop(store);
}

#[tokio::test]
async fn a_crash_after_the_done_records_and_before_the_checkpoint_batch_changes_nothing() {
    // A checkpoint writes its finished transfers into `done` first, then its batch. Killed
    // in between, the store reopens at the checkpoint before, with `done` already holding
    // records the log replays: each read, insert and listing must answer each transfer once,
    // as the log says, and the checkpoints after must write them again without harm.
    let dir = tempfile::tempdir().unwrap();
    let open = || Embedded::open(dir.path(), cfg(1), Arc::new(SystemClock)).unwrap();
    let (store, _) = open();
    // t3 is in `live` at the tables' checkpoint, so memory holds it at open; t1 is not, so
    // replay brings it back from `done` at its first op.
    start(&store, "t3").await;
    store.checkpoint().unwrap();
    finish(&store, "t3").await;
    start(&store, "t1").await;
    finish(&store, "t1").await;
    start(&store, "t2").await;
    let record = |r: Reply| match r {
        Reply::Unchanged(r) => (*r).clone(),
        other => panic!("{other}"),
    };
    let t1 = record(insert(&store, "t1").await);
    let t3 = record(insert(&store, "t3").await);
    let feed = |store: &Embedded| {
        let shard = store.shards()[0].clone();
        async move {
            shard
                .events(xfer_store::FeedPosition::START, 1_000)
                .await
                .unwrap()
                .events
        }
    };
    let events = feed(&store).await;
    drop(store); // killed: no checkpoint since t3's, the log holds everything after

    let tables = xfer_store_embedded::tables::Tables::open(&dir.path().join("tables")).unwrap();
    let checkpoint = tables.shard_meta(0).unwrap().checkpoint_lsn;
    assert!(checkpoint > 0, "t3's checkpoint");
    // As the lost checkpoint's commit: its events, then `done`.
    tables.write_events(0, &events).unwrap();
    tables.write_done(0, &[t1.clone(), t3.clone()]).unwrap();
    assert_eq!(tables.shard_meta(0).unwrap().checkpoint_lsn, checkpoint);
    drop(tables);

    for round in 0..3 {
        let (store, _) = open();
        until_done_filters_complete(&store);
        assert_eq!(
            state(&store, "t1").await,
            TransferState::Canceled,
            "{round}"
        );
        let t2 = if round < 2 {
            TransferState::Pending
        } else {
            TransferState::Canceled
        };
        assert_eq!(state(&store, "t2").await, t2, "{round}");
        assert_eq!(
            state(&store, "t3").await,
            TransferState::Canceled,
            "{round}"
        );
        for (id, want) in [("t1", &t1), ("t3", &t3)] {
            let again = insert(&store, id).await;
            assert!(
                matches!(&again, Reply::Unchanged(r) if **r == *want),
                "{round}: {again}"
            );
        }
        let listed: Vec<String> = store.shards()[0]
            .transfers(None, 10)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.spec.id.to_string())
            .collect();
        assert_eq!(listed, ["t1", "t2", "t3"], "{round}: each once");
        // The feed: every event once, at the position it had before the crash (a replay
        // that finds t1 done makes none of its events again: they were saved first).
        let now = feed(&store).await;
        assert_eq!(
            now[..events.len()],
            events[..],
            "{round}: the feed as it was"
        );
        let ids: std::collections::BTreeSet<String> = now.iter().map(|e| e.id()).collect();
        assert_eq!(ids.len(), now.len(), "{round}: each event once");
        if round == 1 {
            finish(&store, "t2").await;
        }
        store.checkpoint().unwrap();
        store.close().unwrap();
    }
}

/// One-phase step `id` of `amount` from `from` to `to` through the first shard: its reply.
async fn one_phase(store: &Embedded, id: &str, from: &str, to: &str, amount: u64) -> Reply {
    let op = transfer_op(id, TransferOp::OnePhase(claimed(id, from, to, amount)));
    store.shards()[0].execute(vec![op]).await.unwrap().remove(0)
}

async fn balance(store: &Embedded, id: &str) -> i64 {
    let get = Op::Account(AccountId::new(id).unwrap(), AccountOp::Get);
    match &store.shards()[0].execute(vec![get]).await.unwrap()[0] {
        Reply::Account(a) => a.balance,
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn a_one_phase_commit_replays_over_its_own_record_written_ahead() {
    // Killed between a checkpoint's `done` records and its batch, the store reopens at the
    // checkpoint before with `done` already holding what the log's one-phase commits made.
    // Replay must commit each again, not find its own result there and move nothing (the
    // balances would then disagree with the records and with every later step); and a
    // one-phase step that fell back to the insert must replay as the insert it was.
    let dir = tempfile::tempdir().unwrap();
    let open = || Embedded::open(dir.path(), cfg(1), Arc::new(SystemClock)).unwrap();
    let (store, _) = open();
    for (id, lower_bound) in [("a", LowerBound::Unbounded), ("b", LowerBound::Bounded(0))] {
        let create = Op::Account(
            AccountId::new(id).unwrap(),
            AccountOp::Create {
                asset: AssetCode::new("USD", "asset").unwrap(),
                lower_bound,
            },
        );
        store.shards()[0].execute(vec![create]).await.unwrap();
    }
    store.checkpoint().unwrap();
    let done = |r: Reply| match r {
        Reply::Transfer(r) if r.state == TransferState::Done => (*r).clone(),
        other => panic!("not committed: {other}"),
    };
    let p1 = done(one_phase(&store, "p1", "a", "b", 5).await);
    let fell_back = one_phase(&store, "p2", "b", "a", 100).await;
    assert!(
        matches!(&fell_back, Reply::Transfer(r) if r.state == TransferState::Pending),
        "b holds 5: {fell_back}"
    );
    let p3 = done(one_phase(&store, "p3", "a", "b", 200).await);
    drop(store); // killed

    let tables = xfer_store_embedded::tables::Tables::open(&dir.path().join("tables")).unwrap();
    tables.write_done(0, &[p1, p3]).unwrap();
    drop(tables);

    for round in 0..2 {
        let (store, _) = open();
        assert_eq!(balance(&store, "b").await, 205, "{round}");
        assert_eq!(balance(&store, "a").await, -205, "{round}");
        for id in ["p1", "p3"] {
            assert_eq!(state(&store, id).await, TransferState::Done, "{round} {id}");
        }
        assert_eq!(state(&store, "p2").await, TransferState::Pending, "{round}");
        store.checkpoint().unwrap();
        store.close().unwrap();
    }
}
