//! The client, the indexes and the [`Store`] calls.

use crate::durability::Durability;
use crate::{answer, documents, steps};
use futures_util::future::join_all;
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::options::{Acknowledgment, ClientOptions, IndexOptions, ReturnDocument, WriteConcern};
use mongodb::{Client, Collection, IndexModel};
use std::collections::HashMap;
use std::future::IntoFuture;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use xfer_core::{Account, AccountId, Asset, Clock, Timestamp, TransferId, TransferRecord};
use xfer_store::database::{plain_name, OpenError};
use xfer_store::{
    AccountOp, BoxFuture, HistoryPage, Metadata, Op, PrepareOutcome, ReleaseOutcome, Reply, Store,
    StoreError, TransferOp,
};

/// The backend's name in errors.
const STORE: &str = "mongodb";
/// Where one shard lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MongoConfig {
    /// A connection string, e.g. `mongodb://10.0.0.8:27017/?replicaSet=rs0` (`tls=true`
    /// works; `mongodb+srv` does not: the store is built without a DNS resolver).
    pub url: String,
    /// The database holding the shard's collections; several shards may share a
    /// deployment in different databases.
    pub database: String,
    /// Connections in the pool: the most steps in flight at once to this shard.
    pub pool_size: u32,
    /// How long to wait to reach a server before a call answers `Unavailable`.
    pub connect_timeout: Duration,
    /// How long a call may take before it answers `Indeterminate` (the server may still
    /// apply it; every step is idempotent, so the caller retries).
    pub call_timeout: Duration,
}

impl MongoConfig {
    /// `url` and `database` with the default pool (32 connections, 5 s to connect, 30 s
    /// per call).
    pub fn new(url: impl Into<String>, database: impl Into<String>) -> MongoConfig {
        MongoConfig {
            url: url.into(),
            database: database.into(),
            pool_size: 32,
            connect_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(30),
        }
    }
}

/// One shard in a MongoDB database. Cheap to share behind an `Arc`.
pub struct MongoStore {
    client: Client,
    database: String,
    accounts: Collection<Document>,
    transfers: Collection<Document>,
    history: Collection<Document>,
    /// The asset catalog: `{_id: code, scale}`.
    assets: Collection<Document>,
    /// Account metadata: `{_id: account, metadata: {key: value, …}}`.
    account_metadata: Collection<Document>,
    name: String,
    clock: Arc<dyn Clock>,
    call_timeout: Duration,
    /// The next step's token (`steps.rs`): random high bits per store, then a count.
    tokens: AtomicI64,
}

/// A history entry a step's reply asks for: (account, its place, transfer).
type Listed = (String, i64, String);

impl MongoStore {
    /// Connects and makes the indexes the scans use (idempotently). `clock` is the store's
    /// clock: it judges prepare deadlines, hold expiry at capture and tombstone horizons.
    pub async fn open(cfg: &MongoConfig, clock: Arc<dyn Clock>) -> Result<MongoStore, OpenError> {
        plain_name(STORE, "database", &cfg.database, 63)?;
        if cfg.pool_size == 0 {
            return Err(OpenError::config(
                STORE,
                "pool_size",
                "needs at least 1 connection",
            ));
        }
        let mut options = ClientOptions::parse(&cfg.url)
            .await
            .map_err(|e| OpenError::config(STORE, "url", e.to_string()))?;
        options.app_name = Some("xfer".into());
        options.max_pool_size = Some(cfg.pool_size);
        options.connect_timeout = Some(cfg.connect_timeout);
        options.server_selection_timeout = Some(cfg.connect_timeout);
        // Acknowledged only once on a majority of the replica set's journals.
        options.write_concern = Some(
            WriteConcern::builder()
                .w(Acknowledgment::Majority)
                .journal(true)
                .build(),
        );
        let hosts: Vec<String> = options.hosts.iter().map(|h| h.to_string()).collect();
        let name = format!("mongodb {}/{}", hosts.join(","), cfg.database);
        let client = Client::with_options(options)
            .map_err(|e| OpenError::config(STORE, "url", e.to_string()))?;
        let db = client.database(&cfg.database);
        let seed = std::collections::hash_map::RandomState::new();
        let random = std::hash::BuildHasher::hash_one(&seed, &name) as i64;
        let store = MongoStore {
            accounts: db.collection("accounts"),
            transfers: db.collection("transfers"),
            history: db.collection("history"),
            assets: db.collection("assets"),
            account_metadata: db.collection("account_metadata"),
            client,
            database: cfg.database.clone(),
            name,
            clock,
            call_timeout: cfg.call_timeout,
            tokens: AtomicI64::new(random & !0xFFFF_FFFF),
        };
        store.make_indexes().await?;
        Ok(store)
    }

