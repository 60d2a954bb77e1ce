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
//! - `<id>.dead.jsonl`: its dead letters ([`DeadLetters`]), and `<id>.dead.seq`, the highest
//!   number a letter was given once one was removed (numbers are never given twice).
//!
//! An endpoint whose cursor or dead letters cannot be read at start is kept but halted: it
//! does not deliver, its status says why (`halted`), the log says it once, and every other
//! endpoint and the server run. Registering is all or nothing: what the endpoint needs is
//! written and read back before `endpoints.json` names it. File work runs on blocking
//! threads, never on the runtime's.
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
use poster::{Poster, Target};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
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

/// An endpoint and its task, or why it has none.
struct Running {
    endpoint: Arc<Endpoint>,
    status: Arc<Status>,
    /// `None`: the list could not be read (the endpoint is halted, `status` says why).
    dead: Option<Arc<DeadLetters>>,
    stop: watch::Sender<bool>,
    /// `None`: halted when it was loaded.
    task: Option<JoinHandle<()>>,
}

/// An endpoint ready to deliver: every step that can fail done, nothing started.
struct Ready {
    endpoint: Arc<Endpoint>,
    target: Target,
    dead: Arc<DeadLetters>,
    cursor: CursorFile,
}

/// Why an endpoint cannot deliver, and its dead letters if they could be read.
struct Halted {
    why: String,
    dead: Option<Arc<DeadLetters>>,
}

/// Endpoint `id`'s cursor, in `dir`.
fn cursor_of(dir: &Path, id: &str) -> CursorFile {
    CursorFile::new(dir, id)
}

/// Endpoint `id`'s dead letters, in `dir`.
fn dead_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.dead.jsonl"))
}

/// Reads what endpoint `endpoint` needs to deliver from `dir`, for `shards` shards: its dead
/// letters, its cursor, its URL. Blocking.
fn load(dir: &Path, shards: usize, endpoint: Arc<Endpoint>) -> Result<Ready, Halted> {
    let dead = DeadLetters::open(dead_path(dir, &endpoint.id)).map_err(|e| Halted {
        why: format!("its dead letters cannot be read: {e}"),
        dead: None,
    })?;
    let dead = Arc::new(dead);
    let halted = |why: String| Halted {
        why,
        dead: Some(dead.clone()),
    };
    let cursor = cursor_of(dir, &endpoint.id);
    cursor
        .read(shards)
        .map_err(|e| halted(format!("its cursor cannot be read: {e}")))?;
    let target = endpoint
        .target()
        .map_err(|e| halted(format!("its URL: {e}")))?;
    Ok(Ready {
        endpoint,
        target,
        dead,
        cursor,
    })
}

/// Replaces `endpoints.json` in `dir` with `endpoints`, durably. Blocking.
fn save(dir: &Path, endpoints: Vec<Endpoint>) -> Result<(), String> {
    let bytes =
        serde_json::to_vec_pretty(&EndpointsFile { endpoints }).map_err(|e| e.to_string())?;
    private_dir(dir)?;
    crate::sink::replace_file(&dir.join("endpoints.json"), &bytes, true)
}

/// Runs `f` on a blocking thread: file work, kept off the runtime's threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("the webhooks' file work failed: {e}"))
}

impl Running {
    /// Stops its task and waits for it (an attempt under way is given up).
    async fn stop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = &mut self.task {
            let _ = task.await;
        }
    }

    /// Its dead letters, or why they cannot be read.
    fn dead(&self) -> Result<Arc<DeadLetters>, ApiError> {
        self.dead.clone().ok_or_else(|| {
            unavailable(
                &format!("webhook {}'s dead letters", self.endpoint.id),
                "they could not be read when it was loaded (its status says why)",
            )
        })
    }
}

