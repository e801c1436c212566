//! The plan of a scenario: groups of cells, every cell measured `repeat`
//! times, the repeats of different cells interleaved.
//!
//! Owns the run order and nothing else: groups in turn (a volume variant, a
//! stream-limit q: whatever shares an expensive setup such as a loaded
//! table); within a group, repeats in turn; within a repeat, every cell of
//! the group once, either rotated by one per repeat ([`Interleave::Rotate`])
//! or in a seeded shuffled order ([`Interleave::Shuffle`]), so a drift of the
//! machine over time spreads over every cell instead of biasing one. It is a
//! pure function of its inputs: it must never measure, print or read the
//! clock, and the same plan and seed must always give the same order.

use rand::{RngExt, SeedableRng};

use crate::generators::BenchRng;

/// How the cells of one repeat are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interleave {
    /// Cell `k` of repeat `r` (from 0) is cell `(k + r) mod n`: round-robin.
    Rotate,
    /// A seeded shuffle per group and repeat: seed `seed ^ (group key << 32)
    /// ^ repeat` (repeat from 1).
    Shuffle {
        /// The scenario's seed.
        seed: u64,
    },
}

/// Cells that share a setup, measured together.
#[derive(Debug, Clone, PartialEq)]
pub struct Group<C> {
    /// Name in progress lines and directory names (`8k-sync`, `q=8`).
    pub name: String,
    /// Mixed into the shuffle seed ([`Interleave::Shuffle`]).
    pub key: u64,
    /// The cells, in table order.
    pub cells: Vec<C>,
}

/// Cells × repeats, and how they interleave.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan<C> {
    /// Groups, in run order.
    pub groups: Vec<Group<C>>,
    /// Runs per cell.
    pub repeat: u32,
    /// Order of the cells within a repeat.
    pub interleave: Interleave,
}

/// One run of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedRun {
    /// Index into the groups.
    pub group: usize,
    /// Index into that group's cells.
    pub cell: usize,
    /// Repeat, from 1.
    pub repeat: u32,
    /// Position within the repeat's order, from 1.
    pub position: usize,
    /// Position in the whole plan, from 1.
    pub sequence: usize,
}

impl<C> Plan<C> {
    /// Every run, in order.
    pub fn runs(&self) -> Vec<PlannedRun> {
        let mut runs = Vec::with_capacity(self.len());
        for (g, group) in self.groups.iter().enumerate() {
            let n = group.cells.len();
            for r in 0..self.repeat {
                let order: Vec<usize> = match self.interleave {
                    Interleave::Rotate => (0..n).map(|k| (k + r as usize) % n).collect(),
                    Interleave::Shuffle { seed } => {
                        let ids: Vec<usize> = (0..n).collect();
                        shuffled(&ids, seed ^ (group.key << 32) ^ u64::from(r + 1))
                    }
                };
                for (pos, cell) in order.into_iter().enumerate() {
                    runs.push(PlannedRun {
                        group: g,
                        cell,
                        repeat: r + 1,
                        position: pos + 1,
                        sequence: runs.len() + 1,
                    });
                }
            }
        }
        runs
    }

    /// Runs in the plan.
    pub fn len(&self) -> usize {
        self.groups.iter().map(|g| g.cells.len()).sum::<usize>() * self.repeat as usize
    }

    /// `true` when nothing is planned.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `4 q × 13 cells × 3 repeats`, or `4 q × 48 cells in all × 3 repeats`
    /// when the groups differ in size; `group_word` and `cell_word` name them.
    pub fn describe(&self, group_word: &str, cell_word: &str) -> String {
        let sizes: Vec<usize> = self.groups.iter().map(|g| g.cells.len()).collect();
        let cells = match sizes.first() {
            Some(&n) if sizes.iter().all(|&s| s == n) => format!("{n} {cell_word}"),
            _ => format!("{} {cell_word} in all", sizes.iter().sum::<usize>()),
        };
        format!(
            "{} {group_word} × {cells} × {} repeats = {} runs",
            self.groups.len(),
            self.repeat,
            self.len()
        )
    }
}

/// `items` in a seeded random order (Fisher–Yates).
pub fn shuffled<T: Clone>(items: &[T], seed: u64) -> Vec<T> {
    let mut v = items.to_vec();
    let mut rng = BenchRng::seed_from_u64(seed);
    for i in (1..v.len()).rev() {
        let j = rng.random_range(0..=i);
        v.swap(i, j);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(groups: usize, cells: usize, repeat: u32, interleave: Interleave) -> Plan<usize> {
        Plan {
            groups: (0..groups)
                .map(|g| Group {
                    name: format!("g{g}"),
                    key: g as u64,
                    cells: (0..cells).collect(),
                })
                .collect(),
            repeat,
            interleave,
        }
    }

    #[test]
    fn rotated_repeats_interleave_round_robin() {
        let p = plan(2, 3, 2, Interleave::Rotate);
        let runs = p.runs();
        assert_eq!(runs.len(), 12);
        assert_eq!(p.len(), 12);
        let order: Vec<(usize, usize, u32)> =
            runs.iter().map(|r| (r.group, r.cell, r.repeat)).collect();
        assert_eq!(
            &order[..6],
            &[
                (0, 0, 1),
                (0, 1, 1),
                (0, 2, 1),
                (0, 1, 2),
                (0, 2, 2),
                (0, 0, 2)
            ]
        );
        assert!(order[6..].iter().all(|r| r.0 == 1));
        // Every (group, cell, repeat) exactly once; sequence counts from 1.
        let mut all = order.clone();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 12);
        assert!(runs.iter().enumerate().all(|(i, r)| r.sequence == i + 1));
        assert_eq!(runs[4].position, 2);
        assert_eq!(plan(1, 1, 1, Interleave::Rotate).runs().len(), 1);
        assert_eq!(
            p.describe("variants", "targets"),
            "2 variants × 3 targets × 2 repeats = 12 runs"
        );
    }

    #[test]
    fn shuffled_repeats_are_seeded_permutations_per_group_and_repeat() {
        let p = plan(2, 5, 3, Interleave::Shuffle { seed: 7 });
        let runs = p.runs();
        assert_eq!(runs, p.runs(), "the same seed gives the same order");
        for g in 0..2 {
            for r in 1..=3 {
                let mut cells: Vec<usize> = runs
                    .iter()
                    .filter(|x| x.group == g && x.repeat == r)
                    .map(|x| x.cell)
                    .collect();
                cells.sort_unstable();
                assert_eq!(cells, [0, 1, 2, 3, 4]);
            }
        }
        let other = plan(2, 5, 3, Interleave::Shuffle { seed: 8 }).runs();
        assert_ne!(runs, other);
        let mut uneven = plan(2, 2, 1, Interleave::Rotate);
        uneven.groups[1].cells.push(2);
        assert_eq!(
            uneven.describe("q", "cells"),
            "2 q × 5 cells in all × 1 repeats = 5 runs"
        );
    }

    #[test]
    fn shuffles_are_seeded_permutations() {
        let v = [1, 2, 3, 4];
        let a = shuffled(&v, 9);
        assert_eq!(a, shuffled(&v, 9));
        let mut s = a.clone();
        s.sort_unstable();
        assert_eq!(s, v);
        assert!((0..20).any(|seed| shuffled(&v, seed) != a));
    }
}
