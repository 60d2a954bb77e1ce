//! The change feed's sinks against real brokers (the servers `scripts/services` starts):
//! every event published with its id, in each transfer's order; a restart resumes behind
//! the last confirmed page, and a page published again is dropped by the broker by id.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use xfer_client::Client;
use xfer_engine::{Sleeper, TokioSleeper};
use xfer_server::sink::amqp::AmqpConfig;
use xfer_server::sink::nats::NatsConfig;
use xfer_server::{ServeConfig, Server};

/// The NATS server with JetStream (`XFER_TEST_NATS_URL`, by default the local one).
fn nats_url() -> String {
    std::env::var("XFER_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// The RabbitMQ broker (`XFER_TEST_AMQP_URL`, by default the local one).
fn amqp_url() -> String {
    std::env::var("XFER_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

async fn start(data: &std::path::Path, nats: &NatsConfig) -> (Server, Client) {
    start_with(data, |cfg| cfg.sink_nats = Some(nats.clone())).await
}

async fn start_with(
    data: &std::path::Path,
    configure: impl FnOnce(&mut ServeConfig),
) -> (Server, Client) {
    let mut cfg = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: data.to_path_buf(),
        shards: 2,
        sweep_interval_ms: 100,
        ..ServeConfig::default()
    };
    configure(&mut cfg);
    let server = Server::start(cfg).await.expect("the server starts");
    let client = Client::new(&format!("http://{}", server.addr()), None).expect("a client");
    for _ in 0..250 {
        if client.get("/readyz").await.is_ok_and(|r| r.status == 200) {
            break;
        }
        TokioSleeper.sleep(20).await;
    }
    (server, client)
}

/// Every event of the feed, by the API.
async fn feed(client: &Client) -> Vec<Value> {
    let mut all = Vec::new();
    let mut path = "/v1/events?limit=1000".to_string();
    loop {
        let page = client.get(&path).await.expect("the feed");
        assert_eq!(page.status, 200, "{}", page.text);
        let events = page.body["events"].as_array().expect("events").clone();
        if events.is_empty() {
            return all;
        }
        all.extend(events);
        path = format!(
            "/v1/events?limit=1000&after={}",
            page.body["next"].as_str().unwrap()
        );
    }
}

/// The stream's messages, in order: (Nats-Msg-Id, subject, body).
async fn stream_messages(nats: &NatsConfig) -> Vec<(String, String, Value)> {
    let client = async_nats::connect(nats.url.as_str()).await.expect("nats");
    let js = async_nats::jetstream::new(client);
    let mut stream = js.get_stream(&nats.stream).await.expect("the stream");
    let n = stream
        .info()
        .await
        .expect("stream info")
        .state
        .last_sequence;
    let mut out = Vec::new();
    for seq in 1..=n {
        let m = stream.get_raw_message(seq).await.expect("a message");
        let id = m
            .headers
            .get("Nats-Msg-Id")
            .map(|v| v.to_string())
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&m.payload).expect("JSON");
        out.push((id, m.subject.to_string(), body));
    }
    out
}

/// Waits until the stream holds `n` messages (10 s at most), and answers them.
async fn stream_with(nats: &NatsConfig, n: usize) -> Vec<(String, String, Value)> {
    for _ in 0..100 {
        let got = stream_messages(nats).await;
        if got.len() >= n {
            return got;
        }
        TokioSleeper.sleep(100).await;
    }
    stream_messages(nats).await
}

async fn delete_stream(nats: &NatsConfig) {
    let client = async_nats::connect(nats.url.as_str()).await.expect("nats");
    let _ = async_nats::jetstream::new(client)
        .delete_stream(&nats.stream)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_reaches_jetstream_once_by_id_across_restarts() {
    let tag = format!("{}_{}", std::process::id(), line!());
    let nats = NatsConfig {
        url: nats_url(),
        stream: format!("XFER_TEST_{tag}"),
        subject: format!("xfer_test_{tag}"),
    };
    delete_stream(&nats).await;
    let dir = tempfile::tempdir().expect("a directory");
    let data = dir.path().join("data");
    let (server, client) = start(&data, &nats).await;
    workload(&client).await;
    let events = feed(&client).await;
    let ids: Vec<String> = events
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    let published = stream_with(&nats, ids.len()).await;
    let published_ids: Vec<String> = published.iter().map(|(id, _, _)| id.clone()).collect();
    assert_eq!(published_ids, ids, "every event, once, in the feed's order");
    for ((id, subject, body), e) in published.iter().zip(&events) {
        assert_eq!(&body["id"], &json!(id));
        // The API's event (its transfer as read when published, here maybe older).
        for field in ["id", "type", "state", "transfer_id", "at_ms", "refund_id"] {
            assert_eq!(body[field], e[field], "{field} of {id}");
        }
        assert_eq!(body["transfer"]["postings"], e["transfer"]["postings"]);
        assert_eq!(
            subject,
            &format!("{}.{}", nats.subject, e["type"].as_str().unwrap())
        );
    }
    let kinds = |t: &str| -> Vec<String> {
        published
            .iter()
            .filter(|(_, _, b)| b["transfer_id"] == t)
            .map(|(_, _, b)| b["type"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(kinds("h1"), ["accepted", "held", "captured", "done"]);
    assert_eq!(kinds("too-much"), ["accepted", "canceled"]);

    // A restart resumes behind the confirmed pages: nothing new, nothing again.
    server.shutdown().await.expect("a clean shutdown");
    let cursor = data.join("sinks").join("nats.cursor");
    let kept = std::fs::read_to_string(&cursor).expect("the sink's cursor");
    let (server, client) = start(&data, &nats).await;
    let pay = json!({"id": "after-restart",
                     "postings": [{"from": "bank", "to": "bob", "asset": "USD", "amount": 1}]});
    submit_one(&client, pay).await;
    let published = stream_with(&nats, ids.len() + 2).await;
    assert_eq!(published.len(), ids.len() + 2, "the two new events only");
    server.shutdown().await.expect("a clean shutdown");

    // Its cursor lost, the sink publishes everything again: the stream drops every repeat
    // by its Nats-Msg-Id.
    std::fs::remove_file(&cursor).expect("remove the cursor");
    let (server, _client) = start(&data, &nats).await;
    let mut again = String::new();
    for _ in 0..100 {
        again = std::fs::read_to_string(&cursor).unwrap_or_default();
        if !again.is_empty() && again != kept {
            break;
        }
        TokioSleeper.sleep(100).await;
    }
    assert_ne!(again, kept, "the sink went through the feed again");
    let published = stream_messages(&nats).await;
    assert_eq!(published.len(), ids.len() + 2, "no repeat kept");
    let mut seen = BTreeMap::new();
    for (id, _, _) in &published {
        *seen.entry(id.clone()).or_insert(0) += 1;
    }
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
    server.shutdown().await.expect("a clean shutdown");
    delete_stream(&nats).await;
}

async fn submit_one(client: &Client, body: Value) {
    let a = client
        .send(hyper::Method::POST, "/v1/transfers", Some(&body))
        .await
        .expect("submit");
    assert!(a.is_success(), "{}", a.text);
}

/// Accounts, twenty transfers, one refused, a hold captured.
async fn workload(client: &Client) {
    for (id, bound) in [
        ("bank", json!("unbounded")),
        ("alice", json!(0)),
        ("bob", json!(0)),
    ] {
        let a = client
            .send(
                hyper::Method::POST,
                "/v1/accounts",
                Some(&json!({"id": id, "asset": "USD", "lower_bound": bound})),
            )
            .await
            .expect("create");
        assert!(a.is_success(), "{}", a.text);
    }
    let pay = |id: &str, from: &str, to: &str, amount: u64| json!({"id": id, "postings": [{"from": from, "to": to, "asset": "USD", "amount": amount}]});
    for i in 0..20 {
        submit_one(client, pay(&format!("t{i}"), "bank", "alice", 10)).await;
    }
    let a = client
        .send(
            hyper::Method::POST,
            "/v1/transfers",
            Some(&pay("too-much", "bob", "alice", 1_000)),
        )
        .await
        .expect("submit");
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("canceled")),
        "{}",
        a.text
    );
    let hold = json!({"id": "h1", "postings": [{"from": "alice", "to": "bob", "asset": "USD", "amount": 5}],
                      "hold": {"ttl_ms": 60_000}});
    submit_one(client, hold).await;
    let c = client
        .send(hyper::Method::POST, "/v1/transfers/h1/capture", None)
        .await
        .expect("capture");
    assert!(c.is_success(), "{}", c.text);
}

/// A channel to the test broker.
async fn amqp_channel() -> (lapin::Connection, lapin::Channel) {
    let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = conn.create_channel().await.expect("a channel");
    (conn, channel)
}

/// Every message in `queue` now, taken off it: (message_id, routing key, body).
async fn drain(queue: &str) -> Vec<(String, String, Value)> {
    let (_conn, channel) = amqp_channel().await;
    let mut out = Vec::new();
    while let Some(m) = channel
        .basic_get(
            queue.into(),
            lapin::options::BasicGetOptions { no_ack: true },
        )
        .await
        .expect("basic.get")
    {
        let d = m.delivery;
        let id = d
            .properties
            .message_id()
            .as_ref()
            .map(|i| i.to_string())
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&d.data).expect("JSON");
        out.push((id, d.routing_key.to_string(), body));
    }
    out
}

/// Takes messages off `queue` until `n` came (10 s at most).
async fn drain_until(queue: &str, n: usize) -> Vec<(String, String, Value)> {
    let mut got = Vec::new();
    for _ in 0..100 {
        got.extend(drain(queue).await);
        if got.len() >= n {
            break;
        }
        TokioSleeper.sleep(100).await;
    }
    got
}

async fn delete_amqp(cfg: &AmqpConfig) {
    let (_conn, channel) = amqp_channel().await;
    let _ = channel
        .queue_delete(cfg.queue.as_str().into(), Default::default())
        .await;
    let _ = channel
        .exchange_delete(cfg.exchange.as_str().into(), Default::default())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_reaches_rabbitmq_persistent_and_repeats_carry_their_id() {
    let tag = format!("{}_{}", std::process::id(), line!());
    let amqp = AmqpConfig {
        url: amqp_url(),
        exchange: format!("xfer_test_{tag}"),
        queue: format!("xfer_test_{tag}"),
    };
    delete_amqp(&amqp).await;
    let dir = tempfile::tempdir().expect("a directory");
    let data = dir.path().join("data");
    let configure = |cfg: &mut ServeConfig| cfg.sink_amqp = Some(amqp.clone());
    let (server, client) = start_with(&data, configure).await;
    workload(&client).await;
    let events = feed(&client).await;
    let ids: Vec<String> = events
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    let got = drain_until(&amqp.queue, ids.len()).await;
    let got_ids: Vec<String> = got.iter().map(|(id, _, _)| id.clone()).collect();
    assert_eq!(got_ids, ids, "every event, once, in the feed's order");
    for ((id, key, body), e) in got.iter().zip(&events) {
        assert_eq!(&body["id"], &json!(id));
        assert_eq!(key, e["type"].as_str().unwrap(), "routed by type");
    }
    server.shutdown().await.expect("a clean shutdown");

    // Its cursor lost, the sink publishes everything again: RabbitMQ keeps the repeats,
    // each with its id, by which the receiver drops them.
    let cursor = data.join("sinks").join("amqp.cursor");
    std::fs::remove_file(&cursor).expect("remove the cursor");
    let (server, _client) = start_with(&data, configure).await;
    let again = drain_until(&amqp.queue, ids.len()).await;
    let again_ids: Vec<String> = again.iter().map(|(id, _, _)| id.clone()).collect();
    assert_eq!(again_ids, ids, "the same events, the same ids");
    let mut by_id = BTreeMap::new();
    for (id, _, body) in got.iter().chain(&again) {
        by_id
            .entry(id.clone())
            .or_insert_with(Vec::new)
            .push(body["type"].clone());
    }
    assert!(by_id
        .values()
        .all(|types| types.windows(2).all(|w| w[0] == w[1])));
    server.shutdown().await.expect("a clean shutdown");
    delete_amqp(&amqp).await;
}
