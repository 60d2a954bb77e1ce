//! Webhooks: the change feed POSTed to the URLs registered over the API (`/v1/webhooks`).
//! [`Webhooks`] holds the endpoints and runs one task per endpoint, each [`crate::sink::run`]
//! with its own cursor and a [`Delivery`] as its publisher, so that a slow or dead receiver
//! holds up only its own events, never another endpoint's or the API.
//!
//! In the data directory's `webhooks/` (owner-only):
//!
//! - `endpoints.json`: every endpoint with its secret, replaced whole and synced on each
//!   registration and removal;
//! - `<id>.cursor`: the endpoint's cursor ([`CursorFile`]), written at registration at the
//!   feed's end then ([`Service::feed_head`]): it gets the changes made after it was
//!   registered;
//! - `<id>.dead.jsonl`: its dead letters ([`DeadLetters`]).
//!
//! The parts:
//!
//! - [`endpoint`]: an endpoint and the request that registers one.
//! - [`signature`]: the `Xfer-Signature` header.
//! - [`poster`]: the HTTP client, one connection per endpoint.
//! - [`delivery`]: attempts, backoff and dead letters.
//! - [`dead_letters`]: the list of events that failed every attempt.

pub mod dead_letters;
pub mod delivery;
pub mod endpoint;
pub mod poster;
pub mod signature;

use crate::error::{ApiCode, ApiError};
use crate::feed::FeedHead;
use crate::service::Service;
use crate::sink::CursorFile;
use dead_letters::DeadLetters;
use delivery::{post_signed, Delivery, Status};
use endpoint::{Endpoint, EndpointIn};
use poster::Poster;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Events an endpoint takes per page: its cursor is kept after each, so a restart sends at
/// most this many again, and a receiver that stopped answering holds the cursor back for at
/// most this many events' attempts.
const PAGE: usize = 16;

/// How deliveries are attempted (`xfer serve --webhook-*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WebhookSettings {
    /// Attempts at one event before it is set aside as a dead letter.
    pub attempts: u32,
    /// The wait after the first failed attempt, in ms; doubled after each next one.
    pub backoff_ms: u64,
    /// The longest wait between two attempts, in ms.
    pub backoff_max_ms: u64,
    /// How long one attempt (connecting, sending, the answer) may take, in ms.
    pub timeout_ms: u64,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings {
            attempts: 8,
            backoff_ms: 500,
            backoff_max_ms: 60_000,
            timeout_ms: 10_000,
        }
    }
}

impl WebhookSettings {
    /// The wait before attempt `failed + 1`, after `failed` failed ones: `backoff_ms`
    /// doubled `failed - 1` times, at most `backoff_max_ms`, of which the second half is
    /// drawn by `random`.
    pub fn backoff(&self, failed: u32, random: u64) -> u64 {
        let doubled = self
            .backoff_ms
            .saturating_mul(1u64 << failed.saturating_sub(1).min(40));
        let full = doubled.min(self.backoff_max_ms);
        let half = full / 2;
        full - half + random % (half + 1)
    }
}

/// An endpoint and its task.
struct Running {
    endpoint: Arc<Endpoint>,
    status: Arc<Status>,
    dead: Arc<DeadLetters>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Endpoint `id`'s cursor, in `dir`.
fn cursor_of(dir: &std::path::Path, id: &str) -> CursorFile {
    CursorFile::new(dir, id)
}

impl Running {
    /// Stops its task and waits for it (an attempt under way is given up).
    async fn stop(&mut self) {
        let _ = self.stop.send(true);
        let _ = (&mut self.task).await;
    }
}

/// The registered endpoints and their tasks. See the module docs.
pub struct Webhooks {
    dir: PathBuf,
    settings: WebhookSettings,
    svc: Arc<Service>,
    /// In registration order; the lock also orders the writes of `endpoints.json`.
    endpoints: tokio::sync::Mutex<Vec<Running>>,
}

/// The file of every endpoint.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointsFile {
    endpoints: Vec<Endpoint>,
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::api(ApiCode::Unavailable, None, format!("{what}: {e}"))
}

fn not_found(id: &str) -> ApiError {
    ApiError::api(
        ApiCode::WebhookNotFound,
        Some("id"),
        format!("no webhook {id:?}"),
    )
}

