//! The connection (one server, or a Cluster), loading the functions, the durability check
//! and the [`Store`] calls.

use crate::cluster::RenewingCluster;
use crate::keys::Keys;
use crate::wire;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisError, RedisResult, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;
use xfer_core::{Account, AccountId, Asset, Timestamp, TransferId, TransferRecord};
use xfer_store::database::OpenError;
use xfer_store::{
    BoxFuture, EventPage, FeedPosition, HistoryPage, Metadata, Op, Reply, Store, StoreError,
};

/// The backend's name in errors.
const STORE: &str = "redis";
/// The server-side functions, loaded (replacing an older copy) when a store opens.
const FUNCTIONS: &str = include_str!("functions.lua");
/// The data layout `functions.lua` keeps (its library's version), kept in the shard's
/// `layout` key once older data was brought to it.
const LAYOUT: &str = "7";

/// Where one shard lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]`: the server, or for a Cluster any of its
    /// nodes (more than one in case some are down).
    pub nodes: Vec<String>,
    /// True when `nodes` are nodes of a Redis Cluster.
    pub cluster: bool,
    /// The shard's hash tag: every key of the shard is `{prefix}:…`, so the shard lives in
    /// one Cluster slot. Several shards share a server or Cluster under different prefixes.
    pub prefix: String,
    /// How long to wait to connect before opening fails.
    pub connect_timeout: Duration,
    /// How long a call may take before it answers `Indeterminate` (the server may still
    /// apply it; every step is idempotent, so the caller retries).
    pub call_timeout: Duration,
}

impl RedisConfig {
    /// One server at `url`, the shard under `prefix`, 5 s to connect, 30 s per call.
    pub fn new(url: impl Into<String>, prefix: impl Into<String>) -> RedisConfig {
        RedisConfig {
            nodes: vec![url.into()],
            cluster: false,
            prefix: prefix.into(),
            connect_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(30),
        }
    }

    /// A Cluster reached through `nodes`, the shard under `prefix`.
    pub fn cluster(nodes: Vec<String>, prefix: impl Into<String>) -> RedisConfig {
        RedisConfig {
            nodes,
            cluster: true,
            ..RedisConfig::new(String::new(), prefix)
        }
    }
}

/// One master's persistence settings, as `CONFIG GET` reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Durability {
    /// The master (`host:port`).
    pub node: String,
    /// `appendonly`, or why it could not be read.
    pub appendonly: String,
    /// `appendfsync`, or why it could not be read.
    pub appendfsync: String,
}

impl Durability {
    /// True when every write the server acknowledges is in its append-only file, synced:
    /// `appendonly yes` with `appendfsync always`.
    pub fn is_durable(&self) -> bool {
        self.appendonly == "yes" && self.appendfsync == "always"
    }

    /// What an operator must be told when the settings are weaker.
    pub fn warning(&self) -> Option<String> {
        (!self.is_durable()).then(|| {
            format!(
                "Redis at {} has appendonly={} appendfsync={}: transfers it acknowledges can be \
                 LOST if it stops (a crash, a kill, a power cut). Set `appendonly yes` and \
                 `appendfsync always` on every master",
                self.node, self.appendonly, self.appendfsync
            )
        })
    }
}

enum Conn {
    Single(ConnectionManager),
    Cluster(Box<RenewingCluster>),
}

/// What one round trip sends: a command, or a batch's pipeline.
#[derive(Clone, Copy)]
enum Call<'a> {
    Cmd(&'a Cmd),
    Pipeline(&'a Pipeline),
}

impl Call<'_> {
    async fn send<T: redis::FromRedisValue>(self, mut conn: impl ConnectionLike) -> RedisResult<T> {
        match self {
            Call::Cmd(cmd) => cmd.query_async(&mut conn).await,
            Call::Pipeline(pipe) => pipe.query_async(&mut conn).await,
        }
    }
}

/// One shard on a Redis server or Cluster. See the crate docs.
pub struct RedisStore {
    conn: Conn,
    keys: Keys,
    config: RedisConfig,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("nodes", &self.config.nodes)
            .field("cluster", &self.config.cluster)
            .field("prefix", &self.config.prefix)
            .finish()
    }
}

