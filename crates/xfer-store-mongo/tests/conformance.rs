//! The store conformance suite (the same one the Memory, embedded, PostgreSQL, Redis and
//! MySQL stores pass) against a server speaking MongoDB's protocol: `XFER_TEST_MONGODB_URL`,
//! by default the local test server that `scripts/services` starts. A server that cannot be
//! reached fails the test; it never skips.

mod common;
use common::Databases;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    let databases = Databases::new("conf");
    let first = databases.open().await;
    let settings = first.durability().await.expect("settings");
    println!(
        "server: {} {} ({}, {})",
        settings.server, settings.version, settings.topology, settings.engine
    );
    xfer_store::conformance::run_all_opened(|| databases.open()).await;
    xfer_store::conformance::run_timelines(|| databases.open()).await;
}
