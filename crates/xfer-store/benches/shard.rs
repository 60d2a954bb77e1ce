//! `MemoryShard::apply` on a warm shard: batches of one protocol step (insert — already
//! claimed, as a submitting executor inserts —, prepare, decide, post, finish) for 128
//! transfers, the whole transfer, and pruning the tombstones that fell due meanwhile; and
//! the pruner's sort of one due bucket of its index (`sort_bucket`); and the sweeper's wake
//! index through the holds workload's moves, against the B-tree of pairs it replaced.
//!
//! The shard looks like one of `xfer bench`'s four shards in steady state: 2,500 funded
//! accounts, uniform single-posting transfers at about 9 per millisecond of store clock, so
//! each account carries about 40 tombstones (5.5 s horizon); tombstones are pruned as they
//! fall due; changes are tracked and taken, and finished transfers and history entries
//! evicted, every 4,096 transfers (as the embedded store's checkpointer does).
//!
//! ```sh
//! cargo bench -p xfer-store --bench shard
//! ```

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::cell::RefCell;
use std::hint::black_box;
use std::sync::Arc;
use xfer_core::{
    AccountId, Amount, AssetCode, LowerBound, OwnerId, Posting, Rng, Timestamp, TransferId,
    TransferKind, TransferRecord, TransferSpec, TransferState,
};
use xfer_store::{AccountOp, MemoryShard, Op, TransferOp};

const ACCOUNTS: u64 = 2_500;
const BATCH: usize = 128;
const TRANSFERS_PER_MS: u64 = 9;
const TIMEOUT_MS: u64 = 5_000;
const SKEW_MS: u64 = 500;
const CHECKPOINT_EVERY: u64 = 4_096;

/// The protocol's steps, in order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Step {
    Insert,
    Prepare,
    Decide,
    Post,
    Finish,
}

const STEPS: [Step; 5] = [
    Step::Insert,
    Step::Prepare,
    Step::Decide,
    Step::Post,
    Step::Finish,
];

struct Transfer {
    record: TransferRecord,
    from: AccountId,
    to: AccountId,
}

struct World {
    shard: MemoryShard,
    rng: Rng,
    accounts: Vec<AccountId>,
    asset: AssetCode,
    owner: OwnerId,
    issued: u64,
    now: Timestamp,
    finished: Vec<TransferId>,
}

impl World {
    /// A shard with funded accounts, run until tombstones are in steady state.
    fn warm() -> World {
        let asset = AssetCode::new("USD", "asset").expect("valid asset");
        let mut w = World {
            shard: MemoryShard::tracking(),
            rng: Rng::new(5),
            accounts: (0..ACCOUNTS)
                .map(|i| AccountId::new(&format!("usd-{i}")).expect("valid id"))
                .collect(),
            asset,
            owner: OwnerId::new("bench-owner").expect("valid id"),
            issued: 0,
            now: Timestamp(1_000_000),
            finished: Vec::new(),
        };
        let issuer = AccountId::new("usd-issuer").expect("valid id");
        w.create(&issuer, LowerBound::Unbounded);
        for a in w.accounts.clone() {
            w.create(&a, LowerBound::default());
        }
        for chunk in w.accounts.clone().chunks(BATCH) {
            let batch: Vec<Transfer> = chunk
                .iter()
                .map(|a| w.transfer(issuer.clone(), a.clone(), 1_000_000_000))
                .collect();
            w.run(&batch, Step::Insert..=Step::Finish);
        }
        // Two horizons' worth of transfers: tombstones are created and pruned at the same rate.
        for _ in 0..(2 * (TIMEOUT_MS + SKEW_MS) * TRANSFERS_PER_MS) as usize / BATCH {
            let batch = w.next_batch();
            w.run(&batch, Step::Insert..=Step::Finish);
        }
        w
    }

    fn create(&mut self, id: &AccountId, lower_bound: LowerBound) {
        let op = AccountOp::Create {
            asset: self.asset.clone(),
            lower_bound,
        };
        self.shard.apply(&Op::Account(id.clone(), op), self.now);
    }

