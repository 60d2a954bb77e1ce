//! The real `xfer serve` binary stopped under concurrent load: killed with SIGKILL (three
//! times in one test, on one data directory) and stopped with SIGTERM. After each restart:
//! every transfer acknowledged to a client is there with that outcome, everything reaches a
//! terminal state, the audit is clean, and the history replays to the balances.

mod common;

use common::*;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use xfer_core::Rng;
use xfer_engine::{Sleeper, TokioSleeper};
use xfer_server::metrics::Stopwatch;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_under_load_loses_nothing_acknowledged() {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let data = tmp.path().join("data");
    let ledger = Arc::new(Ledger::default());
    let mut serve = Serve::start(&data, tmp.path(), 0);
    serve.ready().await;
    setup(&serve.client(), &ledger).await;
    let mut rng = Rng::new(42);
    for cycle in 1..=3u64 {
        let before = ledger.requests.load(Ordering::Relaxed);
        let load_ms = 1_000 + rng.below(1_000);
        load(&[serve.client()], &ledger, cycle, load_ms, move || {
            serve.kill()
        })
        .await;
        let sent = ledger.requests.load(Ordering::Relaxed) - before;
        let counts = ledger.counts(&format!("k{cycle}-"));

        let watch = Stopwatch::start();
        serve = Serve::start(&data, tmp.path(), cycle as usize);
        if cycle == 2 {
            // Killed again right after it starts (during its start-up sweep), then restarted.
            TokioSleeper.sleep(30).await;
            serve.kill();
            serve = Serve::start(&data, tmp.path(), 10 + cycle as usize);
        }
        serve.ready().await;
        let ready_s = watch.seconds();
        let c = serve.client();
        let unfinished = check_acknowledged(&c, &ledger).await;
        let retried = retry_unknown(&c, &ledger).await;
        let report = quiet(&c, &ledger, tmp.path()).await;
        let quiet_s = watch.seconds();
        check_settled(&c, &ledger, &report).await;
        odd_answers(&ledger);
        println!(
            "kill cycle {cycle}: SIGKILL after {load_ms} ms and {sent} requests (answered: {}); \
             restart{} ready in {ready_s:.2} s, {unfinished} unfinished found, {retried} unanswered retried, \
             all terminal after {quiet_s:.2} s{}; every acknowledged outcome kept, audit clean, balances replay",
            summary(&counts),
            unavailable(&ledger),
            if cycle == 2 { " (killed again 30 ms after it started, and restarted)" } else { "" }
        );
    }
    let status = serve.terminate();
    assert!(status.success(), "exit after SIGTERM: {status}");
    for w in log_warnings(tmp.path()) {
        println!("{w}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_under_load_exits_zero_and_loses_nothing_acknowledged() {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let data = tmp.path().join("data");
    let ledger = Arc::new(Ledger::default());
    let serve = Serve::start(&data, tmp.path(), 0);
    serve.ready().await;
    setup(&serve.client(), &ledger).await;
    let status = Arc::new(Mutex::new(None));
    let s2 = status.clone();
    load(&[serve.client()], &ledger, 1, 1_200, move || {
        *s2.lock().unwrap() = Some(serve.terminate());
    })
    .await;
    let status = status.lock().unwrap().take().expect("an exit status");
    assert!(status.success(), "exit after SIGTERM under load: {status}");
    let counts = ledger.counts("k1-");

    let watch = Stopwatch::start();
    let serve = Serve::start(&data, tmp.path(), 1);
    serve.ready().await;
    let ready_s = watch.seconds();
    let c = serve.client();
    let unfinished = check_acknowledged(&c, &ledger).await;
    let retried = retry_unknown(&c, &ledger).await;
    let report = quiet(&c, &ledger, tmp.path()).await;
    let quiet_s = watch.seconds();
    check_settled(&c, &ledger, &report).await;
    odd_answers(&ledger);
    println!(
        "SIGTERM under load: {status} (answered: {}); restart ready in {ready_s:.2} s, \
         {unfinished} unfinished found, {retried} unanswered retried, all terminal after {quiet_s:.2} s{}; \
         every acknowledged outcome kept, audit clean, balances replay",
        summary(&counts),
        unavailable(&ledger)
    );
    let status = serve.terminate();
    assert!(status.success(), "exit after SIGTERM: {status}");
    for w in log_warnings(tmp.path()) {
        println!("{w}");
    }
}