impl Webhooks {
    /// The endpoints kept in `dir` (none yet: none), each one's task started.
    pub fn open(
        dir: PathBuf,
        settings: WebhookSettings,
        svc: Arc<Service>,
    ) -> Result<Webhooks, String> {
        let path = dir.join("endpoints.json");
        let kept = match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice::<EndpointsFile>(&bytes)
                    .map_err(|e| format!("{}: {e}", path.display()))?
                    .endpoints
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let mut hooks = Webhooks {
            dir,
            settings,
            svc,
            endpoints: tokio::sync::Mutex::new(Vec::new()),
        };
        let mut running = Vec::with_capacity(kept.len());
        for endpoint in kept {
            running.push(hooks.start(endpoint)?);
        }
        if !running.is_empty() {
            tracing::info!(endpoints = running.len(), "webhooks delivering");
        }
        *hooks.endpoints.get_mut() = running;
        Ok(hooks)
    }

    /// Starts `endpoint`'s task, from its cursor.
    fn start(&self, endpoint: Endpoint) -> Result<Running, String> {
        let endpoint = Arc::new(endpoint);
        let dead = Arc::new(DeadLetters::open(
            self.dir.join(format!("{}.dead.jsonl", endpoint.id)),
        )?);
        let status = Arc::new(Status::default());
        let (stop, stopped) = watch::channel(false);
        let delivery = Delivery::new(
            endpoint.clone(),
            self.settings,
            dead.clone(),
            status.clone(),
            self.svc.clone(),
            stopped.clone(),
        )?;
        let cursor = cursor_of(&self.dir, &endpoint.id);
        let svc = self.svc.clone();
        let task_status = status.clone();
        status.set_running(true);
        let task = tokio::spawn(async move {
            crate::sink::run(&svc, &delivery, &cursor, PAGE, stopped.clone()).await;
            if *stopped.borrow() {
                task_status.set_running(false);
            } else {
                task_status.halted(
                    "delivery stopped: the server's log says why (a cursor behind the change \
                     feed's retention: remove the webhook and register it again)",
                    svc.now().as_ms(),
                );
            }
        });
        Ok(Running {
            endpoint,
            status,
            dead,
            stop,
            task,
        })
    }

    fn save(&self, endpoints: Vec<Endpoint>) -> Result<(), String> {
        let bytes =
            serde_json::to_vec_pretty(&EndpointsFile { endpoints }).map_err(|e| e.to_string())?;
        private_dir(&self.dir)?;
        crate::sink::replace_file(&self.dir.join("endpoints.json"), &bytes, true)
    }

    /// Registers the endpoint `req` asks for, kept and delivering before it is answered:
    /// the endpoint with its secret (the only time it is shown).
    pub async fn create(&self, req: EndpointIn) -> Result<Value, ApiError> {
        let endpoint = req.endpoint(self.svc.now().as_ms())?;
        let start = match self.svc.feed_head().await? {
            FeedHead::At(cursor) => cursor,
            FeedHead::Unsupported(why) => {
                return Err(ApiError::api(ApiCode::NotSupported, None, why))
            }
        };
        let mut endpoints = self.endpoints.lock().await;
        private_dir(&self.dir).map_err(|e| unavailable("the webhooks' directory", e))?;
        let cursor = cursor_of(&self.dir, &endpoint.id);
        cursor
            .write(&start)
            .map_err(|e| unavailable("the webhook's cursor", e))?;
        let mut all: Vec<Endpoint> = endpoints.iter().map(|r| (*r.endpoint).clone()).collect();
        all.push(endpoint.clone());
        if let Err(e) = self.save(all) {
            let _ = cursor.remove();
            return Err(unavailable("the webhook list", e));
        }
        let running = self
            .start(endpoint)
            .map_err(|e| unavailable("the webhook's delivery", e))?;
        let out = serde_json::to_value(running.endpoint.out(true)).expect("an endpoint");
        tracing::info!(webhook = %running.endpoint.id, url = %running.endpoint.url, "webhook registered");
        endpoints.push(running);
        Ok(out)
    }

    /// Every endpoint, without secrets, in registration order.
    pub async fn list(&self) -> Value {
        let endpoints = self.endpoints.lock().await;
        let out: Vec<Value> = endpoints
            .iter()
            .map(|r| serde_json::to_value(r.endpoint.out(false)).expect("an endpoint"))
            .collect();
        json!({ "webhooks": out })
    }

    /// Endpoint `id` with its delivery status.
    pub async fn get(&self, id: &str) -> Result<Value, ApiError> {
        let endpoints = self.endpoints.lock().await;
        let r = endpoints
            .iter()
            .find(|r| r.endpoint.id == id)
            .ok_or_else(|| not_found(id))?;
        let mut out = serde_json::to_value(r.endpoint.out(false)).expect("an endpoint");
        out["status"] = r.status.json(r.dead.count());
        Ok(out)
    }

