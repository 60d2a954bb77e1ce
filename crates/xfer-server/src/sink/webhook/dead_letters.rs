//! [`DeadLetters`]: the events one endpoint did not take after every attempt, one JSON line
//! each in `<id>.dead.jsonl`, appended and synced before the endpoint's cursor moves past
//! them; an operator reads them over the API and has one sent again, which, delivered,
//! leaves the list.
//!
//! The file is read once, at open, into an index (each letter's number, event id and place
//! in the file): counting the letters and asking whether an event is among them never
//! touch the disk, and a page reads only its own lines. Whatever touches the disk runs on a
//! blocking thread ([`tokio::task::spawn_blocking`]), never on the runtime's.
//!
//! Numbers only grow: the highest one given is kept in `<id>.dead.seq` before a removal
//! rewrites the file, so a client paging with `after` never misses a later letter.

use serde_json::value::RawValue;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One event set aside.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct DeadLetter {
    /// Its place in the list: later letters have larger numbers (`after` in a page), never
    /// one given before.
    pub seq: u64,
    /// The event's id.
    pub event_id: String,
    /// The event's type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Attempts made.
    pub attempts: u32,
    /// Why the last one failed.
    pub last_error: String,
    /// When it was set aside.
    pub at_ms: u64,
    /// The body every attempt sent (the event, as the feed gives it).
    pub body: Box<RawValue>,
}

/// One endpoint's dead letters. See the module docs.
pub struct DeadLetters {
    path: PathBuf,
    /// `<id>.dead.seq`: the highest number given, once a removal could lose it.
    high_path: PathBuf,
    /// The file's index. Held across the file's reads and writes, so only on blocking
    /// threads.
    io: Mutex<Index>,
    /// The events listed. Held only briefly, never across I/O: the runtime's threads ask it.
    listed: Mutex<Listed>,
}

/// Where each letter's line is, in file order (which is number order).
struct Index {
    entries: Vec<Entry>,
    /// The file's length: a failed append is cut back to it.
    len: u64,
    /// The highest number given.
    high: u64,
    /// The number `<id>.dead.seq` holds (0: none).
    high_kept: u64,
}

struct Entry {
    seq: u64,
    event_id: String,
    /// The line's first byte in the file.
    offset: u64,
    /// The line's length, without its newline.
    len: u64,
}

#[derive(Default)]
struct Listed {
    /// Letters by event id.
    by_event: HashMap<String, usize>,
    count: usize,
}

/// Runs `f` on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("the dead letters' file work failed: {e}"))?
}

