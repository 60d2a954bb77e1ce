//! The MongoDB store under contention and trouble: many batches at once on one shard, all
//! touching one hot account and one issuer in shuffled orders, must not lose an update
//! (every step is one atomic update of one document, never a read then a write); an
//! unreachable server or a bad database name is a clear error.

mod common;
use common::Databases;
use std::sync::Arc;
use std::time::Duration;
use xfer_core::SystemClock;
use xfer_store::Store;
use xfer_store_mongo::{MongoConfig, MongoStore};

const TASKS: u64 = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_batches_on_a_hot_account_lose_no_update() {
    let databases = Databases::new("hot");
    let store: Arc<dyn Store> = Arc::new(databases.open().await);
    // Fewer rounds than the SQL stores: the issuer's document holds every tombstone (none
    // is due in the test), and each step rewrites it.
    let moved = xfer_store::contention::hot_account(store, TASKS, 8)
        .await
        .unwrap();
    eprintln!("{moved} transfers from {TASKS} tasks");
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_error() {
    let cfg = MongoConfig {
        connect_timeout: Duration::from_secs(1),
        ..MongoConfig::new("mongodb://127.0.0.1:1", "x")
    };
    let err = match MongoStore::open(&cfg, Arc::new(SystemClock)).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("opened a store on port 1"),
    };
    assert!(err.contains("cannot connect"), "{err}");
    let bad = MongoConfig::new(common::url(), "x.y");
    let err = MongoStore::open(&bad, Arc::new(SystemClock))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("database"), "{err}");
}
