//! The store conformance suite (the same one the Memory and embedded stores pass) against a
//! real PostgreSQL server: `XFER_TEST_POSTGRES_URL`, by default the local server that
//! `scripts/services` starts. A server that cannot be reached fails the test; it never skips.

mod common;
use common::Schemas;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    let schemas = Schemas::new("conf");
    xfer_store::conformance::run_all_opened(|| schemas.open()).await;
    xfer_store::conformance::run_timelines(|| schemas.open()).await;
    xfer_store::conformance::run_one_phase_committing(|| schemas.open()).await;
    xfer_store::conformance::run_events(|| schemas.open()).await;
}

/// Refund links sum the original's amounts in `numeric`: held to the Memory store's
/// integers, near 2^53 and 2^63 (`xfer_store::differential`). Seed 8: since originals may be
/// captured in part, seed 7 draws no refund that fails to reverse its original, on the
/// Memory store too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refund_links_match_the_memory_store() {
    let schemas = Schemas::new("refunds");
    xfer_store::differential::refund_links_same_as_memory(&schemas.open().await, 8).await;
}

/// Hold extensions compare expiries in SQL: held to the Memory store's integers, with its
/// change feed (an extension adds no event).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extensions_match_the_memory_store() {
    let schemas = Schemas::new("extend");
    let never = i64::MAX as u64;
    xfer_store::differential::extensions_same_as_memory(&schemas.open().await, 11, never, true)
        .await;
}

/// Account steps check sums in `numeric` and store bigints: held to the Memory store's
/// integers, near 2^53 and 2^63, posts in part included (`xfer_store::differential`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_arithmetic_matches_the_memory_store() {
    let schemas = Schemas::new("diff");
    for seed in 1..=6u64 {
        xfer_store::differential::same_as_memory(&schemas.open().await, seed, 400).await;
    }
}
