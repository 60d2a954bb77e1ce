//! The write-ahead log: an ordered sequence of records, each with a sequence number (LSN),
//! in segment files `wal-<first lsn>.log`, made durable in groups.
//!
//! ```text
//!  append(payload) ──▶ buffer (in memory, LSN assigned)
//!  sync(lsn) ──▶ one caller becomes the leader: write the whole buffer, fdatasync once,
//!                wake everyone whose LSN it covered (group commit); the others wait
//!  segment full ──▶ the leader starts wal-<next lsn>.log: header, fsync, fsync the directory
//!  checkpoint ──▶ remove_before(lsn): segments wholly below lsn become spares
//!                 (wal-<first lsn>.spare, at most SPARES_MAX) or are removed
//! ```
//!
//! A new segment is written over a spare when there is one (renamed, the directory synced,
//! its header written and synced), as databases recycle their log files: writing over
//! blocks the file already has, each `fdatasync` flushes only data, not the file's growth
//! (size and block allocation) as appending does (`docs/benchmarks.md#log-spares`). The
//! spare's old records stay past what is written; they cannot pass for new ones, since the
//! checksum covers each record's LSN and every old LSN is below the new segment's first.
//! When the leader moves past such a segment it first cuts it to what was written and syncs
//! that, so an earlier segment holds only records.
//! Recovery reads the segments in order. Earlier segments were synced whole before the next
//! one was created, so any bad byte in them is corruption. In the last segment, a bad record
//! with no valid record after it is a torn tail — bytes written but never synced before a
//! crash — and is cut off; a bad record with a valid one after it is corruption, reported by
//! file and offset, never skipped. A failed write or sync poisons the log: every later call
//! fails until it is reopened, because the kernel may have dropped the unsynced pages and a
//! later sync could report success for data that is gone.

use crate::frame::{self, Bad};
use crate::fs::{Fs, LogFile};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The first bytes of every segment.
pub const SEGMENT_MAGIC: &[u8; 8] = b"XFERWAL1";
/// Bytes of a segment header: magic, first LSN, crc32c of both.
pub const HEADER_LEN: usize = 20;
/// The most segments kept as spares to write new segments over (the disk they take:
/// this many segments).
pub const SPARES_MAX: usize = 4;

/// Log settings.
#[derive(Clone, Copy, Debug)]
pub struct LogConfig {
    /// Start a new segment once the current one is this large.
    pub segment_bytes: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 64 << 20,
        }
    }
}

/// Why a log call failed.
#[derive(Debug)]
pub enum LogError {
    /// An I/O call failed.
    Io {
        /// The file (or directory) involved.
        file: String,
        /// What was being done.
        op: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// An earlier write or sync failed; nothing more is accepted until the log is reopened.
    Poisoned(String),
    /// Bytes that cannot be a torn tail failed their checks. Needs a human.
    Corrupted {
        /// The segment file.
        file: String,
        /// The offset of the bad record.
        offset: u64,
        /// What was wrong.
        why: String,
    },
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Io { file, op, source } => write!(f, "{op} {file}: {source}"),
            LogError::Poisoned(why) => {
                write!(f, "log poisoned by an earlier failure ({why}); reopen it")
            }
            LogError::Corrupted { file, offset, why } => {
                write!(f, "corrupted log {file} at offset {offset}: {why}")
            }
        }
    }
}

impl std::error::Error for LogError {}

fn io<'a>(file: &'a str, op: &'static str) -> impl FnOnce(std::io::Error) -> LogError + 'a {
    move |source| LogError::Io {
        file: file.to_string(),
        op,
        source,
    }
}

/// What recovery found.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Every record, in LSN order.
    pub records: Vec<(u64, Vec<u8>)>,
    /// A torn tail that was cut off: the segment, the offset cut at, the bytes dropped
    /// (bytes written but never synced, or the old bytes of a segment written over a spare).
    pub torn_tail: Option<(String, u64, u64)>,
    /// The LSN of the first record the log still holds (the next LSN if it holds none).
    pub first_lsn: u64,
}

