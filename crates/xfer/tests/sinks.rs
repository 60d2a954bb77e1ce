//! The change feed's sinks against real brokers (the servers `scripts/services` starts):
//! every event published with its id, in each transfer's order; a restart resumes behind
//! the last confirmed page, and a page published again is dropped by the broker by id; and
//! the real `xfer serve` killed with SIGKILL under load while publishing to both brokers,
//! one of them restarted meanwhile.

mod common;

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
    common::all_events(client).await
}

/// The stream's messages, in order: (Nats-Msg-Id, subject, body).
async fn stream_messages(nats: &NatsConfig) -> Vec<(String, String, Value)> {
    common::jetstream_messages(&nats.url, &nats.stream).await
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

/// Checks that `published` holds the events of the feed `feed` (their ids), each once, and
/// each transfer's in its order, and answers them in the feed's order. Only each shard's
/// order is fixed: the feed merges shards by time, and a page the sink read while events
/// were still being made may interleave two shards otherwise than a later read.
fn as_feed<T: Clone>(published: &[T], id: impl Fn(&T) -> &String, feed: &[String]) -> Vec<T> {
    let mut got: Vec<&String> = published.iter().map(&id).collect();
    let mut want: Vec<&String> = feed.iter().collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "every event, once");
    let per_transfer = |ids: Vec<&String>| {
        let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for e in ids {
            let transfer = e.split('/').next().unwrap_or_default().to_string();
            by.entry(transfer).or_default().push(e.clone());
        }
        by
    };
    assert_eq!(
        per_transfer(published.iter().map(&id).collect()),
        per_transfer(feed.iter().collect()),
        "each transfer's events in order"
    );
    let place: BTreeMap<&String, usize> = feed.iter().enumerate().map(|(i, e)| (e, i)).collect();
    let mut out = published.to_vec();
    out.sort_by_key(|e| place[id(e)]);
    out
}

