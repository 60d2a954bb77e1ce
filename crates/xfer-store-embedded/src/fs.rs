//! The file system the log needs, as a trait: a flat directory of files written front to
//! back, either from their end (append) or over what they hold from their first byte (a
//! recycled segment). Two implementations: [`RealFs`] (a directory on disk, locked against a
//! second process) and [`SimFs`] (in memory, for crash tests: it remembers which bytes were
//! synced, can fail a chosen sync, and can lose power, keeping only synced bytes plus an
//! optional torn piece of the rest, and a file's old bytes where unsynced ones went over
//! them).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A file open for writing front to back (from its end, or over it from its first byte).
pub trait LogFile: Send {
    /// Writes `buf` where the last write ended (not durable until [`LogFile::sync_data`]).
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes every byte written so far durable.
    fn sync_data(&mut self) -> io::Result<()>;
}

/// A directory of files.
pub trait Fs: Send + Sync + 'static {
    /// The file type.
    type File: LogFile;
    /// Creates `name`, which must not exist.
    fn create(&self, name: &str) -> io::Result<Self::File>;
    /// Opens `name` for appending at its end.
    fn open_append(&self, name: &str) -> io::Result<Self::File>;
    /// Opens `name` for writing over it from its first byte; nothing is cut, so the bytes
    /// past the last write stay as they were.
    fn open_overwrite(&self, name: &str) -> io::Result<Self::File>;
    /// Renames `from` to `to` (which must not exist); durable once the directory is synced.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Reads all of `name`.
    fn read(&self, name: &str) -> io::Result<Vec<u8>>;
    /// The names of the files, in no particular order.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Removes `name`.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Cuts `name` to `len` bytes and makes that durable.
    fn truncate(&self, name: &str, len: u64) -> io::Result<()>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self) -> io::Result<()>;
}

/// A real directory. Holds an exclusive lock on `LOCK` inside it for as long as it lives, so
/// a second process opening the same directory gets a clear error.
pub struct RealFs {
    dir: PathBuf,
    _lock: Option<File>,
}

/// The lock file's name inside a data directory.
pub const LOCK_FILE: &str = "LOCK";

/// Creates `dir` if needed and takes an exclusive lock on `dir/LOCK`, held until the
/// returned file is dropped (or the process dies). A second process gets a clear error.
pub fn lock_dir(dir: &Path) -> io::Result<File> {
    std::fs::create_dir_all(dir)?;
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK_FILE))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!(
                "data directory {} is in use by another process",
                dir.display()
            ),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

impl RealFs {
    /// Opens (creating if needed) `dir` and locks it.
    pub fn open(dir: &Path) -> io::Result<RealFs> {
        Ok(RealFs {
            dir: dir.to_path_buf(),
            _lock: Some(lock_dir(dir)?),
        })
    }

    /// Opens (creating if needed) `dir` without locking it: for a directory inside one the
    /// caller has locked with [`lock_dir`].
    pub fn open_unlocked(dir: &Path) -> io::Result<RealFs> {
        std::fs::create_dir_all(dir)?;
        Ok(RealFs {
            dir: dir.to_path_buf(),
            _lock: None,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl LogFile for File {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        Write::write_all(self, buf)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }
}

impl Fs for RealFs {
    type File = File;
    fn create(&self, name: &str) -> io::Result<File> {
        OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(self.dir.join(name))
    }
    fn open_append(&self, name: &str) -> io::Result<File> {
        OpenOptions::new().append(true).open(self.dir.join(name))
    }
    fn open_overwrite(&self, name: &str) -> io::Result<File> {
        OpenOptions::new().write(true).open(self.dir.join(name))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let to = self.dir.join(to);
        if to.exists() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                to.display().to_string(),
            ));
        }
        std::fs::rename(self.dir.join(from), to)
    }
    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.dir.join(name))
    }
    fn list(&self) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            out.push(e?.file_name().to_string_lossy().into_owned());
        }
        Ok(out)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        std::fs::remove_file(self.dir.join(name))
    }
    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        let f = OpenOptions::new().write(true).open(self.dir.join(name))?;
        f.set_len(len)?;
        f.sync_all()
    }
    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }
}

