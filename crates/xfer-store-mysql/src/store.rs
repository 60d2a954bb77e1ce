//! The connection pool, the migrations and the [`Store`] calls.

use crate::durability::Durability;
use crate::wire;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts};
use std::time::Duration;
use xfer_core::{Account, AccountId, Asset, Timestamp, TransferId, TransferRecord};
use xfer_store::database::{plain_name, OpenError};
use xfer_store::{reply_json, BoxFuture, HistoryPage, Metadata, Op, Reply, Store, StoreError};

/// The backend's name in errors.
const STORE: &str = "mysql";
/// Where one shard lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MysqlConfig {
    /// The server, e.g. `mysql://xfer:secret@10.0.0.7:3306`; a database named in it is
    /// ignored (see `database`).
    pub url: String,
    /// The database holding the shard's tables (created if missing); several shards may
    /// share a server in different databases.
    pub database: String,
    /// Connections in the pool: the most batches in flight at once to this shard.
    pub pool_size: usize,
    /// How long to wait for a connection (to connect, or for a free one) before a call
    /// answers `Unavailable`.
    pub connect_timeout: Duration,
    /// How long a call may take before it answers `Indeterminate` (the server may still
    /// apply it; every step is idempotent, so the caller retries).
    pub call_timeout: Duration,
}

impl MysqlConfig {
    /// `url` and `database` with the default pool (8 connections, 5 s to connect, 30 s per
    /// call).
    pub fn new(url: impl Into<String>, database: impl Into<String>) -> MysqlConfig {
        MysqlConfig {
            url: url.into(),
            database: database.into(),
            pool_size: 8,
            connect_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(30),
        }
    }
}

/// The migrations, in order; the database's `migrations` table records which have run.
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("schema.sql")),
    (2, include_str!("migration_2.sql")),
    (3, include_str!("migration_3.sql")),
    (4, include_str!("migration_4.sql")),
    (5, include_str!("migration_5.sql")),
    (6, include_str!("migration_6.sql")),
    (7, include_str!("migration_7.sql")),
    (8, include_str!("migration_8.sql")),
];

/// What every new connection runs first: UTC (so `xfer_now_ms` is exact) and read committed (a
/// step locks the rows it reads; no gap locks between batches).
const ON_CONNECT: [&str; 2] = [
    "SET time_zone = '+00:00'",
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
];

const EXECUTE: &str = "CALL xfer_execute(?)";
const SCAN_DUE: &str = "SELECT xfer_transfer_json(id, 'transfer') FROM transfers \
     WHERE wake_at <= ? ORDER BY wake_at LIMIT ?";
const HISTORY: &str = "SELECT seq, transfer FROM history \
     WHERE account = ? AND seq < ? ORDER BY seq DESC LIMIT ?";
const PRUNE: &str = "CALL xfer_prune(?)";
const ACCOUNTS: &str = "SELECT xfer_account_json(id) FROM accounts \
     WHERE status <> 'unopened' AND id > ? ORDER BY id LIMIT ?";
const TRANSFERS: &str = "SELECT xfer_transfer_json(id, 'transfer') FROM transfers \
     WHERE id > ? ORDER BY id LIMIT ?";
/// Declares a code unless it is declared (`migration_5.sql`): a duplicate code changes
/// nothing, and unlike `INSERT IGNORE` no other error is turned into a warning.
const DECLARE_ASSET: &str = "INSERT INTO assets (code, scale) VALUES (?, ?) \
     ON DUPLICATE KEY UPDATE code = code";
const ASSET: &str = "SELECT code, scale FROM assets WHERE code = ?";
const ASSETS: &str = "SELECT code, scale FROM assets ORDER BY code";
/// An account's metadata replaced whole (`migration_6.sql`), the JSON given twice (MySQL
/// deprecates `VALUES()` in the update, MariaDB lacks the row alias), or removed.
const SET_METADATA: &str = "INSERT INTO account_metadata (account, metadata) VALUES (?, ?) \
     ON DUPLICATE KEY UPDATE metadata = ?";
