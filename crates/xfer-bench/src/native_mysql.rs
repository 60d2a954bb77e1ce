//! `xfer bench --baseline mysql`: the same workload as native MySQL (MariaDB) transactions,
//! the way an application without xfer would write a transfer, for a same-run comparison
//! on the server of `--mysql-url`.
//!
//! One InnoDB transaction per transfer, on its own pooled connection, as the PostgreSQL
//! baseline does it: the conditional debit (`UPDATE … WHERE id = ? AND balance >= ?`; no row
//! means insufficient funds, `ROLLBACK`), the credit, the `INSERT` of the record, `COMMIT`;
//! the two updates in account-id order so that opposite transfers never deadlock. The
//! server's durability settings (`innodb_flush_log_at_trx_commit`, `sync_binlog`) are
//! printed beside the figures. Every run gets a database of its own
//! (`xfer_bench_native_<pid>`), dropped afterwards.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts, TxOpts};
use xfer_core::{TransferSpec, TransferState};

/// Native transactions against one database of their own.
#[derive(Clone)]
pub struct NativeMysql {
    pool: Pool,
    /// The server's URL, without a database.
    url: String,
    database: String,
}

fn failed(what: &str) -> impl Fn(mysql_async::Error) -> String + '_ {
    move |e| format!("mysql baseline: {what}: {e}")
}

impl NativeMysql {
    /// Creates the database, its tables and `accounts` funded accounts named as the
    /// workload names them (`usd-0`, `usd-1`, …), with `clients` connections; answers the
    /// server's durability settings, to print beside the figures.
    pub async fn setup(
        url: &str,
        accounts: u64,
        clients: usize,
    ) -> Result<(NativeMysql, String), String> {
        let opts = Opts::from_url(url).map_err(|e| format!("--mysql-url {url:?}: {e}"))?;
        let server = OptsBuilder::from_opts(opts).db_name(None::<String>);
        let database = format!("xfer_bench_native_{}", std::process::id());
        let mut admin = Conn::new(server.clone())
            .await
            .map_err(failed("connecting"))?;
        admin
            .query_drop(format!(
                "DROP DATABASE IF EXISTS `{database}`; CREATE DATABASE `{database}`; \
                 USE `{database}`;
                 CREATE TABLE accounts (id VARCHAR(64) PRIMARY KEY, balance BIGINT NOT NULL)
                     ENGINE = InnoDB;
                 CREATE TABLE transfers (id VARCHAR(128) PRIMARY KEY,
                     debit_account VARCHAR(64) NOT NULL, credit_account VARCHAR(64) NOT NULL,
                     amount BIGINT NOT NULL,
                     created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3))
                     ENGINE = InnoDB;"
            ))
            .await
            .map_err(failed("creating the tables"))?;
        let ids: Vec<u64> = (0..accounts).collect();
        for chunk in ids.chunks(1_000) {
            let values: Vec<String> = chunk
                .iter()
                .map(|i| format!("('usd-{i}', 1000000000000)"))
                .collect();
            admin
                .query_drop(format!(
                    "INSERT INTO accounts (id, balance) VALUES {}",
                    values.join(",")
                ))
                .await
                .map_err(failed("funding"))?;
        }
        let mut durability = Vec::new();
        for name in ["innodb_flush_log_at_trx_commit", "sync_binlog"] {
            let v: Option<(String, String)> = admin
                .query_first(format!("SHOW VARIABLES LIKE '{name}'"))
                .await
                .map_err(failed("SHOW VARIABLES"))?;
            durability.push(format!("{name}={}", v.map_or("?".to_string(), |(_, v)| v)));
        }
        admin.disconnect().await.map_err(failed("disconnecting"))?;
        let constraints =
            PoolConstraints::new(0, clients.max(1)).ok_or("mysql baseline: pool size")?;
        let pool = Pool::new(
            server
                .db_name(Some(database.clone()))
                .pool_opts(PoolOpts::default().with_constraints(constraints)),
        );
        let native = NativeMysql {
            pool,
            url: url.to_string(),
            database,
        };
        Ok((native, durability.join(" ")))
    }

    /// One transfer as one transaction: `Done`, or `Canceled` for insufficient funds.
    pub async fn transfer(&self, s: &TransferSpec) -> Result<TransferState, String> {
        let [p] = s.postings.as_slice() else {
            return Err("the baseline runs single-posting transfers only".into());
        };
        let (from, to) = (p.from.as_str(), p.to.as_str());
        let amount = i64::try_from(p.amount.units()).map_err(|e| e.to_string())?;
        let mut conn = self.pool.get_conn().await.map_err(failed("a connection"))?;
        let mut tx = conn
            .start_transaction(TxOpts::default())
            .await
            .map_err(failed("BEGIN"))?;
        let debit = "UPDATE accounts SET balance = balance - ? WHERE id = ? AND balance >= ?";
        let credit = "UPDATE accounts SET balance = balance + ? WHERE id = ?";
        let funded = if from < to {
            tx.exec_drop(debit, (amount, from, amount))
                .await
                .map_err(failed("debit"))?;
            let funded = tx.affected_rows() == 1;
            if funded {
                tx.exec_drop(credit, (amount, to))
                    .await
                    .map_err(failed("credit"))?;
            }
            funded
        } else {
            tx.exec_drop(credit, (amount, to))
                .await
                .map_err(failed("credit"))?;
            tx.exec_drop(debit, (amount, from, amount))
                .await
                .map_err(failed("debit"))?;
            tx.affected_rows() == 1
        };
        if !funded {
            tx.rollback().await.map_err(failed("ROLLBACK"))?;
            return Ok(TransferState::Canceled);
        }
        tx.exec_drop(
            "INSERT INTO transfers (id, debit_account, credit_account, amount) \
             VALUES (?, ?, ?, ?)",
            (s.id.as_str(), from, to, amount),
        )
        .await
        .map_err(failed("insert"))?;
        tx.commit().await.map_err(failed("COMMIT"))?;
        Ok(TransferState::Done)
    }

    /// Closes the pool and drops the database.
    pub async fn drop_now(self) -> Result<(), String> {
        self.pool
            .disconnect()
            .await
            .map_err(failed("disconnecting"))?;
        let opts = Opts::from_url(&self.url).map_err(|e| e.to_string())?;
        let mut admin = Conn::new(OptsBuilder::from_opts(opts).db_name(None::<String>))
            .await
            .map_err(failed("connecting"))?;
        admin
            .query_drop(format!("DROP DATABASE IF EXISTS `{}`", self.database))
            .await
            .map_err(failed("dropping the database"))?;
        admin.disconnect().await.map_err(failed("disconnecting"))
    }
}
