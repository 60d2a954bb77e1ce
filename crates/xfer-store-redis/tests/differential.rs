//! The Redis functions do their arithmetic on decimal strings (Lua's numbers are doubles,
//! exact only below 2^53): `xfer_store::differential` holds them to the Memory store's
//! Rust integers, on a single server and on a cluster.

mod common;
use common::{Server, Shards};

async fn same_as_memory(server: Server) {
    let shards = Shards::new(server, "diff");
    for seed in 1..=6u64 {
        let redis = shards.open().await;
        xfer_store::differential::same_as_memory(&redis, seed, 400).await;
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
