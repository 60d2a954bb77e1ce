//! The change feed's sinks against real brokers (the servers `scripts/services` starts):
//! every event published with its id, in each transfer's order; a restart resumes behind
//! the last confirmed page, and a page published again is dropped by the broker by id.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use xfer_client::Client;
use xfer_engine::{Sleeper, TokioSleeper};
use xfer_server::sink::nats::NatsConfig;
use xfer_server::{ServeConfig, Server};

/// The NATS server with JetStream (`XFER_TEST_NATS_URL`, by default the local one).
fn nats_url() -> String {
    std::env::var("XFER_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

async fn start(data: &std::path::Path, nats: &NatsConfig) -> (Server, Client) {
    let cfg = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: data.to_path_buf(),
        shards: 2,
        sweep_interval_ms: 100,
        sink_nats: Some(nats.clone()),
        ..ServeConfig::default()
    };
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
    let submit = |body: Value| {
        let client = &client;
        async move {
            let a = client
                .send(hyper::Method::POST, "/v1/transfers", Some(&body))
                .await
                .expect("submit");
            assert!(a.is_success() || a.status == 422, "{}", a.text);
        }
    };
    for i in 0..20 {
        submit(pay(&format!("t{i}"), "bank", "alice", 10)).await;
    }
    submit(pay("too-much", "bob", "alice", 1_000)).await;
    let hold = json!({"id": "h1", "postings": [{"from": "alice", "to": "bob", "asset": "USD", "amount": 5}],
                      "hold": {"ttl_ms": 60_000}});
    submit(hold).await;
    let c = client
        .send(hyper::Method::POST, "/v1/transfers/h1/capture", None)
        .await
        .expect("capture");
    assert!(c.is_success(), "{}", c.text);

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
    submit_one(&client, pay("after-restart", "bank", "bob", 1)).await;
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