fn check(cfg: &RedisConfig) -> Result<(), OpenError> {
    let bad = |field, why: &str| Err(OpenError::config(STORE, field, why));
    if cfg.nodes.is_empty() || cfg.nodes.iter().any(|n| n.is_empty()) {
        return bad("url", "give the server's URL, redis://host:port");
    }
    if !cfg.cluster && cfg.nodes.len() != 1 {
        return bad(
            "url",
            "one server per shard (or mark the nodes as a cluster)",
        );
    }
    for n in &cfg.nodes {
        if let Err(e) = n.as_str().into_connection_info() {
            return Err(OpenError::config(
                STORE,
                "url",
                format!("{n:?} is not a Redis URL: {e}"),
            ));
        }
    }
    let p = &cfg.prefix;
    if p.is_empty()
        || p.len() > 64
        || !p
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c))
    {
        return bad(
            "prefix",
            "1 to 64 characters of letters, digits and _ - . : (it becomes the shard's hash tag)",
        );
    }
    Ok(())
}

impl RedisStore {
    /// Connects, loads the functions and answers the shard. The keys are created by the
    /// first steps; nothing else is set up.
    pub async fn open(cfg: &RedisConfig) -> Result<RedisStore, OpenError> {
        check(cfg)?;
        let unreachable = |e: RedisError| OpenError::unreachable(STORE, e.to_string());
        let conn = if cfg.cluster {
            let client = redis::cluster::ClusterClient::builder(cfg.nodes.clone())
                .connection_timeout(cfg.connect_timeout)
                .build()
                .map_err(unreachable)?;
            Conn::Cluster(Box::new(
                RenewingCluster::connect(client, cfg.connect_timeout)
                    .await
                    .map_err(unreachable)?,
            ))
        } else {
            let client = redis::Client::open(cfg.nodes[0].as_str()).map_err(unreachable)?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(cfg.connect_timeout))
                .set_number_of_retries(2);
            let manager = tokio::time::timeout(
                cfg.connect_timeout,
                ConnectionManager::new_with_config(client, config),
            )
            .await
            .map_err(|_| OpenError::unreachable(STORE, format!("no answer from {}", cfg.nodes[0])))?
            .map_err(unreachable)?;
            Conn::Single(manager)
        };
        let store = RedisStore {
            conn,
            keys: Keys::new(&cfg.prefix),
            config: cfg.clone(),
        };
        store.load_functions().await?;
        store.migrate().await.map_err(|e| {
            OpenError::setup(STORE, format!("bringing the data to layout {LAYOUT}: {e}"))
        })?;
        Ok(store)
    }

    /// Loads the functions on the server (every master of a Cluster), replacing an older
    /// copy of the same library.
    async fn load_functions(&self) -> Result<(), OpenError> {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg("REPLACE").arg(FUNCTIONS);
        self.call::<Value>(&cmd)
            .await
            .map(drop)
            .map_err(|e| OpenError::setup(STORE, e.to_string()))
    }

    /// Brings the shard's older data to this layout, once: the histories of xfer_6 and older
    /// (sorted sets) become lists, each in one atomic step, so a store that stops halfway
    /// finishes at its next open, and several opening at once do the same work twice at
    /// worst.
    async fn migrate(&self) -> Result<(), StoreError> {
        let k = &self.keys;
        let layout: Option<String> = self.call(redis::cmd("GET").arg(k.layout())).await?;
        if layout.as_deref() == Some(LAYOUT) {
            return Ok(());
        }
        let mut after: Option<String> = None;
        loop {
            let ids = self.ids_after(k.accounts(), after.as_deref(), 1000).await?;
            let Some(last) = ids.last().cloned() else {
                break;
            };
            let mut pipe = redis::pipe();
            for id in &ids {
                let id = AccountId::new(id).map_err(|e| StoreError::Corrupted(e.to_string()))?;
                pipe.cmd("FCALL")
                    .arg(wire::HISTORY_TO_LIST_FN)
                    .arg(1)
                    .arg(k.history(&id));
            }
            for answer in self.pipeline(&pipe).await? {
                answer.map_err(|e| classify(&e))?;
            }
            after = Some(last);
        }
        self.call::<()>(redis::cmd("SET").arg(k.layout()).arg(LAYOUT))
            .await
    }

    /// `call` on the connection, waiting at most the call timeout: `None` when no answer
    /// came in time. A Cluster connection that answers no node or nothing in time is
    /// replaced (`cluster.rs`).
    async fn query<T: redis::FromRedisValue>(&self, call: Call<'_>) -> Option<RedisResult<T>> {
        let within = self.config.call_timeout;
        match &self.conn {
            Conn::Single(c) => tokio::time::timeout(within, call.send(c.clone()))
                .await
                .ok(),
            Conn::Cluster(c) => c.call(within, |conn| call.send(conn)).await,
        }
    }

    /// How many times the Cluster connection was replaced (see `cluster.rs`); 0 on a
    /// single server.
    pub fn connection_renewals(&self) -> u64 {
        match &self.conn {
            Conn::Single(_) => 0,
            Conn::Cluster(c) => c.renewals(),
        }
    }

    /// A batch's pipeline, with the call timeout: each command's own result.
    async fn pipeline(&self, pipe: &Pipeline) -> Result<Vec<RedisResult<Value>>, StoreError> {
        self.answer(self.query(Call::Pipeline(pipe)).await)
    }

    /// One command outside a batch (reads, the scans), with the call timeout.
    async fn call<T: redis::FromRedisValue>(&self, cmd: &Cmd) -> Result<T, StoreError> {
        self.answer(self.query(Call::Cmd(cmd)).await)
    }

    /// What a call's answer means to the caller: no answer in time, or any error but a
    /// refusal, leaves its outcome unknown.
    fn answer<T>(&self, answer: Option<RedisResult<T>>) -> Result<T, StoreError> {
        match answer {
            None => Err(StoreError::Indeterminate(format!(
                "no answer from redis within {:?}",
                self.config.call_timeout
            ))),
            Some(r) => r.map_err(|e| classify(&e)),
        }
    }

    /// Each master's persistence settings. A Cluster's masters are read from `CLUSTER
    /// SHARDS`-style `CLUSTER NODES` and asked one by one.
    pub async fn durability(&self) -> Vec<Durability> {
        let seed = self.config.nodes[0].clone();
        if !self.config.cluster {
            return vec![read_durability(&seed, None).await];
        }
        let nodes: String = match self.call(&redis::cmd("CLUSTER").arg("NODES").clone()).await {
            Ok(n) => n,
            Err(e) => {
                return vec![Durability {
                    node: seed,
                    appendonly: format!("unknown ({e})"),
                    appendfsync: "unknown".into(),
                }]
            }
        };
        let mut out = vec![];
        for line in nodes.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() > 2 && f[2].contains("master") && !f[2].contains("fail") {
                let addr = f[1].split('@').next().unwrap_or(f[1]);
                out.push(read_durability(&seed, Some(addr)).await);
            }
        }
        out
    }

    /// Deletes every key of this shard (tests and benchmarks clean up with it).
    pub async fn destroy(&self) -> Result<(), StoreError> {
        let k = &self.keys;
        loop {
            let ids: Vec<String> = self
                .call(redis::cmd("ZRANGE").arg(k.accounts()).arg(0).arg(999))
                .await?;
            if ids.is_empty() {
                break;
            }
            let mut pipe = redis::pipe();
            for id in &ids {
                let id = AccountId::new(id).map_err(|e| StoreError::Corrupted(e.to_string()))?;
                pipe.del(k.account(&id)).ignore();
                pipe.del(k.history(&id)).ignore();
            }
            pipe.zrem(k.accounts(), &ids).ignore();
            self.pipeline(&pipe).await?;
        }
        loop {
            let ids: Vec<String> = self
                .call(redis::cmd("ZRANGE").arg(k.transfers()).arg(0).arg(999))
                .await?;
            if ids.is_empty() {
                break;
            }
            let mut pipe = redis::pipe();
            for id in &ids {
                let id = TransferId::new(id).map_err(|e| StoreError::Corrupted(e.to_string()))?;
                pipe.del(k.transfer(&id)).ignore();
            }
            pipe.zrem(k.transfers(), &ids).ignore();
            self.pipeline(&pipe).await?;
        }
        let mut pipe = redis::pipe();
        for key in [
            k.due(),
            k.tombs(),
            k.seq(),
            k.layout(),
            k.assets(),
            k.metadata(),
            k.events(),
            k.events_dropped(),
        ] {
            pipe.del(key).ignore();
        }
        self.pipeline(&pipe).await.map(drop)
    }

    async fn execute_batch(&self, ops: Vec<Op>) -> Result<Vec<Reply>, StoreError> {
        if ops.is_empty() {
            return Ok(vec![]);
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for op in &ops {
            pipe.add_command(wire::command(&self.keys, op));
        }
        let results = self.pipeline(&pipe).await?;
        if results.len() != ops.len() {
            return Err(StoreError::Indeterminate(format!(
                "{} replies to {} steps",
                results.len(),
                ops.len()
            )));
        }
        let mut replies = Vec::with_capacity(ops.len());
        for (op, r) in ops.iter().zip(results) {
            let v = match r {
                Ok(v) => v,
                Err(e) => return Err(self.step_failed(op, &e).await),
            };
            let reply =
                wire::decode(op, v).map_err(|m| StoreError::Corrupted(format!("{op}: {m}")))?;
            replies.push(reply);
        }
        Ok(replies)
    }

    /// What a step that answered an error means for its batch. Steps before it may have been
    /// applied, so the batch is `Indeterminate` unless a record is corrupt; a server that
    /// lost the functions (restarted without its data) gets them again first.
    async fn step_failed(&self, op: &Op, e: &RedisError) -> StoreError {
        if e.to_string().contains("Function not found") {
            if let Err(load) = self.load_functions().await {
                return StoreError::Unavailable(format!("{op}: {e}: {load}"));
            }
        }
        match classify(e) {
            StoreError::Corrupted(m) => StoreError::Corrupted(format!("{op}: {m}")),
            other => other,
        }
    }

    async fn hgetall_each(&self, keys: &[String]) -> Result<Vec<Vec<String>>, StoreError> {
        if keys.is_empty() {
            return Ok(vec![]);
        }
        let mut pipe = redis::pipe();
        for k in keys {
            pipe.cmd("HGETALL").arg(k);
        }
        let mut out = Vec::with_capacity(keys.len());
        for r in self.pipeline(&pipe).await? {
            let v = r.map_err(|e| classify(&e))?;
            out.push(flat(v)?);
        }
        Ok(out)
    }

    async fn transfers_by_id(&self, ids: &[String]) -> Result<Vec<TransferRecord>, StoreError> {
        let keys: Vec<String> = ids
            .iter()
            .map(|id| {
                TransferId::new(id)
                    .map(|t| self.keys.transfer(&t))
                    .map_err(|e| StoreError::Corrupted(format!("transfer id {id:?}: {e}")))
            })
            .collect::<Result<_, _>>()?;
        let mut out = vec![];
        for (id, f) in ids.iter().zip(self.hgetall_each(&keys).await?) {
            if f.is_empty() {
                continue; // deleted since the index was read
            }
            let rec = wire::transfer(&f)
                .map_err(|m| StoreError::Corrupted(format!("transfer {id}: {m}")))?;
            out.push(rec);
        }
        Ok(out)
    }
}

