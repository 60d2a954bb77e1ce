//! Sinks: the change feed published to something outside, at least once. A [`Publisher`]
//! sends a page of events and answers once the other side has them (a broker's acks);
//! [`run`] reads the feed after its cursor, publishes, and only then moves the cursor,
//! kept in a file ([`CursorFile`]) so that a restart resumes behind the last page the other
//! side confirmed. A crash between the two publishes that page again: every message carries
//! the event's id, by which the broker (or the receiver) drops the repeat.
//!
//! - [`nats`]: NATS JetStream (`Nats-Msg-Id`, publish acks).
//! - [`amqp`]: RabbitMQ (persistent messages, `message_id`, publisher confirms).
//! - [`webhook`]: HTTP POSTs to the endpoints registered over the API, signed, retried,
//!   set aside in a dead-letter list after the last attempt.

pub mod amqp;
pub mod nats;
pub mod webhook;

use crate::feed::{Cursor, FeedRead};
use crate::service::Service;
use crate::wire::EventOut;
use std::io::Write;
use std::path::{Path, PathBuf};
use tokio::sync::watch;
use xfer_engine::{Sleeper, TokioSleeper};
use xfer_store::BoxFuture;

/// Events read and published per page by a broker's sink.
pub const PAGE: usize = 512;
/// The most events counted behind a sink's cursor ([`Service::count_events`]).
const BEHIND_COUNT_MAX: usize = 100_000;
/// How often a sink with a full page counts the events behind it.
const BEHIND_COUNT_EVERY_MS: u64 = 5_000;
/// The wait before reading again when the feed had nothing new.
const IDLE_MS: u64 = 200;
/// The wait before trying a page again after a failure.
const RETRY_MS: u64 = 1_000;

/// One event as it leaves: its id (the broker's de-duplication key), its type and its JSON
/// (the API's `Event`).
pub struct Outgoing {
    /// [`xfer_store::Event::id`].
    pub id: String,
    /// The event's type (`done`, …).
    pub kind: &'static str,
    /// The JSON body.
    pub body: Vec<u8>,
}

/// Where events go.
pub trait Publisher: Send + Sync {
    /// Its name, in logs and metrics.
    fn name(&self) -> &str;
    /// Sends `events`, in order, and answers once the other side has every one of them
    /// durably, or the publisher has set aside durably those it will not send (a webhook's
    /// dead letters, the types an endpoint does not take): how many the other side has. An
    /// error leaves any of them sent or not (the page is sent again).
    fn publish<'a>(&'a self, events: &'a [Outgoing]) -> BoxFuture<'a, Result<usize, String>>;
}

/// A sink's cursor in a file of its own, replaced whole (written aside, synced, renamed,
/// the directory synced) so that a crash leaves the old cursor or the new one.
#[derive(Clone, Debug)]
pub struct CursorFile {
    path: PathBuf,
}

impl CursorFile {
    /// The cursor of sink `name` in `dir`.
    pub fn new(dir: &Path, name: &str) -> CursorFile {
        CursorFile {
            path: dir.join(format!("{name}.cursor")),
        }
    }

    /// The cursor kept (none yet: the start of the feed) for `shards` shards.
    pub fn read(&self, shards: usize) -> Result<Cursor, String> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => Cursor::parse(text.trim(), shards)
                .map_err(|e| format!("{}: {e}", self.path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Cursor::start(shards)),
            Err(e) => Err(format!("{}: {e}", self.path.display())),
        }
    }

    /// Keeps `cursor`, durably.
    pub fn write(&self, cursor: &Cursor) -> Result<(), String> {
        replace_file(&self.path, format!("{cursor}\n").as_bytes(), false)
    }

    /// Forgets the cursor (a removed sink's); a missing file is no error.
    pub fn remove(&self) -> Result<(), String> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("{}: {e}", self.path.display()))
            }
            _ => Ok(()),
        }
    }
}

/// Replaces the file at `path` with `bytes` so that a crash leaves the old content or the
/// new, never a mix: written aside, synced, renamed over, the directory synced. `private`:
/// readable by the owner only (it holds secrets or payment data).
pub fn replace_file(path: &Path, bytes: &[u8], private: bool) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let fail = |e: std::io::Error| format!("{}: {e}", path.display());
    std::fs::create_dir_all(dir).map_err(fail)?;
    let mut aside_name = path.file_name().unwrap_or_default().to_os_string();
    aside_name.push(".next");
    let aside = path.with_file_name(aside_name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if private { 0o600 } else { 0o666 })
        .open(&aside)
        .map_err(fail)?;
    f.write_all(bytes).map_err(fail)?;
    f.sync_all().map_err(fail)?;
    std::fs::rename(&aside, path).map_err(fail)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(fail)
}

