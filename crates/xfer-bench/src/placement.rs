//! Where the bench's shards go on a Redis Cluster: each shard's hash tag (its prefix) chosen
//! so that the shards fall on different masters, round robin, instead of wherever their
//! names happen to hash (three fixed names can land on two masters, one of them doing two
//! shards' work while the third idles).

use redis::Value;

fn failed(what: &str) -> impl Fn(redis::RedisError) -> String + '_ {
    move |e| format!("redis cluster placement: {what}: {e}")
}

/// The masters' slot ranges, in slot order, as `CLUSTER SLOTS` at `url` tells them.
async fn masters(c: &mut redis::aio::MultiplexedConnection) -> Result<Vec<(i64, i64)>, String> {
    let slots: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(c)
        .await
        .map_err(failed("CLUSTER SLOTS"))?;
    let Value::Array(ranges) = slots else {
        return Err(format!("CLUSTER SLOTS answered {slots:?}"));
    };
    let mut out = Vec::new();
    for r in ranges {
        match r {
            Value::Array(r) => match (r.first(), r.get(1)) {
                (Some(Value::Int(a)), Some(Value::Int(b))) => out.push((*a, *b)),
                _ => return Err(format!("CLUSTER SLOTS: a range without bounds: {r:?}")),
            },
            other => return Err(format!("CLUSTER SLOTS: {other:?}")),
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// `shards` prefixes (`xfer_bench_N` or `xfer_bench_N_K`), shard N's on the master that
/// holds the `N % masters`-th slot range of the Cluster reached at `url`. The names are the
/// same every run on the same Cluster, so runs stay comparable.
pub async fn spread(url: &str, shards: usize) -> Result<Vec<String>, String> {
    let client = redis::Client::open(url).map_err(failed(url))?;
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .map_err(failed("connecting"))?;
    let ranges = masters(&mut c).await?;
    if ranges.is_empty() {
        return Err("CLUSTER SLOTS: no master holds a slot".into());
    }
    let mut out = Vec::with_capacity(shards);
    for n in 0..shards {
        let (low, high) = ranges[n % ranges.len()];
        let mut found = None;
        for k in 0..10_000 {
            let name = if k == 0 {
                format!("xfer_bench_{n}")
            } else {
                format!("xfer_bench_{n}_{k}")
            };
            let slot: i64 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(&name)
                .query_async(&mut c)
                .await
                .map_err(failed("CLUSTER KEYSLOT"))?;
            if (low..=high).contains(&slot) {
                found = Some(name);
                break;
            }
        }
        out.push(found.ok_or_else(|| format!("no name found for slots {low}-{high}"))?);
    }
    Ok(out)
}
