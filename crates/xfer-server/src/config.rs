//! `xfer serve`'s configuration: defaults, then a TOML file (`--config`), then environment
//! variables (`XFER_*`), then flags; each later source wins. [`ServeArgs`] is both the flags
//! and the environment (clap reads the variable when the flag is absent); [`FileConfig`] is
//! the file. [`ServeConfig::resolve`] merges them and refuses what is unsafe.

use crate::auth::{Scope, Token, Tokens};
use std::net::SocketAddr;
use std::path::PathBuf;
use xfer_core::AssetCode;
use xfer_engine::{Match, Rule};

/// Flags of `xfer serve`, each also read from its environment variable.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ServeArgs {
    /// A TOML file with any of the settings below (names as the flags, with `_`).
    #[arg(long, env = "XFER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to listen on (serve). Anything but loopback needs at least one token.
    /// [default: 127.0.0.1:7700]
    #[arg(long, env = "XFER_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Where the shards live: `embedded` (a data directory, nothing to install),
    /// `postgres` (schemas `xfer_shard_N` in the databases of --postgres-url), `mysql`
    /// (databases `xfer_shard_N` on the servers of --mysql-url), `mongodb` (databases
    /// `xfer_shard_N` on the deployments of --mongodb-url) or `redis` (keys tagged
    /// `{xfer_shard_N}` on the servers of --redis-url). [default: embedded]
    #[arg(long, env = "XFER_STORE")]
    pub store: Option<StoreKind>,
    /// The embedded store's data directory (created if absent). [default: ./xfer-data]
    #[arg(long, env = "XFER_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Shards (fixed when the store is created; an existing store must be opened with its
    /// own count). [default: 4]
    #[arg(long, env = "XFER_SHARDS")]
    pub shards: Option<u16>,
    /// With --store postgres: a database URL, e.g. postgres://xfer@10.0.0.5/xfer. Repeat
    /// the flag (or separate with `;` in XFER_POSTGRES_URL) to spread the shards over
    /// several databases or servers: shard N lives in URL N mod the count, schema
    /// xfer_shard_N.
    #[arg(
        long = "postgres-url",
        env = "XFER_POSTGRES_URL",
        value_delimiter = ';',
        value_name = "URL",
        hide_env_values = true
    )]
    pub postgres_urls: Vec<String>,
    /// With --store mysql: a server URL, e.g. mysql://xfer:secret@10.0.0.7:3306 (MySQL 8 or
    /// MariaDB 10.6+). Repeat the flag (or separate with `;` in XFER_MYSQL_URL) to spread the
    /// shards over several servers: shard N lives on URL N mod the count, database
    /// xfer_shard_N.
    #[arg(
        long = "mysql-url",
        env = "XFER_MYSQL_URL",
        value_delimiter = ';',
        value_name = "URL",
        hide_env_values = true
    )]
    pub mysql_urls: Vec<String>,
    /// With --store mongodb: a connection string, e.g.
    /// mongodb://10.0.0.8:27017/?replicaSet=rs0 (a replica set, or mongos in front of a
    /// sharded cluster; MongoDB 4.2+). Repeat the flag (or separate with `;` in
    /// XFER_MONGODB_URL) to spread the shards over several deployments: shard N lives on URL
    /// N mod the count, database xfer_shard_N.
    #[arg(
        long = "mongodb-url",
        env = "XFER_MONGODB_URL",
        value_delimiter = ';',
        value_name = "URL",
        hide_env_values = true
    )]
    pub mongodb_urls: Vec<String>,
    /// With --store redis: a server URL, e.g. redis://10.0.0.6:6379. Repeat the flag (or
    /// separate with `;` in XFER_REDIS_URL) to spread the shards over several servers: shard
    /// N lives on URL N mod the count, its keys tagged {xfer_shard_N}. With --redis-cluster
    /// the URLs are nodes of one Redis Cluster, which places each shard's tag on a master.
    #[arg(
        long = "redis-url",
        env = "XFER_REDIS_URL",
        value_delimiter = ';',
        value_name = "URL",
        hide_env_values = true
    )]
    pub redis_urls: Vec<String>,
    /// The --redis-url nodes are one Redis Cluster.
    #[arg(long, env = "XFER_REDIS_CLUSTER")]
    pub redis_cluster: bool,
    /// A bearer token and its scopes, as `SECRET:read,write` (scopes: read, write, admin;
    /// admin grants write, write grants read). Repeat the flag, or separate with `;` in
    /// XFER_TOKENS. With no token, auth is off and only loopback is allowed.
    #[arg(
        long = "auth-token",
        env = "XFER_TOKENS",
        value_delimiter = ';',
        value_name = "SECRET:SCOPES",
        hide_env_values = true
    )]
    pub tokens: Vec<String>,
    /// Log lines as `text` or `json`. [default: text]
    #[arg(long, env = "XFER_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Log filter, e.g. `info` or `warn,xfer=debug`. [default: info]
    #[arg(long, env = "XFER_LOG")]
    pub log: Option<String>,
    /// How long an executor's claim on a transfer lasts, in ms. [default: 5000]
    #[arg(long, env = "XFER_LEASE_MS")]
    pub lease_ms: Option<u64>,
    /// The bound on clock differences between processes and stores, in ms. [default: 500]
    #[arg(long, env = "XFER_SKEW_MS")]
    pub skew_ms: Option<u64>,
    /// The wait between two sweeps for abandoned transfers, in ms. [default: 1000]
    #[arg(long, env = "XFER_SWEEP_INTERVAL_MS")]
    pub sweep_interval_ms: Option<u64>,
    /// A transfer whose owner lapsed this long ago counts as stuck, in ms. [default: 10000]
    #[arg(long, env = "XFER_STUCK_AFTER_MS")]
    pub stuck_after_ms: Option<u64>,
    /// Failed recoveries of one transfer in a row (in sweeps that finished others) before it
    /// is escalated to a person and left alone until re-driven; a protocol violation or a
    /// damaged record escalates at once. [default: 5]
    #[arg(long, env = "XFER_ESCALATE_AFTER")]
    pub escalate_after: Option<u32>,
    /// How long the change feed keeps an event, in hours; readers further behind get 410
    /// `cursor_expired`. [default: 168]
    #[arg(long, env = "XFER_EVENTS_RETENTION_HOURS")]
    pub events_retention_hours: Option<u64>,
    /// Publish the change feed to this NATS server's JetStream, e.g. nats://127.0.0.1:4222
    /// (at least once, each message's Nats-Msg-Id the event's id; the sink's cursor is kept
    /// in the data directory's `sinks/`).
    #[arg(long, env = "XFER_SINK_NATS")]
    pub sink_nats: Option<String>,
    /// With --sink-nats: the stream, created if missing. [default: XFER_EVENTS]
    #[arg(long, env = "XFER_SINK_NATS_STREAM")]
    pub sink_nats_stream: Option<String>,
    /// With --sink-nats: the subjects' prefix; an event goes to PREFIX.TYPE.
    /// [default: xfer.events]
    #[arg(long, env = "XFER_SINK_NATS_SUBJECT")]
    pub sink_nats_subject: Option<String>,
    /// Publish the change feed to this RabbitMQ broker, e.g.
    /// amqp://guest:guest@127.0.0.1:5672/%2f (persistent messages, publisher confirms, each
    /// message_id the event's id; the sink's cursor is kept in the data directory's `sinks/`).
    #[arg(long, env = "XFER_SINK_AMQP")]
    pub sink_amqp: Option<String>,
    /// With --sink-amqp: the durable topic exchange; the routing key is the event's type.
    /// [default: xfer.events]
    #[arg(long, env = "XFER_SINK_AMQP_EXCHANGE")]
    pub sink_amqp_exchange: Option<String>,
    /// With --sink-amqp: the durable queue bound to every type. [default: xfer.events]
    #[arg(long, env = "XFER_SINK_AMQP_QUEUE")]
    pub sink_amqp_queue: Option<String>,
    /// Attempts at delivering one event to a webhook endpoint (registered with POST
    /// /v1/webhooks) before it goes to the endpoint's dead letters. [default: 8]
    #[arg(long, env = "XFER_WEBHOOK_ATTEMPTS")]
    pub webhook_attempts: Option<u32>,
    /// The wait after a webhook attempt's first failure, in ms; doubled after each next
    /// one, jittered. [default: 500]
    #[arg(long, env = "XFER_WEBHOOK_BACKOFF_MS")]
    pub webhook_backoff_ms: Option<u64>,
    /// The longest wait between two webhook attempts, in ms. [default: 60000]
    #[arg(long, env = "XFER_WEBHOOK_BACKOFF_MAX_MS")]
    pub webhook_backoff_max_ms: Option<u64>,
    /// How long one webhook attempt (connect, send, the answer) may take, in ms.
    /// [default: 10000]
    #[arg(long, env = "XFER_WEBHOOK_TIMEOUT_MS")]
    pub webhook_timeout_ms: Option<u64>,
    /// Failed attempts in a row at one store call before the transfer is left to the
    /// sweeper (it is never lost: the next pass tries again). [default: 8]
    #[arg(long, env = "XFER_RETRY_ATTEMPTS")]
    pub retry_attempts: Option<u32>,
    /// The wait after a store call's first failure, in ms; doubled after each next one,
    /// jittered. [default: 10]
    #[arg(long, env = "XFER_RETRY_BACKOFF_MS")]
    pub retry_backoff_ms: Option<u64>,
    /// The longest wait between two attempts at a store call, in ms. [default: 1000]
    #[arg(long, env = "XFER_RETRY_BACKOFF_MAX_MS")]
    pub retry_backoff_max_ms: Option<u64>,
    /// The largest request body, in bytes. [default: 4194304]
    #[arg(long, env = "XFER_BODY_LIMIT_BYTES")]
    pub body_limit_bytes: Option<usize>,
    /// At most this many store calls per shard in flight; concurrent requests' steps are
    /// merged into them (group commit across clients). [default: 4]
    #[arg(long, env = "XFER_STORE_CALLS_PER_SHARD")]
    pub store_calls_per_shard: Option<usize>,
    /// Open HTTP connections at most; one more is answered `503` with `Retry-After` and
    /// closed. With the body limit, it bounds the memory requests can take. [default: 1024]
    #[arg(long, env = "XFER_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// On SIGTERM/SIGINT, wait this long for transfers answered "accepted" to finish before
    /// leaving them to recovery, in ms. [default: 5000]
    #[arg(long, env = "XFER_SHUTDOWN_GRACE_MS")]
    pub shutdown_grace_ms: Option<u64>,
}

