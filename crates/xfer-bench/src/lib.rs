//! `xfer bench`: throughput and latency of xfer on a fresh store, measured the way users run
//! it, beside what an application without xfer would do (the native baselines).
//!
//! | module | what |
//! |---|---|
//! | `bench` | the workloads, the clients, the measurements and the report |
//! | `baseline` | the native PostgreSQL baseline: one SQL transaction per transfer |

pub mod baseline;
pub mod bench;