/// A written buffer larger than this is let go rather than kept to append into (one burst
/// must not pin its memory).
const RECYCLED_KEEP_MAX: usize = 16 << 20;

struct State<F: Fs> {
    /// The segment being appended to; `None` while a leader writes to it.
    file: Option<F::File>,
    segment_name: String,
    segment_len: u64,
    /// Framed records appended but not yet written.
    buffer: Vec<u8>,
    /// The buffer the last leader wrote, emptied, to append into next: a fresh buffer per
    /// write grew by doubling, copying what it held and touching fresh pages each time.
    recycled: Vec<u8>,
    /// LSN of the next append.
    next_lsn: u64,
    /// Every LSN below this is durable.
    durable_lsn: u64,
    /// A leader is writing and syncing.
    syncing: bool,
    poisoned: Option<String>,
    /// Bytes framed since the log was opened (to pace checkpoints).
    appended: u64,
    /// Spare segments (their file names) to write the next segments over.
    spares: Vec<String>,
    /// The segment being appended to was written over a spare: it may hold old bytes past
    /// `segment_len`.
    over_spare: bool,
}

/// The write-ahead log. See the module docs.
pub struct Log<F: Fs> {
    fs: F,
    cfg: LogConfig,
    state: Mutex<State<F>>,
    synced: Condvar,
    syncs: SyncCount,
}

/// How many times a [`Log`] has written and synced its buffer (one group commit each),
/// shared: readable after the log has moved, for `xfer bench`'s syncs per second.
#[derive(Clone, Debug, Default)]
pub struct SyncCount(Arc<AtomicU64>);

impl SyncCount {
    /// Group commits so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

fn segment_name(first_lsn: u64) -> String {
    format!("wal-{first_lsn:020}.log")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    name.strip_prefix("wal-")?
        .strip_suffix(".log")?
        .parse()
        .ok()
}

/// The spare made of the segment `first_lsn` starts.
fn spare_name(first_lsn: u64) -> String {
    format!("wal-{first_lsn:020}.spare")
}

fn is_spare_name(name: &str) -> bool {
    name.strip_prefix("wal-")
        .and_then(|n| n.strip_suffix(".spare"))
        .is_some_and(|n| n.parse::<u64>().is_ok())
}

fn header(first_lsn: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_LEN);
    h.extend_from_slice(SEGMENT_MAGIC);
    h.extend_from_slice(&first_lsn.to_le_bytes());
    h.extend_from_slice(&crc32c::crc32c(&h).to_le_bytes());
    h
}

