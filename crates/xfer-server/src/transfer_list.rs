//! The list of transfers, newest first, filtered ([`Service::list_transfers`]), as
//! `GET /v1/transfers` and the console serve it.
//!
//! No index is kept for it on the path of a transfer: the list is each shard's change feed
//! read backwards, its `accepted` events (one per transfer, written in the step that wrote
//! the record), merged across shards by time; filtered by an account, it is that account's
//! history index instead. So it reaches back as far as the feed's retention
//! (`--events-retention-hours`), and a store without a feed (MySQL, MongoDB) has no list
//! but by account. Each request reads a bounded number of entries: a page may hold fewer
//! than asked and still name where the next one starts.

use crate::feed::Cursor;
use crate::service::Service;
use std::collections::HashMap;
use xfer_core::{AccountId, AssetCode, Timestamp, TransferId, TransferRecord, TransferState};
use xfer_engine::ExecError;
use xfer_store::{Event, EventKind, FeedPosition, StoreError};

/// Feed entries (or history entries) read per store call.
const CHUNK: usize = 256;
/// Entries one request reads at most before it answers with what it found.
const SCAN_MAX: usize = 20 * 1_024;
/// How far out of time order two transfers of one shard may be written (their writers'
/// clocks): a shard's backwards read stops this much before `created_since`.
const CLOCK_SLACK_MS: u64 = 1_000;

/// Which transfers a list keeps; every field given must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransferFilter {
    /// Now in this state.
    pub state: Option<TransferState>,
    /// A posting from or to this account.
    pub account: Option<AccountId>,
    /// A posting of this asset.
    pub asset: Option<AssetCode>,
    /// The id starts with this.
    pub id_prefix: Option<String>,
    /// The metadata is a JSON object whose key `.0` is `.1` (a string's value, or any
    /// other value's JSON text).
    pub metadata: Option<(String, String)>,
    /// Accepted at or after.
    pub created_since: Option<Timestamp>,
    /// Accepted before.
    pub created_before: Option<Timestamp>,
}

impl TransferFilter {
    /// Whether `r` is kept.
    pub fn keeps(&self, r: &TransferRecord) -> bool {
        let postings = &r.spec.postings;
        self.state.is_none_or(|s| s == r.state)
            && self
                .account
                .as_ref()
                .is_none_or(|a| postings.iter().any(|p| &p.from == a || &p.to == a))
            && self
                .asset
                .as_ref()
                .is_none_or(|x| postings.iter().any(|p| &p.asset == x))
            && self
                .id_prefix
                .as_ref()
                .is_none_or(|p| r.spec.id.as_str().starts_with(p.as_str()))
            && self
                .metadata
                .as_ref()
                .is_none_or(|(k, v)| metadata_has(&r.spec.metadata, k, v))
            && self.created_since.is_none_or(|t| r.created_at >= t)
            && self.created_before.is_none_or(|t| r.created_at < t)
    }
}

/// A metadata filter as written, `key=value`, as the pair it asks for.
pub fn metadata_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{text:?}: expected key=value")),
    }
}

/// Whether `metadata` is a JSON object whose `key` is `value`.
fn metadata_has(metadata: &str, key: &str, value: &str) -> bool {
    let Ok(serde_json::Value::Object(m)) = serde_json::from_str(metadata) else {
        return false;
    };
    match m.get(key) {
        Some(serde_json::Value::String(s)) => s == value,
        Some(other) => serde_json::to_string(other).is_ok_and(|text| text == value),
        None => false,
    }
}

/// Where a list's next page starts: in every shard's feed, or (filtered by an account) in
/// its history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListCursor {
    /// Before these positions, one per shard (`FeedPosition::END`: from the newest).
    Feed(Cursor),
    /// Before this entry of the account's history (`None`: from the newest).
    History(Option<u64>),
}

impl ListCursor {
    /// The first page's cursor for `filter` over `shards` shards.
    pub fn newest(filter: &TransferFilter, shards: usize) -> ListCursor {
        if filter.account.is_some() {
            ListCursor::History(None)
        } else {
            ListCursor::Feed(Cursor(vec![FeedPosition::END; shards]))
        }
    }

