//! The stored procedures check sums in DECIMAL and store BIGINTs: `xfer_store::differential`
//! holds them to the Memory store's Rust integers, with amounts near 2^53 and 2^63.

mod common;
use common::Databases;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_arithmetic_matches_the_memory_store() {
    let databases = Databases::new("diff");
    for seed in 1..=6u64 {
        let store = databases.open().await;
        xfer_store::differential::same_as_memory(&store, seed, 400).await;
    }
}

/// Refund links sum the original's amounts in DECIMAL: held to the Memory store's integers.
/// Seed 8: since originals may be captured in part, seed 7 draws no refund that fails to
/// reverse its original, on the Memory store too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refund_links_match_the_memory_store() {
    let databases = Databases::new("refunds");
    let store = databases.open().await;
    xfer_store::differential::refund_links_same_as_memory(&store, 8).await;
}

/// Hold extensions compare expiries in SQL: held to the Memory store's integers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extensions_match_the_memory_store() {
    let databases = Databases::new("extend");
    let never = i64::MAX as u64;
    xfer_store::differential::extensions_same_as_memory(&databases.open().await, 11, never, false)
        .await;
}
