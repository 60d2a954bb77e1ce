//! Webhooks against receivers in this test: HTTP servers that check every request's
//! signature with their own HMAC, fail on purpose, or never answer.
//!
//! - `a_receiver_that_fails_first_gets_every_change_signed_and_in_order`: a load of
//!   transfers, holds, refunds and refusals; the receiver fails each event's first two
//!   attempts; it gets each transfer's changes, in order, and nothing else.
//! - `a_receiver_that_never_answers_fills_its_dead_letters_without_holding_up_another`:
//!   its events land in the dead-letter list after the attempts, while another endpoint
//!   gets its own at once; a dead letter sent again leaves the list once delivered.
//! - `endpoints_survive_a_restart_and_delivery_resumes_from_the_cursor`: what was
//!   confirmed before the restart is not sent again.
//! - `a_dead_letter_is_not_tried_again_when_a_restart_sends_its_page_again`.
//! - `an_endpoint_whose_files_cannot_be_read_is_halted_and_the_others_deliver`.
//! - `bad_input_is_refused_by_field_and_only_admins_manage_webhooks`.

mod common;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use xfer_client::{segment, Client};
use xfer_core::{Clock, SystemClock};
use xfer_engine::{Sleeper, TokioSleeper};
use xfer_server::auth::{Token, Tokens};
use xfer_server::metrics::Stopwatch;
use xfer_server::sink::webhook::WebhookSettings;
use xfer_server::{ServeConfig, Server};

/// Of the events `among`, the first one asked is refused (503) every time, every other one
/// gets no answer.
#[derive(Default)]
struct Picky {
    among: BTreeSet<String>,
    refused: Option<String>,
}

/// A webhook receiver: an HTTP server that checks each request, then answers as told.
struct Hook {
    url: String,
    secret: Mutex<String>,
    /// Each event's first attempts answered 500.
    fail_first: u32,
    /// While set, every request is answered 503.
    refusing: AtomicBool,
    /// While false, requests get no answer at all (the connection stays open).
    answering: watch::Sender<bool>,
    /// Events answered by their id rather than as above.
    picky: Mutex<Picky>,
    /// Attempts that reached the receiver, by event id (answered or not).
    attempts: Mutex<BTreeMap<String, u32>>,
    /// The events taken (answered 2xx), in order, repeats included.
    taken: Mutex<Vec<Value>>,
    /// What was wrong with requests that failed the checks.
    bad: Mutex<Vec<String>>,
}