/// Which store holds the shards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// The embedded store in the data directory (--data-dir).
    #[default]
    Embedded,
    /// PostgreSQL databases (--postgres-url).
    Postgres,
    /// MySQL or MariaDB servers (--mysql-url).
    Mysql,
    /// MongoDB replica sets or sharded clusters (--mongodb-url).
    Mongodb,
    /// Redis servers, or one Redis Cluster (--redis-url, --redis-cluster).
    Redis,
}

impl StoreKind {
    /// The name the flag and the file use.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Embedded => "embedded",
            StoreKind::Postgres => "postgres",
            StoreKind::Mysql => "mysql",
            StoreKind::Mongodb => "mongodb",
            StoreKind::Redis => "redis",
        }
    }
}

/// One shard of an explicit layout (`[[shard]]` in the file).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, tag = "store", rename_all = "snake_case")]
pub enum ShardSpec {
    /// One of the embedded store's shards in `data_dir` (the embedded entries, in order, are
    /// its shards 0, 1, …).
    Embedded,
    /// A PostgreSQL schema.
    Postgres {
        /// The database.
        url: String,
        /// The schema; by default `xfer_shard_N` with N the shard's index in the list.
        schema: Option<String>,
    },
    /// A MySQL or MariaDB database.
    Mysql {
        /// The server.
        url: String,
        /// The database; by default `xfer_shard_N` with N the shard's index in the list.
        database: Option<String>,
    },
    /// A MongoDB database.
    Mongodb {
        /// The deployment (a replica set, or mongos).
        url: String,
        /// The database; by default `xfer_shard_N` with N the shard's index in the list.
        database: Option<String>,
    },
    /// Keys on a Redis server or Cluster under one hash tag.
    Redis {
        /// The server (give this or `cluster`).
        url: Option<String>,
        /// Nodes of a Redis Cluster (give this or `url`).
        #[serde(default)]
        cluster: Vec<String>,
        /// The hash tag; by default `xfer_shard_N` with N the shard's index in the list.
        prefix: Option<String>,
    },
}