impl<F: Fs> Log<F> {
    /// Opens the log in `fs`, recovering what is there (creating a first segment if none).
    pub fn open(fs: F, cfg: LogConfig) -> Result<(Log<F>, Recovered), LogError> {
        let names = fs.list().map_err(io(".", "list"))?;
        let mut segments: Vec<(u64, String)> = names
            .iter()
            .filter_map(|n| parse_segment_name(n).map(|lsn| (lsn, n.clone())))
            .collect();
        segments.sort();
        let mut spares: Vec<String> = names.into_iter().filter(|n| is_spare_name(n)).collect();
        spares.sort();
        if spares.len() > SPARES_MAX {
            for extra in spares.split_off(SPARES_MAX) {
                fs.remove(&extra).map_err(io(&extra, "remove"))?;
            }
            fs.sync_dir().map_err(io(".", "sync"))?;
        }
        let mut recovered = Recovered::default();
        let mut next_lsn = segments.first().map_or(1, |(lsn, _)| *lsn);
        let mut tail: Option<(String, u64)> = None;
        for (i, (first, name)) in segments.iter().enumerate() {
            let last = i + 1 == segments.len();
            let bytes = fs.read(name).map_err(io(name, "read"))?;
            match read_segment(name, *first, next_lsn, &bytes, last, &mut recovered)? {
                SegmentEnd::Clean { next, len } => {
                    next_lsn = next;
                    tail = Some((name.clone(), len));
                }
                SegmentEnd::Torn { next, cut } => {
                    fs.truncate(name, cut).map_err(io(name, "truncate"))?;
                    recovered.torn_tail = Some((name.clone(), cut, bytes.len() as u64 - cut));
                    next_lsn = next;
                    tail = Some((name.clone(), cut));
                }
                SegmentEnd::HeaderTorn => {
                    // Created but never synced whole: it held nothing acknowledged.
                    fs.remove(name).map_err(io(name, "remove"))?;
                    fs.sync_dir().map_err(io(".", "sync"))?;
                }
            }
        }
        let (file, segment_name, segment_len) = match tail {
            Some((name, len)) => {
                // What a killed process wrote but never synced is read back above and
                // counted durable from here on (`durable_lsn` below): make it so, or a
                // power loss later could drop what a reply has already shown.
                let mut file = fs.open_append(&name).map_err(io(&name, "open"))?;
                file.sync_data().map_err(io(&name, "sync"))?;
                (file, name, len)
            }
            None => {
                let (file, name) = create_segment(&fs, next_lsn)?;
                (file, name, HEADER_LEN as u64)
            }
        };
        let state = State {
            file: Some(file),
            segment_name,
            segment_len,
            buffer: Vec::new(),
            recycled: Vec::new(),
            next_lsn,
            durable_lsn: next_lsn,
            syncing: false,
            poisoned: None,
            appended: 0,
            spares,
            over_spare: false,
        };
        recovered.first_lsn = recovered.records.first().map_or(next_lsn, |(lsn, _)| *lsn);
        let log = Log {
            fs,
            cfg,
            state: Mutex::new(state),
            synced: Condvar::new(),
            syncs: SyncCount::default(),
        };
        Ok((log, recovered))
    }

