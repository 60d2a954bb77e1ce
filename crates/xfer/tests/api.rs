//! The HTTP API over real HTTP: a server started in-process on port 0 over a fresh data
//! directory, driven with [`xfer_client::Client`].
//!
//! - `every_route_is_served_documented_and_exercised`: each group of endpoints (health,
//!   accounts, transfers, holds, refunds, admin) on one server, then a check that the
//!   requests made cover [`xfer_server::routes::ROUTES`], seen from the client and from the server's
//!   own request metrics;
//! - the first three also `_on_postgres`, `_on_mysql`, `_on_mongodb` and `_on_redis`: the
//!   same requests and answers with the shards in a fresh PostgreSQL database, in fresh
//!   MySQL or MongoDB databases, or under fresh prefixes on the Redis Cluster;
//! - `resubmitting_an_id_is_idempotent_and_a_changed_body_conflicts`;
//! - `bad_input_is_refused_with_its_code_and_field_and_changes_nothing`: a table of bad
//!   requests, each compared against a snapshot of the accounts and the audit;
//! - `tokens_and_scopes_guard_every_endpoint`.

use hyper::Method;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Mutex;
use xfer_client::Client;
use xfer_client::Response;
use xfer_engine::{Sleeper, TokioSleeper};
use xfer_server::auth::{Token, Tokens};
use xfer_server::routes::{Route, ROUTES};
use xfer_server::{ServeConfig, Server};

mod common;
use common::{mysql_admin, mysql_url, postgres_admin, postgres_base};
use xfer_store::Store as _;

/// A server on port 0 over its own temporary directory, and a client that remembers every
/// request it sent (method and path) for the coverage check.
///
/// Dropped without [`TestServer::shutdown`] (a failed assertion), it keeps its directory:
/// the server still closes its store while the runtime winds down, and a store whose
/// directory vanished under it would never finish closing (the test would hang).
struct TestServer {
    server: Option<Server>,
    client: Client,
    sent: Mutex<Vec<(String, String)>>,
    dir: Option<tempfile::TempDir>,
    database: Option<String>,
    mysql: Vec<String>,
    mongodb: Vec<String>,
    redis: Vec<xfer_store_redis::RedisConfig>,
}

/// Where a test server keeps its shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Embedded,
    /// A fresh database on the test server (`XFER_TEST_POSTGRES_BASE`, by default the local
    /// server `scripts/services` starts), dropped at shutdown.
    Postgres,
    /// Four shards in fresh databases on the test MySQL server (`XFER_TEST_MYSQL_URL`, by
    /// default the local MariaDB `scripts/services` starts), dropped at shutdown.
    Mysql,
    /// Four shards in fresh databases on the test MongoDB server (`XFER_TEST_MONGODB_URL`,
    /// by default the local test server `scripts/services` starts), dropped at shutdown.
    Mongodb,
    /// Four shards under fresh prefixes on the test Redis Cluster, deleted at shutdown.
    Redis,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            eprintln!("test server data directory kept: {}", dir.keep().display());
        }
    }
}

impl TestServer {
    /// Auth off.
    async fn start(backend: Backend) -> TestServer {
        TestServer::start_with(backend, Tokens::default(), None).await
    }

    /// With `tokens`; the default client sends `token`.
    async fn start_with(backend: Backend, tokens: Tokens, token: Option<&str>) -> TestServer {
        TestServer::start_configured(backend, tokens, token, |_| {}).await
    }

    /// As [`TestServer::start_with`], with the configuration changed by `configure`.
    async fn start_configured(
        backend: Backend,
        tokens: Tokens,
        token: Option<&str>,
        configure: impl FnOnce(&mut ServeConfig),
    ) -> TestServer {
        static DATABASES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut cfg = ServeConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            data_dir: dir.path().join("data"),
            sweep_interval_ms: 100,
            body_limit_bytes: 65536,
            tokens,
            ..ServeConfig::default()
        };
        let mut database = None;
        if let Backend::Postgres = backend {
            let n = DATABASES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("xfer_api_{}_{n}", std::process::id());
            postgres_admin(&format!("CREATE DATABASE {name}")).await;
            cfg.store = xfer_server::config::StoreKind::Postgres;
            cfg.postgres_urls = vec![format!("{}/{name}", postgres_base())];
            database = Some(name);
        }
        let mut mysql = vec![];
        if let Backend::Mysql = backend {
            let n = DATABASES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            for shard in 0..4 {
                let name = format!("xfer_api_{}_{n}_{shard}", std::process::id());
                cfg.layout.push(xfer_server::config::ShardSpec::Mysql {
                    url: mysql_url(),
                    database: Some(name.clone()),
                });
                mysql.push(name);
            }
        }
        let mut mongodb = vec![];
        if let Backend::Mongodb = backend {
            let n = DATABASES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            for shard in 0..4 {
                let name = format!("xfer_api_{}_{n}_{shard}", std::process::id());
                cfg.layout.push(xfer_server::config::ShardSpec::Mongodb {
                    url: common::mongodb_url(),
                    database: Some(name.clone()),
                });
                mongodb.push(name);
            }
        }
        let mut redis = vec![];
        if let Backend::Redis = backend {
            let n = DATABASES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            for shard in 0..4 {
                let spec = xfer_server::config::ShardSpec::Redis {
                    url: None,
                    cluster: common::redis_cluster_nodes(),
                    prefix: Some(format!("xfer_api_{}_{n}_{shard}", std::process::id())),
                };
                redis.extend(xfer_server::stores::redis_config(&spec, shard));
                cfg.layout.push(spec);
            }
        }
        configure(&mut cfg);
        let server = Server::start(cfg).await.expect("the server starts");
        let client = Client::new(
            &format!("http://{}", server.addr()),
            token.map(String::from),
        )
        .expect("a client");
        let ts = TestServer {
            server: Some(server),
            client,
            sent: Mutex::new(Vec::new()),
            dir: Some(dir),
            database,
            mysql,
            mongodb,
            redis,
        };
        ts.wait_ready().await;
        ts
    }

    /// Waits for the first sweep (readiness), at most 5 s.
    async fn wait_ready(&self) {
        for _ in 0..250 {
            if self.get("/readyz").await.status == 200 {
                return;
            }
            TokioSleeper.sleep(20).await;
        }
        panic!("the server did not become ready");
    }

    /// A client of this server sending `token`.
    fn client_with(&self, token: Option<&str>) -> Client {
        Client::new(self.client.url(), token.map(String::from)).expect("a client")
    }

    async fn send(&self, method: Method, path: &str, body: Option<&Value>) -> Response {
        self.sent
            .lock()
            .unwrap()
            .push((method.as_str().to_string(), path.to_string()));
        self.client
            .send(method.clone(), path, body)
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    async fn get(&self, path: &str) -> Response {
        self.send(Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: &Value) -> Response {
        self.send(Method::POST, path, Some(body)).await
    }

    /// A POST without a body (close, capture, void, redrive).
    async fn post_empty(&self, path: &str) -> Response {
        self.send(Method::POST, path, None).await
    }

    /// `GET path` over HTTP/1.0 with `headers`, read until `events` server-sent events came
    /// (at most 10 s): the status and each event's `(id, event, data)`.
    async fn sse(
        &self,
        path: &str,
        headers: &str,
        events: usize,
    ) -> (u16, Vec<(String, String, String)>) {
        self.sent
            .lock()
            .unwrap()
            .push(("GET".to_string(), path.to_string()));
        let addr = self.server.as_ref().expect("running").addr();
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{headers}\r\n");
        tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut conn = std::net::TcpStream::connect(addr).expect("connect");
            conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .expect("a timeout");
            conn.write_all(request.as_bytes()).expect("send");
            let mut got = Vec::new();
            let mut buf = [0u8; 8192];
            loop {
                let text = String::from_utf8_lossy(&got).to_string();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let status: u16 = head[9..12].parse().expect("a status");
                    let parsed = parse_sse(body);
                    if status != 200 || parsed.len() >= events {
                        return (status, parsed);
                    }
                }
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let text = String::from_utf8_lossy(&got).to_string();
                        let (head, body) = text.split_once("\r\n\r\n").expect("a response");
                        return (head[9..12].parse().expect("a status"), parse_sse(body));
                    }
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await
        .expect("the reader")
    }

    async fn put(&self, path: &str, body: &Value) -> Response {
        self.send(Method::PUT, path, Some(body)).await
    }

    async fn raw(&self, method: Method, path: &str, ct: Option<&str>, body: Vec<u8>) -> Response {
        self.sent
            .lock()
            .unwrap()
            .push((method.as_str().to_string(), path.to_string()));
        self.client
            .raw(method.clone(), path, ct, body)
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// The routes the requests sent so far matched.
    fn routes_sent(&self) -> BTreeSet<(&'static str, &'static str)> {
        self.sent
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(m, p)| route_of(m, p))
            .map(|r| (r.method, r.path))
            .collect()
    }

    /// Stops the server gracefully, then removes its directory.
    async fn shutdown(mut self) {
        let server = self.server.take().expect("running");
        server.shutdown().await.expect("a clean shutdown");
        drop(self.dir.take());
        if let Some(db) = self.database.take() {
            postgres_admin(&format!("DROP DATABASE {db} WITH (FORCE)")).await;
        }
        // The accounts the test created are rows in the shards' databases.
        let mut rows = 0;
        for db in &self.mysql {
            use mysql_async::prelude::Queryable;
            let mut conn = common::mysql_connect(Some(db)).await;
            let n: Option<u64> = conn
                .query_first("SELECT COUNT(*) FROM accounts")
                .await
                .unwrap_or_else(|e| panic!("{db}: {e}"));
            rows += n.unwrap_or(0);
            let _ = conn.disconnect().await;
        }
        assert!(
            self.mysql.is_empty() || rows > 0,
            "no account rows in the MySQL databases {:?}",
            self.mysql
        );
        for db in std::mem::take(&mut self.mysql) {
            mysql_admin(&format!("DROP DATABASE `{db}`")).await;
        }
        // And documents in the MongoDB shards' databases.
        let (mut documents, mongodb) = (0, std::mem::take(&mut self.mongodb));
        for db in &mongodb {
            let shard = common::mongodb_shard(db).await;
            documents += shard
                .accounts(None, 1_000)
                .await
                .expect("the accounts")
                .len();
            shard.destroy().await.expect("drop the shard's database");
        }
        assert!(
            mongodb.is_empty() || documents > 0,
            "no account documents in the MongoDB databases {mongodb:?}"
        );
        for rc in std::mem::take(&mut self.redis) {
            let store = xfer_store_redis::RedisStore::open(&rc)
                .await
                .expect("reopen");
            store.destroy().await.expect("delete the shard's keys");
        }
    }

    // ---- domain helpers ----

    /// Declares `code` (USD and EUR with scale 2, the rest 0); again answers it.
    async fn declare(&self, code: &str) {
        let scale = if matches!(code, "USD" | "EUR") { 2 } else { 0 };
        let a = self
            .post("/v1/assets", &json!({"code": code, "scale": scale}))
            .await;
        assert_eq!(a.status, 201, "declare {code}: {}", a.text);
    }

    async fn create_account(&self, id: &str, asset: &str, lower_bound: Value) -> Value {
        self.declare(asset).await;
        let a = self
            .post(
                "/v1/accounts",
                &json!({"id": id, "asset": asset, "lower_bound": lower_bound}),
            )
            .await;
        assert_eq!(a.status, 201, "create {id}: {}", a.text);
        assert_eq!(a.body["id"], id);
        assert_eq!(a.body["asset"], asset);
        assert_eq!(a.body["balance"], 0);
        assert_eq!(a.body["status"], "open");
        a.body
    }

    async fn account(&self, id: &str) -> Value {
        let a = self.get(&format!("/v1/accounts/{id}")).await;
        assert_eq!(a.status, 200, "GET account {id}: {}", a.text);
        a.body
    }

    async fn balance(&self, id: &str) -> i64 {
        self.account(id).await["balance"]
            .as_i64()
            .expect("a balance")
    }

    async fn transfer(&self, id: &str) -> Value {
        let a = self.get(&format!("/v1/transfers/{id}")).await;
        assert_eq!(a.status, 200, "GET transfer {id}: {}", a.text);
        a.body
    }

    /// Submits `from → to` and expects it done.
    async fn pay(&self, id: &str, from: &str, to: &str, asset: &str, amount: u64) -> Value {
        let a = self
            .post(
                "/v1/transfers",
                &transfer(id, from, to, asset, json!(amount)),
            )
            .await;
        assert_eq!(a.status, 200, "transfer {id}: {}", a.text);
        assert_eq!(a.body["state"], "done", "transfer {id}: {}", a.text);
        a.body
    }

    /// The accounts `ids` and the audit's totals: what bad input must leave alone.
    async fn snapshot(&self, ids: &[&str]) -> Value {
        let mut accounts = Vec::new();
        for id in ids {
            accounts.push(self.account(id).await);
        }
        let audit = self.get("/v1/audit").await;
        assert_eq!(audit.status, 200, "audit: {}", audit.text);
        assert_eq!(audit.body["clean"], true, "audit: {}", audit.text);
        json!({
            "accounts": accounts,
            "assets": audit.body["assets"],
            "in_flight": audit.body["in_flight"],
            "open_intents": audit.body["open_intents"],
        })
    }

    async fn expect_no_transfer(&self, id: &str) {
        let a = self.get(&format!("/v1/transfers/{id}")).await;
        expect_error(
            &a,
            404,
            "transfer_not_found",
            Some("id"),
            &format!("GET {id}"),
        );
    }
}

/// The route `method path` (query ignored) is served by, preferring static segments.
fn route_of(method: &str, path: &str) -> Option<&'static Route> {
    let path = path.split('?').next().unwrap_or(path);
    let segs: Vec<&str> = path.split('/').collect();
    ROUTES
        .iter()
        .filter(|r| r.method == method)
        .filter(|r| {
            let t: Vec<&str> = r.path.split('/').collect();
            t.len() == segs.len()
                && t.iter()
                    .zip(&segs)
                    .all(|(t, s)| t == s || (t.starts_with('{') && !s.is_empty()))
        })
        .max_by_key(|r| r.path.split('/').filter(|t| !t.starts_with('{')).count())
}

/// One posting.
fn posting(from: &str, to: &str, asset: &str, amount: Value) -> Value {
    json!({"from": from, "to": to, "asset": asset, "amount": amount})
}

/// A one-posting transfer body.
fn transfer(id: &str, from: &str, to: &str, asset: &str, amount: Value) -> Value {
    json!({"id": id, "postings": [posting(from, to, asset, amount)]})
}

/// Asserts an error answer: status, code and field (`None`: no field).
fn expect_error(a: &Response, status: u16, code: &str, field: Option<&str>, what: &str) {
    assert_eq!(
        (a.status, a.code(), a.body["field"].as_str()),
        (status, code, field),
        "{what}: {}",
        a.text
    );
    assert!(
        a.body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: an error has a message: {}",
        a.text
    );
}

