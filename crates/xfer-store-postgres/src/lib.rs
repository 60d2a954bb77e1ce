//! xfer's PostgreSQL store: a [`Store`](xfer_store::Store) shard in a PostgreSQL schema.
//!
//! A deployment lists its shards (databases, servers, or schemas of one database) in its
//! configuration; each becomes one [`PostgresStore`]. Every protocol step is a server-side
//! function that locks one record's row, checks the step's conditions and writes
//! (`schema.sql`); a batch of steps for one shard is one statement, so it costs one round
//! trip and one commit however many transfers it carries, and a hot account is updated in
//! place, once per step, with no read-modify-write retries. Nothing ever spans two round
//! trips: there is no multi-statement transaction.
//!
//! Why `tokio-postgres` with `deadpool-postgres` and not sqlx: the store sends one fixed
//! statement per call (no query builder, no compile-time checked queries to gain), and
//! tokio-postgres is the smaller build with a statement cache per pooled connection.

mod store;
mod wire;

pub use deadpool_postgres::Pool;
pub use store::{describe, pool, PostgresConfig, PostgresStore};
pub use xfer_store::database::OpenError;