const DELETE_METADATA: &str = "DELETE FROM account_metadata WHERE account = ?";
/// The accounts' `?`s are added, one per account asked.
const METADATA: &str = "SELECT account, metadata FROM account_metadata \
     WHERE account IN ";
/// The key's path (`$."key"`) is a parameter; the value is compared as bytes, since under
/// `utf8mb4_bin`, the collation of the unquoted text, `'a ' = 'a'`.
const WITH_METADATA: &str = "SELECT account, metadata FROM account_metadata \
     WHERE CAST(JSON_UNQUOTE(JSON_EXTRACT(metadata, ?)) AS BINARY) = CAST(? AS BINARY) \
       AND account > ? ORDER BY account LIMIT ?";

/// One shard in a MySQL database. Cheap to share behind an `Arc`; the pool connects lazily
/// and replaces broken connections.
pub struct MysqlStore {
    pool: Pool,
    name: String,
    database: String,
    connect_timeout: Duration,
    call_timeout: Duration,
}

impl MysqlStore {
    /// Connects, creates the database if missing and runs the migrations it lacks (under a
    /// named lock, so processes starting together do not race).
    pub async fn open(cfg: &MysqlConfig) -> Result<MysqlStore, OpenError> {
        plain_name(STORE, "database", &cfg.database, 64)?;
        let pool_max = match cfg.pool_size {
            0 => {
                return Err(OpenError::config(
                    STORE,
                    "pool_size",
                    "needs at least 1 connection",
                ))
            }
            n => n,
        };
        let server =
            Opts::from_url(&cfg.url).map_err(|e| OpenError::config(STORE, "url", e.to_string()))?;
        let name = format!(
            "mysql {}:{}/{}",
            server.ip_or_hostname(),
            server.tcp_port(),
            cfg.database
        );
        let server = OptsBuilder::from_opts(server).db_name(None::<String>);
        let mut admin = tokio::time::timeout(cfg.connect_timeout, Conn::new(server.clone()))
            .await
            .map_err(|_| {
                OpenError::unreachable(
                    STORE,
                    format!("{name}: no answer within {:?}", cfg.connect_timeout),
                )
            })?
            .map_err(|e| OpenError::unreachable(STORE, format!("{name}: {e}")))?;
        let failed = |e: mysql_async::Error| OpenError::setup(STORE, format!("{name}: {e}"));
        admin
            .query_drop(format!("CREATE DATABASE IF NOT EXISTS `{}`", cfg.database))
            .await
            .map_err(failed)?;
        admin
            .query_drop(format!("USE `{}`", cfg.database))
            .await
            .map_err(failed)?;
        migrate(&mut admin, &cfg.database).await.map_err(failed)?;
        admin.disconnect().await.map_err(failed)?;

        let constraints = PoolConstraints::new(0, pool_max).expect("0 <= max and max >= 1");
        let opts = server
            .db_name(Some(cfg.database.clone()))
            .init(ON_CONNECT.to_vec())
            .pool_opts(PoolOpts::default().with_constraints(constraints));
        Ok(MysqlStore {
            pool: Pool::new(opts),
            name,
            database: cfg.database.clone(),
            connect_timeout: cfg.connect_timeout,
            call_timeout: cfg.call_timeout,
        })
    }

    /// Where it lives (host and database), for logs.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's durability settings (log them: see [`Durability::warning`]).
    pub async fn durability(&self) -> Result<Durability, StoreError> {
        let mut conn = self.conn().await?;
        let row: Option<(String, String, String, String)> = conn
            .query_first(
                "SELECT CAST(@@version AS CHAR), CAST(@@innodb_flush_log_at_trx_commit AS CHAR), \
                 CAST(@@log_bin AS CHAR), CAST(@@sync_binlog AS CHAR)",
            )
            .await
            .map_err(|e| classify(&self.name, e))?;
        let (version, flush_log_at_commit, log_bin, sync_binlog) =
            row.ok_or_else(|| self.corrupted("no settings".into()))?;
        Ok(Durability {
            server: self.name.clone(),
            version,
            flush_log_at_commit,
            log_bin,
            sync_binlog,
        })
    }

