//! [`Delivery`]: the change feed to one webhook endpoint, the [`Publisher`] its task hands
//! to [`crate::sink::run`]. The events of a page go in order, each POSTed and signed until
//! an answer in 2xx or the last attempt (a wait doubling from `backoff_ms` up to
//! `backoff_max_ms` between attempts, jittered so that endpoints that failed together do
//! not retry together), then set aside as a dead letter, durably. The page is published
//! once each of its events was delivered or set aside, so the cursor never passes an
//! event that is in neither place. An event already among the dead letters is not tried
//! again (its page sent again after a restart): it has had its attempts.

use super::dead_letters::{DeadLetter, DeadLetters};
use super::endpoint::Endpoint;
use super::poster::{Poster, Target};
use super::signature;
use super::WebhookSettings;
use crate::service::Service;
use crate::sink::{Outgoing, Publisher};
use axum::body::Bytes;
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::value::RawValue;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use xfer_engine::{Sleeper, TokioSleeper};
use xfer_store::BoxFuture;

/// What one endpoint's deliveries came to since the server started.
#[derive(Debug, Default)]
pub struct Status {
    running: AtomicBool,
    delivered: AtomicU64,
    failed_attempts: AtomicU64,
    last: Mutex<Last>,
}

#[derive(Debug, Default)]
struct Last {
    error: Option<String>,
    error_at_ms: Option<u64>,
    delivered_at_ms: Option<u64>,
    /// Why delivery stopped, when it stopped for a reason of its own.
    halted: Option<String>,
}

impl Status {
    /// Its task runs (or stopped: see `halted`).
    pub fn set_running(&self, running: bool) {
        self.running.store(running, Ordering::Relaxed);
    }

    /// An event was delivered at `at_ms`.
    pub fn delivered(&self, at_ms: u64) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
        self.last.lock().expect("status").delivered_at_ms = Some(at_ms);
    }

    /// An attempt failed at `at_ms` for `why`.
    pub fn failed(&self, why: &str, at_ms: u64) {
        self.failed_attempts.fetch_add(1, Ordering::Relaxed);
        self.note(why, at_ms);
    }

    /// Delivery stopped (or never started) at `at_ms` for `why`.
    pub fn halted(&self, why: &str, at_ms: u64) {
        self.set_running(false);
        self.note(why, at_ms);
        self.last.lock().expect("status").halted = Some(why.to_string());
    }

    fn note(&self, why: &str, at_ms: u64) {
        let mut last = self.last.lock().expect("status");
        last.error = Some(why.to_string());
        last.error_at_ms = Some(at_ms);
    }

    /// The API's view, with the list's count of `dead_letters` (`None`: the list could not
    /// be read).
    pub fn json(&self, dead_letters: Option<usize>) -> serde_json::Value {
        let last = self.last.lock().expect("status");
        serde_json::json!({
            "running": self.running.load(Ordering::Relaxed),
            "halted": last.halted,
            "delivered": self.delivered.load(Ordering::Relaxed),
            "failed_attempts": self.failed_attempts.load(Ordering::Relaxed),
            "last_error": last.error,
            "last_error_at_ms": last.error_at_ms,
            "last_delivered_at_ms": last.delivered_at_ms,
            "dead_letters": dead_letters,
        })
    }
}

/// One endpoint's publisher. See the module docs.
pub struct Delivery {
    name: String,
    endpoint: Arc<Endpoint>,
    settings: WebhookSettings,
    poster: tokio::sync::Mutex<Poster>,
    dead: Arc<DeadLetters>,
    status: Arc<Status>,
    svc: Arc<Service>,
    stopped: watch::Receiver<bool>,
}

/// How the attempts at one event ended.
enum Attempts {
    Delivered,
    /// Every attempt failed; the last one for this reason.
    Failed(String),
    /// The endpoint's task was told to stop.
    Stopped,
}

impl Delivery {
    /// The publisher of `endpoint` at `target` (its URL), named `webhook:<id>` in logs and
    /// metrics.
    pub fn new(
        endpoint: Arc<Endpoint>,
        target: Target,
        settings: WebhookSettings,
        dead: Arc<DeadLetters>,
        status: Arc<Status>,
        svc: Arc<Service>,
        stopped: watch::Receiver<bool>,
    ) -> Delivery {
        Delivery {
            name: format!("webhook:{}", endpoint.id),
            poster: tokio::sync::Mutex::new(Poster::new(target)),
            endpoint,
            settings,
            dead,
            status,
            svc,
            stopped,
        }
    }

