//! The connection pool, the migrations and the [`Store`] calls.

use crate::wire;
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use std::time::Duration;
use tokio_postgres::NoTls;
use xfer_core::{Account, AccountId, Asset, Timestamp, TransferId, TransferRecord};
use xfer_store::database::{plain_name, OpenError};
use xfer_store::{
    reply_json, BoxFuture, Event, EventKind, EventPage, FeedPosition, HistoryPage, Metadata, Op,
    Reply, Store, StoreError,
};

/// The backend's name in errors.
const STORE: &str = "postgres";
/// Where one shard lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresConfig {
    /// A libpq-style URL or key=value string, e.g. `postgres://xfer@127.0.0.1:5432/xfer`.
    pub url: String,
    /// The schema holding the shard's tables (created if missing); several shards may share
    /// a database in different schemas.
    pub schema: String,
    /// Connections in the pool: the most batches in flight at once to this shard.
    pub pool_size: usize,
    /// How long to wait for a connection (to connect, or for a free one) before a call
    /// answers `Unavailable`.
    pub connect_timeout: Duration,
    /// How long a statement may take before the call answers `Indeterminate` (the server
    /// may still apply it; every step is idempotent, so the caller retries) and its
    /// connection is discarded. Guards against a server or network that stops answering
    /// without closing the connection.
    pub call_timeout: Duration,
}

impl PostgresConfig {
    /// `url` and `schema` with the default pool (8 connections, 5 s to connect, 30 s per
    /// call).
    pub fn new(url: impl Into<String>, schema: impl Into<String>) -> PostgresConfig {
        PostgresConfig {
            url: url.into(),
            schema: schema.into(),
            pool_size: 8,
            connect_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(30),
        }
    }
}

/// The migrations, in order; the schema's `migrations` table records which have run.
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("schema.sql")),
    (2, include_str!("migration_2.sql")),
    (3, include_str!("migration_3.sql")),
    (4, include_str!("migration_4.sql")),
    (5, include_str!("migration_5.sql")),
    (6, include_str!("migration_6.sql")),
    (7, include_str!("migration_7.sql")),
    (8, include_str!("migration_8.sql")),
    (9, include_str!("migration_9.sql")),
    (10, include_str!("migration_10.sql")),
    (11, include_str!("migration_11.sql")),
];

const EXECUTE: &str = "SELECT r::text FROM execute($1::text::jsonb) AS r";
const SCAN_DUE: &str = "SELECT to_jsonb(t)::text FROM transfers t \
     WHERE wake_at <= $1 ORDER BY wake_at LIMIT $2";
const HISTORY: &str = "SELECT seq, transfer FROM history \
     WHERE account = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3";
const PRUNE: &str = "SELECT prune($1)";
/// Events after a position, of transactions older than every one still running
/// (`migration_5.sql`).
const EVENTS: &str = "SELECT xid::text, seq, transfer, kind, at, refund FROM events \
     WHERE (xid, seq) > ($1::text::xid8, $2) \
       AND xid < pg_snapshot_xmin(pg_current_snapshot()) \
     ORDER BY xid, seq LIMIT $3";
/// The same, before a position, newest first.
const EVENTS_BEFORE: &str = "SELECT xid::text, seq, transfer, kind, at, refund FROM events \
     WHERE (xid, seq) < ($1::text::xid8, $2) \
       AND xid < pg_snapshot_xmin(pg_current_snapshot()) \
     ORDER BY xid DESC, seq DESC LIMIT $3";
const EVENTS_DROPPED: &str = "SELECT xid::text, seq FROM events_dropped";
const TRIM_EVENTS: &str = "SELECT trim_events($1, $2)";
const ACCOUNTS: &str = "SELECT account_json(id)::text FROM accounts \
     WHERE status <> 'unopened' AND id > $1 ORDER BY id LIMIT $2";
const TRANSFERS: &str = "SELECT to_jsonb(t)::text FROM transfers t \
     WHERE id > $1 ORDER BY id LIMIT $2";