fn ids(page: &Value, key: &str) -> Vec<String> {
    page[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {page}"))
        .iter()
        .map(|t| t["id"].as_str().expect("an id").to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------
// Every endpoint.
// ---------------------------------------------------------------------------------------

async fn health_and_docs(ts: &TestServer) {
    let a = ts.get("/healthz").await;
    assert_eq!((a.status, &a.body), (200, &json!({"status": "ok"})));
    let a = ts.get("/readyz").await;
    assert_eq!((a.status, &a.body), (200, &json!({"status": "ready"})));

    let a = ts.get("/v1/openapi.json").await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert!(a.body["openapi"].as_str().unwrap_or("").starts_with("3."));
    for r in ROUTES {
        let op = &a.body["paths"][r.path][r.method.to_lowercase()];
        assert!(
            op.is_object(),
            "{} {} is not in the OpenAPI document",
            r.method,
            r.path
        );
    }
}

/// Declared assets: scales, refusals by field, accounts only of a declared asset, and
/// amounts in and out as decimals in the asset's scale, on accounts of its own. Runs after
/// `accounts` (USD 2 and EUR 2 declared, `bank` an issuer of USD).
async fn assets(ts: &TestServer) {
    let declare = |code: &str, scale: Value| {
        let body = json!({"code": code, "scale": scale});
        async move { ts.post("/v1/assets", &body).await }
    };
    for _ in 0..2 {
        let a = declare("JPY", json!(0)).await;
        assert_eq!(
            (a.status, a.body.clone()),
            (201, json!({"code": "JPY", "scale": 0}))
        );
    }
    ts.create_account("dec-a", "USD", json!(0)).await;
    ts.create_account("dec-b", "USD", json!(0)).await;
    ts.pay("dec-fund", "bank", "dec-a", "USD", 1_000).await;
    let before = ts.snapshot(&["dec-a", "dec-b"]).await;
    let a = declare("JPY", json!(2)).await;
    expect_error(
        &a,
        409,
        "asset_declared_with_another_scale",
        Some("scale"),
        "JPY 2",
    );
    let a = declare("BT C", json!(8)).await;
    expect_error(&a, 400, "asset_code_is_invalid", Some("code"), "a bad code");
    let a = declare("BTC", json!(19)).await;
    expect_error(
        &a,
        400,
        "asset_scale_out_of_range",
        Some("scale"),
        "19 places",
    );
    let a = ts.post("/v1/assets", &json!({"code": "BTC"})).await;
    assert_eq!((a.status, a.code()), (400, "missing_field"), "{}", a.text);
    let a = ts.get("/v1/assets").await;
    let listed: Vec<(String, u64)> = a.body["assets"]
        .as_array()
        .expect("assets")
        .iter()
        .map(|x| {
            (
                x["code"].as_str().unwrap().to_string(),
                x["scale"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = [("EUR", 2), ("JPY", 0), ("USD", 2)].map(|(c, n)| (c.to_string(), n));
    assert_eq!(listed, want, "{}", a.text);
    let a = ts.get("/v1/assets/USD").await;
    assert_eq!(
        (a.status, a.body.clone()),
        (200, json!({"code": "USD", "scale": 2}))
    );
    let a = ts.get("/v1/assets/USX").await;
    expect_error(
        &a,
        404,
        "asset_not_declared",
        Some("code"),
        "an undeclared asset",
    );

    // A typo makes no asset and no account.
    let a = ts
        .post("/v1/accounts", &json!({"id": "typo", "asset": "USX"}))
        .await;
    expect_error(
        &a,
        404,
        "asset_not_declared",
        Some("asset"),
        "an account of USX",
    );
    assert_eq!(ts.get("/v1/accounts/typo").await.status, 404);

    // Decimals in: refused by field, changing nothing.
    for (amount, status, code) in [
        (json!("1.255"), 400, "amount_has_too_many_decimals"),
        (json!("1,25"), 400, "amount_is_not_a_number"),
        (json!("-1.25"), 400, "amount_must_be_positive"),
        (json!("0.00"), 400, "amount_must_be_positive"),
        (json!(true), 400, "wrong_type"),
    ] {
        let a = ts
            .post(
                "/v1/transfers",
                &transfer("dec-bad", "dec-a", "dec-b", "USD", amount.clone()),
            )
            .await;
        expect_error(
            &a,
            status,
            code,
            Some("postings[0].amount"),
            &format!("{amount}"),
        );
    }
    let a = ts
        .post(
            "/v1/transfers",
            &transfer("dec-bad", "dec-a", "dec-b", "XYZ", json!("1.0")),
        )
        .await;
    expect_error(
        &a,
        404,
        "asset_not_declared",
        Some("postings[0].amount"),
        "XYZ 1.0",
    );
    assert_eq!(ts.get("/v1/transfers/dec-bad").await.status, 404);
    assert_eq!(
        ts.snapshot(&["dec-a", "dec-b"]).await,
        before,
        "nothing changed"
    );

    // Decimals in and out.
    let bob = ts.get("/v1/accounts/dec-b").await.body;
    let a = ts
        .post(
            "/v1/transfers",
            &transfer("dec-1", "dec-a", "dec-b", "USD", json!("1.25")),
        )
        .await;
    assert_eq!(a.body["state"], "done", "{}", a.text);
    let p = &a.body["postings"][0];
    assert_eq!(
        (p["amount"].clone(), p["amount_decimal"].clone()),
        (json!(125), json!("1.25"))
    );
    let after = ts.get("/v1/accounts/dec-b").await.body;
    let balance = after["balance"].as_i64().unwrap();
    assert_eq!(balance, bob["balance"].as_i64().unwrap() + 125);
    assert_eq!(after["scale"], 2);
    let whole = balance / 100;
    let cents = balance % 100;
    assert_eq!(
        after["balance_decimal"],
        json!(format!("{whole}.{cents:02}"))
    );
    assert_eq!(after["available_decimal"], after["balance_decimal"]);
    // A batch item and a partial refund in decimals.
    let batch = json!({"transfers": [transfer("dec-2", "dec-a", "dec-b", "USD", json!("0.75"))]});
    let a = ts.post("/v1/transfers/batch", &batch).await;
    let t = &a.body["results"][0]["transfer"];
    assert_eq!(
        (t["state"].clone(), t["postings"][0]["amount"].clone()),
        (json!("done"), json!(75))
    );
    let a = ts
        .post(
            "/v1/transfers/dec-1/refund",
            &json!({"id": "dec-1r", "amount": "0.25"}),
        )
        .await;
    assert_eq!(a.body["state"], "done", "{}", a.text);
    assert_eq!(a.body["postings"][0]["amount"], 25);
    let a = ts
        .post(
            "/v1/transfers/dec-1/refund",
            &json!({"id": "dec-1r2", "amount": "0.001"}),
        )
        .await;
    expect_error(
        &a,
        400,
        "amount_has_too_many_decimals",
        Some("amount"),
        "a refund of 0.001",
    );
    // Lower bounds in decimals too; a malformed one changes nothing.
    let body = json!({"id": "dec-c", "asset": "USD", "lower_bound": "-5.00"});
    let a = ts.post("/v1/accounts", &body).await;
    assert_eq!(
        (a.status, a.body["lower_bound"].clone()),
        (201, json!(-500)),
        "{}",
        a.text
    );
    let put_bound = |bound: &'static str| {
        let body = json!({"lower_bound": bound});
        async move {
            ts.send(Method::PUT, "/v1/accounts/dec-c/lower_bound", Some(&body))
                .await
        }
    };
    let a = put_bound("-7.25").await;
    assert_eq!(
        (a.status, a.body["lower_bound"].clone()),
        (200, json!(-725)),
        "{}",
        a.text
    );
    for bad in ["--50.00", "--1.2.3", "-", "-x"] {
        let a = put_bound(bad).await;
        assert_eq!(
            (a.status, a.code()),
            (400, "wrong_type"),
            "{bad}: {}",
            a.text
        );
    }
    let a = put_bound("-7.255").await;
    expect_error(
        &a,
        400,
        "amount_has_too_many_decimals",
        Some("lower_bound"),
        "-7.255",
    );
    assert_eq!(
        ts.get("/v1/accounts/dec-c").await.body["lower_bound"],
        json!(-725)
    );
}

/// Accounts' metadata: set at creation, replaced, removed, filtered in the listing, and
/// every refusal by field, changing nothing.
async fn account_metadata(ts: &TestServer) {
    let create = |id: &str, metadata: Value| {
        let body = json!({"id": id, "asset": "USD", "metadata": metadata});
        async move { ts.post("/v1/accounts", &body).await }
    };
    let a = create("md-a", json!({"owner": "alice", "tier": "gold"})).await;
    assert_eq!(a.status, 201, "{}", a.text);
    assert_eq!(
        a.body["metadata"],
        json!({"owner": "alice", "tier": "gold"})
    );
    for (id, owner) in [("md-b", "bob"), ("md-c", "alice")] {
        let a = create(id, json!({"owner": owner})).await;
        assert_eq!(a.status, 201, "{}", a.text);
    }
    let a = ts.get("/v1/accounts/md-a").await;
    assert_eq!(
        a.body["metadata"],
        json!({"owner": "alice", "tier": "gold"})
    );
    let ids = |a: &Response| -> Vec<String> {
        a.body["accounts"]
            .as_array()
            .expect("accounts")
            .iter()
            .map(|x| x["id"].as_str().unwrap().to_string())
            .collect()
    };
    let a = ts.get("/v1/accounts?metadata=owner=alice").await;
    assert_eq!(ids(&a), ["md-a", "md-c"], "{}", a.text);
    assert_eq!(a.body["accounts"][1]["metadata"], json!({"owner": "alice"}));
    let a = ts.get("/v1/accounts?metadata=owner=alice&limit=1").await;
    assert_eq!(
        (ids(&a), a.body["next_after"].clone()),
        (vec!["md-a".to_string()], json!("md-a"))
    );
    let a = ts.get("/v1/accounts?metadata=owner=alice&after=md-a").await;
    assert_eq!(ids(&a), ["md-c"]);
    let a = ts.get("/v1/accounts?after=md-a&limit=2").await;
    assert_eq!(
        a.body["accounts"][0]["metadata"],
        json!({"owner": "bob"}),
        "{}",
        a.text
    );

    // Replaced whole, then removed.
    let put = |id: &str, metadata: Value| {
        let path = format!("/v1/accounts/{id}/metadata");
        let body = json!({"metadata": metadata});
        async move { ts.send(Method::PUT, &path, Some(&body)).await }
    };
    let a = put("md-a", json!({"tier": "silver"})).await;
    assert_eq!(
        (a.status, a.body["metadata"].clone()),
        (200, json!({"tier": "silver"}))
    );
    assert_eq!(
        ids(&ts.get("/v1/accounts?metadata=owner=alice").await),
        ["md-c"]
    );
    let a = put("md-c", json!({})).await;
    assert_eq!((a.status, a.body["metadata"].clone()), (200, json!({})));
    assert_eq!(
        ts.get("/v1/accounts/md-c").await.body["metadata"],
        json!({})
    );

    // Refusals name the field and change nothing.
    let many: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    let long = "x".repeat(257);
    for (metadata, code, field) in [
        (
            json!({"bad key": "v"}),
            "metadata_key_is_invalid",
            "metadata.bad key",
        ),
        (
            json!({"a.b": "v"}),
            "metadata_key_is_invalid",
            "metadata.a.b",
        ),
        (json!({"n": 5}), "wrong_type", "metadata.n"),
        (
            json!({"nul": "a\u{0}b"}),
            "metadata_value_is_invalid",
            "metadata.nul",
        ),
        (
            json!({"tab": "a\tb"}),
            "metadata_value_is_invalid",
            "metadata.tab",
        ),
        (json!({"k": long}), "metadata_too_large", "metadata.k"),
        (Value::Object(many), "metadata_too_large", "metadata"),
    ] {
        let a = put("md-b", metadata.clone()).await;
        expect_error(&a, 400, code, Some(field), &format!("PUT {metadata}"));
        let a = create("md-new", metadata.clone()).await;
        expect_error(
            &a,
            400,
            code,
            Some(field),
            &format!("create with {metadata}"),
        );
    }
    assert_eq!(
        ts.get("/v1/accounts/md-b").await.body["metadata"],
        json!({"owner": "bob"})
    );
    assert_eq!(
        ts.get("/v1/accounts/md-new").await.status,
        404,
        "no account made"
    );
    let a = put("md-nobody", json!({"owner": "x"})).await;
    expect_error(
        &a,
        404,
        "account_not_found",
        Some("id"),
        "PUT on no account",
    );
    let a = ts.get("/v1/accounts?metadata=owner").await;
    expect_error(
        &a,
        400,
        "invalid_query",
        Some("metadata"),
        "a filter without =",
    );
    // A filter no label could hold is refused before it reaches a store.
    for q in ["a%22=x", "x%22**.%22owner=1", "owner=%00", "=x"] {
        let a = ts.get(&format!("/v1/accounts?metadata={q}")).await;
        expect_error(&a, 400, "invalid_query", Some("metadata"), q);
    }
}

async fn accounts(ts: &TestServer) {
    // Issuers may go below zero without limit; everyone else starts at 0.
    let bank = ts.create_account("bank", "USD", json!("unbounded")).await;
    assert_eq!(bank["lower_bound"], "unbounded");
    assert_eq!(bank["available"], Value::Null);
    for id in ["alice", "bob", "carol", "zed"] {
        let a = ts.create_account(id, "USD", json!(0)).await;
        assert_eq!(
            (a["lower_bound"].clone(), a["available"].clone()),
            (json!(0), json!(0))
        );
    }
    // A credit line: may go 50 below zero.
    let dan = ts.create_account("dan", "USD", json!(-50)).await;
    assert_eq!(dan["available"], 50);
    ts.create_account("eur-bank", "EUR", json!("unbounded"))
        .await;
    // Creating again with the same body answers the account (201 again, nothing changes).
    let again = ts
        .post(
            "/v1/accounts",
            &json!({"id": "alice", "asset": "USD", "lower_bound": 0}),
        )
        .await;
    assert_eq!(
        (again.status, again.body["id"].clone()),
        (201, json!("alice"))
    );

    let a = ts.account("alice").await;
    for key in ["balance", "reserved", "incoming", "in_flight"] {
        assert_eq!(a[key], 0, "alice.{key}");
    }
    assert!(a["shard"].as_u64().is_some_and(|s| s < 4), "{a}");
    let a = ts.get("/v1/accounts/nobody").await;
    expect_error(&a, 404, "account_not_found", Some("id"), "GET nobody");

    // The whole list, then page by page.
    let all = ts.get("/v1/accounts?limit=1000").await;
    assert_eq!(all.status, 200, "{}", all.text);
    let every = ids(&all.body, "accounts");
    let want = ["alice", "bank", "bob", "carol", "dan", "eur-bank", "zed"];
    assert_eq!(every, want);
    assert_eq!(all.body["next_after"], Value::Null);
    let mut paged = Vec::new();
    let mut path = "/v1/accounts?limit=2".to_string();
    for _ in 0..10 {
        let page = ts.get(&path).await;
        assert_eq!(page.status, 200, "{}", page.text);
        let got = ids(&page.body, "accounts");
        assert!(got.len() <= 2, "{}", page.text);
        paged.extend(got);
        match page.body["next_after"].as_str() {
            Some(after) => path = format!("/v1/accounts?limit=2&after={after}"),
            None => break,
        }
    }
    assert_eq!(paged, want, "pages of 2 add up to the list");
    let a = ts.get("/v1/accounts?limit=0").await;
    expect_error(&a, 400, "invalid_query", Some("limit"), "limit=0");
}

async fn lower_bounds_and_close(ts: &TestServer) {
    ts.pay("fund-alice", "bank", "alice", "USD", 100).await;
    let path = "/v1/accounts/alice/lower_bound";

    // Raising the bound up to the balance is allowed; above it is refused.
    let a = ts.put(path, &json!({"lower_bound": 60})).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(
        (a.body["lower_bound"].clone(), a.body["available"].clone()),
        (json!(60), json!(40))
    );
    let a = ts.put(path, &json!({"lower_bound": 101})).await;
    expect_error(
        &a,
        422,
        "lower_bound_above_available",
        Some("lower_bound"),
        "bound 101",
    );
    assert_eq!(
        ts.account("alice").await["lower_bound"],
        60,
        "a refused bound changes nothing"
    );
    // A transfer past the bound is canceled.
    let a = ts
        .post(
            "/v1/transfers",
            &transfer("past-bound", "alice", "bob", "USD", json!(41)),
        )
        .await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("canceled")),
        "{}",
        a.text
    );
    assert_eq!(a.body["reason"]["code"], "exceeds_available");
    assert_eq!(a.body["reason"]["account"], "alice");
    // A credit line below zero, then back to 0.
    let a = ts.put(path, &json!({"lower_bound": -25})).await;
    assert_eq!(
        (a.status, a.body["available"].clone()),
        (200, json!(125)),
        "{}",
        a.text
    );
    let a = ts.put(path, &json!({"lower_bound": 0})).await;
    assert_eq!(
        (a.status, a.body["available"].clone()),
        (200, json!(100)),
        "{}",
        a.text
    );
    let a = ts
        .put(
            "/v1/accounts/nobody/lower_bound",
            &json!({"lower_bound": 0}),
        )
        .await;
    expect_error(&a, 404, "account_not_found", Some("id"), "bound of nobody");

    // Close zed; a transfer to it is refused and changes nothing.
    let a = ts.post_empty("/v1/accounts/zed/close").await;
    assert_eq!(
        (a.status, a.body["status"].clone()),
        (200, json!("closed")),
        "{}",
        a.text
    );
    let before = ts.snapshot(&["alice", "zed"]).await;
    let a = ts
        .post(
            "/v1/transfers",
            &transfer("to-closed", "alice", "zed", "USD", json!(1)),
        )
        .await;
    expect_error(
        &a,
        422,
        "account_closed",
        Some("postings[0].to"),
        "to closed",
    );
    assert_eq!(ts.snapshot(&["alice", "zed"]).await, before);
    ts.expect_no_transfer("to-closed").await;
    // Closing again answers the closed account.
    let a = ts.post_empty("/v1/accounts/zed/close").await;
    assert_eq!(
        (a.status, a.body["status"].clone()),
        (200, json!("closed")),
        "{}",
        a.text
    );
}

async fn transfers(ts: &TestServer) {
    // wait=true (the default): the outcome.
    let t = ts.pay("t-1", "alice", "bob", "USD", 30).await;
    assert_eq!(t["id"], "t-1");
    assert_eq!(t["kind"], "transfer");
    assert_eq!(
        t["postings"],
        json!([{"from": "alice", "to": "bob", "asset": "USD", "amount": 30, "amount_decimal": "0.30"}])
    );
    assert_eq!(t["reason"], Value::Null);
    assert!(t["created_at_ms"].as_u64().unwrap() > 0);
    assert!(t["deadline_ms"].as_u64().unwrap() > t["created_at_ms"].as_u64().unwrap());
    assert_eq!(
        (ts.balance("alice").await, ts.balance("bob").await),
        (70, 30)
    );
    assert_eq!(ts.transfer("t-1").await, t, "GET answers the record");
    ts.expect_no_transfer("t-404").await;

    // wait=false: 202 once durable, then done in the background.
    let a = ts
        .post(
            "/v1/transfers?wait=false",
            &json!({"id": "t-2", "postings": [
                posting("alice", "bob", "USD", json!(5)),
                posting("alice", "carol", "USD", json!(5)),
            ], "metadata": "two postings"}),
        )
        .await;
    assert_eq!(a.status, 202, "{}", a.text);
    assert_eq!(a.body["id"], "t-2");
    assert_ne!(a.body["state"], "done");
    let mut state = Value::Null;
    for _ in 0..250 {
        state = ts.transfer("t-2").await["state"].clone();
        if state == "done" {
            break;
        }
        TokioSleeper.sleep(20).await;
    }
    assert_eq!(state, "done");
    assert_eq!(ts.transfer("t-2").await["metadata"], "two postings");
    assert_eq!(
        (
            ts.balance("alice").await,
            ts.balance("bob").await,
            ts.balance("carol").await
        ),
        (60, 35, 5)
    );

    // A batch: each item has its own answer.
    let a = ts
        .post(
            "/v1/transfers/batch",
            &json!({"transfers": [
                transfer("b-0", "bob", "carol", "USD", json!(1)),
                transfer("b-1", "bob", "carol", "USD", json!(0)),
                transfer("b-2", "carol", "bob", "USD", json!(2)),
                transfer("b-3", "bob", "nobody", "USD", json!(1)),
                transfer("b-4", "bob", "carol", "USD", json!(1_000_000)),
            ]}),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let results = a.body["results"].as_array().expect("results");
    assert_eq!(results.len(), 5, "{}", a.text);
    let summary: Vec<(u64, Value, Value, Value)> = results
        .iter()
        .map(|r| {
            (
                r["status"].as_u64().unwrap(),
                r["transfer"]["state"].clone(),
                r["error"]["code"].clone(),
                r["error"]["field"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (200, json!("done"), Value::Null, Value::Null),
            (
                400,
                Value::Null,
                json!("amount_must_be_positive"),
                json!("transfers[1].postings[0].amount")
            ),
            (200, json!("done"), Value::Null, Value::Null),
            (
                404,
                Value::Null,
                json!("account_not_found"),
                json!("transfers[3].postings[0].to")
            ),
            (200, json!("canceled"), Value::Null, Value::Null),
        ],
        "{}",
        a.text
    );
    assert_eq!(
        results[4]["transfer"]["reason"]["code"],
        "exceeds_available"
    );
    ts.expect_no_transfer("b-1").await;
    ts.expect_no_transfer("b-3").await;
    assert_eq!(
        (ts.balance("bob").await, ts.balance("carol").await),
        (36, 4)
    );

    // Redrive of a done transfer answers it.
    let a = ts.post_empty("/v1/transfers/t-1/redrive").await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("done")),
        "{}",
        a.text
    );
    assert_eq!(a.body["id"], "t-1");
    assert_eq!(
        ts.balance("alice").await,
        60,
        "a redrive moves nothing twice"
    );
    let a = ts.post_empty("/v1/transfers/t-404/redrive").await;
    expect_error(&a, 404, "transfer_not_found", Some("id"), "redrive t-404");
}

async fn holds_and_refunds(ts: &TestServer) {
    let hold = |id: &str, amount: u64| {
        json!({"id": id, "postings": [posting("alice", "carol", "USD", json!(amount))],
               "hold": {"ttl_ms": 60_000}, "timeout_ms": 5_000})
    };
    let start = (ts.balance("alice").await, ts.balance("carol").await);

    // Hold then capture.
    let a = ts.post("/v1/transfers", &hold("h-1", 10)).await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("held")),
        "{}",
        a.text
    );
    assert_eq!(a.body["kind"], "hold");
    let expires = a.body["hold_expires_at_ms"].as_u64().expect("an expiry");
    assert!(
        expires >= a.body["created_at_ms"].as_u64().unwrap() + 60_000,
        "{}",
        a.text
    );
    let alice = ts.account("alice").await;
    assert_eq!(
        (alice["balance"].clone(), alice["reserved"].clone()),
        (json!(start.0), json!(10))
    );
    assert_eq!(ts.account("carol").await["incoming"], 10);
    let a = ts.post_empty("/v1/transfers/h-1/capture").await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("done")),
        "{}",
        a.text
    );
    assert_eq!(ts.account("alice").await["reserved"], 0);
    assert_eq!(
        (ts.balance("alice").await, ts.balance("carol").await),
        (start.0 - 10, start.1 + 10)
    );
    // Capturing again answers the captured hold.
    let a = ts.post_empty("/v1/transfers/h-1/capture").await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("done")),
        "{}",
        a.text
    );
    assert_eq!(ts.balance("alice").await, start.0 - 10, "captured once");
    let a = ts.post_empty("/v1/transfers/t-1/capture").await;
    expect_error(
        &a,
        409,
        "transfer_is_not_held",
        Some("id"),
        "capture a transfer",
    );

    // Hold then void.
    let a = ts.post("/v1/transfers", &hold("h-2", 7)).await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("held")),
        "{}",
        a.text
    );
    let a = ts.post_empty("/v1/transfers/h-2/void").await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("canceled")),
        "{}",
        a.text
    );
    assert_eq!(a.body["reason"]["code"], "voided");
    assert_eq!(ts.account("alice").await["reserved"], 0);
    assert_eq!(
        ts.balance("alice").await,
        start.0 - 10,
        "a void moves nothing"
    );
    // A settled hold: the same settle again answers it, the other one is refused.
    let a = ts.post_empty("/v1/transfers/h-2/void").await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("canceled")),
        "{}",
        a.text
    );
    let a = ts.post_empty("/v1/transfers/h-2/capture").await;
    expect_error(
        &a,
        409,
        "hold_already_voided",
        Some("id"),
        "capture after void",
    );
    let a = ts.post_empty("/v1/transfers/h-1/void").await;
    expect_error(
        &a,
        409,
        "hold_already_captured",
        Some("id"),
        "void after capture",
    );
    assert_eq!(
        (
            ts.balance("alice").await,
            ts.account("alice").await["reserved"].clone()
        ),
        (start.0 - 10, json!(0)),
        "refused settles change nothing"
    );

    // Refund h-1: the reverse postings, linked both ways.
    let a = ts
        .post("/v1/transfers/h-1/refund", &json!({"id": "r-1"}))
        .await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("done")),
        "{}",
        a.text
    );
    assert_eq!(a.body["refund_of"], "h-1");
    assert_eq!(
        a.body["postings"],
        json!([{"from": "carol", "to": "alice", "asset": "USD", "amount": 10, "amount_decimal": "0.10"}])
    );
    assert_eq!(ts.transfer("h-1").await["refunded_by"], "r-1");
    assert_eq!(
        (ts.balance("alice").await, ts.balance("carol").await),
        start
    );
    // The same refund again answers it; another refund of h-1 conflicts.
    let a = ts
        .post("/v1/transfers/h-1/refund", &json!({"id": "r-1"}))
        .await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("done")),
        "{}",
        a.text
    );
    let a = ts
        .post("/v1/transfers/h-1/refund", &json!({"id": "r-2"}))
        .await;
    expect_error(
        &a,
        409,
        "original_already_refunded",
        Some("original"),
        "refund h-1 twice",
    );
    ts.expect_no_transfer("r-2").await;
    // A canceled transfer cannot be refunded.
    let a = ts
        .post("/v1/transfers/h-2/refund", &json!({"id": "r-3"}))
        .await;
    expect_error(
        &a,
        409,
        "original_is_not_done",
        Some("original"),
        "refund h-2",
    );
    ts.expect_no_transfer("r-3").await;
    assert_eq!(
        (ts.balance("alice").await, ts.balance("carol").await),
        start
    );

    // A refund the refunded account cannot pay is canceled; another refund takes over.
    let bob = ts.balance("bob").await;
    ts.pay("big", "alice", "carol", "USD", 10).await;
    ts.pay("spend", "carol", "bob", "USD", start.1 as u64 + 10)
        .await;
    let a = ts
        .post("/v1/transfers/big/refund", &json!({"id": "r-big-1"}))
        .await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("canceled")),
        "{}",
        a.text
    );
    assert_eq!(a.body["reason"]["code"], "exceeds_available", "{}", a.text);
    assert_eq!(a.body["reason"]["account"], "carol", "{}", a.text);
    ts.pay("refill", "bob", "carol", "USD", 10).await;
    let a = ts
        .post("/v1/transfers/big/refund", &json!({"id": "r-big-2"}))
        .await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("done")),
        "{}",
        a.text
    );
    assert_eq!(ts.transfer("big").await["refunded_by"], "r-big-2");
    timelines(ts).await;
    // The canceled refund, resubmitted, is answered from its record; a third conflicts.
    let a = ts
        .post("/v1/transfers/big/refund", &json!({"id": "r-big-1"}))
        .await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("canceled")),
        "{}",
        a.text
    );
    let a = ts
        .post("/v1/transfers/big/refund", &json!({"id": "r-big-3"}))
        .await;
    expect_error(
        &a,
        409,
        "original_already_refunded",
        Some("original"),
        "refund big again",
    );
    ts.expect_no_transfer("r-big-3").await;
    assert_eq!(
        (
            ts.balance("alice").await,
            ts.balance("bob").await,
            ts.balance("carol").await
        ),
        (start.0, bob + start.1, 0)
    );
}

