//! The log under crashes. Every test states what the log promises: after any crash, what
//! is read back is a prefix of what was appended, nothing invented, and every record whose
//! `sync` returned Ok is in it.

use std::sync::Arc;
use xfer_store_embedded::fs::{Fs, Torn};
use xfer_store_embedded::log::HEADER_LEN;
use xfer_store_embedded::{Log, LogConfig, LogError, RealFs, SimFs};

fn payload(i: u64) -> Vec<u8> {
    // Varied sizes so that cuts land in headers, lengths, checksums and payloads.
    let len = 1 + (i * 37 % 90) as usize;
    (0..len)
        .map(|j| (i as u8).wrapping_mul(31).wrapping_add(j as u8))
        .collect()
}

/// What a power loss leaves of unsynced bytes, every way the tests try.
const TORN: [Torn; 5] = [
    Torn::DropUnsynced,
    Torn::KeepPrefix(5),
    Torn::KeepPrefix(usize::MAX),
    Torn::KeepGarbled(23),
    Torn::KeepGarbled(usize::MAX),
];

fn small() -> LogConfig {
    LogConfig { segment_bytes: 600 }
}

/// Checks `records` is payloads 1..=n in order and returns n.
fn prefix_len(records: &[(u64, Vec<u8>)]) -> u64 {
    for (k, (lsn, p)) in records.iter().enumerate() {
        let want = k as u64 + 1;
        assert_eq!(*lsn, want, "LSNs are consecutive from 1");
        assert_eq!(*p, payload(want), "record {want} is what was appended");
    }
    records.len() as u64
}

#[test]
fn records_survive_reopen_across_segments() {
    let fs = SimFs::new();
    let (log, rec) = Log::open(fs.clone(), small()).unwrap();
    assert!(rec.records.is_empty());
    for i in 1..=100 {
        assert_eq!(log.append_sync(&payload(i)).unwrap(), i);
    }
    drop(log);
    let segments = fs.list().unwrap().len();
    assert!(segments > 5, "small segments rotate: {segments}");
    let (log, rec) = Log::open(fs.clone(), small()).unwrap();
    assert_eq!(prefix_len(&rec.records), 100);
    assert_eq!(
        log.append_sync(&payload(101)).unwrap(),
        101,
        "appends continue the sequence"
    );
}

#[test]
fn a_log_cut_at_every_byte_recovers_the_records_before_the_cut() {
    let fs = SimFs::new();
    let (log, _) = Log::open(fs.clone(), LogConfig::default()).unwrap();
    let mut ends = vec![HEADER_LEN];
    for i in 1..=30 {
        log.append_sync(&payload(i)).unwrap();
        ends.push(ends.last().unwrap() + 16 + payload(i).len());
    }
    drop(log);
    let name = fs.list().unwrap().pop().unwrap();
    let full = fs.read(&name).unwrap();
    assert_eq!(full.len(), *ends.last().unwrap());
    for cut in 0..=full.len() {
        let disk = SimFs::new();
        disk.put(&name, full[..cut].to_vec());
        let (log, rec) = Log::open(disk.clone(), LogConfig::default()).unwrap();
        // ends[0] is the header's end; ends[k] the end of record k.
        let whole = ends[1..].iter().filter(|e| **e <= cut).count() as u64;
        assert_eq!(prefix_len(&rec.records), whole, "cut at {cut}");
        assert_eq!(
            log.append_sync(&payload(whole + 1)).unwrap(),
            whole + 1,
            "cut at {cut}: appends go on"
        );
        drop(log);
        let (_, again) = Log::open(disk, LogConfig::default()).unwrap();
        assert_eq!(
            prefix_len(&again.records),
            whole + 1,
            "cut at {cut}: the repaired log reopens"
        );
    }
}

