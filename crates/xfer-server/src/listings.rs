//! What the API reads and changes outside a transfer's protocol, as methods of
//! [`Service`]: accounts (create, change the lower bound, close, list), an account's
//! history, the canceled transfers and the audit. The handlers call these and decide only
//! the HTTP answer.

use crate::catalog::Catalog;
use crate::service::Service;
use std::collections::BTreeMap;
use std::sync::Arc;
use xfer_core::{
    Account, AccountId, AccountStatus, Asset, AssetCode, Code, LowerBound, Rejection, TransferId,
    TransferRecord, TransferState,
};
use xfer_engine::{AuditReport, ExecError, ReplayReport};
use xfer_store::{AccountOp, Metadata, Op, Reply};

/// A store failure of what is kept beside the records (`what`): damage as such, anything
/// else as unavailable.
fn side_error(what: &str, e: xfer_store::StoreError) -> ExecError {
    match e {
        xfer_store::StoreError::Corrupted(why) => ExecError::Corrupted(why),
        other => ExecError::Unavailable(format!("{what}: {other}")),
    }
}

fn catalog_error(e: xfer_store::StoreError) -> ExecError {
    side_error("the asset catalog", e)
}

/// Index pages a filtered history reads at most per request; transfers read per shard per
/// step of the canceled scan, and its steps per request.
const SCAN_STEPS_MAX: usize = 20;
const SCAN_CHUNK: usize = 1_000;

/// A page of a list read forwards: the items, and where the next page starts.
pub struct Page<T, C> {
    /// The items, in order.
    pub items: Vec<T>,
    /// Pass back to get the next page; `None` at the end.
    pub next: Option<C>,
}

impl Service {
    /// The shard that holds account `id` of `asset` (0 if the router cannot place it: the
    /// account was placed when it was created, so this only labels it).
    pub fn shard_of(&self, id: &AccountId, asset: &AssetCode) -> usize {
        self.cluster()
            .router()
            .shard_of_account(id, Some(asset))
            .unwrap_or(0)
    }

    /// Declares `asset` in the catalog (the cluster's first shard); the same code and scale
    /// again answers it, another scale is refused.
    pub async fn declare_asset(&self, asset: Asset) -> Result<Asset, ExecError> {
        let held = self
            .catalog_shard()
            .declare_asset(&asset)
            .await
            .map_err(catalog_error)?;
        self.catalog_cache().add(held.clone());
        if held.scale != asset.scale {
            return Err(Rejection::new(
                Code::AssetDeclaredWithAnotherScale,
                "scale",
                format!(
                    "{} is declared with scale {}; a declaration never changes",
                    held.code, held.scale
                ),
            )
            .into());
        }
        Ok(held)
    }

    /// The shard that keeps the asset catalog: the first.
    fn catalog_shard(&self) -> &Arc<dyn xfer_store::Store> {
        &self.cluster().shards()[0]
    }

    /// The catalog read from the store just now (and kept).
    pub async fn read_assets(&self) -> Result<Arc<Catalog>, ExecError> {
        let assets = self.catalog_shard().assets().await.map_err(catalog_error)?;
        self.catalog_cache().set(Catalog::new(assets));
        Ok(self.catalog_cache().get())
    }

