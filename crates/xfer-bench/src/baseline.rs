//! `xfer bench --baseline postgres`: the same workload as native PostgreSQL transactions,
//! the way an application without xfer would write a transfer, for a same-run comparison.
//!
//! One SQL transaction per transfer, on its own pooled connection: `BEGIN`; the conditional
//! debit (`UPDATE accounts SET balance = balance - $2 WHERE id = $1 AND balance >= $2`;
//! no row means insufficient funds, `ROLLBACK`); the credit; `INSERT` into `transfers`;
//! `COMMIT`. The two updates go in account-id order, as a careful application orders them,
//! so that opposite transfers never deadlock. PostgreSQL runs with its durable defaults
//! (`fsync`, `synchronous_commit`). Single-posting workloads only (uniform, hot).
//!
//! Every run gets a fresh database next to the one named in the URL ([`FreshDatabase`]),
//! dropped afterwards, so runs never see each other's rows.

use tokio_postgres::NoTls;
use xfer_core::{TransferSpec, TransferState};
use xfer_store_postgres::{describe, Pool};

/// A database created for one run on the server of a URL, dropped by [`FreshDatabase::drop_now`].
pub struct FreshDatabase {
    /// Its URL (the given URL with the database name replaced).
    pub url: String,
    name: String,
    admin: tokio_postgres::Config,
}

fn with_database(url: &str, name: &str) -> Result<String, String> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let rest = base
        .strip_prefix("postgres://")
        .or_else(|| base.strip_prefix("postgresql://"))
        .ok_or_else(|| format!("{url:?}: expected a postgres:// URL"))?;
    let host = rest.split_once('/').map_or(rest, |(h, _)| h);
    Ok(format!("postgres://{host}/{name}{query}"))
}

impl FreshDatabase {
    /// Creates `<database>_<tag>_<pid>` on the URL's server (needs the CREATEDB right).
    pub async fn create(url: &str, tag: &str) -> Result<FreshDatabase, String> {
        let cfg: tokio_postgres::Config = url.parse().map_err(|e| format!("{url:?}: {e}"))?;
        let base = cfg.get_dbname().unwrap_or("xfer_bench");
        let name = format!("{base}_{tag}_{}", std::process::id());
        let mut admin = cfg.clone();
        admin.dbname("postgres");
        let db = FreshDatabase {
            url: with_database(url, &name)?,
            name,
            admin,
        };
        // Left over by a run that was killed: a database statement each (neither may run
        // in a transaction block).
        db.admin(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", db.name))
            .await?;
        db.admin(&format!("CREATE DATABASE {}", db.name)).await?;
        Ok(db)
    }

    async fn admin(&self, sql: &str) -> Result<(), String> {
        let (client, conn) = self
            .admin
            .connect(NoTls)
            .await
            .map_err(|e| format!("connecting to the PostgreSQL server: {e}"))?;
        let conn = tokio::spawn(conn);
        let result = client
            .batch_execute(sql)
            .await
            .map_err(|e| format!("{sql}: {}", describe(&e)));
        drop(client);
        let _ = conn.await;
        result
    }

    /// Drops the database.
    pub async fn drop_now(self) -> Result<(), String> {
        self.admin(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .await
    }
}

/// Native transactions against one database.
#[derive(Clone)]
pub struct Native {
    pool: Pool,
}

impl Native {
    /// Creates the tables and `accounts` funded accounts named as the workload names them
    /// (`usd-0`, `usd-1`, …), with `pool_size` connections.
    pub async fn setup(url: &str, accounts: u64, pool_size: usize) -> Result<Native, String> {
        let cfg: tokio_postgres::Config = url.parse().map_err(|e| format!("{url:?}: {e}"))?;
        let pool = xfer_store_postgres::pool(cfg, pool_size, std::time::Duration::from_secs(30))?;
        let client = pool.get().await.map_err(|e| e.to_string())?;
        client
            .batch_execute(&format!(
                "CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL);
                 CREATE TABLE transfers (id text PRIMARY KEY, debit_account text NOT NULL,
                     credit_account text NOT NULL, amount bigint NOT NULL,
                     created_at timestamptz NOT NULL DEFAULT now());
                 INSERT INTO accounts SELECT 'usd-' || i, 1000000000000
                     FROM generate_series(0, {}) AS i;
                 ANALYZE accounts;",
                accounts.saturating_sub(1)
            ))
            .await
            .map_err(|e| format!("baseline setup: {}", describe(&e)))?;
        Ok(Native { pool })
    }

    /// One transfer as one transaction: `Done`, or `Canceled` for insufficient funds.
    pub async fn transfer(&self, s: &TransferSpec) -> Result<TransferState, String> {
        let [p] = s.postings.as_slice() else {
            return Err("the baseline runs single-posting transfers only".into());
        };
        let (from, to) = (p.from.as_str(), p.to.as_str());
        let amount = i64::try_from(p.amount.units()).map_err(|e| e.to_string())?;
        let err = |e: tokio_postgres::Error| describe(&e);
        let mut client = self.pool.get().await.map_err(|e| e.to_string())?;
        let debit = client
            .prepare_cached(
                "UPDATE accounts SET balance = balance - $2 WHERE id = $1 AND balance >= $2",
            )
            .await
            .map_err(err)?;
        let credit = client
            .prepare_cached("UPDATE accounts SET balance = balance + $2 WHERE id = $1")
            .await
            .map_err(err)?;
        let insert = client
            .prepare_cached(
                "INSERT INTO transfers (id, debit_account, credit_account, amount) \
                 VALUES ($1, $2, $3, $4)",
            )
            .await
            .map_err(err)?;
        let tx = client.transaction().await.map_err(err)?;
        let funded = if from < to {
            let n = tx.execute(&debit, &[&from, &amount]).await.map_err(err)?;
            if n == 1 {
                tx.execute(&credit, &[&to, &amount]).await.map_err(err)?;
            }
            n == 1
        } else {
            tx.execute(&credit, &[&to, &amount]).await.map_err(err)?;
            tx.execute(&debit, &[&from, &amount]).await.map_err(err)? == 1
        };
        if !funded {
            tx.rollback().await.map_err(err)?;
            return Ok(TransferState::Canceled);
        }
        tx.execute(&insert, &[&s.id.as_str(), &from, &to, &amount])
            .await
            .map_err(err)?;
        tx.commit().await.map_err(err)?;
        Ok(TransferState::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_get_the_fresh_database() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/xfer_bench", "x_1").unwrap(),
            "postgres://postgres@127.0.0.1:5432/x_1"
        );
        assert_eq!(
            with_database("postgresql://u:p@h/db?sslmode=disable", "n").unwrap(),
            "postgres://u:p@h/n?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://h", "n").unwrap(),
            "postgres://h/n"
        );
        assert!(with_database("host=h dbname=x", "n").is_err());
    }
}