    /// Removes endpoint `id`: no longer kept, its task stopped, its cursor and dead letters
    /// deleted.
    pub async fn delete(&self, id: &str) -> Result<Value, ApiError> {
        let mut endpoints = self.endpoints.lock().await;
        let i = endpoints
            .iter()
            .position(|r| r.endpoint.id == id)
            .ok_or_else(|| not_found(id))?;
        let rest: Vec<Endpoint> = endpoints
            .iter()
            .filter(|r| r.endpoint.id != id)
            .map(|r| (*r.endpoint).clone())
            .collect();
        self.save(rest)
            .map_err(|e| unavailable("the webhook list", e))?;
        let mut running = endpoints.remove(i);
        drop(endpoints);
        running.stop().await;
        if let Err(e) = cursor_of(&self.dir, id)
            .remove()
            .and_then(|()| running.dead.delete())
        {
            tracing::warn!(webhook = %id, error = %e, "a removed webhook's files remain");
        }
        self.svc
            .metrics()
            .sink_forget(&format!("webhook:{}", running.endpoint.id));
        tracing::info!(webhook = %id, "webhook removed");
        Ok(json!({"id": id, "deleted": true}))
    }

    /// A page of endpoint `id`'s dead letters: at most `limit` numbered after `after`.
    pub async fn dead_letters(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Value, ApiError> {
        let dead = self.dead_of(id).await?;
        let (letters, more) = dead
            .page(after, limit)
            .map_err(|e| unavailable("the dead letters", e))?;
        let next = more.then(|| letters.last().map(|l| l.seq)).flatten();
        Ok(json!({"dead_letters": letters, "next_after": next}))
    }

    /// Sends dead letter `event_id` of endpoint `id` once more, now: delivered, it leaves
    /// the list; otherwise it stays and the error says why.
    pub async fn redeliver(&self, id: &str, event_id: &str) -> Result<Value, ApiError> {
        let (endpoint, dead) = {
            let endpoints = self.endpoints.lock().await;
            let r = endpoints
                .iter()
                .find(|r| r.endpoint.id == id)
                .ok_or_else(|| not_found(id))?;
            (r.endpoint.clone(), r.dead.clone())
        };
        let letter = dead
            .find(event_id)
            .map_err(|e| unavailable("the dead letters", e))?
            .ok_or_else(|| {
                ApiError::api(
                    ApiCode::DeadLetterNotFound,
                    Some("event_id"),
                    format!("webhook {id} has no dead letter of event {event_id:?}"),
                )
            })?;
        let target = endpoint
            .target()
            .map_err(|e| unavailable("the webhook's URL", e))?;
        let mut poster = Poster::new(target);
        post_signed(
            &mut poster,
            &endpoint,
            &letter.event_id,
            &letter.kind,
            letter.body.get().as_bytes(),
            &self.svc,
            self.settings.timeout_ms,
        )
        .await
        .map_err(|why| {
            ApiError::api(
                ApiCode::DeliveryFailed,
                None,
                format!("{event_id} was not delivered to {}: {why}", endpoint.url),
            )
        })?;
        dead.remove(event_id)
            .map_err(|e| unavailable("the dead letters", e))?;
        tracing::info!(webhook = %id, event = %event_id, "a dead letter was delivered");
        Ok(json!({"event_id": event_id, "delivered": true}))
    }

    async fn dead_of(&self, id: &str) -> Result<Arc<DeadLetters>, ApiError> {
        let endpoints = self.endpoints.lock().await;
        endpoints
            .iter()
            .find(|r| r.endpoint.id == id)
            .map(|r| r.dead.clone())
            .ok_or_else(|| not_found(id))
    }

    /// Stops every endpoint's task and waits for them (the server's stop); a page under
    /// way is sent again by the next start.
    pub async fn shutdown(&self) {
        let mut endpoints = self.endpoints.lock().await;
        for r in endpoints.iter() {
            let _ = r.stop.send(true);
        }
        for mut r in endpoints.drain(..) {
            r.stop().await;
        }
    }
}

/// Creates `dir` readable by its owner only: endpoints carry secrets, dead letters payments.
fn private_dir(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |e: std::io::Error| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(fail)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_up_to_its_bound_and_draws_its_second_half() {
        let s = WebhookSettings {
            backoff_ms: 500,
            backoff_max_ms: 60_000,
            ..WebhookSettings::default()
        };
        let bounds = [
            500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000,
        ];
        for (failed, bound) in (1..).zip(bounds) {
            let half = bound / 2;
            assert_eq!(s.backoff(failed, 0), bound - half, "after {failed}");
            assert_eq!(s.backoff(failed, half), bound, "after {failed}");
            assert_eq!(s.backoff(failed, half + 1), bound - half, "after {failed}");
        }
        assert_eq!(s.backoff(200, 0), 30_000, "no overflow far out");
    }
}