    /// Reads the cursor a page named (`next_before`), for `filter` over `shards` shards.
    pub fn parse(s: &str, filter: &TransferFilter, shards: usize) -> Result<ListCursor, String> {
        if filter.account.is_some() {
            s.parse::<u64>()
                .map(|n| ListCursor::History(Some(n)))
                .map_err(|_| format!("{s:?}: with `account`, a cursor is the number a page named"))
        } else {
            Cursor::parse(s, shards).map(ListCursor::Feed)
        }
    }
}

impl std::fmt::Display for ListCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListCursor::Feed(c) => write!(f, "{c}"),
            ListCursor::History(Some(n)) => write!(f, "{n}"),
            ListCursor::History(None) => Ok(()),
        }
    }
}

/// A page of the list.
pub struct ListPage {
    /// The transfers, newest first.
    pub transfers: Vec<TransferRecord>,
    /// Where the next page starts; `None` at the end.
    pub next: Option<ListCursor>,
}

/// Why a list could not be read.
pub enum ListError {
    /// A shard's store keeps no change feed (filter by an account instead).
    Unsupported(String),
    /// Anything else.
    Exec(ExecError),
}

impl From<ExecError> for ListError {
    fn from(e: ExecError) -> ListError {
        ListError::Exec(e)
    }
}

/// One shard's backwards read of its `accepted` events.
struct ShardReader {
    /// Read, not yet taken: newest first.
    ahead: std::collections::VecDeque<Event>,
    /// Before the last event read.
    before: FeedPosition,
    /// Nothing more to read.
    ended: bool,
}

impl Service {
    /// The transfers `filter` keeps, newest first, starting at `from`, at most `limit`.
    pub async fn list_transfers(
        &self,
        filter: &TransferFilter,
        from: ListCursor,
        limit: usize,
    ) -> Result<ListPage, ListError> {
        match from {
            ListCursor::History(before) => {
                let account = filter.account.as_ref().expect("a history cursor has one");
                let page = self
                    .history_kept(account, before, limit, &|r| filter.keeps(r))
                    .await?;
                Ok(ListPage {
                    transfers: page.items,
                    next: page.next.map(|n| ListCursor::History(Some(n))),
                })
            }
            ListCursor::Feed(cursor) => self.list_by_feed(filter, cursor, limit).await,
        }
    }

    async fn list_by_feed(
        &self,
        filter: &TransferFilter,
        mut cursor: Cursor,
        limit: usize,
    ) -> Result<ListPage, ListError> {
        let shards = self.cluster().shards();
        let mut readers: Vec<ShardReader> = cursor
            .0
            .iter()
            .map(|p| ShardReader {
                ahead: Default::default(),
                before: *p,
                ended: *p == FeedPosition::START,
            })
            .collect();
        let stop_at = filter
            .created_since
            .map(|t| Timestamp(t.as_ms().saturating_sub(CLOCK_SLACK_MS)));
        let mut found = Vec::new();
        let mut scanned = 0;
        let mut left_over = vec![false; readers.len()];
        while found.len() < limit && scanned < SCAN_MAX {
            // The next candidates, newest first across shards, each shard's in its order.
            let mut candidates: Vec<(usize, Event)> = Vec::with_capacity(CHUNK);
            while candidates.len() < CHUNK {
                for (s, r) in readers.iter_mut().enumerate() {
                    if r.ahead.is_empty() && !r.ended {
                        self.read_back(&*shards[s], r, stop_at, &mut scanned)
                            .await?;
                    }
                }
                let newest = readers
                    .iter()
                    .enumerate()
                    .filter_map(|(s, r)| r.ahead.front().map(|e| (e.at, std::cmp::Reverse(s))))
                    .max();
                let Some((_, std::cmp::Reverse(s))) = newest else {
                    break;
                };
                let e = readers[s].ahead.pop_front().expect("peeked");
                candidates.push((s, e));
            }
            if candidates.is_empty() {
                break;
            }
            let skip_new = |e: &Event| filter.created_before.is_some_and(|t| e.at >= t);
            let mut ids: Vec<TransferId> = candidates
                .iter()
                .filter(|(_, e)| !skip_new(e))
                .filter(|(_, e)| {
                    filter
                        .id_prefix
                        .as_ref()
                        .is_none_or(|p| e.transfer.as_str().starts_with(p.as_str()))
                })
                .map(|(_, e)| e.transfer.clone())
                .collect();
            ids.sort_unstable();
            ids.dedup();
            let records: HashMap<TransferId, TransferRecord> = self
                .get_transfers(&ids)
                .await?
                .into_iter()
                .map(|r| (r.spec.id.clone(), r))
                .collect();
            let mut candidates = candidates.into_iter();
            for (s, e) in candidates.by_ref() {
                cursor.0[s] = e.position;
                if let Some(r) = records.get(&e.transfer).filter(|r| filter.keeps(r)) {
                    found.push(r.clone());
                    if found.len() == limit {
                        break;
                    }
                }
            }
            // What was read and not looked at: the next page starts with it.
            for (s, _) in candidates {
                left_over[s] = true;
            }
        }
        // A shard with nothing left is at its start: a next page reads nothing there.
        for (s, r) in readers.iter().enumerate() {
            if r.ended && r.ahead.is_empty() && !left_over[s] {
                cursor.0[s] = FeedPosition::START;
            }
        }
        let more = cursor.0.iter().any(|p| *p != FeedPosition::START);
        let next = more.then_some(ListCursor::Feed(cursor));
        Ok(ListPage {
            transfers: found,
            next,
        })
    }

