//! The store conformance suite (the same one the Memory, embedded, PostgreSQL and Redis
//! stores pass) against a real MySQL/MariaDB server: `XFER_TEST_MYSQL_URL`, by default the
//! local server that `scripts/services` starts. A server that cannot be reached fails the
//! test; it never skips.

mod common;
use common::Databases;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    let databases = Databases::new("conf");
    let first = databases.open().await;
    let settings = first.durability().await.expect("settings");
    println!("server: {} {}", settings.server, settings.version);
    xfer_store::conformance::run_all_opened(|| databases.open()).await;
    xfer_store::conformance::run_timelines(|| databases.open()).await;
    xfer_store::conformance::run_one_phase_committing(|| databases.open()).await;
}