    fn transfer(&mut self, from: AccountId, to: AccountId, amount: u64) -> Transfer {
        self.issued += 1;
        if self.issued.is_multiple_of(TRANSFERS_PER_MS) {
            self.now = self.now.plus_ms(1);
        }
        let spec = TransferSpec {
            id: TransferId::new(&format!("b{}-{}", self.issued % 4, self.issued))
                .expect("valid id"),
            postings: vec![Posting {
                from: from.clone(),
                to: to.clone(),
                asset: self.asset.clone(),
                amount: Amount::new(amount, "amount").expect("valid amount"),
            }]
            .into(),
            metadata: String::new(),
            kind: TransferKind::Transfer,
            refund_of: None,
            timeout_ms: TIMEOUT_MS,
        };
        Transfer {
            record: TransferRecord::accept_claimed(
                spec,
                self.now,
                self.owner.clone(),
                self.now.plus_ms(5_000),
            ),
            from,
            to,
        }
    }

    /// `BATCH` uniform transfers between distinct accounts, after the upkeep a store does
    /// between calls (pruning, and a checkpoint's take and evictions when one is due).
    fn next_batch(&mut self) -> Vec<Transfer> {
        self.shard.prune(self.now, usize::MAX);
        self.checkpoint_if_due();
        self.new_batch()
    }

    /// A checkpoint's take and evictions, every `CHECKPOINT_EVERY` transfers.
    fn checkpoint_if_due(&mut self) {
        if self.issued / CHECKPOINT_EVERY != (self.issued + BATCH as u64) / CHECKPOINT_EVERY {
            let changes = self.shard.take_changes();
            self.shard.history_saved(&changes.history);
            for id in std::mem::take(&mut self.finished) {
                self.shard.evict_transfer(&id);
            }
        }
    }

    /// `BATCH` uniform transfers between distinct accounts.
    fn new_batch(&mut self) -> Vec<Transfer> {
        (0..BATCH)
            .map(|_| {
                let i = self.rng.below(ACCOUNTS);
                let j = (i + 1 + self.rng.below(ACCOUNTS - 1)) % ACCOUNTS;
                let (from, to) = (
                    self.accounts[i as usize].clone(),
                    self.accounts[j as usize].clone(),
                );
                let amount = 1 + self.rng.below(100);
                self.transfer(from, to, amount)
            })
            .collect()
    }

    /// The ops of `step` for every transfer of `batch`, as a coalesced call sends them.
    fn ops(&self, batch: &[Transfer], step: Step) -> Vec<Op> {
        let mut ops = Vec::with_capacity(2 * batch.len());
        for t in batch {
            let id = t.record.spec.id.clone();
            let now = self.now;
            let account = |a: &AccountId, op| Op::Account(a.clone(), op);
            match step {
                Step::Insert => ops.push(Op::Transfer(
                    id,
                    TransferOp::Insert(Arc::new(t.record.clone())),
                )),
                Step::Prepare => {
                    let amount = t.record.spec.postings[0].amount.units();
                    for (a, debit, credit) in [(&t.from, amount, 0), (&t.to, 0, amount)] {
                        let op = AccountOp::Prepare {
                            transfer: id.clone(),
                            asset: self.asset.clone(),
                            debit,
                            credit,
                            deadline: t.record.deadline,
                            horizon: t.record.deadline.plus_ms(SKEW_MS),
                        };
                        ops.push(account(a, op));
                    }
                }
                Step::Decide => ops.push(Op::Transfer(
                    id,
                    TransferOp::Decide {
                        epoch: 1,
                        to: TransferState::Applied,
                        reason: None,
                        now,
                    },
                )),
                Step::Post => {
                    for a in [&t.from, &t.to] {
                        let op = AccountOp::Post {
                            transfer: id.clone(),
                            asset: self.asset.clone(),
                        };
                        ops.push(account(a, op));
                    }
                }
                Step::Finish => ops.push(Op::Transfer(id, TransferOp::Finish { now })),
            }
        }
        ops
    }

