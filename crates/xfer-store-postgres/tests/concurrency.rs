//! The PostgreSQL store under contention and trouble: many batches at once on one shard, all
//! touching one hot account and one issuer in shuffled orders, must neither deadlock nor
//! wait for PostgreSQL's deadlock detector (the store locks rows in one global order) nor
//! lose an update; a call that outlives its timeout answers `Indeterminate` and its retry
//! agrees with whatever the abandoned statement did; an unreachable server or a bad schema
//! name is a clear error.

mod common;
use common::Schemas;
use std::sync::Arc;
use xfer_core::{AccountId, AssetCode, LowerBound, TransferId};
use xfer_store::conformance::FUTURE;
use xfer_store::{AccountOp, Op, PrepareOutcome, Reply, Store, StoreError};

const TASKS: u64 = 16;

fn acct(s: &str) -> AccountId {
    AccountId::new(s).unwrap()
}

fn usd() -> AssetCode {
    AssetCode::new("USD", "asset").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_batches_on_a_hot_account_neither_deadlock_nor_lose_updates() {
    let schemas = Schemas::new("hot");
    let store: Arc<dyn Store> = Arc::new(schemas.open_with_pool(TASKS as usize).await);
    // A deadlock would surface as `Unavailable(... deadlock detected (40P01))`.
    let moved = xfer_store::contention::hot_account(store, TASKS, 30)
        .await
        .unwrap();
    eprintln!("{moved} transfers from {TASKS} tasks");
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_error() {
    let cfg = xfer_store_postgres::PostgresConfig {
        connect_timeout: std::time::Duration::from_secs(2),
        ..xfer_store_postgres::PostgresConfig::new("postgres://postgres@127.0.0.1:1/x", "s")
    };
    let err = match xfer_store_postgres::PostgresStore::open(&cfg).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("opened a store on port 1"),
    };
    assert!(err.contains("cannot connect"), "{err}");
    let bad = xfer_store_postgres::PostgresConfig::new(common::url(), "Robert'); DROP");
    let err = xfer_store_postgres::PostgresStore::open(&bad)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("schema"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_outlives_its_timeout_is_indeterminate_and_its_retry_consistent() {
    let schemas = Schemas::new("slow");
    let (store, schema) = schemas
        .open_with(|cfg| cfg.call_timeout = std::time::Duration::from_millis(300))
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
    let (locker, conn) = tokio_postgres::connect(&common::url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    locker
        .batch_execute(&format!(
            "SET search_path = {schema}; BEGIN; SELECT * FROM accounts WHERE id = 'a' FOR UPDATE"
        ))
        .await
        .unwrap();
    match store.execute(vec![prepare.clone()]).await {
        Err(StoreError::Indeterminate(m)) => assert!(m.contains("no answer within"), "{m}"),
        other => panic!("expected Indeterminate, got {other:?}"),
    }
    locker.batch_execute("COMMIT").await.unwrap();

    // The abandoned statement may apply once the lock is free; the retry must agree with
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