/// Appends 60 records, syncing after every 1 to 4, on a disk whose `fail_at`-th sync (and
/// every later one) fails; stops at the first error. Returns the highest LSN acknowledged.
fn run_until_failure(fs: &SimFs, fail_at: u64) -> u64 {
    fs.fail_from_sync(fail_at);
    let Ok((log, _)) = Log::open(fs.clone(), small()) else {
        return 0;
    };
    let mut acked = 0;
    let mut i = 0;
    while i < 60 {
        let group = 1 + (i % 4);
        let mut last = 0;
        for _ in 0..group {
            i += 1;
            match log.append(&payload(i)) {
                Ok(lsn) => last = lsn,
                Err(_) => return acked,
            }
        }
        match log.sync(last) {
            Ok(()) => acked = last,
            Err(_) => {
                assert!(
                    matches!(log.append(b"x"), Err(LogError::Poisoned(_))),
                    "a failed sync poisons"
                );
                return acked;
            }
        }
    }
    acked
}

#[test]
fn power_loss_at_every_sync_keeps_a_prefix_with_everything_acknowledged() {
    let total_syncs = {
        let fs = SimFs::new();
        run_until_failure(&fs, u64::MAX);
        fs.syncs()
    };
    assert!(total_syncs > 20, "{total_syncs} syncs");
    for fail_at in 1..=total_syncs + 1 {
        let fs = SimFs::new();
        let acked = run_until_failure(&fs, fail_at);
        for mode in TORN {
            let disk = fs.after_power_loss(mode);
            let (log, rec) = Log::open(disk.clone(), small())
                .unwrap_or_else(|e| panic!("sync {fail_at}, {mode:?}: recovery failed: {e}"));
            let n = prefix_len(&rec.records);
            assert!(
                n >= acked,
                "sync {fail_at}, {mode:?}: {n} recovered < {acked} acknowledged"
            );
            assert_eq!(log.append_sync(&payload(n + 1)).unwrap(), n + 1);
        }
    }
}

#[test]
fn corruption_before_synced_records_is_an_error_naming_file_and_offset() {
    let fs = SimFs::new();
    let (log, _) = Log::open(fs.clone(), LogConfig::default()).unwrap();
    for i in 1..=10 {
        log.append_sync(&payload(i)).unwrap();
    }
    drop(log);
    let name = fs.list().unwrap().pop().unwrap();
    let mut bytes = fs.read(&name).unwrap();
    let third = HEADER_LEN + (1..=2).map(|i| 16 + payload(i).len()).sum::<usize>();
    bytes[third + 20] ^= 1;
    fs.put(&name, bytes);
    match Log::open(fs, LogConfig::default()) {
        Err(LogError::Corrupted { file, offset, .. }) => {
            assert_eq!((file, offset), (name, third as u64))
        }
        other => panic!(
            "expected corruption, got {:?}",
            other.map(|(_, r)| r.records.len())
        ),
    }
}

#[test]
fn corruption_in_an_earlier_segment_is_an_error_even_at_its_end() {
    let fs = SimFs::new();
    let (log, _) = Log::open(fs.clone(), small()).unwrap();
    for i in 1..=40 {
        log.append_sync(&payload(i)).unwrap();
    }
    drop(log);
    let mut names = fs.list().unwrap();
    names.sort();
    let first = &names[0];
    let mut bytes = fs.read(first).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1; // the tail of a segment that was synced whole
    fs.put(first, bytes);
    assert!(
        matches!(Log::open(fs, small()), Err(LogError::Corrupted { ref file, .. }) if file == first)
    );
}

#[test]
fn concurrent_syncs_share_fsyncs() {
    let fs = SimFs::new();
    let (log, _) = Log::open(fs.clone(), LogConfig::default()).unwrap();
    let log = Arc::new(log);
    fs.set_sync_delay(std::time::Duration::from_micros(200)); // a disk, not a memcpy
    let before = fs.syncs();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let log = log.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    log.append_sync(b"transfer step").unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let syncs = fs.syncs() - before;
    assert!(
        syncs < 800,
        "{syncs} syncs for 1,600 durable appends: no group commit"
    );
    drop(log);
    let (_, rec) = Log::open(fs, LogConfig::default()).unwrap();
    assert_eq!(rec.records.len(), 1_600);
}