    async fn make_indexes(&self) -> Result<(), OpenError> {
        let sparse = |keys: Document, name: &str| {
            IndexModel::builder()
                .keys(keys)
                .options(
                    IndexOptions::builder()
                        .sparse(true)
                        .name(name.to_string())
                        .build(),
                )
                .build()
        };
        let failed = |e: mongodb::error::Error| {
            let text = format!("{}: {e}", self.name);
            match *e.kind {
                ErrorKind::ServerSelection { .. } | ErrorKind::Io(_) => {
                    OpenError::unreachable(STORE, text)
                }
                _ => OpenError::setup(STORE, text),
            }
        };
        // The sweeper's scan (wake time), the pruner's (earliest tombstone), an account's
        // history (newest first; one entry per place).
        self.transfers
            .create_index(sparse(doc! {"wake": 1}, "transfers_due"))
            .await
            .map_err(failed)?;
        self.accounts
            .create_index(sparse(doc! {"tomb_min": 1}, "accounts_tombstones"))
            .await
            .map_err(failed)?;
        let unique = IndexOptions::builder()
            .unique(true)
            .name("history_account".to_string())
            .build();
        self.history
            .create_index(
                IndexModel::builder()
                    .keys(doc! {"a": 1, "q": -1})
                    .options(unique)
                    .build(),
            )
            .await
            .map_err(failed)?;
        Ok(())
    }

    /// Where it lives (hosts and database), for logs.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's durability settings (log them: see [`Durability::warning`]).
    pub async fn durability(&self) -> Result<Durability, StoreError> {
        let admin = self.client.database("admin");
        let hello = admin
            .run_command(doc! {"hello": 1})
            .await
            .map_err(|e| self.failed(e))?;
        let status = admin
            .run_command(doc! {"serverStatus": 1})
            .await
            .map_err(|e| self.failed(e))?;
        Ok(Durability::from_replies(self.name.clone(), &hello, &status))
    }

    /// Drops the shard's database, and everything in it (benchmarks and tests).
    pub async fn destroy(self) -> Result<(), StoreError> {
        let db = self.client.database(&self.database);
        self.timed(db.drop()).await
    }

    fn next_token(&self) -> i64 {
        self.tokens.fetch_add(1, Ordering::Relaxed)
    }

    fn corrupted(&self, what: String) -> StoreError {
        StoreError::Corrupted(format!("{}: {what}", self.name))
    }

    /// An `assets` document.
    fn asset(&self, d: &Document) -> Result<Asset, StoreError> {
        let (Ok(code), Ok(scale)) = (d.get_str("_id"), d.get_i32("scale")) else {
            return Err(self.corrupted(format!("assets document {d}")));
        };
        let bad = |what: String| self.corrupted(format!("assets {code:?}: {what}"));
        let scale = u8::try_from(scale).map_err(|_| bad(format!("scale {scale}")))?;
        Asset::new(code, scale).map_err(|e| bad(e.message))
    }

    /// An `account_metadata` document.
    fn metadata(&self, d: &Document) -> Result<(AccountId, Metadata), StoreError> {
        let (Ok(account), Ok(fields)) = (d.get_str("_id"), d.get_document("metadata")) else {
            return Err(self.corrupted(format!("account_metadata document {d}")));
        };
        let bad = |what: String| self.corrupted(format!("account_metadata {account:?}: {what}"));
        let id = AccountId::new(account).map_err(|e| bad(e.message))?;
        let metadata = fields
            .iter()
            .map(|(k, v)| match v {
                Bson::String(v) => Ok((k.clone(), v.clone())),
                other => Err(bad(format!("{k}: {other}"))),
            })
            .collect::<Result<_, _>>()?;
        Ok((id, metadata))
    }

