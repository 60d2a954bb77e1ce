//! The MySQL store under contention and trouble: many batches at once on one shard, all
//! touching one hot account and one issuer in shuffled orders, must neither deadlock (the
//! store locks rows in one global order; InnoDB would report 1213) nor lose an update; a
//! call that outlives its timeout answers `Indeterminate` and its retry agrees with
//! whatever the abandoned call did; an unreachable server or a bad database name is a
//! clear error.

mod common;
use common::Databases;
use mysql_async::prelude::Queryable;
use std::sync::Arc;
use std::time::Duration;
use xfer_core::{AccountId, AssetCode, LowerBound, TransferId};
use xfer_store::conformance::FUTURE;
use xfer_store::{AccountOp, Op, PrepareOutcome, Reply, Store, StoreError};
use xfer_store_mysql::{MysqlConfig, MysqlStore};

const TASKS: u64 = 16;

fn acct(s: &str) -> AccountId {
    AccountId::new(s).unwrap()
}

fn usd() -> AssetCode {
    AssetCode::new("USD", "asset").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_batches_on_a_hot_account_neither_deadlock_nor_lose_updates() {
    let databases = Databases::new("hot");
    let (store, _) = databases
        .open_with(|cfg| cfg.pool_size = TASKS as usize)
        .await;
    let store: Arc<dyn Store> = Arc::new(store);
    let moved = xfer_store::contention::hot_account(store, TASKS, 30)
        .await
        .unwrap();
    eprintln!("{moved} transfers from {TASKS} tasks");
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_error() {
    let cfg = MysqlConfig {
        connect_timeout: Duration::from_secs(2),
        ..MysqlConfig::new("mysql://root@127.0.0.1:1", "x")
    };
    let err = match MysqlStore::open(&cfg).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("opened a store on port 1"),
    };
    assert!(err.contains("cannot connect"), "{err}");
    let bad = MysqlConfig::new(common::url(), "x`; DROP DATABASE mysql; --");
    let err = MysqlStore::open(&bad).await.err().unwrap().to_string();
    assert!(err.contains("database"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_outlives_its_timeout_is_indeterminate_and_its_retry_consistent() {
    let databases = Databases::new("slow");
    let (store, database) = databases
        .open_with(|cfg| cfg.call_timeout = Duration::from_millis(300))
        .await;
    let create = Op::Account(
        acct("a"),
        AccountOp::Create {
            asset: usd(),
            lower_bound: LowerBound::Unbounded,
        },
    );
    store.execute(vec![create]).await.unwrap();
    let prepare = Op::Account(
        acct("a"),
        AccountOp::Prepare {
            transfer: TransferId::new("t1").unwrap(),
            asset: usd(),
            debit: 5,
            credit: 0,
            deadline: FUTURE,
            horizon: FUTURE,
        },
    );

    // Another session holds the account's row: the step waits past its timeout.
    let mut locker = mysql_async::Conn::from_url(format!("{}/{database}", common::url()))
        .await
        .unwrap();
    locker.query_drop("START TRANSACTION").await.unwrap();
    locker
        .query_drop("SELECT * FROM accounts WHERE id = 'a' FOR UPDATE")
        .await
        .unwrap();
    match store.execute(vec![prepare.clone()]).await {
        Err(StoreError::Indeterminate(m)) => assert!(m.contains("no answer within"), "{m}"),
        other => panic!("expected Indeterminate, got {other:?}"),
    }
    locker.query_drop("COMMIT").await.unwrap();

    // The abandoned call may apply once the lock is free; the retry must agree with
    // whatever it did, and the reservation must be there exactly once.
    let retried = store.execute(vec![prepare]).await.unwrap();
    assert!(
        matches!(
            retried[..],
            [Reply::Prepare(
                PrepareOutcome::Prepared | PrepareOutcome::AlreadyPrepared
            )]
        ),
        "{retried:?}"
    );
    let got = store.accounts(None, 10).await.unwrap();
    assert_eq!(got[0].reserved, 5, "reserved once: {:?}", got[0]);
}
