//! The FIFO list of followers waiting on one flight.
//!
//! A slab of slots threaded by a doubly linked list: joining is O(1), leaving from anywhere
//! (a cancelled or timed-out follower) is O(1), and the oldest follower able to lead is found
//! from the front. A slot index is only ever freed by the follower that owns it, so an index
//! held by a waiting future can never come to name somebody else's slot.

use std::task::Waker;

const NIL: usize = usize::MAX;

#[derive(Debug)]
struct Waiter {
    waker: Option<Waker>,
    /// False for a caller whose fill already ran elsewhere (the initiator of a detached fill):
    /// it may wait for the result but cannot be handed the lead.
    can_lead: bool,
    prev: usize,
    next: usize,
}

#[derive(Debug)]
enum Slot {
    Occupied(Waiter),
    Vacant { next_free: usize },
}

/// Followers of one flight, oldest first.
#[derive(Debug)]
pub(crate) struct Waiters {
    slots: Vec<Slot>,
    head: usize,
    tail: usize,
    free: usize,
    len: usize,
}

impl Default for Waiters {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            head: NIL,
            tail: NIL,
            free: NIL,
            len: 0,
        }
    }
}

impl Waiters {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Appends a follower at the back and returns its slot index.
    pub(crate) fn push(&mut self, can_lead: bool, waker: Option<Waker>) -> usize {
        let waiter = Waiter {
            waker,
            can_lead,
            prev: self.tail,
            next: NIL,
        };
        let index = if self.free != NIL {
            let index = self.free;
            match self.slots[index] {
                Slot::Vacant { next_free } => self.free = next_free,
                Slot::Occupied(_) => unreachable!("free list points at an occupied slot"),
            }
            self.slots[index] = Slot::Occupied(waiter);
            index
        } else {
            self.slots.push(Slot::Occupied(waiter));
            self.slots.len() - 1
        };
        match self.tail {
            NIL => self.head = index,
            tail => self.waiter_mut(tail).next = index,
        }
        self.tail = index;
        self.len += 1;
        index
    }

    /// Removes the follower in `index` (which must be occupied).
    pub(crate) fn remove(&mut self, index: usize) {
        let (prev, next) = {
            let waiter = self.waiter_mut(index);
            (waiter.prev, waiter.next)
        };
        match prev {
            NIL => self.head = next,
            prev => self.waiter_mut(prev).next = next,
        }
        match next {
            NIL => self.tail = prev,
            next => self.waiter_mut(next).prev = prev,
        }
        self.slots[index] = Slot::Vacant {
            next_free: self.free,
        };
        self.free = index;
        self.len -= 1;
    }

    /// Stores the waker to use when this follower's turn comes, cloning only when it changed.
    pub(crate) fn register(&mut self, index: usize, waker: &Waker) {
        let slot = &mut self.waiter_mut(index).waker;
        match slot {
            Some(current) if current.will_wake(waker) => {}
            _ => *slot = Some(waker.clone()),
        }
    }

    /// The oldest follower that can lead, with its waker taken out for waking.
    pub(crate) fn first_able_to_lead(&mut self) -> Option<(usize, Option<Waker>)> {
        let mut index = self.head;
        while index != NIL {
            let waiter = self.waiter_mut(index);
            if waiter.can_lead {
                return Some((index, waiter.waker.take()));
            }
            index = waiter.next;
        }
        None
    }

    /// Wakes every follower still in the list. Called on a list already taken out of its
    /// flight, after the locks are released.
    pub(crate) fn wake_all(self) {
        for slot in self.slots {
            if let Slot::Occupied(Waiter {
                waker: Some(waker), ..
            }) = slot
            {
                waker.wake();
            }
        }
    }

    fn waiter_mut(&mut self, index: usize) -> &mut Waiter {
        match &mut self.slots[index] {
            Slot::Occupied(waiter) => waiter,
            Slot::Vacant { .. } => unreachable!("waiter slot {index} is vacant"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(w: &Waiters) -> Vec<usize> {
        let mut out = Vec::new();
        let mut i = w.head;
        while i != NIL {
            out.push(i);
            i = match &w.slots[i] {
                Slot::Occupied(x) => x.next,
                Slot::Vacant { .. } => panic!("vacant in list"),
            };
        }
        out
    }

    #[test]
    fn fifo_with_removal_from_anywhere_and_slot_reuse() {
        let mut w = Waiters::default();
        let a = w.push(true, None);
        let b = w.push(true, None);
        let c = w.push(true, None);
        assert_eq!(order(&w), vec![a, b, c]);
        w.remove(b);
        assert_eq!(order(&w), vec![a, c]);
        let d = w.push(true, None);
        assert_eq!(d, b, "freed slot is reused");
        assert_eq!(order(&w), vec![a, c, d]);
        w.remove(a);
        w.remove(d);
        assert_eq!(order(&w), vec![c]);
        assert_eq!(w.len(), 1);
        w.remove(c);
        assert_eq!(order(&w), Vec::<usize>::new());
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn first_able_to_lead_skips_followers_that_cannot() {
        let mut w = Waiters::default();
        let _observer = w.push(false, None);
        let leader_candidate = w.push(true, None);
        assert_eq!(
            w.first_able_to_lead().map(|(i, _)| i),
            Some(leader_candidate)
        );
        w.remove(leader_candidate);
        assert!(w.first_able_to_lead().is_none());
    }
}
