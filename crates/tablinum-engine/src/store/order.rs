//! The store's lock order, checked: `writer` → `meta` → `sv` (write).
//!
//! Every acquisition of one of these three locks goes through
//! `Inner::lock_writer`, `Inner::lock_meta` or `Inner::write_sv`, which
//! record the lock's level for the current thread; in debug builds,
//! acquiring a lock while this thread holds one of a later level is a
//! panic naming both (a potential deadlock found before it happens). In
//! release builds the bookkeeping compiles away. Never used for leaf locks
//! (counters, error slot, pending edits), which take no other lock inside.

use std::ops::{Deref, DerefMut};

/// A lock's place in the order; a thread may only acquire upwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
    /// `Inner::writer`: the journal writer and sequence numbers.
    Writer = 0,
    /// `Inner::meta`: the manifest state.
    Meta = 1,
    /// `Inner::sv` taken for writing: installing a new super-version.
    Sv = 2,
}

#[cfg(debug_assertions)]
thread_local! {
    /// How many guards of each level this thread holds.
    static HELD: std::cell::Cell<[u8; 3]> = const { std::cell::Cell::new([0; 3]) };
}

/// A lock guard that also records its level for the order check.
pub(super) struct Ordered<G> {
    guard: G,
    #[cfg(debug_assertions)]
    level: Level,
}

impl<G> Ordered<G> {
    /// Checks the order, then takes the lock with `lock`.
    pub(super) fn acquire(level: Level, lock: impl FnOnce() -> G) -> Self {
        // Only debug builds check the order.
        #[cfg(not(debug_assertions))]
        let _ = level;
        #[cfg(debug_assertions)]
        HELD.with(|h| {
            let held = h.get();
            if let Some(later) = (level as usize + 1..3).find(|&l| held[l] > 0) {
                panic!(
                    "lock order violated: taking {level:?} while holding {:?} \
                     (order: Writer -> Meta -> Sv)",
                    [Level::Writer, Level::Meta, Level::Sv][later]
                );
            }
        });
        let guard = lock();
        #[cfg(debug_assertions)]
        HELD.with(|h| {
            let mut held = h.get();
            held[level as usize] += 1;
            h.set(held);
        });
        Ordered {
            guard,
            #[cfg(debug_assertions)]
            level,
        }
    }
}

impl<G> Drop for Ordered<G> {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        HELD.with(|h| {
            let mut held = h.get();
            held[self.level as usize] -= 1;
            h.set(held);
        });
    }
}

impl<G: Deref> Deref for Ordered<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: DerefMut> DerefMut for Ordered<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    #[test]
    fn upward_is_allowed_and_downward_panics() {
        let (a, b) = (Mutex::new(0), Mutex::new(0));
        {
            let _w = Ordered::acquire(Level::Writer, || a.lock());
            let _m = Ordered::acquire(Level::Meta, || b.lock());
        }
        // Released: any order again.
        let _m = Ordered::acquire(Level::Meta, || b.lock());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _w = Ordered::acquire(Level::Writer, || a.lock());
        }));
        let msg = r.unwrap_err();
        let msg = msg.downcast_ref::<String>().unwrap();
        assert!(msg.contains("taking Writer while holding Meta"), "{msg}");
    }
}
