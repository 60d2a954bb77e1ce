//! [`NatsSink`]: the change feed into a NATS JetStream stream. Each event is a message on
//! `<subject>.<type>` with its id as `Nats-Msg-Id`, so the stream drops a repeat within its
//! duplicate window (and a receiver, by the same id, after it); a page counts as sent once
//! every message's publish ack came back.

use crate::sink::{Outgoing, Publisher};
use async_nats::jetstream::{self, stream};
use std::time::Duration;
use xfer_store::BoxFuture;

/// How long the stream remembers message ids to drop repeats (JetStream's default).
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// Where and how to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsConfig {
    /// The server, `nats://host:port`.
    pub url: String,
    /// The stream (created if missing, over `<subject>.>`).
    pub stream: String,
    /// The subjects' prefix.
    pub subject: String,
}

/// A connected JetStream publisher.
pub struct NatsSink {
    js: jetstream::Context,
    subject: String,
}

/// Deletes the stream of `cfg` (a bench's, after its run); a missing one is no error.
pub async fn delete_stream(cfg: &NatsConfig) -> Result<(), String> {
    let client = async_nats::connect(cfg.url.as_str())
        .await
        .map_err(|e| format!("nats {}: {e}", cfg.url))?;
    match jetstream::new(client).delete_stream(&cfg.stream).await {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().contains("not found") => Ok(()),
        Err(e) => Err(format!("nats stream {}: {e}", cfg.stream)),
    }
}

impl NatsSink {
    /// Connects and makes sure the stream exists.
    pub async fn connect(cfg: &NatsConfig) -> Result<NatsSink, String> {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(5))
            .connect(cfg.url.as_str())
            .await
            .map_err(|e| format!("nats {}: {e}", cfg.url))?;
        let js = jetstream::new(client);
        js.get_or_create_stream(stream::Config {
            name: cfg.stream.clone(),
            subjects: vec![format!("{}.>", cfg.subject)],
            duplicate_window: DUPLICATE_WINDOW,
            ..stream::Config::default()
        })
        .await
        .map_err(|e| format!("nats stream {}: {e}", cfg.stream))?;
        Ok(NatsSink {
            js,
            subject: cfg.subject.clone(),
        })
    }
}

impl Publisher for NatsSink {
    fn name(&self) -> &str {
        "nats"
    }

    fn publish<'a>(&'a self, events: &'a [Outgoing]) -> BoxFuture<'a, Result<usize, String>> {
        Box::pin(async move {
            let mut acks = Vec::with_capacity(events.len());
            for e in events {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Nats-Msg-Id", e.id.as_str());
                let subject = format!("{}.{}", self.subject, e.kind);
                let ack = self
                    .js
                    .publish_with_headers(subject, headers, e.body.clone().into())
                    .await
                    .map_err(|err| format!("publish {}: {err}", e.id))?;
                acks.push((ack, &e.id));
            }
            for (ack, id) in acks {
                ack.await.map_err(|err| format!("ack of {id}: {err}"))?;
            }
            Ok(events.len())
        })
    }
}