/// The registered endpoints and their tasks. See the module docs.
pub struct Webhooks {
    dir: PathBuf,
    settings: WebhookSettings,
    svc: Arc<Service>,
    /// In registration order; held only briefly, never across file work.
    endpoints: tokio::sync::Mutex<Vec<Running>>,
    /// Held by whoever changes the endpoints: orders the writes of `endpoints.json`.
    writes: tokio::sync::Mutex<()>,
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
    /// The endpoints kept in `dir` (none yet: none), each one's task started. An endpoint
    /// whose files cannot be read is loaded halted (logged, its status says why) and the
    /// others deliver; only an unreadable `endpoints.json` is an error.
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
            writes: tokio::sync::Mutex::new(()),
        };
        let shards = hooks.svc.cluster().shards().len();
        let mut running = Vec::with_capacity(kept.len());
        let mut halted = 0;
        for endpoint in kept {
            let endpoint = Arc::new(endpoint);
            running.push(match load(&hooks.dir, shards, endpoint.clone()) {
                Ok(ready) => hooks.launch(ready),
                Err(h) => {
                    halted += 1;
                    hooks.halted(endpoint, h)
                }
            });
        }
        if !running.is_empty() {
            tracing::info!(
                endpoints = running.len() - halted,
                halted,
                "webhooks delivering"
            );
        }
        *hooks.endpoints.get_mut() = running;
        Ok(hooks)
    }

    /// Starts `ready`'s task, from its cursor.
    fn launch(&self, ready: Ready) -> Running {
        let Ready {
            endpoint,
            target,
            dead,
            cursor,
        } = ready;
        let status = Arc::new(Status::default());
        let (stop, stopped) = watch::channel(false);
        let delivery = Delivery::new(
            endpoint.clone(),
            target,
            self.settings,
            dead.clone(),
            status.clone(),
            self.svc.clone(),
            stopped.clone(),
        );
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
        Running {
            endpoint,
            status,
            dead: Some(dead),
            stop,
            task: Some(task),
        }
    }

    /// `endpoint`, kept but not delivering for the reason `h` gives, logged once.
    fn halted(&self, endpoint: Arc<Endpoint>, h: Halted) -> Running {
        tracing::error!(
            webhook = %endpoint.id, error = %h.why,
            "a webhook endpoint cannot be loaded: it is halted, not delivering (repair or \
             remove the file named and restart, or remove the webhook)"
        );
        let status = Arc::new(Status::default());
        status.halted(&h.why, self.svc.now().as_ms());
        Running {
            endpoint,
            status,
            dead: h.dead,
            stop: watch::channel(false).0,
            task: None,
        }
    }

    /// Registers the endpoint `req` asks for, kept and delivering before it is answered:
    /// the endpoint with its secret (the only time it is shown).
    pub async fn create(&self, req: EndpointIn) -> Result<Value, ApiError> {
        let endpoint = req.endpoint(self.svc.now().as_ms())?;
        self.register(endpoint).await
    }

    /// Registers `endpoint`, all or nothing: its cursor written and everything it needs
    /// read before `endpoints.json` names it, its task started after; an error leaves no
    /// file of it behind.
    async fn register(&self, endpoint: Endpoint) -> Result<Value, ApiError> {
        let start = match self.svc.feed_head().await? {
            FeedHead::At(cursor) => cursor,
            FeedHead::Unsupported(why) => {
                return Err(ApiError::api(ApiCode::NotSupported, None, why))
            }
        };
        let _writes = self.writes.lock().await;
        let mut all: Vec<Endpoint> = {
            let endpoints = self.endpoints.lock().await;
            endpoints.iter().map(|r| (*r.endpoint).clone()).collect()
        };
        all.push(endpoint.clone());
        let endpoint = Arc::new(endpoint);
        let dir = self.dir.clone();
        let shards = self.svc.cluster().shards().len();
        let kept = endpoint.clone();
        let ready = blocking(move || -> Result<Ready, ApiError> {
            private_dir(&dir).map_err(|e| unavailable("the webhooks' directory", e))?;
            let cursor = cursor_of(&dir, &kept.id);
            cursor
                .write(&start)
                .map_err(|e| unavailable("the webhook's cursor", e))?;
            let done = load(&dir, shards, kept.clone())
                .map_err(|h| unavailable("the webhook's delivery", h.why))
                .and_then(|ready| {
                    save(&dir, all)
                        .map(|()| ready)
                        .map_err(|e| unavailable("the webhook list", e))
                });
            if done.is_err() {
                let _ = cursor.remove();
                let _ = DeadLetters::delete_files(&dead_path(&dir, &kept.id));
            }
            done
        })
        .await
        .map_err(|e| unavailable("the webhook", e))??;
        let running = self.launch(ready);
        let out = serde_json::to_value(endpoint.out(true)).expect("an endpoint");
        tracing::info!(webhook = %endpoint.id, url = %endpoint.url, "webhook registered");
        self.endpoints.lock().await.push(running);
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
        out["status"] = r.status.json(r.dead.as_ref().map(|d| d.count()));
        Ok(out)
    }

    /// Removes endpoint `id`: no longer kept, its task stopped, its cursor and dead letters
    /// deleted.
    pub async fn delete(&self, id: &str) -> Result<Value, ApiError> {
        let _writes = self.writes.lock().await;
        let rest: Vec<Endpoint> = {
            let endpoints = self.endpoints.lock().await;
            if !endpoints.iter().any(|r| r.endpoint.id == id) {
                return Err(not_found(id));
            }
            endpoints
                .iter()
                .filter(|r| r.endpoint.id != id)
                .map(|r| (*r.endpoint).clone())
                .collect()
        };
        let dir = self.dir.clone();
        blocking(move || save(&dir, rest))
            .await
            .and_then(|saved| saved)
            .map_err(|e| unavailable("the webhook list", e))?;
        let mut running = {
            let mut endpoints = self.endpoints.lock().await;
            let i = endpoints
                .iter()
                .position(|r| r.endpoint.id == id)
                .expect("changed only under `writes`");
            endpoints.remove(i)
        };
        running.stop().await;
        let dir = self.dir.clone();
        let gone = id.to_string();
        let removed = blocking(move || {
            cursor_of(&dir, &gone)
                .remove()
                .and_then(|()| DeadLetters::delete_files(&dead_path(&dir, &gone)))
        })
        .await
        .and_then(|removed| removed);
        if let Err(e) = removed {
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
            .await
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
            (r.endpoint.clone(), r.dead()?)
        };
        let letter = dead
            .find(event_id)
            .await
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
            .await
            .map_err(|e| unavailable("the dead letters", e))?;
        tracing::info!(webhook = %id, event = %event_id, "a dead letter was delivered");
        Ok(json!({"event_id": event_id, "delivered": true}))
    }

    async fn dead_of(&self, id: &str) -> Result<Arc<DeadLetters>, ApiError> {
        let endpoints = self.endpoints.lock().await;
        endpoints
            .iter()
            .find(|r| r.endpoint.id == id)
            .ok_or_else(|| not_found(id))?
            .dead()
    }

    /// Stops every endpoint's task and waits for them (the server's stop); a page under
    /// way is sent again by the next start.
    pub async fn shutdown(&self) {
        let _writes = self.writes.lock().await;
        let mut stopping: Vec<Running> = self.endpoints.lock().await.drain(..).collect();
        for r in &stopping {
            let _ = r.stop.send(true);
        }
        for r in &mut stopping {
            r.stop().await;
        }
    }
}

