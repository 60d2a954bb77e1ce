//! Prometheus metrics, served at `/metrics` in the text format.
//!
//! | metric | what |
//! |---|---|
//! | `xfer_http_requests_total{route,method,status}` | requests answered |
//! | `xfer_http_request_duration_seconds{route}` | request latency |
//! | `xfer_transfers_total{outcome}` | transfers answered: done, canceled, held, accepted, rejected, failed |
//! | `xfer_transfer_duration_seconds` | submit to outcome (decided and finished, or held) |
//! | `xfer_transfers_in_flight` | transfers this process is driving now |
//! | `xfer_transfers_stuck` | unfinished transfers whose owner lapsed more than `stuck_after_ms` ago, and the escalated (each sweep) |
//! | `xfer_transfers_escalated` | unfinished transfers escalated to a person: their recovery kept failing, sweepers leave them until a re-drive (each sweep, from one lease after the mark) |
//! | `xfer_retries_total` | store calls retried after a failure |
//! | `xfer_store_round_trips_total{shard}`, `xfer_store_ops_total{shard}`, `xfer_store_errors_total{shard}`, `xfer_store_round_trip_seconds{shard}` | calls to each shard, the ops they carried, failures, latency (of calls that wait for durability; the embedded store's protocol steps answer ahead of the sync and are only counted) |
//! | `xfer_sweeper_recovered_total`, `xfer_sweeper_pruned_total` | transfers finished by the sweeper, tombstones dropped |
//! | `xfer_sink_published_total{sink}`, `xfer_sink_failures_total{sink}` | events a sink's broker confirmed (a webhook endpoint's receiver: answered 2xx); failed reads or publishes (a webhook's: each failed attempt) |
//! | `xfer_sink_lag_seconds{sink}`, `xfer_sink_pending_events{sink}` | how old the oldest event not yet confirmed is (0: caught up); events after the sink's cursor, the events behind (counted up to 100,000, at most every 5 s while a page is full; exact once within a page) |
//! | `xfer_sink_dead_letters_total{sink}` | events a webhook endpoint (`sink="webhook:<id>"`) did not take after every attempt, set aside in its dead-letter list |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use xfer_engine::{Sleeper, TokioSleeper};
use xfer_store::BoxFuture;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    method: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabels {
    shard: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkLabels {
    sink: String,
}

/// Every outcome `xfer_transfers_total` counts.
const OUTCOMES: [&str; 6] = ["done", "canceled", "held", "accepted", "rejected", "failed"];

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency() -> Histogram {
    // 50 µs to ~26 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 20))
}

/// Every metric of the service. See the module docs.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_seconds: HistogramFamily<RouteLabels>,
    transfers: Family<OutcomeLabels, Counter>,
    transfer_seconds: Histogram,
    /// `transfer_seconds`' count and sum (in µs), which the histogram does not give back.
    transfer_count: std::sync::atomic::AtomicU64,
    transfer_us: std::sync::atomic::AtomicU64,
    in_flight: Gauge,
    stuck: Gauge,
    escalated: Gauge,
    retries: Counter,
    round_trips: Family<ShardLabels, Counter>,
    store_ops: Family<ShardLabels, Counter>,
    store_errors: Family<ShardLabels, Counter>,
    round_trip_seconds: HistogramFamily<ShardLabels>,
    recovered: Counter,
    pruned: Counter,
    sink_published: Family<SinkLabels, Counter>,
    sink_failures: Family<SinkLabels, Counter>,
    sink_lag_seconds: Family<SinkLabels, FloatGauge>,
    sink_pending: Family<SinkLabels, Gauge>,
    sink_dead_letters: Family<SinkLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// All metrics at zero.
    pub fn new() -> Metrics {
        let mut m = Metrics {
            registry: Registry::default(),
            requests: Family::default(),
            request_seconds: Family::new_with_constructor(latency),
            transfers: Family::default(),
            transfer_seconds: latency(),
            transfer_count: Default::default(),
            transfer_us: Default::default(),
            in_flight: Gauge::default(),
            stuck: Gauge::default(),
            escalated: Gauge::default(),
            retries: Counter::default(),
            round_trips: Family::default(),
            store_ops: Family::default(),
            store_errors: Family::default(),
            round_trip_seconds: Family::new_with_constructor(latency),
            recovered: Counter::default(),
            pruned: Counter::default(),
            sink_published: Family::default(),
            sink_failures: Family::default(),
            sink_lag_seconds: Family::default(),
            sink_pending: Family::default(),
            sink_dead_letters: Family::default(),
        };
        let r = &mut m.registry;
        r.register(
            "xfer_http_requests",
            "HTTP requests answered",
            m.requests.clone(),
        );
        r.register(
            "xfer_http_request_duration_seconds",
            "HTTP request latency",
            m.request_seconds.clone(),
        );
        r.register(
            "xfer_transfers",
            "Transfers answered, by outcome",
            m.transfers.clone(),
        );
        r.register(
            "xfer_transfer_duration_seconds",
            "Submit to outcome",
            m.transfer_seconds.clone(),
        );
        r.register(
            "xfer_transfers_in_flight",
            "Transfers this process is driving now",
            m.in_flight.clone(),
        );
        r.register(
            "xfer_transfers_stuck",
            "Unfinished transfers whose owner lapsed more than stuck_after_ms ago",
            m.stuck.clone(),
        );
        r.register(
            "xfer_transfers_escalated",
            "Unfinished transfers escalated to a person, left alone until re-driven",
            m.escalated.clone(),
        );
        r.register(
            "xfer_retries",
            "Store calls retried after a failure",
            m.retries.clone(),
        );
        r.register(
            "xfer_store_round_trips",
            "Calls to a shard",
            m.round_trips.clone(),
        );
        r.register(
            "xfer_store_ops",
            "Single-record operations sent to a shard",
            m.store_ops.clone(),
        );
        r.register(
            "xfer_store_errors",
            "Failed calls to a shard",
            m.store_errors.clone(),
        );
        r.register(
            "xfer_store_round_trip_seconds",
            "Latency of one call to a shard",
            m.round_trip_seconds.clone(),
        );
        r.register(
            "xfer_sweeper_recovered",
            "Abandoned transfers finished by the sweeper",
            m.recovered.clone(),
        );
        r.register(
            "xfer_sweeper_pruned",
            "Tombstones dropped past their horizon",
            m.pruned.clone(),
        );
        r.register(
            "xfer_sink_published",
            "Change-feed events a sink's broker confirmed",
            m.sink_published.clone(),
        );
        r.register(
            "xfer_sink_failures",
            "A sink's failed reads of the feed or publishes (each retried)",
            m.sink_failures.clone(),
        );
        r.register(
            "xfer_sink_lag_seconds",
            "Age of the oldest change-feed event a sink has not had confirmed (0: caught up)",
            m.sink_lag_seconds.clone(),
        );
        r.register(
            "xfer_sink_pending_events",
            "Events after a sink's cursor, not yet confirmed (counted up to 100,000)",
            m.sink_pending.clone(),
        );
        r.register(
            "xfer_sink_dead_letters",
            "Events a webhook endpoint did not take after every attempt (its dead letters)",
            m.sink_dead_letters.clone(),
        );
        m
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    /// One HTTP request answered.
    pub fn request(&self, route: &str, method: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                route: route.to_string(),
                method: method.to_string(),
                status: status.to_string(),
            })
            .inc();
        self.request_seconds
            .get_or_create(&RouteLabels {
                route: route.to_string(),
            })
            .observe(seconds);
    }

    /// One transfer answered with `outcome` after `seconds`.
    pub fn transfer(&self, outcome: &str, seconds: f64) {
        self.transfers
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_string(),
            })
            .inc();
        if !matches!(outcome, "rejected" | "failed") {
            self.transfer_seconds.observe(seconds);
            self.transfer_count
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.transfer_us
                .fetch_add((seconds * 1e6) as u64, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The transfers answered so far, by outcome (every outcome, 0 if none yet).
    pub fn transfers_answered(&self) -> std::collections::BTreeMap<String, u64> {
        OUTCOMES
            .iter()
            .map(|o| {
                let labels = OutcomeLabels {
                    outcome: o.to_string(),
                };
                (o.to_string(), self.transfers.get_or_create(&labels).get())
            })
            .collect()
    }

    /// How many submit-to-outcome times were observed, and their sum in seconds.
    pub fn transfer_latency(&self) -> (u64, f64) {
        let us = self.transfer_us.load(std::sync::atomic::Ordering::Relaxed);
        (
            self.transfer_count
                .load(std::sync::atomic::Ordering::Relaxed),
            us as f64 / 1e6,
        )
    }

    /// Transfers this process is driving now.
    pub fn transfers_in_flight(&self) -> i64 {
        self.in_flight.get()
    }

    /// The stuck count of the last sweep.
    pub fn transfers_stuck(&self) -> i64 {
        self.stuck.get()
    }

    /// Transfers being driven: `delta` more (or fewer).
    pub fn in_flight(&self, delta: i64) {
        self.in_flight.inc_by(delta);
    }

    /// The stuck count of the last sweep.
    pub fn set_stuck(&self, n: usize) {
        self.stuck.set(n as i64);
    }

    /// The escalated count of the last sweep.
    pub fn set_escalated(&self, n: usize) {
        self.escalated.set(n as i64);
    }

    /// One call to shard `shard` carrying `ops` ops, taking `seconds` if it waited for the
    /// store to make them durable (`None`: answered ahead of the sync).
    pub fn round_trip(&self, shard: usize, ops: usize, seconds: Option<f64>, ok: bool) {
        let l = ShardLabels {
            shard: shard.to_string(),
        };
        self.round_trips.get_or_create(&l).inc();
        self.store_ops.get_or_create(&l).inc_by(ops as u64);
        if !ok {
            self.store_errors.get_or_create(&l).inc();
        }
        if let Some(s) = seconds {
            self.round_trip_seconds.get_or_create(&l).observe(s);
        }
    }

    /// A sink read `pending` events not yet confirmed, the oldest `lag_seconds` old.
    pub fn sink_behind(&self, sink: &str, pending: usize, lag_seconds: f64) {
        let l = SinkLabels {
            sink: sink.to_string(),
        };
        self.sink_pending.get_or_create(&l).set(pending as i64);
        self.sink_lag_seconds.get_or_create(&l).set(lag_seconds);
    }

    /// A sink's broker confirmed `n` events.
    pub fn sink_published(&self, sink: &str, n: usize) {
        let l = SinkLabels {
            sink: sink.to_string(),
        };
        self.sink_published.get_or_create(&l).inc_by(n as u64);
    }

    /// A sink's read or publish failed.
    pub fn sink_failed(&self, sink: &str) {
        let l = SinkLabels {
            sink: sink.to_string(),
        };
        self.sink_failures.get_or_create(&l).inc();
    }

    /// A webhook endpoint's event failed every attempt and was set aside.
    pub fn sink_dead_lettered(&self, sink: &str) {
        let l = SinkLabels {
            sink: sink.to_string(),
        };
        self.sink_dead_letters.get_or_create(&l).inc();
    }

    /// Drops a removed sink's series.
    pub fn sink_forget(&self, sink: &str) {
        let l = SinkLabels {
            sink: sink.to_string(),
        };
        self.sink_published.remove(&l);
        self.sink_failures.remove(&l);
        self.sink_lag_seconds.remove(&l);
        self.sink_pending.remove(&l);
        self.sink_dead_letters.remove(&l);
    }

    /// What a sweep did.
    pub fn sweep(&self, recovered: usize, pruned: usize) {
        self.recovered.inc_by(recovered as u64);
        self.pruned.inc_by(pruned as u64);
    }
}

/// Real time for latency measurements only (never for protocol decisions).
pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    /// Starts now.
    #[allow(clippy::disallowed_methods)] // Reason: measuring latency for metrics.
    pub fn start() -> Stopwatch {
        Stopwatch(std::time::Instant::now())
    }

    /// Seconds since the start.
    pub fn seconds(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

/// The tokio sleeper, counting each pause as one retry.
pub struct CountingSleeper(pub Arc<Metrics>);

impl Sleeper for CountingSleeper {
    fn sleep(&self, ms: u64) -> BoxFuture<'_, ()> {
        self.0.retries.inc();
        Box::pin(async move { TokioSleeper.sleep(ms).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_in_the_text_format() {
        let m = Metrics::new();
        m.request("/v1/transfers", "POST", 200, 0.001);
        m.transfer("done", 0.002);
        m.round_trip(1, 8, Some(0.0005), true);
        m.in_flight(3);
        let text = m.render();
        for needle in [
            "xfer_http_requests_total{route=\"/v1/transfers\",method=\"POST\",status=\"200\"} 1",
            "xfer_transfers_total{outcome=\"done\"} 1",
            "xfer_store_ops_total{shard=\"1\"} 8",
            "xfer_transfers_in_flight 3",
            "xfer_transfer_duration_seconds_bucket",
            "# EOF",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }
}