    /// Drops the shard's database, and everything in it (benchmarks and tests).
    pub async fn destroy(self) -> Result<(), StoreError> {
        let mut conn = self.conn().await?;
        conn.query_drop(format!("DROP DATABASE IF EXISTS `{}`", self.database))
            .await
            .map_err(|e| classify(&self.name, e))?;
        drop(conn);
        self.close().await;
        Ok(())
    }

    /// Closes the pool's connections.
    pub async fn close(self) {
        let _ = self.pool.disconnect().await;
    }

    async fn conn(&self) -> Result<Conn, StoreError> {
        match tokio::time::timeout(self.connect_timeout, self.pool.get_conn()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(StoreError::Unavailable(format!("{}: {e}", self.name))),
            Err(_) => Err(StoreError::Unavailable(format!(
                "{}: no connection within {:?}",
                self.name, self.connect_timeout
            ))),
        }
    }

    /// Runs one statement with `params` and answers its first result set; past
    /// `call_timeout` the answer is `Indeterminate` and the connection is dropped.
    async fn rows<T: mysql_async::prelude::FromRow + Send + 'static>(
        &self,
        sql: &str,
        params: mysql_async::Params,
    ) -> Result<Vec<T>, StoreError> {
        let mut conn = self.conn().await?;
        match tokio::time::timeout(self.call_timeout, conn.exec(sql, params)).await {
            Ok(rows) => rows.map_err(|e| classify(&self.name, e)),
            Err(_) => Err(StoreError::Indeterminate(format!(
                "{}: no answer within {:?}",
                self.name, self.call_timeout
            ))),
        }
    }

    fn corrupted(&self, what: String) -> StoreError {
        StoreError::Corrupted(format!("{}: {what}", self.name))
    }

    /// An `assets` row (code, scale).
    fn asset(&self, (code, scale): &(String, i64)) -> Result<Asset, StoreError> {
        let bad = |what: String| self.corrupted(format!("assets {code:?}: {what}"));
        let scale = u8::try_from(*scale).map_err(|_| bad(format!("scale {scale}")))?;
        Asset::new(code, scale).map_err(|e| bad(e.message))
    }

    /// An `account_metadata` row (account, metadata as JSON text).
    fn metadata(
        &self,
        (account, json): (String, String),
    ) -> Result<(AccountId, Metadata), StoreError> {
        let bad = |what: String| self.corrupted(format!("account_metadata {account:?}: {what}"));
        let id = AccountId::new(&account).map_err(|e| bad(e.message))?;
        let metadata = serde_json::from_str(&json).map_err(|e| bad(e.to_string()))?;
        Ok((id, metadata))
    }

    async fn execute_batch(&self, ops: Vec<Op>) -> Result<Vec<Reply>, StoreError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let order = reply_json::lock_order(&ops);
        let payload = wire::batch(&ops, &order).to_string();
        let rows: Vec<String> = self.rows(EXECUTE, (payload,).into()).await?;
        let text = rows
            .first()
            .ok_or_else(|| self.corrupted("no answer to a batch".into()))?;
        // One row: the replies as a JSON array.
        let answers: Vec<&serde_json::value::RawValue> =
            serde_json::from_str(text).map_err(|e| self.corrupted(format!("{e} in {text}")))?;
        let answers = answers.iter().map(|a| a.get());
        reply_json::decode_in_order(&ops, &order, answers).map_err(|e| self.corrupted(e))
    }
}