#[test]
fn segments_before_a_snapshot_can_be_removed() {
    let fs = SimFs::new();
    let (log, _) = Log::open(fs.clone(), small()).unwrap();
    for i in 1..=60 {
        log.append_sync(&payload(i)).unwrap();
    }
    let removed = log.remove_before(40).unwrap();
    assert!(removed > 0);
    drop(log);
    let (_, rec) = Log::open(fs, small()).unwrap();
    let first = rec.records[0].0;
    assert!(
        first <= 40,
        "nothing at or after the snapshot point is lost (first {first})"
    );
    assert_eq!(rec.records.last().unwrap().0, 60);
}

#[test]
fn a_real_directory_round_trips_and_refuses_a_second_opener() {
    let dir = std::env::temp_dir().join(format!("xfer-log-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    {
        let (log, _) = Log::open(RealFs::open(&dir).unwrap(), LogConfig::default()).unwrap();
        for i in 1..=50 {
            log.append_sync(&payload(i)).unwrap();
        }
        let second = RealFs::open(&dir).err().expect("the directory is locked");
        assert!(
            second.to_string().contains("in use by another process"),
            "{second}"
        );
    }
    let (_, rec) = Log::open(RealFs::open(&dir).unwrap(), LogConfig::default()).unwrap();
    assert_eq!(prefix_len(&rec.records), 50);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A process killed after its log write reached the OS but before the `fdatasync` leaves
/// records on disk unsynced. The next open reads them back and answers as if they were
/// durable (a read waits for nothing older than the open), so the open must make them so:
/// otherwise a power loss afterwards drops what was already shown.
#[test]
fn records_written_before_a_kill_are_durable_once_reopened() {
    let fs = SimFs::new();
    let (log, _) = Log::open(fs.clone(), small()).unwrap();
    assert_eq!(log.append_sync(&payload(1)).unwrap(), 1);
    // Record 2 is written, and its sync fails: on disk, as a kill between the two leaves it.
    fs.fail_from_sync(fs.syncs() + 1);
    assert!(log.append_sync(&payload(2)).is_err());
    drop(log);
    fs.fail_from_sync(u64::MAX);
    let (log, rec) = Log::open(fs.clone(), small()).unwrap();
    assert_eq!(
        prefix_len(&rec.records),
        2,
        "the page cache still holds record 2"
    );
    drop(log);
    let (_, rec) = Log::open(fs.after_power_loss(Torn::DropUnsynced), small()).unwrap();
    assert_eq!(
        prefix_len(&rec.records),
        2,
        "a record the open read back was lost in a later power loss"
    );
}

fn names(fs: &SimFs, suffix: &str) -> Vec<String> {
    let mut n: Vec<String> = fs
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(suffix))
        .collect();
    n.sort();
    n
}

/// Appends and syncs records from `*i + 1` until a new segment has started and holds
/// `after` records.
fn append_into_next_segment(fs: &SimFs, log: &Log<SimFs>, i: &mut u64, after: u64) -> String {
    let start = names(fs, ".log").last().cloned();
    while names(fs, ".log").last().cloned() == start {
        *i += 1;
        log.append_sync(&payload(*i)).unwrap();
    }
    for _ in 0..after {
        *i += 1;
        log.append_sync(&payload(*i)).unwrap();
    }
    names(fs, ".log").pop().unwrap()
}

/// Checks `records` are consecutive, each the payload of its LSN, and end at `last`.
fn consecutive_to(records: &[(u64, Vec<u8>)], last: u64) {
    for w in records.windows(2) {
        assert_eq!(w[1].0, w[0].0 + 1, "LSNs are consecutive");
    }
    for (lsn, p) in records {
        assert_eq!(*p, payload(*lsn), "record {lsn} is what was appended");
    }
    assert_eq!(records.last().map(|r| r.0), Some(last));
}

/// A fresh log on a simulated disk that has moved into its `segments + 1`-th segment, and
/// the last LSN appended.
fn log_past_segments(segments: usize) -> (SimFs, Log<SimFs>, u64) {
    let fs = SimFs::new();
    let (log, _) = Log::open(fs.clone(), small()).unwrap();
    let mut i = 0;
    for _ in 0..segments {
        append_into_next_segment(&fs, &log, &mut i, 0);
    }
    (fs, log, i)
}

#[test]
fn segments_are_written_over_spares_and_read_back_whole() {
    let (fs, log, mut i) = log_past_segments(5);
    // Every record so far is below the current segment's first LSN, i + 1.
    let removed = log.remove_before(i + 1).unwrap();
    assert_eq!(removed, 5);
    let spares = names(&fs, ".spare");
    assert_eq!(spares.len(), xfer_store_embedded::log::SPARES_MAX);
    assert_eq!(
        names(&fs, ".log").len(),
        1,
        "the rest were removed: {:?}",
        fs.list()
    );
    // Each new segment takes a spare; the one it leaves is cut to what was written, or
    // reading it back as an earlier segment would find the spare's old bytes.
    for k in 1..=3 {
        append_into_next_segment(&fs, &log, &mut i, 2);
        assert_eq!(names(&fs, ".spare").len(), spares.len() - k);
    }
    drop(log);
    let (log, rec) = Log::open(fs.clone(), small()).unwrap();
    consecutive_to(&rec.records, i);
    assert_eq!(log.append_sync(&payload(i + 1)).unwrap(), i + 1);
    drop(log);
    let (_, rec) = Log::open(fs, small()).unwrap();
    consecutive_to(&rec.records, i + 1);
}

#[test]
fn a_segment_written_over_a_spare_and_cut_at_every_byte_recovers_the_records_before_the_cut() {
    let (fs, log, mut i) = log_past_segments(3);
    log.remove_before(i).unwrap();
    let spares: Vec<(String, Vec<u8>)> = names(&fs, ".spare")
        .into_iter()
        .map(|n| {
            let b = fs.read(&n).unwrap();
            (n, b)
        })
        .collect();
    let before = i;
    let name = append_into_next_segment(&fs, &log, &mut i, 4);
    drop(log);
    let left = names(&fs, ".spare");
    let (_, old) = spares
        .iter()
        .find(|(n, _)| !left.contains(n))
        .expect("a spare was written over");
    let full = fs.read(&name).unwrap();
    assert_eq!(
        full.len(),
        old.len(),
        "the spare's old bytes follow the records"
    );
    // Where each record of the new segment ends.
    // The record that filled the earlier segment went there; the 4 after it are the new one's.
    let first = i - 3;
    assert!(first > before + 1);
    let mut ends = vec![HEADER_LEN];
    for lsn in first..=i {
        ends.push(ends.last().unwrap() + 16 + payload(lsn).len());
    }
    let new_len = *ends.last().unwrap();
    assert!(old.len() > new_len, "old bytes remain past the new records");
    for cut in 0..=new_len {
        // A crash while writing over the spare: the new bytes up to the cut, its old
        // bytes after it.
        let disk = SimFs::new();
        for n in fs.list().unwrap() {
            disk.put(&n, fs.read(&n).unwrap());
        }
        let mut bytes = full[..cut].to_vec();
        bytes.extend_from_slice(&old[cut..]);
        // The records wholly there: before the cut, or (rarely) completed by old bytes
        // that happen to be the same.
        let whole = ends[1..]
            .iter()
            .take_while(|e| bytes[..**e] == full[..**e])
            .count() as u64;
        disk.put(&name, bytes);
        let (log, rec) = Log::open(disk.clone(), small())
            .unwrap_or_else(|e| panic!("cut at {cut}: recovery failed: {e}"));
        assert_eq!(
            rec.records.last().map(|r| r.0),
            Some(first - 1 + whole),
            "cut at {cut} of {new_len} (ends {ends:?})"
        );
        consecutive_to(&rec.records, first - 1 + whole);
        assert_eq!(
            log.append_sync(&payload(first + whole)).unwrap(),
            first + whole,
            "cut at {cut}: appends go on"
        );
    }
}

/// As `run_until_failure`, with a checkpoint every 7 records that lets go of the segments
/// below the last 10 records (so segments are written over spares). Returns the highest LSN
/// acknowledged and the last LSN appended.
fn run_with_spares_until_failure(fs: &SimFs, fail_at: u64) -> (u64, u64) {
    fs.fail_from_sync(fail_at);
    let Ok((log, _)) = Log::open(fs.clone(), small()) else {
        return (0, 0);
    };
    let (mut acked, mut i) = (0, 0);
    while i < 120 {
        i += 1;
        if log.append(&payload(i)).is_err() {
            return (acked, i - 1);
        }
        if log.sync(i).is_err() {
            return (acked, i);
        }
        acked = i;
        if i % 7 == 0 && log.remove_before(i.saturating_sub(10)).is_err() {
            return (acked, i);
        }
    }
    (acked, i)
}

#[test]
fn power_loss_at_every_sync_with_spares_keeps_a_prefix_with_everything_acknowledged() {
    let total_syncs = {
        let fs = SimFs::new();
        run_with_spares_until_failure(&fs, u64::MAX);
        assert!(
            !names(&fs, ".spare").is_empty() && names(&fs, ".log").len() < 10,
            "segments were spared and written over: {:?}",
            fs.list()
        );
        fs.syncs()
    };
    for fail_at in 1..=total_syncs + 1 {
        let fs = SimFs::new();
        let (acked, appended) = run_with_spares_until_failure(&fs, fail_at);
        for mode in TORN {
            let disk = fs.after_power_loss(mode);
            let (log, rec) = Log::open(disk.clone(), small())
                .unwrap_or_else(|e| panic!("sync {fail_at}, {mode:?}: recovery failed: {e}"));
            let last = rec.records.last().map_or(0, |r| r.0);
            if !rec.records.is_empty() {
                consecutive_to(&rec.records, last);
            }
            assert!(
                last >= acked && last <= appended,
                "sync {fail_at}, {mode:?}: recovered up to {last}, acknowledged {acked}, appended {appended}"
            );
            assert!(
                rec.records.first().is_none_or(|r| r.0 <= acked.saturating_sub(10).max(1)),
                "sync {fail_at}, {mode:?}: the log still starts at or before the last checkpoint's point"
            );
            assert_eq!(log.append_sync(&payload(last + 1)).unwrap(), last + 1);
        }
    }
}

/// The log counts its group commits: one per sync that had something to write, none for
/// a record already durable, and none for a sync that failed.
#[test]
fn the_log_counts_its_group_commits() {
    let fs = SimFs::new();
    let (log, _) = Log::open(fs.clone(), LogConfig::default()).unwrap();
    let count = log.sync_count();
    assert_eq!(count.get(), 0);
    let first = log.append(&payload(1)).unwrap();
    let second = log.append(&payload(2)).unwrap();
    log.sync(second).unwrap();
    assert_eq!(count.get(), 1, "two records, one group commit");
    log.sync(first).unwrap();
    assert_eq!(count.get(), 1, "an already durable record costs no sync");
    for i in 3..=5 {
        log.append_sync(&payload(i)).unwrap();
    }
    assert_eq!(count.get(), 4);
    fs.fail_from_sync(fs.syncs() + 1);
    let lsn = log.append(&payload(6)).unwrap();
    assert!(log.sync(lsn).is_err());
    assert_eq!(count.get(), 4, "a failed sync is not counted");
}
