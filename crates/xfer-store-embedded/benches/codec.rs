//! The embedded store's bytes: postcard encoding and decoding of a log entry (one coalesced
//! call's writes) and of the records a checkpoint writes (an account with its intents, a
//! finished transfer).
//!
//! ```sh
//! cargo bench -p xfer-store-embedded --bench codec
//! ```

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use xfer_core::{
    Account, AccountId, Amount, AssetCode, Intent, IntentState, LowerBound, Posting, Timestamp,
    TransferId, TransferKind, TransferRecord, TransferSpec, TransferState,
};
use xfer_store::{AccountOp, Op};
use xfer_store_embedded::codec::{self, Entry, EntryRef};

/// Ops in one log entry: a coalesced call's 256 prepares.
const OPS: usize = 256;
/// Intents on one account: about what `xfer bench`'s uniform workload leaves (tombstones
/// for 5.5 s, a few open).
const INTENTS: u64 = 40;

fn asset() -> AssetCode {
    AssetCode::new("USD", "asset").expect("valid asset")
}

fn account_id(i: u64) -> AccountId {
    AccountId::new(&format!("usd-{i}")).expect("valid id")
}

fn transfer_id(i: u64) -> TransferId {
    TransferId::new(&format!("b{}-{i}", i % 4)).expect("valid id")
}

fn prepares() -> Vec<Op> {
    (0..OPS as u64)
        .map(|i| {
            let op = AccountOp::Prepare {
                transfer: transfer_id(100_000 + i / 2),
                asset: asset(),
                debit: if i % 2 == 0 { 42 } else { 0 },
                credit: if i % 2 == 0 { 0 } else { 42 },
                deadline: Timestamp(1_700_000_005_000),
                horizon: Timestamp(1_700_000_005_500),
            };
            Op::Account(account_id(i * 7 % 2_500), op)
        })
        .collect()
}

fn account() -> Account {
    let mut a = Account::open(account_id(1234), asset(), LowerBound::default());
    a.balance = 1_000_000_000;
    for i in 0..INTENTS {
        let open = i >= INTENTS - 2;
        a.intents.insert(
            transfer_id(100_000 + i * 37),
            Intent {
                debit: if i % 2 == 0 { 42 } else { 0 },
                credit: if i % 2 == 0 { 0 } else { 42 },
                state: if open {
                    IntentState::Open
                } else {
                    IntentState::Posted
                },
                horizon: Timestamp(1_700_000_005_500 + i),
            },
        );
    }
    a.reserved = 42;
    a.incoming = 42;
    a
}

fn done_transfer() -> TransferRecord {
    let spec = TransferSpec {
        id: transfer_id(123_456),
        postings: vec![Posting {
            from: account_id(12),
            to: account_id(2_345),
            asset: asset(),
            amount: Amount::new(42, "amount").expect("valid amount"),
        }]
        .into(),
        metadata: String::new(),
        kind: TransferKind::Transfer,
        refund_of: None,
        timeout_ms: 5_000,
    };
    let mut r = TransferRecord::accept(spec, Timestamp(1_700_000_000_000), 5_000);
    r.state = TransferState::Done;
    r.owner = None;
    r.epoch = 1;
    r.lease_until = Timestamp(1_700_000_005_000);
    r
}

fn codec(c: &mut Criterion) {
    let mut group = c.benchmark_group("codec");

    let ops = prepares();
    let entry = EntryRef::Ops {
        shard: 1,
        now: Timestamp(1_700_000_000_000),
        ops: ops.iter().collect(),
    };
    let bytes = codec::encode(&entry);
    group.throughput(Throughput::Elements(OPS as u64));
    group.bench_function("encode_log_entry_256_prepares", |b| {
        b.iter(|| codec::encode(black_box(&entry)))
    });
    group.bench_function("decode_log_entry_256_prepares", |b| {
        b.iter(|| codec::decode::<Entry>(black_box(&bytes)).expect("decodes"))
    });

    group.throughput(Throughput::Elements(1));
    let a = account();
    let bytes = codec::encode(&a);
    group.bench_function("clone_account_40_intents", |b| {
        b.iter(|| black_box(&a).clone())
    });
    group.bench_function("encode_account_40_intents", |b| {
        b.iter(|| codec::encode(black_box(&a)))
    });
    group.bench_function("decode_account_40_intents", |b| {
        b.iter(|| codec::decode::<Account>(black_box(&bytes)).expect("decodes"))
    });

    let r = done_transfer();
    let bytes = codec::encode(&r);
    group.bench_function("clone_transfer", |b| b.iter(|| black_box(&r).clone()));
    group.bench_function("encode_transfer", |b| {
        b.iter(|| codec::encode(black_box(&r)))
    });
    group.bench_function("decode_transfer", |b| {
        b.iter(|| codec::decode::<TransferRecord>(black_box(&bytes)).expect("decodes"))
    });
    group.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