/// Declares a code or answers the declaration held (`migration_8.sql`): the update that
/// changes nothing returns the held row even when a concurrent declaration committed it
/// after this statement's snapshot, where `DO NOTHING` would return no row.
const DECLARE_ASSET: &str = "INSERT INTO assets (code, scale) VALUES ($1, $2) \
     ON CONFLICT (code) DO UPDATE SET scale = assets.scale RETURNING code, scale";
const ASSETS: &str = "SELECT code, scale FROM assets ORDER BY code";
/// An account's metadata replaced whole (`migration_9.sql`), or removed.
const SET_METADATA: &str = "INSERT INTO account_metadata (account, metadata) \
     VALUES ($1, $2::text::jsonb) ON CONFLICT (account) DO UPDATE SET metadata = EXCLUDED.metadata";
const DELETE_METADATA: &str = "DELETE FROM account_metadata WHERE account = $1";
const METADATA: &str = "SELECT account, metadata::text FROM account_metadata \
     WHERE account = ANY($1)";
/// Containment of the one pair compares the value exactly, and the GIN index serves it.
const WITH_METADATA: &str = "SELECT account, metadata::text FROM account_metadata \
     WHERE metadata @> jsonb_build_object($1::text, $2::text) AND account > $3 \
     ORDER BY account LIMIT $4";

/// One shard in a PostgreSQL schema. Cheap to share behind an `Arc`; the pool connects
/// lazily and replaces broken connections.
pub struct PostgresStore {
    pool: Pool,
    name: String,
    call_timeout: Duration,
}

impl PostgresStore {
    /// A page of the change feed by `query` (`EVENTS` or `EVENTS_BEFORE`) from position
    /// `from`, with the last position retention dropped.
    async fn event_page(
        &self,
        query: &'static str,
        from: FeedPosition,
        limit_: usize,
    ) -> Result<EventPage, StoreError> {
        let seq = i64::try_from(from.minor).unwrap_or(i64::MAX);
        let rows = self
            .rows(query, &[&from.major.to_string(), &seq, &limit(limit_)])
            .await?;
        let mut events = Vec::with_capacity(rows.len());
        for r in &rows {
            let xid: &str = r.get(0);
            let seq: i64 = r.get(1);
            let (transfer, kind): (&str, &str) = (r.get(2), r.get(3));
            let at: i64 = r.get(4);
            let refund: Option<&str> = r.get(5);
            let bad = |what: String| self.corrupted(format!("events: {what}"));
            let id = |s: &str| TransferId::new(s).map_err(|e| bad(e.message));
            events.push(Event {
                position: FeedPosition {
                    major: xid.parse().map_err(|_| bad(format!("xid {xid:?}")))?,
                    minor: u64::try_from(seq).map_err(|_| bad(format!("seq {seq}")))?,
                },
                transfer: id(transfer)?,
                kind: EventKind::from_word(kind).ok_or_else(|| bad(format!("kind {kind:?}")))?,
                at: Timestamp(u64::try_from(at).map_err(|_| bad(format!("at {at}")))?),
                refund: refund.map(id).transpose()?,
            });
        }
        let dropped = self.rows(EVENTS_DROPPED, &[]).await?;
        let dropped_through = match dropped.first() {
            None => FeedPosition::START,
            Some(r) => {
                let (xid, seq): (&str, i64) = (r.get(0), r.get(1));
                let bad = || self.corrupted(format!("events_dropped: {xid}.{seq}"));
                FeedPosition {
                    major: xid.parse().map_err(|_| bad())?,
                    minor: u64::try_from(seq).map_err(|_| bad())?,
                }
            }
        };
        Ok(EventPage {
            events,
            dropped_through,
        })
    }

