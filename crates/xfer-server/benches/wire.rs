//! The HTTP API's bytes: a transfer request decoded from JSON and checked into a
//! `TransferSpec` (every field, as `POST /v1/transfers` does), a batch of them, and the
//! answer encoded back to JSON.
//!
//! ```sh
//! cargo bench -p xfer-server --bench wire
//! ```

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use xfer_core::{Timestamp, TransferRecord};
use xfer_server::catalog::Catalog;
use xfer_server::wire::{BatchIn, TransferIn, TransferOut};

/// Transfers in one batch request: what `xfer bench --via http` sends by default.
const BATCH: usize = 256;

fn one(i: usize) -> String {
    format!(
        r#"{{"id":"order-{i}","postings":[{{"from":"usd:user-{}","to":"usd:merchant-{}","asset":"USD","amount":{}}}],"metadata":"cart 9f3a"}}"#,
        i % 10_000,
        i % 100,
        100 + i % 900
    )
}

fn batch() -> String {
    let items: Vec<String> = (0..BATCH).map(one).collect();
    format!(r#"{{"transfers":[{}]}}"#, items.join(","))
}

fn wire(c: &mut Criterion) {
    let body = one(7);
    let mut g = c.benchmark_group("wire");
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode_transfer", |b| {
        b.iter(|| {
            let t: TransferIn = serde_json::from_str(black_box(&body)).expect("valid");
            black_box(t.to_spec("", &Catalog::default()).expect("valid"))
        })
    });
    let parsed: TransferIn = serde_json::from_str(&body).expect("valid");
    g.bench_function("check_transfer", |b| {
        b.iter(|| {
            black_box(
                black_box(&parsed)
                    .to_spec("", &Catalog::default())
                    .expect("valid"),
            )
        })
    });
    let spec = parsed.to_spec("", &Catalog::default()).expect("valid");
    let record = TransferRecord::accept(spec, Timestamp(1_700_000_000_000), 5_000);
    g.bench_function("encode_answer", |b| {
        b.iter(|| {
            let out = TransferOut::from(black_box(&record));
            black_box(serde_json::to_vec(&out).expect("encodes"))
        })
    });
    let body = batch();
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("decode_batch_256", |b| {
        b.iter(|| {
            let batch: BatchIn = serde_json::from_str(black_box(&body)).expect("valid");
            let specs: Vec<_> = batch
                .transfers
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    t.to_spec(&format!("transfers[{i}]."), &Catalog::default())
                        .expect("valid")
                })
                .collect();
            black_box(specs)
        })
    });
    g.finish();
}

criterion_group!(benches, wire);
criterion_main!(benches);
