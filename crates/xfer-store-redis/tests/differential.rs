//! The Redis functions do their arithmetic on decimal strings (Lua's numbers are doubles,
//! exact only below 2^53): `xfer_store::differential` holds them to the Memory store's
//! Rust integers, on a single server and on a cluster: account steps, one-phase commits,
//! refund links (their sums) and hold extensions (their expiries).

mod common;
use common::{Server, Shards};

async fn same_as_memory(server: Server) {
    let shards = Shards::new(server, "diff");
    for seed in 1..=6u64 {
        let redis = shards.open().await;
        xfer_store::differential::same_as_memory(&redis, seed, 400).await;
    }
    // Seed 7's links, since originals may be captured in part, never refuse a refund as not
    // reversing the original (not even on the Memory store), which the check requires.
    xfer_store::differential::refund_links_same_as_memory(&shards.open().await, 8).await;
    // The due index's scores are doubles: scanned only where a double is exact.
    xfer_store::differential::extensions_same_as_memory(&shards.open().await, 11, 1 << 53, true)
        .await;
    for seed in 1..=3u64 {
        xfer_store::differential::one_phase_same_as_memory(&shards.open().await, seed, 150).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_arithmetic_matches_the_memory_store_on_a_single_server() {
    same_as_memory(Server::Single).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_arithmetic_matches_the_memory_store_on_a_cluster() {
    same_as_memory(Server::Cluster).await;
}