    /// Connects, creates the schema if missing and runs the migrations it lacks (under an
    /// advisory lock, so processes starting together do not race).
    pub async fn open(cfg: &PostgresConfig) -> Result<PostgresStore, OpenError> {
        plain_name(STORE, "schema", &cfg.schema, 63)?;
        if cfg.pool_size == 0 {
            return Err(OpenError::config(
                STORE,
                "pool_size",
                "needs at least 1 connection",
            ));
        }
        let mut pg: tokio_postgres::Config = cfg
            .url
            .parse()
            .map_err(|e| OpenError::config(STORE, "url", format!("{e}")))?;
        pg.options(format!("-c search_path={}", cfg.schema))
            .application_name("xfer")
            .connect_timeout(cfg.connect_timeout);
        let host = match pg.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
            None => "localhost".into(),
        };
        let where_ = format!(
            "postgres {host}/{}/{}",
            pg.get_dbname().unwrap_or("-"),
            cfg.schema
        );
        let pool = pool(pg, cfg.pool_size, cfg.connect_timeout)
            .map_err(|why| OpenError::config(STORE, "pool_size", why))?;
        let store = PostgresStore {
            pool,
            name: where_,
            call_timeout: cfg.call_timeout,
        };
        store.migrate(&cfg.schema).await?;
        Ok(store)
    }

    async fn migrate(&self, schema: &str) -> Result<(), OpenError> {
        let mut client = self
            .pool
            .get()
            .await
            .map_err(|e| OpenError::unreachable(STORE, e.to_string()))?;
        let failed = |e: tokio_postgres::Error| OpenError::setup(STORE, describe(&e));
        let tx = client.transaction().await.map_err(failed)?;
        // One lock per schema name, held until commit.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('xfer schema ' || $1::text))",
            &[&schema],
        )
        .await
        .map_err(failed)?;
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; \
             CREATE TABLE IF NOT EXISTS migrations \
                 (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());"
        ))
        .await
        .map_err(failed)?;
        for (version, sql) in MIGRATIONS {
            let done = tx
                .query_opt("SELECT 1 FROM migrations WHERE version = $1", &[version])
                .await
                .map_err(failed)?;
            if done.is_none() {
                tx.batch_execute(sql).await.map_err(failed)?;
                tx.execute("INSERT INTO migrations (version) VALUES ($1)", &[version])
                    .await
                    .map_err(failed)?;
            }
        }
        tx.commit().await.map_err(failed)
    }

    /// Where it lives (host and schema), for logs.
    pub fn name(&self) -> &str {
        &self.name
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(|e| match e {
            PoolError::Backend(e) => classify(&self.name, e),
            e => StoreError::Unavailable(format!("{}: {e}", self.name)),
        })
    }

    /// Runs one statement (a batch of steps, or a scan) and answers its rows; past
    /// `call_timeout` the answer is `Indeterminate` and the connection is dropped.
    async fn rows(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let client = self.client().await?;
        let call = async {
            let stmt = client.prepare_cached(sql).await?;
            client.query(&stmt, params).await
        };
        match tokio::time::timeout(self.call_timeout, call).await {
            Ok(rows) => rows.map_err(|e| classify(&self.name, e)),
            Err(_) => {
                // The statement may still run: never hand this connection out again.
                let _ = deadpool_postgres::Object::take(client);
                Err(StoreError::Indeterminate(format!(
                    "{}: no answer within {:?}",
                    self.name, self.call_timeout
                )))
            }
        }
    }

    fn corrupted(&self, what: String) -> StoreError {
        StoreError::Corrupted(format!("{}: {what}", self.name))
    }

    /// An `assets` row (code, scale).
    fn asset(&self, r: &tokio_postgres::Row) -> Result<Asset, StoreError> {
        let (code, scale): (&str, i16) = (r.get(0), r.get(1));
        let bad = |what: String| self.corrupted(format!("assets {code:?}: {what}"));
        let scale = u8::try_from(scale).map_err(|_| bad(format!("scale {scale}")))?;
        Asset::new(code, scale).map_err(|e| bad(e.message))
    }

    /// An `account_metadata` row (account, metadata as JSON text).
    fn metadata(&self, r: &tokio_postgres::Row) -> Result<(AccountId, Metadata), StoreError> {
        let (account, json): (&str, &str) = (r.get(0), r.get(1));
        let bad = |what: String| self.corrupted(format!("account_metadata {account:?}: {what}"));
        let id = AccountId::new(account).map_err(|e| bad(e.message))?;
        let metadata = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
        Ok((id, metadata))
    }

    async fn execute_batch(&self, ops: Vec<Op>) -> Result<Vec<Reply>, StoreError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let order = reply_json::lock_order(&ops);
        let payload =
            serde_json::Value::Array(order.iter().map(|&i| wire::encode(&ops[i])).collect())
                .to_string();
        let rows = self.rows(EXECUTE, &[&payload]).await?;
        let answers = rows.iter().map(|row| row.get::<_, &str>(0));
        reply_json::decode_in_order(&ops, &order, answers).map_err(|e| self.corrupted(e))
    }
}

