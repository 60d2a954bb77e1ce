//! The account record: one asset's balance on one shard, plus the intents of the transfers
//! in flight that touch it (the MongoDB tutorial's `pendingTransactions`, with amounts).
//!
//! ```text
//!   balance    posted money            available = balance - reserved - lower_bound
//!   reserved   prepared debits         (incoming is NOT available until posted)
//!   incoming   prepared credits
//!   intents    transfer id -> {debit, credit, open | posted | released, horizon}
//! ```
//!
//! A posted or released intent stays as a tombstone until the store's clock passes its
//! `horizon` (the transfer's prepare deadline plus the skew bound): a prepare that arrives
//! late finds it and does nothing. See `docs/protocol.md`.

use crate::amount::AssetCode;
use crate::id::AccountId;
use crate::intents::Intents;
use crate::time::Timestamp;

/// The least `balance - reserved` an account may reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LowerBound {
    /// `balance - reserved >= n` at all times (0 by default; negative allows credit).
    Bounded(i64),
    /// No bound: an issuer account, the only place money enters from.
    Unbounded,
}

impl Default for LowerBound {
    fn default() -> Self {
        LowerBound::Bounded(0)
    }
}

/// Whether an account takes part in transfers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountStatus {
    /// Usable.
    Open,
    /// Closed: every prepare is refused with `account_closed`.
    Closed,
    /// Nobody created this id yet, but a release reached it and left tombstones here so that
    /// a prepare arriving after the account is created still finds them. Behaves as missing.
    Unopened,
}

/// What became of an intent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntentState {
    /// Prepared; its amounts are in `reserved` / `incoming`.
    Open,
    /// Moved into `balance` (tombstone).
    Posted,
    /// Given back, or released before any prepare arrived (tombstone).
    Released,
}

/// One transfer's entry on one account.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Intent {
    /// Total debited from this account by the transfer.
    pub debit: u64,
    /// Total credited to this account by the transfer.
    pub credit: u64,
    /// Open, or a tombstone.
    pub state: IntentState,
    /// After this instant on the store's clock no prepare of the transfer can be accepted,
    /// so a tombstone may be dropped.
    pub horizon: Timestamp,
}

/// An account record.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Account {
    /// Its id.
    pub id: AccountId,
    /// The one asset it holds.
    pub asset: AssetCode,
    /// Posted balance.
    pub balance: i64,
    /// Sum of the debits of open intents.
    pub reserved: i64,
    /// Sum of the credits of open intents.
    pub incoming: i64,
    /// The least `balance - reserved` may reach.
    pub lower_bound: LowerBound,
    /// Open, closed, or a placeholder for tombstones.
    pub status: AccountStatus,
    /// In-flight transfers and tombstones, by transfer id.
    pub intents: Intents,
}

impl Account {
    /// A new open account with a zero balance.
    pub fn open(id: AccountId, asset: AssetCode, lower_bound: LowerBound) -> Account {
        Account {
            id,
            asset,
            balance: 0,
            reserved: 0,
            incoming: 0,
            lower_bound,
            status: AccountStatus::Open,
            intents: Intents::new(),
        }
    }

    /// What a debit may still take: `balance - reserved - lower_bound` (i128: never overflows).
    pub fn available(&self) -> i128 {
        match self.lower_bound {
            LowerBound::Bounded(lb) => self.balance as i128 - self.reserved as i128 - lb as i128,
            LowerBound::Unbounded => i128::MAX,
        }
    }

    /// Guarantee 2: `balance - reserved >= lower_bound`.
    pub fn is_within_bound(&self) -> bool {
        self.available() >= 0
    }

    /// A copy with its open intents and none of its tombstones: what a checkpoint writes of
    /// it (its tombstones are written apart, once each).
    pub fn without_tombstones(&self) -> Account {
        Account {
            id: self.id.clone(),
            asset: self.asset.clone(),
            intents: self.intents.open_only(),
            ..*self
        }
    }

    /// How many intents are still open (transfers in flight).
    pub fn open_intents(&self) -> usize {
        self.intents.open_len()
    }

    /// Checks the record's own arithmetic: reserved and incoming are the sums of the open
    /// intents and never negative. `Err` names the first broken rule.
    pub fn check_sums(&self) -> Result<(), String> {
        let (mut debits, mut credits) = (0i128, 0i128);
        for (_, i) in self.intents.open_unordered() {
            debits += i.debit as i128;
            credits += i.credit as i128;
        }
        if debits != self.reserved as i128 {
            return Err(format!(
                "{}: reserved {} != open debits {debits}",
                self.id, self.reserved
            ));
        }
        if credits != self.incoming as i128 {
            return Err(format!(
                "{}: incoming {} != open credits {credits}",
                self.id, self.incoming
            ));
        }
        Ok(())
    }
}