    /// What a failed call means for the caller. No answer, or one lost on the way, may
    /// hide an applied step; a server that could not be reached applied nothing.
    fn failed(&self, e: mongodb::error::Error) -> StoreError {
        let text = format!("{}: {e}", self.name);
        match *e.kind {
            ErrorKind::ServerSelection { .. } | ErrorKind::ConnectionPoolCleared { .. } => {
                StoreError::Unavailable(text)
            }
            ErrorKind::Command(ref c)
                if e.contains_label("RetryableWriteError")
                    || [91, 189, 10107, 11600, 11602, 13435, 13436, 262, 50].contains(&c.code) =>
            {
                StoreError::Indeterminate(text)
            }
            ErrorKind::Command(_) | ErrorKind::Write(WriteFailure::WriteError(_)) => {
                StoreError::Corrupted(text)
            }
            _ => StoreError::Indeterminate(text),
        }
    }

    fn late(&self) -> StoreError {
        StoreError::Indeterminate(format!(
            "{}: no answer within {:?}",
            self.name, self.call_timeout
        ))
    }

    /// Runs `call`; past `call_timeout` the answer is `Indeterminate`.
    async fn timed<T>(
        &self,
        call: impl std::future::IntoFuture<Output = Result<T, mongodb::error::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.call_timeout, call.into_future()).await {
            Ok(r) => r.map_err(|e| self.failed(e)),
            Err(_) => Err(self.late()),
        }
    }

    /// One step, and the history entry its reply asks for.
    async fn step(&self, op: &Op, now: Timestamp) -> Result<(Reply, Option<Listed>), StoreError> {
        let token = self.next_token();
        let broken = |e: String| self.corrupted(e);
        match op {
            Op::Account(id, step) => {
                let filter = doc! {"_id": id.as_str()};
                let after = match steps::account(step, now, token) {
                    None => self.timed(self.accounts.find_one(filter)).await?,
                    Some(update) => {
                        let call = self
                            .accounts
                            .find_one_and_update(filter, update.pipeline)
                            .upsert(update.upsert)
                            .return_document(ReturnDocument::After);
                        self.timed(call).await?
                    }
                };
                // A create, close, bound change or read: nothing to list in the history.
                let reply =
                    answer::account(id, step, after.as_ref(), now, token).map_err(broken)?;
                Ok((reply, None))
            }
            // No one-phase commit here (one document per step): always the insert.
            Op::Transfer(id, TransferOp::Insert(record) | TransferOp::OnePhase(record)) => {
                let insert = self
                    .transfers
                    .insert_one(documents::transfer_document(record));
                match tokio::time::timeout(self.call_timeout, insert.into_future()).await {
                    Ok(Ok(_)) => return Ok((Reply::Transfer(Arc::clone(record)), None)),
                    Ok(Err(e)) if !is_duplicate(&e) => return Err(self.failed(e)),
                    Ok(Err(_)) => {}
                    Err(_) => return Err(self.late()),
                }
                // The id is taken, for good: the record read now answers as the insert
                // would have.
                let found = self
                    .timed(self.transfers.find_one(doc! {"_id": id.as_str()}))
                    .await?;
                let found =
                    found.ok_or_else(|| self.corrupted(format!("{id}: taken, and absent")))?;
                let found = documents::transfer(&found).map_err(broken)?;
                let reply = if found.spec.same_body(&record.spec) {
                    Reply::Unchanged(Arc::new(found))
                } else {
                    Reply::Refused(xfer_core::Code::IdExistsWithDifferentBody)
                };
                Ok((reply, None))
            }
            Op::Transfer(id, step) => {
                let filter = doc! {"_id": id.as_str()};
                let after = match steps::transfer(step, now, token) {
                    None => self.timed(self.transfers.find_one(filter)).await?,
                    Some(update) => {
                        let call = self
                            .transfers
                            .find_one_and_update(filter, update.pipeline)
                            .return_document(ReturnDocument::After);
                        self.timed(call).await?
                    }
                };
                let reply = answer::transfer(step, after.as_ref(), now, token).map_err(broken)?;
                Ok((reply, None))
            }
        }
    }

    /// Steps `at` of `ops` (prepares, posts and releases of one account, in order) as one
    /// update: their replies, and the history entries they ask for.
    async fn account_run(
        &self,
        ops: &[Op],
        at: &[usize],
        now: Timestamp,
    ) -> Result<Vec<(Reply, Option<Listed>)>, StoreError> {
        let steps: Vec<(&AccountId, &AccountOp)> = at
            .iter()
            .map(|&i| match &ops[i] {
                Op::Account(id, step) => (id, step),
                Op::Transfer(..) => unreachable!("a run holds account steps"),
            })
            .collect();
        let id = steps[0].0;
        let token = self.next_token();
        let update = steps::chain(steps.iter().map(|(_, step)| {
            steps::account(step, now, token).expect("a prepare, post or release updates")
        }));
        let mut fields = doc! {
            "asset": 1, "balance": 1, "reserved": 1, "incoming": 1, "lower_bound": 1,
            "status": 1, "_r": 1,
        };
        for (_, step) in &steps {
            if let Some(t) = transfer_of(step) {
                fields.insert(format!("intents.{}", documents::intent_key(t)), 1);
            }
        }
        let call = self
            .accounts
            .find_one_and_update(doc! {"_id": id.as_str()}, update.pipeline)
            .upsert(update.upsert)
            .projection(fields)
            .return_document(ReturnDocument::After);
        let after = self.timed(call).await?;
        let entries = match &after {
            Some(d) => d
                .get_array("_r")
                .map_err(|e| self.corrupted(format!("{id}: _r: {e}")))?
                .iter()
                .map(|e| e.as_document().cloned())
                .collect::<Option<Vec<Document>>>()
                .ok_or_else(|| self.corrupted(format!("{id}: an entry of _r is not a document")))?,
            None => Vec::new(),
        };
        let mut out = Vec::with_capacity(steps.len());
        for (n, (id, step)) in steps.iter().enumerate() {
            let reply = match (&after, entries.get(n)) {
                (None, _) => xfer_store::record::apply_account_absent(id, step).0,
                (Some(_), Some(entry)) => {
                    answer::account_entry(id, step, entry, now).map_err(|e| self.corrupted(e))?
                }
                (Some(_), None) => {
                    return Err(self.corrupted(format!(
                        "{id}: {} entries for {} steps",
                        entries.len(),
                        steps.len()
                    )))
                }
            };
            let listed = after.as_ref().and_then(|d| listed(id, step, &reply, d));
            out.push((reply, listed));
        }
        Ok(out)
    }

    async fn execute_batch(&self, ops: Vec<Op>) -> Result<Vec<Reply>, StoreError> {
        let now = self.clock.now();
        // A document's steps in order; different documents' at once.
        let mut chains: HashMap<(u8, &str), Vec<usize>> = HashMap::new();
        for (i, op) in ops.iter().enumerate() {
            chains.entry(op.record_key()).or_default().push(i);
        }
        let runs = chains.into_values().map(|chain| {
            let ops = &ops;
            async move {
                let mut out = Vec::with_capacity(chain.len());
                let mut at = 0;
                while at < chain.len() {
                    // An account's prepares, posts and releases in a row share one update.
                    let run = chain[at..]
                        .iter()
                        .take_while(|&&i| shares_an_update(&ops[i]))
                        .count();
                    if run == 0 {
                        out.push((chain[at], self.step(&ops[chain[at]], now).await?));
                        at += 1;
                    } else {
                        let ids = &chain[at..at + run];
                        for (i, answer) in ids.iter().zip(self.account_run(ops, ids, now).await?) {
                            out.push((*i, answer));
                        }
                        at += run;
                    }
                }
                Ok::<_, StoreError>(out)
            }
        });
        let mut replies: Vec<Option<Reply>> = vec![None; ops.len()];
        let mut listed = Vec::new();
        let mut failure = None;
        for run in join_all(runs).await {
            match run {
                Ok(done) => {
                    for (i, (reply, entry)) in done {
                        replies[i] = Some(reply);
                        listed.extend(entry);
                    }
                }
                Err(e) => failure = failure.or(Some(e)),
            }
        }
        // Written even when a step failed: a step that applied asks for its entry once.
        self.write_history(listed).await?;
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(replies.into_iter().flatten().collect())
    }

    /// Adds history entries; one already there (a repeated step's) is left as it is.
    async fn write_history(&self, listed: Vec<Listed>) -> Result<(), StoreError> {
        if listed.is_empty() {
            return Ok(());
        }
        let docs = listed
            .into_iter()
            .map(|(a, q, t)| doc! {"a": a, "q": q, "t": t});
        match tokio::time::timeout(
            self.call_timeout,
            self.history.insert_many(docs).ordered(false).into_future(),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => match *e.kind {
                ErrorKind::InsertMany(ref m)
                    if m.write_concern_error.is_none()
                        && m.write_errors
                            .as_ref()
                            .is_some_and(|w| w.iter().all(|w| w.code == 11000)) =>
                {
                    Ok(())
                }
                _ => Err(self.failed(e)),
            },
            Err(_) => Err(self.late()),
        }
    }

    async fn find_all(
        &self,
        collection: &Collection<Document>,
        filter: Document,
        sort: Document,
        limit: usize,
    ) -> Result<Vec<Document>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let call = async {
            collection
                .find(filter)
                .sort(sort)
                .limit(limit)
                .await?
                .try_collect::<Vec<Document>>()
                .await
        };
        self.timed(call).await
    }

    /// Drops the due tombstones of one account, at most `room` of them; answers how many.
    async fn prune_account(
        &self,
        d: &Document,
        now: Timestamp,
        room: usize,
    ) -> Result<usize, StoreError> {
        let account = documents::account(d).map_err(|e| self.corrupted(e))?;
        let due: Vec<String> = account
            .intents
            .iter()
            .filter(|(_, i)| i.state != xfer_core::IntentState::Open && i.horizon <= now)
            .take(room)
            .map(|(t, _)| documents::intent_key(t))
            .collect();
        if due.is_empty() {
            return Ok(0);
        }
        let id = account.id.as_str();
        let now = documents::ms(now);
        // Only tombstones still due go; the earliest remaining horizon is the index's.
        let kept = doc! {"$filter": {
            "input": {"$objectToArray": "$intents"},
            "cond": {"$not": [{"$and": [
                {"$in": ["$$this.k", &due]},
                {"$ne": ["$$this.v.s", "open"]},
                {"$lte": ["$$this.v.h", now]},
            ]}]},
        }};
        let earliest = doc! {"$min": {"$map": {
            "input": {"$filter": {"input": {"$objectToArray": "$intents"}, "cond": {"$ne": ["$$this.v.s", "open"]}}},
            "in": "$$this.v.h",
        }}};
        let pipeline = vec![
            doc! {"$set": {"intents": {"$arrayToObject": kept}}},
            doc! {"$set": {"tomb_min": {"$ifNull": [earliest, "$$REMOVE"]}}},
        ];
        let before = self
            .timed(
                self.accounts
                    .find_one_and_update(doc! {"_id": id}, pipeline)
                    .return_document(ReturnDocument::Before),
            )
            .await?;
        let Some(before) = before else { return Ok(0) };
        let before = documents::account(&before).map_err(|e| self.corrupted(e))?;
        let dropped = before
            .intents
            .iter()
            .filter(|(t, i)| {
                i.state != xfer_core::IntentState::Open
                    && i.horizon.as_i64_ms() <= now
                    && due.contains(&documents::intent_key(t))
            })
            .count();
        // A placeholder left with nothing to hold goes too.
        self.timed(
            self.accounts
                .delete_one(doc! {"_id": id, "status": "unopened", "intents": {}}),
        )
        .await?;
        Ok(dropped)
    }
}

