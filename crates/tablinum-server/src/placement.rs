//! Where tablets go: a pure function of a snapshot of the cluster.
//!
//! [`plan`] decides which servers are dead (silent longer than the
//! heartbeat timeout, unless the manager itself stalled), which tablets
//! move (off dead servers to the least-loaded live one; withdrawn from the
//! most loaded while servers differ by more than [`BALANCE_SLACK`])
//! and the epoch each moved tablet gets (one more than it had: the new
//! owner fences the old one out of the storage). The manager executes the
//! plan; nothing here reads a clock, a file or a lock, so every case is a
//! unit test.
//!
//! A tablet moves off a *live* server (balancing) in two steps: it is
//! withdrawn (unassigned), and assigned again only once no live server
//! reports holding it, since the old owner may serve reads under its lease
//! until it has closed the tablet. A dead server's tablets move at once:
//! the heartbeat timeout that declared it dead is longer than its lease.
//!
//! Never gives a server more than `tablets_per_server_max` tablets (the
//! rest wait unassigned). Never moves a tablet that does not have to move: a balanced cluster
//! plans nothing, and applying a plan then planning again plans nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Balancing moves tablets only while the most loaded live server holds
/// more than this many tablets above the least loaded one.
pub const BALANCE_SLACK: usize = 1;
/// A pass of the manager that comes this long after the previous one means
/// the manager itself stalled (paused, slow disk): nobody is judged dead in
/// it, and every server's silence is counted from now.
pub const STALL_MS: u64 = 1_000;

/// A server as the manager last heard from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerView {
    /// Its id.
    pub id: String,
    /// Time since its last heartbeat.
    pub silent_for: Duration,
    /// It has reported what it holds since the manager started.
    pub reported: bool,
}

/// A tablet and its assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TabletView {
    /// Table name.
    pub table: String,
    /// Position of the tablet in its table.
    pub index: usize,
    /// Assigned server id ("" while unassigned).
    pub server: String,
    /// Its current epoch (0: never assigned under fencing).
    pub epoch: u64,
    /// Live servers whose latest heartbeat reported holding it open.
    pub holders: Vec<String>,
}

/// Everything a plan depends on.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    /// Servers known to the manager.
    pub servers: &'a [ServerView],
    /// Every tablet.
    pub tablets: &'a [TabletView],
    /// Silence after which a server is dead.
    pub heartbeat_timeout: Duration,
    /// Time since the manager's previous pass.
    pub since_last_pass: Duration,
    /// Tablets one server holds at most: a tablet with no live server
    /// below this stays unassigned.
    pub tablets_per_server_max: usize,
}

/// A change of one tablet's assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// Table name.
    pub table: String,
    /// Position of the tablet in its table.
    pub index: usize,
    /// New server ("" : unassigned, no live server).
    pub to: String,
    /// New epoch.
    pub epoch: u64,
}

/// What the manager must do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The manager stalled: judge nobody, restart every server's silence.
    pub stalled: bool,
    /// Servers to declare dead.
    pub expire: Vec<String>,
    /// Assignment changes.
    pub moves: Vec<Move>,
}

