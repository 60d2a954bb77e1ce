//! `xfer worker`: an executor and sweeper process over shared shards, with no API. Any
//! number run beside `xfer serve` processes against the same databases; they share the
//! work only through the transfer records' claims (a lapsed lease is taken over by one
//! claimer, whose epoch fences out the others), so a worker may die at any instant and
//! another one, or a server, finishes what it held.
//!
//! A pass every `sweep_interval_ms`: scan each shard for transfers whose owner's lease
//! lapsed (or whose hold expired), claim and finish them, prune tombstones past their
//! horizon. The same [`Service::sweep`](crate::service::Service::sweep) as the server's.

use crate::config::{ServeConfig, ShardSpec};
use crate::metrics::Metrics;
use crate::server::assemble;
use crate::stores;
use std::future::Future;
use std::sync::Arc;
use xfer_core::{Clock, SystemClock};
use xfer_engine::{Sleeper, TokioSleeper};

/// Runs passes until `shutdown` completes, then finishes the pass under way. Answers the
/// number of passes.
pub async fn run(cfg: ServeConfig, shutdown: impl Future<Output = ()>) -> Result<u64, String> {
    if stores::layout(&cfg)
        .iter()
        .any(|s| matches!(s, ShardSpec::Embedded))
    {
        return Err(
            "xfer worker needs shards other processes can reach (--store postgres, mysql, \
                    mongodb or redis); the embedded store belongs to the one process that \
                    opened it"
                .into(),
        );
    }
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let store = stores::open(&cfg, clock.clone()).await?;
    let svc = assemble(&cfg, &store, Arc::new(Metrics::new()), clock, "worker")?;
    tracing::info!(
        owner = %svc.executor().owner(),
        shards = cfg.shards,
        interval_ms = cfg.sweep_interval_ms,
        "worker running"
    );
    let mut passes = 0;
    tokio::pin!(shutdown);
    loop {
        svc.sweep().await;
        passes += 1;
        tokio::select! {
            _ = TokioSleeper.sleep(cfg.sweep_interval_ms) => {}
            _ = &mut shutdown => break,
        }
    }
    drop(svc);
    tokio::task::spawn_blocking(move || store.close())
        .await
        .map_err(|e| e.to_string())??;
    tracing::info!(passes, "worker stopped");
    Ok(passes)
}
