//! One deployment over two kinds of store (`[[shard]]` and `[[route]]` in the configuration
//! file): cash on the embedded store and points on PostgreSQL; then points on a Redis
//! Cluster and cash on PostgreSQL; then points on MySQL, and on MongoDB, with cash on
//! PostgreSQL. A payment in points plus cash is one transfer across both (seed 004): the
//! postings happen together or not at all, each account's record is where its route says
//! (read back with SQL, HGET and the MongoDB driver), and all of it survives a restart.

mod common;

use common::{mysql_admin, mysql_connect, mysql_url, postgres_admin, postgres_base};
use mysql_async::prelude::Queryable;
use serde_json::{json, Value};
use xfer_client::Client;
use xfer_engine::{Sleeper, TokioSleeper};
use xfer_server::config::{FileConfig, ServeArgs, ServeConfig};
use xfer_server::Server;

async fn start(cfg: &ServeConfig) -> (Server, Client) {
    let server = Server::start(cfg.clone()).await.expect("the server starts");
    let client = Client::new(&format!("http://{}", server.addr()), None).expect("a client");
    for _ in 0..250 {
        if client.get("/readyz").await.map(|a| a.status) == Ok(200) {
            return (server, client);
        }
        TokioSleeper.sleep(20).await;
    }
    panic!("not ready");
}

async fn balance(c: &Client, id: &str) -> i64 {
    let a = c
        .get(&format!("/v1/accounts/{id}"))
        .await
        .expect("GET account");
    assert_eq!(a.status, 200, "{id}: {}", a.text);
    a.body["balance"].as_i64().expect("a balance")
}

async fn pay(c: &Client, id: &str, points: u64, cents: u64) -> Value {
    let body = json!({"id": id, "postings": [
        {"from": "points:alice", "to": "points:shop", "asset": "POINTS", "amount": points},
        {"from": "cash:alice", "to": "cash:shop", "asset": "USD", "amount": cents},
    ]});
    let a = c.post("/v1/transfers", &body).await.expect("POST transfer");
    assert_eq!(a.status, 200, "{id}: {}", a.text);
    a.body
}

/// The balance PostgreSQL holds for `id` in `schema`, read with SQL (None: no row there).
async fn row_balance(url: &str, schema: &str, id: &str) -> Option<i64> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    client
        .query_opt(
            &format!("SELECT balance FROM {schema}.accounts WHERE id = $1"),
            &[&id],
        )
        .await
        .expect("query")
        .map(|r| r.get(0))
}