    async fn deliver(&self, e: &Outgoing) -> Attempts {
        let mut poster = self.poster.lock().await;
        let mut last_error = String::new();
        for attempt in 1..=self.settings.attempts {
            if attempt > 1
                && self
                    .pause(self.settings.backoff(attempt - 1, random()))
                    .await
            {
                return Attempts::Stopped;
            }
            let mut stopped = self.stopped.clone();
            let outcome = tokio::select! {
                r = post_signed(&mut poster, &self.endpoint, e.id.as_str(), e.kind, &e.body, &self.svc, self.settings.timeout_ms) => r,
                _ = stopped.wait_for(|s| *s) => return Attempts::Stopped,
            };
            let now = self.svc.now().as_ms();
            match outcome {
                Ok(()) => {
                    self.status.delivered(now);
                    return Attempts::Delivered;
                }
                Err(why) => {
                    self.status.failed(&why, now);
                    self.svc.metrics().sink_failed(&self.name);
                    tracing::debug!(sink = %self.name, event = %e.id, attempt, error = %why, "a webhook attempt failed");
                    last_error = why;
                }
            }
        }
        Attempts::Failed(last_error)
    }

    /// Waits `ms`; true when the task was told to stop meanwhile.
    async fn pause(&self, ms: u64) -> bool {
        let mut stopped = self.stopped.clone();
        tokio::select! {
            () = TokioSleeper.sleep(ms) => false,
            _ = stopped.wait_for(|s| *s) => true,
        }
    }
}

impl Publisher for Delivery {
    fn name(&self) -> &str {
        &self.name
    }

    fn publish<'a>(&'a self, events: &'a [Outgoing]) -> BoxFuture<'a, Result<usize, String>> {
        Box::pin(async move {
            let mut delivered = 0;
            for e in events.iter().filter(|e| self.endpoint.wants(e.kind)) {
                if self.dead.holds(&e.id) {
                    // Set aside already: this page is sent again (a restart in its middle)
                    // and the event had every attempt then.
                    tracing::debug!(sink = %self.name, event = %e.id, "already a dead letter: not sent again");
                    continue;
                }
                match self.deliver(e).await {
                    Attempts::Delivered => delivered += 1,
                    Attempts::Stopped => return Err("stopped".into()),
                    Attempts::Failed(last_error) => {
                        let body = String::from_utf8(e.body.clone())
                            .ok()
                            .and_then(|s| RawValue::from_string(s).ok())
                            .ok_or_else(|| format!("{}: the body is not JSON", e.id))?;
                        tracing::warn!(sink = %self.name, event = %e.id, error = %last_error,
                            attempts = self.settings.attempts, "a webhook event failed every attempt: set aside as a dead letter");
                        self.dead
                            .append(DeadLetter {
                                seq: 0,
                                event_id: e.id.clone(),
                                kind: e.kind.to_string(),
                                attempts: self.settings.attempts,
                                last_error,
                                at_ms: self.svc.now().as_ms(),
                                body,
                            })
                            .await?;
                        self.svc.metrics().sink_dead_lettered(&self.name);
                    }
                }
            }
            Ok(delivered)
        })
    }
}

/// One attempt: `body` POSTed to `endpoint` with its headers and signature, answered in
/// 2xx within `timeout_ms`; the error says what happened instead.
pub async fn post_signed(
    poster: &mut Poster,
    endpoint: &Endpoint,
    id: &str,
    kind: &str,
    body: &[u8],
    svc: &Service,
    timeout_ms: u64,
) -> Result<(), String> {
    let timestamp = svc.now().as_ms() / 1_000;
    let headers = [
        ("xfer-event-id", id.to_string()),
        ("xfer-event-type", kind.to_string()),
        ("xfer-timestamp", timestamp.to_string()),
        (
            "xfer-signature",
            signature::header(&endpoint.secret, timestamp, body),
        ),
    ];
    let answer = tokio::select! {
        a = poster.post(&headers, Bytes::copy_from_slice(body)) => a?,
        () = TokioSleeper.sleep(timeout_ms) => return Err(format!("no answer within {timeout_ms} ms")),
    };
    if (200..300).contains(&answer.status) {
        Ok(())
    } else {
        Err(format!("HTTP {}", answer.status))
    }
}

/// A random number from the operating system (0 if it fails: no jitter, still a wait).
fn random() -> u64 {
    let mut b = [0u8; 8];
    SystemRandom::new()
        .fill(&mut b)
        .map_or(0, |()| u64::from_le_bytes(b))
}
