//! `xfer bench`: throughput and latency of xfer on a fresh store, measured the way users run
//! it, beside what an application without xfer would do (the native baselines).
//!
//! | module | what |
//! |---|---|
//! | `bench` | a run: set up the store and accounts, drive the clients, measure |
//! | `target` | where the clients submit (library or HTTP) and what they read back |
//! | `workload` | which accounts and assets each transfer names |
//! | `ids` | transfer ids as the clients make them |
//! | `latency` | latencies per request and submit to decided |
//! | `usage` | CPU, idle and steal shares, bytes written, memory |
//! | `report` | what a run measured, and how it is printed |
//! | `args` | the command line |
//! | `baseline` | the native PostgreSQL baseline: one SQL transaction per transfer |
//! | `native_redis` | the native Redis baseline: one function call per transfer |
//! | `placement` | the shards' hash tags spread over a Redis Cluster's masters |
//! | `native_mysql` | the native MySQL baseline: one InnoDB transaction per transfer |

pub mod args;
pub mod baseline;
pub mod bench;
pub mod ids;
pub mod latency;
pub mod native_mysql;
pub mod native_redis;
pub mod placement;
pub mod report;
pub mod target;
pub mod usage;
pub mod workload;