fn flat(v: Value) -> Result<Vec<String>, StoreError> {
    redis::from_redis_value(v).map_err(|e| StoreError::Corrupted(e.to_string()))
}

/// The asset the catalog `key` holds for `code`: its scale as the server answered it.
fn decode_asset(key: &str, code: &str, scale: Value) -> Result<Asset, StoreError> {
    let bad = |what: String| StoreError::Corrupted(format!("{key} {code:?}: {what}"));
    let scale: String = redis::from_redis_value(scale).map_err(|e| bad(e.to_string()))?;
    let scale = scale.parse().map_err(|_| bad(format!("scale {scale:?}")))?;
    Asset::new(code, scale).map_err(|e| bad(e.message))
}

/// An account's metadata as the hash `key` holds it: a JSON object of strings.
fn decode_metadata(
    key: &str,
    account: &str,
    json: Value,
) -> Result<(AccountId, Metadata), StoreError> {
    let bad = |what: String| StoreError::Corrupted(format!("{key} {account:?}: {what}"));
    let id = AccountId::new(account).map_err(|e| bad(e.message))?;
    let json: String = redis::from_redis_value(json).map_err(|e| bad(e.to_string()))?;
    let metadata = serde_json::from_str(&json).map_err(|e| bad(e.to_string()))?;
    Ok((id, metadata))
}

