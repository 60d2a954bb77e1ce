//! [`AmqpSink`]: the change feed into RabbitMQ (AMQP 0.9.1). Each event is a persistent
//! message on a durable topic exchange, routed by its type, with the event's id as its
//! `message_id` (RabbitMQ keeps repeats: a receiver drops them by that id); a durable queue
//! bound to every type holds them until someone reads, so no event is published into
//! nowhere. A page counts as sent once the broker confirmed every message (publisher
//! confirms) and returned none as unroutable.

use crate::sink::{Outgoing, Publisher};
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use xfer_store::BoxFuture;

/// Where and how to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AmqpConfig {
    /// The broker, `amqp://user:password@host:5672/%2f`.
    pub url: String,
    /// The topic exchange, declared durable; the routing key is the event's type.
    pub exchange: String,
    /// The durable queue bound to every type of the exchange.
    pub queue: String,
}

/// A connected publisher, its channel in confirm mode.
pub struct AmqpSink {
    _connection: Connection,
    channel: Channel,
    exchange: String,
}

impl AmqpSink {
    /// Connects, declares the exchange and the queue, and turns publisher confirms on.
    pub async fn connect(cfg: &AmqpConfig) -> Result<AmqpSink, String> {
        let fail = |what: &str, e: lapin::Error| format!("amqp {what}: {e}");
        let connection = Connection::connect(&cfg.url, ConnectionProperties::default())
            .await
            .map_err(|e| fail("connect", e))?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| fail("channel", e))?;
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        };
        channel
            .exchange_declare(
                cfg.exchange.as_str().into(),
                ExchangeKind::Topic,
                durable,
                FieldTable::default(),
            )
            .await
            .map_err(|e| fail("exchange", e))?;
        channel
            .queue_declare(
                cfg.queue.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| fail("queue", e))?;
        channel
            .queue_bind(
                cfg.queue.as_str().into(),
                cfg.exchange.as_str().into(),
                "#".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| fail("bind", e))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| fail("confirms", e))?;
        Ok(AmqpSink {
            _connection: connection,
            channel,
            exchange: cfg.exchange.clone(),
        })
    }
}

impl Publisher for AmqpSink {
    fn name(&self) -> &str {
        "amqp"
    }

    fn publish<'a>(&'a self, events: &'a [Outgoing]) -> BoxFuture<'a, Result<usize, String>> {
        Box::pin(async move {
            let mut confirms = Vec::with_capacity(events.len());
            for e in events {
                let properties = BasicProperties::default()
                    .with_message_id(e.id.as_str().into())
                    .with_content_type("application/json".into())
                    .with_delivery_mode(2);
                let confirm = self
                    .channel
                    .basic_publish(
                        self.exchange.as_str().into(),
                        e.kind.into(),
                        BasicPublishOptions {
                            mandatory: true,
                            ..BasicPublishOptions::default()
                        },
                        &e.body,
                        properties,
                    )
                    .await
                    .map_err(|err| format!("publish {}: {err}", e.id))?;
                confirms.push((confirm, &e.id));
            }
            for (confirm, id) in confirms {
                let confirmation = confirm
                    .await
                    .map_err(|err| format!("confirm of {id}: {err}"))?;
                if !confirmation.is_ack() {
                    return Err(format!("the broker refused {id}"));
                }
                if confirmation.take_message().is_some() {
                    return Err(format!("{id} was unroutable"));
                }
            }
            Ok(events.len())
        })
    }
}
