//! [`audit`]: reads every account and every unfinished transfer of a [`Cluster`] and says
//! what they add up to and whether anything leaked.
//!
//! Per asset it sums balances, reserved and incoming, and checks conservation (SPEC §3,
//! guarantee 1): money only moves between accounts, so the balances of an asset plus the
//! open intents of transfers already decided `applied` (counted as if posted) add up to zero
//! — issuer accounts go negative by what they issued.
//!
//! Leaks (guarantees 2 and 7) are named one by one:
//! - an account whose `reserved`/`incoming` differ from the sums of its open intents;
//! - an account below its lower bound;
//! - an open intent whose transfer is terminal or missing, seen twice (the account is read
//!   again after the transfer, so a post racing the audit is not reported).
//!
//! The reads are not one snapshot: under load, conservation is checked only for the assets
//! whose sum is computed while nothing of theirs is in flight; at rest the audit is exact.

use crate::cluster::Cluster;
use crate::error::ExecError;
use crate::machine::Request;
use std::collections::{BTreeMap, BTreeSet};
use xfer_core::{Account, AccountId, AssetCode, IntentState, TransferId, TransferState};
use xfer_store::{AccountOp, Op, Reply, StoreError, TransferOp};

/// Accounts read per shard per call.
const PAGE: usize = 1_000;
/// The most unfinished transfers counted per shard.
pub const IN_FLIGHT_COUNT_MAX: usize = 1_000_000;

/// What one asset adds up to.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AssetTotals {
    /// The asset.
    pub asset: String,
    /// Open accounts and closed ones.
    pub accounts: u64,
    /// Sum of posted balances.
    pub balance: i128,
    /// Sum of prepared debits not yet posted.
    pub reserved: i128,
    /// Sum of prepared credits not yet posted.
    pub incoming: i128,
    /// Balances plus the open intents of `applied` transfers: zero when money was conserved.
    pub net: i128,
    /// `Some(true)` when `net` is zero, `Some(false)` when it is not although nothing of
    /// this asset was in flight, `None` when transfers in flight made the check unsound.
    pub conserved: Option<bool>,
}

/// One thing found wrong.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Leak {
    /// `counters_mismatch`, `below_lower_bound`, `orphan_intent` or `not_conserved`.
    pub kind: &'static str,
    /// The account or asset concerned.
    pub subject: String,
    /// What exactly.
    pub detail: String,
}

/// The whole report.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AuditReport {
    /// Per asset, in asset order.
    pub assets: Vec<AssetTotals>,
    /// Unfinished transfers by state (`pending`, `applied`, …).
    pub in_flight: BTreeMap<String, u64>,
    /// Open intents seen on accounts.
    pub open_intents: u64,
    /// Posted or released intents still kept (dropped by the sweeper past their horizon).
    pub tombstones: u64,
    /// Everything found wrong; empty when clean.
    pub leaks: Vec<Leak>,
}

impl AuditReport {
    /// No leak found.
    pub fn is_clean(&self) -> bool {
        self.leaks.is_empty()
    }
}