impl ShardSpec {
    /// The kind of store, as the file names it (`store = "…"`).
    pub fn kind(&self) -> &'static str {
        match self {
            ShardSpec::Embedded => "embedded",
            ShardSpec::Postgres { .. } => "postgres",
            ShardSpec::Mysql { .. } => "mysql",
            ShardSpec::Mongodb { .. } => "mongodb",
            ShardSpec::Redis { .. } => "redis",
        }
    }
}

/// A placement rule as the file gives it (`[[route]]`): accounts whose id starts with
/// `prefix`, or of `asset`, live on `shards` (indexes into the shard list), spread by hash.
/// [`ServeConfig::merge`] turns it into the router's [`Rule`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteSpec {
    prefix: Option<String>,
    asset: Option<String>,
    shards: Vec<usize>,
}

impl RouteSpec {
    /// The rule, or why `route[i]` is refused (shard indexes are checked against the
    /// layout in [`ServeConfig::check`]).
    fn rule(&self, i: usize) -> Result<Rule, ConfigError> {
        let matches = match (&self.prefix, &self.asset) {
            (Some(p), None) => Match::Prefix(p.clone()),
            (None, Some(a)) => Match::Asset(
                AssetCode::new(a, "asset")
                    .map_err(|e| ConfigError(format!("route[{i}].asset: {}", e.message)))?,
            ),
            _ => {
                return Err(ConfigError(format!(
                    "route[{i}]: give exactly one of prefix and asset"
                )))
            }
        };
        if self.shards.is_empty() {
            return Err(ConfigError(format!(
                "route[{i}].shards: needs at least one"
            )));
        }
        Ok(Rule {
            matches,
            shards: self.shards.clone(),
        })
    }
}

/// Log line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The configuration file: every field optional.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    listen: Option<SocketAddr>,
    store: Option<StoreKind>,
    data_dir: Option<PathBuf>,
    shards: Option<u16>,
    #[serde(default)]
    postgres_urls: Vec<String>,
    #[serde(default)]
    mysql_urls: Vec<String>,
    #[serde(default)]
    mongodb_urls: Vec<String>,
    #[serde(default)]
    redis_urls: Vec<String>,
    redis_cluster: Option<bool>,
    /// An explicit shard list, each with its own store (mixed deployments).
    #[serde(default)]
    shard: Vec<ShardSpec>,
    /// Placement rules: matching accounts live on the listed shards.
    #[serde(default)]
    route: Vec<RouteSpec>,
    #[serde(default)]
    tokens: Vec<FileToken>,
    log_format: Option<LogFormat>,
    log: Option<String>,
    lease_ms: Option<u64>,
    skew_ms: Option<u64>,
    sweep_interval_ms: Option<u64>,
    stuck_after_ms: Option<u64>,
    escalate_after: Option<u32>,
    events_retention_hours: Option<u64>,
    sink_nats: Option<String>,
    sink_nats_stream: Option<String>,
    sink_nats_subject: Option<String>,
    sink_amqp: Option<String>,
    sink_amqp_exchange: Option<String>,
    sink_amqp_queue: Option<String>,
    webhook_attempts: Option<u32>,
    webhook_backoff_ms: Option<u64>,
    webhook_backoff_max_ms: Option<u64>,
    webhook_timeout_ms: Option<u64>,
    retry_attempts: Option<u32>,
    retry_backoff_ms: Option<u64>,
    retry_backoff_max_ms: Option<u64>,
    body_limit_bytes: Option<usize>,
    store_calls_per_shard: Option<usize>,
    max_connections: Option<usize>,
    shutdown_grace_ms: Option<u64>,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToken {
    token: String,
    scopes: Vec<String>,
}

