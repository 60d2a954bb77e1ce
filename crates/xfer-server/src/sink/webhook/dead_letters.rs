//! [`DeadLetters`]: the events one endpoint did not take after every attempt, one JSON line
//! each in `<id>.dead.jsonl`, appended and synced before the endpoint's cursor moves past
//! them; an operator reads them over the API and has one sent again, which, delivered,
//! leaves the list.

use serde_json::value::RawValue;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Mutex;

/// One event set aside.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct DeadLetter {
    /// Its place in the list: later letters have larger numbers (`after` in a page).
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
    state: Mutex<State>,
}

struct State {
    count: usize,
    last_seq: u64,
    /// The file's length: a failed append is cut back to it.
    len: u64,
}

impl DeadLetters {
    /// The letters in `path` (none yet: an empty list). A line cut short by a crash in the
    /// middle of an append was never acknowledged: it is cut off.
    pub fn open(path: PathBuf) -> Result<DeadLetters, String> {
        let fail = |e: std::io::Error| format!("{}: {e}", path.display());
        let mut text = String::new();
        match std::fs::File::open(&path) {
            Ok(mut f) => {
                f.read_to_string(&mut text).map_err(fail)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(e)),
        }
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        if whole < text.len() {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(fail)?;
            f.set_len(whole as u64).map_err(fail)?;
            f.sync_all().map_err(fail)?;
            text.truncate(whole);
        }
        let letters = parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(DeadLetters {
            state: Mutex::new(State {
                count: letters.len(),
                last_seq: letters.iter().map(|l| l.seq).max().unwrap_or(0),
                len: whole as u64,
            }),
            path,
        })
    }

    /// How many letters the list holds.
    pub fn count(&self) -> usize {
        self.state.lock().expect("dead letters").count
    }

    /// Appends `letter` (numbered here), durably.
    pub fn append(&self, mut letter: DeadLetter) -> Result<(), String> {
        let mut state = self.state.lock().expect("dead letters");
        letter.seq = state.last_seq + 1;
        let mut line = serde_json::to_vec(&letter).map_err(|e| e.to_string())?;
        line.push(b'\n');
        let fail = |e: std::io::Error| format!("{}: {e}", self.path.display());
        let new = state.len == 0;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.path)
            .map_err(fail)?;
        if let Err(e) = f.write_all(&line).and_then(|()| f.sync_data()) {
            // Cut back what part of the line was written: the list stays whole lines.
            let _ = f.set_len(state.len);
            return Err(fail(e));
        }
        if new {
            let dir = self.path.parent().unwrap_or(std::path::Path::new("."));
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(fail)?;
        }
        state.len += line.len() as u64;
        state.count += 1;
        state.last_seq = letter.seq;
        Ok(())
    }

    /// At most `limit` letters numbered after `after`, oldest first, and whether more follow.
    pub fn page(&self, after: u64, limit: usize) -> Result<(Vec<DeadLetter>, bool), String> {
        let _state = self.state.lock().expect("dead letters");
        let mut letters = self.read()?;
        letters.retain(|l| l.seq > after);
        let more = letters.len() > limit;
        letters.truncate(limit);
        Ok((letters, more))
    }

    /// The oldest letter of event `event_id`, if the list holds one.
    pub fn find(&self, event_id: &str) -> Result<Option<DeadLetter>, String> {
        let _state = self.state.lock().expect("dead letters");
        Ok(self.read()?.into_iter().find(|l| l.event_id == event_id))
    }

    /// Takes every letter of event `event_id` off the list (the file replaced whole,
    /// durably); answers how many there were.
    pub fn remove(&self, event_id: &str) -> Result<usize, String> {
        let mut state = self.state.lock().expect("dead letters");
        let letters = self.read()?;
        let removed = letters.iter().filter(|l| l.event_id == event_id).count();
        let mut kept = Vec::new();
        for l in letters.iter().filter(|l| l.event_id != event_id) {
            kept.extend(serde_json::to_vec(l).map_err(|e| e.to_string())?);
            kept.push(b'\n');
        }
        if removed > 0 {
            crate::sink::replace_file(&self.path, &kept, true)?;
            state.len = kept.len() as u64;
            state.count -= removed;
        }
        Ok(removed)
    }

    /// Removes the file (the endpoint's removal); a missing one is no error.
    pub fn delete(&self) -> Result<(), String> {
        let _state = self.state.lock().expect("dead letters");
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("{}: {e}", self.path.display()))
            }
            _ => Ok(()),
        }
    }

    fn read(&self) -> Result<Vec<DeadLetter>, String> {
        let fail = |e: std::io::Error| format!("{}: {e}", self.path.display());
        let mut text = String::new();
        match std::fs::File::open(&self.path) {
            Ok(mut f) => {
                f.read_to_string(&mut text).map_err(fail)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(e)),
        }
        parse(&text).map_err(|e| format!("{}: {e}", self.path.display()))
    }
}

fn parse(text: &str) -> Result<Vec<DeadLetter>, String> {
    text.lines()
        .enumerate()
        .map(|(i, line)| serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn letters_are_numbered_kept_across_opens_and_removed_by_event() {
        let dir = std::env::temp_dir().join(format!("xfer-dead-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("wh_1.dead.jsonl");
        let d = DeadLetters::open(path.clone()).unwrap();
        for id in ["t1/done", "t2/done", "t1/done", "t3/done"] {
            d.append(letter(id)).unwrap();
        }
        assert_eq!(d.count(), 4);
        let (page, more) = d.page(1, 2).unwrap();
        assert_eq!(
            page.iter()
                .map(|l| (l.seq, l.event_id.as_str()))
                .collect::<Vec<_>>(),
            [(2, "t2/done"), (3, "t1/done")]
        );
        assert!(more);
        assert_eq!(
            page[0].body.get(),
            "{\"id\":\"t2/done\"}",
            "the body as sent"
        );
        assert_eq!(d.remove("t1/done").unwrap(), 2);
        assert_eq!(d.remove("t9/done").unwrap(), 0);
        // A crash in the middle of an append leaves a line cut short: dropped at open.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"{\"seq\":5,\"event_id\":\"t4/do").unwrap();
        let d = DeadLetters::open(path.clone()).unwrap();
        let (page, more) = d.page(0, 10).unwrap();
        assert_eq!(
            page.iter()
                .map(|l| (l.seq, l.event_id.as_str()))
                .collect::<Vec<_>>(),
            [(2, "t2/done"), (4, "t3/done")]
        );
        assert!(!more);
        d.append(letter("t5/done")).unwrap();
        assert_eq!(d.find("t5/done").unwrap().map(|l| l.seq), Some(5));
        assert_eq!(d.count(), 3);
        d.delete().unwrap();
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
