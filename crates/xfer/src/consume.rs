//! `xfer consume`: transfer requests taken from a queue (a NATS JetStream stream or a
//! RabbitMQ queue) and submitted to a server, each exactly once in effect.
//!
//! A request is the JSON of `POST /v1/transfers`, whose `id` is its idempotency key: a
//! message delivered again (the consumer died before its ack, the broker redelivered) is
//! submitted again and answered from the transfer's record, never applied twice. For each
//! message, in this order:
//!
//! 1. submit it and wait for the transfer to stop (done, canceled or held; at most
//!    `--outcome-wait-ms`, then its state then);
//! 2. publish the outcome (the transfer as the API shows it) and wait for the broker to
//!    confirm it; a request the server refuses (malformed JSON, a missing or invalid
//!    field, the same id with another body, …) goes to the dead letters instead, with
//!    the error's code, field and message and the request as it came;
//! 3. acknowledge the message.
//!
//! A crash anywhere leaves the message unacknowledged, so it is delivered again and the
//! steps run again: the outcome may be published twice, with the same message id
//! (`<transfer>/<state>`), by which JetStream drops the repeat and a receiver can. Trouble
//! that is not the request's fault (the server unreachable or overloaded, a refused token,
//! a broker error) never dead-letters: the message is handed back to be delivered later,
//! and the ones behind it go on.
//!
//! - [`nats`]: a durable pull consumer with explicit acks on a JetStream stream.
//! - [`amqp`]: a RabbitMQ consumer with manual acks and publisher confirms.

pub mod amqp;
pub mod nats;

use clap::Args;
use futures_util::{Stream, StreamExt};
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::watch;
use xfer_client::{segment, Client, Method};
use xfer_engine::{Sleeper, TokioSleeper};

/// How long a message handed back waits before it is delivered again.
pub const RETRY_DELAY: Duration = Duration::from_secs(1);
/// How often a transfer still running is looked at again.
const POLL_MS: u64 = 100;

/// `xfer consume`'s flags.
#[derive(Clone, Debug, Args)]
pub struct ConsumeArgs {
    /// The broker: `nats://host:4222` (JetStream) or `amqp://user:password@host:5672/%2f`
    /// (RabbitMQ).
    #[arg(long, env = "XFER_CONSUME_FROM")]
    pub from: String,
    /// Where requests come from: the NATS subject (held by --requests-stream) or the
    /// RabbitMQ queue (declared durable).
    #[arg(long, default_value = "xfer.requests")]
    pub requests: String,
    /// Where outcomes go: the NATS subject (held by --replies-stream) or the RabbitMQ queue
    /// (declared durable).
    #[arg(long, default_value = "xfer.outcomes")]
    pub outcomes: String,
    /// Where invalid requests go, with their error: a NATS subject (held by
    /// --replies-stream) or a RabbitMQ queue (declared durable).
    #[arg(long, default_value = "xfer.dead_letters")]
    pub dead_letters: String,
    /// NATS: the stream holding --requests, created if missing.
    #[arg(long, default_value = "XFER_REQUESTS")]
    pub requests_stream: String,
    /// NATS: the stream holding --outcomes and --dead-letters, created if missing.
    #[arg(long, default_value = "XFER_REPLIES")]
    pub replies_stream: String,
    /// NATS: the durable consumer's name (consumers of one name share the work); RabbitMQ:
    /// the consumer tag (consumers of one queue share the work).
    #[arg(long, default_value = "xfer-consume")]
    pub consumer: String,
    /// Messages handled at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    pub in_flight: u16,
    /// NATS: a message not acknowledged within this time is delivered again.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub ack_wait_ms: u64,
    /// How long to wait for a submitted transfer to stop before publishing its state then.
    #[arg(long, default_value_t = 30_000)]
    pub outcome_wait_ms: u64,
}

/// What becomes of one message.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Publish `body` (the transfer) to the outcomes with message id `id`, then acknowledge.
    Outcome {
        /// `<transfer>/<state>`.
        id: String,
        /// The transfer's JSON.
        body: Vec<u8>,
    },
    /// Publish `body` (the error and the request) to the dead letters, then acknowledge.
    DeadLetter {
        /// The error's JSON with the request.
        body: Vec<u8>,
    },
    /// Hand the message back, to be delivered again later: `why` is logged.
    Retry {
        /// What went wrong.
        why: String,
    },
}

/// The statuses with which the API refuses a request for what it says (with the error's
/// `code` and `message`): the request goes to the dead letters. Any other failure (a proxy's
/// 401, 404, 408 or 429 without the API's error body, a 5xx, a timeout) is tried again.
const REQUEST_FAULTS: &[u16] = &[400, 404, 409, 413, 415, 422];

/// How long one call to the server may take before the message is handed back.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The API's error codes that are not the request's fault: the message is tried again.
const NOT_THE_REQUEST: &[&str] = &[
    "unauthorized",
    "forbidden",
    "route_not_found",
    "method_not_allowed",
    "overloaded",
    "not_ready",
    "unavailable",
    "outcome_unknown",
    "shutting_down",
];

