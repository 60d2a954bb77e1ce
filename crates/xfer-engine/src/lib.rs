//! The protocol engine.
//!
//! - [`machine`]: the protocol as an I/O-free state machine ([`Machine`]).
//! - [`router`]: which shard holds a record ([`Router`]).
//! - [`cluster`]: the shards behind a router; one batch per shard per call ([`Cluster`]).
//! - [`retry`]: backoff, attempt bounds, and a sleep tests control ([`Retry`], [`Sleeper`]).
//! - [`error`]: [`ExecError`], what the caller of a failed call may do next.
//! - [`drive`]: many machines driven together in rounds, with retries, as a state
//!   machine without I/O ([`Drive`]) that the executor and the simulator both run.
//! - `precheck` (private): the reads that refuse bad input before a submit writes.
//! - [`executor`]: submits, captures, voids, re-drives transfers; closes accounts ([`Executor`]).
//! - [`combine`]: small submits of concurrent callers driven as one batch ([`Combiner`]).
//! - [`audit`](mod@audit): what the accounts add up to, and leaks; [`replay`](mod@replay):
//!   balances computed again from the transfers.
//! - [`sweeper`]: finishes transfers whose executor vanished; prunes tombstones ([`Sweeper`]).
pub mod audit;
pub mod cluster;
pub mod combine;
pub mod drive;
pub mod error;
pub mod escalation;
pub mod executor;
pub mod machine;
mod precheck;
pub mod replay;
pub mod retry;
pub mod router;
pub mod sweeper;

pub use audit::{audit, AuditReport};
pub use cluster::{Cluster, Durable};
pub use combine::{Combiner, Spawn};
pub use drive::{Decisions, Drive, Next, ROUNDS_MAX};
pub use error::ExecError;
pub use escalation::Tally;
pub use executor::{Ahead, Executor};
pub use machine::{Config, Machine, Outcome, Request};
pub use replay::{replay, ReplayReport};
pub use retry::{ManualSleeper, Retry, RetryPolicy, Sleeper, TokioSleeper};
pub use router::{Match, RouteError, Router, Rule};
pub use sweeper::{PassReport, SweepConfig, Sweeper};