#[derive(Clone, Debug, Default)]
struct SimFile {
    /// Every byte written, synced or not (since the file was created or opened to be
    /// written over).
    written: Vec<u8>,
    /// How many leading bytes of `written` are durable.
    synced: usize,
    /// The durable bytes the file held when it was opened to be written over (empty
    /// otherwise): those past `written` are still its content, and those under unsynced
    /// bytes of `written` are what the disk holds there until a sync.
    under: Vec<u8>,
    /// The directory entry is durable.
    entry_synced: bool,
}

impl SimFile {
    /// `new` (bytes from the file's start), then the file's old bytes past them.
    fn over_old(&self, mut new: Vec<u8>) -> Vec<u8> {
        if self.under.len() > new.len() {
            new.extend_from_slice(&self.under[new.len()..]);
        }
        new
    }

    /// What a reader sees: the bytes written, then the old bytes past them.
    fn visible(&self) -> Vec<u8> {
        self.over_old(self.written.clone())
    }

    /// What the disk holds: synced bytes, then the old bytes past them.
    fn durable(&self) -> Vec<u8> {
        self.over_old(self.written[..self.synced].to_vec())
    }
}

#[derive(Debug, Default)]
struct SimState {
    files: BTreeMap<String, SimFile>,
    /// Removed files whose removal is not yet durable: they come back on power loss.
    removed: BTreeMap<String, SimFile>,
    syncs: u64,
    /// Fail the sync with this number (1-based), and every one after it.
    fail_from_sync: Option<u64>,
    /// How long a file sync takes.
    sync_delay: std::time::Duration,
}

/// What survives a power loss of the bytes written but not synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Torn {
    /// Nothing unsynced survives.
    DropUnsynced,
    /// A prefix of `n` unsynced bytes survives (clamped to what there is).
    KeepPrefix(usize),
    /// A prefix of `n` unsynced bytes survives, its last byte flipped (a torn sector).
    KeepGarbled(usize),
}

/// An in-memory disk for crash tests. Clones share the same disk.
#[derive(Clone, Debug, Default)]
pub struct SimFs {
    state: Arc<Mutex<SimState>>,
}

/// A file of a [`SimFs`].
pub struct SimHandle {
    fs: SimFs,
    name: String,
}

impl SimFs {
    /// An empty disk.
    pub fn new() -> SimFs {
        SimFs::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SimState> {
        self.state.lock().expect("sim fs lock")
    }

    /// Makes the sync numbered `n` (counting from 1 since the disk was made) and every later
    /// one fail, as a dying disk would.
    pub fn fail_from_sync(&self, n: u64) {
        self.state().fail_from_sync = Some(n);
    }

    /// Makes every file sync take `delay`, as a real disk's does.
    pub fn set_sync_delay(&self, delay: std::time::Duration) {
        self.state().sync_delay = delay;
    }

    /// How many syncs (file or directory) succeeded or were attempted so far.
    pub fn syncs(&self) -> u64 {
        self.state().syncs
    }

    /// The disk as it is after a power loss: synced bytes stay, unsynced ones follow
    /// `torn` (in every file), unsynced creations and removals are undone. Clears any
    /// injected sync failure.
    pub fn after_power_loss(&self, torn: Torn) -> SimFs {
        let st = self.state();
        let mut files = BTreeMap::new();
        for (name, f) in st
            .files
            .iter()
            .chain(st.removed.iter().filter(|(_, f)| f.entry_synced))
        {
            if !f.entry_synced && !st.removed.contains_key(name) {
                continue; // created, but the directory entry never reached the disk
            }
            let mut kept = f.written[..f.synced].to_vec();
            let unsynced = &f.written[f.synced..];
            match torn {
                Torn::DropUnsynced => {}
                Torn::KeepPrefix(n) => kept.extend_from_slice(&unsynced[..n.min(unsynced.len())]),
                Torn::KeepGarbled(n) => {
                    let n = n.min(unsynced.len());
                    kept.extend_from_slice(&unsynced[..n]);
                    if n > 0 {
                        let last = kept.len() - 1;
                        kept[last] ^= 0x5a;
                    }
                }
            }
            // Past what survived of the writes, the file's old bytes (a file written over).
            let kept = f.over_old(kept);
            let synced = kept.len();
            files.insert(
                name.clone(),
                SimFile {
                    written: kept,
                    synced,
                    under: Vec::new(),
                    entry_synced: true,
                },
            );
        }
        SimFs {
            state: Arc::new(Mutex::new(SimState {
                files,
                ..SimState::default()
            })),
        }
    }

    /// Replaces the content of `name` (for corruption tests), all of it synced.
    pub fn put(&self, name: &str, bytes: Vec<u8>) {
        let synced = bytes.len();
        self.state().files.insert(
            name.to_string(),
            SimFile {
                written: bytes,
                synced,
                under: Vec::new(),
                entry_synced: true,
            },
        );
    }

    fn sync_allowed(st: &mut SimState) -> io::Result<()> {
        st.syncs += 1;
        match st.fail_from_sync {
            Some(n) if st.syncs >= n => Err(io::Error::other(format!(
                "injected failure of sync {}",
                st.syncs
            ))),
            _ => Ok(()),
        }
    }
}

fn not_found(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, name.to_string())
}