    fn lock(&self) -> MutexGuard<'_, State<F>> {
        // A panic while holding the lock leaves the buffer half-framed: stop for good.
        self.state.lock().expect("log state poisoned by a panic")
    }

    /// Buffers `payload` (1..=[`frame::PAYLOAD_MAX`] bytes) as the next record and returns
    /// its LSN. Not durable until [`Log::sync`] covers it.
    pub fn append(&self, payload: &[u8]) -> Result<u64, LogError> {
        let mut st = self.lock();
        if let Some(why) = &st.poisoned {
            return Err(LogError::Poisoned(why.clone()));
        }
        let lsn = st.next_lsn;
        let before = st.buffer.len();
        frame::encode(&mut st.buffer, lsn, payload);
        st.segment_len += (st.buffer.len() - before) as u64;
        st.appended += (st.buffer.len() - before) as u64;
        st.next_lsn += 1;
        Ok(lsn)
    }

    /// Its count of group commits (each a write and an `fdatasync`).
    pub fn sync_count(&self) -> SyncCount {
        self.syncs.clone()
    }

    /// Returns once every record up to and including `lsn` is durable. Concurrent callers
    /// share one write and one fsync (group commit).
    pub fn sync(&self, lsn: u64) -> Result<(), LogError> {
        let mut st = self.lock();
        assert!(
            lsn < st.next_lsn,
            "sync of LSN {lsn}, which was never appended"
        );
        loop {
            if let Some(why) = &st.poisoned {
                return Err(LogError::Poisoned(why.clone()));
            }
            if st.durable_lsn > lsn {
                return Ok(());
            }
            if st.syncing {
                st = self.synced.wait(st).expect("log state poisoned by a panic");
                continue;
            }
            st = self.lead(st);
        }
    }

    /// Appends `payload` and waits until it is durable.
    pub fn append_sync(&self, payload: &[u8]) -> Result<u64, LogError> {
        let lsn = self.append(payload)?;
        self.sync(lsn)?;
        Ok(lsn)
    }

    /// Writes and syncs everything buffered, as the leader of one group commit.
    fn lead<'a>(&'a self, mut st: MutexGuard<'a, State<F>>) -> MutexGuard<'a, State<F>> {
        st.syncing = true;
        let next_buffer = std::mem::take(&mut st.recycled);
        let mut buffer = std::mem::replace(&mut st.buffer, next_buffer);
        let upto = st.next_lsn;
        // The segment's length once the buffer is written.
        let written = st.segment_len;
        let rotate = written >= self.cfg.segment_bytes;
        let spare = if rotate { st.spares.pop() } else { None };
        let over_spare = st.over_spare;
        let mut file = st.file.take().expect("only the leader takes the file");
        let name = st.segment_name.clone();
        drop(st);
        let mut result = file
            .write_all(&buffer)
            .and_then(|()| file.sync_data())
            .map_err(io(&name, "write+sync"));
        if result.is_ok() {
            self.syncs.0.fetch_add(1, Ordering::Relaxed);
        }
        if result.is_ok() && rotate && over_spare {
            // An earlier segment must hold only records: cut the spare's old bytes off.
            result = self
                .fs
                .truncate(&name, written)
                .map_err(io(&name, "truncate"));
        }
        let mut next = None;
        if result.is_ok() && rotate {
            let started = match &spare {
                Some(spare) => recycle_segment(&self.fs, spare, upto),
                None => create_segment(&self.fs, upto),
            };
            match started {
                Ok(started) => next = Some(started),
                Err(e) => result = Err(e),
            }
        }
        buffer.clear();
        let mut st = self.lock();
        st.syncing = false;
        if buffer.capacity() <= RECYCLED_KEEP_MAX {
            st.recycled = buffer;
        }
        match (result, next) {
            (Ok(()), Some((new_file, new_name))) => {
                st.file = Some(new_file);
                st.segment_name = new_name;
                st.segment_len = HEADER_LEN as u64 + st.buffer.len() as u64;
                st.durable_lsn = upto;
                st.over_spare = spare.is_some();
            }
            (Ok(()), None) => {
                st.file = Some(file);
                st.durable_lsn = upto;
            }
            (Err(e), _) => {
                st.file = Some(file);
                st.poisoned = Some(e.to_string());
            }
        }
        self.synced.notify_all();
        st
    }

    /// The LSN the next append will get.
    pub fn next_lsn(&self) -> u64 {
        self.lock().next_lsn
    }

    /// Bytes appended (framed) since the log was opened.
    pub fn appended_bytes(&self) -> u64 {
        self.lock().appended
    }

    /// Every LSN below this is durable.
    pub fn durable_lsn(&self) -> u64 {
        self.lock().durable_lsn
    }

    /// Removes whole segments all of whose records are below `lsn` (after a snapshot made
    /// them unnecessary), syncing the directory: up to [`SPARES_MAX`] spares are kept
    /// (renamed) to write new segments over, the rest deleted. Returns how many segments
    /// left the log. The segment being appended to is never removed.
    pub fn remove_before(&self, lsn: u64) -> Result<usize, LogError> {
        let (current, mut room) = {
            let st = self.lock();
            (
                st.segment_name.clone(),
                SPARES_MAX.saturating_sub(st.spares.len()),
            )
        };
        let mut spared = Vec::new();
        let mut firsts: Vec<(u64, String)> = self
            .fs
            .list()
            .map_err(io(".", "list"))?
            .into_iter()
            .filter_map(|n| parse_segment_name(&n).map(|l| (l, n)))
            .collect();
        firsts.sort();
        let mut removed = 0;
        for pair in firsts.windows(2) {
            let ((_, name), (next_first, _)) = (&pair[0], &pair[1]);
            if *next_first <= lsn && *name != current {
                let first = parse_segment_name(name).expect("listed as a segment");
                if room > 0 {
                    let spare = spare_name(first);
                    self.fs.rename(name, &spare).map_err(io(name, "rename"))?;
                    spared.push(spare);
                    room -= 1;
                } else {
                    self.fs.remove(name).map_err(io(name, "remove"))?;
                }
                removed += 1;
            }
        }
        if removed > 0 {
            self.fs.sync_dir().map_err(io(".", "sync"))?;
        }
        self.lock().spares.extend(spared);
        Ok(removed)
    }
}

