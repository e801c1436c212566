//! Linearizability of one register's history: the Wing-Gong algorithm with
//! Lowe's memoization (as Porcupine and Knossos implement it).
//!
//! Owns only the search. An operation is a read or a write of a unique
//! value with its invoke time and, when it completed, its return time. A
//! write whose outcome is unknown may have taken effect at any time after
//! its invocation, or never: it returns at "infinity", and the search
//! succeeds once only such writes remain. Failed operations (definitely not
//! applied) and reads of unknown outcome are left out by the caller.
//! Never allocates beyond one cache entry per distinct (linearized set,
//! value) pair it visits, and gives up (reports [`Verdict::Unknown`]) past
//! a step budget rather than running forever.

use std::collections::HashSet;

/// One operation on the register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// Invocation time (any monotonic unit).
    pub invoke: u64,
    /// Return time; `None`: the outcome is unknown (writes only).
    pub complete: Option<u64>,
    /// What it did.
    pub kind: Kind,
}

/// Read or write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Wrote this value (values are unique per register).
    Write(u64),
    /// Read this value (`None`: the register was empty).
    Read(Option<u64>),
}

/// The outcome of a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Some order of the operations respects real time and the register.
    Linearizable,
    /// No such order exists; `at` is the index (in the caller's list) of an
    /// operation the search could not place.
    Violation {
        /// Index of an operation that could not be placed.
        at: usize,
    },
    /// The search exceeded its step budget.
    Unknown,
}

/// Search steps before giving up.
pub const STEPS_MAX: u64 = 50_000_000;

#[derive(Clone, Copy)]
struct Entry {
    op: usize,
    is_call: bool,
    time: u64,
    /// Index of the matching entry (call <-> return).
    other: usize,
    prev: usize,
    next: usize,
}

const NIL: usize = usize::MAX;

fn step(state: Option<u64>, k: &Kind) -> Option<Option<u64>> {
    match k {
        Kind::Write(v) => Some(Some(*v)),
        Kind::Read(r) => (*r == state).then_some(state),
    }
}