/// Whether `op` is an account's prepare, post or release (steps that share an update).
fn shares_an_update(op: &Op) -> bool {
    matches!(op, Op::Account(_, step) if transfer_of(step).is_some())
}

fn transfer_of(step: &AccountOp) -> Option<&TransferId> {
    match step {
        AccountOp::Prepare { transfer, .. }
        | AccountOp::Post { transfer, .. }
        | AccountOp::PostPart { transfer, .. }
        | AccountOp::Release { transfer, .. } => Some(transfer),
        _ => None,
    }
}

/// Whether `e` is a write refused for a duplicate key.
fn is_duplicate(e: &mongodb::error::Error) -> bool {
    matches!(&*e.kind, ErrorKind::Write(WriteFailure::WriteError(w)) if w.code == 11000)
}

/// The history entry a prepare or release reply asks for: the intent's place `q`, if it
/// has one. A repeat asks again (its first reply may have been lost before the entry was
/// written); the entry's unique index keeps one.
fn listed(id: &AccountId, op: &AccountOp, reply: &Reply, d: &Document) -> Option<Listed> {
    let transfer = match (op, reply) {
        (
            AccountOp::Prepare { transfer, .. },
            Reply::Prepare(
                PrepareOutcome::Prepared
                | PrepareOutcome::AlreadyPrepared
                | PrepareOutcome::AlreadyPosted
                | PrepareOutcome::AlreadyReleased,
            ),
        )
        | (
            AccountOp::Release { transfer, .. },
            Reply::Release(ReleaseOutcome::Marked | ReleaseOutcome::AlreadyReleased),
        ) => transfer,
        _ => return None,
    };
    let intent = d
        .get_document("intents")
        .ok()?
        .get_document(documents::intent_key(transfer))
        .ok()?;
    match intent.get("q") {
        Some(Bson::Int64(q)) => Some((id.as_str().into(), *q, transfer.as_str().into())),
        _ => None,
    }
}

