//! xfer's MySQL/MariaDB store: a [`Store`](xfer_store::Store) shard in a MySQL database.
//!
//! A deployment lists its shards (databases on one or several servers) in its
//! configuration; each becomes one [`MysqlStore`]. Every protocol step is a stored procedure
//! that locks one record's row, checks the step's conditions and writes (`schema.sql`); a
//! batch of steps for one shard is one `CALL`, one transaction and one commit however many
//! transfers it carries, and a hot account is updated in place, once per step, with no
//! read-modify-write retries. It runs on MariaDB 10.6 or later and MySQL 8.0.4 or later
//! (`JSON_TABLE`), InnoDB.
//!
//! Why `mysql_async`: the store sends a few fixed statements (no query builder or
//! compile-time checked queries to gain from sqlx), prepared once per pooled connection,
//! and it builds without TLS or a C library.
//!
//! - `wire`: the JSON a batch travels in (the replies are [`xfer_store::reply_json`]'s).
//! - [`durability`]: the server settings that decide whether an acknowledged write survives.
//! - `store`: the pool, the migrations and the [`Store`](xfer_store::Store) calls.

pub mod durability;
mod store;
mod wire;

pub use durability::Durability;
pub use store::{MysqlConfig, MysqlStore};
pub use xfer_store::database::OpenError;