/// Checks `ops` against a register that starts empty.
pub fn check(ops: &[Op]) -> Verdict {
    if ops.is_empty() {
        return Verdict::Linearizable;
    }
    // Entries: calls and returns in time order; at equal times calls come
    // first (the lenient reading of a tie). The list has a head sentinel.
    let mut ev: Vec<(u64, bool, usize)> = Vec::with_capacity(ops.len() * 2);
    for (i, o) in ops.iter().enumerate() {
        ev.push((o.invoke, true, i));
        ev.push((o.complete.unwrap_or(u64::MAX), false, i));
    }
    ev.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
    let n = ev.len();
    let head = n;
    let mut e: Vec<Entry> = Vec::with_capacity(n + 1);
    let mut call_at = vec![NIL; ops.len()];
    let mut ret_at = vec![NIL; ops.len()];
    for (i, (t, is_call, op)) in ev.iter().enumerate() {
        if *is_call {
            call_at[*op] = i;
        } else {
            ret_at[*op] = i;
        }
        e.push(Entry {
            op: *op,
            is_call: *is_call,
            time: *t,
            other: NIL,
            prev: if i == 0 { head } else { i - 1 },
            next: if i + 1 == n { NIL } else { i + 1 },
        });
    }
    for op in 0..ops.len() {
        e[call_at[op]].other = ret_at[op];
        e[ret_at[op]].other = call_at[op];
    }
    e.push(Entry {
        op: NIL,
        is_call: false,
        time: 0,
        other: NIL,
        prev: NIL,
        next: 0,
    });

    let words = ops.len().div_ceil(64);
    let mut linearized = vec![0u64; words];
    let mut cache: HashSet<(Vec<u64>, Option<u64>)> = HashSet::new();
    let mut stack: Vec<(usize, Option<u64>)> = Vec::new();
    let mut state: Option<u64> = None;
    let mut cur = e[head].next;
    let mut steps = 0u64;
    let mut deepest = 0usize;

    fn lift(e: &mut [Entry], call: usize) {
        let ret = e[call].other;
        for x in [call, ret] {
            let (p, nx) = (e[x].prev, e[x].next);
            e[p].next = nx;
            if nx != NIL {
                e[nx].prev = p;
            }
        }
    }
    fn unlift(e: &mut [Entry], call: usize) {
        let ret = e[call].other;
        for x in [ret, call] {
            let (p, nx) = (e[x].prev, e[x].next);
            e[p].next = x;
            if nx != NIL {
                e[nx].prev = x;
            }
        }
    }

    while cur != NIL {
        steps += 1;
        if steps > STEPS_MAX {
            return Verdict::Unknown;
        }
        let en = e[cur];
        if en.is_call {
            if let Some(next_state) = step(state, &ops[en.op].kind) {
                let mut lin = linearized.clone();
                lin[en.op / 64] |= 1 << (en.op % 64);
                if cache.insert((lin.clone(), next_state)) {
                    stack.push((cur, state));
                    deepest = deepest.max(stack.len());
                    state = next_state;
                    linearized = lin;
                    lift(&mut e, cur);
                    cur = e[head].next;
                    continue;
                }
            }
            cur = en.next;
        } else {
            // A return: every operation before it must be placed by now.
            if en.time == u64::MAX {
                // Only writes of unknown outcome remain: they never happened.
                return Verdict::Linearizable;
            }
            let Some((call, prev_state)) = stack.pop() else {
                return Verdict::Violation { at: en.op };
            };
            let op = e[call].op;
            linearized[op / 64] &= !(1 << (op % 64));
            state = prev_state;
            unlift(&mut e, call);
            cur = e[call].next;
        }
    }
    let _ = deepest;
    Verdict::Linearizable
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(invoke: u64, complete: Option<u64>, v: u64) -> Op {
        Op {
            invoke,
            complete,
            kind: Kind::Write(v),
        }
    }
    fn r(invoke: u64, complete: u64, v: Option<u64>) -> Op {
        Op {
            invoke,
            complete: Some(complete),
            kind: Kind::Read(v),
        }
    }

    #[test]
    fn sequential_histories() {
        assert_eq!(check(&[]), Verdict::Linearizable);
        assert_eq!(
            check(&[r(0, 1, None), w(2, Some(3), 1), r(4, 5, Some(1))]),
            Verdict::Linearizable
        );
        // A read of a value after it was overwritten.
        assert!(matches!(
            check(&[w(0, Some(1), 1), w(2, Some(3), 2), r(4, 5, Some(1))]),
            Verdict::Violation { .. }
        ));
        // A read of a value never written.
        assert!(matches!(
            check(&[w(0, Some(1), 1), r(2, 3, Some(9))]),
            Verdict::Violation { .. }
        ));
        // A read of nothing after a completed write.
        assert!(matches!(
            check(&[w(0, Some(1), 1), r(2, 3, None)]),
            Verdict::Violation { .. }
        ));
    }

    #[test]
    fn concurrent_operations_may_take_effect_in_either_order() {
        // Two overlapping writes; reads afterwards agree on one of them.
        let h = [
            w(0, Some(10), 1),
            w(1, Some(11), 2),
            r(12, 13, Some(1)),
            r(14, 15, Some(1)),
        ];
        assert_eq!(check(&h), Verdict::Linearizable);
        // ... but cannot flip back and forth.
        let h = [
            w(0, Some(10), 1),
            w(1, Some(11), 2),
            r(12, 13, Some(1)),
            r(14, 15, Some(2)),
            r(16, 17, Some(1)),
        ];
        assert!(matches!(check(&h), Verdict::Violation { .. }));
        // A read overlapping a write may see either value.
        let h = [
            w(0, Some(1), 1),
            w(2, Some(10), 2),
            r(3, 4, Some(1)),
            r(5, 6, Some(2)),
        ];
        assert_eq!(check(&h), Verdict::Linearizable);
    }

    #[test]
    fn unknown_writes_may_happen_late_or_never() {
        // Never happened.
        let h = [w(0, Some(1), 1), w(2, None, 2), r(3, 4, Some(1))];
        assert_eq!(check(&h), Verdict::Linearizable);
        // Happened, much later than it was invoked.
        let h = [
            w(0, Some(1), 1),
            w(2, None, 2),
            r(3, 4, Some(1)),
            r(50, 51, Some(2)),
        ];
        assert_eq!(check(&h), Verdict::Linearizable);
        // But not before it was invoked.
        let h = [w(0, Some(1), 1), r(3, 4, Some(2)), w(10, None, 2)];
        assert!(matches!(check(&h), Verdict::Violation { .. }));
        // And not twice (unique values: seen, gone, seen again).
        let h = [
            w(0, None, 2),
            r(3, 4, Some(2)),
            w(5, Some(6), 3),
            r(7, 8, Some(3)),
            r(9, 10, Some(2)),
        ];
        assert!(matches!(check(&h), Verdict::Violation { .. }));
    }

    #[test]
    fn a_large_concurrent_history_checks_quickly() {
        // 4 processes, 2000 operations, each read sees the last write.
        let mut h = Vec::new();
        let mut t = 0;
        let mut last = None;
        for i in 0..2000u64 {
            if i % 3 == 0 {
                h.push(w(t, Some(t + 5), i));
                last = Some(i);
            } else {
                h.push(r(t + 6, t + 8, last));
            }
            t += 10;
        }
        assert_eq!(check(&h), Verdict::Linearizable);
    }
}