/// Partial refunds over HTTP: several per transfer, posting by posting never more than it
/// moved, each refusal by its field and nothing written; a canceled refund's share
/// refunded again; two at once that together exceed it: one is done.
/// A hold captured in part: refusals by field that change nothing, the part moved and the
/// rest released, repeats, refunds bounded by what was captured.
async fn partial_captures(ts: &TestServer) {
    let capture = |id: &str, body: Value| {
        let path = format!("/v1/transfers/{id}/capture");
        async move { ts.post(&path, &body).await }
    };
    let hold = |id: &str, amounts: &[u64]| {
        let postings: Vec<Value> = amounts
            .iter()
            .map(|a| posting("alice", "carol", "USD", json!(a)))
            .collect();
        json!({"id": id, "postings": postings, "hold": {"ttl_ms": 60_000}, "timeout_ms": 5_000})
    };
    ts.pay("pc-fund", "bank", "alice", "USD", 2_000).await;
    let start = (ts.balance("alice").await, ts.balance("carol").await);
    // Reserved by holds of earlier cases, left as they are.
    let held = ts.account("alice").await["reserved"]
        .as_i64()
        .expect("reserved");
    let incoming = ts.account("carol").await["incoming"].clone();
    let a = ts.post("/v1/transfers", &hold("pc-1", &[1_000])).await;
    assert_eq!(a.body["state"], "held", "{}", a.text);
    for (body, status, code, field) in [
        (
            json!({"amount": 1_001}),
            400,
            "capture_exceeds_hold",
            "amount",
        ),
        (
            json!({"amount": "10.01"}),
            400,
            "capture_exceeds_hold",
            "amount",
        ),
        (
            json!({"amounts": [1, 2]}),
            400,
            "capture_must_match_hold",
            "amounts",
        ),
        (
            json!({"amount": "4.001"}),
            400,
            "amount_has_too_many_decimals",
            "amount",
        ),
        (
            json!({"amount": 0}),
            400,
            "amount_must_be_positive",
            "amount",
        ),
        (json!({"amounts": []}), 400, "invalid_value", "amounts"),
        (
            json!({"amount": 5, "amounts": [5]}),
            400,
            "invalid_value",
            "amounts",
        ),
        (json!({"amount": true}), 400, "wrong_type", "amount"),
    ] {
        let a = capture("pc-1", body.clone()).await;
        expect_error(&a, status, code, Some(field), &body.to_string());
    }
    let alice = ts.account("alice").await;
    assert_eq!(
        (alice["balance"].clone(), alice["reserved"].clone()),
        (json!(start.0), json!(held + 1_000)),
        "refused captures change nothing"
    );
    assert_eq!(ts.get("/v1/transfers/pc-1").await.body["state"], "held");

    // 4.00 of 10.00 captured: 4.00 moves, 6.00 is released, in the same posts.
    let a = capture("pc-1", json!({"amount": "4.00"})).await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("done")),
        "{}",
        a.text
    );
    assert_eq!(
        a.body["postings"],
        json!([{"from": "alice", "to": "carol", "asset": "USD", "amount": 1_000,
                "amount_decimal": "10.00", "captured": 400, "captured_decimal": "4.00"}])
    );
    let alice = ts.account("alice").await;
    assert_eq!(
        (alice["balance"].clone(), alice["reserved"].clone()),
        (json!(start.0 - 400), json!(held))
    );
    assert_eq!(ts.account("carol").await["incoming"], incoming);
    assert_eq!(ts.balance("carol").await, start.1 + 400);
    // The same capture again answers it; other amounts or a whole capture are refused.
    let again = capture("pc-1", json!({"amount": 400})).await;
    assert_eq!(
        (again.status, again.body["postings"].clone()),
        (200, a.body["postings"].clone())
    );
    let a = capture("pc-1", json!({"amount": 300})).await;
    expect_error(
        &a,
        409,
        "hold_already_captured",
        Some("amount"),
        "other amounts",
    );
    let a = ts.post_empty("/v1/transfers/pc-1/capture").await;
    expect_error(
        &a,
        409,
        "hold_already_captured",
        Some("amounts"),
        "whole after part",
    );
    let a = ts.post_empty("/v1/transfers/pc-1/void").await;
    expect_error(
        &a,
        409,
        "hold_already_captured",
        Some("id"),
        "void after part",
    );
    assert_eq!(ts.balance("alice").await, start.0 - 400, "captured once");

    // Refunds move back at most what was captured.
    let a = ts
        .post(
            "/v1/transfers/pc-1/refund",
            &json!({"id": "pc-1-r1", "amount": 401}),
        )
        .await;
    expect_error(
        &a,
        409,
        "refund_exceeds_original",
        Some("amount"),
        "past the capture",
    );
    let a = ts
        .post("/v1/transfers/pc-1/refund", &json!({"id": "pc-1-r2"}))
        .await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("done")),
        "{}",
        a.text
    );
    assert_eq!(a.body["postings"][0]["amount"], 400);
    assert_eq!(
        (ts.balance("alice").await, ts.balance("carol").await),
        start
    );

    // Amounts that take every posting whole are a whole capture.
    let a = ts.post("/v1/transfers", &hold("pc-2", &[100, 50])).await;
    assert_eq!(a.body["state"], "held", "{}", a.text);
    let a = capture("pc-2", json!({"amount": 100})).await;
    expect_error(
        &a,
        400,
        "capture_must_match_hold",
        Some("amount"),
        "one amount for two postings",
    );
    let a = capture("pc-2", json!({"amounts": [100, "0.50"]})).await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("done")),
        "{}",
        a.text
    );
    assert!(
        a.body["postings"][0].get("captured").is_none(),
        "{}",
        a.text
    );
    let a = ts.post_empty("/v1/transfers/pc-2/capture").await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(ts.balance("alice").await, start.0 - 150);
}