impl DeadLetters {
    /// The letters in `path` (none yet: an empty list), read and checked whole; an error
    /// names the file and the line. A line cut short by a crash in the middle of an append
    /// was never acknowledged: it is cut off.
    pub fn open(path: PathBuf) -> Result<DeadLetters, String> {
        let fail = |e: std::io::Error| format!("{}: {e}", path.display());
        let mut bytes = Vec::new();
        match std::fs::File::open(&path) {
            Ok(mut f) => {
                f.read_to_end(&mut bytes).map_err(fail)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(e)),
        }
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if whole < bytes.len() {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(fail)?;
            f.set_len(whole as u64).map_err(fail)?;
            f.sync_all().map_err(fail)?;
            bytes.truncate(whole);
        }
        let mut entries: Vec<Entry> = Vec::new();
        let mut listed = Listed::default();
        let mut offset = 0;
        for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
            if offset == whole {
                break;
            }
            let letter: DeadLetter = serde_json::from_slice(line)
                .map_err(|e| format!("{} line {}: {e}", path.display(), i + 1))?;
            if let Some(last) = entries.last() {
                if letter.seq <= last.seq {
                    return Err(format!(
                        "{} line {}: seq {} after {}",
                        path.display(),
                        i + 1,
                        letter.seq,
                        last.seq
                    ));
                }
            }
            listed.add(&letter.event_id);
            entries.push(Entry {
                seq: letter.seq,
                event_id: letter.event_id,
                offset: offset as u64,
                len: line.len() as u64,
            });
            offset += line.len() + 1;
        }
        let high_path = path.with_extension("seq");
        let high_kept = read_high(&high_path)?;
        let high = entries.last().map_or(0, |e| e.seq).max(high_kept);
        Ok(DeadLetters {
            io: Mutex::new(Index {
                entries,
                len: whole as u64,
                high,
                high_kept,
            }),
            listed: Mutex::new(listed),
            high_path,
            path,
        })
    }

    /// How many letters the list holds.
    pub fn count(&self) -> usize {
        self.listed.lock().expect("dead letters").count
    }

    /// Whether the list holds a letter of event `event_id`.
    pub fn holds(&self, event_id: &str) -> bool {
        self.listed
            .lock()
            .expect("dead letters")
            .by_event
            .contains_key(event_id)
    }

    /// Appends `letter` (numbered here), durably; answers its number.
    pub async fn append(self: &Arc<Self>, letter: DeadLetter) -> Result<u64, String> {
        let me = self.clone();
        blocking(move || me.append_now(letter)).await
    }

    fn append_now(&self, mut letter: DeadLetter) -> Result<u64, String> {
        let mut index = self.io.lock().expect("dead letters");
        letter.seq = index.high + 1;
        let mut line = serde_json::to_vec(&letter).map_err(|e| e.to_string())?;
        line.push(b'\n');
        let fail = |e: std::io::Error| format!("{}: {e}", self.path.display());
        let new = index.len == 0;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.path)
            .map_err(fail)?;
        if let Err(e) = f.write_all(&line).and_then(|()| f.sync_data()) {
            // Cut back what part of the line was written: the list stays whole lines.
            let _ = f.set_len(index.len);
            return Err(fail(e));
        }
        if new {
            sync_dir(&self.path)?;
        }
        let offset = index.len;
        index.entries.push(Entry {
            seq: letter.seq,
            event_id: letter.event_id.clone(),
            offset,
            len: line.len() as u64 - 1,
        });
        index.len += line.len() as u64;
        index.high = letter.seq;
        self.listed
            .lock()
            .expect("dead letters")
            .add(&letter.event_id);
        Ok(letter.seq)
    }

    /// At most `limit` letters numbered after `after`, oldest first, and whether more follow.
    pub async fn page(
        self: &Arc<Self>,
        after: u64,
        limit: usize,
    ) -> Result<(Vec<DeadLetter>, bool), String> {
        let me = self.clone();
        blocking(move || {
            let index = me.io.lock().expect("dead letters");
            let from = index.entries.partition_point(|e| e.seq <= after);
            let rest = &index.entries[from..];
            let shown = &rest[..rest.len().min(limit)];
            Ok((me.read(shown)?, rest.len() > limit))
        })
        .await
    }

    /// The oldest letter of event `event_id`, if the list holds one.
    pub async fn find(self: &Arc<Self>, event_id: &str) -> Result<Option<DeadLetter>, String> {
        if !self.holds(event_id) {
            return Ok(None);
        }
        let me = self.clone();
        let event_id = event_id.to_string();
        blocking(move || {
            let index = me.io.lock().expect("dead letters");
            match index.entries.iter().position(|e| e.event_id == event_id) {
                Some(i) => Ok(me.read(&index.entries[i..=i])?.pop()),
                None => Ok(None),
            }
        })
        .await
    }

    /// Takes every letter of event `event_id` off the list (the file replaced whole,
    /// durably, the highest number kept first); answers how many there were.
    pub async fn remove(self: &Arc<Self>, event_id: &str) -> Result<usize, String> {
        if !self.holds(event_id) {
            return Ok(0);
        }
        let me = self.clone();
        let event_id = event_id.to_string();
        blocking(move || me.remove_now(&event_id)).await
    }

    fn remove_now(&self, event_id: &str) -> Result<usize, String> {
        let mut index = self.io.lock().expect("dead letters");
        let removed = index
            .entries
            .iter()
            .filter(|e| e.event_id == event_id)
            .count();
        if removed == 0 {
            return Ok(0);
        }
        let bytes =
            std::fs::read(&self.path).map_err(|e| format!("{}: {e}", self.path.display()))?;
        if (bytes.len() as u64) < index.len {
            return Err(format!(
                "{}: {} bytes, {} were written",
                self.path.display(),
                bytes.len(),
                index.len
            ));
        }
        let mut kept = Vec::with_capacity(bytes.len());
        let mut entries = Vec::with_capacity(index.entries.len() - removed);
        for e in index.entries.iter().filter(|e| e.event_id != event_id) {
            let offset = kept.len() as u64;
            kept.extend_from_slice(&bytes[e.offset as usize..(e.offset + e.len) as usize]);
            kept.push(b'\n');
            entries.push(Entry {
                seq: e.seq,
                event_id: e.event_id.clone(),
                offset,
                len: e.len,
            });
        }
        if index.high > index.high_kept {
            crate::sink::replace_file(
                &self.high_path,
                format!("{}\n", index.high).as_bytes(),
                true,
            )?;
            index.high_kept = index.high;
        }
        crate::sink::replace_file(&self.path, &kept, true)?;
        index.entries = entries;
        index.len = kept.len() as u64;
        let mut listed = self.listed.lock().expect("dead letters");
        listed.by_event.remove(event_id);
        listed.count -= removed;
        Ok(removed)
    }

    /// Removes the files of the list at `path` (the endpoint's removal); missing ones are
    /// no error. Blocking.
    pub fn delete_files(path: &Path) -> Result<(), String> {
        for p in [path.to_path_buf(), path.with_extension("seq")] {
            match std::fs::remove_file(&p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(format!("{}: {e}", p.display()))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Removes the list's files (the endpoint's removal, its task stopped).
    pub async fn delete(self: &Arc<Self>) -> Result<(), String> {
        let me = self.clone();
        blocking(move || {
            let _index = me.io.lock().expect("dead letters");
            DeadLetters::delete_files(&me.path)
        })
        .await
    }

    /// The letters of `entries`, consecutive in the file, read in one go. The caller holds
    /// `io`.
    fn read(&self, entries: &[Entry]) -> Result<Vec<DeadLetter>, String> {
        let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
            return Ok(Vec::new());
        };
        let fail = |e: std::io::Error| format!("{}: {e}", self.path.display());
        let mut buf = vec![0u8; (last.offset + last.len - first.offset) as usize];
        std::fs::File::open(&self.path)
            .and_then(|f| f.read_exact_at(&mut buf, first.offset))
            .map_err(fail)?;
        entries
            .iter()
            .map(|e| {
                let at = (e.offset - first.offset) as usize;
                serde_json::from_slice(&buf[at..at + e.len as usize])
                    .map_err(|err| format!("{} seq {}: {err}", self.path.display(), e.seq))
            })
            .collect()
    }
}

