//! [`Server`]: `xfer serve` as a library call. [`Server::start`] opens the store (the
//! embedded one recovering what a previous run left, or PostgreSQL; see [`stores`]),
//! builds the shards (each one metered, concurrent calls merged into one), the executors
//! and the sweeper loop ([`assemble`]), binds the listener and serves.
//! [`Server::shutdown`] is the graceful stop SIGTERM/SIGINT trigger:
//!
//! 1. stop accepting; requests under way finish (their transfers are driven to an outcome);
//! 2. wait up to `shutdown_grace_ms` for transfers answered "accepted" to finish; the rest
//!    are durable in `initial` or later, and the next start's sweep finishes them;
//! 3. stop the sweeper after its pass, the sinks and the webhooks' deliveries (an event
//!    under way is sent again by the next start), and close the store (a last checkpoint).
//!
//! Nothing acknowledged is lost at any point: every answer was preceded by its fsync.

use crate::api::{self, App};
use crate::config::{LogFormat, ServeConfig};
use crate::connections::Limited;
use crate::metrics::{CountingSleeper, Metrics, Stopwatch};
use crate::service::Service;
use crate::sink::webhook::Webhooks;
use crate::stats::Overview;
use crate::stores;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use xfer_core::{Clock, OwnerId, SystemClock};
use xfer_engine::{
    Cluster, Config, Executor, Retry, Router, Sleeper, SweepConfig, Sweeper, TokioSleeper,
};
use xfer_store::{Coalesce, Intercept, Store};

/// A running server.
pub struct Server {
    addr: SocketAddr,
    app: Arc<App>,
    log_syncs: Option<xfer_store_embedded::SyncCount>,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<(), String>>,
}

impl Server {
    /// Opens the store, recovers, binds `cfg.listen` and starts serving. Errors say what
    /// could not be done (the directory is in use, the address is taken, …).
    pub async fn start(cfg: ServeConfig) -> Result<Server, String> {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let store = stores::open(&cfg, clock.clone()).await?;
        let log_syncs = store.log_syncs();

        let metrics = Arc::new(Metrics::new());
        let svc = Arc::new(assemble(&cfg, &store, metrics, clock, "serve")?);
        let webhooks = Arc::new(Webhooks::open(
            cfg.data_dir.join("webhooks"),
            cfg.webhooks,
            svc.clone(),
        )?);
        let (stop, stopped) = watch::channel(false);
        let app = Arc::new(App {
            svc,
            webhooks,
            tokens: cfg.tokens.clone(),
            body_limit: cfg.body_limit_bytes,
            stopping: stopped.clone(),
            overview: Overview::new(
                crate::stores::layout(&cfg)
                    .iter()
                    .map(crate::config::ShardSpec::kind)
                    .collect(),
            ),
            sign_ins: Default::default(),
        });

        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| format!("listen on {}: {e}", cfg.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let sweeps = tokio::spawn(sweep_loop(
            app.clone(),
            stopped.clone(),
            cfg.sweep_interval_ms,
        ));
        let dir = cfg.data_dir.join("sinks");
        let mut sinks = Vec::new();
        if let Some(nats) = cfg.sink_nats.clone() {
            let connect = move || {
                let nats = nats.clone();
                async move { crate::sink::nats::NatsSink::connect(&nats).await }
            };
            let file = crate::sink::CursorFile::new(&dir, "nats");
            sinks.push(tokio::spawn(sink(
                app.clone(),
                connect,
                file,
                stopped.clone(),
            )));
        }
        if let Some(amqp) = cfg.sink_amqp.clone() {
            let connect = move || {
                let amqp = amqp.clone();
                async move { crate::sink::amqp::AmqpSink::connect(&amqp).await }
            };
            let file = crate::sink::CursorFile::new(&dir, "amqp");
            sinks.push(tokio::spawn(sink(
                app.clone(),
                connect,
                file,
                stopped.clone(),
            )));
        }
        let grace = cfg.shutdown_grace_ms;
        let max_connections = cfg.max_connections;
        let served_app = app.clone();
        let task = tokio::spawn(async move {
            let app = served_app;
            let mut stopping = stopped.clone();
            let listener = Limited::new(listener, max_connections);
            let served = axum::serve(listener, api::router(app.clone()))
                .with_graceful_shutdown(async move {
                    let _ = stopping.wait_for(|s| *s).await;
                })
                .await
                .map_err(|e| format!("serve: {e}"));
            let left = app.svc.drain_background(grace).await;
            if left > 0 {
                tracing::info!(
                    batches = left,
                    "accepted transfers left to the next start's recovery"
                );
            }
            let _ = sweeps.await;
            for sink in sinks {
                let _ = sink.await;
            }
            app.webhooks.shutdown().await;
            drop(app);
            tokio::task::spawn_blocking(move || store.close())
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("closing the store: {e}"))?;
            tracing::info!("stopped");
            served
        });
        tracing::info!(%addr, auth = !cfg.tokens.is_empty(), "listening");
        Ok(Server {
            addr,
            app,
            log_syncs,
            stop,
            task,
        })
    }

