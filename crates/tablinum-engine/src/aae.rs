//! Anti-entropy: tictac merkle trees over (key, value hash).
//!
//! Owns the tree shape and the comparison. A tree is XOR-mergeable: each of
//! `SEGMENTS` leaves is the XOR of `xxh3(key || value_hash)` of the objects
//! that hash to it, and each of `BRANCHES` branches is the XOR of its
//! leaves. Comparing two stores' trees names the leaves that differ; folding
//! just those leaves' keys on both sides lists the keys that differ. Never
//! reads values.

use std::collections::BTreeMap;

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// Leaves per tree.
pub const SEGMENTS: usize = 32 * 1024;
/// Leaves per branch.
pub const SEGMENTS_PER_BRANCH: usize = 32;
/// Branches per tree.
pub const BRANCHES: usize = SEGMENTS / SEGMENTS_PER_BRANCH;

/// Leaf of a key.
pub fn segment_of(key: &[u8]) -> u32 {
    (xxh3_64_with_seed(key, 0x7461_626c) % SEGMENTS as u64) as u32
}

/// A tictac tree over a key range.
#[derive(Clone, PartialEq, Eq)]
pub struct TicTacTree {
    leaves: Vec<u64>,
    branches: Vec<u64>,
}

impl std::fmt::Debug for TicTacTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TicTacTree(root {:016x})", self.root())
    }
}

impl Default for TicTacTree {
    fn default() -> Self {
        TicTacTree {
            leaves: vec![0; SEGMENTS],
            branches: vec![0; BRANCHES],
        }
    }
}

impl TicTacTree {
    /// Adds one object.
    pub fn add(&mut self, key: &[u8], value_hash: u64) {
        let mut b = Vec::with_capacity(key.len() + 8);
        b.extend_from_slice(key);
        b.extend_from_slice(&value_hash.to_le_bytes());
        let h = xxh3_64(&b);
        let s = segment_of(key) as usize;
        self.leaves[s] ^= h;
        self.branches[s / SEGMENTS_PER_BRANCH] ^= h;
    }

    /// XOR of all branches.
    pub fn root(&self) -> u64 {
        self.branches.iter().fold(0, |a, b| a ^ b)
    }

    /// Merges another tree built over a disjoint key set.
    pub fn merge(&mut self, other: &TicTacTree) {
        for (a, b) in self.leaves.iter_mut().zip(&other.leaves) {
            *a ^= b;
        }
        for (a, b) in self.branches.iter_mut().zip(&other.branches) {
            *a ^= b;
        }
    }

    /// Leaves that differ, found by descending only into differing branches.
    pub fn diff_segments(&self, other: &TicTacTree) -> Vec<u32> {
        let mut out = Vec::new();
        for br in 0..BRANCHES {
            if self.branches[br] == other.branches[br] {
                continue;
            }
            for s in br * SEGMENTS_PER_BRANCH..(br + 1) * SEGMENTS_PER_BRANCH {
                if self.leaves[s] != other.leaves[s] {
                    out.push(s as u32);
                }
            }
        }
        out
    }
}

/// Keys whose (presence, value hash) differ between two folds of the same
/// leaves.
pub fn diff_keys(a: &BTreeMap<Vec<u8>, u64>, b: &BTreeMap<Vec<u8>, u64>) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = a
        .iter()
        .filter(|(k, h)| b.get(*k) != Some(h))
        .map(|(k, _)| k.clone())
        .collect();
    out.extend(b.keys().filter(|k| !a.contains_key(*k)).cloned());
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_find_the_differing_leaves() {
        let mut a = TicTacTree::default();
        let mut b = TicTacTree::default();
        for i in 0..1000u32 {
            a.add(&i.to_be_bytes(), i as u64);
            if i != 500 {
                b.add(&i.to_be_bytes(), if i == 7 { 0 } else { i as u64 });
            }
        }
        let d = a.diff_segments(&b);
        assert!(d.contains(&segment_of(&500u32.to_be_bytes())));
        assert!(d.contains(&segment_of(&7u32.to_be_bytes())));
        assert!(d.len() <= 2);
        assert_eq!(a.diff_segments(&a.clone()), Vec::<u32>::new());
    }
}
