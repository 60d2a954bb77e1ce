//! xfer's MongoDB store: a [`Store`](xfer_store::Store) shard in a MongoDB database.
//!
//! The articles' own design (seeds 000, 001, 003), done right: an account is one document
//! holding its balance, its reservations and its intents keyed by transfer (with the
//! tombstones that stop a late or repeated step), a transfer is another, and every protocol
//! step is one atomic update of one document: a `findOneAndUpdate` whose update pipeline
//! checks the step's rule against the document and writes only where it holds. There is no
//! multi-document transaction and no read-modify-write retry loop.
//!
//! A batch of steps for one shard is sent at once: the steps of different documents run
//! concurrently on the connection pool; an account's prepares, posts and releases in a row
//! are one update of its document (`steps::chain`), a transfer's steps one each, in order;
//! the history entries the batch writes go in one `insertMany`. (`bulkWrite` cannot serve:
//! it answers counts, not the documents the replies are made from, and a document read
//! after a step that did not apply may already be another step's.)
//!
//! What it needs from MongoDB: 4.2 or later (update pipelines in `findAndModify`, `$$REMOVE`,
//! `$toDecimal`), a replica set or a sharded cluster (writes are acknowledged with
//! `w: "majority", j: true`; a standalone server journals but has no replica to fail over
//! to). Sharded clusters: the shard key of every collection is `_id`.
//!
//! - `documents`: the documents and their fields.
//! - `steps`: each step as one update pipeline.
//! - `answer`: the reply to a step, from the document it returned.
//! - [`durability`]: what the server's settings say about acknowledged writes.
//! - `store`: the client, the indexes and the [`Store`](xfer_store::Store) calls.

mod answer;
mod documents;
pub mod durability;
mod steps;
mod store;

pub use durability::Durability;
pub use store::{MongoConfig, MongoStore};
pub use xfer_store::database::OpenError;
