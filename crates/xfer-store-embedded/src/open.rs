//! Opening a data directory: the shards loaded from the tables, in parallel, the log
//! replayed over them from each shard's checkpoint ([`recover`]), what that found
//! ([`OpenReport`]) or why it failed ([`OpenError`]); then, in the background, the scan
//! that fills the shards' done filters from the `done` table ([`scan_done`]).

use crate::checkpointer::Checkpointer;
use crate::codec::{self, Entry};
use crate::committer::Committer;
use crate::config::EmbeddedConfig;
use crate::done_filter::DoneFilter;
use crate::fs::Fs;
use crate::inner::Inner;
use crate::log::{Log, LogError};
use crate::shard_lock::ShardLock;
use crate::shard_state::{fetch_finished, ShardState};
use crate::shared::Shared;
use crate::tables::{ShardMeta, Tables};
use std::fmt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use xfer_core::{Clock, FastSet, TransferId};
use xfer_store::{MemoryShard, Op, StoreError, TransferOp};

/// Why a data directory could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The directory is locked by another process, or could not be created or read.
    Io(std::io::Error),
    /// The log failed or is corrupted (the message names the file and offset).
    Log(LogError),
    /// The tables failed or are corrupted.
    Store(StoreError),
    /// The directory does not fit the configuration (e.g. another shard count).
    Config(String),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Io(e) => write!(f, "{e}"),
            OpenError::Log(e) => write!(f, "{e}"),
            OpenError::Store(e) => write!(f, "{e}"),
            OpenError::Config(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for OpenError {}

/// What opening found and did, for the operator.
#[derive(Clone, Debug, Default)]
pub struct OpenReport {
    /// Accounts loaded.
    pub accounts: usize,
    /// Unfinished transfers loaded from the `live` table.
    pub live: usize,
    /// Log records replayed (records before a shard's checkpoint are skipped).
    pub replayed: usize,
    /// A torn tail cut from the log: file, offset, bytes.
    pub torn_tail: Option<(String, u64, u64)>,
    /// Milliseconds (store clock) opening the tables, loading the shards, reading and
    /// replaying the log.
    pub tables_ms: u64,
    /// See `tables_ms`.
    pub load_ms: u64,
    /// See `tables_ms`.
    pub replay_ms: u64,
}

/// Ids the scan at open adds to a shard's [`DoneFilter`] per hold of the shard's lock.
const DONE_SCAN_CHUNK: usize = 4096;

/// Opens the tables in `tables_dir` and the log in `wal`, loads the shards and replays the
/// log over them: the store, ready for its threads.
pub(crate) fn recover<F: Fs>(
    wal: F,
    tables_dir: &Path,
    cfg: EmbeddedConfig,
    clock: Arc<dyn Clock>,
) -> Result<(Inner<F>, OpenReport), OpenError> {
    if cfg.shards == 0 || cfg.shards > 1024 {
        return Err(OpenError::Config(format!(
            "shards must be 1..=1024, got {}",
            cfg.shards
        )));
    }
    let t0 = clock.now();
    let tables = Tables::open(tables_dir).map_err(OpenError::Store)?;
    let t1 = clock.now();
    if let Some(n) = tables.shard_count().map_err(OpenError::Store)? {
        if n != cfg.shards {
            return Err(OpenError::Config(format!(
                "the data directory holds {n} shards, the configuration asks for {}; \
                 records are placed by shard, so the count cannot change",
                cfg.shards
            )));
        }
    }
    let mut report = OpenReport::default();
    let metas = (0..cfg.shards)
        .map(|s| tables.shard_meta(s))
        .collect::<Result<Vec<ShardMeta>, _>>()
        .map_err(OpenError::Store)?;
    let done_expected = tables.done_len_estimate() / usize::from(cfg.shards);
    // Shards are independent: load them on parallel threads.
    let shards = std::thread::scope(|scope| {
        let loads: Vec<_> = metas
            .iter()
            .enumerate()
            .map(|(s, meta)| {
                let tables = &tables;
                scope.spawn(move || {
                    let mut mem = MemoryShard::tracking();
                    let in_live = tables.load(s as u16, meta, &mut mem)?;
                    let shard = ShardState {
                        mem,
                        fetched: Vec::new(),
                        done: DoneFilter::new(done_expected),
                    };
                    Ok((shard, in_live))
                })
            })
            .collect();
        loads
            .into_iter()
            .map(|h| h.join().expect("shard loader panicked"))
            .collect::<Result<Vec<(ShardState, FastSet<TransferId>)>, StoreError>>()
    })
    .map_err(OpenError::Store)?;
    let (mut shards, in_live): (Vec<ShardState>, Vec<FastSet<TransferId>>) =
        shards.into_iter().unzip();
    report.accounts = shards.iter().map(|s| s.mem.accounts().count()).sum();
    report.live = in_live.iter().map(|s| s.len()).sum();
    let t2 = clock.now();
    let (log, recovered) = Log::open(wal, cfg.log).map_err(OpenError::Log)?;
    report.torn_tail = recovered.torn_tail.clone();
    let oldest = metas.iter().map(|m| m.checkpoint_lsn).min().unwrap_or(0);
    let newest = metas.iter().map(|m| m.checkpoint_lsn).max().unwrap_or(0);
    if recovered.first_lsn > oldest.max(1) || log.next_lsn() < newest {
        return Err(OpenError::Log(LogError::Corrupted {
            file: "wal".into(),
            offset: 0,
            why: format!(
                "the log holds LSNs {}..{} but the checkpoints need {oldest}..{newest}: \
                 log segments are missing",
                recovered.first_lsn,
                log.next_lsn()
            ),
        }));
    }
    // Records below every shard's checkpoint are not even decoded.
    let first_needed = recovered.records.partition_point(|(lsn, _)| *lsn < oldest);
    let per_shard = decode_tail(&recovered.records[first_needed..], &metas)?;
    let backlog = per_shard.iter().flatten().map(|(_, bytes, _)| *bytes).sum();
    report.replayed = per_shard.iter().map(Vec::len).sum();
    // Replay each shard's entries in log order, shards on parallel threads.
    std::thread::scope(|scope| {
        let replays: Vec<_> = shards
            .iter_mut()
            .zip(per_shard)
            .enumerate()
            .map(|(s, (shard, entries))| {
                let tables = &tables;
                scope.spawn(move || replay(tables, s as u16, shard, entries))
            })
            .collect();
        replays
            .into_iter()
            .try_for_each(|h| h.join().expect("replay panicked"))
    })
    .map_err(OpenError::Store)?;
    drop(recovered);
    let t3 = clock.now();
    report.tables_ms = t1.0.saturating_sub(t0.0);
    report.load_ms = t2.0.saturating_sub(t1.0);
    report.replay_ms = t3.0.saturating_sub(t2.0);
    let shards = shards.into_iter().map(ShardLock::new).collect();
    let inner = Inner {
        shared: Shared::new(log, tables, shards, clock, cfg),
        committer: Committer::default(),
        checkpointer: Checkpointer::new(in_live, backlog, cfg.shards),
    };
    Ok((inner, report))
}

/// Decodes the log's records on parallel threads and sorts them by shard, keeping log order
/// and skipping each shard's records below its checkpoint: `(lsn, payload bytes, entry)`.
#[allow(clippy::type_complexity)]
fn decode_tail(
    records: &[(u64, Vec<u8>)],
    metas: &[ShardMeta],
) -> Result<Vec<Vec<(u64, u64, Entry)>>, OpenError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = records.len().div_ceil(threads).max(1);
    let decoded = std::thread::scope(|scope| {
        let parts: Vec<_> = records
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|(lsn, payload)| {
                            codec::decode::<Entry>(payload)
                                .map(|e| (*lsn, payload.len() as u64, e))
                                .map_err(|why| {
                                    OpenError::Log(LogError::Corrupted {
                                        file: "wal".into(),
                                        offset: 0,
                                        why: format!("record at LSN {lsn} does not decode: {why}"),
                                    })
                                })
                        })
                        .collect::<Result<Vec<_>, OpenError>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .map(|h| h.join().expect("decoder panicked"))
            .collect::<Result<Vec<_>, OpenError>>()
    })?;
    let mut per_shard: Vec<Vec<(u64, u64, Entry)>> = metas.iter().map(|_| Vec::new()).collect();
    for (lsn, bytes, entry) in decoded.into_iter().flatten() {
        let s = usize::from(entry.shard());
        let Some(meta) = metas.get(s) else {
            return Err(OpenError::Config(format!(
                "log record at LSN {lsn} is for shard {s}, but there are {}",
                metas.len()
            )));
        };
        if lsn >= meta.checkpoint_lsn {
            per_shard[s].push((lsn, bytes, entry));
        }
    }
    Ok(per_shard)
}

