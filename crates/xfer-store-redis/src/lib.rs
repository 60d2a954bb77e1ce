//! xfer's Redis store: a [`Store`](xfer_store::Store) shard on a Redis server or a Redis
//! Cluster.
//!
//! Every protocol step is one server-side function (`functions.lua`, loaded with
//! `FUNCTION LOAD` when a store opens) on one record: the function checks the step's
//! conditions and writes, atomically, next to the data; a batch of steps for one shard is
//! one pipeline of `FCALL`s, one round trip. Amounts are exact 64-bit integers: Lua's numbers
//! are doubles, so the functions add and compare amounts as decimal strings.
//!
//! All keys of one shard carry the shard's hash tag (`{prefix}:…`), so a record and the
//! shard's indexes (wake times, tombstones, history, id lists) live in one Cluster slot and
//! a step's function may touch them together; different shards' tags hash to different
//! slots, so a Cluster spreads the shards over its masters.
//!
//! Durability is the server's: a step is acknowledged when Redis has answered it, which is on
//! disk only with `appendonly yes` and `appendfsync always`. [`RedisStore::durability`]
//! reads each master's settings so the caller can warn loudly when they are weaker. Redis
//! replication is asynchronous: a failover to a replica may lose acknowledged steps.
//!
//! Why redis-rs: the maintained Rust client, with pipelines, a reconnecting connection
//! manager and an async Cluster client that routes a pipeline by its keys' slot.

mod cluster;
mod keys;
mod store;
mod wire;

pub use store::{Durability, RedisConfig, RedisStore};
pub use xfer_store::database::OpenError;
