//! xfer's domain: the nouns every other crate speaks.
//!
//! - [`time`]: [`Timestamp`], milliseconds on some clock; nothing here reads a clock.
//! - [`id`]: [`AccountId`], [`TransferId`], [`OwnerId`], validated names.
//! - [`amount`]: [`Asset`] (code and scale, exact decimal text), [`AssetCode`], [`Amount`]:
//!   exact integers in an asset's minor unit.
//! - [`rejection`]: [`Rejection`], the named reason a request was refused, and its field.
//! - [`account`]: the [`Account`] record with its [`Intent`]s and [`LowerBound`];
//!   [`intents`]: [`Intents`], an account's intents by transfer id (hashed, listed in order).
//! - [`hash`]: [`FastMap`], [`FastSet`], [`FastState`]: the hasher of maps keyed by ids.
//! - [`transfer`]: [`TransferSpec`] (what the client asks), [`TransferRecord`] (what the log
//!   keeps), [`TransferState`] and its allowed transitions, and the per-account [`Leg`]s.
//! - [`timeline`]: [`Timeline`], the bounded list of [`Step`]s a transfer record keeps.
//! - [`rng`]: [`Rng`], the deterministic generator the simulator and fault injection use.
//! - [`mutant`]: known-bad protocol variants, compiled only with the `mutants` feature.

pub mod account;
pub mod amount;
pub mod hash;
pub mod id;
pub mod intents;
pub mod mutant;
pub mod rejection;
pub mod rng;
pub mod time;
pub mod timeline;
pub mod transfer;

pub use account::{Account, AccountStatus, Intent, IntentState, LowerBound};
pub use amount::{Amount, Asset, AssetCode};
pub use hash::{FastMap, FastSet, FastState};
pub use id::{AccountId, OwnerId, TransferId};
pub use intents::Intents;
pub use mutant::Mutant;
pub use rejection::{Code, Rejection};
pub use rng::Rng;
pub use time::{Clock, ManualClock, SystemClock, Timestamp};
pub use timeline::{Step, Timeline, TIMELINE_STEPS_MAX};
pub use transfer::Posting;
pub use transfer::{
    CancelReason, Escalation, Leg, Legs, Postings, RefundLink, TransferKind, TransferRecord,
    TransferSpec, TransferState, POSTINGS_MAX, REFUNDS_MAX,
};