fn create_segment<F: Fs>(fs: &F, first_lsn: u64) -> Result<(F::File, String), LogError> {
    let name = segment_name(first_lsn);
    let mut file = fs.create(&name).map_err(io(&name, "create"))?;
    file.write_all(&header(first_lsn))
        .map_err(io(&name, "write"))?;
    file.sync_data().map_err(io(&name, "sync"))?;
    fs.sync_dir().map_err(io(".", "sync"))?;
    Ok((file, name))
}

/// Starts segment `first_lsn` over the spare `spare`: renamed (the directory synced), then
/// its header written over the old one and synced. A crash before that sync leaves a last
/// segment whose header does not match its name: it held nothing acknowledged, and opening
/// removes it.
fn recycle_segment<F: Fs>(
    fs: &F,
    spare: &str,
    first_lsn: u64,
) -> Result<(F::File, String), LogError> {
    let name = segment_name(first_lsn);
    fs.rename(spare, &name).map_err(io(spare, "rename"))?;
    fs.sync_dir().map_err(io(".", "sync"))?;
    let mut file = fs.open_overwrite(&name).map_err(io(&name, "open"))?;
    file.write_all(&header(first_lsn))
        .map_err(io(&name, "write"))?;
    file.sync_data().map_err(io(&name, "sync"))?;
    Ok((file, name))
}

enum SegmentEnd {
    Clean { next: u64, len: u64 },
    Torn { next: u64, cut: u64 },
    HeaderTorn,
}

/// Reads one segment's records into `out`; `expected` is the LSN its first record must have.
fn read_segment(
    name: &str,
    first: u64,
    expected: u64,
    bytes: &[u8],
    last: bool,
    out: &mut Recovered,
) -> Result<SegmentEnd, LogError> {
    let corrupted = |offset: usize, why: String| LogError::Corrupted {
        file: name.to_string(),
        offset: offset as u64,
        why,
    };
    if bytes.len() < HEADER_LEN || bytes[..HEADER_LEN] != header(first)[..] {
        if last {
            return Ok(SegmentEnd::HeaderTorn);
        }
        return Err(corrupted(0, "bad segment header".into()));
    }
    if first != expected {
        return Err(corrupted(
            0,
            format!("segment starts at LSN {first}, expected {expected}: a segment is missing"),
        ));
    }
    let (mut off, mut lsn) = (HEADER_LEN, first);
    while off < bytes.len() {
        let why = match frame::decode(&bytes[off..]) {
            Ok(f) if f.lsn == lsn => {
                out.records.push((lsn, f.payload.to_vec()));
                off += f.size;
                lsn += 1;
                continue;
            }
            Ok(f) => format!("record has LSN {}, expected {lsn}", f.lsn),
            Err(Bad::Short) => "record cut short".to_string(),
            Err(Bad::Length) => "impossible record length".to_string(),
            Err(Bad::Checksum) => "checksum mismatch".to_string(),
        };
        if last && !valid_record_after(bytes, off, lsn) {
            return Ok(SegmentEnd::Torn {
                next: lsn,
                cut: off as u64,
            });
        }
        return Err(corrupted(off, why));
    }
    Ok(SegmentEnd::Clean {
        next: lsn,
        len: bytes.len() as u64,
    })
}

/// True if some record with an LSN at or after `lsn` starts after `bad`: then the bad bytes
/// were followed by synced ones and cannot be a torn tail. Only offsets whose LSN field is
/// plausible are checksummed, so garbage costs little.
fn valid_record_after(bytes: &[u8], bad: usize, lsn: u64) -> bool {
    let plausible = lsn..lsn.saturating_add(bytes.len() as u64);
    (bad + 1..bytes.len().saturating_sub(frame::OVERHEAD - 1)).any(|at| {
        let field = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().expect("8 bytes"));
        plausible.contains(&field) && frame::decode(&bytes[at..]).is_ok()
    })
}