async fn delete_stream(nats: &NatsConfig) {
    xfer_server::sink::nats::delete_stream(nats)
        .await
        .expect("the stream deleted");
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
    let published = as_feed(&published, |(id, _, _)| id, &ids);
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
    // Its metrics: everything confirmed, nothing pending, no lag.
    let metric = |text: &str, name: &str| sink_metric(text, name, "nats");
    let mut text = String::new();
    for _ in 0..50 {
        text = client.get("/metrics").await.expect("metrics").text;
        if metric(&text, "xfer_sink_pending_events") == Some(0.0) {
            break;
        }
        TokioSleeper.sleep(100).await;
    }
    assert_eq!(
        metric(&text, "xfer_sink_published_total"),
        Some(ids.len() as f64),
        "{text}"
    );
    assert_eq!(metric(&text, "xfer_sink_lag_seconds"), Some(0.0), "{text}");
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
    let usd = json!({"code": "USD", "scale": 2});
    let a = client
        .send(hyper::Method::POST, "/v1/assets", Some(&usd))
        .await;
    assert!(a.expect("declare USD").is_success(), "declare USD");
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
    let got = as_feed(&got, |(id, _, _)| id, &ids);
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
    let again = as_feed(&again, |(id, _, _)| id, &ids);
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

/// A NATS server of this test's own (JetStream in `dir`), to restart at will.
struct PrivateNats {
    child: std::process::Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl PrivateNats {
    fn start(dir: &std::path::Path, port: u16) -> PrivateNats {
        let child = std::process::Command::new("nats-server")
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nats-server starts (scripts/services installs it)");
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        PrivateNats {
            child,
            port,
            dir: dir.to_path_buf(),
        }
    }

    fn restart(mut self) -> PrivateNats {
        common::sigkill(&mut self.child);
        PrivateNats::start(&self.dir, self.port)
    }
}

impl Drop for PrivateNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Each transfer's event types, in the order received, after dropping repeats by id; and
/// the ids that were not in `feed`.
fn per_transfer(
    received: &[(String, Value)],
    feed: &[Value],
) -> (BTreeMap<String, Vec<String>>, Vec<String>) {
    let known: std::collections::BTreeSet<&str> =
        feed.iter().map(|e| e["id"].as_str().unwrap()).collect();
    let mut seen = std::collections::BTreeSet::new();
    let mut by_transfer: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut invented = Vec::new();
    for (id, body) in received {
        if !seen.insert(id.clone()) {
            continue;
        }
        if !known.contains(id.as_str()) {
            invented.push(id.clone());
        }
        by_transfer
            .entry(body["transfer_id"].as_str().unwrap().to_string())
            .or_default()
            .push(body["type"].as_str().unwrap().to_string());
    }
    (by_transfer, invented)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sinks_deliver_every_change_through_sigkills_and_a_broker_restart() {
    use common::*;
    use std::sync::Arc;
    let tmp = tempfile::tempdir().expect("a directory");
    let data = tmp.path().join("data");
    let port = free_port();
    let mut broker = PrivateNats::start(&tmp.path().join("nats"), port);
    let tag = format!("{}_{}", std::process::id(), line!());
    let nats = NatsConfig {
        url: format!("nats://127.0.0.1:{port}"),
        stream: format!("XFER_KILL_{tag}"),
        subject: format!("xfer_kill_{tag}"),
    };
    let amqp = AmqpConfig {
        url: amqp_url(),
        exchange: format!("xfer_kill_{tag}"),
        queue: format!("xfer_kill_{tag}"),
    };
    delete_amqp(&amqp).await;
    let data_arg = data.display().to_string();
    let args = [
        "--data-dir",
        &data_arg,
        "--sink-nats",
        &nats.url,
        "--sink-nats-stream",
        &nats.stream,
        "--sink-nats-subject",
        &nats.subject,
        "--sink-amqp",
        &amqp.url,
        "--sink-amqp-exchange",
        &amqp.exchange,
        "--sink-amqp-queue",
        &amqp.queue,
    ];
    let ledger = Arc::new(Ledger::default());
    let mut serve = Serve::start_with(&args, tmp.path(), "serve-0");
    serve.ready().await;
    setup(&serve.client(), &ledger).await;
    let mut from_amqp = Vec::new();
    for cycle in 1..=3u64 {
        load(&[serve.client()], &ledger, cycle, 800, move || serve.kill()).await;
        if cycle == 2 {
            // The broker goes down and comes back while no server runs, and again while
            // the next one publishes.
            broker = broker.restart();
        }
        serve = Serve::start_with(&args, tmp.path(), &format!("serve-{cycle}"));
        serve.ready().await;
        if cycle == 2 {
            TokioSleeper.sleep(200).await;
            broker = broker.restart();
        }
        let c = serve.client();
        check_acknowledged(&c, &ledger).await;
        retry_unknown(&c, &ledger).await;
        quiet(&c, &ledger, tmp.path()).await;
        from_amqp.extend(
            drain(&amqp.queue)
                .await
                .into_iter()
                .map(|(id, _, body)| (id, body)),
        );
    }
    let c = serve.client();
    let feed = feed(&c).await;
    let want = per_transfer(
        &feed
            .iter()
            .map(|e| (e["id"].as_str().unwrap().to_string(), e.clone()))
            .collect::<Vec<_>>(),
        &feed,
    )
    .0;
    // Wait until both sinks have published the whole feed (they resume from their
    // cursors; the broker restart made them retry).
    let mut got_nats = (BTreeMap::new(), Vec::new());
    let mut got_amqp = (BTreeMap::new(), Vec::new());
    for _ in 0..200 {
        let nats_msgs: Vec<(String, Value)> = stream_messages(&nats)
            .await
            .into_iter()
            .map(|(id, _, body)| (id, body))
            .collect();
        from_amqp.extend(
            drain(&amqp.queue)
                .await
                .into_iter()
                .map(|(id, _, body)| (id, body)),
        );
        got_nats = per_transfer(&nats_msgs, &feed);
        got_amqp = per_transfer(&from_amqp, &feed);
        if got_nats.0 == want && got_amqp.0 == want {
            break;
        }
        TokioSleeper.sleep(100).await;
    }
    let terminal = feed
        .iter()
        .filter(|e| e["type"] == "done" || e["type"] == "canceled")
        .count();
    assert!(terminal > 100, "a real load: {terminal} transfers ended");
    assert_eq!(
        got_nats.1,
        Vec::<String>::new(),
        "JetStream: nothing invented"
    );
    assert_eq!(
        got_amqp.1,
        Vec::<String>::new(),
        "RabbitMQ: nothing invented"
    );
    assert!(
        got_nats.0 == want,
        "JetStream: each transfer's changes, in order"
    );
    assert!(
        got_amqp.0 == want,
        "RabbitMQ: each transfer's changes, in order"
    );
    println!(
        "sinks after 3 SIGKILLs and a broker restarted twice: {} events of {} transfers \
         ({terminal} ended) on JetStream and RabbitMQ ({} messages with repeats)",
        feed.len(),
        want.len(),
        from_amqp.len()
    );
    let status = serve.terminate();
    assert!(status.success(), "exit after SIGTERM: {status}");
    delete_amqp(&amqp).await;
}

/// Metric `name` of `sink` in the `/metrics` text `text`, if there.
fn sink_metric(text: &str, name: &str, sink: &str) -> Option<f64> {
    let line = format!("{name}{{sink=\"{sink}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(line.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

/// The sink's `xfer_sink_pending_events`, if the server reports it yet.
async fn pending_events(client: &Client, sink: &str) -> Option<f64> {
    let text = client.get("/metrics").await.expect("metrics").text;
    sink_metric(&text, "xfer_sink_pending_events", sink)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_held_back_by_its_broker_counts_the_events_behind_it() {
    let tag = format!("{}_{}", std::process::id(), line!());
    let dir = tempfile::tempdir().expect("a directory");
    let port = free_port();
    let broker = PrivateNats::start(&dir.path().join("nats"), port);
    let nats = NatsConfig {
        url: format!("nats://127.0.0.1:{port}"),
        stream: format!("XFER_TEST_{tag}"),
        subject: format!("xfer_test_{tag}"),
    };
    let (server, client) = start(&dir.path().join("data"), &nats).await;
    workload(&client).await;
    let made = feed(&client).await.len();
    stream_with(&nats, made).await;
    for _ in 0..100 {
        if pending_events(&client, "nats").await == Some(0.0) {
            break;
        }
        TokioSleeper.sleep(100).await;
    }
    assert_eq!(
        pending_events(&client, "nats").await,
        Some(0.0),
        "caught up"
    );

    // The broker gone, 400 transfers make 800 events: more than a page (512) behind.
    drop(broker);
    let transfers: Vec<Value> = (0..400)
        .map(|i| {
            json!({"id": format!("b{i}"), "postings": [
            {"from": "bank", "to": "alice", "asset": "USD", "amount": 1}]})
        })
        .collect();
    let a = client
        .post("/v1/transfers/batch", &json!({"transfers": transfers}))
        .await
        .expect("a batch");
    assert_eq!(a.status, 200, "{}", a.text);
    let mut behind = None;
    for _ in 0..400 {
        behind = pending_events(&client, "nats").await;
        if behind == Some(800.0) {
            break;
        }
        TokioSleeper.sleep(100).await;
    }
    assert_eq!(behind, Some(800.0), "every event after the cursor counted");

    // Back, the broker takes them all and the count falls to zero.
    let _broker = PrivateNats::start(&dir.path().join("nats"), port);
    for _ in 0..400 {
        behind = pending_events(&client, "nats").await;
        if behind == Some(0.0) {
            break;
        }
        TokioSleeper.sleep(100).await;
    }
    assert_eq!(behind, Some(0.0), "caught up again");
    server.shutdown().await.expect("a clean shutdown");
}