/// Audits every shard of `cluster` (see the module docs).
pub async fn audit(cluster: &Cluster) -> Result<AuditReport, ExecError> {
    let mut report = AuditReport::default();
    for state in count_in_flight(cluster).await? {
        *report.in_flight.entry(state.to_string()).or_default() += 1;
    }
    let accounts = all_accounts(cluster).await?;
    let intents: BTreeSet<TransferId> = accounts
        .iter()
        .flat_map(|a| a.intents.unordered()) // into an ordered set: order does not matter
        .filter(|(_, i)| i.state == IntentState::Open)
        .map(|(t, _)| t.clone())
        .collect();
    let states = transfer_states(cluster, &intents).await?;

    let mut totals: BTreeMap<AssetCode, AssetTotals> = BTreeMap::new();
    let mut busy: BTreeSet<AssetCode> = BTreeSet::new();
    let mut suspects: Vec<(AccountId, TransferId)> = Vec::new();
    for a in &accounts {
        let t = totals
            .entry(a.asset.clone())
            .or_insert_with(|| AssetTotals {
                asset: a.asset.to_string(),
                ..AssetTotals::default()
            });
        t.accounts += 1;
        t.balance += i128::from(a.balance);
        t.reserved += i128::from(a.reserved);
        t.incoming += i128::from(a.incoming);
        t.net += i128::from(a.balance);
        if let Err(why) = a.check_sums() {
            report.leak("counters_mismatch", a.id.as_str(), why);
        }
        if !a.is_within_bound() {
            let why = format!(
                "balance {} - reserved {} is below its lower bound {:?}",
                a.balance, a.reserved, a.lower_bound
            );
            report.leak("below_lower_bound", a.id.as_str(), why);
        }
        for (id, intent) in &a.intents {
            if intent.state != IntentState::Open {
                report.tombstones += 1;
                continue;
            }
            report.open_intents += 1;
            busy.insert(a.asset.clone());
            match states.get(id) {
                Some((TransferState::Applied, parts)) => {
                    // Decided: it will move its part of this account (of a hold captured in
                    // part, the captured part), the rest given back.
                    let (debit, credit) = parts
                        .as_ref()
                        .and_then(|legs| legs.iter().find(|l| l.account == a.id))
                        .map_or((intent.debit, intent.credit), |l| (l.debit, l.credit));
                    t.net += i128::from(credit) - i128::from(debit);
                }
                Some((s, _)) if s.is_terminal() => suspects.push((a.id.clone(), id.clone())),
                None => suspects.push((a.id.clone(), id.clone())),
                Some(_) => {}
            }
        }
    }
    for (account, transfer) in confirm_orphans(cluster, suspects).await? {
        let why = format!("open intent of {transfer}, which is finished or missing");
        report.leak("orphan_intent", account.as_str(), why);
    }
    for (asset, mut t) in totals {
        t.conserved = if busy.contains(&asset) && t.net != 0 {
            None
        } else {
            Some(t.net == 0)
        };
        if t.conserved == Some(false) {
            let why = format!("balances add up to {} instead of 0", t.net);
            report.leak("not_conserved", asset.as_str(), why);
        }
        report.assets.push(t);
    }
    Ok(report)
}

impl AuditReport {
    fn leak(&mut self, kind: &'static str, subject: &str, detail: String) {
        self.leaks.push(Leak {
            kind,
            subject: subject.to_string(),
            detail,
        });
    }
}

fn store_failed(what: &str, e: StoreError) -> ExecError {
    ExecError::Unavailable(format!("audit: {what}: {e}"))
}

async fn count_in_flight(cluster: &Cluster) -> Result<Vec<TransferState>, ExecError> {
    let mut states = Vec::new();
    for shard in cluster.shards() {
        let due = shard
            .scan_due(xfer_core::Timestamp::NEVER, IN_FLIGHT_COUNT_MAX)
            .await
            .map_err(|e| store_failed("scan unfinished transfers", e))?;
        states.extend(due.iter().map(|r| r.state));
    }
    Ok(states)
}

/// Every account of every shard, read in pages.
pub async fn all_accounts(cluster: &Cluster) -> Result<Vec<Account>, ExecError> {
    let mut all = Vec::new();
    for shard in cluster.shards() {
        let mut after: Option<AccountId> = None;
        loop {
            let page = shard
                .accounts(after.as_ref(), PAGE)
                .await
                .map_err(|e| store_failed("list accounts", e))?;
            let full = page.len() == PAGE;
            after = page.last().map(|a| a.id.clone());
            all.extend(page);
            if !full {
                break;
            }
        }
    }
    Ok(all)
}