impl Hook {
    async fn start(fail_first: u32, answering: bool) -> Arc<Hook> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let hook = Arc::new(Hook {
            url: format!(
                "http://{}/hooks/xfer?src=test",
                listener.local_addr().unwrap()
            ),
            secret: Mutex::new(String::new()),
            fail_first,
            refusing: AtomicBool::new(false),
            answering: watch::channel(answering).0,
            picky: Mutex::new(Picky::default()),
            attempts: Mutex::new(BTreeMap::new()),
            taken: Mutex::new(Vec::new()),
            bad: Mutex::new(Vec::new()),
        });
        let served = hook.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let hook = served.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let hook = hook.clone();
                        async move { Ok::<_, Infallible>(hook.handle(req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        hook
    }

    fn set_secret(&self, secret: &str) {
        *self.secret.lock().unwrap() = secret.to_string();
    }

    async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let answer = |status: u16| {
            Response::builder()
                .status(status)
                .body(Full::new(Bytes::new()))
                .unwrap()
        };
        let (parts, body) = req.into_parts();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let event: Value = match self.check(&parts, &body) {
            Ok(event) => event,
            Err(why) => {
                self.bad.lock().unwrap().push(why);
                return answer(400);
            }
        };
        let id = event["id"].as_str().unwrap_or_default().to_string();
        let n = {
            let mut attempts = self.attempts.lock().unwrap();
            let n = attempts.entry(id.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let mut answering = self.answering.subscribe();
        let _ = answering.wait_for(|a| *a).await;
        if self.refusing.load(Ordering::Relaxed) {
            return answer(503);
        }
        let hang = {
            let mut picky = self.picky.lock().unwrap();
            if picky.among.contains(&id) {
                if *picky.refused.get_or_insert_with(|| id.clone()) == id {
                    return answer(503);
                }
                true
            } else {
                false
            }
        };
        if hang {
            std::future::pending::<()>().await;
        }
        if n <= self.fail_first {
            return answer(500);
        }
        self.taken.lock().unwrap().push(event);
        answer(204)
    }

    /// The event, if the request is what the README promises: a signed JSON event.
    fn check(&self, parts: &hyper::http::request::Parts, body: &[u8]) -> Result<Value, String> {
        let header = |name: &str| -> Result<String, String> {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
                .ok_or_else(|| format!("no {name}"))
        };
        if parts.method != Method::POST || parts.uri.path() != "/hooks/xfer" {
            return Err(format!("{} {}", parts.method, parts.uri));
        }
        if parts.uri.query() != Some("src=test") {
            return Err(format!("the query was dropped: {}", parts.uri));
        }
        if header("content-type")? != "application/json" {
            return Err("not JSON".into());
        }
        let event: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        let timestamp = header("xfer-timestamp")?;
        let t: u64 = timestamp.parse().map_err(|_| format!("{timestamp:?}"))?;
        let now = SystemClock.now().as_ms() / 1_000;
        if now.abs_diff(t) > 300 {
            return Err(format!("timestamp {t} is {now}'s?"));
        }
        // Computed here, apart from the server's code: HMAC-SHA256(secret, "<t>.<body>").
        let secret = self.secret.lock().unwrap().clone();
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
        let mut signed = format!("{t}.").into_bytes();
        signed.extend_from_slice(body);
        let mac: String = ring::hmac::sign(&key, &signed)
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let want = format!("t={t},v1={mac}");
        let got = header("xfer-signature")?;
        if got != want {
            return Err(format!("signature {got:?}, computed {want:?}"));
        }
        if header("xfer-event-id")? != event["id"] || header("xfer-event-type")? != event["type"] {
            return Err(format!("headers do not name the event {event}"));
        }
        Ok(event)
    }

    /// The events taken, repeats dropped by id, in the order first taken.
    fn events(&self) -> Vec<Value> {
        let mut seen = BTreeSet::new();
        self.taken
            .lock()
            .unwrap()
            .iter()
            .filter(|e| seen.insert(e["id"].as_str().unwrap().to_string()))
            .cloned()
            .collect()
    }

    /// How many times each event was taken.
    fn times(&self) -> BTreeMap<String, usize> {
        let mut times = BTreeMap::new();
        for e in self.taken.lock().unwrap().iter() {
            *times
                .entry(e["id"].as_str().unwrap().to_string())
                .or_insert(0) += 1;
        }
        times
    }

    /// Attempts at event `id` that reached the receiver.
    fn tried(&self, id: &str) -> u32 {
        self.attempts.lock().unwrap().get(id).copied().unwrap_or(0)
    }

    fn ids(&self) -> BTreeSet<String> {
        self.events()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_string())
            .collect()
    }

    fn bad(&self) -> Vec<String> {
        self.bad.lock().unwrap().clone()
    }

    /// Waits (`secs` at most) until the events taken include every one of `ids`.
    async fn wait_for(&self, ids: &BTreeSet<String>, secs: u64) {
        for _ in 0..secs * 20 {
            assert_eq!(
                self.bad(),
                Vec::<String>::new(),
                "requests that fail the checks"
            );
            if self.ids().is_superset(ids) {
                return;
            }
            TokioSleeper.sleep(50).await;
        }
        let taken = self.ids();
        let missing: Vec<&String> = ids.difference(&taken).collect();
        panic!(
            "after {secs} s the receiver still misses {missing:?}; bad requests: {:?}",
            self.bad()
        );
    }
}

fn settings(
    attempts: u32,
    backoff_ms: u64,
    backoff_max_ms: u64,
    timeout_ms: u64,
) -> WebhookSettings {
    WebhookSettings {
        attempts,
        backoff_ms,
        backoff_max_ms,
        timeout_ms,
    }
}

async fn start(data: &std::path::Path, tokens: Tokens, webhooks: WebhookSettings) -> Server {
    let cfg = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: data.to_path_buf(),
        shards: 2,
        sweep_interval_ms: 100,
        webhooks,
        tokens,
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
    server
}

fn client(server: &Server, token: Option<&str>) -> Client {
    Client::new(
        &format!("http://{}", server.addr()),
        token.map(String::from),
    )
    .expect("a client")
}

async fn call(
    c: &Client,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> xfer_client::Response {
    c.send(method.clone(), path, body.as_ref())
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// Registers `hook` (with `fields` besides its URL) and tells it the secret; answers the id.
async fn register(c: &Client, hook: &Hook, fields: Value) -> String {
    let mut body = json!({"url": hook.url});
    body.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    let a = call(c, Method::POST, "/v1/webhooks", Some(body)).await;
    assert_eq!(a.status, 201, "{}", a.text);
    hook.set_secret(a.body["secret"].as_str().expect("the secret, once"));
    a.body["id"].as_str().unwrap().to_string()
}

async fn accounts(c: &Client, ids: &[&str]) {
    let usd = json!({"code": "USD", "scale": 2});
    let a = call(c, Method::POST, "/v1/assets", Some(usd)).await;
    assert_eq!(a.status, 201, "declare USD: {}", a.text);
    for id in ids {
        let bound = if *id == "bank" {
            json!("unbounded")
        } else {
            json!(0)
        };
        let a = call(
            c,
            Method::POST,
            "/v1/accounts",
            Some(json!({"id": id, "asset": "USD", "lower_bound": bound})),
        )
        .await;
        assert_eq!(a.status, 201, "{}", a.text);
    }
}

fn pay(id: &str, from: &str, to: &str, amount: u64) -> Value {
    json!({"id": id, "postings": [{"from": from, "to": to, "asset": "USD", "amount": amount}]})
}

async fn submit(c: &Client, body: Value) -> Value {
    let a = call(c, Method::POST, "/v1/transfers", Some(body)).await;
    assert_eq!(a.status, 200, "{}", a.text);
    a.body
}

/// Every event of the feed, by the API.
async fn feed(c: &Client) -> Vec<Value> {
    common::all_events(c).await
}

/// Each transfer's event types, in order.
fn by_transfer(events: &[Value]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in events {
        out.entry(e["transfer_id"].as_str().unwrap().to_string())
            .or_default()
            .push(e["type"].as_str().unwrap().to_string());
    }
    out
}

fn ids_of(events: &[Value]) -> BTreeSet<String> {
    events
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect()
}

/// The value of metric `name{sink="webhook:<id>"}`.
async fn metric(c: &Client, name: &str, id: &str) -> Option<f64> {
    let text = call(c, Method::GET, "/metrics", None).await.text;
    let prefix = format!("{name}{{sink=\"webhook:{id}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

/// One client's share of the load: every kind of change a transfer goes through.
async fn client_load(c: Client, tag: usize, ops: usize) -> Vec<String> {
    let me = format!("c{tag}");
    let other = format!("c{}", (tag + 1) % 8);
    let mut ids = Vec::new();
    for k in 0..ops {
        let id = format!("{me}-{k}");
        ids.push(id.clone());
        match k % 5 {
            0..=2 => {
                let mut hold = pay(&id, &me, &other, 3);
                hold["hold"] = json!({"ttl_ms": 60_000});
                if k % 5 == 2 {
                    // Left alone: it expires (the ttl must exceed the transfer's timeout).
                    hold["hold"] = json!({"ttl_ms": 600});
                    hold["timeout_ms"] = json!(500);
                }
                let t = submit(&c, hold).await;
                assert_eq!(t["state"], "held", "{t}");
                let action = match k % 5 {
                    0 => "capture",
                    1 => "void",
                    _ => continue,
                };
                let path = format!("/v1/transfers/{}/{action}", segment(&id));
                let a = call(&c, Method::POST, &path, None).await;
                assert_eq!(a.status, 200, "{}", a.text);
            }
            3 => {
                let t = submit(&c, pay(&id, &me, &other, 1_000_000)).await;
                assert_eq!(t["state"], "canceled", "{t}");
            }
            _ => {
                let t = submit(&c, pay(&id, &me, &other, 7)).await;
                assert_eq!(t["state"], "done", "{t}");
                if k % 2 == 0 {
                    let refund = format!("{id}-r");
                    let path = format!("/v1/transfers/{}/refund", segment(&id));
                    let a = call(&c, Method::POST, &path, Some(json!({"id": refund}))).await;
                    assert_eq!(a.status, 200, "{}", a.text);
                    ids.push(refund);
                }
            }
        }
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_fails_first_gets_every_change_signed_and_in_order() {
    let dir = tempfile::tempdir().expect("a directory");
    let server = start(
        &dir.path().join("data"),
        Tokens::default(),
        settings(5, 5, 10, 5_000),
    )
    .await;
    let c = client(&server, None);
    let hook = Hook::start(2, true).await;
    let a = call(
        &c,
        Method::POST,
        "/v1/webhooks",
        Some(json!({"url": hook.url, "description": "the ledger"})),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.text);
    let id = a.body["id"].as_str().unwrap().to_string();
    let secret = a.body["secret"].as_str().unwrap();
    assert!(id.starts_with("wh_"), "{id}");
    assert!(
        secret.starts_with("whsec_") && secret.len() == 70,
        "{secret}"
    );
    assert_eq!(
        (&a.body["types"], &a.body["description"]),
        (&Value::Null, &json!("the ledger"))
    );
    assert!(a.body["created_at_ms"].as_u64().is_some(), "{}", a.text);
    hook.set_secret(secret);

    let names: Vec<String> = (0..8).map(|i| format!("c{i}")).collect();
    let mut all: Vec<&str> = vec!["bank"];
    all.extend(names.iter().map(String::as_str));
    accounts(&c, &all).await;
    for n in &names {
        submit(&c, pay(&format!("fund-{n}"), "bank", n, 1_000)).await;
    }
    let mut tasks = tokio::task::JoinSet::new();
    for tag in 0..8 {
        tasks.spawn(client_load(c.clone(), tag, 10));
    }
    let mut transfers: Vec<String> = names.iter().map(|n| format!("fund-{n}")).collect();
    while let Some(ids) = tasks.join_next().await {
        transfers.extend(ids.expect("a client"));
    }
    // Holds left alone expire: wait until every transfer has ended.
    for t in &transfers {
        let path = format!("/v1/transfers/{}", segment(t));
        let mut state = Value::Null;
        for _ in 0..200 {
            state = call(&c, Method::GET, &path, None).await.body["state"].clone();
            if state == "done" || state == "canceled" {
                break;
            }
            TokioSleeper.sleep(50).await;
        }
        assert!(state == "done" || state == "canceled", "{t}: {state}");
    }

    let feed = feed(&c).await;
    let want = ids_of(&feed);
    hook.wait_for(&want, 120).await;
    let got = hook.events();
    assert_eq!(
        hook.bad(),
        Vec::<String>::new(),
        "every request signed and well formed"
    );
    assert_eq!(ids_of(&got), want, "every event, nothing else");
    assert_eq!(
        by_transfer(&got),
        by_transfer(&feed),
        "each transfer's changes, in order"
    );
    for (t, types) in by_transfer(&feed) {
        assert!(
            types.iter().any(|k| k == "done" || k == "canceled"),
            "{t} ended: {types:?}"
        );
    }
    let kinds: BTreeSet<&str> = got.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let every = [
        "accepted", "held", "captured", "voided", "expired", "done", "canceled", "refunded",
    ];
    assert_eq!(kinds, every.into_iter().collect(), "every type of change");
    // Each event failed twice before it was taken.
    let attempts = hook.attempts.lock().unwrap().clone();
    for e in &want {
        assert!(
            attempts.get(e).copied().unwrap_or(0) >= 3,
            "{e}: {attempts:?}"
        );
    }
    let status = call(&c, Method::GET, &format!("/v1/webhooks/{id}"), None).await;
    assert_eq!(status.status, 200, "{}", status.text);
    let s = &status.body["status"];
    assert!(status.body.get("secret").is_none(), "{}", status.text);
    assert_eq!(
        (&s["running"], &s["dead_letters"]),
        (&json!(true), &json!(0))
    );
    assert!(s["delivered"].as_u64().unwrap() >= want.len() as u64, "{s}");
    assert!(
        s["failed_attempts"].as_u64().unwrap() >= 2 * want.len() as u64,
        "{s}"
    );
    assert!(
        s["last_error"].as_str().unwrap().starts_with("HTTP 500"),
        "{s}"
    );
    assert!(
        metric(&c, "xfer_sink_published_total", &id).await >= Some(want.len() as f64),
        "published"
    );
    assert!(
        metric(&c, "xfer_sink_failures_total", &id).await >= Some(2.0 * want.len() as f64),
        "failures"
    );
    println!(
        "webhook: {} events of {} transfers, each after two failed attempts",
        want.len(),
        transfers.len()
    );
    server.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_fills_its_dead_letters_without_holding_up_another() {
    const ATTEMPTS: u32 = 3;
    const TIMEOUT_MS: u64 = 1_500;
    let dir = tempfile::tempdir().expect("a directory");
    let data = dir.path().join("data");
    let server = start(
        &data,
        Tokens::default(),
        settings(ATTEMPTS, 50, 100, TIMEOUT_MS),
    )
    .await;
    let c = client(&server, None);
    accounts(&c, &["bank", "alice"]).await;
    submit(&c, pay("before", "bank", "alice", 1)).await;
    // Its last step (done) may land after the answer: registered before it, an endpoint
    // would rightly be sent it.
    for _ in 0..200 {
        if feed(&c).await.iter().any(|e| e["id"] == "before/done") {
            break;
        }
        TokioSleeper.sleep(10).await;
    }

    let dead = Hook::start(0, false).await;
    let good = Hook::start(1, true).await;
    let dead_id = register(&c, &dead, json!({"types": ["done"]})).await;
    let good_id = register(&c, &good, json!({})).await;
    let watch = Stopwatch::start();
    for i in 1..=3 {
        submit(&c, pay(&format!("p{i}"), "bank", "alice", 1)).await;
    }
    let want: BTreeSet<String> = (1..=3)
        .flat_map(|i| [format!("p{i}/accepted"), format!("p{i}/done")])
        .collect();
    good.wait_for(&want, 30).await;
    let good_ms = watch.seconds() * 1_000.0;
    // The dead endpoint needs at least this long for its first event alone.
    let one_dead_event_ms = (u64::from(ATTEMPTS) * TIMEOUT_MS) as f64;
    assert!(
        good_ms < one_dead_event_ms,
        "the live receiver waited {good_ms:.0} ms, as long as the dead one's first event takes"
    );
    let s = call(&c, Method::GET, &format!("/v1/webhooks/{dead_id}"), None).await;
    assert_eq!(s.body["status"]["dead_letters"], 0, "{}", s.text);
    assert_eq!(
        good.ids(),
        want,
        "only changes made after it was registered"
    );
    assert_eq!(good.bad(), Vec::<String>::new());

    // Every attempt at the dead receiver times out: its events land in its dead letters.
    let path = format!("/v1/webhooks/{dead_id}/dead_letters");
    let mut letters = Vec::new();
    for _ in 0..400 {
        letters = call(&c, Method::GET, &path, None).await.body["dead_letters"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if letters.len() >= 3 {
            break;
        }
        TokioSleeper.sleep(100).await;
    }
    let dead_ms = watch.seconds() * 1_000.0;
    let ids: Vec<&str> = letters
        .iter()
        .map(|l| l["event_id"].as_str().unwrap())
        .collect();
    // Each shard's events in order; p1, p2 and p3 may sit on different shards.
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ["p1/done", "p2/done", "p3/done"], "{letters:?}");
    for (seq, l) in (1..).zip(&letters) {
        assert_eq!(
            (&l["seq"], &l["type"], &l["attempts"]),
            (&json!(seq), &json!("done"), &json!(ATTEMPTS))
        );
        let why = l["last_error"].as_str().unwrap();
        assert!(
            why.contains(&format!("no answer within {TIMEOUT_MS} ms")),
            "{why}"
        );
        assert_eq!(l["body"]["id"], l["event_id"], "{l}");
        assert_eq!(l["body"]["transfer"]["postings"][0]["amount"], 1, "{l}");
        assert!(l["at_ms"].as_u64().is_some(), "{l}");
    }
    assert!(dead_ms >= 3.0 * one_dead_event_ms, "{dead_ms:.0} ms");
    let tried = dead.attempts.lock().unwrap().clone();
    assert_eq!(tried.values().sum::<u32>(), 3 * ATTEMPTS, "{tried:?}");
    let page = call(&c, Method::GET, &format!("{path}?after=1&limit=1"), None).await;
    assert_eq!(
        page.body["dead_letters"][0]["event_id"], ids[1],
        "{}",
        page.text
    );
    assert_eq!(page.body["next_after"], 2, "{}", page.text);
    let s = call(&c, Method::GET, &format!("/v1/webhooks/{dead_id}"), None).await;
    let s = &s.body["status"];
    assert_eq!(
        (
            &s["delivered"],
            &s["failed_attempts"],
            &s["dead_letters"],
            &s["running"]
        ),
        (&json!(0), &json!(3 * ATTEMPTS), &json!(3), &json!(true)),
        "{s}"
    );
    assert_eq!(
        metric(&c, "xfer_sink_dead_letters_total", &dead_id).await,
        Some(3.0)
    );
    assert_eq!(
        metric(&c, "xfer_sink_published_total", &good_id).await,
        Some(6.0)
    );

    // Sent again while the receiver still does not answer: refused, kept.
    let again = |event: &str| format!("{path}/{}/redeliver", segment(event));
    let a = call(&c, Method::POST, &again("p1/done"), None).await;
    assert_eq!((a.status, a.code()), (502, "delivery_failed"), "{}", a.text);
    // Once it answers, a dead letter sent again is delivered and leaves the list.
    dead.answering.send_replace(true);
    let a = call(&c, Method::POST, &again("p1/done"), Some(json!({}))).await;
    assert_eq!(
        (a.status, &a.body),
        (200, &json!({"event_id": "p1/done", "delivered": true})),
        "{}",
        a.text
    );
    assert!(dead.ids().contains("p1/done"));
    assert_eq!(dead.bad(), Vec::<String>::new());
    let left = call(&c, Method::GET, &path, None).await;
    let mut ids: Vec<&str> = left.body["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["event_id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["p2/done", "p3/done"]);
    let a = call(&c, Method::POST, &again("p1/done"), None).await;
    assert_eq!(
        (a.status, a.code()),
        (404, "dead_letter_not_found"),
        "{}",
        a.text
    );

    // Removed: gone from the API, its files deleted.
    let a = call(&c, Method::DELETE, &format!("/v1/webhooks/{dead_id}"), None).await;
    assert_eq!(
        (a.status, &a.body["deleted"]),
        (200, &json!(true)),
        "{}",
        a.text
    );
    let a = call(&c, Method::GET, &format!("/v1/webhooks/{dead_id}"), None).await;
    assert_eq!(
        (a.status, a.code()),
        (404, "webhook_not_found"),
        "{}",
        a.text
    );
    let list = call(&c, Method::GET, "/v1/webhooks", None).await;
    let listed: Vec<&str> = list.body["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [good_id.as_str()]);
    for file in [format!("{dead_id}.cursor"), format!("{dead_id}.dead.jsonl")] {
        assert!(
            !data.join("webhooks").join(&file).exists(),
            "{file} remains"
        );
    }
    println!(
        "webhooks: the live receiver had its 6 events after {good_ms:.0} ms; the dead one's \
         3 were dead letters after {dead_ms:.0} ms ({ATTEMPTS} attempts of {TIMEOUT_MS} ms each)"
    );
    server.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_survive_a_restart_and_delivery_resumes_from_the_cursor() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("a directory");
    let data = dir.path().join("data");
    let hooks = settings(1_000, 20, 50, 1_000);
    let server = start(&data, Tokens::default(), hooks).await;
    let c = client(&server, None);
    accounts(&c, &["bank", "alice"]).await;
    let hook = Hook::start(0, true).await;
    let secret = "my-own-secret-0123456789";
    let a = call(
        &c,
        Method::POST,
        "/v1/webhooks",
        Some(json!({"url": hook.url, "secret": secret, "types": ["accepted", "done"]})),
    )
    .await;
    assert_eq!(
        (a.status, &a.body["secret"]),
        (201, &json!(secret)),
        "{}",
        a.text
    );
    hook.set_secret(secret);
    let id = a.body["id"].as_str().unwrap().to_string();
    let listed = call(&c, Method::GET, "/v1/webhooks", None).await.body;
    for i in 1..=2 {
        submit(&c, pay(&format!("t{i}"), "bank", "alice", 1)).await;
    }
    let first: BTreeSet<String> = ["t1/accepted", "t1/done", "t2/accepted", "t2/done"]
        .map(String::from)
        .into();
    hook.wait_for(&first, 30).await;

    // The receiver refuses; the server stops while it retries t3's first event.
    hook.refusing.store(true, Ordering::Relaxed);
    submit(&c, pay("t3", "bank", "alice", 1)).await;
    for _ in 0..200 {
        if hook.attempts.lock().unwrap().get("t3/accepted").is_some() {
            break;
        }
        TokioSleeper.sleep(20).await;
    }
    assert!(hook.attempts.lock().unwrap().contains_key("t3/accepted"));
    server.shutdown().await.expect("a clean shutdown");
    let hooks_dir = data.join("webhooks");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&hooks_dir), 0o700);
    let kept = hooks_dir.join("endpoints.json");
    assert_eq!(mode(&kept), 0o600, "it holds secrets");
    let text = std::fs::read_to_string(&kept).unwrap();
    assert!(text.contains(&id) && text.contains(secret), "{text}");
    assert!(hooks_dir.join(format!("{id}.cursor")).exists());

    hook.refusing.store(false, Ordering::Relaxed);
    let server = start(&data, Tokens::default(), hooks).await;
    let c = client(&server, None);
    let again = call(&c, Method::GET, "/v1/webhooks", None).await.body;
    assert_eq!(again, listed, "the same endpoint, still without its secret");
    assert_eq!(again["webhooks"][0]["types"], json!(["accepted", "done"]));
    submit(&c, pay("t4", "bank", "alice", 1)).await;
    let all: BTreeSet<String> = (1..=4)
        .flat_map(|i| [format!("t{i}/accepted"), format!("t{i}/done")])
        .collect();
    hook.wait_for(&all, 30).await;
    assert_eq!(hook.ids(), all);
    // Resumed from the cursor, not from the feed's start: t1's and t2's pages were confirmed
    // before the restart and are not sent again; t3's, under way then, was refused, so every
    // event arrived once.
    let times = hook.times();
    for e in &all {
        assert_eq!(times.get(e), Some(&1), "{e}: {times:?}");
    }
    assert_eq!(by_transfer(&hook.events()).len(), 4);
    assert!(by_transfer(&hook.events())
        .values()
        .all(|k| k == &["accepted", "done"]));
    assert_eq!(
        hook.bad(),
        Vec::<String>::new(),
        "signed with the kept secret"
    );
    let s = call(&c, Method::GET, &format!("/v1/webhooks/{id}"), None).await;
    assert_eq!(
        (
            &s.body["status"]["running"],
            &s.body["status"]["dead_letters"]
        ),
        (&json!(true), &json!(0)),
        "{}",
        s.text
    );
    server.shutdown().await.expect("a clean shutdown");
}

/// The dead letters of webhook `id`, as listed.
async fn dead_letters(c: &Client, id: &str) -> Vec<Value> {
    let path = format!("/v1/webhooks/{id}/dead_letters");
    let a = call(c, Method::GET, &path, None).await;
    assert_eq!(a.status, 200, "{}", a.text);
    a.body["dead_letters"].as_array().unwrap().clone()
}

/// Waits until the feed holds every event of `ids`.
async fn in_feed(c: &Client, ids: &[&str]) {
    for _ in 0..400 {
        let have = ids_of(&feed(c).await);
        if ids.iter().all(|id| have.contains(*id)) {
            return;
        }
        TokioSleeper.sleep(10).await;
    }
    panic!("the feed still misses some of {ids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_not_tried_again_when_a_restart_sends_its_page_again() {
    const ATTEMPTS: u32 = 2;
    let dir = tempfile::tempdir().expect("a directory");
    let data = dir.path().join("data");
    // Attempts never time out here: an unanswered one lasts until the server stops.
    let hooks = settings(ATTEMPTS, 10, 20, 600_000);
    let server = start(&data, Tokens::default(), hooks).await;
    let c = client(&server, None);
    accounts(&c, &["bank", "alice"]).await;
    let hook = Hook::start(0, true).await;
    let id = register(&c, &hook, json!({"types": ["done"]})).await;

    // e0's event is held unanswered while p1 and p2 are made: theirs then come in one page.
    hook.answering.send_replace(false);
    submit(&c, pay("e0", "bank", "alice", 1)).await;
    for _ in 0..400 {
        if hook.tried("e0/done") > 0 {
            break;
        }
        TokioSleeper.sleep(10).await;
    }
    assert_eq!(hook.tried("e0/done"), 1);
    for p in ["p1", "p2"] {
        submit(&c, pay(p, "bank", "alice", 1)).await;
    }
    in_feed(&c, &["p1/done", "p2/done"]).await;
    // Of that page, the first event sent fails every attempt, the next gets no answer.
    hook.picky.lock().unwrap().among = ["p1/done", "p2/done"].map(String::from).into();
    hook.answering.send_replace(true);
    let first_and_next = || {
        let picky = hook.picky.lock().unwrap();
        let first = picky.refused.clone()?;
        let next = picky.among.iter().find(|e| **e != first)?.clone();
        Some((first, next))
    };
    let mut seen = None;
    for _ in 0..600 {
        if let Some((first, next)) = first_and_next() {
            let letters = dead_letters(&c, &id).await;
            if !letters.is_empty() && hook.tried(&next) > 0 {
                seen = Some((first, next, letters));
                break;
            }
        }
        TokioSleeper.sleep(20).await;
    }
    let (first, next, letters) = seen.expect("one event set aside, the next one under way");
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0]["event_id"], json!(first), "{letters:?}");
    assert_eq!(hook.tried(&first), ATTEMPTS);
    // The page was not confirmed: the restart sends it again, and the receiver now takes
    // everything.
    server.shutdown().await.expect("a clean shutdown");
    *hook.picky.lock().unwrap() = Picky::default();
    let server = start(&data, Tokens::default(), hooks).await;
    let c = client(&server, None);
    let want: BTreeSet<String> = ["e0/done".to_string(), next.clone()].into();
    hook.wait_for(&want, 30).await;
    assert_eq!(
        hook.tried(&first),
        ATTEMPTS,
        "{first} is a dead letter already: not tried again"
    );
    assert!(!hook.ids().contains(&first), "{:?}", hook.ids());
    let letters = dead_letters(&c, &id).await;
    assert_eq!(
        letters
            .iter()
            .map(|l| (&l["seq"], &l["event_id"]))
            .collect::<Vec<_>>(),
        [(&json!(1), &json!(first))],
        "set aside once"
    );
    server.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_whose_files_cannot_be_read_is_halted_and_the_others_deliver() {
    let dir = tempfile::tempdir().expect("a directory");
    let data = dir.path().join("data");
    let hooks = settings(3, 10, 20, 5_000);
    let server = start(&data, Tokens::default(), hooks).await;
    let c = client(&server, None);
    accounts(&c, &["bank", "alice"]).await;
    let mut receivers = Vec::new();
    for _ in 0..4 {
        let hook = Hook::start(0, true).await;
        let id = register(&c, &hook, json!({"types": ["done"]})).await;
        receivers.push((hook, id));
    }
    submit(&c, pay("t1", "bank", "alice", 1)).await;
    let t1: BTreeSet<String> = ["t1/done".to_string()].into();
    for (hook, _) in &receivers {
        hook.wait_for(&t1, 30).await;
    }
    server.shutdown().await.expect("a clean shutdown");

    // Damaged while the server was down: a letter that is no JSON followed by a whole one,
    // a cursor that is no cursor, and a list that cannot be read at all.
    let hooks_dir = data.join("webhooks");
    let [(good, good_id), (_, bad_letters), (_, bad_cursor), (_, unreadable)] = &receivers[..]
    else {
        unreachable!()
    };
    let letter = json!({"seq": 2, "event_id": "t0/done", "type": "done", "attempts": 3,
                        "last_error": "HTTP 500", "at_ms": 1, "body": {}});
    std::fs::write(
        hooks_dir.join(format!("{bad_letters}.dead.jsonl")),
        format!("{{\"seq\":1,\"event_id\n{letter}\n"),
    )
    .unwrap();
    std::fs::write(
        hooks_dir.join(format!("{bad_cursor}.cursor")),
        "not a cursor\n",
    )
    .unwrap();
    std::fs::create_dir(hooks_dir.join(format!("{unreadable}.dead.jsonl"))).unwrap();

    let server = start(&data, Tokens::default(), hooks).await;
    let c = client(&server, None);
    let listed = call(&c, Method::GET, "/v1/webhooks", None).await;
    assert_eq!(listed.body["webhooks"].as_array().unwrap().len(), 4);
    submit(&c, pay("t2", "bank", "alice", 1)).await;
    let t2: BTreeSet<String> = ["t2/done".to_string()].into();
    good.wait_for(&t2, 30).await;
    let status = |id: &str| {
        let c = c.clone();
        let path = format!("/v1/webhooks/{id}");
        async move {
            let a = call(&c, Method::GET, &path, None).await;
            assert_eq!(a.status, 200, "{}", a.text);
            a.body["status"].clone()
        }
    };
    let s = status(good_id).await;
    assert_eq!(
        (&s["running"], &s["halted"]),
        (&json!(true), &Value::Null),
        "{s}"
    );
    for (id, file, why) in [
        (bad_letters, format!("{bad_letters}.dead.jsonl"), "line 1"),
        (bad_cursor, format!("{bad_cursor}.cursor"), "cursor"),
        (unreadable, format!("{unreadable}.dead.jsonl"), "directory"),
    ] {
        let s = status(id).await;
        assert_eq!(s["running"], false, "{s}");
        let halted = s["halted"].as_str().unwrap_or_default();
        assert!(halted.contains(&file) && halted.contains(why), "{id}: {s}");
        assert_eq!(s["last_error"], s["halted"], "{s}");
    }
    assert_eq!(status(bad_letters).await["dead_letters"], Value::Null);
    assert_eq!(status(bad_cursor).await["dead_letters"], 0);
    for (hook, id) in &receivers[1..] {
        assert!(
            !hook.ids().contains("t2/done"),
            "{id} delivered while halted"
        );
    }
    // What can be read of a halted endpoint is served; what cannot says so.
    let path = format!("/v1/webhooks/{bad_letters}/dead_letters");
    let a = call(&c, Method::GET, &path, None).await;
    assert_eq!((a.status, a.code()), (503, "unavailable"), "{}", a.text);
    assert_eq!(dead_letters(&c, bad_cursor).await, Vec::<Value>::new());
    // A halted endpoint is removed as any other, its files with it.
    for id in [bad_letters, bad_cursor] {
        let a = call(&c, Method::DELETE, &format!("/v1/webhooks/{id}"), None).await;
        assert_eq!(a.status, 200, "{}", a.text);
        for file in [format!("{id}.cursor"), format!("{id}.dead.jsonl")] {
            assert!(!hooks_dir.join(&file).exists(), "{file} remains");
        }
    }
    let listed = call(&c, Method::GET, "/v1/webhooks", None).await;
    assert_eq!(listed.body["webhooks"].as_array().unwrap().len(), 2);
    server.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_by_field_and_only_admins_manage_webhooks() {
    const READER: &str = "reader-0123456789";
    const WRITER: &str = "writer-0123456789";
    const ADMIN: &str = "admin-00123456789";
    let tokens = Tokens::new(
        [
            format!("{READER}:read"),
            format!("{WRITER}:write"),
            format!("{ADMIN}:admin"),
        ]
        .iter()
        .map(|t| Token::parse_flag(t).expect("a token"))
        .collect(),
    );
    let dir = tempfile::tempdir().expect("a directory");
    let data = dir.path().join("data");
    let server = start(&data, tokens, WebhookSettings::default()).await;
    let admin = client(&server, Some(ADMIN));
    let url = "http://127.0.0.1:9/hook";
    let cases = [
        (json!({}), "missing_field", "url"),
        (json!({"url": 7}), "wrong_type", "url"),
        (
            json!({"url": "ftp://127.0.0.1/hook"}),
            "invalid_value",
            "url",
        ),
        (json!({"url": "127.0.0.1:9/hook"}), "invalid_value", "url"),
        (
            json!({"url": "http://user:pw@127.0.0.1:9/"}),
            "invalid_value",
            "url",
        ),
        (
            json!({"url": url, "types": ["done", "paid"]}),
            "invalid_value",
            "types[1]",
        ),
        (json!({"url": url, "types": []}), "invalid_value", "types"),
        (json!({"url": url, "types": "done"}), "wrong_type", "types"),
        (
            json!({"url": url, "secret": "short"}),
            "invalid_value",
            "secret",
        ),
        (
            json!({"url": url, "colour": "red"}),
            "unknown_field",
            "colour",
        ),
    ];
    for (body, code, field) in cases {
        let a = call(&admin, Method::POST, "/v1/webhooks", Some(body.clone())).await;
        assert_eq!(
            (a.status, a.code(), a.body["field"].as_str()),
            (400, code, Some(field)),
            "{body}: {}",
            a.text
        );
        assert!(a.body["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    let a = admin
        .raw(
            Method::POST,
            "/v1/webhooks",
            Some("application/json"),
            b"{\"url\":".to_vec(),
        )
        .await
        .unwrap();
    assert_eq!((a.status, a.code()), (400, "malformed_json"), "{}", a.text);
    // Nothing was registered, nothing kept.
    let list = call(&admin, Method::GET, "/v1/webhooks", None).await;
    assert_eq!((list.status, &list.body), (200, &json!({"webhooks": []})));
    assert!(!data.join("webhooks").join("endpoints.json").exists());

    // Only admins: readers and writers may neither register nor look.
    for token in [READER, WRITER] {
        let c = client(&server, Some(token));
        for (method, path, body) in [
            (Method::POST, "/v1/webhooks", Some(json!({"url": url}))),
            (Method::GET, "/v1/webhooks", None),
            (Method::GET, "/v1/webhooks/wh_x", None),
            (Method::DELETE, "/v1/webhooks/wh_x", None),
            (Method::GET, "/v1/webhooks/wh_x/dead_letters", None),
        ] {
            let a = call(&c, method.clone(), path, body).await;
            assert_eq!(
                (a.status, a.code()),
                (403, "forbidden"),
                "{token} {method} {path}"
            );
        }
    }
    let a = call(&client(&server, None), Method::GET, "/v1/webhooks", None).await;
    assert_eq!((a.status, a.code()), (401, "unauthorized"));

    // An unknown endpoint is 404 everywhere, in the documented shape.
    for (method, path) in [
        (Method::GET, "/v1/webhooks/wh_none"),
        (Method::DELETE, "/v1/webhooks/wh_none"),
        (Method::GET, "/v1/webhooks/wh_none/dead_letters"),
        (
            Method::POST,
            "/v1/webhooks/wh_none/dead_letters/t1%2Fdone/redeliver",
        ),
    ] {
        let a = call(&admin, method.clone(), path, None).await;
        assert_eq!(
            (a.status, a.code(), a.body["field"].as_str()),
            (404, "webhook_not_found", Some("id")),
            "{method} {path}: {}",
            a.text
        );
    }
    let a = call(
        &admin,
        Method::POST,
        "/v1/webhooks",
        Some(json!({"url": url})),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.text);
    let id = a.body["id"].as_str().unwrap();
    for (q, field) in [("limit=0", Some("limit")), ("colour=red", Some("colour"))] {
        let path = format!("/v1/webhooks/{id}/dead_letters?{q}");
        let a = call(&admin, Method::GET, &path, None).await;
        assert_eq!(
            (a.status, a.code(), a.body["field"].as_str()),
            (400, "invalid_query", field),
            "{}",
            a.text
        );
    }
    let path = format!("/v1/webhooks/{id}/dead_letters/t1%2Fdone/redeliver");
    let a = call(&admin, Method::POST, &path, Some(json!({"now": true}))).await;
    assert_eq!((a.status, a.code()), (400, "unknown_field"), "{}", a.text);
    server.shutdown().await.expect("a clean shutdown");
}

/// `xfer webhook …` against `url`: exit code and stdout (stderr appended).
fn xfer_webhook(url: &str, args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xfer"))
        .arg("webhook")
        .args(args)
        .args(["--url", url])
        .env_remove("XFER_TOKEN")
        .output()
        .expect("xfer webhook runs");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_registers_shows_and_removes_an_endpoint() {
    let dir = tempfile::tempdir().expect("a directory");
    let server = start(
        &dir.path().join("data"),
        Tokens::default(),
        settings(2, 50, 100, 1_000),
    )
    .await;
    let url = format!("http://{}", server.addr());
    let c = client(&server, None);
    accounts(&c, &["bank", "alice"]).await;
    let hook = Hook::start(0, true).await;

    let (code, out) = xfer_webhook(
        &url,
        &[
            "add",
            &hook.url,
            "--type",
            "done",
            "--description",
            "ledger",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let secret = out
        .lines()
        .find_map(|l| l.strip_prefix("secret (shown only now): "))
        .unwrap_or_else(|| panic!("the secret: {out}"));
    hook.set_secret(secret);
    let (_, out) = xfer_webhook(&url, &["list", "--json"]);
    let list: Value = serde_json::from_str(&out).expect("JSON");
    let id = list["webhooks"][0]["id"]
        .as_str()
        .expect("an id")
        .to_string();
    assert_eq!(list["webhooks"][0]["types"], json!(["done"]), "{list}");
    assert_eq!(list["webhooks"][0]["description"], "ledger", "{list}");

    submit(&c, pay("cli-1", "bank", "alice", 5)).await;
    hook.wait_for(&BTreeSet::from(["cli-1/done".to_string()]), 30)
        .await;
    assert_eq!(hook.bad(), Vec::<String>::new());
    let (code, out) = xfer_webhook(&url, &["show", &id]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("running; delivered 1"), "{out}");
    let (code, out) = xfer_webhook(&url, &["dead-letters", &id]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("SEQ") && !out.contains("cli-1"), "{out}");

    // Refused input names the field and changes nothing; an unknown endpoint is an error.
    let (code, out) = xfer_webhook(&url, &["add", "ftp://example.com/hook"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("(url)"), "{out}");
    let (code, out) = xfer_webhook(&url, &["add", &hook.url, "--type", "settled"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("(types[0])"), "{out}");
    let (code, out) = xfer_webhook(&url, &["redeliver", &id, "cli-1/done"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("dead_letter_not_found"), "{out}");

    let (code, out) = xfer_webhook(&url, &["remove", &id]);
    assert_eq!(code, 0, "{out}");
    let (_, out) = xfer_webhook(&url, &["list", "--json"]);
    let list: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(list["webhooks"], json!([]), "{list}");
    let (code, out) = xfer_webhook(&url, &["show", &id]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("webhook_not_found"), "{out}");
    server.shutdown().await.expect("a clean shutdown");
}