/// The settings of the server at `seed`, or of the master at `addr` (`host:port`) reached
/// with the seed's credentials.
async fn read_durability(seed: &str, addr: Option<&str>) -> Durability {
    // Never the seed URL itself: it may carry a password.
    let node = match (addr, seed.into_connection_info()) {
        (Some(a), _) => a.to_string(),
        (None, Ok(info)) => info.addr().to_string(),
        (None, Err(_)) => "the server".to_string(),
    };
    let unknown = |why: String| Durability {
        node: node.clone(),
        appendonly: format!("unknown ({why})"),
        appendfsync: "unknown".into(),
    };
    // The seed's credentials, the master's address.
    let info = match seed.into_connection_info() {
        Ok(i) => i,
        Err(e) => return unknown(e.to_string()),
    };
    let info = match addr
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(h, p)| Some((h, p.parse().ok()?)))
    {
        Some((host, port)) => info.set_addr(redis::ConnectionAddr::Tcp(host.to_string(), port)),
        None => info,
    };
    let read = async {
        let client = redis::Client::open(info)?;
        let mut c = client.get_multiplexed_async_connection().await?;
        let get = |name: &'static str| {
            let mut cmd = redis::cmd("CONFIG");
            cmd.arg("GET").arg(name);
            cmd
        };
        let a: Vec<String> = get("appendonly").query_async(&mut c).await?;
        let f: Vec<String> = get("appendfsync").query_async(&mut c).await?;
        Ok::<_, RedisError>((a, f))
    };
    match tokio::time::timeout(Duration::from_secs(5), read).await {
        Err(_) => unknown("no answer".into()),
        Ok(Err(e)) => unknown(e.to_string()),
        Ok(Ok((a, f))) => Durability {
            node,
            appendonly: a.get(1).cloned().unwrap_or_else(|| "unknown".into()),
            appendfsync: f.get(1).cloned().unwrap_or_else(|| "unknown".into()),
        },
    }
}