/// Runs the migrations `conn`'s database lacks, one process at a time. A migration's
/// statements are made to be run again (a crash between two leaves some done): tables
/// `IF NOT EXISTS`, routines dropped before they are made.
async fn migrate(conn: &mut Conn, database: &str) -> Result<(), mysql_async::Error> {
    let lock = format!("xfer schema {database}");
    let _: Option<i64> = conn
        .exec_first("SELECT GET_LOCK(?, 60)", (lock.as_str(),))
        .await?;
    conn.query_drop(
        "CREATE TABLE IF NOT EXISTS migrations (version INT PRIMARY KEY, \
         applied_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE = InnoDB",
    )
    .await?;
    for (version, sql) in MIGRATIONS {
        let done: Option<i32> = conn
            .exec_first(
                "SELECT version FROM migrations WHERE version = ?",
                (version,),
            )
            .await?;
        if done.is_some() {
            continue;
        }
        for statement in statements(sql) {
            if let Some(drop) = drop_first(&statement) {
                conn.query_drop(drop).await?;
            }
            match conn.query_drop(&statement).await {
                // A column a crashed run of this migration added already (MySQL has no
                // `ADD COLUMN IF NOT EXISTS`).
                Err(mysql_async::Error::Server(e))
                    if e.code == 1060 && statement.trim_start().starts_with("ALTER TABLE") => {}
                other => other?,
            }
        }
        conn.exec_drop("INSERT INTO migrations (version) VALUES (?)", (version,))
            .await?;
    }
    let _: Option<i64> = conn
        .exec_first("SELECT RELEASE_LOCK(?)", (lock.as_str(),))
        .await?;
    Ok(())
}

/// The statements of a migration file: separated by lines holding only `;;`; tables made
/// only if missing.
fn statements(sql: &str) -> Vec<String> {
    sql.split("\n;;\n")
        .map(|s| {
            let code = s
                .lines()
                .skip_while(|l| l.trim().is_empty() || l.starts_with("--"));
            code.collect::<Vec<_>>().join("\n")
        })
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.replacen("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", 1))
        .collect()
}

/// For a statement making a routine, the statement dropping it first.
fn drop_first(statement: &str) -> Option<String> {
    let mut words = statement.split_whitespace();
    if words.next()? != "CREATE" {
        return None;
    }
    let kind = words
        .next()
        .filter(|k| ["FUNCTION", "PROCEDURE", "TRIGGER"].contains(k))?;
    let name = words.next()?.split('(').next()?;
    Some(format!("DROP {kind} IF EXISTS {name}"))
}

