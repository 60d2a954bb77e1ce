//! [`replay`]: every account's balance computed again from zero out of the transfer records,
//! and compared with the balance the account holds.
//!
//! Accounts open at zero and only transfers move their balances, so an account's balance is
//! the sum of the legs of every `done` transfer that names it, plus the legs already posted
//! of transfers decided `applied` and not yet `done`. A difference is money that moved
//! without a transfer, or a transfer that did not move it: a store edited by hand, a bug, a
//! restore from mismatched backups. The audit ([`crate::audit()`]) checks that the sums agree
//! with each other; this checks them against history.
//!
//! The accounts are read first, then the transfers, a page at a time (memory grows with
//! the accounts, not the transfers). Under load a transfer may move money between the two
//! reads: an account with an open intent when read is not compared, nor is one named by a
//! transfer created after the reads began (less [`CLOCK_SLACK_MS`] for the executors'
//! clocks); at rest every account is compared, exactly.
//!
//! It also lists tombstones (posted or released intents) kept past their horizon by more
//! than the grace given: the sweeper should have dropped them.

use crate::audit::all_accounts;
use crate::cluster::Cluster;
use crate::error::ExecError;
use std::collections::{HashMap, HashSet};
use xfer_core::{AccountId, IntentState, Timestamp, TransferId, TransferState};

/// Transfer records read per shard per call.
const PAGE: usize = 1_000;
/// How far the clocks of the executors that stamp records may be ahead of this one's.
pub const CLOCK_SLACK_MS: u64 = 1_000;
/// The most differences and overdue tombstones listed one by one (all are counted).
pub const LISTED_MAX: usize = 1_000;

/// An account whose balance is not what its transfers add up to.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Difference {
    /// The account.
    pub account: String,
    /// Its asset.
    pub asset: String,
    /// The balance it holds.
    pub balance: i64,
    /// What its transfers add up to.
    pub replayed: i128,
}

/// A tombstone the sweeper should have dropped.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Overdue {
    /// The account that keeps it.
    pub account: String,
    /// Its transfer.
    pub transfer: String,
    /// Its horizon, ms since the epoch.
    pub horizon_ms: u64,
}

/// What a replay found.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReplayReport {
    /// Transfer records read.
    pub transfers: u64,
    /// Of them, `done` ones replayed.
    pub done: u64,
    /// Accounts compared.
    pub accounts_compared: u64,
    /// Accounts not compared because money was moving on them during the replay.
    pub accounts_busy: u64,
    /// Accounts whose balance differs (at most [`LISTED_MAX`]).
    pub differences: Vec<Difference>,
    /// How many differ.
    pub differences_total: u64,
    /// Tombstones past their horizon by more than the grace (at most [`LISTED_MAX`]).
    pub overdue_tombstones: Vec<Overdue>,
    /// How many there are.
    pub overdue_tombstones_total: u64,
}

impl ReplayReport {
    /// No difference (overdue tombstones are a sweeper's lag, not a wrong balance).
    pub fn is_clean(&self) -> bool {
        self.differences_total == 0
    }

    fn differ(&mut self, d: Difference) {
        self.differences_total += 1;
        if self.differences.len() < LISTED_MAX {
            self.differences.push(d);
        }
    }
}

/// Replays every shard of `cluster` at `now` (see the module docs); tombstones more than
/// `grace_ms` past their horizon are listed as overdue.
pub async fn replay(
    cluster: &Cluster,
    now: Timestamp,
    grace_ms: u64,
) -> Result<ReplayReport, ExecError> {
    let mut report = ReplayReport::default();
    let accounts = all_accounts(cluster).await?;
    let mut busy: HashSet<AccountId> = HashSet::new();
    for a in &accounts {
        for (transfer, intent) in &a.intents {
            if intent.state == IntentState::Open {
                busy.insert(a.id.clone());
            } else if intent.horizon.as_ms().saturating_add(grace_ms) < now.as_ms() {
                report.overdue_tombstones_total += 1;
                if report.overdue_tombstones.len() < LISTED_MAX {
                    report.overdue_tombstones.push(Overdue {
                        account: a.id.to_string(),
                        transfer: transfer.to_string(),
                        horizon_ms: intent.horizon.as_ms(),
                    });
                }
            }
        }
    }

    let recent = now.as_ms().saturating_sub(CLOCK_SLACK_MS);
    let mut replayed: HashMap<AccountId, i128> = HashMap::new();
    let mut applied: HashSet<TransferId> = HashSet::new();
    for shard in cluster.shards() {
        let mut after: Option<TransferId> = None;
        loop {
            let page = shard
                .transfers(after.as_ref(), PAGE)
                .await
                .map_err(|e| ExecError::Unavailable(format!("replay: list transfers: {e}")))?;
            let full = page.len() == PAGE;
            after = page.last().map(|r| r.spec.id.clone());
            for r in &page {
                report.transfers += 1;
                if r.created_at.as_ms() >= recent {
                    // Perhaps moving money the accounts, read before, do not show yet.
                    for p in r.spec.postings.iter() {
                        busy.insert(p.from.clone());
                        busy.insert(p.to.clone());
                    }
                    continue;
                }
                match r.state {
                    TransferState::Done => {
                        report.done += 1;
                        for p in r.moved_postings().iter() {
                            let amount = i128::from(p.amount.units());
                            *replayed.entry(p.from.clone()).or_default() -= amount;
                            *replayed.entry(p.to.clone()).or_default() += amount;
                        }
                    }
                    TransferState::Applied => {
                        applied.insert(r.spec.id.clone());
                    }
                    _ => {}
                }
            }
            if !full {
                break;
            }
        }
    }

    for a in &accounts {
        // Taken out: what is left at the end names accounts that do not exist.
        let sum = replayed.remove(&a.id).unwrap_or(0);
        if busy.contains(&a.id) {
            report.accounts_busy += 1;
            continue;
        }
        report.accounts_compared += 1;
        let mut expected = sum;
        for (transfer, intent) in &a.intents {
            if intent.state == IntentState::Posted && applied.contains(transfer) {
                expected += i128::from(intent.credit) - i128::from(intent.debit);
            }
        }
        if expected != i128::from(a.balance) {
            let d = Difference {
                account: a.id.to_string(),
                asset: a.asset.to_string(),
                balance: a.balance,
                replayed: expected,
            };
            report.differ(d);
        }
    }
    // Money moved to or from accounts that do not exist.
    let mut missing: Vec<(AccountId, i128)> = replayed
        .into_iter()
        .filter(|(id, sum)| *sum != 0 && !busy.contains(id))
        .collect();
    missing.sort();
    for (id, sum) in missing {
        let d = Difference {
            account: id.to_string(),
            asset: String::new(),
            balance: 0,
            replayed: sum,
        };
        report.differ(d);
    }
    Ok(report)
}