    /// Reads `r`'s next chunk of `accepted` events backwards from `store`, stopping at
    /// events made before `stop_at`.
    async fn read_back(
        &self,
        store: &dyn xfer_store::Store,
        r: &mut ShardReader,
        stop_at: Option<Timestamp>,
        scanned: &mut usize,
    ) -> Result<(), ListError> {
        while r.ahead.is_empty() && !r.ended && *scanned < SCAN_MAX {
            let page = match store.events_before(r.before, CHUNK).await {
                Ok(page) => page,
                Err(StoreError::Unsupported(what)) => {
                    return Err(ListError::Unsupported(format!(
                        "the store does not offer {what}: list by `account` instead"
                    )))
                }
                Err(e) => return Err(ExecError::Unavailable(e.to_string()).into()),
            };
            *scanned += page.events.len();
            r.ended = page.events.len() < CHUNK;
            if let Some(last) = page.events.last() {
                r.before = last.position;
            }
            for e in page.events {
                if stop_at.is_some_and(|t| e.at < t) {
                    r.ended = true;
                    break;
                }
                if e.kind == EventKind::Accepted {
                    r.ahead.push_back(e);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use xfer_core::{Amount, LowerBound, ManualClock, Posting, TransferKind, TransferSpec};
    use xfer_store::{AccountOp, MemoryStore, Op, Store};

    /// Every page from the newest on, `limit` at a time: the ids, and how many pages.
    async fn pages(svc: &Service, filter: &TransferFilter, limit: usize) -> (Vec<String>, usize) {
        let mut from = ListCursor::newest(filter, svc.cluster().shards().len());
        let (mut ids, mut n) = (Vec::new(), 0);
        loop {
            let page = match svc.list_transfers(filter, from, limit).await {
                Ok(p) => p,
                Err(_) => panic!("list"),
            };
            assert!(page.transfers.len() <= limit);
            ids.extend(
                page.transfers
                    .iter()
                    .map(|r| r.spec.id.as_str().to_string()),
            );
            n += 1;
            match page.next {
                Some(next) => from = next,
                None => return (ids, n),
            }
        }
    }

    /// Three shards, each with more accepted transfers than one read of its feed: every
    /// page is newest first across shards, every transfer once, whatever the page size and
    /// filter.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pages_merge_the_shards_newest_first_and_list_each_transfer_once() {
        let clock = Arc::new(ManualClock::at(Timestamp(1_000_000)));
        let stores: Vec<Arc<dyn Store>> = (0..3)
            .map(|_| Arc::new(MemoryStore::new(clock.clone())) as Arc<dyn Store>)
            .collect();
        let svc = crate::service::over_stores(stores, clock.clone());
        let usd = AssetCode::new("USD", "asset").unwrap();
        let accounts: Vec<AccountId> = (0..6)
            .map(|i| AccountId::new(&format!("acc-{i}")).unwrap())
            .collect();
        for a in &accounts {
            let create = AccountOp::Create {
                asset: usd.clone(),
                lower_bound: LowerBound::Unbounded,
            };
            svc.executor()
                .execute_op(Op::Account(a.clone(), create))
                .await
                .unwrap();
        }
        let n = 1_000;
        for i in 0..n {
            let spec = TransferSpec {
                id: TransferId::new(&format!("t-{i:04}")).unwrap(),
                postings: vec![Posting {
                    from: accounts[i % 6].clone(),
                    to: accounts[(i + 1 + (i / 6) % 5) % 6].clone(),
                    asset: usd.clone(),
                    amount: Amount::new(1, "amount").unwrap(),
                }]
                .into(),
                metadata: format!("{{\"odd\":{}}}", i % 2 == 1),
                kind: TransferKind::Transfer,
                refund_of: None,
                timeout_ms: 60_000,
            };
            let answer = svc.submit(vec![spec], true).await;
            assert!(answer[0].is_ok(), "{:?}", answer[0].as_ref().err());
            clock.advance_ms(1);
        }
        let newest_first: Vec<String> = (0..n).rev().map(|i| format!("t-{i:04}")).collect();
        for limit in [1_000, 333, 7] {
            let (ids, count) = pages(&svc, &TransferFilter::default(), limit).await;
            assert_eq!(ids, newest_first, "limit {limit}");
            assert_eq!(count, n.div_ceil(limit), "limit {limit}: pages");
        }
        let odd = TransferFilter {
            metadata: Some(("odd".into(), "true".into())),
            ..TransferFilter::default()
        };
        let (ids, _) = pages(&svc, &odd, 50).await;
        let want: Vec<String> = newest_first
            .iter()
            .filter(|id| id[2..].parse::<usize>().unwrap() % 2 == 1)
            .cloned()
            .collect();
        assert_eq!(ids, want, "the odd ones");
        let window = TransferFilter {
            created_since: Some(Timestamp(1_000_000 + 100)),
            created_before: Some(Timestamp(1_000_000 + 110)),
            ..TransferFilter::default()
        };
        let (ids, _) = pages(&svc, &window, 3).await;
        let want: Vec<String> = (100..110).rev().map(|i| format!("t-{i:04}")).collect();
        assert_eq!(ids, want, "a window of creation times");
        let rare = TransferFilter {
            id_prefix: Some("t-000".into()),
            ..TransferFilter::default()
        };
        let (ids, _) = pages(&svc, &rare, 4).await;
        let want: Vec<String> = (0..10).rev().map(|i| format!("t-{i:04}")).collect();
        assert_eq!(ids, want, "a prefix far back");
    }

    #[test]
    fn metadata_matches_a_key_of_a_json_object_only() {
        let m = r#"{"order":"o-17","n":3,"vip":true}"#;
        assert!(metadata_has(m, "order", "o-17"));
        assert!(metadata_has(m, "n", "3"));
        assert!(metadata_has(m, "vip", "true"));
        assert!(!metadata_has(m, "order", "o-1"));
        assert!(!metadata_has(m, "missing", "x"));
        assert!(!metadata_has("order=o-17", "order", "o-17"));
        assert!(!metadata_has(r#"["order"]"#, "order", "o-17"));
    }

    #[test]
    fn a_cursor_reads_back_as_the_filter_names_it() {
        let by_account = TransferFilter {
            account: Some(AccountId::new("alice").unwrap()),
            ..TransferFilter::default()
        };
        let all = TransferFilter::default();
        assert_eq!(
            ListCursor::parse("42", &by_account, 2),
            Ok(ListCursor::History(Some(42)))
        );
        assert!(ListCursor::parse("3_4", &by_account, 2).is_err());
        let c = ListCursor::parse("3_9.1", &all, 2).unwrap();
        assert_eq!(c.to_string(), "3_9.1");
        assert!(ListCursor::parse("3", &all, 2).is_err());
    }
}