/// Submits the request `body` through `client` and says what becomes of its message.
pub async fn decide(client: &Client, body: &[u8], outcome_wait: Duration) -> Verdict {
    let submit = client.raw(
        Method::POST,
        "/v1/transfers",
        Some("application/json"),
        body.to_vec(),
    );
    let answer = match tokio::time::timeout(CALL_TIMEOUT, submit).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(why)) => return Verdict::Retry { why },
        Err(_) => {
            return Verdict::Retry {
                why: format!("no answer from the server within {CALL_TIMEOUT:?}"),
            }
        }
    };
    let code = answer.code().to_string();
    let refused = REQUEST_FAULTS.contains(&answer.status)
        && !code.is_empty()
        && answer.body["message"].is_string()
        && !NOT_THE_REQUEST.contains(&code.as_str());
    if !answer.is_success() && !refused {
        return Verdict::Retry {
            why: format!("{} {code}: {}", answer.status, answer.text),
        };
    }
    if refused {
        let request = match serde_json::from_slice::<Value>(body) {
            Ok(v) => v,
            Err(_) => Value::String(String::from_utf8_lossy(body).into_owned()),
        };
        let dead = json!({
            "status": answer.status,
            "code": code,
            "message": answer.body["message"],
            "field": answer.body["field"],
            "request": request,
        });
        return Verdict::DeadLetter {
            body: serde_json::to_vec(&dead).unwrap_or_default(),
        };
    }
    let mut transfer = answer.body;
    if !transfer["id"].is_string() || !transfer["state"].is_string() {
        return Verdict::Retry {
            why: format!("{}: not a transfer: {}", answer.status, answer.text),
        };
    }
    let mut polls = outcome_wait.as_millis() as u64 / POLL_MS;
    while !stopped(&transfer) && polls > 0 {
        polls -= 1;
        TokioSleeper.sleep(POLL_MS).await;
        let id = transfer["id"].as_str().unwrap_or_default();
        let path = format!("/v1/transfers/{}", segment(id));
        match tokio::time::timeout(CALL_TIMEOUT, client.get(&path)).await {
            Ok(Ok(r)) if r.is_success() => transfer = r.body,
            // The transfer is durably accepted: publish what is known when the wait ends.
            _ => {}
        }
    }
    Verdict::Outcome {
        id: format!(
            "{}/{}",
            transfer["id"].as_str().unwrap_or_default(),
            transfer["state"].as_str().unwrap_or_default()
        ),
        body: serde_json::to_vec(&transfer).unwrap_or_default(),
    }
}

/// Done, canceled or held: nothing more happens without someone asking.
fn stopped(transfer: &Value) -> bool {
    matches!(
        transfer["state"].as_str(),
        Some("done" | "canceled" | "held")
    )
}

/// Runs the consumer of `args.from` against the server of `client` until `stop` completes,
/// then lets the messages under way finish. Answers the exit code.
pub async fn run(
    args: ConsumeArgs,
    client: Client,
    stop: impl Future<Output = ()>,
) -> Result<i32, String> {
    let (stopping, stopped) = watch::channel(false);
    let scheme = args.from.split("://").next().unwrap_or_default();
    let work: Pin<Box<dyn Future<Output = Result<(), String>> + '_>> = match scheme {
        "nats" | "tls" => Box::pin(nats::run(&args, &client, stopped)),
        "amqp" | "amqps" => Box::pin(amqp::run(&args, &client, stopped)),
        _ => {
            return Err(format!(
                "--from {:?}: expected nats://host:port or amqp://user:password@host:port/vhost",
                args.from
            ))
        }
    };
    let mut work = work;
    tokio::select! {
        done = &mut work => return done.map(|()| 0),
        () = stop => {
            tracing::info!("stopping: finishing the messages under way");
            let _ = stopping.send(true);
        }
    }
    work.await.map(|()| 0)
}

/// Takes the requests of the stream `connect` opens (with the connection replies go
/// through), `--in-flight` at a time, each given to `handle`, until `stopped` turns true;
/// then `close`s the connection. A stream that ends or a connection lost is made again after
/// a pause; failing to connect the first time is the command's error.
pub(crate) async fn take<C, S, M, E, CF, HF, XF>(
    args: &ConsumeArgs,
    broker: &str,
    stopped: watch::Receiver<bool>,
    connect: impl Fn() -> CF,
    handle: impl Fn(&C, M) -> HF,
    close: impl Fn(C) -> XF,
) -> Result<(), String>
where
    CF: Future<Output = Result<(C, S), String>>,
    S: Stream<Item = Result<M, E>>,
    E: std::fmt::Display,
    HF: Future<Output = ()>,
    XF: Future<Output = ()>,
{
    let mut first = true;
    while !*stopped.borrow() {
        let (connection, requests) = match connect().await {
            Ok(c) => c,
            Err(e) if first => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "connecting to {broker} failed; trying again");
                TokioSleeper.sleep(RETRY_DELAY.as_millis() as u64).await;
                continue;
            }
        };
        first = false;
        tracing::info!(requests = %args.requests, consumer = %args.consumer, "consuming");
        let mut until = stopped.clone();
        requests
            .take_until(async move {
                let _ = until.wait_for(|s| *s).await;
            })
            .for_each_concurrent(usize::from(args.in_flight), |m| {
                let (connection, handle) = (&connection, &handle);
                async move {
                    match m {
                        Ok(m) => handle(connection, m).await,
                        Err(e) => tracing::warn!(error = %e, "taking a message failed"),
                    }
                }
            })
            .await;
        close(connection).await;
        if !*stopped.borrow() {
            // The broker ended the stream: not in a tight loop if it keeps doing so.
            tracing::warn!("the {broker} stream of requests ended; connecting again");
            TokioSleeper.sleep(RETRY_DELAY.as_millis() as u64).await;
        }
    }
    Ok(())
}