    /// A catalog that holds every code of `codes` that is declared: the kept one if it
    /// holds them all, else read again (another process may have declared one since).
    pub async fn catalog_for<'a>(
        &self,
        mut codes: impl Iterator<Item = &'a AssetCode>,
    ) -> Result<Arc<Catalog>, ExecError> {
        let kept = self.catalog_cache().get();
        if codes.all(|c| kept.get(c).is_some()) {
            return Ok(kept);
        }
        self.read_assets().await
    }

    /// Creates account `id` (the same asset and bound again answers it), of a declared
    /// asset only.
    pub async fn create_account(
        &self,
        id: AccountId,
        asset: AssetCode,
        lower_bound: LowerBound,
    ) -> Result<Account, ExecError> {
        self.catalog_for(std::iter::once(&asset))
            .await?
            .require(&asset, "asset")?;
        if let LowerBound::Bounded(b) = lower_bound {
            if b > 0 {
                return Err(Rejection::new(
                    Code::LowerBoundOutOfRange,
                    "lower_bound",
                    format!("{b}: a new account's balance is 0, so its bound must be 0 or below"),
                )
                .into());
            }
        }
        let op = Op::Account(id.clone(), AccountOp::Create { asset, lower_bound });
        match self.executor().execute_op(op).await? {
            Reply::Account(a) => Ok(std::sync::Arc::unwrap_or_clone(a)),
            Reply::Refused(code) => Err(Rejection::new(
                code,
                "id",
                format!("{id} exists with another asset or lower bound"),
            )
            .into()),
            other => Err(unexpected(&id, "create", other)),
        }
    }

    /// The store that holds account `a` (its asset places it).
    fn home(&self, a: &Account) -> &Arc<dyn xfer_store::Store> {
        &self.cluster().shards()[self.shard_of(&a.id, &a.asset)]
    }

    /// Replaces account `a`'s metadata with `metadata` (empty: removes it).
    pub async fn set_account_metadata(
        &self,
        a: &Account,
        metadata: &Metadata,
    ) -> Result<(), ExecError> {
        self.home(a)
            .set_account_metadata(&a.id, metadata)
            .await
            .map_err(|e| side_error("account metadata", e))
    }

    /// The metadata of those of `accounts` that have some, read one call per shard.
    pub async fn metadata_of(
        &self,
        accounts: &[Account],
    ) -> Result<BTreeMap<AccountId, Metadata>, ExecError> {
        let shards = self.cluster().shards();
        let mut by_shard: Vec<Vec<AccountId>> = vec![Vec::new(); shards.len()];
        for a in accounts {
            by_shard[self.shard_of(&a.id, &a.asset)].push(a.id.clone());
        }
        let mut out = BTreeMap::new();
        for (shard, ids) in shards.iter().zip(&by_shard) {
            if ids.is_empty() {
                continue;
            }
            let found = shard
                .account_metadata(ids)
                .await
                .map_err(|e| side_error("account metadata", e))?;
            out.extend(found);
        }
        Ok(out)
    }

    /// Accounts whose metadata maps `key` to `value`, in id order after `after`, at most
    /// `limit`, from every shard, with their metadata.
    pub async fn accounts_with_metadata(
        &self,
        (key, value): (&str, &str),
        after: Option<AccountId>,
        limit: usize,
    ) -> Result<Page<(Account, Metadata), AccountId>, ExecError> {
        let mut found = Vec::new();
        for shard in self.cluster().shards() {
            let page = shard
                .accounts_with_metadata(key, value, after.as_ref(), limit)
                .await
                .map_err(|e| side_error("account metadata", e))?;
            found.extend(page);
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found.truncate(limit);
        let next = (found.len() == limit)
            .then(|| found.last().map(|(id, _)| id.clone()))
            .flatten();
        // One batch of reads per shard; metadata of an id with no account lists nothing.
        let ops = found
            .iter()
            .map(|(id, _)| Op::Account(id.clone(), AccountOp::Get))
            .collect();
        let replies = self.executor().execute_ops(ops).await?;
        let items = found
            .into_iter()
            .zip(replies)
            .filter_map(|((_, metadata), reply)| match reply {
                Reply::Account(a) if a.status != AccountStatus::Unopened => {
                    Some((Arc::unwrap_or_clone(a), metadata))
                }
                _ => None,
            })
            .collect();
        Ok(Page { items, next })
    }

    /// Changes account `id`'s lower bound (refused if its balance would be below it).
    pub async fn set_lower_bound(
        &self,
        id: AccountId,
        lower_bound: LowerBound,
    ) -> Result<Account, ExecError> {
        let op = Op::Account(id.clone(), AccountOp::SetLowerBound { lower_bound });
        match self.executor().execute_op(op).await? {
            Reply::Account(a) => Ok(std::sync::Arc::unwrap_or_clone(a)),
            Reply::Refused(code) => Err(Rejection::new(
                code,
                "lower_bound",
                format!("{id} cannot take the bound {} now", bound_text(lower_bound)),
            )
            .into()),
            Reply::NotFound => {
                Err(Rejection::new(Code::AccountNotFound, "id", format!("no account {id}")).into())
            }
            other => Err(unexpected(&id, "set lower bound", other)),
        }
    }

    /// Closes account `id` once no transfer is in flight on it.
    pub async fn close_account(&self, id: AccountId) -> Result<Account, ExecError> {
        self.executor().close_account(id).await
    }

    /// Accounts in id order after `after`, at most `limit`, from every shard.
    pub async fn list_accounts(
        &self,
        after: Option<AccountId>,
        limit: usize,
    ) -> Result<Page<Account, AccountId>, ExecError> {
        let mut all = Vec::new();
        for shard in self.cluster().shards() {
            let page = shard
                .accounts(after.as_ref(), limit)
                .await
                .map_err(|e| ExecError::Unavailable(e.to_string()))?;
            all.extend(page);
        }
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all.truncate(limit);
        let next = (all.len() == limit)
            .then(|| all.last().map(|a| a.id.clone()))
            .flatten();
        Ok(Page { items: all, next })
    }

    /// Account `id`'s transfers, newest first, strictly older than the cursor `before`, at
    /// most `limit`, only those now in `state` if given. Without a filter one page of the
    /// index is the answer; with one, pages are read until `limit` match or the bounded
    /// scan ends (the next cursor continues it, mid-page if need be).
    pub async fn history(
        &self,
        id: &AccountId,
        before: Option<u64>,
        limit: usize,
        state: Option<TransferState>,
    ) -> Result<Page<TransferRecord, u64>, ExecError> {
        self.history_kept(id, before, limit, &|r| state.is_none_or(|s| s == r.state))
            .await
    }

    /// Account `id`'s transfers that `keep` keeps, newest first, as [`Service::history`].
    pub async fn history_kept(
        &self,
        id: &AccountId,
        before: Option<u64>,
        limit: usize,
        keep: &(dyn Fn(&TransferRecord) -> bool + Sync),
    ) -> Result<Page<TransferRecord, u64>, ExecError> {
        let account = self.get_account(id).await?;
        let shard = self
            .cluster()
            .router()
            .shard_of_account(id, Some(&account.asset))
            .map_err(ExecError::from)?;
        let mut found = Vec::new();
        let mut before = before;
        for _ in 0..SCAN_STEPS_MAX {
            let page = self.cluster().shards()[shard]
                .history(id, before, limit)
                .await
                .map_err(|e| ExecError::Unavailable(e.to_string()))?;
            let ids: Vec<TransferId> = page.entries.iter().map(|(_, t)| t.clone()).collect();
            let records = self.get_transfers(&ids).await?;
            before = page.next;
            // A transfer the index names but the store no longer has is skipped.
            let mut records = records.into_iter().peekable();
            for (seq, transfer) in &page.entries {
                let Some(record) = records.next_if(|r| &r.spec.id == transfer) else {
                    continue;
                };
                if keep(&record) {
                    found.push(record);
                    if found.len() == limit {
                        // The rest of this page comes next.
                        before = (Some(seq) != page.entries.last().map(|(s, _)| s))
                            .then_some(*seq)
                            .or(page.next);
                        break;
                    }
                }
            }
            if found.len() == limit || before.is_none() {
                break;
            }
        }
        Ok(Page {
            items: found,
            next: before,
        })
    }

    /// Canceled transfers in id order after `after`, at most `limit`; a bounded scan, so a
    /// page may hold fewer and still have a next cursor.
    pub async fn canceled(
        &self,
        after: Option<TransferId>,
        limit: usize,
    ) -> Result<Page<TransferRecord, TransferId>, ExecError> {
        let mut cursor = after;
        let mut found = Vec::new();
        let mut more = true;
        for _ in 0..SCAN_STEPS_MAX {
            // Each shard's next chunk; only ids up to the smallest last id of a full chunk
            // are known complete across shards.
            let mut merged = Vec::new();
            let mut bound: Option<TransferId> = None;
            for shard in self.cluster().shards() {
                let chunk = shard
                    .transfers(cursor.as_ref(), SCAN_CHUNK)
                    .await
                    .map_err(|e| ExecError::Unavailable(e.to_string()))?;
                if chunk.len() == SCAN_CHUNK {
                    let last = chunk.last().expect("full").spec.id.clone();
                    bound = Some(bound.map_or(last.clone(), |b: TransferId| b.min(last)));
                }
                merged.extend(chunk);
            }
            merged.sort_by(|a, b| a.spec.id.cmp(&b.spec.id));
            if let Some(b) = &bound {
                merged.retain(|r| &r.spec.id <= b);
            }
            let mut last = None;
            for r in merged {
                last = Some(r.spec.id.clone());
                if r.state == TransferState::Canceled {
                    found.push(r);
                    if found.len() == limit {
                        break;
                    }
                }
            }
            more = bound.is_some() || found.len() == limit;
            cursor = last.or(cursor);
            if found.len() == limit || !more {
                break;
            }
        }
        Ok(Page {
            items: found,
            next: more.then_some(cursor).flatten(),
        })
    }

    /// Totals per asset, transfers in flight, leaks.
    pub async fn audit(&self) -> Result<AuditReport, ExecError> {
        xfer_engine::audit(self.cluster()).await
    }

    /// Every balance computed again from the transfers; tombstones more than `grace_ms`
    /// past their horizon listed as overdue.
    pub async fn replay(&self, grace_ms: u64) -> Result<ReplayReport, ExecError> {
        xfer_engine::replay(self.cluster(), self.now(), grace_ms).await
    }
}

fn bound_text(b: LowerBound) -> String {
    match b {
        LowerBound::Bounded(n) => n.to_string(),
        LowerBound::Unbounded => "unbounded".to_string(),
    }
}

fn unexpected(id: &impl std::fmt::Display, what: &str, reply: Reply) -> ExecError {
    ExecError::Violation(format!("{id}: {what} answered {reply}"))
}
