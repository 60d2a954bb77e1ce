//! The consumer on RabbitMQ (AMQP 0.9.1): requests from a durable queue with manual acks
//! (a message unacknowledged when the consumer's connection ends goes back to the queue,
//! marked redelivered), outcomes and dead letters published as persistent messages into
//! durable queues of their own through the default exchange, each confirmed by the broker
//! (publisher confirms, mandatory: a reply the broker could not route counts as failed)
//! before the request is acknowledged. Each reply's `message_id` is `<transfer>/<state>` for
//! an outcome, by which a receiver drops a reply published again after a crash.

use super::{decide, take, ConsumeArgs, Verdict, RETRY_DELAY};
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, Consumer};
use std::time::Duration;
use tokio::sync::watch;
use xfer_client::Client;
use xfer_engine::{Sleeper, TokioSleeper};

/// The connection, a channel in confirm mode and the consumer of the requests.
async fn connect(args: &ConsumeArgs) -> Result<(Connection, Channel, Consumer), String> {
    let fail = |what: &str, e: lapin::Error| format!("amqp {what}: {e}");
    let connection = Connection::connect(&args.from, ConnectionProperties::default())
        .await
        .map_err(|e| fail("connect", e))?;
    let channel = connection
        .create_channel()
        .await
        .map_err(|e| fail("channel", e))?;
    for queue in [&args.requests, &args.outcomes, &args.dead_letters] {
        channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| fail(&format!("queue {queue}"), e))?;
    }
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| fail("confirms", e))?;
    channel
        .basic_qos(args.in_flight, BasicQosOptions::default())
        .await
        .map_err(|e| fail("qos", e))?;
    let consumer = channel
        .basic_consume(
            args.requests.as_str().into(),
            args.consumer.as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| fail("consume", e))?;
    Ok((connection, channel, consumer))
}

/// Consumes until `stopped` turns true; a lost connection is made again.
pub async fn run(
    args: &ConsumeArgs,
    client: &Client,
    stopped: watch::Receiver<bool>,
) -> Result<(), String> {
    let connect = || async {
        let (connection, channel, consumer) = connect(args).await?;
        Ok(((connection, channel), consumer))
    };
    let handle = |(_, channel): &(Connection, Channel), d: Delivery| {
        let channel = channel.clone();
        async move { handle(args, client, &channel, d).await }
    };
    let close = |(connection, _): (Connection, Channel)| async move {
        let _ = connection.close(200, "stopping".into()).await;
    };
    take(args, "RabbitMQ", stopped, connect, handle, close).await
}

/// Publishes `body` to `queue` with `id` and waits for the broker's confirmation.
async fn publish(channel: &Channel, queue: &str, id: &str, body: &[u8]) -> Result<(), String> {
    let mut properties = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_delivery_mode(2);
    if !id.is_empty() {
        properties = properties.with_message_id(id.into());
    }
    let confirm = channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions {
                mandatory: true,
                ..BasicPublishOptions::default()
            },
            body,
            properties,
        )
        .await
        .map_err(|e| e.to_string())?;
    let confirmation = confirm.await.map_err(|e| e.to_string())?;
    if !confirmation.is_ack() {
        return Err("the broker refused it".into());
    }
    if confirmation.take_message().is_some() {
        return Err(format!("no queue {queue}: unroutable"));
    }
    Ok(())
}

/// One message: decide, reply, acknowledge (see the module docs).
async fn handle(args: &ConsumeArgs, client: &Client, channel: &Channel, d: Delivery) {
    let wait = Duration::from_millis(args.outcome_wait_ms);
    if d.redelivered {
        tracing::info!(message_id = ?d.properties.message_id(),
            "a request delivered again: submitted again, answered from its record");
    }
    let (queue, id, body) = match decide(client, &d.data, wait).await {
        Verdict::Outcome { id, body } => (&args.outcomes, id, body),
        Verdict::DeadLetter { body } => {
            let id = d
                .properties
                .message_id()
                .as_ref()
                .map(|m| format!("dead/{m}"))
                .unwrap_or_default();
            (&args.dead_letters, id, body)
        }
        Verdict::Retry { why } => {
            tracing::warn!(error = %why, "the request is handed back, to be tried again");
            hand_back(&d).await;
            return;
        }
    };
    if let Err(e) = publish(channel, queue, &id, &body).await {
        tracing::warn!(%queue, %id, error = %e, "publishing the reply failed; the request is handed back");
        hand_back(&d).await;
        return;
    }
    if let Err(e) = d.acker.ack(BasicAckOptions::default()).await {
        // Delivered again once the connection ends: submitted again, answered from the record.
        tracing::warn!(%id, error = %e, "acknowledging failed");
    }
}

/// Gives `d` back to the queue after a pause (RabbitMQ delivers a requeued message at once).
async fn hand_back(d: &Delivery) {
    TokioSleeper.sleep(RETRY_DELAY.as_millis() as u64).await;
    let requeue = BasicNackOptions {
        requeue: true,
        ..BasicNackOptions::default()
    };
    if let Err(e) = d.acker.nack(requeue).await {
        tracing::warn!(error = %e, "handing the request back failed");
    }
}