/// What a failed call means for the caller. The server answering with an error means the
/// call's transaction was rolled back (`xfer_execute` rolls back on any error): nothing was
/// applied. Connection trouble after the call may have left means anything may have been.
fn classify(shard: &str, e: mysql_async::Error) -> StoreError {
    let text = format!("{shard}: {e}");
    match &e {
        mysql_async::Error::Server(s) => match s.code {
            // Deadlock, lock wait timeout, too many connections, shutting down, query
            // interrupted, out of resources, read only: try again.
            1213 | 1205 | 1040 | 1053 | 1317 | 1041 | 1290 | 1836 => StoreError::Unavailable(text),
            // Anything else the server refuses is a bug or a damaged schema: a human looks.
            _ => StoreError::Corrupted(text),
        },
        _ => StoreError::Indeterminate(text),
    }
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Store for MysqlStore {
    fn execute(&self, ops: Vec<Op>) -> BoxFuture<'_, Result<Vec<Reply>, StoreError>> {
        Box::pin(self.execute_batch(ops))
    }

    fn scan_due(
        &self,
        now: Timestamp,
        limit_: usize,
    ) -> BoxFuture<'_, Result<Vec<TransferRecord>, StoreError>> {
        Box::pin(async move {
            let rows: Vec<String> = self
                .rows(SCAN_DUE, (now.as_i64_ms(), limit(limit_)).into())
                .await?;
            rows.iter()
                .map(|r| reply_json::decode_transfer(r).map_err(|e| self.corrupted(e)))
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
            let rows: Vec<(i64, String)> = self
                .rows(
                    HISTORY,
                    (account.as_str(), before, limit(limit_.saturating_add(1))).into(),
                )
                .await?;
            let mut entries = Vec::with_capacity(rows.len());
            for (seq, transfer) in rows {
                let transfer = TransferId::new(&transfer)
                    .map_err(|e| self.corrupted(format!("history: {}", e.message)))?;
                entries.push((seq as u64, transfer));
            }
            Ok(HistoryPage::from_one_extra(&mut entries, limit_))
        })
    }

    fn prune(&self, limit_: usize) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(async move {
            let n = i32::try_from(limit_).unwrap_or(i32::MAX);
            let rows: Vec<i64> = self.rows(PRUNE, (n,).into()).await?;
            Ok(rows.first().copied().unwrap_or(0).max(0) as usize)
        })
    }

    fn accounts<'a>(
        &'a self,
        after: Option<&'a AccountId>,
        limit_: usize,
    ) -> BoxFuture<'a, Result<Vec<Account>, StoreError>> {
        Box::pin(async move {
            let after = after.map_or("", |a| a.as_str());
            let rows: Vec<String> = self.rows(ACCOUNTS, (after, limit(limit_)).into()).await?;
            rows.iter()
                .map(|r| reply_json::decode_account(r).map_err(|e| self.corrupted(e)))
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
            let rows: Vec<String> = self.rows(TRANSFERS, (after, limit(limit_)).into()).await?;
            rows.iter()
                .map(|r| reply_json::decode_transfer(r).map_err(|e| self.corrupted(e)))
                .collect()
        })
    }

    /// The insert commits on its own, so the read after it, a statement of its own under
    /// read committed, sees the declaration kept, this one's or a concurrent one's.
    fn declare_asset<'a>(&'a self, asset: &'a Asset) -> BoxFuture<'a, Result<Asset, StoreError>> {
        Box::pin(async move {
            let code = asset.code.as_str();
            let _: Vec<mysql_async::Row> =
                self.rows(DECLARE_ASSET, (code, asset.scale).into()).await?;
            let rows: Vec<(String, i64)> = self.rows(ASSET, (code,).into()).await?;
            let row = rows
                .first()
                .ok_or_else(|| self.corrupted(format!("assets {code:?}: no row declared")))?;
            self.asset(row)
        })
    }

    fn assets(&self) -> BoxFuture<'_, Result<Vec<Asset>, StoreError>> {
        Box::pin(async move {
            let rows: Vec<(String, i64)> = self.rows(ASSETS, ().into()).await?;
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
            let _: Vec<mysql_async::Row> = if metadata.is_empty() {
                self.rows(DELETE_METADATA, (account,).into()).await?
            } else {
                let json = serde_json::to_string(metadata).expect("a map of strings");
                self.rows(SET_METADATA, (account, &json, &json).into())
                    .await?
            };
            Ok(())
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
            let sql = format!("{METADATA}({})", vec!["?"; accounts.len()].join(", "));
            let ids: Vec<&str> = accounts.iter().map(AccountId::as_str).collect();
            let rows: Vec<(String, String)> = self.rows(&sql, ids.into()).await?;
            let found = rows
                .into_iter()
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
            // Keys are `[A-Za-z0-9_-]` (the API's rule): nothing in one needs escaping.
            let path = format!("$.\"{key}\"");
            let after = after.map_or("", |a| a.as_str());
            let rows: Vec<(String, String)> = self
                .rows(WITH_METADATA, (path, value, after, limit(limit_)).into())
                .await?;
            rows.into_iter().map(|r| self.metadata(r)).collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_migration_splits_into_statements_and_its_routines_are_dropped_first() {
        let all = statements(MIGRATIONS[0].1);
        assert!(all.len() > 8, "{}", all.len());
        assert!(all.iter().all(|s| !s.contains("\n;;")));
        assert!(
            all[0].starts_with("CREATE TABLE IF NOT EXISTS accounts"),
            "{}",
            all[0]
        );
        let drops: Vec<String> = all.iter().filter_map(|s| drop_first(s)).collect();
        assert!(drops.contains(&"DROP PROCEDURE IF EXISTS xfer_execute".to_string()));
        assert!(drops.contains(&"DROP FUNCTION IF EXISTS xfer_now_ms".to_string()));
        assert_eq!(drop_first("CREATE TABLE x (a INT)"), None);
    }
}
