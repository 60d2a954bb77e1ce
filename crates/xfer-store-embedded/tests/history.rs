//! An account's history read back from the checkpoint tables, where each checkpoint wrote
//! the account's new entries as one run: every page, whatever its size and wherever the
//! runs split, is the next entries newest first — before and after a restart.

use std::sync::Arc;
use xfer_core::{AccountId, AssetCode, LowerBound, SystemClock, Timestamp, TransferId};
use xfer_store::{AccountOp, Op, Reply, Store};
use xfer_store_embedded::{Embedded, EmbeddedConfig};

fn cfg() -> EmbeddedConfig {
    EmbeddedConfig {
        shards: 1,
        background_checkpoints: false,
        ..EmbeddedConfig::default()
    }
}

fn account(id: &str) -> AccountId {
    AccountId::new(id).unwrap()
}

/// Prepares a credit of 1 to `to` and a debit of 1 from `other` for transfer `t`: one
/// history entry on each.
async fn prepare(store: &Embedded, to: &str, other: &str, t: &str) {
    let op = |a: &str, debit, credit| {
        Op::Account(
            account(a),
            AccountOp::Prepare {
                transfer: TransferId::new(t).unwrap(),
                asset: AssetCode::new("USD", "asset").unwrap(),
                debit,
                credit,
                deadline: Timestamp::NEVER,
                horizon: Timestamp::NEVER,
            },
        )
    };
    let replies = store.shards()[0]
        .execute(vec![op(to, 0, 1), op(other, 1, 0)])
        .await
        .unwrap();
    assert!(replies.iter().all(|r| matches!(r, Reply::Prepare(_))));
}

/// Every entry of `id`'s history, read `limit` at a time.
async fn pages(store: &Embedded, id: &str, limit: usize) -> Vec<String> {
    let shard = store.shards().remove(0);
    let mut out = Vec::new();
    let mut before = None;
    for _ in 0..100 {
        let page = shard.history(&account(id), before, limit).await.unwrap();
        assert!(page.entries.len() <= limit);
        out.extend(page.entries.iter().map(|(_, t)| t.to_string()));
        match page.next {
            Some(next) => before = Some(next),
            None => return out,
        }
    }
    panic!("paging {id} by {limit} does not end: {out:?}");
}

/// A store with accounts `b` and `c`.
async fn open_with_accounts(dir: &std::path::Path) -> Embedded {
    let (store, _) = Embedded::open(dir, cfg(), Arc::new(SystemClock)).unwrap();
    for id in ["b", "c"] {
        let create = Op::Account(
            account(id),
            AccountOp::Create {
                asset: AssetCode::new("USD", "asset").unwrap(),
                lower_bound: LowerBound::Unbounded,
            },
        );
        store.shards()[0].execute(vec![create]).await.unwrap();
    }
    store
}

#[tokio::test]
async fn history_pages_are_the_same_whatever_runs_the_checkpoints_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with_accounts(dir.path()).await;
    // Runs of 1, 2, 3, … entries of `b` (interleaved with `c`'s), the last 4 only in memory.
    let mut expected = Vec::new();
    let mut run = 1;
    let mut in_run = 0;
    for i in 0..25 {
        let t = format!("t{i}");
        prepare(&store, "b", "c", &t).await;
        expected.insert(0, t);
        in_run += 1;
        if in_run == run && i < 21 {
            store.checkpoint().unwrap();
            run += 1;
            in_run = 0;
        }
    }
    for limit in [1, 2, 3, 4, 5, 7, 24, 25, 100] {
        assert_eq!(pages(&store, "b", limit).await, expected, "limit {limit}");
        assert_eq!(
            pages(&store, "c", limit).await,
            expected,
            "c, limit {limit}"
        );
    }
    store.close().unwrap();
    let (store, _) = Embedded::open(dir.path(), cfg(), Arc::new(SystemClock)).unwrap();
    for limit in [1, 3, 6, 100] {
        assert_eq!(
            pages(&store, "b", limit).await,
            expected,
            "reopened, limit {limit}"
        );
    }
    drop(store);
}

#[tokio::test]
async fn a_hot_accounts_checkpoint_is_split_into_bounded_runs_and_pages_the_same() {
    // 600 entries in one checkpoint: more than two runs' worth (HISTORY_RUN_MAX = 256).
    let dir = tempfile::tempdir().unwrap();
    let store = open_with_accounts(dir.path()).await;
    let mut expected = Vec::new();
    for i in 0..600 {
        let t = format!("h{i}");
        prepare(&store, "b", "c", &t).await;
        expected.insert(0, t);
    }
    store.checkpoint().unwrap();
    for limit in [7, 100, 255, 256, 257, 1000] {
        assert_eq!(pages(&store, "b", limit).await, expected, "limit {limit}");
    }
    drop(store);
}
