//! The PostgreSQL store under contention and trouble: many batches at once on one shard, all
//! touching one hot account and one issuer in shuffled orders, must neither deadlock nor
//! wait for PostgreSQL's deadlock detector (the store locks rows in one global order) nor
//! lose an update; a call that outlives its timeout answers `Indeterminate` and its retry
//! agrees with whatever the abandoned statement did; an unreachable server or a bad schema
//! name is a clear error.

mod common;
use common::Schemas;
use std::sync::Arc;
use xfer_core::{AccountId, AssetCode, IntentState, LowerBound, Rng, TransferId};
use xfer_store::conformance::FUTURE;
use xfer_store::{AccountOp, Op, PostOutcome, PrepareOutcome, Reply, Store, StoreError};

const TASKS: u64 = 16;
const ROUNDS: u64 = 30;
const PER_BATCH: u64 = 8;
const OTHERS: u64 = 20;

fn acct(s: &str) -> AccountId {
    AccountId::new(s).unwrap()
}

fn usd() -> AssetCode {
    AssetCode::new("USD", "asset").unwrap()
}

fn shuffle<T>(rng: &mut Rng, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i as u64 + 1) as usize);
    }
}

/// One task: rounds of (a batch of prepares, a batch of posts), each shuffled. Answers the
/// total it moved.
async fn mover(store: Arc<dyn Store>, task: u64) -> Result<u64, StoreError> {
    let mut rng = Rng::new(task + 1);
    let mut moved = 0;
    for round in 0..ROUNDS {
        let mut prepares = Vec::new();
        let mut posts = Vec::new();
        for k in 0..PER_BATCH {
            let t = TransferId::new(&format!("t{task}-{round}-{k}")).unwrap();
            let to = if rng.chance(500_000) {
                acct("hot")
            } else {
                acct(&format!("a{}", rng.below(OTHERS)))
            };
            let amount = rng.range(1, 100);
            moved += amount;
            for (account, debit, credit) in [(acct("issuer"), amount, 0), (to, 0, amount)] {
                prepares.push(Op::Account(
                    account.clone(),
                    AccountOp::Prepare {
                        transfer: t.clone(),
                        asset: usd(),
                        debit,
                        credit,
                        deadline: FUTURE,
                        horizon: FUTURE,
                    },
                ));
                posts.push(Op::Account(
                    account,
                    AccountOp::Post {
                        transfer: t.clone(),
                        asset: usd(),
                    },
                ));
            }
        }
        shuffle(&mut rng, &mut prepares);
        shuffle(&mut rng, &mut posts);
        for r in store.execute(prepares).await? {
            assert_eq!(r, Reply::Prepare(PrepareOutcome::Prepared));
        }
        for r in store.execute(posts).await? {
            assert_eq!(r, Reply::Post(PostOutcome::Posted));
        }
    }
    Ok(moved)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_batches_on_a_hot_account_neither_deadlock_nor_lose_updates() {
    let schemas = Schemas::new("hot");
    let store: Arc<dyn Store> = Arc::new(schemas.open_with_pool(TASKS as usize).await);
    let mut creates = vec![Op::Account(
        acct("issuer"),
        AccountOp::Create {
            asset: usd(),
            lower_bound: LowerBound::Unbounded,
        },
    )];
    for name in std::iter::once("hot".to_string()).chain((0..OTHERS).map(|i| format!("a{i}"))) {
        creates.push(Op::Account(
            acct(&name),
            AccountOp::Create {
                asset: usd(),
                lower_bound: LowerBound::default(),
            },
        ));
    }
    store.execute(creates).await.unwrap();

    #[allow(clippy::disallowed_methods)] // reported, never asserted on
    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| tokio::spawn(mover(store.clone(), t)))
        .collect();
    let mut total = 0;
    for t in tasks {
        // A deadlock would surface here as `Unavailable(... deadlock detected (40P01))`.
        total += t.await.unwrap().unwrap();
    }
    let took = started.elapsed();

    let accounts = store.accounts(None, 1000).await.unwrap();
    let issuer = accounts.iter().find(|a| a.id.as_str() == "issuer").unwrap();
    assert_eq!(
        issuer.balance,
        -(total as i64),
        "the issuer paid everything"
    );
    let received: i64 = accounts
        .iter()
        .filter(|a| a.id.as_str() != "issuer")
        .map(|a| a.balance)
        .sum();
    assert_eq!(received, total as i64, "every credit arrived once");
    for a in &accounts {
        assert_eq!(
            (a.reserved, a.incoming),
            (0, 0),
            "{}: nothing left open",
            a.id
        );
        assert!(a.intents.values().all(|i| i.state == IntentState::Posted));
        a.check_sums().unwrap();
    }
    let transfers = TASKS * ROUNDS * PER_BATCH;
    assert_eq!(issuer.intents.len() as u64, transfers);
    eprintln!(
        "{transfers} transfers in {} batches from {TASKS} tasks: {took:?}",
        TASKS * ROUNDS * 2
    );
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
