//! The update pipelines check sums in Decimal128 and store Int64s: `xfer_store::differential`
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