impl Listed {
    fn add(&mut self, event_id: &str) {
        *self.by_event.entry(event_id.to_string()).or_insert(0) += 1;
        self.count += 1;
    }
}

/// The number kept in `path` (none: 0).
fn read_high(path: &Path) -> Result<u64, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|e| format!("{}: {text:?}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Syncs the directory of `path` (a file made there).
fn sync_dir(path: &Path) -> Result<(), String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("{}: {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfer_engine::Sleeper;

    fn letter(event_id: &str) -> DeadLetter {
        DeadLetter {
            seq: 0,
            event_id: event_id.to_string(),
            kind: "done".into(),
            attempts: 3,
            last_error: "HTTP 500".into(),
            at_ms: 9,
            body: RawValue::from_string(format!("{{\"id\":\"{event_id}\"}}")).unwrap(),
        }
    }

    /// A fresh directory of this test's own.
    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xfer-dead-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn open(path: &Path) -> Arc<DeadLetters> {
        Arc::new(DeadLetters::open(path.to_path_buf()).unwrap())
    }

    fn seqs(page: &[DeadLetter]) -> Vec<(u64, &str)> {
        page.iter().map(|l| (l.seq, l.event_id.as_str())).collect()
    }

    #[tokio::test]
    async fn letters_are_numbered_kept_across_opens_and_removed_by_event() {
        let dir = dir("kept");
        let path = dir.join("wh_1.dead.jsonl");
        let d = open(&path);
        for id in ["t1/done", "t2/done", "t1/done", "t3/done"] {
            d.append(letter(id)).await.unwrap();
        }
        assert_eq!(d.count(), 4);
        assert!(d.holds("t1/done") && !d.holds("t4/done"));
        let (page, more) = d.page(1, 2).await.unwrap();
        assert_eq!(seqs(&page), [(2, "t2/done"), (3, "t1/done")]);
        assert!(more);
        assert_eq!(
            page[0].body.get(),
            "{\"id\":\"t2/done\"}",
            "the body as sent"
        );
        assert_eq!(d.remove("t1/done").await.unwrap(), 2);
        assert!(!d.holds("t1/done"));
        assert_eq!(d.remove("t9/done").await.unwrap(), 0);
        let (page, more) = d.page(0, 10).await.unwrap();
        assert_eq!(seqs(&page), [(2, "t2/done"), (4, "t3/done")]);
        assert!(!more);
        // A crash in the middle of an append leaves a line cut short: dropped at open.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"{\"seq\":5,\"event_id\":\"t4/do").unwrap();
        let d = open(&path);
        let (page, more) = d.page(0, 10).await.unwrap();
        assert_eq!(seqs(&page), [(2, "t2/done"), (4, "t3/done")]);
        assert!(!more);
        d.append(letter("t5/done")).await.unwrap();
        let found = d.find("t5/done").await.unwrap().unwrap();
        assert_eq!((found.seq, found.body.get()), (5, "{\"id\":\"t5/done\"}"));
        assert!(d.find("t9/done").await.unwrap().is_none());
        assert_eq!(d.count(), 3);
        d.delete().await.unwrap();
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn numbers_are_never_given_twice_even_after_the_last_letter_left_and_a_restart() {
        let dir = dir("high");
        let path = dir.join("wh_1.dead.jsonl");
        let d = open(&path);
        for id in ["t1/done", "t2/done", "t3/done"] {
            d.append(letter(id)).await.unwrap();
        }
        // A client has seen up to 3, then 3 is sent again and leaves the list.
        assert_eq!(d.remove("t3/done").await.unwrap(), 1);
        assert_eq!(d.append(letter("t4/done")).await.unwrap(), 4);
        assert_eq!(d.remove("t4/done").await.unwrap(), 1);
        drop(d);
        let d = open(&path);
        assert_eq!(d.append(letter("t5/done")).await.unwrap(), 5);
        let (page, _) = d.page(3, 10).await.unwrap();
        assert_eq!(
            seqs(&page),
            [(5, "t5/done")],
            "the client paging after 3 sees it"
        );
        // Every letter gone, the list emptied: still no number given twice.
        d.remove("t1/done").await.unwrap();
        d.remove("t2/done").await.unwrap();
        d.remove("t5/done").await.unwrap();
        drop(d);
        let d = open(&path);
        assert_eq!(d.count(), 0);
        assert_eq!(d.append(letter("t6/done")).await.unwrap(), 6);
        d.delete().await.unwrap();
        assert!(!path.exists() && !path.with_extension("seq").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_damaged_list_is_refused_at_open_naming_the_file_and_line() {
        let dir = dir("damaged");
        let path = dir.join("wh_1.dead.jsonl");
        let good = |seq: u64, id: &str| {
            let mut l = letter(id);
            l.seq = seq;
            serde_json::to_string(&l).unwrap()
        };
        for (text, want) in [
            (
                format!("{}\nnot json\n{}\n", good(1, "a"), good(2, "b")),
                "line 2",
            ),
            (
                format!("{}\n{}\n", good(2, "a"), good(2, "b")),
                "seq 2 after 2",
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = DeadLetters::open(path.clone()).err().unwrap();
            assert!(e.contains("wh_1.dead.jsonl") && e.contains(want), "{e}");
        }
        std::fs::write(&path, format!("{}\n", good(1, "a"))).unwrap();
        std::fs::write(path.with_extension("seq"), "x\n").unwrap();
        let e = DeadLetters::open(path.clone()).err().unwrap();
        assert!(e.contains("wh_1.dead.seq"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_slow_disk_does_not_hold_up_the_runtime() {
        let dir = dir("slow");
        let path = dir.join("wh_1.dead.jsonl");
        let d = open(&path);
        d.append(letter("t1/done")).await.unwrap();
        // Another thread holds the file's lock, as a write on a slow disk would.
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (locked, is_locked) = std::sync::mpsc::channel::<()>();
        let holder = {
            let d = d.clone();
            std::thread::spawn(move || {
                let _index = d.io.lock().unwrap();
                locked.send(()).unwrap();
                let _ = released.recv_timeout(std::time::Duration::from_secs(60));
            })
        };
        is_locked.recv().unwrap();
        let page = tokio::spawn({
            let d = d.clone();
            async move { d.page(0, 10).await }
        });
        let append = tokio::spawn({
            let d = d.clone();
            async move { d.append(letter("t2/done")).await }
        });
        xfer_engine::TokioSleeper.sleep(100).await;
        // The one runtime thread goes on: it answers what the index knows and waits for
        // the rest.
        assert!(!page.is_finished() && !append.is_finished());
        assert_eq!(d.count(), 1);
        assert!(d.holds("t1/done"));
        release.send(()).unwrap();
        let (letters, _) = page.await.unwrap().unwrap();
        assert!(!letters.is_empty());
        assert_eq!(append.await.unwrap().unwrap(), 2);
        holder.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