    /// The address it listens on (the port chosen when configured with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The service behind the API (in-process callers: `xfer bench --via library`).
    pub fn service(&self) -> &Service {
        &self.app.svc
    }

    /// The embedded store's log syncs (group commits) so far; `None` on other stores.
    pub fn log_syncs(&self) -> Option<u64> {
        self.log_syncs.as_ref().map(|c| c.get())
    }

    /// Stops gracefully (see the module docs) and waits until the store is closed.
    pub async fn shutdown(self) -> Result<(), String> {
        let Server {
            app, stop, task, ..
        } = self;
        drop(app);
        let _ = stop.send(true);
        task.await.map_err(|e| e.to_string())?
    }
}

/// The machinery every xfer process runs over the shards (`xfer serve` and `xfer worker`):
/// each shard metered and its concurrent calls merged, the router, an executor and a
/// sweeper with owner ids unique to this process (`role-pid-start`), and the [`Service`].
pub fn assemble(
    cfg: &ServeConfig,
    store: &stores::Opened,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    role: &str,
) -> Result<Service, String> {
    let shards: Vec<Arc<dyn Store>> = store
        .shards
        .clone()
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let metered = Intercept::new(s, meter(metrics.clone(), i))
                .with_ahead(meter_ahead(metrics.clone(), i));
            Arc::new(Coalesce::new(metered, cfg.store_calls_per_shard)) as Arc<dyn Store>
        })
        .collect();
    // Rules were checked against the layout (`ServeConfig::check`).
    let router = cfg
        .routes
        .iter()
        .fold(Router::hash(shards.len()), |r, rule| {
            r.with_rule(rule.clone())
        });
    let cluster = Arc::new(Cluster::new(shards, router));
    let protocol = Config {
        lease_ms: cfg.lease_ms,
        skew_ms: cfg.skew_ms,
        claim_grace_ms: cfg.lease_ms,
    };
    let (pid, started_ms) = (std::process::id(), clock.now().as_ms());
    let owner = |r: &str| owner_id(r, pid, started_ms);
    let executor = Executor::new(
        cluster.clone(),
        owner(role)?,
        protocol,
        clock.clone(),
        Retry::new(cfg.retry, Arc::new(CountingSleeper(metrics.clone()))),
    );
    let sweeper = Sweeper::new(
        Executor::new(
            cluster,
            owner(&format!("{role}.sweep"))?,
            protocol,
            clock,
            Retry::new(cfg.retry, Arc::new(TokioSleeper)),
        ),
        SweepConfig {
            interval_ms: cfg.sweep_interval_ms,
            events_retention_ms: cfg.events_retention_hours.saturating_mul(3_600_000),
            escalate_after: cfg.escalate_after,
            ..SweepConfig::default()
        },
    );
    Ok(Service::new(executor, sweeper, metrics, cfg.stuck_after_ms))
}

/// Every call to shard `index` counted and timed.
fn meter<S: Store>(metrics: Arc<Metrics>, index: usize) -> xfer_store::ExecuteHook<S> {
    Box::new(move |inner, ops| {
        let metrics = metrics.clone();
        Box::pin(async move {
            let watch = Stopwatch::start();
            let n = ops.len();
            let result = inner.execute(ops).await;
            metrics.round_trip(index, n, Some(watch.seconds()), result.is_ok());
            result
        })
    })
}

