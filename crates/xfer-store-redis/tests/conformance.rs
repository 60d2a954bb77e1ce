//! The store conformance suite (the same one the Memory, embedded and PostgreSQL stores
//! pass, the one-phase commit required to commit) against a real Redis server and a real
//! Redis Cluster of three masters.

mod common;
use common::{Server, Shards};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_on_a_single_server() {
    let shards = Shards::new(Server::Single, "conf");
    xfer_store::conformance::run_all_opened(|| shards.open()).await;
    xfer_store::conformance::run_timelines(|| shards.open()).await;
    xfer_store::conformance::run_one_phase_committing(|| shards.open()).await;
    xfer_store::conformance::run_events(|| shards.open()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_on_a_cluster() {
    let shards = Shards::new(Server::Cluster, "conf");
    xfer_store::conformance::run_all_opened(|| shards.open()).await;
    xfer_store::conformance::run_timelines(|| shards.open()).await;
    xfer_store::conformance::run_one_phase_committing(|| shards.open()).await;
    xfer_store::conformance::run_events(|| shards.open()).await;
}

/// `destroy` (what tests, demos and benches call on the shards they made) leaves no key of
/// the shard behind: records, indexes, the change feed, the asset catalog and account
/// metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_leaves_no_key_of_the_shard() {
    let shards = Shards::new(Server::Single, "destroy");
    xfer_store::conformance::run_events(|| shards.open()).await;
    let store = shards.open().await;
    let usd = xfer_core::Asset::new("USD", 2).expect("an asset");
    xfer_store::Store::declare_asset(&store, &usd)
        .await
        .expect("declare");
    let owner = [("owner".to_string(), "alice".to_string())].into();
    let alice = xfer_core::AccountId::new("alice").expect("an id");
    xfer_store::Store::set_account_metadata(&store, &alice, &owner)
        .await
        .expect("metadata");
    assert_eq!(shards.destroy_and_find_left().await, Vec::<String>::new());
}
