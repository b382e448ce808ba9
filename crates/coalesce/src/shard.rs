//! One shard of a group: the table of keys being filled, looked up by key on entry and by
//! identity (hash + entry id) everywhere else.
//!
//! An [`Entry`] starts *lone*: just the key and its identity, inline in the table, with no
//! allocation and no lock besides the shard's. A lone entry's only lead is the one that
//! created it, so its lead token is its id. The first follower upgrades it to *shared* by
//! creating a [`Flight`] (see `flight.rs`) under the shard lock; from then on the flight's
//! phase is authoritative. An entry never goes back from shared to lone; it leaves the shard
//! when its flight ends.
//!
//! An entry is kept small (hash, key, id, flight: 32 bytes for a `u64` key), because it is
//! written on every lead and read back on every finish. What only some flights need lives in
//! the flight instead: a changed lead (hand-off, takeover) and a lead's start time. A group
//! with `takeover_after` therefore creates its entries shared, and a takeover always happens
//! on a shared flight. (Measured: going from 56 to 32 bytes gained ~3 ns of ~75; most of the
//! uncontended cost left is the four lock/unlock atomics and the store-forwarding hazards
//! described in `lead.rs`.)
//!
//! `forget` moves an entry to the side table `forgotten`, where its leader (or a promoted
//! follower) still finds it by identity to finish or hand it on, while new callers for the key
//! start a fresh entry. The side table is almost always empty, so identity lookups pay one
//! `is_empty()` for it.

use std::sync::atomic::AtomicU64;

use hashbrown::HashTable;
use hashbrown::hash_table::OccupiedEntry;

use crate::flight::{Flight, FlightState, Lead};
use crate::stats::Counts;
use crate::sync::{Arc, Mutex};

/// One independently locked part of a group. Cache-line aligned so that two shards never
/// share a line.
#[repr(align(128))]
pub(crate) struct Shard<K, V, E> {
    pub(crate) map: Mutex<ShardMap<K, V, E>>,
    /// Follower waits that timed out: recorded without the shard lock, so kept apart.
    pub(crate) timed_out: AtomicU64,
}

/// The keys of one shard being filled, the counter that makes lead tokens unique, and the
/// counters recorded under this shard's lock.
pub(crate) struct ShardMap<K, V, E> {
    pub(crate) entries: HashTable<Entry<K, V, E>>,
    /// Entries detached by `forget`: still open for their leader and followers, invisible to
    /// new callers. Usually empty.
    forgotten: HashTable<Entry<K, V, E>>,
    pub(crate) next_token: u64,
    pub(crate) counts: Counts,
}

/// One key being filled.
pub(crate) struct Entry<K, V, E> {
    pub(crate) hash: u64,
    pub(crate) key: K,
    /// The token of the lead that created this entry: its identity for as long as it lives,
    /// and the current lead's token while it is lone. Unique within the group, so a newer
    /// entry for the same key never matches an older id.
    pub(crate) id: u64,
    /// Set when the first follower arrives (or at once, under `takeover_after`); then the
    /// flight's phase is authoritative.
    pub(crate) flight: Option<Arc<Flight<V, E>>>,
}

impl<K, V, E> Shard<K, V, E> {
    pub(crate) fn new() -> Self {
        Self {
            map: Mutex::new(ShardMap {
                entries: HashTable::new(),
                forgotten: HashTable::new(),
                next_token: 1,
                counts: Counts::default(),
            }),
            timed_out: AtomicU64::new(0),
        }
    }
}

impl<K, V, E> ShardMap<K, V, E> {
    /// The entry with identity `id`, whether visible to callers or forgotten.
    #[inline]
    pub(crate) fn find_mut(
        &mut self,
        hash: u64,
        id: u64,
    ) -> Option<OccupiedEntry<'_, Entry<K, V, E>>> {
        match self.entries.find_entry(hash, |e| e.id == id) {
            Ok(entry) => Some(entry),
            Err(_) if self.forgotten.is_empty() => None,
            Err(_) => self.forgotten.find_entry(hash, |e| e.id == id).ok(),
        }
    }

    /// The shared flight of the entry with identity `id` (`None`: no such entry, or lone).
    pub(crate) fn find(&self, hash: u64, id: u64) -> Option<&Arc<Flight<V, E>>> {
        let entry = match self.entries.find(hash, |e| e.id == id) {
            Some(entry) => entry,
            None if self.forgotten.is_empty() => return None,
            None => self.forgotten.find(hash, |e| e.id == id)?,
        };
        entry.flight.as_ref()
    }

    /// Detaches the entry `is_key` matches, if any. Returns whether there was one.
    pub(crate) fn forget(
        &mut self,
        hash: u64,
        is_key: impl FnMut(&Entry<K, V, E>) -> bool,
    ) -> bool {
        match self.entries.find_entry(hash, is_key) {
            Ok(entry) => {
                let (entry, _) = entry.remove();
                self.forgotten.insert_unique(hash, entry, |e| e.hash);
                true
            }
            Err(_) => false,
        }
    }

    /// How many forgotten entries are still open.
    #[cfg(all(test, not(herd_loom)))]
    pub(crate) fn forgotten_len(&self) -> usize {
        self.forgotten.len()
    }

    /// Detaches every entry. Returns how many there were.
    pub(crate) fn forget_all(&mut self) -> usize {
        let n = self.entries.len();
        if self.forgotten.is_empty() {
            std::mem::swap(&mut self.entries, &mut self.forgotten);
        } else {
            for entry in self.entries.drain() {
                self.forgotten.insert_unique(entry.hash, entry, |e| e.hash);
            }
        }
        n
    }
}

impl<K, V, E> Entry<K, V, E> {
    /// Upgrades a lone entry to a shared flight whose first follower is created here (and can
    /// lead if `can_lead`). Returns the flight and that follower's slot.
    pub(crate) fn share(&mut self, shard: usize, can_lead: bool) -> (Arc<Flight<V, E>>, usize) {
        debug_assert!(self.flight.is_none(), "only a lone entry is upgraded");
        let mut state = FlightState::open(Lead {
            token: self.id,
            since: None,
            promoted: None,
        });
        let slot = state.waiters.push(can_lead, None);
        let flight = Arc::new(Flight::new(self.hash, shard, self.id, state));
        self.flight = Some(Arc::clone(&flight));
        (flight, slot)
    }
}

/// A lead token unique within the group: a per-shard counter interleaved with the shard index.
/// Tokens only ever grow for a given key.
pub(crate) fn take_token(next: &mut u64, shard: usize, shards: usize) -> u64 {
    let token = *next * shards as u64 + shard as u64;
    *next += 1;
    token
}