/// Gives a refund link logged before the op had a clock (`TransferOp::LinkRefund`'s
/// `now` read as `LINK_NOW_UNKNOWN`) its entry's store clock: the record's `updated_at` and
/// the link's timeline step take it.
fn clock_old_links(ops: &mut [Op], entry_now: xfer_core::Timestamp) {
    for op in ops {
        if let Op::Transfer(_, TransferOp::LinkRefund { now, .. }) = op {
            if *now == xfer_store::op::LINK_NOW_UNKNOWN {
                *now = entry_now;
            }
        }
    }
}

/// Applies one shard's log entries, in order, as the original calls did.
fn replay(
    tables: &Tables,
    s: u16,
    shard: &mut ShardState,
    entries: Vec<(u64, u64, Entry)>,
) -> Result<(), StoreError> {
    for (lsn, _, entry) in entries {
        match entry {
            Entry::Ops { now, mut ops, .. } => {
                clock_old_links(&mut ops, now);
                fetch_finished(tables, s, shard, &ops)?;
                for (step, op) in (0..).zip(&ops) {
                    let made = shard.mem.events_added();
                    if let Op::Transfer(id, TransferOp::OnePhase(rec)) = op {
                        // Logged only where it committed (`shard.rs`): it must again.
                        if !shard.mem.replay_one_phase(id, rec, now) {
                            return Err(StoreError::Corrupted(format!(
                                "shard {s}: the one-phase commit of {id} in the log no \
                                 longer commits on replay"
                            )));
                        }
                    } else {
                        shard.mem.apply(op, now);
                    }
                    // Positioned as when first made (`shard.rs`): from the entry and step.
                    let end = shard.mem.events_added();
                    shard.mem.stamp_events(made..end, lsn, step);
                }
            }
            Entry::Prune { now, limit, .. } => {
                shard.mem.prune(now, limit as usize);
            }
        }
    }
    Ok(())
}

