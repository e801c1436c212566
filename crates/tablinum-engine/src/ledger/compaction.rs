//! Leveled compaction *policy*: a pure function from a snapshot of the level
//! shape to a decision. The executor (in the store) carries it out.
//!
//! Owns level targets, scoring, input choice, the "bottommost" rule that
//! lets tombstones be dropped, and the compaction-debt estimate used for
//! write stalls. Never does I/O and never holds locks.

/// Number of levels (L0..L6).
pub const LEVELS: usize = 7;

/// What the policy needs to know about one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSummary {
    /// File id.
    pub id: u64,
    /// Size in bytes.
    pub size: u64,
    /// Smallest key.
    pub first_key: Vec<u8>,
    /// Largest key.
    pub last_key: Vec<u8>,
}

/// Shape parameters (copied from `Options`).
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// L0 files that trigger L0 -> L1.
    pub l0_trigger_files: usize,
    /// L1 byte budget.
    pub level1_bytes_max: u64,
    /// Growth between levels.
    pub multiplier: u64,
}

/// A compaction decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Nothing to do.
    Nothing,
    /// Move a file down a level unchanged (no overlap below).
    Move {
        /// Source level.
        from: usize,
        /// The file.
        file: u64,
    },
    /// Merge `inputs` of level `from` with `overlaps` of `from + 1`.
    Merge {
        /// Source level.
        from: usize,
        /// Files taken from `from`.
        inputs: Vec<u64>,
        /// Files taken from `from + 1`.
        overlaps: Vec<u64>,
        /// No level below `from + 1` overlaps the key range: tombstones may go.
        bottommost: bool,
    },
}

/// Byte budget of level `level` (>= 1).
pub fn level_target_bytes(shape: &Shape, level: usize) -> u64 {
    let mut t = shape.level1_bytes_max;
    for _ in 1..level {
        t = t.saturating_mul(shape.multiplier);
    }
    t
}

fn overlaps(f: &FileSummary, lo: &[u8], hi: &[u8]) -> bool {
    f.first_key.as_slice() <= hi && f.last_key.as_slice() >= lo
}

fn range_of(files: &[&FileSummary]) -> (Vec<u8>, Vec<u8>) {
    let lo = files
        .iter()
        .map(|f| f.first_key.clone())
        .min()
        .unwrap_or_default();
    let hi = files
        .iter()
        .map(|f| f.last_key.clone())
        .max()
        .unwrap_or_default();
    (lo, hi)
}

/// Chooses the most urgent compaction for `levels` (L0 newest first; deeper
/// levels sorted by key, disjoint).
pub fn choose(levels: &[Vec<FileSummary>], shape: &Shape) -> Choice {
    let mut best: Option<(f64, usize)> = None;
    for (l, files) in levels.iter().enumerate().take(LEVELS - 1) {
        let score = if l == 0 {
            files.len() as f64 / shape.l0_trigger_files as f64
        } else {
            files.iter().map(|f| f.size).sum::<u64>() as f64 / level_target_bytes(shape, l) as f64
        };
        if score >= 1.0 && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, l));
        }
    }
    let Some((_, from)) = best else {
        return Choice::Nothing;
    };
    let empty = Vec::new();
    let below = levels.get(from + 1).unwrap_or(&empty);
    let inputs: Vec<&FileSummary> = if from == 0 {
        levels[0].iter().collect()
    } else {
        // The file whose overlap below is smallest relative to its size.
        let pick = levels[from].iter().min_by(|a, b| {
            let oa: u64 = below
                .iter()
                .filter(|f| overlaps(f, &a.first_key, &a.last_key))
                .map(|f| f.size)
                .sum();
            let ob: u64 = below
                .iter()
                .filter(|f| overlaps(f, &b.first_key, &b.last_key))
                .map(|f| f.size)
                .sum();
            (oa as f64 / a.size.max(1) as f64).total_cmp(&(ob as f64 / b.size.max(1) as f64))
        });
        pick.into_iter().collect()
    };
    let (lo, hi) = range_of(&inputs);
    let over: Vec<u64> = below
        .iter()
        .filter(|f| overlaps(f, &lo, &hi))
        .map(|f| f.id)
        .collect();
    if from > 0 && over.is_empty() && inputs.len() == 1 {
        return Choice::Move {
            from,
            file: inputs[0].id,
        };
    }
    let bottommost = levels
        .iter()
        .skip(from + 2)
        .all(|files| files.iter().all(|f| !overlaps(f, &lo, &hi)));
    Choice::Merge {
        from,
        inputs: inputs.iter().map(|f| f.id).collect(),
        overlaps: over,
        bottommost,
    }
}

/// Estimated bytes compaction must still rewrite to bring every level
/// within budget (used for write stalls).
pub fn debt_bytes(levels: &[Vec<FileSummary>], shape: &Shape) -> u64 {
    let mut debt = 0u64;
    for (l, files) in levels.iter().enumerate() {
        let bytes: u64 = files.iter().map(|f| f.size).sum();
        if l == 0 {
            if files.len() >= shape.l0_trigger_files {
                debt += bytes;
            }
        } else if l < LEVELS - 1 {
            debt += bytes.saturating_sub(level_target_bytes(shape, l));
        }
    }
    debt
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(id: u64, size: u64, a: &str, b: &str) -> FileSummary {
        FileSummary {
            id,
            size,
            first_key: a.as_bytes().to_vec(),
            last_key: b.as_bytes().to_vec(),
        }
    }

    const SHAPE: Shape = Shape {
        l0_trigger_files: 2,
        level1_bytes_max: 100,
        multiplier: 10,
    };

    #[test]
    fn nothing_when_within_budget() {
        let levels = vec![vec![f(1, 10, "a", "b")], vec![f(2, 50, "a", "z")]];
        assert_eq!(choose(&levels, &SHAPE), Choice::Nothing);
        assert_eq!(debt_bytes(&levels, &SHAPE), 0);
    }

    #[test]
    fn l0_merges_all_with_overlapping_l1() {
        let levels = vec![
            vec![f(3, 10, "c", "f"), f(4, 10, "a", "d")],
            vec![f(1, 30, "a", "b"), f(2, 30, "e", "g"), f(5, 30, "x", "z")],
        ];
        assert_eq!(
            choose(&levels, &SHAPE),
            Choice::Merge {
                from: 0,
                inputs: vec![3, 4],
                overlaps: vec![1, 2],
                bottommost: true
            }
        );
    }

    #[test]
    fn deeper_level_moves_without_overlap_and_is_not_bottommost_with_data_below() {
        let levels = vec![
            vec![],
            vec![f(1, 150, "a", "c")],
            vec![],
            vec![f(9, 1, "b", "b")],
        ];
        assert_eq!(choose(&levels, &SHAPE), Choice::Move { from: 1, file: 1 });
        let levels = vec![
            vec![],
            vec![f(1, 150, "a", "c")],
            vec![f(2, 10, "a", "a")],
            vec![f(9, 1, "b", "b")],
        ];
        assert_eq!(
            choose(&levels, &SHAPE),
            Choice::Merge {
                from: 1,
                inputs: vec![1],
                overlaps: vec![2],
                bottommost: false
            }
        );
        assert_eq!(debt_bytes(&levels, &SHAPE), 50);
    }
}