    fn apply(&mut self, ops: &[Op]) {
        for op in ops {
            black_box(self.shard.apply(op, self.now));
        }
    }

    fn run(&mut self, batch: &[Transfer], steps: std::ops::RangeInclusive<Step>) {
        for step in STEPS.into_iter().filter(|s| steps.contains(s)) {
            let ops = self.ops(batch, step);
            self.apply(&ops);
        }
        if *steps.end() == Step::Finish {
            self.finished
                .extend(batch.iter().map(|t| t.record.spec.id.clone()));
        }
    }
}

fn steps(c: &mut Criterion) {
    let world = RefCell::new(World::warm());
    let mut group = c.benchmark_group("shard");
    // One transfer batch is prepared for the step measured (earlier steps run untimed in the
    // setup), and finished in the next setup.
    let unfinished: RefCell<Option<(Vec<Transfer>, Step)>> = RefCell::new(None);
    let finish_unfinished = |w: &mut World| {
        if let Some((batch, next)) = unfinished.borrow_mut().take() {
            w.run(&batch, next..=Step::Finish);
        }
    };
    for step in STEPS {
        let ops_per_batch = if matches!(step, Step::Prepare | Step::Post) {
            2 * BATCH
        } else {
            BATCH
        };
        group.throughput(Throughput::Elements(ops_per_batch as u64));
        group.bench_function(format!("{step:?}").to_lowercase(), |b| {
            b.iter_batched(
                || {
                    let mut w = world.borrow_mut();
                    finish_unfinished(&mut w);
                    let batch = w.next_batch();
                    if step > Step::Insert {
                        let before = STEPS[STEPS.iter().position(|s| *s == step).unwrap() - 1];
                        w.run(&batch, Step::Insert..=before);
                    }
                    let ops = w.ops(&batch, step);
                    let after = STEPS.get(STEPS.iter().position(|s| *s == step).unwrap() + 1);
                    if let Some(next) = after {
                        *unfinished.borrow_mut() = Some((batch, *next));
                    } else {
                        w.finished
                            .extend(batch.iter().map(|t| t.record.spec.id.clone()));
                    }
                    ops
                },
                |ops| {
                    world.borrow_mut().apply(&ops);
                    ops // dropped untimed
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("transfer", |b| {
        b.iter_batched(
            || {
                let mut w = world.borrow_mut();
                finish_unfinished(&mut w);
                w.next_batch()
            },
            |batch| {
                world.borrow_mut().run(&batch, Step::Insert..=Step::Finish);
                batch // dropped untimed
            },
            BatchSize::PerIteration,
        )
    });
    // Pruning what fell due while one batch ran: about two tombstones per transfer.
    group.throughput(Throughput::Elements(2 * BATCH as u64));
    group.bench_function("prune", |b| {
        b.iter_batched(
            || {
                let mut w = world.borrow_mut();
                finish_unfinished(&mut w);
                w.checkpoint_if_due();
                let batch = w.new_batch();
                w.run(&batch, Step::Insert..=Step::Finish);
            },
            |()| {
                let mut w = world.borrow_mut();
                let now = w.now;
                black_box(w.shard.prune(now, usize::MAX))
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

/// Sorting one due bucket of the pruner's index (`sort_bucket`, done without the shard's
/// lock): 120,000 tombstones over the shard's 2,500 accounts, in the order they were made
/// (accounts at random), as a bucket of 1,024 ms holds at 240,000 transfers/s over four
/// shards.
fn sort(c: &mut Criterion) {
    const ENTRIES: u64 = 120_000;
    let mut rng = Rng::new(7);
    let bucket: Vec<(AccountId, TransferId)> = (0..ENTRIES)
        .map(|n| {
            let account = AccountId::new(&format!("usd-{}", rng.below(ACCOUNTS))).expect("valid");
            let transfer = TransferId::new(&format!("b{}-{}", n % 4, n / 2)).expect("valid");
            (account, transfer)
        })
        .collect();
    let mut group = c.benchmark_group("prune_index");
    group.throughput(Throughput::Elements(ENTRIES));
    group.bench_function("sort_bucket_120000_over_2500_accounts", |b| {
        b.iter_batched(
            || bucket.clone(),
            |mut entries| {
                xfer_store::shard::sort_bucket(&mut entries);
                entries // dropped untimed
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

/// The sweeper's wake index through the holds workload's moves, against the B-tree of
/// `(time, id)` pairs it replaced (measured in the same run): each transfer is added at
/// its lease, moved to its hold's expiry when held, back to a new lease when captured and
/// removed when done, 750 of them in the index at once (a shard's share of `xfer bench
/// --workload holds`' transfers in flight), about 12 per millisecond of store clock.
fn wake(c: &mut Criterion) {
    use std::collections::BTreeSet;
    use xfer_store::shard::WakeIndex;
    const N: u64 = 100_000;
    const LAG: u64 = 250;
    const LEASE_MS: u64 = 5_000;
    const HOLD_MS: u64 = 60_000;
    let ids: Vec<TransferId> = (0..N)
        .map(|n| TransferId::new(&format!("b{}-{}", n % 4, n / 4)).expect("valid"))
        .collect();
    let at = |n: u64| Timestamp(n / 12);
    let mut group = c.benchmark_group("wake_index");
    group.throughput(Throughput::Elements(N));
    group.bench_function("holds_moves_pairs_btree", |b| {
        b.iter(|| {
            let mut index: BTreeSet<(Timestamp, TransferId)> = BTreeSet::new();
            for n in 0..N + 3 * LAG {
                if n < N {
                    index.insert((at(n).plus_ms(LEASE_MS), ids[n as usize].clone()));
                }
                if let Some(h) = n.checked_sub(LAG).filter(|h| *h < N) {
                    let id = &ids[h as usize];
                    index.remove(&(at(h).plus_ms(LEASE_MS), id.clone()));
                    index.insert((at(n).plus_ms(HOLD_MS), id.clone()));
                }
                if let Some(k) = n.checked_sub(2 * LAG).filter(|k| *k < N) {
                    let id = &ids[k as usize];
                    index.remove(&(at(k + LAG).plus_ms(HOLD_MS), id.clone()));
                    index.insert((at(n).plus_ms(LEASE_MS), id.clone()));
                }
                if let Some(d) = n.checked_sub(3 * LAG).filter(|d| *d < N) {
                    let id = &ids[d as usize];
                    index.remove(&(at(d + 2 * LAG).plus_ms(LEASE_MS), id.clone()));
                }
            }
            black_box(index.len())
        })
    });
    group.bench_function("holds_moves", |b| {
        b.iter(|| {
            let mut index = WakeIndex::default();
            for n in 0..N + 3 * LAG {
                if n < N {
                    index.insert(at(n).plus_ms(LEASE_MS), &ids[n as usize]);
                }
                if let Some(h) = n.checked_sub(LAG).filter(|h| *h < N) {
                    let id = &ids[h as usize];
                    index.remove(at(h).plus_ms(LEASE_MS), id);
                    index.insert(at(n).plus_ms(HOLD_MS), id);
                }
                if let Some(k) = n.checked_sub(2 * LAG).filter(|k| *k < N) {
                    let id = &ids[k as usize];
                    index.remove(at(k + LAG).plus_ms(HOLD_MS), id);
                    index.insert(at(n).plus_ms(LEASE_MS), id);
                }
                if let Some(d) = n.checked_sub(3 * LAG).filter(|d| *d < N) {
                    let id = &ids[d as usize];
                    index.remove(at(d + 2 * LAG).plus_ms(LEASE_MS), id);
                }
            }
            black_box(index.due(Timestamp::NEVER, 1).len())
        })
    });
    group.finish();
}

criterion_group!(benches, steps, sort, wake);
criterion_main!(benches);