/// Creates the six accounts, funds alice, and pays twice with points and cash: once with
/// enough of both (both legs move), once with too little cash (neither moves). Answers the
/// balances every store must then hold.
async fn pay_with_both(c: &Client) -> [(&'static str, i64); 4] {
    for (code, scale) in [("POINTS", 0), ("USD", 2)] {
        let a = c
            .post("/v1/assets", &json!({"code": code, "scale": scale}))
            .await;
        assert_eq!(a.expect("declare").status, 201, "declare {code}");
    }
    for (id, asset, bound) in [
        ("points:issuer", "POINTS", json!("unbounded")),
        ("points:alice", "POINTS", json!(0)),
        ("points:shop", "POINTS", json!(0)),
        ("cash:issuer", "USD", json!("unbounded")),
        ("cash:alice", "USD", json!(0)),
        ("cash:shop", "USD", json!(0)),
    ] {
        let a = c
            .post(
                "/v1/accounts",
                &json!({"id": id, "asset": asset, "lower_bound": bound}),
            )
            .await
            .expect("create");
        assert_eq!(a.status, 201, "{id}: {}", a.text);
    }
    for (id, from, to, asset, amount) in [
        ("fund-p", "points:issuer", "points:alice", "POINTS", 1_000),
        ("fund-c", "cash:issuer", "cash:alice", "USD", 5_000),
    ] {
        let body = json!({"id": id, "postings": [{"from": from, "to": to, "asset": asset, "amount": amount}]});
        let a = c.post("/v1/transfers", &body).await.expect("fund");
        assert_eq!(a.body["state"], "done", "{}", a.text);
    }

    // Paid with both: both legs move.
    let paid = pay(c, "order-1", 300, 2_000).await;
    assert_eq!(paid["state"], "done", "{paid}");
    // Not enough cash: the points leg, which alone would pass, does not move either.
    let refused = pay(c, "order-2", 300, 4_000).await;
    assert_eq!(refused["state"], "canceled", "{refused}");
    assert_eq!(refused["reason"]["code"], "exceeds_available", "{refused}");

    let expect = [
        ("points:alice", 700),
        ("points:shop", 300),
        ("cash:alice", 3_000),
        ("cash:shop", 2_000),
    ];
    for (id, b) in expect {
        assert_eq!(balance(c, id).await, b, "{id}");
    }
    let audit = c.get("/v1/audit").await.expect("audit").body;
    assert_eq!(audit["clean"], true, "{audit}");
    expect
}

/// Both stores keep it: a new server on the same configuration reads the same balances.
async fn kept_across_a_restart(cfg: &ServeConfig, expect: [(&str, i64); 4]) {
    let (server, c) = start(cfg).await;
    for (id, b) in expect {
        assert_eq!(balance(&c, id).await, b, "{id} after the restart");
    }
    server.shutdown().await.expect("a clean shutdown");
}

/// Both tests route points to shard 1 and cash to shard 0.
const ROUTES: &str = r#"
        [[route]]
        prefix = "points:"
        shards = [1]
        [[route]]
        prefix = "cash:"
        shards = [0]
"#;

/// A fresh database `name` on the test server (dropped first if a run left it); its URL.
async fn fresh_database(name: &str) -> String {
    postgres_admin(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
    postgres_admin(&format!("CREATE DATABASE {name}")).await;
    format!("{}/{name}", postgres_base())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn points_on_postgres_and_cash_embedded_move_together_in_one_transfer() {
    let db = format!("xfer_mixed_{}", std::process::id());
    let url = fresh_database(&db).await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let file: FileConfig = toml::from_str(&format!(
        r#"
        listen = "127.0.0.1:0"
        data_dir = "{}"
        [[shard]]
        store = "embedded"
        [[shard]]
        store = "postgres"
        url = "{url}"
        schema = "points"
        {ROUTES}"#,
        dir.path().join("data").display()
    ))
    .expect("the file parses");
    let cfg = ServeConfig::merge(file, &ServeArgs::default()).expect("a valid configuration");
    let (server, c) = start(&cfg).await;
    let expect = pay_with_both(&c).await;
    // Where the rows are: points in PostgreSQL, cash not (it is in the data directory).
    assert_eq!(row_balance(&url, "points", "points:alice").await, Some(700));
    assert_eq!(row_balance(&url, "points", "points:shop").await, Some(300));
    assert_eq!(row_balance(&url, "points", "cash:alice").await, None);
    server.shutdown().await.expect("a clean shutdown");
    kept_across_a_restart(&cfg, expect).await;
    postgres_admin(&format!("DROP DATABASE {db} WITH (FORCE)")).await;
}

/// The balance the Redis Cluster holds for `id` in the shard tagged `prefix`, read with
/// `HGET` (None: no such key there).
async fn redis_balance(prefix: &str, id: &str) -> Option<i64> {
    let client = redis::cluster::ClusterClient::new(common::redis_cluster_nodes()).expect("nodes");
    let mut c = client.get_async_connection().await.expect("connect");
    let v: Option<String> = redis::cmd("HGET")
        .arg(format!("{{{prefix}}}:a:{id}"))
        .arg("balance")
        .query_async(&mut c)
        .await
        .expect("HGET");
    v.map(|b| b.parse().expect("an integer"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn points_on_a_redis_cluster_and_cash_on_postgres_move_together_in_one_transfer() {
    let db = format!("xfer_mixed_r_{}", std::process::id());
    let url = fresh_database(&db).await;
    let prefix = format!("points_{}", std::process::id());
    let nodes = common::redis_cluster_nodes()
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let file: FileConfig = toml::from_str(&format!(
        r#"
        listen = "127.0.0.1:0"
        [[shard]]
        store = "postgres"
        url = "{url}"
        schema = "cash"
        [[shard]]
        store = "redis"
        cluster = [{nodes}]
        prefix = "{prefix}"
        {ROUTES}"#
    ))
    .expect("the file parses");
    let cfg = ServeConfig::merge(file, &ServeArgs::default()).expect("a valid configuration");
    let (server, c) = start(&cfg).await;
    let expect = pay_with_both(&c).await;

    // Where the records are: points in the Redis Cluster, cash in PostgreSQL.
    assert_eq!(redis_balance(&prefix, "points:alice").await, Some(700));
    assert_eq!(redis_balance(&prefix, "points:shop").await, Some(300));
    assert_eq!(redis_balance(&prefix, "cash:alice").await, None);
    assert_eq!(row_balance(&url, "cash", "cash:alice").await, Some(3_000));
    assert_eq!(row_balance(&url, "cash", "points:alice").await, None);
    server.shutdown().await.expect("a clean shutdown");
    kept_across_a_restart(&cfg, expect).await;
    let store = xfer_store_redis::RedisStore::open(&xfer_store_redis::RedisConfig::cluster(
        common::redis_cluster_nodes(),
        prefix,
    ))
    .await
    .expect("open to clean up");
    store.destroy().await.expect("clean up");
    postgres_admin(&format!("DROP DATABASE {db} WITH (FORCE)")).await;
}

/// The balance MySQL holds for `id` in `database`, read with SQL (None: no row there).
async fn mysql_balance(database: &str, id: &str) -> Option<i64> {
    let mut conn = mysql_connect(Some(database)).await;
    let balance = conn
        .exec_first("SELECT balance FROM accounts WHERE id = ?", (id,))
        .await
        .expect("query");
    let _ = conn.disconnect().await;
    balance
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn points_on_mysql_and_cash_on_postgres_move_together_in_one_transfer() {
    let db = format!("xfer_mixed_m_{}", std::process::id());
    let url = fresh_database(&db).await;
    let points = format!("xfer_mixed_points_{}", std::process::id());
    mysql_admin(&format!("DROP DATABASE IF EXISTS `{points}`")).await;
    let file: FileConfig = toml::from_str(&format!(
        r#"
        listen = "127.0.0.1:0"
        [[shard]]
        store = "postgres"
        url = "{url}"
        schema = "cash"
        [[shard]]
        store = "mysql"
        url = "{}"
        database = "{points}"
        {ROUTES}"#,
        mysql_url()
    ))
    .expect("the file parses");
    let cfg = ServeConfig::merge(file, &ServeArgs::default()).expect("a valid configuration");
    let (server, c) = start(&cfg).await;
    let expect = pay_with_both(&c).await;

    // Where the rows are: points in MySQL, cash in PostgreSQL.
    assert_eq!(mysql_balance(&points, "points:alice").await, Some(700));
    assert_eq!(mysql_balance(&points, "points:shop").await, Some(300));
    assert_eq!(mysql_balance(&points, "cash:alice").await, None);
    assert_eq!(row_balance(&url, "cash", "cash:alice").await, Some(3_000));
    assert_eq!(row_balance(&url, "cash", "points:alice").await, None);
    server.shutdown().await.expect("a clean shutdown");
    kept_across_a_restart(&cfg, expect).await;
    mysql_admin(&format!("DROP DATABASE `{points}`")).await;
    postgres_admin(&format!("DROP DATABASE {db} WITH (FORCE)")).await;
}

/// The balance the MongoDB account document `id` holds in `database`, read with the driver
/// (None: no document there).
async fn mongodb_balance(database: &str, id: &str) -> Option<i64> {
    use mongodb::bson::{doc, Document};
    let client = mongodb::Client::with_uri_str(common::mongodb_url())
        .await
        .expect("a client");
    let accounts = client.database(database).collection::<Document>("accounts");
    let found = accounts.find_one(doc! {"_id": id}).await.expect("query");
    found.map(|d| d.get_i64("balance").expect("an Int64 balance"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn points_on_mongodb_and_cash_on_postgres_move_together_in_one_transfer() {
    let db = format!("xfer_mixed_g_{}", std::process::id());
    let url = fresh_database(&db).await;
    let points = format!("xfer_mixed_points_{}", std::process::id());
    common::mongodb_shard(&points)
        .await
        .destroy()
        .await
        .expect("a fresh database");
    let file: FileConfig = toml::from_str(&format!(
        r#"
        listen = "127.0.0.1:0"
        [[shard]]
        store = "postgres"
        url = "{url}"
        schema = "cash"
        [[shard]]
        store = "mongodb"
        url = "{}"
        database = "{points}"
        {ROUTES}"#,
        common::mongodb_url()
    ))
    .expect("the file parses");
    let cfg = ServeConfig::merge(file, &ServeArgs::default()).expect("a valid configuration");
    let (server, c) = start(&cfg).await;
    let expect = pay_with_both(&c).await;

    // Where the records are: points in MongoDB documents, cash in PostgreSQL rows.
    assert_eq!(mongodb_balance(&points, "points:alice").await, Some(700));
    assert_eq!(mongodb_balance(&points, "points:shop").await, Some(300));
    assert_eq!(mongodb_balance(&points, "cash:alice").await, None);
    assert_eq!(row_balance(&url, "cash", "cash:alice").await, Some(3_000));
    assert_eq!(row_balance(&url, "cash", "points:alice").await, None);
    server.shutdown().await.expect("a clean shutdown");
    kept_across_a_restart(&cfg, expect).await;
    common::mongodb_shard(&points)
        .await
        .destroy()
        .await
        .expect("clean up");
    postgres_admin(&format!("DROP DATABASE {db} WITH (FORCE)")).await;
}
