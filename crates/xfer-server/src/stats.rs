//! The overview (`GET /v1/stats`, the console's first page): what this process answered
//! and how fast, what is in flight and stuck, what was canceled in the last hour, the
//! audit's totals and verdict, and each shard's health.
//!
//! Rates are left to the reader: it takes two overviews and divides the difference of the
//! counters by the time between them, as a Prometheus query does with `/metrics`.

use crate::metrics::Stopwatch;
use crate::service::Service;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use xfer_core::Timestamp;
use xfer_engine::{AuditReport, ExecError};
use xfer_store::{EventKind, FeedPosition, StoreError};

/// The audit reads every account: overviews within this long of one share it.
const AUDIT_REUSE_MS: u64 = 10_000;
/// How long a shard has to answer the health probe.
const PROBE_TIMEOUT_MS: u64 = 2_000;
/// Events read per shard at most to count the last hour's cancellations.
const CANCELED_SCAN_MAX: usize = 50_000;
const HOUR_MS: u64 = 3_600_000;

/// What the overview keeps between requests: the shards' kinds, the last audit.
pub struct Overview {
    kinds: Vec<&'static str>,
    audit: Mutex<Option<(Timestamp, Arc<AuditReport>)>>,
}

/// One shard's health.
#[derive(Debug, Serialize)]
pub struct ShardHealth {
    /// Its place.
    pub shard: usize,
    /// `embedded`, `postgres`, `mysql`, `mongodb` or `redis`.
    pub store: &'static str,
    /// It answered a one-account read in time.
    pub reachable: bool,
    /// How long that read took, in milliseconds.
    pub round_trip_ms: Option<f64>,
    /// Why it is not reachable.
    pub error: Option<String>,
}

/// The overview. See the module docs.
#[derive(Debug, Serialize)]
pub struct Stats {
    /// When it was taken (the service's clock).
    pub at_ms: u64,
    /// Transfers this process answered since it started, by outcome.
    pub answered: BTreeMap<String, u64>,
    /// Submit-to-outcome times of those answers: how many, and their sum.
    pub latency_count: u64,
    /// See `latency_count`.
    pub latency_sum_seconds: f64,
    /// Transfers this process is driving now.
    pub in_flight: i64,
    /// Unfinished transfers past their lease, at the last sweep.
    pub stuck: i64,
    /// Transfers canceled in the last hour (`None`: a store keeps no change feed).
    pub canceled_last_hour: Option<u64>,
    /// The audit (reused for 10 s): totals per asset, in-flight counts, leaks.
    pub audit: Arc<AuditReport>,
    /// No leak found.
    pub clean: bool,
    /// Each shard.
    pub shards: Vec<ShardHealth>,
}

impl Overview {
    /// An overview of shards of these kinds, in shard order.
    pub fn new(kinds: Vec<&'static str>) -> Overview {
        Overview {
            kinds,
            audit: Mutex::new(None),
        }
    }

    /// Takes the overview of `svc`.
    pub async fn take(&self, svc: &Service) -> Result<Stats, ExecError> {
        let now = svc.now();
        let m = svc.metrics();
        let audit = self.audit(svc, now).await?;
        let (latency_count, latency_sum_seconds) = m.transfer_latency();
        Ok(Stats {
            at_ms: now.as_ms(),
            answered: m.transfers_answered(),
            latency_count,
            latency_sum_seconds,
            in_flight: m.transfers_in_flight(),
            stuck: m.transfers_stuck(),
            canceled_last_hour: canceled_since(svc, Timestamp(now.as_ms().saturating_sub(HOUR_MS)))
                .await?,
            clean: audit.is_clean(),
            audit,
            shards: self.health(svc).await,
        })
    }

    async fn audit(&self, svc: &Service, now: Timestamp) -> Result<Arc<AuditReport>, ExecError> {
        if let Some((at, report)) = &*self.audit.lock().expect("not poisoned") {
            if now.as_ms().saturating_sub(at.as_ms()) < AUDIT_REUSE_MS {
                return Ok(Arc::clone(report));
            }
        }
        let report = Arc::new(svc.audit().await?);
        *self.audit.lock().expect("not poisoned") = Some((now, Arc::clone(&report)));
        Ok(report)
    }

    async fn health(&self, svc: &Service) -> Vec<ShardHealth> {
        let mut out = Vec::new();
        for (shard, store) in svc.cluster().shards().iter().enumerate() {
            let watch = Stopwatch::start();
            let probe = tokio::time::timeout(
                std::time::Duration::from_millis(PROBE_TIMEOUT_MS),
                store.accounts(None, 1),
            )
            .await;
            let seconds = watch.seconds();
            let error = match probe {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!("no answer within {PROBE_TIMEOUT_MS} ms")),
            };
            out.push(ShardHealth {
                shard,
                store: self.kinds.get(shard).copied().unwrap_or("unknown"),
                reachable: error.is_none(),
                round_trip_ms: error.is_none().then_some(seconds * 1e3),
                error,
            });
        }
        out
    }
}

/// How many transfers every shard's feed says were canceled at or after `since`, read
/// backwards (at most `CANCELED_SCAN_MAX` events a shard); `None` if a store keeps no feed.
async fn canceled_since(svc: &Service, since: Timestamp) -> Result<Option<u64>, ExecError> {
    let mut n = 0;
    for store in svc.cluster().shards() {
        let mut before = FeedPosition::END;
        let mut scanned = 0;
        'shard: while scanned < CANCELED_SCAN_MAX {
            let page = match store.events_before(before, 1_024).await {
                Ok(page) => page,
                Err(StoreError::Unsupported(_)) => return Ok(None),
                Err(e) => return Err(ExecError::Unavailable(e.to_string())),
            };
            scanned += page.events.len();
            for e in &page.events {
                if e.at < since {
                    break 'shard;
                }
                n += u64::from(e.kind == EventKind::Canceled);
            }
            match page.events.last() {
                Some(last) if page.events.len() == 1_024 => before = last.position,
                _ => break,
            }
        }
    }
    Ok(Some(n))
}
