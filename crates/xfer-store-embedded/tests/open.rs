//! Opening a data directory: one process at a time, the shard count it was made with, and a
//! log that still covers the checkpoints.

use std::sync::Arc;
use xfer_core::{AccountId, AssetCode, LowerBound, SystemClock};
use xfer_store::{AccountOp, Op, Store};
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