impl LogFile for SimHandle {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut st = self.fs.state();
        let f = st
            .files
            .get_mut(&self.name)
            .ok_or_else(|| not_found(&self.name))?;
        f.written.extend_from_slice(buf);
        Ok(())
    }
    fn sync_data(&mut self) -> io::Result<()> {
        let delay = self.fs.state().sync_delay;
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let mut st = self.fs.state();
        SimFs::sync_allowed(&mut st)?;
        let f = st
            .files
            .get_mut(&self.name)
            .ok_or_else(|| not_found(&self.name))?;
        f.synced = f.written.len();
        Ok(())
    }
}

impl Fs for SimFs {
    type File = SimHandle;
    fn create(&self, name: &str) -> io::Result<SimHandle> {
        let mut st = self.state();
        if st.files.contains_key(name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                name.to_string(),
            ));
        }
        st.files.insert(name.to_string(), SimFile::default());
        Ok(SimHandle {
            fs: self.clone(),
            name: name.to_string(),
        })
    }
    fn open_append(&self, name: &str) -> io::Result<SimHandle> {
        let mut st = self.state();
        let f = st.files.get_mut(name).ok_or_else(|| not_found(name))?;
        if !f.under.is_empty() {
            // Appending after old bytes: they become the start of what is written. Only a
            // file whose writes are all synced can be taken over like that here.
            if f.synced != f.written.len() {
                return Err(io::Error::other(format!(
                    "sim: {name} appended to while written over and unsynced"
                )));
            }
            f.written = f.visible();
            f.synced = f.written.len();
            f.under.clear();
        }
        Ok(SimHandle {
            fs: self.clone(),
            name: name.to_string(),
        })
    }
    fn open_overwrite(&self, name: &str) -> io::Result<SimHandle> {
        let mut st = self.state();
        let f = st.files.get_mut(name).ok_or_else(|| not_found(name))?;
        f.under = f.durable();
        f.written.clear();
        f.synced = 0;
        Ok(SimHandle {
            fs: self.clone(),
            name: name.to_string(),
        })
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut st = self.state();
        if st.files.contains_key(to) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, to.to_string()));
        }
        let f = st.files.remove(from).ok_or_else(|| not_found(from))?;
        // Until the directory is synced, a power loss brings back `from` and loses `to`.
        st.files.insert(
            to.to_string(),
            SimFile {
                entry_synced: false,
                ..f.clone()
            },
        );
        st.removed.insert(from.to_string(), f);
        Ok(())
    }
    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        self.state()
            .files
            .get(name)
            .map(SimFile::visible)
            .ok_or_else(|| not_found(name))
    }
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.state().files.keys().cloned().collect())
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        let mut st = self.state();
        let f = st.files.remove(name).ok_or_else(|| not_found(name))?;
        st.removed.insert(name.to_string(), f);
        Ok(())
    }
    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        let mut st = self.state();
        SimFs::sync_allowed(&mut st)?;
        let f = st.files.get_mut(name).ok_or_else(|| not_found(name))?;
        let mut bytes = f.visible();
        bytes.truncate(len as usize);
        f.written = bytes;
        f.synced = f.written.len();
        f.under.clear();
        Ok(())
    }
    fn sync_dir(&self) -> io::Result<()> {
        let mut st = self.state();
        SimFs::sync_allowed(&mut st)?;
        for f in st.files.values_mut() {
            f.entry_synced = true;
        }
        st.removed.clear();
        Ok(())
    }
}