/// The plan for `input`.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let stalled = input.since_last_pass >= Duration::from_millis(STALL_MS);
    let expire: Vec<String> = if stalled {
        Vec::new()
    } else {
        input
            .servers
            .iter()
            .filter(|s| s.silent_for > input.heartbeat_timeout)
            .map(|s| s.id.clone())
            .collect()
    };
    let dead: BTreeSet<&str> = expire.iter().map(String::as_str).collect();
    let mut load: BTreeMap<&str, usize> = input
        .servers
        .iter()
        .filter(|s| !dead.contains(s.id.as_str()))
        .map(|s| (s.id.as_str(), 0))
        .collect();
    for t in input.tablets {
        if let Some(n) = load.get_mut(t.server.as_str()) {
            *n += 1;
        }
    }
    let unreported = input
        .servers
        .iter()
        .any(|s| !s.reported && !dead.contains(s.id.as_str()));
    let mut moves = Vec::new();
    // Where each tablet is after the moves so far.
    let mut at: Vec<(&str, u64)> = input
        .tablets
        .iter()
        .map(|t| (t.server.as_str(), t.epoch))
        .collect();
    for (i, t) in input.tablets.iter().enumerate() {
        if load.contains_key(t.server.as_str()) {
            if t.epoch == 0 {
                // Assigned before epochs existed: fence from now on.
                moves.push(Move {
                    table: t.table.clone(),
                    index: t.index,
                    to: t.server.clone(),
                    epoch: 1,
                });
                at[i].1 = 1;
            }
            continue;
        }
        if t.holders.iter().any(|h| load.contains_key(h.as_str())) || (t.epoch > 0 && unreported) {
            // Withdrawn from a live server that has not let go yet, or a
            // live server has not said yet what it holds (manager restart).
            continue;
        }
        match least_loaded(&load).filter(|s| load[s] < input.tablets_per_server_max) {
            Some(to) => {
                *load.get_mut(to).expect("live") += 1;
                moves.push(Move {
                    table: t.table.clone(),
                    index: t.index,
                    to: to.to_string(),
                    epoch: t.epoch + 1,
                });
                at[i] = (to, t.epoch + 1);
            }
            None if !t.server.is_empty() => {
                moves.push(Move {
                    table: t.table.clone(),
                    index: t.index,
                    to: String::new(),
                    epoch: t.epoch,
                });
                at[i] = ("", t.epoch);
            }
            None => {}
        }
    }
    // Tablets withdrawn and not yet reassigned count for the least loaded
    // servers they will go to, so balancing does not withdraw more.
    let pending = input
        .tablets
        .iter()
        .zip(&at)
        .filter(|(t, (s, _))| {
            s.is_empty() && t.holders.iter().any(|h| load.contains_key(h.as_str()))
        })
        .count();
    for _ in 0..pending {
        if let Some(min) = least_loaded(&load) {
            *load.get_mut(min).expect("live") += 1;
        }
    }
    // Balance: withdraw one tablet at a time from the most loaded server
    // (it is reassigned once that server has let go of it).
    while let (Some(max), Some(min)) = (most_loaded(&load), least_loaded(&load)) {
        if load[max] <= load[min] + BALANCE_SLACK {
            break;
        }
        let Some(i) = at.iter().position(|(s, _)| *s == max) else {
            break;
        };
        let t = &input.tablets[i];
        // A tablet changed twice in one plan keeps one change, the last.
        moves.retain(|m| !(m.table == t.table && m.index == t.index));
        moves.push(Move {
            table: t.table.clone(),
            index: t.index,
            to: String::new(),
            epoch: at[i].1,
        });
        at[i] = ("", at[i].1);
        *load.get_mut(max).expect("live") -= 1;
        *load.get_mut(min).expect("live") += 1;
    }
    Plan {
        stalled,
        expire,
        moves,
    }
}

fn least_loaded<'a>(load: &BTreeMap<&'a str, usize>) -> Option<&'a str> {
    load.iter()
        .min_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(b.0)))
        .map(|(k, _)| *k)
}