/// Creates `dir` readable by its owner only: endpoints carry secrets, dead letters payments.
fn private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |e: std::io::Error| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(fail)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfer_core::{Clock, SystemClock};
    use xfer_store::{MemoryStore, Store};

    /// A service over one Memory store.
    fn service() -> Arc<Service> {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new(clock.clone()));
        Arc::new(crate::service::over_one_store(store, clock))
    }

    fn ids(list: &Value) -> Vec<&str> {
        list["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["id"].as_str().unwrap())
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_registration_that_cannot_start_leaves_nothing_behind() {
        let dir = std::env::temp_dir().join(format!("xfer-webhooks-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let svc = service();
        let hooks = Webhooks::open(dir.clone(), WebhookSettings::default(), svc.clone()).unwrap();
        let ask = |url: &str| {
            crate::error::decode::<EndpointIn>(json!({ "url": url }).to_string().as_bytes())
                .unwrap()
        };
        let kept = hooks.create(ask("http://127.0.0.1:9/a")).await.unwrap();
        let kept = kept["id"].as_str().unwrap();
        // An endpoint whose delivery cannot start: its URL does not parse.
        let mut bad = ask("http://127.0.0.1:9/b").endpoint(1).unwrap();
        bad.url = "ftp://127.0.0.1/b".into();
        let e = hooks.register(bad.clone()).await.unwrap_err();
        assert_eq!(e.status().as_u16(), 503, "{}", e.message);
        assert_eq!(ids(&hooks.list().await), [kept]);
        let file = std::fs::read_to_string(dir.join("endpoints.json")).unwrap();
        assert!(!file.contains(&bad.id), "{file}");
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["endpoints.json".to_string(), format!("{kept}.cursor")]
        );
        // A later registration keeps every endpoint it should, and only those.
        let next = hooks.create(ask("http://127.0.0.1:9/c")).await.unwrap();
        let next = next["id"].as_str().unwrap();
        hooks.shutdown().await;
        let again = Webhooks::open(dir.clone(), WebhookSettings::default(), svc).unwrap();
        assert_eq!(ids(&again.list().await), [kept, next]);
        again.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

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
