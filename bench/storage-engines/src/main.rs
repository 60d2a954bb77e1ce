//! Durable single-record updates, committed in groups of `batch`, on three engines:
//!
//! - `log`: append framed records (`len u32 | crc32c u32 | payload`) to one file and
//!   `fdatasync` once per group: what xfer's own log would do.
//! - `fjall`: insert into an LSM keyspace, `persist(SyncAll)` once per group.
//! - `redb`: one write transaction per group (`Durability::Immediate` is redb's default).
//!
//! Keys are 100,000 account ids updated at random (a hot working set, like xfer's), values
//! 200 bytes (about an account record). Prints updates per second per engine and batch.
//!
//! Usage: storage-engines-bench DIR [updates]

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

const ACCOUNTS: u64 = 100_000;
const VALUE_BYTES: usize = 200;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn key(rng: &mut Rng) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(b"account:");
    k[8..].copy_from_slice(&(rng.next() % ACCOUNTS).to_be_bytes());
    k
}

fn run_log(dir: &Path, updates: u64, batch: u64) -> f64 {
    let mut f = OpenOptions::new().create(true).append(true).open(dir.join("log")).unwrap();
    let mut rng = Rng(1);
    let value = [7u8; VALUE_BYTES];
    let mut buf = Vec::with_capacity((batch as usize) * (VALUE_BYTES + 24));
    let start = Instant::now();
    let mut done = 0;
    while done < updates {
        buf.clear();
        for _ in 0..batch {
            let k = key(&mut rng);
            let mut payload = Vec::with_capacity(16 + VALUE_BYTES);
            payload.extend_from_slice(&k);
            payload.extend_from_slice(&value);
            buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            buf.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
            buf.extend_from_slice(&payload);
        }
        f.write_all(&buf).unwrap();
        f.sync_data().unwrap();
        done += batch;
    }
    done as f64 / start.elapsed().as_secs_f64()
}

fn run_fjall(dir: &Path, updates: u64, batch: u64) -> f64 {
    let db = fjall::Database::builder(dir.join("fjall")).open().unwrap();
    let ks = db.keyspace("accounts", fjall::KeyspaceCreateOptions::default).unwrap();
    let mut rng = Rng(1);
    let value = [7u8; VALUE_BYTES];
    let start = Instant::now();
    let mut done = 0;
    while done < updates {
        let mut b = db.batch();
        for _ in 0..batch {
            b.insert(&ks, key(&mut rng), value);
        }
        b.commit().unwrap();
        db.persist(fjall::PersistMode::SyncAll).unwrap();
        done += batch;
    }
    done as f64 / start.elapsed().as_secs_f64()
}

const TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("accounts");

fn run_redb(dir: &Path, updates: u64, batch: u64) -> f64 {
    let db = redb::Database::create(dir.join("redb")).unwrap();
    let mut rng = Rng(1);
    let value = [7u8; VALUE_BYTES];
    let start = Instant::now();
    let mut done = 0;
    while done < updates {
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(TABLE).unwrap();
            for _ in 0..batch {
                t.insert(key(&mut rng).as_slice(), value.as_slice()).unwrap();
            }
        }
        tx.commit().unwrap();
        done += batch;
    }
    done as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let root = PathBuf::from(args.get(1).expect("usage: storage-engines-bench DIR [updates]"));
    let updates: u64 = args.get(2).map_or(200_000, |s| s.parse().expect("a number"));
    type Run = fn(&Path, u64, u64) -> f64;
    let engines: [(&str, Run); 3] = [("log", run_log), ("fjall", run_fjall), ("redb", run_redb)];
    println!("engine batch updates updates_per_s");
    for batch in [1u64, 1_000] {
        // One update per fsync is slow on any engine: fewer of them.
        let n = if batch == 1 { (updates / 100).max(1_000) } else { updates };
        for (name, run) in engines {
            let dir = root.join(format!("{name}-{batch}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let rate = run(&dir, n, batch);
            println!("{name} {batch} {n} {rate:.0}");
        }
    }
}