async fn partial_refunds(ts: &TestServer) {
    let refund = |original: &str, body: Value| {
        let path = format!("/v1/transfers/{original}/refund");
        async move { ts.post(&path, &body).await }
    };
    let links = |t: &Value| -> Vec<(String, Vec<u64>)> {
        t["refunds"]
            .as_array()
            .expect("refunds")
            .iter()
            .map(|l| {
                let amounts = l["amounts"].as_array().expect("amounts");
                (
                    l["id"].as_str().expect("id").to_string(),
                    amounts.iter().map(|a| a.as_u64().expect("units")).collect(),
                )
            })
            .collect()
    };
    let done = |a: &Response, what: &str| {
        assert_eq!(
            (a.status, a.body["state"].clone()),
            (200, json!("done")),
            "{what}: {}",
            a.text
        )
    };
    ts.pay("pp-fund", "bank", "alice", "USD", 300).await;
    let (alice, bob) = (ts.balance("alice").await, ts.balance("bob").await);
    ts.pay("pp-1", "alice", "bob", "USD", 100).await;
    let a = refund("pp-1", json!({"id": "pp-1-r1", "amount": 30})).await;
    done(&a, "30 of 100");
    assert_eq!(a.body["postings"][0]["amount"], 30);
    assert_eq!(a.body["postings"][0]["from"], "bob");
    let t = ts.transfer("pp-1").await;
    assert_eq!(links(&t), [("pp-1-r1".to_string(), vec![30])]);
    assert_eq!(t["refunded_by"], "pp-1-r1");
    let a = refund("pp-1", json!({"id": "pp-1-r2", "amount": 71})).await;
    expect_error(
        &a,
        409,
        "refund_exceeds_original",
        Some("amount"),
        "71 more of 100",
    );
    ts.expect_no_transfer("pp-1-r2").await;
    let a = refund("pp-1", json!({"id": "pp-1-r2"})).await;
    expect_error(
        &a,
        409,
        "refund_exceeds_original",
        Some("original"),
        "the whole of 100 again",
    );
    done(
        &refund("pp-1", json!({"id": "pp-1-r2", "amount": 70})).await,
        "the last 70",
    );
    done(
        &refund("pp-1", json!({"id": "pp-1-r1", "amount": 30})).await,
        "a repeat",
    );
    let a = refund("pp-1", json!({"id": "pp-1-r3", "amount": 1})).await;
    expect_error(
        &a,
        409,
        "original_already_refunded",
        Some("original"),
        "all moved back",
    );
    ts.expect_no_transfer("pp-1-r3").await;
    let t = ts.transfer("pp-1").await;
    assert_eq!(
        links(&t),
        [
            ("pp-1-r1".to_string(), vec![30]),
            ("pp-1-r2".to_string(), vec![70])
        ]
    );
    assert_eq!(t["refunded_by"], "pp-1-r2");
    assert_eq!(
        (ts.balance("alice").await, ts.balance("bob").await),
        (alice, bob)
    );

    // Two postings: an amount for each, in order.
    let a = ts
        .post(
            "/v1/transfers",
            &json!({"id": "pp-2", "postings": [
                posting("alice", "bob", "USD", json!(20)),
                posting("alice", "carol", "USD", json!(30))]}),
        )
        .await;
    done(&a, "pp-2");
    for (body, status, code, field, what) in [
        (
            json!({"id": "pp-2-x", "amount": 5}),
            400,
            "refund_must_reverse_original",
            "amount",
            "one amount for two postings",
        ),
        (
            json!({"id": "pp-2-x", "amounts": [5]}),
            400,
            "refund_must_reverse_original",
            "amounts",
            "one of two",
        ),
        (
            json!({"id": "pp-2-x", "amounts": []}),
            400,
            "invalid_value",
            "amounts",
            "none",
        ),
        (
            json!({"id": "pp-2-x", "amounts": [5, 31]}),
            409,
            "refund_exceeds_original",
            "amounts[1]",
            "31 of 30",
        ),
        (
            json!({"id": "pp-2-x", "amounts": [5, 0]}),
            400,
            "amount_must_be_positive",
            "amounts[1]",
            "zero",
        ),
        (
            json!({"id": "pp-2-x", "amounts": [5, true]}),
            400,
            "wrong_type",
            "amounts[1]",
            "a boolean",
        ),
        (
            json!({"id": "pp-2-x", "amounts": [5, "0.001"]}),
            400,
            "amount_has_too_many_decimals",
            "amounts[1]",
            "a decimal finer than the scale",
        ),
        (
            json!({"id": "pp-2-x", "amount": 5, "amounts": [5, 5]}),
            400,
            "invalid_value",
            "amounts",
            "both",
        ),
        (
            json!({"id": "pp-2-x", "amounts": [5, 1.5]}),
            400,
            "amount_is_not_a_number",
            "amounts[1]",
            "a fraction",
        ),
    ] {
        let a = refund("pp-2", body).await;
        expect_error(&a, status, code, Some(field), what);
    }
    ts.expect_no_transfer("pp-2-x").await;
    done(
        &refund("pp-2", json!({"id": "pp-2-r1", "amounts": [5, 10]})).await,
        "5 and 10",
    );
    let a = refund("pp-2", json!({"id": "pp-2-r2", "amounts": [16, 1]})).await;
    expect_error(
        &a,
        409,
        "refund_exceeds_original",
        Some("amounts"),
        "5 + 16 of 20",
    );
    done(
        &refund("pp-2", json!({"id": "pp-2-r2", "amounts": [15, 20]})).await,
        "the rest",
    );
    let t = ts.transfer("pp-2").await;
    assert_eq!(
        links(&t),
        [
            ("pp-2-r1".to_string(), vec![5, 10]),
            ("pp-2-r2".to_string(), vec![15, 20])
        ]
    );

    // A refund the refunded account cannot pay is canceled; its share is refunded again.
    let carol = ts.balance("carol").await;
    ts.pay("pp-3", "alice", "carol", "USD", 40).await;
    ts.pay("pp-3-spend", "carol", "bob", "USD", carol as u64 + 40)
        .await;
    let a = refund("pp-3", json!({"id": "pp-3-r1", "amount": 25})).await;
    assert_eq!(
        (
            a.status,
            a.body["state"].clone(),
            a.body["reason"]["code"].clone()
        ),
        (200, json!("canceled"), json!("exceeds_available")),
        "{}",
        a.text
    );
    ts.pay("pp-3-refill", "bob", "carol", "USD", 40).await;
    done(
        &refund("pp-3", json!({"id": "pp-3-r2", "amount": 40})).await,
        "all 40, r1's share with it",
    );
    assert_eq!(
        links(&ts.transfer("pp-3").await),
        [("pp-3-r2".to_string(), vec![40])]
    );

    // Two at once that together exceed it: one is done, the other refused or canceled.
    ts.pay("pp-4", "alice", "bob", "USD", 100).await;
    let bob = ts.balance("bob").await;
    let (a, b) = tokio::join!(
        refund("pp-4", json!({"id": "pp-4-a", "amount": 60})),
        refund("pp-4", json!({"id": "pp-4-b", "amount": 60})),
    );
    let done_count = [&a, &b]
        .iter()
        .filter(|r| r.status == 200 && r.body["state"] == "done")
        .count();
    assert_eq!(done_count, 1, "{} / {}", a.text, b.text);
    for r in [&a, &b].into_iter().filter(|r| r.body["state"] != "done") {
        let refused = r.status == 409 && r.code() == "refund_exceeds_original";
        let canceled =
            // Linked second: canceled with the link's refusal as its reason.
            r.body["state"] == "canceled" && r.body["reason"]["code"] == "refund_exceeds_original";
        assert!(refused || canceled, "{}", r.text);
    }
    assert_eq!(links(&ts.transfer("pp-4").await).len(), 1);
    assert_eq!(ts.balance("bob").await, bob - 60);
}

/// Extending holds over HTTP: later only, before the expiry; each refusal by its code and
/// field, nothing changed.
async fn extend_holds(ts: &TestServer) {
    let hold = |id: &str, ttl_ms: u64| {
        json!({"id": id, "postings": [posting("alice", "carol", "USD", json!(1))],
               "hold": {"ttl_ms": ttl_ms}, "timeout_ms": 1_000})
    };
    let extend = |id: &str, body: Value| {
        let path = format!("/v1/transfers/{id}/extend");
        async move { ts.post(&path, &body).await }
    };
    let expiry = |t: &Value| t["hold_expires_at_ms"].as_u64().expect("an expiry");
    ts.pay("x-fund", "bank", "alice", "USD", 10).await;
    let a = ts.post("/v1/transfers", &hold("x-1", 60_000)).await;
    assert_eq!(a.body["state"], "held", "{}", a.text);
    let first = expiry(&a.body);
    let a = extend("x-1", json!({"expires_at_ms": first + 60_000})).await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("held")),
        "{}",
        a.text
    );
    assert_eq!(expiry(&a.body), first + 60_000);
    let a = extend("x-1", json!({"expires_at_ms": first + 60_000})).await;
    assert_eq!(
        (a.status, expiry(&a.body)),
        (200, first + 60_000),
        "the same again: {}",
        a.text
    );
    for (body, status, code, field, what) in [
        (
            json!({"expires_at_ms": first + 1_000}),
            400,
            "hold_expiry_out_of_range",
            "expires_at_ms",
            "earlier",
        ),
        (
            json!({"expires_at_ms": 1}),
            400,
            "hold_expiry_out_of_range",
            "expires_at_ms",
            "in the past",
        ),
        (
            json!({"ttl_ms": 0}),
            400,
            "hold_expiry_out_of_range",
            "ttl_ms",
            "now",
        ),
        (
            json!({"ttl_ms": 31_u64 * 24 * 3_600_000}),
            400,
            "hold_expiry_out_of_range",
            "ttl_ms",
            "past 30 days",
        ),
        (json!({}), 400, "missing_field", "expires_at_ms", "neither"),
        (
            json!({"ttl_ms": 1, "expires_at_ms": 1}),
            400,
            "invalid_value",
            "ttl_ms",
            "both",
        ),
        (
            json!({"ttl_ms": -5}),
            400,
            "invalid_value",
            "ttl_ms",
            "negative",
        ),
        (
            json!({"until": 5}),
            400,
            "unknown_field",
            "until",
            "unknown",
        ),
    ] {
        let a = extend("x-1", body).await;
        expect_error(&a, status, code, Some(field), what);
    }
    assert_eq!(
        expiry(&ts.transfer("x-1").await),
        first + 60_000,
        "refusals change nothing"
    );
    let a = extend("x-1", json!({"ttl_ms": 600_000})).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert!(expiry(&a.body) > first + 500_000, "{}", a.text);

    // Settled, expired, not a hold, absent.
    let a = ts.post_empty("/v1/transfers/x-1/capture").await;
    assert_eq!(a.body["state"], "done", "{}", a.text);
    let a = extend("x-1", json!({"ttl_ms": 900_000})).await;
    expect_error(&a, 409, "hold_already_captured", Some("id"), "captured");
    ts.post("/v1/transfers", &hold("x-2", 60_000)).await;
    ts.post_empty("/v1/transfers/x-2/void").await;
    let a = extend("x-2", json!({"ttl_ms": 900_000})).await;
    expect_error(&a, 409, "hold_already_voided", Some("id"), "voided");
    ts.pay("x-3", "alice", "carol", "USD", 1).await;
    let a = extend("x-3", json!({"ttl_ms": 900_000})).await;
    expect_error(&a, 409, "transfer_is_not_held", Some("id"), "a transfer");
    let a = extend("x-none", json!({"ttl_ms": 900_000})).await;
    expect_error(&a, 404, "transfer_not_found", Some("id"), "absent");
    let a = ts.post("/v1/transfers", &hold("x-4", 1_200)).await;
    assert_eq!(a.body["state"], "held", "{}", a.text);
    TokioSleeper.sleep(1_300).await;
    let a = extend("x-4", json!({"ttl_ms": 900_000})).await;
    expect_error(&a, 409, "hold_expired", Some("hold"), "expired");
}

