//! The change feed as the service's ([`Service::events`]): every shard's events after a
//! cursor, merged, with the records they name, and the cursor of the next page; and where
//! it ends now ([`Service::feed_head`]), where a new reader that wants only what comes next
//! starts.

use crate::service::Service;
use std::collections::HashMap;
use xfer_core::{TransferId, TransferRecord};
use xfer_engine::ExecError;
use xfer_store::{Event, FeedPosition, StoreError};

/// Where a reader is in every shard's feed: one position per shard, in shard order,
/// written `p0_p1_…` (each as [`FeedPosition`] writes itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor(pub Vec<FeedPosition>);

impl Cursor {
    /// Before every event of `shards` shards.
    pub fn start(shards: usize) -> Cursor {
        Cursor(vec![FeedPosition::START; shards])
    }

    /// Moves past `e`, read at this cursor.
    pub fn advance(&mut self, e: &FeedEvent) {
        self.0[e.shard] = e.event.position;
    }

    /// Reads a cursor of `shards` shards; the error says why it is not one.
    pub fn parse(s: &str, shards: usize) -> Result<Cursor, String> {
        let positions = s
            .split('_')
            .map(str::parse)
            .collect::<Result<Vec<FeedPosition>, String>>()?;
        if positions.len() != shards {
            return Err(format!(
                "a cursor names a position in each of the {shards} shards, this one {}",
                positions.len()
            ));
        }
        Ok(Cursor(positions))
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("_")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// One event read, with its shard and its transfer's record (`None` only if the store no
/// longer has it).
pub struct FeedEvent {
    /// The shard whose feed holds it: the cursor after it moves that shard's position.
    pub shard: usize,
    /// The event.
    pub event: Event,
    /// Its transfer, as it is now.
    pub record: Option<TransferRecord>,
}

/// What a read of the feed found.
pub enum FeedRead {
    /// Events, oldest first within each shard.
    Page(Vec<FeedEvent>),
    /// The cursor is before what shard `shard` still keeps: events were missed.
    Behind {
        /// The shard.
        shard: usize,
        /// The last position it dropped.
        dropped_through: FeedPosition,
    },
    /// A shard's store keeps no change feed.
    Unsupported(String),
}

/// Where the feed ends now, or why there is no feed.
pub enum FeedHead {
    /// After every event the feed holds.
    At(Cursor),
    /// A shard's store keeps no change feed.
    Unsupported(String),
}

/// Events read per call while looking for the feed's end: the events alone, no records.
const HEAD_PAGE: usize = 1_024;

impl Service {
    /// A cursor after every event the feed holds now: each shard's feed read (events only,
    /// no records) from what it still keeps to its end. A shard's walk stops at an event
    /// made after the walk began, so that a feed written faster than it is read still
    /// ends the walk; that event and the ones after it are after the cursor, as later
    /// events are.
    pub async fn feed_head(&self) -> Result<FeedHead, ExecError> {
        let began = self.now();
        let shards = self.cluster().shards();
        let mut head = Cursor::start(shards.len());
        for (shard, store) in shards.iter().enumerate() {
            let mut at = FeedPosition::START;
            loop {
                let page = match store.events(at, HEAD_PAGE).await {
                    Ok(page) => page,
                    Err(StoreError::Unsupported(what)) => {
                        return Ok(FeedHead::Unsupported(format!(
                            "shard {shard}'s store does not offer {what}"
                        )))
                    }
                    Err(e) => return Err(ExecError::Unavailable(e.to_string())),
                };
                at = at.max(page.dropped_through);
                let full = page.events.len() == HEAD_PAGE;
                let later = page.events.iter().position(|e| e.at >= began);
                let before = later.map_or(&page.events[..], |i| &page.events[..i]);
                if let Some(last) = before.last() {
                    at = last.position;
                }
                if later.is_some() || !full {
                    break;
                }
            }
            head.0[shard] = at;
        }
        Ok(FeedHead::At(head))
    }

    /// How many events the feed holds after `after` on every shard, counted up to `cap`
    /// (events alone, no records): how far behind a reader at `after` is.
    pub async fn count_events(&self, after: &Cursor, cap: usize) -> Result<usize, ExecError> {
        let mut n = 0;
        for (store, from) in self.cluster().shards().iter().zip(&after.0) {
            let mut at = *from;
            while n < cap {
                let page = store
                    .events(at, HEAD_PAGE)
                    .await
                    .map_err(|e| ExecError::Unavailable(e.to_string()))?;
                n += page.events.len();
                match page.events.last() {
                    Some(last) if page.events.len() == HEAD_PAGE => at = last.position,
                    _ => break,
                }
            }
        }
        Ok(n.min(cap))
    }

    /// At most `limit` events after `after`, from every shard: each shard's in its order,
    /// the shards' merged by time.
    pub async fn events(&self, after: &Cursor, limit: usize) -> Result<FeedRead, ExecError> {
        let shards = self.cluster().shards();
        let mut pages = Vec::with_capacity(shards.len());
        for (shard, (store, from)) in shards.iter().zip(&after.0).enumerate() {
            let page = match store.events(*from, limit).await {
                Ok(page) => page,
                Err(StoreError::Unsupported(what)) => {
                    return Ok(FeedRead::Unsupported(format!(
                        "shard {shard}'s store does not offer {what}"
                    )))
                }
                Err(e) => return Err(ExecError::Unavailable(e.to_string())),
            };
            if *from < page.dropped_through {
                return Ok(FeedRead::Behind {
                    shard,
                    dropped_through: page.dropped_through,
                });
            }
            pages.push(page.events.into_iter().peekable());
        }
        // Each shard's events stay in their order: the next one taken is the earliest of
        // the shards' first ones (ties by shard).
        let mut taken = Vec::with_capacity(limit);
        while taken.len() < limit {
            let earliest = pages
                .iter_mut()
                .enumerate()
                .filter_map(|(s, p)| p.peek().map(|e| (e.at, s)))
                .min();
            let Some((_, s)) = earliest else { break };
            taken.push((s, pages[s].next().expect("peeked")));
        }
        let mut ids: Vec<TransferId> = taken.iter().map(|(_, e)| e.transfer.clone()).collect();
        ids.sort_unstable();
        ids.dedup();
        let records: HashMap<TransferId, TransferRecord> = self
            .get_transfers(&ids)
            .await?
            .into_iter()
            .map(|r| (r.spec.id.clone(), r))
            .collect();
        let events = taken
            .into_iter()
            .map(|(shard, event)| FeedEvent {
                shard,
                record: records.get(&event.transfer).cloned(),
                event,
            })
            .collect();
        Ok(FeedRead::Page(events))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_names_one_position_per_shard_and_reads_back() {
        let c = Cursor(vec![
            FeedPosition::seq(3),
            FeedPosition { major: 9, minor: 1 },
        ]);
        assert_eq!(c.to_string(), "3_9.1");
        assert_eq!(Cursor::parse("3_9.1", 2), Ok(c));
        assert_eq!(Cursor::start(3).to_string(), "0_0_0");
        assert!(Cursor::parse("3_9.1", 3).is_err());
        assert!(Cursor::parse("3__1", 3).is_err());
        assert!(Cursor::parse("x", 1).is_err());
    }
}