/// As [`meter`], for calls answered before their sync: counted, but their latency (no
/// wait for the disk) stays out of the round-trip histogram.
fn meter_ahead<S: Store>(metrics: Arc<Metrics>, index: usize) -> xfer_store::AheadHook<S> {
    Box::new(move |inner, ops| {
        let metrics = metrics.clone();
        Box::pin(async move {
            let n = ops.len();
            let result = inner.execute_ahead(ops).await;
            metrics.round_trip(index, n, None, result.is_ok());
            result
        })
    })
}

/// A sink of the change feed: connects (again every few seconds until it can), then
/// publishes until the server stops (`sink::run`).
async fn sink<P, C, F>(
    app: Arc<App>,
    connect: C,
    file: crate::sink::CursorFile,
    mut stopped: watch::Receiver<bool>,
) where
    P: crate::sink::Publisher,
    C: Fn() -> F,
    F: std::future::Future<Output = Result<P, String>>,
{
    let publisher = loop {
        match connect().await {
            Ok(p) => break p,
            Err(e) => {
                tracing::warn!(error = %e, "a sink cannot connect yet");
                tokio::select! {
                    () = TokioSleeper.sleep(2_000) => {}
                    _ = stopped.wait_for(|s| *s) => return,
                }
            }
        }
    };
    crate::sink::run(&app.svc, &publisher, &file, crate::sink::PAGE, stopped).await;
}

async fn sweep_loop(app: Arc<App>, mut stopped: watch::Receiver<bool>, interval_ms: u64) {
    loop {
        app.svc.sweep().await;
        let pause = TokioSleeper.sleep(interval_ms);
        tokio::select! {
            _ = pause => {}
            _ = stopped.wait_for(|s| *s) => return,
        }
    }
}

/// The owner id of this process's `role` (`serve`, `worker`, their `.sweep`): unique per
/// process incarnation, by its pid and its start in ms, both in base 36 so that
/// `serve-<pid>-<ms>` and `worker-…` fit the 23 bytes an id holds inline
/// ([`xfer_core::id::ID_INLINE_MAX`]). Longer (`serve-4677-1764110431234` in decimal), it
/// would put in every transfer record one shared `Arc`, whose count both runtime threads
/// change at each copy of a record or op (`docs/benchmarks.md#owner-ids-inline`).
fn owner_id(role: &str, pid: u32, started_ms: u64) -> Result<OwnerId, String> {
    let id = format!("{role}-{}-{}", base36(u64::from(pid)), base36(started_ms));
    OwnerId::new(&id).map_err(|e| e.to_string())
}

/// `n` in base 36, lower case.
fn base36(mut n: u64) -> String {
    let mut digits = Vec::new();
    loop {
        digits.push(char::from_digit((n % 36) as u32, 36).expect("a digit below 36"));
        n /= 36;
        if n == 0 {
            break;
        }
    }
    digits.iter().rev().collect()
}

/// Sends log lines to stderr in `format`, filtered by `filter` (`info`, `warn,xfer=debug`).
pub fn init_logging(format: LogFormat, filter: &str) -> Result<(), String> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let targets: tracing_subscriber::filter::Targets = filter
        .parse()
        .map_err(|e| format!("log filter {filter:?}: {e}"))?;
    let registry = tracing_subscriber::registry().with(targets);
    let text = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => registry.with(text).try_init(),
        LogFormat::Json => registry
            .with(text.json().with_current_span(true).with_span_list(true))
            .try_init(),
    };
    result.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_of_the_busy_roles_fit_inline_and_tell_incarnations_apart() {
        assert_eq!(
            [0, 35, 36, 1_295, 1_296].map(base36),
            ["0", "z", "10", "zz", "100"]
        );
        // Linux pids reach 2^22; 4102444800000 ms is the year 2100.
        for (pid, ms) in [(1, 0), (4_194_304, 4_102_444_800_000)] {
            for role in ["serve", "worker"] {
                let id = owner_id(role, pid, ms).unwrap();
                assert!(
                    id.as_str().len() <= xfer_core::id::ID_INLINE_MAX,
                    "{id} is not held inline"
                );
            }
        }
        let a = owner_id("serve", 12, 1_764_110_431_234).unwrap();
        assert_eq!(a.as_str(), "serve-c-mif5swea");
        assert_ne!(a, owner_id("serve", 12, 1_764_110_431_235).unwrap());
        assert_ne!(a, owner_id("serve", 13, 1_764_110_431_234).unwrap());
    }
}