/// Everything `xfer serve` runs with.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where the shards live.
    pub store: StoreKind,
    /// The data directory (embedded store).
    pub data_dir: PathBuf,
    /// Shards.
    pub shards: u16,
    /// The databases of the PostgreSQL store; shard N in URL N mod the count.
    pub postgres_urls: Vec<String>,
    /// The servers of the MySQL store; shard N on URL N mod the count.
    pub mysql_urls: Vec<String>,
    /// The deployments of the MongoDB store; shard N on URL N mod the count.
    pub mongodb_urls: Vec<String>,
    /// The servers of the Redis store; shard N on URL N mod the count, or all on one
    /// Cluster when `redis_cluster`.
    pub redis_urls: Vec<String>,
    /// `redis_urls` are nodes of one Redis Cluster.
    pub redis_cluster: bool,
    /// An explicit shard list (mixed stores); when set, `store`, `shards` and the stores'
    /// URLs are not used.
    pub layout: Vec<ShardSpec>,
    /// Placement rules, checked in order; other accounts are spread over every shard.
    pub routes: Vec<Rule>,
    /// Bearer tokens; empty means auth is off (loopback only).
    pub tokens: Tokens,
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter.
    pub log: String,
    /// Protocol timing.
    pub lease_ms: u64,
    /// Clock skew bound.
    pub skew_ms: u64,
    /// Sweep interval.
    pub sweep_interval_ms: u64,
    /// When an unfinished transfer counts as stuck.
    pub stuck_after_ms: u64,
    /// Failed recoveries in a row before a transfer is escalated.
    pub escalate_after: u32,
    /// How long the change feed keeps an event.
    pub events_retention_hours: u64,
    /// The change feed's NATS JetStream sink, if any.
    pub sink_nats: Option<crate::sink::nats::NatsConfig>,
    /// The change feed's RabbitMQ sink, if any.
    pub sink_amqp: Option<crate::sink::amqp::AmqpConfig>,
    /// How webhook deliveries are attempted.
    pub webhooks: crate::sink::webhook::WebhookSettings,
    /// How store calls that failed are tried again.
    pub retry: xfer_engine::RetryPolicy,
    /// Largest body.
    pub body_limit_bytes: usize,
    /// Store calls in flight per shard.
    pub store_calls_per_shard: usize,
    /// Open HTTP connections at most.
    pub max_connections: usize,
    /// Shutdown grace.
    pub shutdown_grace_ms: u64,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7700)),
            store: StoreKind::Embedded,
            data_dir: PathBuf::from("xfer-data"),
            shards: 4,
            postgres_urls: Vec::new(),
            mysql_urls: Vec::new(),
            mongodb_urls: Vec::new(),
            redis_urls: Vec::new(),
            redis_cluster: false,
            layout: Vec::new(),
            routes: Vec::new(),
            tokens: Tokens::default(),
            log_format: LogFormat::Text,
            log: "info".to_string(),
            lease_ms: 5_000,
            skew_ms: 500,
            sweep_interval_ms: 1_000,
            stuck_after_ms: 10_000,
            escalate_after: xfer_engine::sweeper::ESCALATE_AFTER_DEFAULT,
            events_retention_hours: 168,
            sink_nats: None,
            sink_amqp: None,
            webhooks: crate::sink::webhook::WebhookSettings::default(),
            retry: xfer_engine::RetryPolicy::default(),
            body_limit_bytes: 4 << 20,
            store_calls_per_shard: 4,
            max_connections: 1_024,
            shutdown_grace_ms: 5_000,
        }
    }
}