/// Adds every id the `done` table held at open to its shard's filter, a chunk per hold
/// of the shard's lock, then marks the filter complete. Ids the checkpointer writes
/// meanwhile it adds itself. A read error leaves the filter incomplete: every new id is
/// then looked up in the table, as before the filter, and nothing is wrong.
pub(crate) fn scan_done<F: Fs>(shared: &Shared<F>) {
    for s in 0..shared.cfg.shards {
        let hasher = shared.shard(s).done.hasher();
        // Adds the chunk under the shard's lock, answering the still-held shard.
        let add = |chunk: &mut Vec<u64>| {
            let mut shard = shared.shard(s);
            for h in chunk.drain(..) {
                shard.done.insert_hash(h);
            }
            shard
        };
        let mut chunk = Vec::with_capacity(DONE_SCAN_CHUNK);
        let scanned = shared.tables.scan_done_ids(s, |id| {
            chunk.push(DoneFilter::hash_with(&hasher, id));
            if chunk.len() == DONE_SCAN_CHUNK {
                add(&mut chunk).unlock_fair();
            }
            !shared.closing.load(Ordering::SeqCst)
        });
        if scanned.is_err() || shared.closing.load(Ordering::SeqCst) {
            return;
        }
        add(&mut chunk).done.set_complete();
    }
}
