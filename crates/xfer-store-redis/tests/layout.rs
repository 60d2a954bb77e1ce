//! Data written by an older library brought to this layout when a store opens: an account's
//! history, a sorted set of "<seq> <transfer>" scored by a shard-wide counter up to xfer_6,
//! is a list now, in the same order, paged by position from 1.

mod common;
use common::{Server, Shards};
use xfer_core::{AccountId, TransferId};
use xfer_store::Store;
use xfer_store_redis::RedisStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_history_becomes_a_list_in_the_same_order() {
    let shards = Shards::new(Server::Single, "layout");
    let mut cfg = None;
    let first = shards.open_with(|c| cfg = Some(c.clone())).await;
    drop(first);
    let cfg = cfg.expect("the shard's config");
    let tag = format!("{{{}}}", cfg.prefix);
    let client = redis::Client::open(common::url()).expect("a client");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");
    // As xfer_6 left it: seq scores with gaps (other accounts' entries), a layout not marked.
    let () = redis::pipe()
        .zadd(format!("{tag}:accounts"), "alice", 0)
        .zadd(format!("{tag}:accounts"), "bob", 0)
        .zadd(format!("{tag}:h:alice"), "12 t-c", 12)
        .zadd(format!("{tag}:h:alice"), "5 t-a", 5)
        .zadd(format!("{tag}:h:alice"), "9 t-b", 9)
        .zadd(format!("{tag}:h:bob"), "7 t-x", 7)
        .set(format!("{tag}:seq"), 12)
        .del(format!("{tag}:layout"))
        .ignore()
        .query_async(&mut c)
        .await
        .expect("the old layout");

    let store = RedisStore::open(&cfg).await.expect("open migrates");
    assert_eq!(kind(&mut c, format!("{tag}:h:alice")).await, "list");
    let layout: String = redis::cmd("GET")
        .arg(format!("{tag}:layout"))
        .query_async(&mut c)
        .await
        .expect("GET");
    assert_eq!(layout, "7");

    let (alice, bob) = (
        AccountId::new("alice").unwrap(),
        AccountId::new("bob").unwrap(),
    );
    let t = |s: &str| TransferId::new(s).unwrap();
    let page = store.history(&alice, None, 2).await.expect("history");
    assert_eq!(page.entries, [(3, t("t-c")), (2, t("t-b"))]);
    assert_eq!(page.next, Some(2));
    let page = store.history(&alice, page.next, 2).await.expect("history");
    assert_eq!(page.entries, [(1, t("t-a"))]);
    assert_eq!(page.next, None);
    let page = store.history(&bob, None, 10).await.expect("history");
    assert_eq!(page.entries, [(1, t("t-x"))]);
    assert_eq!(
        store.history(&alice, Some(0), 10).await.unwrap().entries,
        []
    );

    // Opened again, the marked layout is not walked again: a sorted set written now stays.
    let () = redis::pipe()
        .zadd(format!("{tag}:accounts"), "carol", 0)
        .zadd(format!("{tag}:h:carol"), "1 t-z", 1)
        .ignore()
        .query_async(&mut c)
        .await
        .expect("ZADD");
    let _again = RedisStore::open(&cfg).await.expect("open");
    assert_eq!(kind(&mut c, format!("{tag}:h:carol")).await, "zset");
    let () = redis::cmd("DEL")
        .arg(format!("{tag}:h:carol"))
        .query_async(&mut c)
        .await
        .expect("DEL");
}

async fn kind(c: &mut redis::aio::MultiplexedConnection, key: String) -> String {
    redis::cmd("TYPE")
        .arg(key)
        .query_async(c)
        .await
        .expect("TYPE")
}
