//! The crate's only source of randomness: a SplitMix64 stream seeded by the
//! caller for each decision. It must never read a global or OS generator, so
//! the same seed always gives the same choice (the simulator relies on it).

use crate::rendezvous::mix64;

/// SplitMix64 (Steele, Lea and Flood): tiny, fast and good enough for choosing
/// among servers and jittering delays.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state)
    }

    /// Uniform in `0..n` (multiply-shift; bias below 2^-32 for the n used here).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}
