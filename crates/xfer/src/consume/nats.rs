//! The consumer on NATS JetStream: requests from a durable pull consumer (explicit acks;
//! a message not acknowledged within `--ack-wait-ms` is delivered again), outcomes and dead
//! letters published into a stream of their own and their publish acks awaited before the
//! request is acknowledged. Each reply carries a `Nats-Msg-Id` (`<transfer>/<state>` for an
//! outcome, the request's stream and sequence for a dead letter), so the replies stream
//! keeps one copy of a reply published again after a crash.

use super::{decide, take, ConsumeArgs, Verdict, RETRY_DELAY};
use async_nats::jetstream::consumer::{pull, AckPolicy, PullConsumer};
use async_nats::jetstream::{self, stream, AckKind, Message};
use std::time::Duration;
use tokio::sync::watch;
use xfer_client::Client;
use xfer_engine::{Sleeper, TokioSleeper};

/// How long the replies stream remembers message ids to drop repeats (JetStream's default).
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// The streams and the consumer, created if missing.
async fn connect(args: &ConsumeArgs) -> Result<(jetstream::Context, pull::Stream), String> {
    let client = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(5))
        .connect(args.from.as_str())
        .await
        .map_err(|e| format!("nats {}: {e}", args.from))?;
    let js = jetstream::new(client);
    js.get_or_create_stream(stream::Config {
        name: args.replies_stream.clone(),
        subjects: vec![args.outcomes.clone(), args.dead_letters.clone()],
        duplicate_window: DUPLICATE_WINDOW,
        ..stream::Config::default()
    })
    .await
    .map_err(|e| format!("nats stream {}: {e}", args.replies_stream))?;
    let requests = js
        .get_or_create_stream(stream::Config {
            name: args.requests_stream.clone(),
            subjects: vec![args.requests.clone()],
            ..stream::Config::default()
        })
        .await
        .map_err(|e| format!("nats stream {}: {e}", args.requests_stream))?;
    let consumer: PullConsumer = requests
        .get_or_create_consumer(
            &args.consumer,
            pull::Config {
                durable_name: Some(args.consumer.clone()),
                filter_subject: args.requests.clone(),
                ack_policy: AckPolicy::Explicit,
                ack_wait: Duration::from_millis(args.ack_wait_ms),
                max_ack_pending: i64::from(args.in_flight),
                ..pull::Config::default()
            },
        )
        .await
        .map_err(|e| format!("nats consumer {}: {e}", args.consumer))?;
    let messages = consumer
        .messages()
        .await
        .map_err(|e| format!("nats consumer {}: {e}", args.consumer))?;
    Ok((js, messages))
}

/// Consumes until `stopped` turns true; a lost connection is made again.
pub async fn run(
    args: &ConsumeArgs,
    client: &Client,
    stopped: watch::Receiver<bool>,
) -> Result<(), String> {
    let handle = |js: &jetstream::Context, m: Message| {
        let js = js.clone();
        async move { handle(args, client, &js, m).await }
    };
    take(
        args,
        "NATS",
        stopped,
        || connect(args),
        handle,
        |_| async {},
    )
    .await
}

/// One message: decide, reply, acknowledge (see the module docs).
async fn handle(args: &ConsumeArgs, client: &Client, js: &jetstream::Context, m: Message) {
    let wait = Duration::from_millis(args.outcome_wait_ms);
    if let Ok(info) = m.info() {
        if info.delivered > 1 {
            tracing::info!(
                sequence = info.stream_sequence,
                delivered = info.delivered,
                "a request delivered again: submitted again, answered from its record"
            );
        }
    }
    // Told it is still being worked on, the broker does not deliver it again meanwhile.
    let work = decide(client, &m.payload, wait);
    tokio::pin!(work);
    let verdict = loop {
        tokio::select! {
            v = &mut work => break v,
            () = TokioSleeper.sleep(args.ack_wait_ms / 3) => {
                let _ = m.ack_with(AckKind::Progress).await;
            }
        }
    };
    let (subject, id, body) = match verdict {
        Verdict::Outcome { id, body } => (args.outcomes.clone(), id, body),
        Verdict::DeadLetter { body } => {
            let id = match m.info() {
                Ok(info) => format!("dead/{}/{}", info.stream, info.stream_sequence),
                Err(_) => String::new(),
            };
            (args.dead_letters.clone(), id, body)
        }
        Verdict::Retry { why } => {
            tracing::warn!(error = %why, "the request is handed back, to be tried again");
            let _ = m.ack_with(AckKind::Nak(Some(backoff(&m)))).await;
            return;
        }
    };
    let mut headers = async_nats::HeaderMap::new();
    if !id.is_empty() {
        headers.insert("Nats-Msg-Id", id.as_str());
    }
    let published = match js
        .publish_with_headers(subject.clone(), headers, body.into())
        .await
    {
        Ok(ack) => ack.await.map(|_| ()).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = published {
        tracing::warn!(%subject, %id, error = %e, "publishing the reply failed; the request is handed back");
        let _ = m.ack_with(AckKind::Nak(Some(backoff(&m)))).await;
        return;
    }
    if let Err(e) = m.ack().await {
        // Delivered again after the ack wait: submitted again, answered from the record.
        tracing::warn!(%id, error = %e, "acknowledging failed");
    }
}

/// The wait before a message handed back is delivered again: [`RETRY_DELAY`] doubled with
/// each delivery, at most a minute, so that a server down for long is not hammered.
fn backoff(m: &Message) -> Duration {
    let delivered = m.info().map_or(1, |i| i.delivered.max(1));
    let doublings = u32::try_from(delivered - 1).unwrap_or(u32::MAX).min(6);
    (RETRY_DELAY * 2u32.pow(doublings)).min(Duration::from_secs(60))
}