/// A configuration that cannot be used, and why.
#[derive(Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl ServeConfig {
    /// How many shards there are (the explicit list's length, or `shards`).
    pub fn shard_count(&self) -> usize {
        if self.layout.is_empty() {
            usize::from(self.shards)
        } else {
            self.layout.len()
        }
    }

    /// Merges defaults, the file named by `--config` (if any), and the flags/environment.
    pub fn resolve(args: &ServeArgs) -> Result<ServeConfig, ConfigError> {
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| ConfigError(format!("config file {}: {e}", path.display())))?;
                toml::from_str::<FileConfig>(&text)
                    .map_err(|e| ConfigError(format!("config file {}: {e}", path.display())))?
            }
            None => FileConfig::default(),
        };
        ServeConfig::merge(file, args)
    }

    /// Merges a parsed file and the flags over the defaults, then checks the result.
    pub fn merge(file: FileConfig, args: &ServeArgs) -> Result<ServeConfig, ConfigError> {
        let d = ServeConfig::default();
        let mut tokens = Vec::new();
        for (i, t) in file.tokens.iter().enumerate() {
            let scopes = t
                .scopes
                .iter()
                .map(|s| Scope::parse(s))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ConfigError(format!("config file: tokens[{i}].scopes: {e}")))?;
            tokens.push(
                Token::new(&t.token, scopes)
                    .map_err(|e| ConfigError(format!("config file: tokens[{i}]: {e}")))?,
            );
        }
        for (i, t) in args.tokens.iter().enumerate() {
            tokens.push(
                Token::parse_flag(t)
                    .map_err(|e| ConfigError(format!("--auth-token #{}: {e}", i + 1)))?,
            );
        }
        if !file.shard.is_empty() {
            let set = [
                ("store", args.store.is_some() || file.store.is_some()),
                ("shards", args.shards.is_some() || file.shards.is_some()),
                (
                    "postgres_urls",
                    !args.postgres_urls.is_empty() || !file.postgres_urls.is_empty(),
                ),
                (
                    "mysql_urls",
                    !args.mysql_urls.is_empty() || !file.mysql_urls.is_empty(),
                ),
                (
                    "mongodb_urls",
                    !args.mongodb_urls.is_empty() || !file.mongodb_urls.is_empty(),
                ),
                (
                    "redis_urls",
                    !args.redis_urls.is_empty() || !file.redis_urls.is_empty(),
                ),
            ];
            if let Some((name, _)) = set.iter().find(|(_, on)| *on) {
                return Err(ConfigError(format!(
                    "{name} is set together with a [[shard]] list: the list says where each \
                     shard lives; remove {name}"
                )));
            }
        }
        let cfg = ServeConfig {
            listen: args.listen.or(file.listen).unwrap_or(d.listen),
            data_dir: args
                .data_dir
                .clone()
                .or(file.data_dir)
                .unwrap_or(d.data_dir),
            shards: args.shards.or(file.shards).unwrap_or(d.shards),
            store: args.store.or(file.store).unwrap_or(d.store),
            postgres_urls: if args.postgres_urls.is_empty() {
                file.postgres_urls
            } else {
                args.postgres_urls.clone()
            },
            mysql_urls: if args.mysql_urls.is_empty() {
                file.mysql_urls
            } else {
                args.mysql_urls.clone()
            },
            mongodb_urls: if args.mongodb_urls.is_empty() {
                file.mongodb_urls
            } else {
                args.mongodb_urls.clone()
            },
            redis_urls: if args.redis_urls.is_empty() {
                file.redis_urls
            } else {
                args.redis_urls.clone()
            },
            redis_cluster: args.redis_cluster || file.redis_cluster.unwrap_or(false),
            layout: file.shard,
            routes: file
                .route
                .iter()
                .enumerate()
                .map(|(i, r)| r.rule(i))
                .collect::<Result<_, _>>()?,
            tokens: Tokens::new(tokens),
            log_format: args.log_format.or(file.log_format).unwrap_or(d.log_format),
            log: args.log.clone().or(file.log).unwrap_or(d.log),
            lease_ms: args.lease_ms.or(file.lease_ms).unwrap_or(d.lease_ms),
            skew_ms: args.skew_ms.or(file.skew_ms).unwrap_or(d.skew_ms),
            sweep_interval_ms: args
                .sweep_interval_ms
                .or(file.sweep_interval_ms)
                .unwrap_or(d.sweep_interval_ms),
            stuck_after_ms: args
                .stuck_after_ms
                .or(file.stuck_after_ms)
                .unwrap_or(d.stuck_after_ms),
            escalate_after: args
                .escalate_after
                .or(file.escalate_after)
                .unwrap_or(d.escalate_after)
                .max(1),
            events_retention_hours: args
                .events_retention_hours
                .or(file.events_retention_hours)
                .unwrap_or(d.events_retention_hours),
            sink_nats: args.sink_nats.clone().or(file.sink_nats).map(|url| {
                crate::sink::nats::NatsConfig {
                    url,
                    stream: args
                        .sink_nats_stream
                        .clone()
                        .or(file.sink_nats_stream.clone())
                        .unwrap_or_else(|| "XFER_EVENTS".into()),
                    subject: args
                        .sink_nats_subject
                        .clone()
                        .or(file.sink_nats_subject.clone())
                        .unwrap_or_else(|| "xfer.events".into()),
                }
            }),
            sink_amqp: args.sink_amqp.clone().or(file.sink_amqp).map(|url| {
                crate::sink::amqp::AmqpConfig {
                    url,
                    exchange: args
                        .sink_amqp_exchange
                        .clone()
                        .or(file.sink_amqp_exchange.clone())
                        .unwrap_or_else(|| "xfer.events".into()),
                    queue: args
                        .sink_amqp_queue
                        .clone()
                        .or(file.sink_amqp_queue.clone())
                        .unwrap_or_else(|| "xfer.events".into()),
                }
            }),
            webhooks: crate::sink::webhook::WebhookSettings {
                attempts: args
                    .webhook_attempts
                    .or(file.webhook_attempts)
                    .unwrap_or(d.webhooks.attempts),
                backoff_ms: args
                    .webhook_backoff_ms
                    .or(file.webhook_backoff_ms)
                    .unwrap_or(d.webhooks.backoff_ms),
                backoff_max_ms: args
                    .webhook_backoff_max_ms
                    .or(file.webhook_backoff_max_ms)
                    .unwrap_or(d.webhooks.backoff_max_ms),
                timeout_ms: args
                    .webhook_timeout_ms
                    .or(file.webhook_timeout_ms)
                    .unwrap_or(d.webhooks.timeout_ms),
            },
            retry: xfer_engine::RetryPolicy {
                attempts_max: args
                    .retry_attempts
                    .or(file.retry_attempts)
                    .unwrap_or(d.retry.attempts_max),
                backoff_ms_min: args
                    .retry_backoff_ms
                    .or(file.retry_backoff_ms)
                    .unwrap_or(d.retry.backoff_ms_min),
                backoff_ms_max: args
                    .retry_backoff_max_ms
                    .or(file.retry_backoff_max_ms)
                    .unwrap_or(d.retry.backoff_ms_max),
            },
            body_limit_bytes: args
                .body_limit_bytes
                .or(file.body_limit_bytes)
                .unwrap_or(d.body_limit_bytes),
            store_calls_per_shard: args
                .store_calls_per_shard
                .or(file.store_calls_per_shard)
                .unwrap_or(d.store_calls_per_shard),
            max_connections: args
                .max_connections
                .or(file.max_connections)
                .unwrap_or(d.max_connections),
            shutdown_grace_ms: args
                .shutdown_grace_ms
                .or(file.shutdown_grace_ms)
                .unwrap_or(d.shutdown_grace_ms),
        };
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> Result<(), ConfigError> {
        if !self.listen.ip().is_loopback() && self.tokens.is_empty() {
            return Err(ConfigError(format!(
                "refusing to listen on {} without authentication: add a token (--auth-token \
                 SECRET:read,write or XFER_TOKENS) or listen on a loopback address",
                self.listen
            )));
        }
        let positive = [
            ("shards", self.shards as u64),
            ("lease_ms", self.lease_ms),
            ("sweep_interval_ms", self.sweep_interval_ms),
            ("events_retention_hours", self.events_retention_hours),
            ("body_limit_bytes", self.body_limit_bytes as u64),
            ("store_calls_per_shard", self.store_calls_per_shard as u64),
            ("max_connections", self.max_connections as u64),
            ("webhook_attempts", u64::from(self.webhooks.attempts)),
            ("webhook_timeout_ms", self.webhooks.timeout_ms),
            ("retry_attempts", u64::from(self.retry.attempts_max)),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(ConfigError(format!("{name} must be at least 1")));
            }
        }
        if self.retry.backoff_ms_max < self.retry.backoff_ms_min {
            return Err(ConfigError(format!(
                "retry_backoff_max_ms: {} is less than retry_backoff_ms ({})",
                self.retry.backoff_ms_max, self.retry.backoff_ms_min
            )));
        }
        if self.webhooks.backoff_max_ms < self.webhooks.backoff_ms {
            return Err(ConfigError(format!(
                "webhook_backoff_max_ms: {} is less than webhook_backoff_ms ({})",
                self.webhooks.backoff_max_ms, self.webhooks.backoff_ms
            )));
        }
        if self.shards > 256 {
            return Err(ConfigError(format!(
                "shards: {} is more than 256",
                self.shards
            )));
        }
        let count = self.shard_count();
        for (i, r) in self.routes.iter().enumerate() {
            if let Some(s) = r.shards.iter().find(|s| **s >= count) {
                return Err(ConfigError(format!(
                    "route[{i}].shards: shard {s} does not exist (there are {count})"
                )));
            }
        }
        if !self.layout.is_empty() {
            if self.layout.len() > 256 {
                return Err(ConfigError("shard: more than 256".into()));
            }
            for (i, s) in self.layout.iter().enumerate() {
                if let ShardSpec::Redis { url, cluster, .. } = s {
                    if url.is_some() != cluster.is_empty() {
                        return Err(ConfigError(format!(
                            "shard[{i}]: a redis shard needs exactly one of url (a server) and \
                             cluster (the nodes of a Redis Cluster)"
                        )));
                    }
                }
            }
            return Ok(());
        }
        let needs = |kind: StoreKind, set: bool, name: &str, flag: &str, env: &str| match (
            self.store == kind,
            set,
        ) {
            (true, false) => Err(ConfigError(format!(
                "store {name} needs at least one --{flag} ({env})"
            ))),
            (false, true) => Err(ConfigError(format!(
                "{}s is set but the store is {}: add --store {name}",
                flag.replace('-', "_"),
                self.store.name()
            ))),
            _ => Ok(()),
        };
        needs(
            StoreKind::Postgres,
            !self.postgres_urls.is_empty(),
            "postgres",
            "postgres-url",
            "XFER_POSTGRES_URL",
        )?;
        needs(
            StoreKind::Mysql,
            !self.mysql_urls.is_empty(),
            "mysql",
            "mysql-url",
            "XFER_MYSQL_URL",
        )?;
        needs(
            StoreKind::Mongodb,
            !self.mongodb_urls.is_empty(),
            "mongodb",
            "mongodb-url",
            "XFER_MONGODB_URL",
        )?;
        needs(
            StoreKind::Redis,
            !self.redis_urls.is_empty(),
            "redis",
            "redis-url",
            "XFER_REDIS_URL",
        )?;
        if self.redis_cluster && self.store != StoreKind::Redis {
            return Err(ConfigError(
                "redis_cluster is set but the store is not redis: add --store redis".into(),
            ));
        }
        if let Err(e) = self.log.parse::<tracing_subscriber::filter::Targets>() {
            return Err(ConfigError(format!("log: {:?}: {e}", self.log)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_file_which_wins_over_defaults() {
        let file: FileConfig = toml::from_str(
            "listen = \"127.0.0.1:9000\"\nshards = 8\nlease_ms = 7000\n\
             [[tokens]]\ntoken = \"0123456789abcdef\"\nscopes = [\"read\"]\n",
        )
        .unwrap();
        let args = ServeArgs {
            shards: Some(2),
            ..ServeArgs::default()
        };
        let cfg = ServeConfig::merge(file, &args).unwrap();
        assert_eq!(cfg.listen.port(), 9000);
        assert_eq!((cfg.shards, cfg.lease_ms, cfg.skew_ms), (2, 7000, 500));
        assert!(!cfg.tokens.is_empty());
    }

    #[test]
    fn the_retry_policy_comes_from_flags_and_the_file_and_is_checked() {
        let file: FileConfig =
            toml::from_str("retry_attempts = 3\nretry_backoff_max_ms = 5000\n").unwrap();
        let args = ServeArgs {
            retry_attempts: Some(20),
            retry_backoff_ms: Some(50),
            ..ServeArgs::default()
        };
        let r = ServeConfig::merge(file, &args).unwrap().retry;
        assert_eq!(
            (r.attempts_max, r.backoff_ms_min, r.backoff_ms_max),
            (20, 50, 5_000)
        );
        let d = ServeConfig::merge(FileConfig::default(), &ServeArgs::default()).unwrap();
        assert_eq!(d.retry, xfer_engine::RetryPolicy::default());
        for (text, needle) in [
            ("retry_attempts = 0\n", "retry_attempts must be at least 1"),
            (
                "retry_backoff_ms = 900\nretry_backoff_max_ms = 800\n",
                "retry_backoff_max_ms: 800 is less",
            ),
        ] {
            let file: FileConfig = toml::from_str(text).unwrap();
            let e = ServeConfig::merge(file, &ServeArgs::default()).unwrap_err();
            assert!(e.to_string().contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn webhook_settings_come_from_flags_and_the_file_and_are_checked() {
        let file: FileConfig =
            toml::from_str("webhook_attempts = 3\nwebhook_backoff_ms = 20\n").unwrap();
        let args = ServeArgs {
            webhook_attempts: Some(4),
            webhook_timeout_ms: Some(250),
            ..ServeArgs::default()
        };
        let w = ServeConfig::merge(file, &args).unwrap().webhooks;
        assert_eq!(
            (w.attempts, w.backoff_ms, w.backoff_max_ms, w.timeout_ms),
            (4, 20, 60_000, 250)
        );
        let d = ServeConfig::merge(FileConfig::default(), &ServeArgs::default()).unwrap();
        assert_eq!(d.webhooks, crate::sink::webhook::WebhookSettings::default());
        for (text, needle) in [
            (
                "webhook_attempts = 0\n",
                "webhook_attempts must be at least 1",
            ),
            (
                "webhook_timeout_ms = 0\n",
                "webhook_timeout_ms must be at least 1",
            ),
            (
                "webhook_backoff_ms = 900\nwebhook_backoff_max_ms = 800\n",
                "webhook_backoff_max_ms: 800 is less",
            ),
        ] {
            let e = ServeConfig::merge(toml::from_str(text).unwrap(), &ServeArgs::default())
                .unwrap_err();
            assert!(e.0.contains(needle), "{e}");
        }
    }

    #[test]
    fn a_public_address_needs_a_token() {
        let args = ServeArgs {
            listen: Some("0.0.0.0:7700".parse().unwrap()),
            ..ServeArgs::default()
        };
        let e = ServeConfig::merge(FileConfig::default(), &args).unwrap_err();
        assert!(e.0.contains("without authentication"), "{e}");
        let args = ServeArgs {
            tokens: vec!["0123456789abcdef:read".into()],
            ..args
        };
        assert!(ServeConfig::merge(FileConfig::default(), &args).is_ok());
    }

    #[test]
    fn unknown_file_keys_and_bad_scopes_are_named() {
        let e = toml::from_str::<FileConfig>("listne = \"x\"").unwrap_err();
        assert!(e.to_string().contains("listne"), "{e}");
        let file: FileConfig =
            toml::from_str("[[tokens]]\ntoken = \"0123456789abcdef\"\nscopes = [\"root\"]\n")
                .unwrap();
        let e = ServeConfig::merge(file, &ServeArgs::default()).unwrap_err();
        assert!(e.0.contains("tokens[0].scopes"), "{e}");
    }

    #[test]
    fn the_postgres_store_needs_a_url_and_a_url_needs_the_postgres_store() {
        let args = ServeArgs {
            store: Some(StoreKind::Postgres),
            ..ServeArgs::default()
        };
        let e = ServeConfig::merge(FileConfig::default(), &args).unwrap_err();
        assert!(e.0.contains("--postgres-url"), "{e}");
        let file: FileConfig =
            toml::from_str("postgres_urls = [\"postgres://x@127.0.0.1/a\"]\n").unwrap();
        let e = ServeConfig::merge(file.clone(), &ServeArgs::default()).unwrap_err();
        assert!(e.0.contains("--store postgres"), "{e}");
        let cfg = ServeConfig::merge(file, &args).unwrap();
        assert_eq!(cfg.postgres_urls.len(), 1);
    }

    #[test]
    fn the_mysql_and_mongodb_stores_need_a_url_and_a_url_needs_its_store() {
        for (kind, name, key) in [
            (StoreKind::Mysql, "mysql", "mysql_urls"),
            (StoreKind::Mongodb, "mongodb", "mongodb_urls"),
        ] {
            let args = ServeArgs {
                store: Some(kind),
                ..ServeArgs::default()
            };
            let e = ServeConfig::merge(FileConfig::default(), &args).unwrap_err();
            assert!(e.0.contains(&format!("--{name}-url")), "{e}");
            let file: FileConfig =
                toml::from_str(&format!("{key} = [\"{name}://h:1\"]\n")).unwrap();
            let e = ServeConfig::merge(file.clone(), &ServeArgs::default()).unwrap_err();
            assert!(e.0.contains(&format!("--store {name}")), "{e}");
            let cfg = ServeConfig::merge(file, &args).unwrap();
            assert_eq!((cfg.store.name(), cfg.shard_count()), (name, 4));
            // In a shard list, with the database named or not; nothing else beside it.
            let list = format!(
                "[[shard]]\nstore = \"{name}\"\nurl = \"{name}://h:1\"\ndatabase = \"points\"\n\
                 [[shard]]\nstore = \"{name}\"\nurl = \"{name}://h:2\"\n"
            );
            let cfg =
                ServeConfig::merge(toml::from_str(&list).unwrap(), &ServeArgs::default()).unwrap();
            assert_eq!(cfg.shard_count(), 2);
            let stray = format!("{list}schema = \"x\"\n");
            assert!(
                toml::from_str::<FileConfig>(&stray).is_err(),
                "{name}: a stray key"
            );
            let extra = format!("{key} = [\"{name}://h:1\"]\n{list}");
            let e = ServeConfig::merge(toml::from_str(&extra).unwrap(), &ServeArgs::default())
                .unwrap_err();
            assert!(
                e.0.contains(&format!("{key} is set together with a [[shard]] list")),
                "{e}"
            );
        }
    }

    #[test]
    fn the_redis_store_needs_a_url_and_a_cluster_needs_the_redis_store() {
        let args = ServeArgs {
            store: Some(StoreKind::Redis),
            ..ServeArgs::default()
        };
        let e = ServeConfig::merge(FileConfig::default(), &args).unwrap_err();
        assert!(e.0.contains("--redis-url"), "{e}");
        let file: FileConfig =
            toml::from_str("redis_urls = [\"redis://127.0.0.1:7001\"]\nredis_cluster = true\n")
                .unwrap();
        let e = ServeConfig::merge(file.clone(), &ServeArgs::default()).unwrap_err();
        assert!(e.0.contains("--store redis"), "{e}");
        let cfg = ServeConfig::merge(file, &args).unwrap();
        assert!(cfg.redis_cluster && cfg.redis_urls.len() == 1);
        let parse = |t: &str| ServeConfig::merge(toml::from_str(t).unwrap(), &ServeArgs::default());
        let e = parse("[[shard]]\nstore = \"redis\"\n").unwrap_err();
        assert!(
            e.0.contains("shard[0]: a redis shard needs exactly one of url"),
            "{e}"
        );
        let both =
            "[[shard]]\nstore = \"redis\"\nurl = \"redis://h:1\"\ncluster = [\"redis://h:2\"]\n";
        assert!(parse(both).is_err());
        let ok = "[[shard]]\nstore = \"redis\"\ncluster = [\"redis://h:2\"]\nprefix = \"points\"\n";
        assert_eq!(parse(ok).unwrap().shard_count(), 1);
    }

    #[test]
    fn shard_lists_and_routes_are_checked() {
        let parse = |t: &str| ServeConfig::merge(toml::from_str(t).unwrap(), &ServeArgs::default());
        let two = "[[shard]]\nstore = \"embedded\"\n[[shard]]\nstore = \"postgres\"\nurl = \"postgres://h/d\"\n";
        let cfg = parse(&format!(
            "{two}[[route]]\nprefix = \"points:\"\nshards = [1]\n"
        ))
        .unwrap();
        assert_eq!((cfg.shard_count(), cfg.routes.len()), (2, 1));
        let e = parse(&format!("{two}[[route]]\nprefix = \"p:\"\nshards = [2]\n")).unwrap_err();
        assert!(
            e.0.contains("route[0].shards: shard 2 does not exist"),
            "{e}"
        );
        let e = parse(&format!(
            "{two}[[route]]\nprefix = \"p:\"\nasset = \"USD\"\nshards = [0]\n"
        ))
        .unwrap_err();
        assert!(e.0.contains("exactly one of prefix and asset"), "{e}");
        let e = parse(&format!("{two}[[route]]\nasset = \"us d\"\nshards = [0]\n")).unwrap_err();
        assert!(e.0.contains("route[0].asset"), "{e}");
        let e = parse(&format!("shards = 3\n{two}")).unwrap_err();
        assert!(
            e.0.contains("shards is set together with a [[shard]] list"),
            "{e}"
        );
        let e = toml::from_str::<FileConfig>("[[shard]]\nstore = \"cassandra\"\n").unwrap_err();
        assert!(e.to_string().contains("cassandra"), "{e}");
    }
}