/// A pool of at most `size` connections to `pg` (no TLS), recycled when found closed, that
/// waits at most `timeout` to connect or for a free connection.
pub fn pool(pg: tokio_postgres::Config, size: usize, timeout: Duration) -> Result<Pool, String> {
    let manager = Manager::from_config(
        pg,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(timeout))
        .create_timeout(Some(timeout))
        .build()
        .map_err(|e| e.to_string())
}

/// The error's text with the server's detail (message, SQLSTATE, where), if it sent one.
pub fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!(
            "{} ({}){}",
            db.message(),
            db.code().code(),
            db.where_().map(|w| format!(" at {w}")).unwrap_or_default()
        ),
        None => e.to_string(),
    }
}

/// What a failed call means for the caller. The server answering with an error means the
/// statement (the whole batch) was rolled back: nothing was applied. Connection trouble
/// after the statement may have left means anything may have been.
fn classify(shard: &str, e: tokio_postgres::Error) -> StoreError {
    let text = format!("{shard}: {}", describe(&e));
    match e.as_db_error().map(|db| db.code().code()) {
        // Connection, rollback (serialization, deadlock), resources, lock wait, operator
        // intervention (shutdown, cancel), system: try again.
        Some(code) if ["08", "40", "53", "55", "57", "58"].contains(&&code[..2]) => {
            StoreError::Unavailable(text)
        }
        // Anything else the server refuses is a bug or a damaged schema: a human looks.
        Some(_) => StoreError::Corrupted(text),
        None => StoreError::Indeterminate(text),
    }
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Store for PostgresStore {
    fn execute(&self, ops: Vec<Op>) -> BoxFuture<'_, Result<Vec<Reply>, StoreError>> {
        Box::pin(self.execute_batch(ops))
    }

    fn scan_due(
        &self,
        now: Timestamp,
        limit_: usize,
    ) -> BoxFuture<'_, Result<Vec<TransferRecord>, StoreError>> {
        Box::pin(async move {
            let rows = self
                .rows(SCAN_DUE, &[&now.as_i64_ms(), &limit(limit_)])
                .await?;
            rows.iter()
                .map(|r| reply_json::decode_transfer(r.get(0)).map_err(|e| self.corrupted(e)))
                .collect()
        })
    }

    fn history<'a>(
        &'a self,
        account: &'a AccountId,
        before: Option<u64>,
        limit_: usize,
    ) -> BoxFuture<'a, Result<HistoryPage, StoreError>> {
        Box::pin(async move {
            let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
            let rows = self
                .rows(
                    HISTORY,
                    &[&account.as_str(), &before, &limit(limit_.saturating_add(1))],
                )
                .await?;
            let mut entries = Vec::with_capacity(rows.len());
            for r in &rows {
                let seq: i64 = r.get(0);
                let transfer: &str = r.get(1);
                let transfer = TransferId::new(transfer)
                    .map_err(|e| self.corrupted(format!("history: {}", e.message)))?;
                entries.push((seq as u64, transfer));
            }
            Ok(HistoryPage::from_one_extra(&mut entries, limit_))
        })
    }

    fn events(
        &self,
        after: FeedPosition,
        limit_: usize,
    ) -> BoxFuture<'_, Result<EventPage, StoreError>> {
        Box::pin(self.event_page(EVENTS, after, limit_))
    }

    fn events_before(
        &self,
        before: FeedPosition,
        limit_: usize,
    ) -> BoxFuture<'_, Result<EventPage, StoreError>> {
        Box::pin(self.event_page(EVENTS_BEFORE, before, limit_))
    }

    fn trim_events(
        &self,
        before: Timestamp,
        limit_: usize,
    ) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(async move {
            let before = i64::try_from(before.as_ms()).unwrap_or(i64::MAX);
            let n = i32::try_from(limit_).unwrap_or(i32::MAX);
            let rows = self.rows(TRIM_EVENTS, &[&before, &n]).await?;
            let trimmed: i32 = rows.first().map_or(0, |r| r.get(0));
            Ok(trimmed.max(0) as usize)
        })
    }

    fn prune(&self, limit_: usize) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(async move {
            let n = i32::try_from(limit_).unwrap_or(i32::MAX);
            let rows = self.rows(PRUNE, &[&n]).await?;
            let dropped: i32 = rows.first().map_or(0, |r| r.get(0));
            Ok(dropped.max(0) as usize)
        })
    }

    fn accounts<'a>(
        &'a self,
        after: Option<&'a AccountId>,
        limit_: usize,
    ) -> BoxFuture<'a, Result<Vec<Account>, StoreError>> {
        Box::pin(async move {
            let after = after.map_or("", |a| a.as_str());
            let rows = self.rows(ACCOUNTS, &[&after, &limit(limit_)]).await?;
            rows.iter()
                .map(|r| reply_json::decode_account(r.get(0)).map_err(|e| self.corrupted(e)))
                .collect()
        })
    }

    fn transfers<'a>(
        &'a self,
        after: Option<&'a TransferId>,
        limit_: usize,
    ) -> BoxFuture<'a, Result<Vec<TransferRecord>, StoreError>> {
        Box::pin(async move {
            let after = after.map_or("", |a| a.as_str());
            let rows = self.rows(TRANSFERS, &[&after, &limit(limit_)]).await?;
            rows.iter()
                .map(|r| reply_json::decode_transfer(r.get(0)).map_err(|e| self.corrupted(e)))
                .collect()
        })
    }

    fn declare_asset<'a>(&'a self, asset: &'a Asset) -> BoxFuture<'a, Result<Asset, StoreError>> {
        Box::pin(async move {
            let (code, scale) = (asset.code.as_str(), i16::from(asset.scale));
            let rows = self.rows(DECLARE_ASSET, &[&code, &scale]).await?;
            let row = rows
                .first()
                .ok_or_else(|| self.corrupted(format!("assets {code:?}: no row declared")))?;
            self.asset(row)
        })
    }

    fn assets(&self) -> BoxFuture<'_, Result<Vec<Asset>, StoreError>> {
        Box::pin(async move {
            let rows = self.rows(ASSETS, &[]).await?;
            rows.iter().map(|r| self.asset(r)).collect()
        })
    }

    fn set_account_metadata<'a>(
        &'a self,
        account: &'a AccountId,
        metadata: &'a Metadata,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let account = account.as_str();
            if metadata.is_empty() {
                self.rows(DELETE_METADATA, &[&account]).await?;
            } else {
                let json = serde_json::to_string(metadata).expect("a map of strings");
                self.rows(SET_METADATA, &[&account, &json]).await?;
            }
            Ok(())
        })
    }

    fn account_metadata<'a>(
        &'a self,
        accounts: &'a [AccountId],
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        Box::pin(async move {
            let ids: Vec<&str> = accounts.iter().map(AccountId::as_str).collect();
            let rows = self.rows(METADATA, &[&ids]).await?;
            let found = rows
                .iter()
                .map(|r| self.metadata(r))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(xfer_store::metadata_in_order(accounts, found))
        })
    }

    fn accounts_with_metadata<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
        after: Option<&'a AccountId>,
        limit_: usize,
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        Box::pin(async move {
            let after = after.map_or("", |a| a.as_str());
            let rows = self
                .rows(WITH_METADATA, &[&key, &value, &after, &limit(limit_)])
                .await?;
            rows.iter().map(|r| self.metadata(r)).collect()
        })
    }
}