/// Publishes the feed through `publisher` from the cursor in `file` until `stopped` turns
/// true: pages of at most `page_size` events, the cursor kept after each page is confirmed (a
/// restart sends at most one page again). A failed read or
/// publish is tried again; a cursor behind the feed's retention stops publishing (events
/// were lost to this sink: an operator decides), and so does a store without a feed.
pub async fn run(
    svc: &Service,
    publisher: &dyn Publisher,
    file: &CursorFile,
    page_size: usize,
    mut stopped: watch::Receiver<bool>,
) {
    let name = publisher.name().to_string();
    let shards = svc.cluster().shards().len();
    let mut at = match file.read(shards) {
        Ok(at) => at,
        Err(e) => {
            tracing::error!(sink = %name, error = %e, "the sink's cursor cannot be read: not publishing");
            return;
        }
    };
    let pause = |ms: u64, stopped: &mut watch::Receiver<bool>| {
        let mut stopped = stopped.clone();
        async move {
            tokio::select! {
                () = TokioSleeper.sleep(ms) => false,
                _ = stopped.wait_for(|s| *s) => true,
            }
        }
    };
    let (mut counted, mut counted_at) = (0usize, 0u64);
    loop {
        if *stopped.borrow() {
            return;
        }
        let page = match svc.events(&at, page_size).await {
            Ok(FeedRead::Page(page)) => page,
            Ok(FeedRead::Behind {
                shard,
                dropped_through,
            }) => {
                tracing::error!(
                    sink = %name, shard, %dropped_through, cursor = %at,
                    "the sink's cursor is behind the feed's retention: events were lost to it; \
                     not publishing (remove its cursor file to start again from the oldest kept)"
                );
                return;
            }
            Ok(FeedRead::Unsupported(why)) => {
                tracing::error!(sink = %name, why = %why, "no change feed to publish");
                return;
            }
            Err(e) => {
                svc.metrics().sink_failed(&name);
                tracing::warn!(sink = %name, error = %e, "reading the feed failed; trying again");
                if pause(RETRY_MS, &mut stopped).await {
                    return;
                }
                continue;
            }
        };
        let oldest = page.iter().map(|e| e.event.at).min();
        let lag_ms = oldest.map_or(0, |at| svc.now().as_ms().saturating_sub(at.as_ms()));
        // A page shorter than asked for holds everything behind; a full one, more.
        let behind = if page.len() < page_size {
            page.len()
        } else {
            let now = svc.now().as_ms();
            if now.saturating_sub(counted_at) >= BEHIND_COUNT_EVERY_MS {
                counted_at = now;
                counted = svc
                    .count_events(&at, BEHIND_COUNT_MAX)
                    .await
                    .unwrap_or(counted);
            }
            counted.max(page.len())
        };
        svc.metrics()
            .sink_behind(&name, behind, lag_ms as f64 / 1_000.0);
        if page.is_empty() {
            if pause(IDLE_MS, &mut stopped).await {
                return;
            }
            continue;
        }
        let out: Vec<Outgoing> = page
            .iter()
            .map(|e| {
                let json = EventOut::new(&e.event, e.record.as_ref());
                Outgoing {
                    id: json.id.clone(),
                    kind: json.kind,
                    body: serde_json::to_vec(&json).unwrap_or_default(),
                }
            })
            .collect();
        let delivered = match publisher.publish(&out).await {
            Ok(n) => n,
            // Stopped in the middle of the page: the next start sends it again.
            Err(_) if *stopped.borrow() => return,
            Err(e) => {
                svc.metrics().sink_failed(&name);
                tracing::warn!(sink = %name, error = %e, "publishing failed; sending the page again");
                if pause(RETRY_MS, &mut stopped).await {
                    return;
                }
                continue;
            }
        };
        for e in &page {
            at.advance(e);
        }
        svc.metrics().sink_published(&name, delivered);
        // Its syncs off the runtime's threads, which serve requests meanwhile.
        let (cursor, kept) = (file.clone(), at.clone());
        let written = tokio::task::spawn_blocking(move || cursor.write(&kept))
            .await
            .unwrap_or_else(|e| Err(format!("keeping the cursor: {e}")));
        if let Err(e) = written {
            // The page is confirmed: go on; a restart publishes it again, dropped by id.
            tracing::warn!(sink = %name, error = %e, "keeping the sink's cursor failed");
        }
    }
}
