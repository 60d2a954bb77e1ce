//! `xfer consume` against real brokers (the servers `scripts/services` starts) and a real
//! server: requests published with duplicates, conflicting and malformed ones among them;
//! the consumer process SIGKILLed while messages it took are unacknowledged and started
//! again; then every valid request is applied exactly once (balances, the audit), each has
//! its outcome, each invalid one is in the dead letters with its error code, and nothing
//! else is.

mod common;

use common::{sigkill, sigterm};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use xfer_client::Client;
use xfer_engine::{Sleeper, TokioSleeper};
use xfer_server::{ServeConfig, Server};

fn nats_url() -> String {
    std::env::var("XFER_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

fn amqp_url() -> String {
    std::env::var("XFER_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// Valid requests; every tenth is published twice.
const VALID: usize = 1_500;
/// Customers the valid requests pay.
const PAYEES: usize = 8;

/// The names a test's consumer uses, its own.
struct Names {
    requests: String,
    outcomes: String,
    dead_letters: String,
    requests_stream: String,
    replies_stream: String,
    consumer: String,
}

impl Names {
    fn new(kind: &str) -> Names {
        let tag = format!("{kind}_{}", std::process::id());
        Names {
            requests: format!("xfer_test.{tag}.requests"),
            outcomes: format!("xfer_test.{tag}.outcomes"),
            dead_letters: format!("xfer_test.{tag}.dead"),
            requests_stream: format!("XFER_TEST_REQ_{tag}"),
            replies_stream: format!("XFER_TEST_REP_{tag}"),
            consumer: format!("xfer_test_{tag}"),
        }
    }
}

/// The expected end of one valid request: applied (or refused by the rules: canceled),
/// once, paying `amount` to customer `payee`.
#[derive(Clone, Debug, PartialEq)]
struct Expect {
    state: &'static str,
    payee: usize,
    amount: u64,
}

/// The messages to publish, in order; what each valid request should come to, by id; the
/// dead letters' codes.
fn workload() -> (Vec<Vec<u8>>, BTreeMap<String, Expect>, Vec<&'static str>) {
    let mut messages = Vec::new();
    let mut expect = BTreeMap::new();
    let mut dead = Vec::new();
    for i in 0..VALID {
        let id = format!("r-{i}");
        let (payee, amount) = (i % PAYEES, (i % 50) as u64 + 1);
        let body = json!({"id": id, "postings": [
            {"from": "issuer", "to": format!("c{payee}"), "asset": "USD", "amount": amount}]});
        let bytes = serde_json::to_vec(&body).unwrap();
        messages.push(bytes.clone());
        if i % 10 == 0 {
            messages.push(bytes);
        }
        expect.insert(
            id,
            Expect {
                state: "done",
                payee,
                amount,
            },
        );
        // Among them: requests the rules refuse (an outcome, not a dead letter) and ones
        // the server cannot take (dead letters), none of which holds up the rest.
        if i % 300 == 7 {
            let id = format!("poor-{i}");
            let body = json!({"id": id, "postings": [
                {"from": "poor", "to": "c0", "asset": "USD", "amount": 5}]});
            messages.push(serde_json::to_vec(&body).unwrap());
            expect.insert(
                id,
                Expect {
                    state: "canceled",
                    payee: 0,
                    amount: 0,
                },
            );
        }
        if i % 300 == 150 {
            let n = i / 300;
            let bad: [(&[u8], &'static str); 5] = [
                (b"{not json", "malformed_json"),
                (
                    br#"{"postings": [{"from": "issuer", "to": "c0", "asset": "USD", "amount": 1}]}"#,
                    "missing_field",
                ),
                (
                    br#"{"id": "x", "postings": [{"from": "issuer", "to": "c0", "asset": "USD", "amount": 1}], "colour": "red"}"#,
                    "unknown_field",
                ),
                (
                    br#"{"id": "y", "postings": [{"from": "issuer", "to": "c0", "asset": "USD", "amount": -1}]}"#,
                    "amount_must_be_positive",
                ),
                (br#"{"id": "z", "postings": []}"#, "postings_must_not_be_empty"),
            ];
            let (bytes, code) = bad[n % bad.len()];
            messages.push(bytes.to_vec());
            dead.push(code);
        }
    }
    // The same id as an applied request with another body: refused, dead-lettered.
    let conflict = json!({"id": "r-3", "postings": [
        {"from": "issuer", "to": "c3", "asset": "USD", "amount": 999}]});
    messages.push(serde_json::to_vec(&conflict).unwrap());
    dead.push("id_exists_with_different_body");
    (messages, expect, dead)
}

async fn start_server(data: &Path) -> (Server, Client) {
    let cfg = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: data.to_path_buf(),
        shards: 2,
        sweep_interval_ms: 100,
        ..ServeConfig::default()
    };
    let server = Server::start(cfg).await.expect("the server starts");
    let client = Client::new(&format!("http://{}", server.addr()), None).expect("a client");
    let usd = client
        .post("/v1/assets", &json!({"code": "USD", "scale": 2}))
        .await;
    assert_eq!(usd.expect("declare USD").status, 201, "declare USD");
    for (id, bound) in [
        ("issuer".to_string(), json!("unbounded")),
        ("poor".to_string(), json!(0)),
    ]
    .into_iter()
    .chain((0..PAYEES).map(|i| (format!("c{i}"), json!(0))))
    {
        let a = client
            .post(
                "/v1/accounts",
                &json!({"id": id, "asset": "USD", "lower_bound": bound}),
            )
            .await
            .expect("create account");
        assert_eq!(a.status, 201, "create {id}: {}", a.text);
    }
    (server, client)
}

/// `xfer consume` from `from` into the server at `url`, logging to `log`.
fn consumer(from: &str, url: &str, names: &Names, log: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_xfer"))
        .arg("consume")
        .args(["--from", from, "--url", url])
        .args(["--requests", &names.requests])
        .args(["--outcomes", &names.outcomes])
        .args(["--dead-letters", &names.dead_letters])
        .args(["--requests-stream", &names.requests_stream])
        .args(["--replies-stream", &names.replies_stream])
        .args(["--consumer", &names.consumer])
        .args(["--in-flight", "32", "--ack-wait-ms", "1000"])
        .env_remove("XFER_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .expect("a log file"),
        )
        .spawn()
        .expect("xfer consume starts")
}

/// Every valid request applied exactly once, each with its outcome; every invalid one
/// dead-lettered with its code; the audit clean.
async fn check(
    client: &Client,
    expect: &BTreeMap<String, Expect>,
    outcomes: &[(String, Value)],
    dead: &[Value],
    dead_codes: &[&str],
) {
    let mut paid = [0u64; PAYEES];
    for (id, e) in expect {
        let Expect {
            state,
            payee,
            amount,
        } = e;
        let t = client
            .get(&format!("/v1/transfers/{id}"))
            .await
            .expect("GET transfer");
        assert_eq!(t.status, 200, "{id}: {}", t.text);
        assert_eq!(t.body["state"], *state, "{id}: {}", t.text);
        paid[*payee] += amount;
    }
    for (i, want) in paid.iter().enumerate() {
        let a = client
            .get(&format!("/v1/accounts/c{i}"))
            .await
            .expect("GET account");
        assert_eq!(
            a.body["balance"],
            json!(want),
            "c{i}: each request applied exactly once: {}",
            a.text
        );
    }
    let by_id: BTreeMap<&str, &Value> = outcomes
        .iter()
        .map(|(_, b)| (b["id"].as_str().unwrap_or_default(), b))
        .collect();
    let want: BTreeSet<&str> = expect.keys().map(String::as_str).collect();
    let got: BTreeSet<&str> = by_id.keys().copied().collect();
    assert_eq!(got, want, "an outcome for every valid request, none else");
    for (id, e) in expect {
        assert_eq!(by_id[id.as_str()]["state"], e.state, "the outcome of {id}");
    }
    for (msg_id, b) in outcomes {
        assert_eq!(
            msg_id,
            &format!(
                "{}/{}",
                b["id"].as_str().unwrap(),
                b["state"].as_str().unwrap()
            )
        );
    }
    let mut codes: Vec<&str> = dead.iter().map(|d| d["code"].as_str().unwrap()).collect();
    let mut want_codes = dead_codes.to_vec();
    codes.sort_unstable();
    want_codes.sort_unstable();
    assert_eq!(
        codes, want_codes,
        "each invalid request dead-lettered once: {dead:?}"
    );
    for d in dead {
        assert!(d["message"].as_str().is_some_and(|m| !m.is_empty()), "{d}");
        assert!(!d["request"].is_null(), "the request kept: {d}");
    }
    let audit = client.get("/v1/audit").await.expect("audit");
    assert_eq!(audit.body["clean"], true, "{}", audit.text);
}

/// Waits (10 s at most) until `log` says `n` consumers started consuming.
async fn started(log: &Path, n: usize) {
    for _ in 0..1_000 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.matches(" consuming ").count() >= n {
            return;
        }
        TokioSleeper.sleep(10).await;
    }
    panic!(
        "consumer {n} did not start: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// The messages `log` says were delivered again (after the kill, unacknowledged ones).
fn redelivered(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches("a request delivered again")
        .count()
}

/// Exits 0 within 15 s of SIGTERM.
fn stop(mut c: Child, log: &Path) {
    let status = sigterm(&mut c, log);
    assert!(
        status.success(),
        "xfer consume stops cleanly: {status}; log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_requests_apply_once_through_a_sigkill_of_the_consumer() {
    use async_nats::jetstream;
    let names = Names::new("nats");
    let nats = async_nats::connect(nats_url()).await.expect("nats");
    let js = jetstream::new(nats);
    for s in [&names.requests_stream, &names.replies_stream] {
        let _ = js.delete_stream(s).await;
    }
    let dir = tempfile::tempdir().expect("a directory");
    let log = dir.path().join("consume.log");
    let (server, client) = start_server(&dir.path().join("data")).await;
    let url = format!("http://{}", server.addr());
    let (messages, expect, dead_codes) = workload();

    // The consumer makes the streams; then the requests arrive.
    let mut first = consumer(&nats_url(), &url, &names, &log);
    let mut requests = None;
    for _ in 0..100 {
        if let Ok(s) = js.get_stream(&names.requests_stream).await {
            requests = Some(s);
            break;
        }
        TokioSleeper.sleep(100).await;
    }
    let requests = requests.expect("the consumer made its requests stream");
    let mut acks = Vec::new();
    for m in &messages {
        let ack = js
            .publish(names.requests.clone(), m.clone().into())
            .await
            .expect("publish");
        acks.push(ack);
    }
    for ack in acks {
        ack.await.expect("publish ack");
    }

    // Killed while it holds messages it has not acknowledged.
    let mut pending_at_kill = 0;
    for _ in 0..500 {
        let mut c: jetstream::consumer::PullConsumer = requests
            .get_consumer(&names.consumer)
            .await
            .expect("the consumer");
        let info = c.info().await.expect("consumer info");
        if info.delivered.stream_sequence > 100 && info.num_ack_pending > 0 {
            pending_at_kill = info.num_ack_pending;
            break;
        }
        TokioSleeper.sleep(10).await;
    }
    assert!(
        pending_at_kill > 0,
        "the kill lands with unacknowledged messages"
    );
    sigkill(&mut first);

    let second = consumer(&nats_url(), &url, &names, &log);
    started(&log, 2).await;
    let mut done = false;
    for _ in 0..600 {
        let mut c: jetstream::consumer::PullConsumer = requests
            .get_consumer(&names.consumer)
            .await
            .expect("the consumer");
        let info = c.info().await.expect("consumer info");
        if info.num_pending == 0 && info.num_ack_pending == 0 {
            done = true;
            break;
        }
        TokioSleeper.sleep(100).await;
    }
    assert!(
        done,
        "every request acknowledged within 60 s; log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    stop(second, &log);
    assert!(
        redelivered(&log) > 0,
        "messages unacknowledged at the kill came again"
    );

    let (mut outcomes, mut dead) = (Vec::new(), Vec::new());
    for (id, subject, body) in common::jetstream_messages(&nats_url(), &names.replies_stream).await
    {
        if subject == names.outcomes {
            outcomes.push((id, body));
        } else {
            dead.push(body);
        }
    }
    // The stream dropped every repeated outcome by its id.
    let unique: BTreeSet<&String> = outcomes.iter().map(|(id, _)| id).collect();
    assert_eq!(unique.len(), outcomes.len(), "one copy of each outcome");
    check(&client, &expect, &outcomes, &dead, &dead_codes).await;
    for s in [&names.requests_stream, &names.replies_stream] {
        let _ = js.delete_stream(s).await;
    }
    server.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_requests_apply_once_through_a_sigkill_of_the_consumer() {
    use lapin::options::{
        BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
        QueueDeclareOptions, QueueDeleteOptions,
    };
    use lapin::types::FieldTable;
    use lapin::{BasicProperties, Connection, ConnectionProperties};
    let names = Names::new("amqp");
    let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = connection.create_channel().await.expect("a channel");
    for q in [&names.requests, &names.outcomes, &names.dead_letters] {
        let _ = channel
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await;
        channel
            .queue_declare(
                q.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("declare");
    }
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let dir = tempfile::tempdir().expect("a directory");
    let log = dir.path().join("consume.log");
    let (server, client) = start_server(&dir.path().join("data")).await;
    let url = format!("http://{}", server.addr());
    let (messages, expect, dead_codes) = workload();
    let mut confirms = Vec::new();
    for (n, m) in messages.iter().enumerate() {
        let properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(format!("req-{n}").into());
        let c = channel
            .basic_publish(
                "".into(),
                names.requests.as_str().into(),
                BasicPublishOptions::default(),
                m,
                properties,
            )
            .await
            .expect("publish");
        confirms.push(c);
    }
    for c in confirms {
        assert!(c.await.expect("confirm").is_ack());
    }

    // Every reply read (and acknowledged) off its queue, as it comes.
    let drain = |queue: String, into: std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>| {
        let channel = channel.clone();
        async move {
            while let Some(m) = channel
                .basic_get(queue.as_str().into(), BasicGetOptions::default())
                .await
                .expect("basic.get")
            {
                let id = m
                    .properties
                    .message_id()
                    .as_ref()
                    .map(|s| s.to_string())
                    .unwrap_or_default();
                let body: Value = serde_json::from_slice(&m.data).expect("JSON");
                into.lock().unwrap().push((id, body));
                m.ack(BasicAckOptions::default()).await.expect("ack");
            }
        }
    };
    let outcomes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let dead = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));

    // Killed while messages it took are unacknowledged (RabbitMQ hands them back): it has
    // answered some and requests still wait behind the ones it holds.
    let count = |queue: String| {
        let channel = channel.clone();
        async move {
            channel
                .queue_declare(
                    queue.as_str().into(),
                    QueueDeclareOptions {
                        passive: true,
                        ..QueueDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
                .expect("passive declare")
                .message_count()
        }
    };
    let mut first = consumer(&amqp_url(), &url, &names, &log);
    let mut caught = false;
    for _ in 0..2_000 {
        if count(names.outcomes.clone()).await > 50 && count(names.requests.clone()).await > 0 {
            caught = true;
            break;
        }
        TokioSleeper.sleep(2).await;
    }
    assert!(caught, "the kill lands while requests are under way");
    sigkill(&mut first);

    let second = consumer(&amqp_url(), &url, &names, &log);
    started(&log, 2).await;
    let unique =
        |v: &[(String, Value)]| v.iter().map(|(id, _)| id.clone()).collect::<BTreeSet<_>>();
    let want_outcomes = expect.len();
    for _ in 0..600 {
        drain(names.outcomes.clone(), outcomes.clone()).await;
        drain(names.dead_letters.clone(), dead.clone()).await;
        if unique(&outcomes.lock().unwrap()).len() >= want_outcomes
            && dead.lock().unwrap().len() >= dead_codes.len()
        {
            break;
        }
        TokioSleeper.sleep(100).await;
    }
    stop(second, &log);
    assert!(
        redelivered(&log) > 0,
        "messages unacknowledged at the kill came again"
    );
    drain(names.outcomes.clone(), outcomes.clone()).await;
    drain(names.dead_letters.clone(), dead.clone()).await;

    // RabbitMQ keeps a repeated reply; the receiver drops it by its message id.
    let mut seen = BTreeSet::new();
    let outcomes: Vec<(String, Value)> = outcomes
        .lock()
        .unwrap()
        .iter()
        .filter(|(id, _)| seen.insert(id.clone()))
        .cloned()
        .collect();
    let mut seen = BTreeSet::new();
    let dead: Vec<Value> = dead
        .lock()
        .unwrap()
        .iter()
        .filter(|(id, _)| seen.insert(id.clone()))
        .map(|(_, b)| b.clone())
        .collect();
    check(&client, &expect, &outcomes, &dead, &dead_codes).await;
    let requests = channel
        .queue_declare(
            names.requests.as_str().into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("the requests queue");
    assert_eq!(requests.message_count(), 0, "every request acknowledged");
    for q in [&names.requests, &names.outcomes, &names.dead_letters] {
        let _ = channel
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    server.shutdown().await.expect("a clean shutdown");
}
