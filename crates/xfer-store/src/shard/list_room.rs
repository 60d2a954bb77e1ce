//! Lists built in their room and started as long as the last one: [`push_made`] builds a
//! value straight into a list, [`room_for`] and [`room_like`] size a list that starts over
//! (each checkpoint, each bucket) from the one before it.

/// Appends what `make` builds to `list` (a `Vec`, a `VecDeque`), building it once `list`
/// has room for it.
///
/// `v.push(make())` builds the value first and keeps it across `push`'s call to grow the
/// list, so the compiler writes it to the stack and reads it back, at times in other
/// pieces than it wrote, which the CPU cannot forward from its store buffer: the read
/// waits until every older store has reached the cache, in a shard's step behind the
/// stores to records that missed it (`docs/benchmarks.md#ids-three-words`). Built here,
/// the value goes straight into the list's room (`extend` of one item reserves before it
/// asks for it).
#[inline(always)]
pub fn push_made<T>(list: &mut impl Extend<T>, make: impl FnOnce() -> T) {
    list.extend(std::iter::once_with(make));
}

/// The room to give a list that starts over each checkpoint (or bucket) and last held
/// `last` entries: that many and a quarter more. With exactly as many, a list that holds
/// a few more than the last one is copied whole into one twice its size, with the page
/// faults of the larger block (`docs/benchmarks.md#list-room`).
pub fn room_for(last: usize) -> usize {
    last.saturating_add(last / 4)
}

/// The room to give the list that takes over from `last`: [`room_for`] its length, and
/// never less than its capacity, so that a list that had to grow once (the time between
/// two checkpoints varies: a checkpoint that waits for a flush of fjall's memtables lets
/// twice as many entries come before the next) starts that large from then on. Room a
/// list does not fill costs address space, not memory: pages are not touched.
pub fn room_like<T>(last: &Vec<T>) -> usize {
    room_for(last.len()).max(last.capacity())
}

/// The list that takes over from `last` ([`room_like`] its room): `room` if it has that
/// much, else a new one.
pub(super) fn room_or_like<T>(room: Vec<T>, last: &Vec<T>) -> Vec<T> {
    let wanted = room_like(last);
    if room.capacity() >= wanted {
        debug_assert!(room.is_empty(), "room is empty");
        room
    } else {
        Vec::with_capacity(wanted)
    }
}

#[cfg(test)]
mod tests {
    use super::{push_made, room_for, room_like};

    #[test]
    fn a_made_value_is_appended_once_and_grows_a_full_list() {
        let mut v: Vec<String> = Vec::new();
        for n in 0..100 {
            push_made(&mut v, || n.to_string());
        }
        assert_eq!(v.len(), 100);
        assert_eq!(v[0], "0");
        assert_eq!(v[99], "99");
    }

    #[test]
    fn a_new_list_has_a_quarter_more_room_and_never_less_than_the_last_had() {
        assert_eq!(room_for(0), 0);
        assert_eq!(room_for(8), 10);
        assert_eq!(room_for(usize::MAX), usize::MAX, "saturates");
        let mut grown: Vec<u8> = Vec::with_capacity(100);
        grown.extend([1, 2, 3]);
        assert_eq!(room_like(&grown), 100, "the capacity it had");
        let full: Vec<u8> = (0..=255).collect();
        assert!(room_like(&full) >= 320, "a quarter more than its length");
    }
}