/// Each transfer's state, and of a hold captured in part the legs of what it captured.
async fn transfer_states(
    cluster: &Cluster,
    ids: &BTreeSet<TransferId>,
) -> Result<BTreeMap<TransferId, (TransferState, Option<xfer_core::Legs>)>, ExecError> {
    let ops = ids
        .iter()
        .map(|id| Op::Transfer(id.clone(), TransferOp::Get))
        .collect();
    let mut states = BTreeMap::new();
    for (id, reply) in ids.iter().zip(read_all(cluster, ops).await?) {
        if let Reply::Transfer(r) | Reply::Unchanged(r) = reply {
            states.insert(id.clone(), (r.state, r.captured_legs()));
        }
    }
    Ok(states)
}

/// Reads the suspect accounts again: an intent still open now, of a transfer that was
/// terminal (or missing) before this read, is a leak.
async fn confirm_orphans(
    cluster: &Cluster,
    suspects: Vec<(AccountId, TransferId)>,
) -> Result<Vec<(AccountId, TransferId)>, ExecError> {
    let ops = suspects
        .iter()
        .map(|(a, _)| Op::Account(a.clone(), AccountOp::Get))
        .collect();
    let replies = read_all(cluster, ops).await?;
    Ok(suspects
        .into_iter()
        .zip(replies)
        .filter(|((_, t), reply)| match reply {
            Reply::Account(a) => a
                .intents
                .get(t)
                .is_some_and(|i| i.state == IntentState::Open),
            _ => false,
        })
        .map(|(s, _)| s)
        .collect())
}

/// Sends read ops as one batch per shard; any failure fails the audit (nothing changes).
async fn read_all(cluster: &Cluster, ops: Vec<Op>) -> Result<Vec<Reply>, ExecError> {
    let requests: Vec<Request> = ops
        .into_iter()
        .enumerate()
        .map(|(i, op)| Request { tag: i as u32, op })
        .collect();
    cluster
        .execute(&requests)
        .await?
        .into_iter()
        .map(|sent| sent.map_err(|e| store_failed("read", e)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::Router;
    use std::sync::Arc;
    use xfer_core::{Intent, LowerBound, ManualClock, Timestamp};
    use xfer_store::{MemoryShard, MemoryStore, Store};

    fn cluster_with(accounts: Vec<Account>) -> Cluster {
        let mut shard = MemoryShard::new();
        shard.restore_accounts(accounts);
        let store = MemoryStore::with_shard(shard, Arc::new(ManualClock::at(Timestamp(1))));
        Cluster::new(vec![Arc::new(store) as Arc<dyn Store>], Router::hash(1))
    }

    fn account(id: &str, balance: i64, bound: LowerBound) -> Account {
        let mut a = Account::open(
            AccountId::new(id).unwrap(),
            AssetCode::new("USD", "asset").unwrap(),
            bound,
        );
        a.balance = balance;
        a
    }

    #[tokio::test]
    async fn balanced_accounts_are_clean() {
        let c = cluster_with(vec![
            account("issuer", -100, LowerBound::Unbounded),
            account("alice", 100, LowerBound::default()),
        ]);
        let r = audit(&c).await.unwrap();
        assert!(r.is_clean(), "{r:?}");
        assert_eq!(r.assets[0].conserved, Some(true));
        assert_eq!(r.assets[0].accounts, 2);
    }

    #[tokio::test]
    async fn created_money_and_orphan_intents_are_leaks() {
        let mut alice = account("alice", 100, LowerBound::default());
        alice.reserved = 5;
        alice.intents.insert(
            TransferId::new("gone").unwrap(),
            Intent {
                debit: 5,
                credit: 0,
                state: IntentState::Open,
                horizon: Timestamp(10),
            },
        );
        let c = cluster_with(vec![alice, account("bob", -150, LowerBound::default())]);
        let r = audit(&c).await.unwrap();
        let kinds: Vec<&str> = r.leaks.iter().map(|l| l.kind).collect();
        assert_eq!(kinds, ["below_lower_bound", "orphan_intent"], "{r:?}");
        // USD is busy (an open intent), so conservation is not judged.
        assert_eq!(r.assets[0].conserved, None);
    }
}
