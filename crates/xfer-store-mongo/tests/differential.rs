//! The update pipelines check sums in Decimal128 and store Int64s: `xfer_store::differential`
//! holds them to the Memory store's Rust integers, with amounts near 2^53 and 2^63: account
//! steps, refund links (their sums) and hold extensions (their expiries).

mod common;
use common::Databases;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_arithmetic_matches_the_memory_store() {
    let databases = Databases::new("diff");
    for seed in 1..=6u64 {
        let store = databases.open().await;
        xfer_store::differential::same_as_memory(&store, seed, 400).await;
    }
    // Seed 7's links, since originals may be captured in part, never refuse a refund as not
    // reversing the original (not even on the Memory store), which the check requires.
    xfer_store::differential::refund_links_same_as_memory(&databases.open().await, 8).await;
    // Short of "never", which a stored Int64 saturates at 2^63 - 1; no change feed.
    let never = i64::MAX as u64;
    xfer_store::differential::extensions_same_as_memory(&databases.open().await, 11, never, false)
        .await;
}