fn most_loaded<'a>(load: &BTreeMap<&'a str, usize>) -> Option<&'a str> {
    load.iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(k, _)| *k)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(3);
    const TICK: Duration = Duration::from_millis(250);

    fn servers(spec: &[(&str, u64)]) -> Vec<ServerView> {
        spec.iter()
            .map(|(id, ms)| ServerView {
                id: id.to_string(),
                silent_for: Duration::from_millis(*ms),
                reported: true,
            })
            .collect()
    }

    fn tablets(owners: &[&str]) -> Vec<TabletView> {
        owners
            .iter()
            .enumerate()
            .map(|(i, s)| TabletView {
                table: "t".into(),
                index: i,
                server: s.to_string(),
                epoch: 3,
                holders: if s.is_empty() {
                    Vec::new()
                } else {
                    vec![s.to_string()]
                },
            })
            .collect()
    }

    /// Applies a plan; servers then hold exactly what they are assigned
    /// (as after their next heartbeat).
    fn apply(t: &mut [TabletView], p: &Plan) {
        for m in &p.moves {
            t[m.index].server = m.to.clone();
            t[m.index].epoch = m.epoch;
        }
        for x in t.iter_mut() {
            x.holders = if x.server.is_empty() {
                Vec::new()
            } else {
                vec![x.server.clone()]
            };
        }
    }

    fn run(s: &[ServerView], t: &[TabletView], since: Duration) -> Plan {
        run_capped(s, t, since, usize::MAX)
    }

    fn run_capped(s: &[ServerView], t: &[TabletView], since: Duration, cap: usize) -> Plan {
        plan(&PlanInput {
            servers: s,
            tablets: t,
            heartbeat_timeout: TIMEOUT,
            since_last_pass: since,
            tablets_per_server_max: cap,
        })
    }

    #[test]
    fn no_server_gets_more_than_its_tablet_limit() {
        let s = servers(&[("a", 0), ("b", 0)]);
        let mut t = tablets(&["", "", "", "", "", "", "", ""]);
        let p = run_capped(&s, &t, TICK, 3);
        assert_eq!(p.moves.len(), 6, "{p:?}");
        apply(&mut t, &p);
        for srv in ["a", "b"] {
            assert_eq!(t.iter().filter(|x| x.server == srv).count(), 3);
        }
        // The rest wait; a new server takes them.
        assert!(run_capped(&s, &t, TICK, 3).moves.is_empty());
        let s = servers(&[("a", 0), ("b", 0), ("c", 0)]);
        let p = run_capped(&s, &t, TICK, 3);
        assert_eq!(p.moves.iter().filter(|m| m.to == "c").count(), 2, "{p:?}");
    }

    #[test]
    fn a_balanced_cluster_plans_nothing() {
        let s = servers(&[("a", 100), ("b", 400), ("c", 0)]);
        let t = tablets(&["a", "b", "c", "a", "b", "c", "a"]);
        assert_eq!(run(&s, &t, TICK), Plan::default());
    }

    #[test]
    fn a_dead_servers_tablets_move_with_a_new_epoch_and_the_plan_is_stable() {
        let s = servers(&[("a", 100), ("b", 3_500), ("c", 0)]);
        let mut t = tablets(&["a", "b", "c", "b", "a", "c"]);
        let p = run(&s, &t, TICK);
        assert_eq!(p.expire, vec!["b".to_string()]);
        assert_eq!(p.moves.len(), 2, "{p:?}");
        assert!(p.moves.iter().all(|m| m.epoch == 4 && m.to != "b"));
        apply(&mut t, &p);
        let s2 = servers(&[("a", 100), ("c", 0)]);
        assert_eq!(run(&s2, &t, TICK), Plan::default());
    }

    #[test]
    fn a_stalled_manager_judges_nobody() {
        // Every server looks silent because the manager itself was paused.
        let s = servers(&[("a", 9_000), ("b", 9_000)]);
        let t = tablets(&["a", "b"]);
        let p = run(&s, &t, Duration::from_millis(8_000));
        assert!(p.stalled);
        assert!(p.expire.is_empty() && p.moves.is_empty(), "{p:?}");
        // The next pass, on time, with fresh silences: still nothing.
        let s = servers(&[("a", 300), ("b", 300)]);
        assert_eq!(run(&s, &t, TICK), Plan::default());
    }

    #[test]
    fn a_rejoining_server_gets_only_what_balance_needs() {
        // a was paused; its tablets went to b and c; it rejoins.
        let s = servers(&[("a", 0), ("b", 100), ("c", 100)]);
        let mut t = tablets(&["b", "c", "b", "c", "b", "c"]);
        let p = run(&s, &t, TICK);
        // 3/3/0 becomes 2/2/2: exactly two tablets withdrawn...
        assert_eq!(p.moves.len(), 2, "{p:?}");
        assert!(p.moves.iter().all(|m| m.to.is_empty() && m.epoch == 3));
        // ... and not reassigned while their old owners still hold them
        // (they may serve reads under their leases until they close them).
        let held = t.clone();
        for m in &p.moves {
            t[m.index].server.clear();
        }
        let waiting = run(&s, &t, TICK);
        assert!(waiting.moves.is_empty(), "{waiting:?}");
        t = held;
        apply(&mut t, &p);
        let p2 = run(&s, &t, TICK);
        assert_eq!(p2.moves.len(), 2, "{p2:?}");
        assert!(p2.moves.iter().all(|m| m.to == "a" && m.epoch == 4));
        apply(&mut t, &p2);
        assert_eq!(run(&s, &t, TICK), Plan::default());
        // Within the slack, nothing moves.
        let t = tablets(&["b", "c", "b", "c", "a"]);
        assert_eq!(run(&s, &t, TICK), Plan::default());
    }

    #[test]
    fn after_a_manager_restart_withdrawn_tablets_wait_for_every_report() {
        let mut s = servers(&[("a", 0), ("b", 0)]);
        s[1].reported = false; // b has not said yet what it holds
        let mut t = tablets(&["a", ""]);
        t[1].epoch = 2; // assigned before: someone may still hold it
        let p = run(&s, &t, TICK);
        assert!(p.moves.is_empty(), "{p:?}");
        s[1].reported = true;
        let p = run(&s, &t, TICK);
        assert_eq!(p.moves.len(), 1);
        assert_eq!((p.moves[0].to.as_str(), p.moves[0].epoch), ("b", 3));
        // A tablet never assigned needs no report.
        s[1].reported = false;
        t[1].epoch = 0;
        assert_eq!(run(&s, &t, TICK).moves.len(), 1);
    }

    #[test]
    fn no_live_server_unassigns_and_legacy_tablets_get_epoch_one() {
        let s = servers(&[("a", 5_000)]);
        let t = tablets(&["a", ""]);
        let p = run(&s, &t, TICK);
        assert_eq!(p.moves.len(), 1);
        assert_eq!(p.moves[0].to, "");
        let s = servers(&[("a", 0)]);
        let mut t = tablets(&["a"]);
        t[0].epoch = 0;
        let p = run(&s, &t, TICK);
        assert_eq!(p.moves[0].epoch, 1);
        assert_eq!(p.moves[0].to, "a");
    }
}