/// The ids of every page of a history read from `first` on, following `next_before`.
/// Each transfer's timeline over `GET /v1/transfers/{id}`: every state it passed through,
/// each with its time, owner and epoch, the reason of a cancel and the refund of a link, as
/// the store's own steps wrote them (`xfer_store::timeline`).
async fn timelines(ts: &TestServer) {
    let steps = |t: &Value| -> Vec<Value> {
        let steps = t["timeline"].as_array().expect("a timeline").clone();
        assert_eq!(
            steps[0]["at_ms"], t["created_at_ms"],
            "accepted when created: {t}"
        );
        assert!(
            steps
                .windows(2)
                .all(|w| w[0]["at_ms"].as_u64() <= w[1]["at_ms"].as_u64()),
            "in order: {t}"
        );
        let last = steps.last().expect("a step");
        assert_eq!(
            (&last["state"], &last["owner"]),
            (&t["state"], &t["owner"]),
            "{t}"
        );
        steps
    };
    let states = |steps: &[Value]| -> Vec<String> {
        steps
            .iter()
            .map(|s| match s.get("refund_id") {
                Some(r) => format!("{} {}", s["state"].as_str().unwrap(), r.as_str().unwrap()),
                None => s["state"].as_str().unwrap().to_string(),
            })
            .collect()
    };
    // A hold captured, then refunded: the capture takes it over (a new epoch).
    let h1 = steps(&ts.transfer("h-1").await);
    assert_eq!(
        states(&h1),
        ["pending", "held", "applied", "done", "done r-1"],
        "{h1:?}"
    );
    assert!(
        h1[0]["owner"].is_string(),
        "claimed by its submitter: {h1:?}"
    );
    assert_eq!(h1[0]["epoch"], 1);
    assert_eq!(h1[2]["epoch"], 2, "the capturer's epoch: {h1:?}");
    assert!(h1[3]["owner"].is_null(), "finished: no owner");
    assert!(h1.iter().all(|s| s.get("reason").is_none()), "{h1:?}");
    // A hold voided: the cancel and the end carry the reason.
    let h2 = steps(&ts.transfer("h-2").await);
    assert_eq!(
        states(&h2),
        ["pending", "held", "canceling", "canceled"],
        "{h2:?}"
    );
    assert_eq!(h2[2]["reason"]["code"], "voided");
    assert_eq!(h2[3]["reason"]["code"], "voided");
    // A refund canceled, and the one that replaced its link.
    let big = steps(&ts.transfer("big").await);
    assert_eq!(
        states(&big[big.len() - 2..]),
        ["done r-big-1", "done r-big-2"],
        "{big:?}"
    );
    let r1 = steps(&ts.transfer("r-big-1").await);
    let last = r1.last().unwrap();
    assert_eq!(last["state"], "canceled", "{r1:?}");
    assert!(last["reason"]["code"].is_string(), "{r1:?}");
}

async fn history_pages(ts: &TestServer, first: &str) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut path = first.to_string();
    for _ in 0..10 {
        let page = ts.get(&path).await;
        assert_eq!(page.status, 200, "{}", page.text);
        pages.push(ids(&page.body, "transfers"));
        match page.body["next_before"].as_u64() {
            Some(before) => path = format!("{first}&before={before}"),
            None => break,
        }
    }
    pages
}

/// The complete events of a Server-Sent Events body: `(id, event, data)`; comments (keep
/// alive) skipped. A body that is not an event stream (an error's JSON) is one event with
/// only its data.
fn parse_sse(body: &str) -> Vec<(String, String, String)> {
    if body.starts_with('{') {
        return vec![(String::new(), String::new(), body.to_string())];
    }
    let mut out = Vec::new();
    let mut blocks: Vec<&str> = body.split("\n\n").collect();
    blocks.pop(); // unfinished
    for block in blocks {
        let (mut id, mut event, mut data) = (String::new(), String::new(), String::new());
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id: ").or(line.strip_prefix("id:")) {
                id = v.to_string();
            } else if let Some(v) = line.strip_prefix("event: ").or(line.strip_prefix("event:")) {
                event = v.to_string();
            } else if let Some(v) = line.strip_prefix("data: ").or(line.strip_prefix("data:")) {
                data.push_str(v);
            }
        }
        if !data.is_empty() {
            out.push((id, event, data));
        }
    }
    out
}

/// Every event of the feed, read `limit` at a time; the last cursor.
async fn event_pages(ts: &TestServer, limit: usize) -> (Vec<Value>, String) {
    let mut all = Vec::new();
    let mut path = format!("/v1/events?limit={limit}");
    loop {
        let page = ts.get(&path).await;
        assert_eq!(page.status, 200, "{}", page.text);
        let events = page.body["events"].as_array().expect("events").clone();
        let next = page.body["next"].as_str().expect("a cursor").to_string();
        assert!(events.len() <= limit, "{}", page.text);
        if events.is_empty() {
            return (all, next);
        }
        all.extend(events);
        path = format!("/v1/events?limit={limit}&after={next}");
    }
}

/// The change feed: each transfer's changes in order, the same whole or paged, with its
/// record; bad cursors refused by field. `feed`: the store keeps one (else 501).
async fn events(ts: &TestServer, feed: bool) {
    if !feed {
        let page = ts.get("/v1/events").await;
        expect_error(&page, 501, "not_supported", None, "a store without a feed");
        let (status, answer) = ts.sse("/v1/events/stream", "", 1).await;
        let error: Value = serde_json::from_str(&answer[0].2).expect("an error");
        assert_eq!(
            (status, error["code"].clone()),
            (501, json!("not_supported"))
        );
        return;
    }
    // PostgreSQL shows an event once older transactions on the server have ended.
    let mut read = event_pages(ts, 1_000).await;
    for _ in 0..200 {
        if read.0.iter().any(|e| e["id"] == "h-1/refunded/r-1") {
            break;
        }
        TokioSleeper.sleep(50).await;
        read = event_pages(ts, 1_000).await;
    }
    let (all, last) = read;
    let (paged, _) = event_pages(ts, 3).await;
    assert_eq!(all, paged, "the same whole or three at a time");
    let of = |t: &str| -> Vec<String> {
        all.iter()
            .filter(|e| e["transfer_id"] == t)
            .map(|e| e["type"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        of("h-1"),
        ["accepted", "held", "captured", "done", "refunded"]
    );
    let mut seen = BTreeSet::new();
    for e in &all {
        let id = e["id"].as_str().expect("an id");
        assert!(seen.insert(id.to_string()), "{id} twice");
        assert_eq!(e["transfer"]["id"], e["transfer_id"], "{e}");
        assert!(e["at_ms"].as_u64().is_some(), "{e}");
    }
    let after = ts.get(&format!("/v1/events?after={last}")).await;
    assert_eq!(after.body["events"], json!([]), "{}", after.text);
    assert_eq!(after.body["next"], json!(last), "{}", after.text);
    for bad in ["x", "1__2", "1.2.3", "0_0_0_0_0_0_0_0_0_0_0_0_0_0_0_0_0"] {
        let a = ts.get(&format!("/v1/events?after={bad}")).await;
        expect_error(&a, 400, "invalid_query", Some("after"), bad);
    }

    // The stream: from the start, every event, each with the cursor after it as its id;
    // resumed from one of those ids, the events after it.
    let (status, streamed) = ts.sse("/v1/events/stream", "", all.len()).await;
    assert_eq!(status, 200);
    let data_ids = |s: &[(String, String, String)]| -> Vec<Value> {
        s.iter()
            .map(|(_, _, d)| serde_json::from_str::<Value>(d).expect("JSON")["id"].clone())
            .collect()
    };
    let ids: Vec<Value> = all.iter().map(|e| e["id"].clone()).collect();
    assert_eq!(data_ids(&streamed[..all.len()]), ids, "streamed");
    for (e, (_, kind, _)) in all.iter().zip(&streamed) {
        assert_eq!(e["type"], json!(kind));
    }
    assert_eq!(
        streamed[all.len() - 1].0,
        last,
        "the last id is the last cursor"
    );
    let from = &streamed[2].0;
    let (status, resumed) = ts
        .sse(
            "/v1/events/stream",
            &format!("Last-Event-ID: {from}\r\n"),
            all.len() - 3,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(data_ids(&resumed[..all.len() - 3]), ids[3..], "resumed");
    let (status, bad) = ts.sse("/v1/events/stream", "Last-Event-ID: x\r\n", 1).await;
    let error: Value = serde_json::from_str(&bad[0].2).expect("an error");
    assert_eq!(
        (status, error["code"].clone(), error["field"].clone()),
        (400, json!("invalid_query"), json!("Last-Event-ID"))
    );

    // Retention (as the sweeper runs it, here with every event old enough): a reader from
    // before what was dropped is told, on the field it sent; one at the end reads on. (The
    // embedded store drops only what a checkpoint saved.)
    let service = ts.server.as_ref().expect("running").service();
    let mut dropped = 0;
    for shard in service.cluster().shards() {
        dropped += shard
            .trim_events(xfer_core::Timestamp(u64::MAX / 2), 100_000)
            .await
            .expect("trim");
    }
    if dropped > 0 {
        let a = ts.get("/v1/events").await;
        expect_error(&a, 410, "cursor_expired", Some("after"), "from the start");
        let (status, answer) = ts.sse("/v1/events/stream", "", 1).await;
        let error: Value = serde_json::from_str(&answer[0].2).expect("an error");
        assert_eq!(
            (status, error["code"].clone()),
            (410, json!("cursor_expired"))
        );
        let a = ts.get(&format!("/v1/events?after={last}")).await;
        assert_eq!(
            (a.status, a.body["events"].clone()),
            (200, json!([])),
            "{}",
            a.text
        );
    }
}

async fn history(ts: &TestServer) {
    ts.create_account("hist", "USD", json!(0)).await;
    for i in 1..=5 {
        ts.pay(&format!("hist-{i}"), "bank", "hist", "USD", i).await;
    }
    let pages = history_pages(ts, "/v1/accounts/hist/transfers?limit=2").await;
    assert_eq!(
        pages,
        vec![
            vec!["hist-5", "hist-4"],
            vec!["hist-3", "hist-2"],
            vec!["hist-1"],
        ],
        "newest first, 2 per page"
    );
    let page = ts.get("/v1/accounts/hist/transfers").await;
    assert_eq!(page.body["transfers"][0]["state"], "done");
    assert_eq!(page.body["transfers"][0]["postings"][0]["amount"], 5);
    // Every account a transfer names lists it, whatever its end: here a transfer canceled
    // because one of its two debited accounts could not pay.
    ts.create_account("hist-empty", "USD", json!(0)).await;
    let both = json!({"id": "hist-6", "postings": [
        posting("hist", "bank", "USD", json!(10)),
        posting("hist-empty", "bank", "USD", json!(5)),
    ]});
    let a = ts.post("/v1/transfers", &both).await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("canceled")),
        "{}",
        a.text
    );
    for account in ["hist", "hist-empty", "bank"] {
        for query in ["limit=1", "state=canceled"] {
            let page = ts
                .get(&format!("/v1/accounts/{account}/transfers?{query}"))
                .await;
            let got = ids(&page.body, "transfers");
            assert_eq!(got, vec!["hist-6"], "{account} {query}: {}", page.text);
        }
    }
    // A state filter pages as the unfiltered history does, newest first.
    let pages = history_pages(ts, "/v1/accounts/hist/transfers?limit=2&state=done").await;
    assert_eq!(
        pages.concat(),
        vec!["hist-5", "hist-4", "hist-3", "hist-2", "hist-1"],
        "done only, newest first: {pages:?}"
    );
    let a = ts.get("/v1/accounts/hist/transfers?state=finished").await;
    expect_error(
        &a,
        400,
        "invalid_query",
        Some("state"),
        "history state=finished",
    );
    let a = ts.get("/v1/accounts/hist/transfers?after=x").await;
    expect_error(&a, 400, "invalid_query", Some("after"), "history after=");
    let a = ts.get("/v1/accounts/nobody/transfers").await;
    expect_error(
        &a,
        404,
        "account_not_found",
        Some("id"),
        "history of nobody",
    );
}

/// `GET /v1/stats`: the answers counted, the audit's verdict, every shard reachable.
async fn stats(ts: &TestServer, feed: bool) {
    let a = ts.get("/v1/stats").await;
    assert_eq!(a.status, 200, "{}", a.text);
    let s = &a.body;
    assert!(s["answered"]["done"].as_u64().unwrap() > 0, "{}", a.text);
    assert!(
        s["answered"]["canceled"].as_u64().unwrap() > 0,
        "{}",
        a.text
    );
    assert!(s["latency_count"].as_u64().unwrap() > 0, "{}", a.text);
    assert!(
        s["latency_sum_seconds"].as_f64().unwrap() > 0.0,
        "{}",
        a.text
    );
    assert_eq!(s["clean"], true, "{}", a.text);
    assert!(s["audit"]["assets"].as_array().is_some(), "{}", a.text);
    let shards = s["shards"].as_array().expect("shards");
    assert_eq!(shards.len(), 4, "{}", a.text);
    for sh in shards {
        assert_eq!(sh["reachable"], true, "{sh}");
        assert!(sh["round_trip_ms"].as_f64().is_some(), "{sh}");
    }
    if feed {
        // ls-7 at least, canceled a moment ago.
        assert!(s["canceled_last_hour"].as_u64().unwrap() >= 1, "{}", a.text);
    } else {
        assert_eq!(s["canceled_last_hour"], Value::Null, "{}", a.text);
    }
    let a = ts.get("/v1/stats?audit=false").await;
    expect_error(&a, 400, "invalid_query", Some("audit"), "stats?audit");
}

/// Every page of the transfer list from `first` on, following `next_before` (appended as
/// `before`), each page's ids.
async fn list_pages(ts: &TestServer, first: &str) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut path = first.to_string();
    for _ in 0..50 {
        let page = ts.get(&path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.text);
        pages.push(ids(&page.body, "transfers"));
        match page.body["next_before"].as_str() {
            Some(next) => path = format!("{first}&before={next}"),
            None => return pages,
        }
    }
    panic!("{first}: more than 50 pages");
}

