//! The protocol's steps: one [`Machine`] driving one single-posting transfer from `submit`
//! through every `on_reply` to `done`.
//!
//! - `machine/replayed`: the machine alone, fed replies recorded from a shard beforehand.
//! - `machine/on_warm_shard`: the machine and the store's side together, every request
//!   applied to a `MemoryShard` that looks like one of `xfer bench`'s four shards in steady
//!   state (2,500 accounts, about 40 tombstones each, pruned as they fall due, finished
//!   transfers evicted every 4,096).
//!
//! ```sh
//! cargo bench -p xfer-engine --bench machine
//! ```

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use std::hint::black_box;
use xfer_core::{
    AccountId, Amount, AssetCode, LowerBound, OwnerId, Posting, Rng, Timestamp, TransferId,
    TransferKind, TransferSpec, TransferState,
};
use xfer_engine::{Config, Machine, Outcome, Request};
use xfer_store::{AccountOp, MemoryShard, Op, Reply};

const ACCOUNTS: u64 = 2_500;
const TRANSFERS_PER_MS: u64 = 9;
const EVICT_EVERY: usize = 4_096;

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
    fn warm() -> World {
        let asset = AssetCode::new("USD", "asset").expect("valid asset");
        let mut w = World {
            shard: MemoryShard::new(),
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
            let spec = w.spec(issuer.clone(), a, 1_000_000_000);
            w.run(spec, false);
        }
        let cfg = Config::default();
        let horizon_ms = 5_000 + cfg.skew_ms;
        for _ in 0..2 * horizon_ms * TRANSFERS_PER_MS {
            let spec = w.next_spec();
            w.run(spec, false);
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

    fn spec(&mut self, from: AccountId, to: AccountId, amount: u64) -> TransferSpec {
        self.issued += 1;
        TransferSpec {
            id: TransferId::new(&format!("b{}-{}", self.issued % 4, self.issued))
                .expect("valid id"),
            postings: vec![Posting {
                from,
                to,
                asset: self.asset.clone(),
                amount: Amount::new(amount, "amount").expect("valid amount"),
            }]
            .into(),
            metadata: String::new(),
            kind: TransferKind::Transfer,
            refund_of: None,
            timeout_ms: 5_000,
        }
    }

    /// A uniform transfer, after the upkeep a store does between calls.
    fn next_spec(&mut self) -> TransferSpec {
        if self.issued.is_multiple_of(TRANSFERS_PER_MS) {
            self.now = self.now.plus_ms(1);
            self.shard.prune(self.now, usize::MAX);
        }
        if self.finished.len() >= EVICT_EVERY {
            for id in std::mem::take(&mut self.finished) {
                self.shard.evict_transfer(&id);
            }
        }
        let i = self.rng.below(ACCOUNTS);
        let j = (i + 1 + self.rng.below(ACCOUNTS - 1)) % ACCOUNTS;
        let (from, to) = (
            self.accounts[i as usize].clone(),
            self.accounts[j as usize].clone(),
        );
        let amount = 1 + self.rng.below(100);
        self.spec(from, to, amount)
    }

    /// Drives `spec` to its outcome, every request applied to the shard at once; answers
    /// the replies in the order the machine got them if asked to `record` them.
    fn run(&mut self, spec: TransferSpec, record: bool) -> Vec<(u32, Reply)> {
        let id = spec.id.clone();
        let (mut m, reqs) = Machine::submit(spec, self.owner.clone(), self.now, Config::default())
            .expect("valid spec");
        let mut queue: Vec<Request> = reqs;
        let mut seen = Vec::new();
        while let Some(r) = queue.pop() {
            let reply = self.shard.apply(&r.op, self.now);
            if record {
                seen.push((r.tag, reply.clone()));
            }
            queue.extend(m.on_reply(r.tag, reply, self.now));
        }
        match m.outcome() {
            Some(Outcome::Finished(r)) if r.state == TransferState::Done => {}
            other => panic!("transfer did not finish: {other:?}"),
        }
        self.finished.push(id);
        seen
    }
}

fn machine(c: &mut Criterion) {
    let mut w = World::warm();
    let mut group = c.benchmark_group("machine");

    let spec = w.next_spec();
    let replies = w.run(spec.clone(), true);
    let (owner, now) = (w.owner.clone(), w.now);
    group.bench_function("replayed", |b| {
        b.iter_batched(
            || (spec.clone(), replies.clone()),
            |(spec, replies)| {
                let (mut m, _) =
                    Machine::submit(spec, owner.clone(), now, Config::default()).expect("valid");
                for (tag, reply) in replies {
                    black_box(m.on_reply(tag, reply, now));
                }
                assert!(m.outcome().is_some(), "the replayed transfer finishes");
                m
            },
            BatchSize::SmallInput,
        )
    });

    let w = std::cell::RefCell::new(w);
    group.bench_function("on_warm_shard", |b| {
        b.iter_batched(
            || w.borrow_mut().next_spec(),
            |spec| w.borrow_mut().run(spec, false),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, machine);
criterion_main!(benches);