/// A failed call: a record the functions found corrupt needs a human; a refused
/// connection applied nothing; anything else (a lost connection, a timeout, a server busy
/// loading or failing over) may have applied a prefix of the batch.
fn classify(e: &RedisError) -> StoreError {
    if e.code() == Some("XFERCORRUPT") || e.to_string().contains("XFERCORRUPT") {
        StoreError::Corrupted(e.to_string())
    } else if e.is_connection_refusal() {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Indeterminate(e.to_string())
    }
}

impl Store for RedisStore {
    fn execute(&self, ops: Vec<Op>) -> BoxFuture<'_, Result<Vec<Reply>, StoreError>> {
        Box::pin(self.execute_batch(ops))
    }

    fn scan_due(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<TransferRecord>, StoreError>> {
        Box::pin(async move {
            let ids: Vec<String> = self
                .call(
                    redis::cmd("ZRANGEBYSCORE")
                        .arg(self.keys.due())
                        .arg("-inf")
                        .arg(wire::ms(now))
                        .arg("LIMIT")
                        .arg(0)
                        .arg(limit),
                )
                .await?;
            let mut due = self.transfers_by_id(&ids).await?;
            // A record may have moved on between the two reads.
            due.retain(|r| r.wake_at().is_some_and(|w| w <= now));
            Ok(due)
        })
    }

    fn history<'a>(
        &'a self,
        account: &'a AccountId,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<HistoryPage, StoreError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("FCALL_RO");
            cmd.arg(wire::HISTORY_FN)
                .arg(1)
                .arg(self.keys.history(account))
                .arg(before.unwrap_or(u64::MAX))
                .arg(limit.saturating_add(1));
            let (last, ids): (u64, Vec<String>) = self.call(&cmd).await?;
            let mut entries = Vec::with_capacity(ids.len());
            for (back, id) in (0u64..).zip(ids.iter().rev()) {
                let id = TransferId::new(id).map_err(|e| {
                    StoreError::Corrupted(format!("history of {account}: entry {id:?}: {e}"))
                })?;
                entries.push((last - back, id));
            }
            Ok(HistoryPage::from_one_extra(&mut entries, limit))
        })
    }

    fn events(
        &self,
        after: FeedPosition,
        limit: usize,
    ) -> BoxFuture<'_, Result<EventPage, StoreError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("FCALL_RO");
            cmd.arg(wire::EVENTS_FN)
                .arg(2)
                .arg(self.keys.events())
                .arg(self.keys.events_dropped())
                .arg(format!("{}-{}", after.major, after.minor))
                .arg(limit);
            let v: Value = self.call(&cmd).await?;
            wire::event_page(v).map_err(|e| StoreError::Corrupted(format!("change feed: {e}")))
        })
    }

    /// Read with `XREVRANGE`, then the last id dropped: entries a trim between the two
    /// drops are dropped from the page (they are at or before the id read).
    fn events_before(
        &self,
        before: FeedPosition,
        limit: usize,
    ) -> BoxFuture<'_, Result<EventPage, StoreError>> {
        Box::pin(async move {
            let to = if before == FeedPosition::END {
                "+".to_string()
            } else {
                format!("({}-{}", before.major, before.minor)
            };
            let mut pipe = redis::pipe();
            pipe.cmd("XREVRANGE")
                .arg(self.keys.events())
                .arg(to)
                .arg("-")
                .arg("COUNT")
                .arg(limit)
                .cmd("GET")
                .arg(self.keys.events_dropped());
            let mut answers = self.pipeline(&pipe).await?.into_iter();
            let mut next = || {
                answers
                    .next()
                    .unwrap_or(Ok(Value::Nil))
                    .map_err(|e| classify(&e))
            };
            let entries = next()?;
            let dropped = match next()? {
                Value::Nil => Value::BulkString(b"0-0".to_vec()),
                v => v,
            };
            let mut page = wire::event_page(Value::Array(vec![dropped, entries]))
                .map_err(|e| StoreError::Corrupted(format!("change feed: {e}")))?;
            let dropped = page.dropped_through;
            page.events.retain(|e| e.position > dropped);
            Ok(page)
        })
    }

    /// Stream ids are the server's clock at each write: entries written before `before`
    /// go, oldest first.
    fn trim_events(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("FCALL");
            cmd.arg(wire::TRIM_EVENTS_FN)
                .arg(2)
                .arg(self.keys.events())
                .arg(self.keys.events_dropped())
                .arg(before.as_ms())
                .arg(limit);
            let n: usize = self.call(&cmd).await?;
            Ok(n)
        })
    }

    fn prune(&self, limit: usize) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("FCALL_RO");
            cmd.arg(wire::TOMBS_DUE_FN)
                .arg(1)
                .arg(self.keys.tombs())
                .arg(limit);
            let due: Vec<String> = self.call(&cmd).await?;
            if due.is_empty() {
                return Ok(0);
            }
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for m in &due {
                let parsed = m
                    .split_once(' ')
                    .and_then(|(a, t)| Some((AccountId::new(a).ok()?, t)));
                let Some((account, transfer)) = parsed else {
                    return Err(StoreError::Corrupted(format!("tombstone entry {m:?}")));
                };
                pipe.add_command(wire::prune_command(&self.keys, &account, transfer));
            }
            let mut dropped = 0;
            for r in self.pipeline(&pipe).await? {
                let s =
                    wire::strings(r.map_err(|e| classify(&e))?).map_err(StoreError::Corrupted)?;
                if s.get(1).map(String::as_str) == Some("1") {
                    dropped += 1;
                }
            }
            Ok(dropped)
        })
    }

    fn accounts<'a>(
        &'a self,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Account>, StoreError>> {
        Box::pin(async move {
            let ids = self
                .ids_after(self.keys.accounts(), after.map(|a| a.as_str()), limit)
                .await?;
            let ids: Vec<AccountId> = ids
                .iter()
                .map(|id| {
                    AccountId::new(id)
                        .map_err(|e| StoreError::Corrupted(format!("account id {id:?}: {e}")))
                })
                .collect::<Result<_, _>>()?;
            let keys: Vec<String> = ids.iter().map(|id| self.keys.account(id)).collect();
            let mut out = vec![];
            for (id, f) in ids.iter().zip(self.hgetall_each(&keys).await?) {
                if f.is_empty() {
                    continue; // a placeholder pruned since the index was read
                }
                let a = wire::account(id, &f)
                    .map_err(|m| StoreError::Corrupted(format!("account {id}: {m}")))?;
                out.push(a);
            }
            Ok(out)
        })
    }

    fn transfers<'a>(
        &'a self,
        after: Option<&'a TransferId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<TransferRecord>, StoreError>> {
        Box::pin(async move {
            let ids = self
                .ids_after(self.keys.transfers(), after.map(|t| t.as_str()), limit)
                .await?;
            self.transfers_by_id(&ids).await
        })
    }

    /// `HSETNX` keeps the first declaration of a code; the `HGET` after it in the same
    /// pipeline answers the one kept, this one's or an earlier one's.
    fn declare_asset<'a>(&'a self, asset: &'a Asset) -> BoxFuture<'a, Result<Asset, StoreError>> {
        Box::pin(async move {
            let (key, code) = (self.keys.assets(), asset.code.as_str());
            let mut pipe = redis::pipe();
            pipe.hset_nx(&key, code, asset.scale)
                .ignore()
                .hget(&key, code);
            let held = self.pipeline(&pipe).await?.into_iter().next();
            let held = held.unwrap_or(Ok(Value::Nil)).map_err(|e| classify(&e))?;
            decode_asset(&key, code, held)
        })
    }

    fn assets(&self) -> BoxFuture<'_, Result<Vec<Asset>, StoreError>> {
        Box::pin(async move {
            let key = self.keys.assets();
            let all: Value = self.call(redis::cmd("HGETALL").arg(&key)).await?;
            let all: BTreeMap<String, Value> = redis::from_redis_value(all)
                .map_err(|e| StoreError::Corrupted(format!("{key}: {e}")))?;
            all.into_iter()
                .map(|(code, scale)| decode_asset(&key, &code, scale))
                .collect()
        })
    }

    fn set_account_metadata<'a>(
        &'a self,
        account: &'a AccountId,
        metadata: &'a Metadata,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let (key, account) = (self.keys.metadata(), account.as_str());
            let cmd = if metadata.is_empty() {
                Cmd::hdel(&key, account)
            } else {
                let json = serde_json::to_string(metadata).expect("a map of strings");
                Cmd::hset(&key, account, json)
            };
            self.call::<Value>(&cmd).await.map(drop)
        })
    }

    fn account_metadata<'a>(
        &'a self,
        accounts: &'a [AccountId],
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        Box::pin(async move {
            if accounts.is_empty() {
                return Ok(vec![]);
            }
            let key = self.keys.metadata();
            let ids: Vec<&str> = accounts.iter().map(AccountId::as_str).collect();
            let held: Vec<Value> = self.call(redis::cmd("HMGET").arg(&key).arg(&ids)).await?;
            let mut out = vec![];
            for (id, json) in ids.iter().zip(held) {
                if json != Value::Nil {
                    out.push(decode_metadata(&key, id, json)?);
                }
            }
            Ok(out)
        })
    }

    /// The filter reads the shard's whole map (`HSCAN`, a page at a time so the server
    /// serves others between pages), keeping the first `limit` matches in id order.
    fn accounts_with_metadata<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        Box::pin(async move {
            let hash = self.keys.metadata();
            let mut found = BTreeMap::new();
            let mut cursor = "0".to_string();
            loop {
                let mut hscan = redis::cmd("HSCAN");
                hscan.arg(&hash).arg(&cursor).arg("COUNT").arg(1000);
                let (next, page): (String, BTreeMap<String, Value>) = self.call(&hscan).await?;
                for (id, json) in page {
                    if after.is_some_and(|a| id.as_str() <= a.as_str()) {
                        continue;
                    }
                    let (id, metadata) = decode_metadata(&hash, &id, json)?;
                    if metadata.get(key).map(String::as_str) == Some(value) {
                        found.insert(id, metadata);
                        if found.len() > limit {
                            found.pop_last();
                        }
                    }
                }
                if next == "0" {
                    break;
                }
                cursor = next;
            }
            Ok(found.into_iter().collect())
        })
    }
}

impl RedisStore {
    /// Ids in byte order strictly after `after`, at most `limit`, from an id index.
    async fn ids_after(
        &self,
        index: String,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let from = after.map_or_else(|| "-".to_string(), |a| format!("({a}"));
        self.call(
            redis::cmd("ZRANGEBYLEX")
                .arg(index)
                .arg(from)
                .arg("+")
                .arg("LIMIT")
                .arg(0)
                .arg(limit),
        )
        .await
    }
}