/// `GET /v1/transfers`: newest first, every filter, cursor pages, bad queries by field; on a
/// store without a change feed, only by account.
async fn listing(ts: &TestServer, feed: bool) {
    ts.create_account("ls-a", "USD", json!(0)).await;
    ts.create_account("ls-b", "USD", json!(0)).await;
    let mut created = Vec::new();
    for i in 1..=6 {
        let to = if i % 3 == 0 { "ls-b" } else { "ls-a" };
        let body = json!({"id": format!("ls-{i}"),
            "postings": [posting("bank", to, "USD", json!(i))],
            "metadata": format!("{{\"order\":\"o-{}\",\"n\":{i}}}", i % 2)});
        let a = ts.post("/v1/transfers", &body).await;
        assert_eq!(a.status, 200, "{}", a.text);
        created.push(a.body["created_at_ms"].as_u64().expect("created_at_ms"));
        // Apart in time: the list is newest first by when each was accepted.
        std::thread::sleep(std::time::Duration::from_millis(3));
    }
    // ls-a has nothing: canceled.
    let body = json!({"id": "ls-7", "postings": [posting("ls-b", "ls-a", "USD", json!(100))]});
    let a = ts.post("/v1/transfers", &body).await;
    assert_eq!(a.body["state"], "canceled", "{}", a.text);
    let newest_first: Vec<String> = (1..=7).rev().map(|i| format!("ls-{i}")).collect();

    // By account (its history): on every store.
    let pages = list_pages(ts, "/v1/transfers?account=ls-b&limit=2").await;
    assert_eq!(
        pages,
        [vec!["ls-7", "ls-6"], vec!["ls-3"]],
        "ls-b's, 2 a page"
    );
    let pages = list_pages(
        ts,
        "/v1/transfers?account=ls-a&state=done&metadata=order=o-1",
    )
    .await;
    assert_eq!(pages.concat(), ["ls-5", "ls-1"], "filters over an account");

    if !feed {
        let a = ts.get("/v1/transfers").await;
        expect_error(&a, 501, "not_supported", None, "a list without a feed");
        return;
    }
    let pages = list_pages(ts, "/v1/transfers?id_prefix=ls-&limit=3").await;
    assert!(pages.iter().all(|p| p.len() <= 3), "{pages:?}");
    assert_eq!(
        pages.concat(),
        newest_first,
        "newest first, 3 a page: {pages:?}"
    );
    let page = ts.get("/v1/transfers?limit=1000").await;
    let all = ids(&page.body, "transfers");
    let mine: Vec<&String> = all.iter().filter(|id| id.starts_with("ls-")).collect();
    assert_eq!(mine, newest_first.iter().collect::<Vec<_>>(), "unfiltered");
    assert_eq!(all[0], "ls-7", "the newest first: {all:?}");
    for (query, want) in [
        ("state=canceled", vec!["ls-7"]),
        ("metadata=order=o-0", vec!["ls-6", "ls-4", "ls-2"]),
        ("metadata=n=5", vec!["ls-5"]),
        (
            "asset=USD&state=done",
            vec!["ls-6", "ls-5", "ls-4", "ls-3", "ls-2", "ls-1"],
        ),
        ("asset=EUR", vec![]),
    ] {
        let pages = list_pages(ts, &format!("/v1/transfers?id_prefix=ls-&{query}&limit=2")).await;
        assert_eq!(pages.concat(), want, "{query}: {pages:?}");
    }
    let pages = list_pages(ts, "/v1/transfers?id_prefix=ls-6").await;
    assert_eq!(pages.concat(), ["ls-6"], "id_prefix=ls-6");
    let window = format!(
        "/v1/transfers?created_since_ms={}&created_before_ms={}",
        created[3], created[5]
    );
    assert_eq!(
        list_pages(ts, &window).await.concat(),
        ["ls-5", "ls-4"],
        "{window}"
    );

    for (query, field) in [
        ("state=finished", "state"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("before=x", "before"),
        ("before=1", "before"),
        ("metadata=order", "metadata"),
        ("metadata==x", "metadata"),
        ("id_prefix=", "id_prefix"),
        (
            "created_since_ms=5&created_before_ms=5",
            "created_before_ms",
        ),
        ("created_since_ms=soon", "created_since_ms"),
        ("colour=red", "colour"),
    ] {
        let a = ts.get(&format!("/v1/transfers?{query}")).await;
        expect_error(&a, 400, "invalid_query", Some(field), query);
    }
    // An id or asset is checked as everywhere else, named by its parameter.
    for (query, field) in [("account=", "account"), ("asset=", "asset")] {
        let a = ts.get(&format!("/v1/transfers?{query}")).await;
        assert_eq!(
            (a.status, a.body["field"].as_str()),
            (400, Some(field)),
            "{query}: {}",
            a.text
        );
    }
    let a = ts.get("/v1/transfers?account=ls-b&before=0_0").await;
    expect_error(
        &a,
        400,
        "invalid_query",
        Some("before"),
        "a feed cursor by account",
    );
}

/// The webhook endpoints' routes (`webhooks.rs` delivers to real receivers).
async fn webhooks(ts: &TestServer, feed: bool) {
    let a = ts
        .post(
            "/v1/webhooks",
            &json!({"url": "http://127.0.0.1:9/hook", "types": ["done"]}),
        )
        .await;
    let id = if feed {
        assert_eq!(a.status, 201, "{}", a.text);
        a.body["id"].as_str().expect("an id").to_string()
    } else {
        expect_error(&a, 501, "not_supported", None, "a store without a feed");
        "wh_none".to_string()
    };
    let list = ts.get("/v1/webhooks").await;
    assert_eq!(list.status, 200, "{}", list.text);
    let listed = list.body["webhooks"].as_array().expect("webhooks");
    assert_eq!(listed.len(), usize::from(feed), "{}", list.text);
    assert!(listed.iter().all(|w| w.get("secret").is_none()));
    let one = ts.get(&format!("/v1/webhooks/{id}")).await;
    let letters = ts.get(&format!("/v1/webhooks/{id}/dead_letters")).await;
    let again = ts
        .post(
            &format!("/v1/webhooks/{id}/dead_letters/t-1%2Fdone/redeliver"),
            &json!({}),
        )
        .await;
    let removed = ts
        .send(Method::DELETE, &format!("/v1/webhooks/{id}"), None)
        .await;
    if !feed {
        for a in [one, letters, again, removed] {
            expect_error(&a, 404, "webhook_not_found", Some("id"), "no webhook");
        }
        return;
    }
    assert_eq!(one.body["types"], json!(["done"]), "{}", one.text);
    assert_eq!(one.body["status"]["dead_letters"], 0, "{}", one.text);
    assert_eq!(
        (letters.status, &letters.body["dead_letters"]),
        (200, &json!([])),
        "{}",
        letters.text
    );
    expect_error(
        &again,
        404,
        "dead_letter_not_found",
        Some("event_id"),
        "no dead letter",
    );
    assert_eq!(removed.status, 200, "{}", removed.text);
    let gone = ts.get(&format!("/v1/webhooks/{id}")).await;
    expect_error(&gone, 404, "webhook_not_found", Some("id"), "removed");
}

async fn admin(ts: &TestServer) {
    let a = ts.get("/v1/admin/stuck").await;
    assert_eq!(
        (a.status, &a.body),
        (200, &json!({"stuck": []})),
        "{}",
        a.text
    );

    let a = ts.get("/v1/admin/canceled").await;
    assert_eq!(a.status, 200, "{}", a.text);
    let canceled: Vec<(String, String)> = a.body["transfers"]
        .as_array()
        .expect("transfers")
        .iter()
        .map(|t| {
            assert_eq!(t["state"], "canceled", "{t}");
            (
                t["id"].as_str().unwrap().to_string(),
                t["reason"]["code"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("b-4", "exceeds_available"),
        ("h-2", "voided"),
        ("hist-6", "exceeds_available"),
        ("past-bound", "exceeds_available"),
        ("r-big-1", "exceeds_available"),
    ];
    assert_eq!(
        canceled,
        want.map(|(i, c)| (i.to_string(), c.to_string())),
        "{}",
        a.text
    );
    assert_eq!(a.body["next_after"], Value::Null);
    let a = ts.get("/v1/admin/canceled?limit=1").await;
    assert_eq!(ids(&a.body, "transfers"), ["b-4"]);
    let after = a.body["next_after"]
        .as_str()
        .expect("a next page")
        .to_string();
    let a = ts
        .get(&format!("/v1/admin/canceled?limit=1&after={after}"))
        .await;
    assert_eq!(ids(&a.body, "transfers"), ["h-2"]);

    let a = ts.get("/v1/audit").await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.body["clean"], true, "{}", a.text);
    assert_eq!(a.body["leaks"], json!([]));
    assert_eq!(a.body["open_intents"], 0);
    // Every balance replayed from the transfers, on every store (once the transfers are
    // older than the replay's allowance for clocks ahead, so that every account counts).
    TokioSleeper
        .sleep(xfer_engine::replay::CLOCK_SLACK_MS + 100)
        .await;
    let r = ts.get("/v1/audit?replay=true&grace_ms=3600000").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["clean"], true, "{}", r.text);
    assert_eq!(r.body["replay"]["differences_total"], 0, "{}", r.text);
    assert!(r.body["replay"]["done"].as_u64() > Some(0), "{}", r.text);
    assert_eq!(r.body["replay"]["accounts_busy"], 0, "{}", r.text);
    for (q, field) in [
        ("replay=maybe", "replay"),
        ("grace_ms=5", "grace_ms"),
        ("replay=true&grace_ms=-1", "grace_ms"),
        ("replay=true&colour=red", "colour"),
    ] {
        let bad = ts.get(&format!("/v1/audit?{q}")).await;
        assert_eq!(
            (bad.status, bad.code(), bad.body["field"].as_str()),
            (400, "invalid_query", Some(field)),
            "{q}: {}",
            bad.text
        );
    }
    let assets = a.body["assets"].as_array().expect("assets");
    let usd = assets.iter().find(|t| t["asset"] == "USD").expect("USD");
    assert_eq!(usd["net"], 0, "{usd}");
    assert_eq!(usd["balance"], 0, "{usd}");
    assert_eq!(usd["conserved"], true, "{usd}");
    assert_eq!(usd["accounts"], 8, "{usd}");
    assert_eq!(
        (usd["reserved"].clone(), usd["incoming"].clone()),
        (json!(0), json!(0))
    );
    // The issuer is exactly what everybody else holds.
    let mut held = 0;
    for id in ["alice", "bob", "carol", "dan", "zed", "hist"] {
        held += ts.balance(id).await;
    }
    assert_eq!(ts.balance("bank").await, -held);
}

async fn metrics(ts: &TestServer) -> String {
    let a = ts.get("/metrics").await;
    assert_eq!(a.status, 200, "{}", a.text);
    for family in [
        "xfer_transfers_total",
        "xfer_store_round_trips_total",
        "xfer_http_requests_total",
        "xfer_transfer_duration_seconds_bucket",
        "xfer_transfers_in_flight",
        "xfer_transfers_escalated",
    ] {
        assert!(a.text.contains(family), "no {family} in\n{}", a.text);
    }
    assert!(
        a.text.contains("xfer_transfers_total{outcome=\"done\"}"),
        "{}",
        a.text
    );
    a.text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_is_served_documented_and_exercised() {
    every_route(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_is_served_documented_and_exercised_on_postgres() {
    every_route(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_is_served_documented_and_exercised_on_mysql() {
    every_route(Backend::Mysql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_is_served_documented_and_exercised_on_mongodb() {
    every_route(Backend::Mongodb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_is_served_documented_and_exercised_on_redis() {
    every_route(Backend::Redis).await;
}

async fn every_route(backend: Backend) {
    let ts = TestServer::start(backend).await;
    health_and_docs(&ts).await;
    accounts(&ts).await;
    lower_bounds_and_close(&ts).await;
    transfers(&ts).await;
    holds_and_refunds(&ts).await;
    history(&ts).await;
    let feed = matches!(
        backend,
        Backend::Embedded | Backend::Postgres | Backend::Redis
    );
    events(&ts, feed).await;
    admin(&ts).await;
    listing(&ts, feed).await;
    stats(&ts, feed).await;
    webhooks(&ts, feed).await;
    extend_holds(&ts).await;
    assets(&ts).await;
    account_metadata(&ts).await;
    metrics(&ts).await;
    // Twice: a request is counted once answered, so the second shows the first.
    let text = metrics(&ts).await;

    let every: BTreeSet<(&str, &str)> = ROUTES.iter().map(|r| (r.method, r.path)).collect();
    assert_eq!(ts.routes_sent(), every, "the requests sent cover ROUTES");
    for r in ROUTES {
        let needle = format!("route=\"{}\",method=\"{}\"", r.path, r.method);
        assert!(
            text.lines()
                .any(|l| l.starts_with("xfer_http_requests_total{") && l.contains(&needle)),
            "the server counted no {} {}",
            r.method,
            r.path
        );
    }
    // Last: its transfers would change what the listings above expect.
    partial_refunds(&ts).await;
    partial_captures(&ts).await;
    escalations(&ts).await;
    ts.shutdown().await;
}

/// A transfer escalated by a sweeper (the mark written here as a sweeper writes it, on a
/// record due at once) is listed stuck with its last error, shown on the transfer, left
/// alone by the sweepers, and a re-drive clears the mark and finishes it.
async fn escalations(ts: &TestServer) {
    let svc = ts.server.as_ref().expect("in process").service();
    let now = svc.now();
    let spec = xfer_core::TransferSpec {
        id: xfer_core::TransferId::new("esc-1").unwrap(),
        postings: vec![xfer_core::Posting {
            from: xfer_core::AccountId::new("nobody-1").unwrap(),
            to: xfer_core::AccountId::new("nobody-2").unwrap(),
            asset: xfer_core::AssetCode::new("USD", "asset").unwrap(),
            amount: xfer_core::Amount::new(5, "amount").unwrap(),
        }]
        .into(),
        metadata: String::new(),
        kind: xfer_core::TransferKind::Transfer,
        refund_of: None,
        timeout_ms: 5_000,
    };
    let id = spec.id.clone();
    let mut record = xfer_core::TransferRecord::accept(spec, now.minus_ms(60_000), 0);
    // Due only once the mark is on it: a store that writes the batch's two steps one after
    // the other (MongoDB) would otherwise let a sweep take it over between them.
    record.lease_until = now.plus_ms(300);
    let mark = xfer_core::Escalation::new(3, "protocol violation: \"post\" answered é", now);
    let ops = vec![
        xfer_store::Op::Transfer(id.clone(), xfer_store::TransferOp::Insert(record.into())),
        xfer_store::Op::Transfer(
            id.clone(),
            xfer_store::TransferOp::Escalate {
                escalation: mark.clone(),
            },
        ),
    ];
    svc.executor().execute_ops(ops).await.expect("written");
    // Sweepers leave it: a second of sweeps after it fell due it is as it was.
    TokioSleeper.sleep(1_300).await;
    let a = ts.get("/v1/transfers/esc-1").await;
    assert_eq!(
        (a.body["state"].clone(), a.body["escalation"].clone()),
        (
            json!("initial"),
            json!({"attempts": 3, "error": mark.error, "at_ms": now.as_ms()})
        ),
        "{}",
        a.text
    );
    let a = ts.get("/v1/admin/stuck").await;
    let stuck = a.body["stuck"].as_array().expect("stuck");
    let listed: Vec<&Value> = stuck
        .iter()
        .filter(|s| s["transfer"]["id"] == "esc-1")
        .collect();
    assert_eq!(listed.len(), 1, "{}", a.text);
    let why = listed[0]["why"].as_str().expect("why");
    assert!(
        why.contains("escalated") && why.contains("after 3 failed") && why.contains(&mark.error),
        "{why}"
    );
    assert_eq!(listed[0]["transfer"]["escalation"]["attempts"], 3);
    let text = ts.get("/metrics").await.text;
    assert!(
        text.lines().any(|l| l == "xfer_transfers_escalated 1"),
        "{text}"
    );
    // Fixed (here: nothing to fix, its accounts do not exist): a re-drive clears the mark.
    let a = ts.post_empty("/v1/transfers/esc-1/redrive").await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.body["state"], "canceled", "{}", a.text);
    assert!(a.body.get("escalation").is_none(), "{}", a.text);
    let a = ts.get("/v1/admin/stuck").await;
    assert!(!a.text.contains("esc-1"), "no longer stuck: {}", a.text);
}

// ---------------------------------------------------------------------------------------
// Idempotency.
// ---------------------------------------------------------------------------------------

/// An open event stream shows a transfer made after it opened, and ends when the server
/// stops, which it does not hold up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_event_stream_follows_new_transfers_and_ends_when_the_server_stops() {
    let mut ts = TestServer::start(Backend::Embedded).await;
    let addr = ts.server.as_ref().expect("running").addr();
    let reader = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(addr).expect("connect");
        conn.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .expect("a timeout");
        let request = format!("GET /v1/events/stream HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        conn.write_all(request.as_bytes()).expect("send");
        let mut got = Vec::new();
        // Until the server closes the stream (or the timeout fails the read).
        conn.read_to_end(&mut got)
            .map(|_| String::from_utf8_lossy(&got).to_string())
    });
    ts.create_account("sse-a", "USD", json!("unbounded")).await;
    ts.create_account("sse-b", "USD", json!(0)).await;
    let a = ts
        .post(
            "/v1/transfers",
            &transfer("sse-1", "sse-a", "sse-b", "USD", json!(5)),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    // Give the stream a look at the new events before stopping.
    TokioSleeper.sleep(600).await;
    let server = ts.server.take().expect("running");
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(10), server.shutdown());
    stopped
        .await
        .expect("the server stops with a stream open")
        .expect("a clean shutdown");
    let body = reader.await.expect("the reader").expect("the stream ends");
    let ids: Vec<String> = parse_sse(body.split_once("\r\n\r\n").expect("a response").1)
        .iter()
        .map(|(_, _, d)| serde_json::from_str::<Value>(d).expect("JSON")["id"].to_string())
        .collect();
    assert_eq!(ids, ["\"sse-1/accepted\"", "\"sse-1/done\""], "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resubmitting_an_id_is_idempotent_and_a_changed_body_conflicts() {
    idempotency(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resubmitting_an_id_is_idempotent_and_a_changed_body_conflicts_on_postgres() {
    idempotency(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resubmitting_an_id_is_idempotent_and_a_changed_body_conflicts_on_mysql() {
    idempotency(Backend::Mysql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resubmitting_an_id_is_idempotent_and_a_changed_body_conflicts_on_mongodb() {
    idempotency(Backend::Mongodb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resubmitting_an_id_is_idempotent_and_a_changed_body_conflicts_on_redis() {
    idempotency(Backend::Redis).await;
}

async fn idempotency(backend: Backend) {
    let ts = TestServer::start(backend).await;
    ts.create_account("bank", "USD", json!("unbounded")).await;
    ts.create_account("alice", "USD", json!(0)).await;
    let body = transfer("once", "bank", "alice", "USD", json!(40));
    let first = ts.post("/v1/transfers", &body).await;
    assert_eq!(
        (first.status, first.body["state"].clone()),
        (200, json!("done")),
        "{}",
        first.text
    );
    let after_first = ts.snapshot(&["bank", "alice"]).await;

    for wait in ["", "?wait=false"] {
        let again = ts.post(&format!("/v1/transfers{wait}"), &body).await;
        assert_eq!(again.status, 200, "{}", again.text);
        assert_eq!(
            again.body, first.body,
            "same id, same body: the same answer"
        );
        assert_eq!(again.body["created_at_ms"], first.body["created_at_ms"]);
    }
    let batch = ts
        .post("/v1/transfers/batch", &json!({"transfers": [body]}))
        .await;
    assert_eq!(batch.body["results"][0]["status"], 200, "{}", batch.text);
    assert_eq!(batch.body["results"][0]["transfer"], first.body);
    assert_eq!(ts.balance("alice").await, 40, "moved once");
    assert_eq!(ts.snapshot(&["bank", "alice"]).await, after_first);

    for changed in [
        transfer("once", "bank", "alice", "USD", json!(41)),
        json!({"id": "once", "postings": [posting("bank", "alice", "USD", json!(40))],
               "metadata": "other"}),
    ] {
        for wait in ["", "?wait=false"] {
            let a = ts.post(&format!("/v1/transfers{wait}"), &changed).await;
            expect_error(
                &a,
                409,
                "id_exists_with_different_body",
                Some("id"),
                &format!("changed body {wait}"),
            );
        }
    }
    assert_eq!(
        ts.transfer("once").await,
        first.body,
        "the record is unchanged"
    );
    assert_eq!(ts.snapshot(&["bank", "alice"]).await, after_first);
    ts.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Bad input.
// ---------------------------------------------------------------------------------------

/// One bad request and what it must be answered.
struct Bad {
    name: &'static str,
    method: Method,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    code: &'static str,
    field: Option<&'static str>,
    /// A transfer id that must not exist afterwards.
    absent: Option<&'static str>,
}

/// A bad `POST /v1/transfers` with a JSON `body` whose transfer id is `id`.
fn bad_transfer(
    name: &'static str,
    id: &'static str,
    body: Value,
    status: u16,
    code: &'static str,
    field: Option<&'static str>,
) -> Bad {
    bad_raw(name, id, body.to_string(), status, code, field)
}

/// As [`bad_transfer`] with the body as text (for what `json!` cannot write).
fn bad_raw(
    name: &'static str,
    id: &'static str,
    body: String,
    status: u16,
    code: &'static str,
    field: Option<&'static str>,
) -> Bad {
    Bad {
        name,
        method: Method::POST,
        path: "/v1/transfers".to_string(),
        content_type: Some("application/json"),
        body: body.into_bytes(),
        status,
        code,
        field,
        absent: is_valid_id(id).then_some(id),
    }
}

/// 1 to 64 of `[A-Za-z0-9_:.-]`: an id a transfer could have been stored under.
fn is_valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_:.-".contains(&b))
}

fn bad_cases() -> Vec<Bad> {
    let p = |amount: Value| json!([posting("alice", "bob", "USD", amount)]);
    let one = |id: &'static str, amount: Value| json!({"id": id, "postings": p(amount)});
    let raw_amount = |id: &str, amount: &str| {
        format!(
            r#"{{"id": "{id}", "postings": [{{"from": "alice", "to": "bob", "asset": "USD", "amount": {amount}}}]}}"#
        )
    };
    let long_id: &'static str = "x".repeat(65).leak();
    let many: Vec<Value> = (0..65)
        .map(|_| posting("alice", "bob", "USD", json!(1)))
        .collect();
    let mut cases = vec![
        bad_raw(
            "malformed json",
            "bad-json",
            r#"{"id": "bad-json", "postings": ["#.into(),
            400,
            "malformed_json",
            Some("postings"),
        ),
        bad_raw(
            "not json at all",
            "",
            "hello".into(),
            400,
            "malformed_json",
            None,
        ),
        bad_transfer(
            "amount as a list",
            "bad-type",
            one("bad-type", json!(["5"])),
            400,
            "wrong_type",
            Some("postings[0].amount"),
        ),
        bad_transfer(
            "a decimal finer than the asset's scale",
            "bad-decimal",
            one("bad-decimal", json!("5.001")),
            400,
            "amount_has_too_many_decimals",
            Some("postings[0].amount"),
        ),
        bad_transfer(
            "postings not a list",
            "bad-type2",
            json!({"id": "bad-type2", "postings": {}}),
            400,
            "wrong_type",
            Some("postings"),
        ),
        bad_transfer(
            "missing to",
            "bad-missing",
            json!({"id": "bad-missing", "postings": [{"from": "alice", "asset": "USD", "amount": 1}]}),
            400,
            "missing_field",
            Some("postings[0].to"),
        ),
        bad_transfer(
            "missing postings",
            "bad-missing2",
            json!({"id": "bad-missing2"}),
            400,
            "missing_field",
            Some("postings"),
        ),
        bad_transfer(
            "unknown field",
            "bad-unknown",
            json!({"id": "bad-unknown", "postings": p(json!(1)), "colour": "red"}),
            400,
            "unknown_field",
            Some("colour"),
        ),
        bad_transfer(
            "zero amount",
            "bad-zero",
            one("bad-zero", json!(0)),
            400,
            "amount_must_be_positive",
            Some("postings[0].amount"),
        ),
        bad_transfer(
            "negative amount",
            "bad-neg",
            one("bad-neg", json!(-5)),
            400,
            "amount_must_be_positive",
            Some("postings[0].amount"),
        ),
        bad_raw(
            "amount 2^63",
            "bad-big",
            raw_amount("bad-big", "9223372036854775808"),
            400,
            "amount_exceeds_maximum",
            Some("postings[0].amount"),
        ),
        bad_raw(
            "amount 10^30",
            "bad-huge",
            raw_amount("bad-huge", "1000000000000000000000000000000"),
            400,
            "amount_exceeds_maximum",
            Some("postings[0].amount"),
        ),
        bad_raw(
            "amount 1e30",
            "bad-exp",
            raw_amount("bad-exp", "1e30"),
            400,
            "amount_exceeds_maximum",
            Some("postings[0].amount"),
        ),
        bad_raw(
            "fractional amount",
            "bad-frac",
            raw_amount("bad-frac", "1.5"),
            400,
            "amount_is_not_a_number",
            Some("postings[0].amount"),
        ),
        bad_transfer(
            "same account both sides",
            "bad-same",
            json!({"id": "bad-same", "postings": [posting("alice", "alice", "USD", json!(1))]}),
            400,
            "accounts_must_be_different",
            Some("postings[0].to"),
        ),
        bad_transfer(
            "unknown account",
            "bad-acct",
            json!({"id": "bad-acct", "postings": [posting("alice", "nobody", "USD", json!(1))]}),
            404,
            "account_not_found",
            Some("postings[0].to"),
        ),
        bad_transfer(
            "unknown debit account",
            "bad-acct2",
            json!({"id": "bad-acct2", "postings": [posting("nobody", "alice", "USD", json!(1))]}),
            404,
            "account_not_found",
            Some("postings[0].from"),
        ),
        bad_transfer(
            "asset not held",
            "bad-asset",
            json!({"id": "bad-asset", "postings": [posting("alice", "bob", "EUR", json!(1))]}),
            422,
            "asset_mismatch",
            Some("postings[0].from"),
        ),
        bad_transfer(
            "unknown asset",
            "bad-asset2",
            json!({"id": "bad-asset2", "postings": [posting("alice", "bob", "XYZ", json!(1))]}),
            422,
            "asset_mismatch",
            Some("postings[0].from"),
        ),
        bad_transfer(
            "credit of another asset",
            "bad-asset3",
            json!({"id": "bad-asset3", "postings": [posting("alice", "euro", "USD", json!(1))]}),
            422,
            "asset_mismatch",
            Some("postings[0].to"),
        ),
        bad_transfer(
            "invalid asset code",
            "bad-code",
            json!({"id": "bad-code", "postings": [posting("alice", "bob", "usd", json!(1))]}),
            400,
            "asset_code_is_invalid",
            Some("postings[0].asset"),
        ),
        bad_transfer(
            "one account, two assets",
            "bad-two",
            json!({"id": "bad-two", "postings": [posting("alice", "bob", "USD", json!(1)), posting("alice", "euro", "EUR", json!(1))]}),
            400,
            "account_used_with_two_assets",
            Some("postings[1].from"),
        ),
        bad_transfer(
            "65 postings",
            "bad-many",
            json!({"id": "bad-many", "postings": many}),
            400,
            "too_many_postings",
            Some("postings"),
        ),
        bad_transfer(
            "no postings",
            "bad-empty",
            json!({"id": "bad-empty", "postings": []}),
            400,
            "postings_must_not_be_empty",
            Some("postings"),
        ),
        bad_transfer(
            "metadata too large",
            "bad-meta",
            json!({"id": "bad-meta", "postings": p(json!(1)), "metadata": "m".repeat(2049)}),
            400,
            "metadata_too_large",
            Some("metadata"),
        ),
        bad_transfer(
            "timeout 0",
            "bad-timeout",
            json!({"id": "bad-timeout", "postings": p(json!(1)), "timeout_ms": 0}),
            400,
            "timeout_out_of_range",
            Some("timeout_ms"),
        ),
        bad_transfer(
            "hold shorter than its timeout",
            "bad-hold",
            json!({"id": "bad-hold", "postings": p(json!(1)), "timeout_ms": 5000, "hold": {"ttl_ms": 5000}}),
            400,
            "hold_expiry_out_of_range",
            Some("hold.ttl_ms"),
        ),
        bad_transfer(
            "body too large",
            "bad-size",
            json!({"id": "bad-size", "postings": p(json!(1)), "metadata": "m".repeat(70_000)}),
            413,
            "body_too_large",
            None,
        ),
        bad_transfer(
            "id too long",
            long_id,
            one(long_id, json!(1)),
            400,
            "id_too_long",
            Some("id"),
        ),
        bad_transfer(
            "empty id",
            "",
            one("", json!(1)),
            400,
            "id_must_not_be_empty",
            Some("id"),
        ),
        bad_transfer(
            "id with a space",
            "bad id",
            one("bad id", json!(1)),
            400,
            "id_has_invalid_character",
            Some("id"),
        ),
        bad_transfer(
            "id with a slash",
            "bad/id",
            one("bad/id", json!(1)),
            400,
            "id_has_invalid_character",
            Some("id"),
        ),
        bad_transfer(
            "id as a number",
            "",
            json!({"id": 7, "postings": p(json!(1))}),
            400,
            "wrong_type",
            Some("id"),
        ),
    ];
    cases.push(Bad {
        content_type: Some("text/plain"),
        ..bad_transfer(
            "wrong content type",
            "bad-ct",
            one("bad-ct", json!(1)),
            415,
            "unsupported_media_type",
            Some("content-type"),
        )
    });
    cases.push(Bad {
        path: "/v1/transfers?wait=maybe".into(),
        ..bad_transfer(
            "wait=maybe",
            "bad-query",
            one("bad-query", json!(1)),
            400,
            "invalid_query",
            Some("wait"),
        )
    });
    cases.push(Bad {
        path: "/v1/transfers?colour=red".into(),
        ..bad_transfer(
            "unknown query parameter",
            "bad-query2",
            one("bad-query2", json!(1)),
            400,
            "invalid_query",
            Some("colour"),
        )
    });
    cases.push(Bad {
        path: "/v1/transfer".into(),
        ..bad_transfer(
            "unknown route",
            "bad-route",
            one("bad-route", json!(1)),
            404,
            "route_not_found",
            None,
        )
    });
    cases.push(Bad {
        method: Method::DELETE,
        ..bad_transfer(
            "wrong method",
            "bad-method",
            one("bad-method", json!(1)),
            405,
            "method_not_allowed",
            None,
        )
    });
    cases.push(Bad {
        path: "/v1/transfers/batch".into(),
        ..bad_transfer(
            "batch item not a transfer",
            "bad-batch",
            json!({"transfers": [{"id": "bad-batch"}]}),
            400,
            "missing_field",
            Some("transfers[0].postings"),
        )
    });
    // Whatever follows the JSON value but whitespace is refused, never ignored.
    let whole = one("bad-trailing", json!(1)).to_string();
    cases.extend([
        bad_raw(
            "text after the body",
            "bad-trailing",
            format!("{whole} xyz"),
            400,
            "malformed_json",
            None,
        ),
        bad_raw(
            "a second object after the body",
            "bad-trailing",
            format!(r#"{whole}{{"id":"bad-trailing-2"}}"#),
            400,
            "malformed_json",
            None,
        ),
        bad_raw(
            "a comma after the body",
            "bad-trailing",
            format!("{whole},"),
            400,
            "malformed_json",
            None,
        ),
    ]);
    // An integer written as a float is not an amount of minor units.
    for (name, id, text) in [
        ("amount with an exponent", "bad-exp", "1e3"),
        ("amount with a point", "bad-point", "10.0"),
    ] {
        cases.push(bad_raw(
            name,
            id,
            raw_amount(id, text),
            400,
            "amount_is_not_a_number",
            Some("postings[0].amount"),
        ));
    }
    // The framework's own refusals have the documented shape too.
    cases.push(Bad {
        method: Method::GET,
        path: "/v1/accounts/%FF".into(),
        content_type: None,
        body: Vec::new(),
        absent: None,
        ..bad_transfer(
            "a path id that is not UTF-8",
            "",
            json!(null),
            400,
            "invalid_path",
            Some("id"),
        )
    });
    cases.push(Bad {
        path: "/v1/transfers/fund/capture".into(),
        absent: None,
        ..bad_transfer(
            "an unknown field of a capture",
            "",
            json!({"amount": 5, "note": "x"}),
            400,
            "unknown_field",
            Some("note"),
        )
    });
    cases.push(Bad {
        method: Method::GET,
        path: "/v1/accounts?before=5".into(),
        content_type: None,
        body: Vec::new(),
        absent: None,
        ..bad_transfer(
            "a history cursor to the account list",
            "",
            json!(null),
            400,
            "invalid_query",
            Some("before"),
        )
    });
    let account = |name, body: Value, status, code, field| Bad {
        path: "/v1/accounts".into(),
        absent: None,
        ..bad_transfer(name, "", body, status, code, field)
    };
    cases.extend([
        account(
            "account with a positive lower bound",
            json!({"id": "newbie", "asset": "USD", "lower_bound": 1}),
            400,
            "lower_bound_out_of_range",
            Some("lower_bound"),
        ),
        account(
            "account with a fractional lower bound",
            json!({"id": "newbie", "asset": "USD", "lower_bound": 1.5}),
            400,
            "lower_bound_out_of_range",
            Some("lower_bound"),
        ),
        account(
            "account with a lower bound word",
            json!({"id": "newbie", "asset": "USD", "lower_bound": "none"}),
            400,
            "wrong_type",
            Some("lower_bound"),
        ),
        account(
            "account with an invalid asset",
            json!({"id": "newbie", "asset": "us dollars"}),
            400,
            "asset_code_is_invalid",
            Some("asset"),
        ),
        account(
            "account with an invalid id",
            json!({"id": "new bie", "asset": "USD"}),
            400,
            "id_has_invalid_character",
            Some("id"),
        ),
        account(
            "account re-created with another asset",
            json!({"id": "alice", "asset": "EUR"}),
            409,
            "account_exists_with_different_body",
            Some("id"),
        ),
        Bad {
            body: br#"{"id": "newbie", "asset": "USD"} trailing"#.to_vec(),
            ..account(
                "account with text after the body",
                json!(null),
                400,
                "malformed_json",
                None,
            )
        },
        account(
            "account re-created with another bound",
            json!({"id": "alice", "asset": "USD", "lower_bound": -1}),
            409,
            "account_exists_with_different_body",
            Some("id"),
        ),
    ]);
    cases.push(Bad {
        method: Method::PUT,
        path: "/v1/accounts/alice/lower_bound".into(),
        absent: None,
        ..bad_transfer(
            "lower bound above the balance",
            "",
            json!({"lower_bound": 1000}),
            422,
            "lower_bound_above_available",
            Some("lower_bound"),
        )
    });
    cases.push(Bad {
        path: "/v1/transfers/fund/refund".into(),
        absent: None,
        ..bad_transfer(
            "refund without an id",
            "",
            json!({"metadata": "x"}),
            400,
            "missing_field",
            Some("id"),
        )
    });
    cases
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_its_code_and_field_and_changes_nothing() {
    bad_input(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_its_code_and_field_and_changes_nothing_on_postgres() {
    bad_input(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_its_code_and_field_and_changes_nothing_on_mysql() {
    bad_input(Backend::Mysql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_its_code_and_field_and_changes_nothing_on_mongodb() {
    bad_input(Backend::Mongodb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_its_code_and_field_and_changes_nothing_on_redis() {
    bad_input(Backend::Redis).await;
}

async fn bad_input(backend: Backend) {
    let ts = TestServer::start(backend).await;
    ts.create_account("bank", "USD", json!("unbounded")).await;
    ts.create_account("alice", "USD", json!(0)).await;
    ts.create_account("bob", "USD", json!(0)).await;
    ts.create_account("euro", "EUR", json!(0)).await;
    ts.pay("fund", "bank", "alice", "USD", 100).await;
    let involved = ["bank", "alice", "bob", "euro"];
    let before = ts.snapshot(&involved).await;

    let mut failures = Vec::new();
    for case in bad_cases() {
        let a = ts
            .raw(
                case.method.clone(),
                &case.path,
                case.content_type,
                case.body.clone(),
            )
            .await;
        let got = (
            a.status,
            a.code().to_string(),
            a.body["field"].as_str().map(String::from),
        );
        let want = (
            case.status,
            case.code.to_string(),
            case.field.map(String::from),
        );
        if got != want || a.body["message"].as_str().is_none_or(str::is_empty) {
            failures.push(format!(
                "{}: got {got:?}, want {want:?}: {}",
                case.name, a.text
            ));
        }
        if let Some(id) = case.absent {
            ts.expect_no_transfer(id).await;
        }
        assert_eq!(
            ts.snapshot(&involved).await,
            before,
            "{}: nothing may change",
            case.name
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let a = ts.get("/v1/accounts/newbie").await;
    expect_error(&a, 404, "account_not_found", Some("id"), "no newbie");
    ts.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Auth.
// ---------------------------------------------------------------------------------------

const READER: &str = "reader-0123456789";
const WRITER: &str = "writer-0123456789";
const ADMIN: &str = "admin-00123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_scopes_guard_every_endpoint() {
    let tokens = Tokens::new(
        [
            "reader-0123456789:read",
            "writer-0123456789:write",
            "admin-00123456789:admin",
        ]
        .iter()
        .map(|t| Token::parse_flag(t).expect("a token"))
        .collect(),
    );
    let ts = TestServer::start_with(Backend::Embedded, tokens, Some(ADMIN)).await;
    let none = ts.client_with(None);
    let wrong = ts.client_with(Some("unknown-0123456789"));
    let reader = ts.client_with(Some(READER));
    let writer = ts.client_with(Some(WRITER));
    let admin = ts.client_with(Some(ADMIN));

    // The admin sets up.
    ts.create_account("bank", "USD", json!("unbounded")).await;
    ts.create_account("alice", "USD", json!(0)).await;
    ts.pay("t-admin", "bank", "alice", "USD", 10).await;

    let call = |c: &Client, m: &str, path: &str, body: Option<Value>| {
        let c = c.clone();
        let m = Method::from_bytes(m.as_bytes()).unwrap();
        let path = path.to_string();
        async move {
            c.send(m.clone(), &path, body.as_ref())
                .await
                .unwrap_or_else(|e| panic!("{m} {path}: {e}"))
        }
    };

    // Open endpoints need no token.
    for path in ["/healthz", "/readyz", "/v1/openapi.json"] {
        for c in [&none, &wrong] {
            assert_eq!(call(c, "GET", path, None).await.status, 200, "{path}");
        }
    }

    // Every guarded route: no token and an unknown token → 401.
    for r in ROUTES.iter().filter(|r| r.scope.is_some()) {
        let path = r.path.replace("{id}", "alice");
        let body = (r.method != "GET").then(|| json!({}));
        for (who, c) in [("no token", &none), ("unknown token", &wrong)] {
            let a = call(c, r.method, &path, body.clone()).await;
            expect_error(
                &a,
                401,
                "unauthorized",
                Some("authorization"),
                &format!("{who}: {} {}", r.method, r.path),
            );
        }
    }

    // The reader reads, and nothing else.
    for path in [
        "/metrics",
        "/v1/accounts",
        "/v1/accounts/alice",
        "/v1/transfers/t-admin",
        "/v1/accounts/alice/transfers",
    ] {
        assert_eq!(
            call(&reader, "GET", path, None).await.status,
            200,
            "reader GET {path}"
        );
    }
    let pay = transfer("t-reader", "bank", "alice", "USD", json!(1));
    let a = call(&reader, "POST", "/v1/transfers", Some(pay.clone())).await;
    expect_error(&a, 403, "forbidden", None, "reader submits");
    let a = call(
        &reader,
        "POST",
        "/v1/accounts",
        Some(json!({"id": "r", "asset": "USD"})),
    )
    .await;
    expect_error(&a, 403, "forbidden", None, "reader creates");
    let a = call(&reader, "GET", "/v1/audit", None).await;
    expect_error(&a, 403, "forbidden", None, "reader audits");

    // The writer reads and writes, and is no admin.
    assert_eq!(
        call(&writer, "GET", "/v1/transfers/t-admin", None)
            .await
            .status,
        200
    );
    assert_eq!(call(&writer, "GET", "/metrics", None).await.status, 200);
    let a = call(
        &writer,
        "POST",
        "/v1/transfers",
        Some(transfer("t-writer", "bank", "alice", "USD", json!(1))),
    )
    .await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("done")),
        "{}",
        a.text
    );
    for (m, path) in [
        ("GET", "/v1/audit"),
        ("GET", "/v1/admin/stuck"),
        ("GET", "/v1/admin/canceled"),
        ("POST", "/v1/accounts/alice/close"),
        ("POST", "/v1/transfers/t-writer/redrive"),
    ] {
        let a = call(&writer, m, path, None).await;
        expect_error(&a, 403, "forbidden", None, &format!("writer {m} {path}"));
    }
    let a = call(
        &writer,
        "PUT",
        "/v1/accounts/alice/lower_bound",
        Some(json!({"lower_bound": 0})),
    )
    .await;
    expect_error(&a, 403, "forbidden", None, "writer sets a bound");

    // The admin does everything.
    for path in [
        "/metrics",
        "/v1/audit",
        "/v1/admin/stuck",
        "/v1/admin/canceled",
        "/v1/accounts/alice",
    ] {
        assert_eq!(
            call(&admin, "GET", path, None).await.status,
            200,
            "admin GET {path}"
        );
    }
    let a = call(
        &admin,
        "PUT",
        "/v1/accounts/alice/lower_bound",
        Some(json!({"lower_bound": 0})),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let a = call(&admin, "POST", "/v1/transfers/t-writer/redrive", None).await;
    assert_eq!(
        (a.status, a.body["state"].clone()),
        (200, json!("done")),
        "{}",
        a.text
    );

    // Refusals change nothing: the reader's transfer does not exist; alice has 11.
    ts.expect_no_transfer("t-reader").await;
    assert_eq!(ts.balance("alice").await, 11);
    assert_eq!(ts.account("alice").await["status"], "open");
    // Unknown routes and methods answer the same with or without a token.
    expect_error(
        &call(&none, "GET", "/v1/nope", None).await,
        404,
        "route_not_found",
        None,
        "unknown route",
    );
    ts.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// The connection.
// ---------------------------------------------------------------------------------------

/// Sends `request` on `stream` and reads one response: status, head and body.
async fn exchange(stream: &mut tokio::net::TcpStream, request: &[u8]) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(request)
        .await
        .expect("the request is sent");
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.expect("a response");
        assert!(n > 0, "the connection closed before a response: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().expect("a length"));
    while buf.len() < head_end + length {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.expect("the body");
        assert!(n > 0, "the connection closed inside the body");
        buf.extend_from_slice(&chunk[..n]);
    }
    let status = head[9..12].parse().expect("a status");
    let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
    (status, head, body)
}

fn post_request(path: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_before_its_body_is_used_leaves_the_connection_usable() {
    let ts = TestServer::start(Backend::Embedded).await;
    let addr = ts.client.url().trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("a connection");
    let health = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
    // Refused for its content type, its route, its query: each answered in the documented
    // shape, and the next request on the same connection is answered too.
    let big = vec![b'x'; 60_000];
    for (path, ct, status, code) in [
        ("/v1/transfers", "text/plain", 415, "unsupported_media_type"),
        ("/v1/nowhere", "application/json", 404, "route_not_found"),
        (
            "/v1/transfers?wait=maybe",
            "application/json",
            400,
            "invalid_query",
        ),
    ] {
        let (got, _, body) = exchange(&mut stream, &post_request(path, ct, &big)).await;
        assert_eq!(got, status, "{path}: {body}");
        let v: Value = serde_json::from_str(&body).expect("a JSON error");
        assert_eq!(v["code"], code, "{path}: {body}");
        let (got, _, body) = exchange(&mut stream, health).await;
        assert_eq!(got, 200, "after {path}: {body}");
    }
    // A body over the limit is refused unread, and the answer says the connection closes.
    let huge = vec![b'x'; 100_000];
    let request = post_request("/v1/transfers", "application/json", &huge);
    let (got, head, body) = exchange(&mut stream, &request[..request.len() - huge.len()]).await;
    assert_eq!(got, 413, "{body}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(body.contains("body_too_large"), "{body}");
    // A new connection is served.
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("a connection");
    assert_eq!(exchange(&mut stream, health).await.0, 200);
    ts.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_the_limit_is_refused_and_the_others_are_served() {
    const MAX: usize = 4;
    let ts = TestServer::start_configured(Backend::Embedded, Tokens::default(), None, |c| {
        c.max_connections = MAX
    })
    .await;
    let addr = ts.client.url().trim_start_matches("http://").to_string();
    let health = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
    let connect = || async {
        tokio::net::TcpStream::connect(&addr)
            .await
            .expect("a connection")
    };
    // The test client's own connections may hold permits until they idle out: fill the
    // limit with ours, each answered, then one more.
    let mut open = Vec::new();
    let mut refused = None;
    for _ in 0..MAX + 4 {
        let mut stream = connect().await;
        let (status, head, body) = exchange(&mut stream, health).await;
        match status {
            200 => open.push(stream),
            503 => {
                refused = Some((head, body));
                break;
            }
            other => panic!("{other}: {body}"),
        }
    }
    let (head, body) = refused.expect("a connection past the limit is refused");
    assert!(open.len() <= MAX, "{} connections were served", open.len());
    assert!(head.contains("retry-after: 1"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    let v: Value = serde_json::from_str(&body).expect("a JSON error");
    assert_eq!(v["code"], "too_many_connections", "{body}");
    // The connections within the limit are still served.
    for stream in &mut open {
        assert_eq!(exchange(stream, health).await.0, 200);
    }
    // One closed gives its place to a new one.
    open.pop();
    let mut served = false;
    for _ in 0..100 {
        let mut stream = connect().await;
        if exchange(&mut stream, health).await.0 == 200 {
            served = true;
            break;
        }
        TokioSleeper.sleep(20).await;
    }
    assert!(served, "a place freed is taken again");
    drop(open);
    ts.shutdown().await;
}