impl Store for MongoStore {
    fn execute(&self, ops: Vec<Op>) -> BoxFuture<'_, Result<Vec<Reply>, StoreError>> {
        Box::pin(self.execute_batch(ops))
    }

    fn scan_due(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<TransferRecord>, StoreError>> {
        Box::pin(async move {
            let filter = doc! {"wake": {"$lte": documents::ms(now)}};
            let docs = self
                .find_all(&self.transfers, filter, doc! {"wake": 1}, limit)
                .await?;
            docs.iter()
                .map(|d| documents::transfer(d).map_err(|e| self.corrupted(e)))
                .collect()
        })
    }

    fn history<'a>(
        &'a self,
        account: &'a AccountId,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<HistoryPage, StoreError>> {
        Box::pin(async move {
            let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
            let filter = doc! {"a": account.as_str(), "q": {"$lt": before}};
            let docs = self
                .find_all(
                    &self.history,
                    filter,
                    doc! {"q": -1},
                    limit.saturating_add(1),
                )
                .await?;
            let mut entries = Vec::with_capacity(docs.len());
            for d in &docs {
                let (Ok(q), Ok(t)) = (d.get_i64("q"), d.get_str("t")) else {
                    return Err(self.corrupted(format!("history entry {d}")));
                };
                let t = TransferId::new(t)
                    .map_err(|e| self.corrupted(format!("history: {}", e.message)))?;
                entries.push((q as u64, t));
            }
            Ok(HistoryPage::from_one_extra(&mut entries, limit))
        })
    }

    fn prune(&self, limit: usize) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(async move {
            let now = self.clock.now();
            let filter = doc! {"tomb_min": {"$lte": documents::ms(now)}};
            let due = self
                .find_all(&self.accounts, filter, doc! {"tomb_min": 1}, limit)
                .await?;
            let mut dropped = 0;
            for d in &due {
                if dropped >= limit {
                    break;
                }
                dropped += self.prune_account(d, now, limit - dropped).await?;
            }
            Ok(dropped)
        })
    }

    fn accounts<'a>(
        &'a self,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Account>, StoreError>> {
        Box::pin(async move {
            let after = after.map_or("", |a| a.as_str());
            let filter = doc! {"_id": {"$gt": after}, "status": {"$ne": "unopened"}};
            let docs = self
                .find_all(&self.accounts, filter, doc! {"_id": 1}, limit)
                .await?;
            docs.iter()
                .map(|d| documents::account(d).map_err(|e| self.corrupted(e)))
                .collect()
        })
    }

    fn transfers<'a>(
        &'a self,
        after: Option<&'a TransferId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<TransferRecord>, StoreError>> {
        Box::pin(async move {
            let after = after.map_or("", |a| a.as_str());
            let filter = doc! {"_id": {"$gt": after}};
            let docs = self
                .find_all(&self.transfers, filter, doc! {"_id": 1}, limit)
                .await?;
            docs.iter()
                .map(|d| documents::transfer(d).map_err(|e| self.corrupted(e)))
                .collect()
        })
    }

    /// The code is the document's `_id`, so the first insert keeps its declaration; one
    /// that finds the code taken answers the document there.
    fn declare_asset<'a>(&'a self, asset: &'a Asset) -> BoxFuture<'a, Result<Asset, StoreError>> {
        Box::pin(async move {
            let code = asset.code.as_str();
            let insert = self
                .assets
                .insert_one(doc! {"_id": code, "scale": i32::from(asset.scale)});
            match tokio::time::timeout(self.call_timeout, insert.into_future()).await {
                Ok(Ok(_)) => return Ok(asset.clone()),
                Ok(Err(e)) if !is_duplicate(&e) => return Err(self.failed(e)),
                Ok(Err(_)) => {}
                Err(_) => return Err(self.late()),
            }
            let held = self.timed(self.assets.find_one(doc! {"_id": code})).await?;
            let held =
                held.ok_or_else(|| self.corrupted(format!("assets {code:?}: taken, and absent")))?;
            self.asset(&held)
        })
    }

    fn assets(&self) -> BoxFuture<'_, Result<Vec<Asset>, StoreError>> {
        Box::pin(async move {
            let docs = self
                .find_all(&self.assets, doc! {}, doc! {"_id": 1}, usize::MAX)
                .await?;
            docs.iter().map(|d| self.asset(d)).collect()
        })
    }

    fn set_account_metadata<'a>(
        &'a self,
        account: &'a AccountId,
        metadata: &'a Metadata,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let filter = doc! {"_id": account.as_str()};
            if metadata.is_empty() {
                return self
                    .timed(self.account_metadata.delete_one(filter))
                    .await
                    .map(drop);
            }
            let fields: Document = metadata
                .iter()
                .map(|(k, v)| (k.clone(), Bson::String(v.clone())))
                .collect();
            let replacement = doc! {"_id": account.as_str(), "metadata": fields};
            let replace = || {
                let (filter, replacement) = (filter.clone(), replacement.clone());
                self.account_metadata
                    .replace_one(filter, replacement)
                    .upsert(true)
            };
            // Two upserts of a new account race to insert it: the loser, tried again,
            // replaces the winner's (no reliance on the server retrying it).
            match tokio::time::timeout(self.call_timeout, replace().into_future()).await {
                Ok(Err(e)) if is_duplicate(&e) => self.timed(replace()).await.map(drop),
                Ok(r) => r.map(drop).map_err(|e| self.failed(e)),
                Err(_) => Err(self.late()),
            }
        })
    }

    fn account_metadata<'a>(
        &'a self,
        accounts: &'a [AccountId],
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        Box::pin(async move {
            if accounts.is_empty() {
                return Ok(vec![]);
            }
            let ids: Vec<&str> = accounts.iter().map(AccountId::as_str).collect();
            let filter = doc! {"_id": {"$in": ids}};
            let docs = self
                .find_all(&self.account_metadata, filter, doc! {"_id": 1}, usize::MAX)
                .await?;
            let found = docs
                .iter()
                .map(|d| self.metadata(d))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(xfer_store::metadata_in_order(accounts, found))
        })
    }

    /// Keys are `[A-Za-z0-9_-]` (the API's rule), so `metadata.<key>` is a plain path.
    fn accounts_with_metadata<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
        after: Option<&'a AccountId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(AccountId, Metadata)>, StoreError>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(vec![]); // a find's limit 0 is none
            }
            let after = after.map_or("", |a| a.as_str());
            let filter = doc! {format!("metadata.{key}"): value, "_id": {"$gt": after}};
            let docs = self
                .find_all(&self.account_metadata, filter, doc! {"_id": 1}, limit)
                .await?;
            docs.iter().map(|d| self.metadata(d)).collect()
        })
    }
}
