//! Which server serves each tablet of one attempt of an eventual read.
//!
//! Owns [`select`], a pure function of a [`Request`]: the read's tablets with
//! their attempt histories, a snapshot of live scan servers by group, the
//! chosen [`Profile`] and a per-call random seed. It follows Accumulo's
//! `ConfigurableScanServerSelector` (rendezvous variant, #5937, with error
//! backoff from #6315):
//!
//! * attempt number = the largest attempt count over the request's tablets;
//!   plan = `min(attempt, last)`; the busy timeout escalates past the last plan
//!   ([`Profile::busy_timeout_ms`]);
//! * the plan's candidate set is the tablet's top-N servers by rendezvous score
//!   under the plan's salt (N from the plan, at least 1);
//! * the server is drawn uniformly among candidates not yet tried for the
//!   tablet; if all were tried, among the next N untried servers in rendezvous
//!   order (nearest affinity); only if every live server was tried is one
//!   reused (the least tried candidate);
//! * optionally (tablinum, not Accumulo), a fresh read skips the first plan
//!   with probability min(heat, `first_plan_skip_max`), where heat is the
//!   caller's recent busy fraction of first-plan attempts on the tablet
//!   ([`FirstPlanHeat`]): a hot first set is not sent work it would bounce;
//! * a delay is returned only after errors (exponential, jittered, at most
//!   [`ERROR_BACKOFF_MS_MAX`]), never after busy responses;
//! * with no live server in the group the profile either waits (the caller
//!   re-snapshots after `recheck_after_ms` and calls again with the time
//!   already waited) or sends every tablet to the tablet server.
//!
//! It must never read a clock, sleep, do I/O or use a global random
//! generator: the same request and seed always give the same selection, which
//! is what lets the simulator run this exact code.

use std::collections::BTreeMap;

use crate::profile::{Profile, WhenNoServers};
use crate::rendezvous::{rank_keys, server_key, tablet_key};
use crate::rng::SplitMix64;

/// A scan server's identity (its address), as listed in the snapshot.
pub type ServerId = String;

/// First error backoff step: 100 ms.
pub const ERROR_BACKOFF_MS_BASE: u64 = 100;
/// Cap on the error backoff: 30 s.
pub const ERROR_BACKOFF_MS_MAX: u64 = 30_000;
/// Longest pause between two looks for a scan server while waiting for one.
pub const SERVERS_RECHECK_MS_MAX: u64 = 100;

/// How one attempt on a server ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The server's busy rule cancelled the queued scan: no work was done.
    Busy,
    /// The attempt failed otherwise (connection, server error, timeout).
    Error,
}

/// One past attempt for a tablet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The server tried.
    pub server: ServerId,
    /// How it ended.
    pub outcome: AttemptOutcome,
}

/// Weight of the newest outcome in [`FirstPlanHeat`] (an EWMA over ~8 outcomes).
pub const FIRST_PLAN_HEAT_WEIGHT: f64 = 0.125;

/// The caller's memory of how often its recent first-plan attempts on one
/// tablet came back busy: an exponentially weighted fraction in [0, 1].
///
/// The caller records one outcome per read that used plan 0
/// ([`Dispatch::plan`] == 0): busy if any batch of that session came back
/// busy, not busy once its first batch was served. It learns only from
/// first-plan attempts, so skipped reads do not move it; the profile's
/// `first_plan_skip_max` keeps some reads probing. Fixed size, no clock.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FirstPlanHeat {
    busy_fraction: f64,
}

impl FirstPlanHeat {
    /// Records one first-plan outcome.
    pub fn record(&mut self, busy: bool) {
        let x = if busy { 1.0 } else { 0.0 };
        self.busy_fraction += FIRST_PLAN_HEAT_WEIGHT * (x - self.busy_fraction);
    }

    /// The weighted fraction of recent first-plan attempts that were busy.
    pub fn busy_fraction(&self) -> f64 {
        self.busy_fraction
    }
}

/// A tablet of the request and its attempt history, oldest first.
#[derive(Debug, Clone, Copy)]
pub struct TabletAttempts<'a> {
    /// The tablet's id (any stable bytes, e.g. table id and end row).
    pub tablet: &'a [u8],
    /// Attempts already made for this tablet in this read.
    pub attempts: &'a [Attempt],
    /// The caller's first-plan heat for this tablet (default: cold).
    pub heat: FirstPlanHeat,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct GroupServers {
    servers: Vec<ServerId>,
    keys: Vec<u64>,
}

/// Live scan servers by group at one moment. Servers are kept sorted and unique.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerSnapshot {
    groups: BTreeMap<String, GroupServers>,
}

impl ServerSnapshot {
    /// An empty snapshot (no live scan server).
    pub fn new() -> Self {
        ServerSnapshot::default()
    }

    /// A snapshot of one group.
    pub fn with_group<I, S>(group: &str, servers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<ServerId>,
    {
        let mut snap = ServerSnapshot::new();
        for s in servers {
            snap.insert(group, s);
        }
        snap
    }

    /// Adds a live server to a group (no effect if already present).
    pub fn insert(&mut self, group: &str, server: impl Into<ServerId>) {
        let server = server.into();
        let g = self.groups.entry(group.to_string()).or_default();
        if let Err(at) = g.servers.binary_search(&server) {
            g.keys.insert(at, server_key(&server));
            g.servers.insert(at, server);
        }
    }

    /// Removes a server from a group (no effect if absent).
    pub fn remove(&mut self, group: &str, server: &str) {
        if let Some(g) = self.groups.get_mut(group) {
            if let Ok(at) = g.servers.binary_search_by(|s| s.as_str().cmp(server)) {
                g.servers.remove(at);
                g.keys.remove(at);
            }
        }
    }

    /// The live servers of `group`, sorted; empty if the group is unknown.
    pub fn group(&self, group: &str) -> &[ServerId] {
        self.groups.get(group).map_or(&[], |g| &g.servers)
    }

    fn group_servers(&self, group: &str) -> Option<&GroupServers> {
        self.groups.get(group).filter(|g| !g.servers.is_empty())
    }
}

/// Everything [`select`] decides from.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The read's tablets with their attempt histories; at least one.
    pub tablets: &'a [TabletAttempts<'a>],
    /// Live scan servers at the time of the call.
    pub servers: &'a ServerSnapshot,
    /// The profile this read uses.
    pub profile: &'a Profile,
    /// How long this read has already waited for a scan server to appear.
    pub waited_for_servers_ms: u64,
    /// Randomness for this call; callers pass a fresh value per call.
    pub seed: u64,
}

/// Where one tablet's attempt goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// This scan server.
    ScanServer(ServerId),
    /// The tablet server hosting the tablet (no busy timeout there).
    TabletServer,
}

/// A decision to send the attempt now (or after `delay_ms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch {
    /// One target per request tablet, in request order.
    pub targets: Vec<Target>,
    /// Zero-based attempt number (largest attempt count over the tablets).
    pub attempt: u32,
    /// Index of the attempt plan used.
    pub plan: usize,
    /// Busy timeout to send with scan-server targets, in ms (at least 1).
    pub busy_timeout_ms: u64,
    /// How long to wait before sending, in ms: 0 unless the last attempt of
    /// some tablet was an error.
    pub delay_ms: u64,
    /// True if a fresh read skipped the first plan because of its heat.
    pub first_plan_skipped: bool,
}

/// The result of [`select`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Send the attempt.
    Dispatch(Dispatch),
    /// No scan server of the group is live and the profile waits: take a new
    /// snapshot after this long and call again with the time waited.
    WaitForServers {
        /// Pause before the next look, in ms.
        recheck_after_ms: u64,
    },
}

/// Why [`select`] could not choose.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// The request named no tablet.
    #[error("select called with no tablets")]
    NoTablets,
    /// The profile waits for servers and the wait is over.
    #[error(
        "no scan server in group {group:?} after waiting {waited_ms} ms (limit {limit_ms} ms)"
    )]
    NoScanServers {
        /// The group waited for.
        group: String,
        /// How long the read waited.
        waited_ms: u64,
        /// The profile's `wait_for_servers_ms`.
        limit_ms: u64,
    },
}

/// Chooses the servers, busy timeout and delay for one attempt. Pure.
pub fn select(req: &Request<'_>) -> Result<Selection, SelectError> {
    if req.tablets.is_empty() {
        return Err(SelectError::NoTablets);
    }
    let profile = req.profile;
    let first_plan_skipped = skip_first_plan(req);
    let attempt = req
        .tablets
        .iter()
        .map(|t| u32::try_from(t.attempts.len()).unwrap_or(u32::MAX))
        .max()
        .unwrap_or(0)
        .max(u32::from(first_plan_skipped));
    let plan_index = profile.plan_index(attempt);
    let plan = &profile.attempts[plan_index];
    let busy_timeout_ms = profile.busy_timeout_ms(attempt);
    let delay_ms = delay_for(req.tablets, req.seed);

    let Some(group) = req.servers.group_servers(&profile.group) else {
        return match profile.when_no_servers {
            WhenNoServers::TabletServer => Ok(Selection::Dispatch(Dispatch {
                targets: vec![Target::TabletServer; req.tablets.len()],
                attempt,
                plan: plan_index,
                busy_timeout_ms,
                delay_ms,
                first_plan_skipped,
            })),
            WhenNoServers::Wait {
                wait_for_servers_ms,
            } => {
                if req.waited_for_servers_ms >= wait_for_servers_ms {
                    Err(SelectError::NoScanServers {
                        group: profile.group.clone(),
                        waited_ms: req.waited_for_servers_ms,
                        limit_ms: wait_for_servers_ms,
                    })
                } else {
                    let left = wait_for_servers_ms - req.waited_for_servers_ms;
                    Ok(Selection::WaitForServers {
                        recheck_after_ms: left.min(SERVERS_RECHECK_MS_MAX),
                    })
                }
            }
        };
    };

    let n = plan.servers.resolve(group.servers.len());
    let mut rng = SplitMix64::new(req.seed);
    let mut tried = vec![0u32; group.servers.len()];
    let targets = req
        .tablets
        .iter()
        .map(|t| {
            tried.iter_mut().for_each(|c| *c = 0);
            for a in t.attempts {
                if let Ok(i) = group.servers.binary_search(&a.server) {
                    tried[i] = tried[i].saturating_add(1);
                }
            }
            let ranked = rank_keys(tablet_key(t.tablet, &plan.salt), &group.keys);
            let chosen = pick(&mut rng, &ranked, n, &tried);
            Target::ScanServer(group.servers[chosen].clone())
        })
        .collect();
    Ok(Selection::Dispatch(Dispatch {
        targets,
        attempt,
        plan: plan_index,
        busy_timeout_ms,
        delay_ms,
        first_plan_skipped,
    }))
}

/// A fresh read (no attempts on any tablet) skips the first plan with
/// probability min(heat, `first_plan_skip_max`), using the hottest tablet.
/// Draws from its own stream, and not at all when skipping is off, so
/// profiles without it choose exactly as before.
fn skip_first_plan(req: &Request<'_>) -> bool {
    let max = req.profile.first_plan_skip_max;
    if max <= 0.0 || req.profile.attempts.len() < 2 {
        return false;
    }
    if req.tablets.iter().any(|t| !t.attempts.is_empty()) {
        return false;
    }
    let heat = req
        .tablets
        .iter()
        .map(|t| t.heat.busy_fraction())
        .fold(0.0, f64::max);
    let p = heat.min(max);
    if p <= 0.0 {
        return false;
    }
    let mut rng = SplitMix64::new(req.seed ^ 0xbb67_ae85_84ca_a73b);
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) < p
}

/// Uniform among untried candidates; else among the next `n` untried servers
/// by rank; else among the least-tried candidates.
fn pick(rng: &mut SplitMix64, ranked: &[usize], n: usize, tried: &[u32]) -> usize {
    let (candidates, rest) = ranked.split_at(n);
    let untried: Vec<usize> = candidates
        .iter()
        .copied()
        .filter(|&i| tried[i] == 0)
        .collect();
    if !untried.is_empty() {
        return untried[rng.below(untried.len() as u64) as usize];
    }
    let wider: Vec<usize> = rest
        .iter()
        .copied()
        .filter(|&i| tried[i] == 0)
        .take(n)
        .collect();
    if !wider.is_empty() {
        return wider[rng.below(wider.len() as u64) as usize];
    }
    let least = candidates.iter().map(|&i| tried[i]).min().unwrap_or(0);
    let reuse: Vec<usize> = candidates
        .iter()
        .copied()
        .filter(|&i| tried[i] == least)
        .collect();
    reuse[rng.below(reuse.len() as u64) as usize]
}

fn delay_for(tablets: &[TabletAttempts<'_>], seed: u64) -> u64 {
    let errors = tablets
        .iter()
        .filter(|t| t.attempts.last().map(|a| a.outcome) == Some(AttemptOutcome::Error))
        .map(|t| {
            t.attempts
                .iter()
                .filter(|a| a.outcome == AttemptOutcome::Error)
                .count()
        })
        .max()
        .unwrap_or(0);
    error_backoff_ms(u32::try_from(errors).unwrap_or(u32::MAX), seed)
}

/// Backoff before retrying after `errors` errors: base =
/// min(30 s, 100 ms·2^(errors−1)), then "equal jitter": uniform in
/// [base/2, base]. Zero errors give zero.
pub fn error_backoff_ms(errors: u32, seed: u64) -> u64 {
    if errors == 0 {
        return 0;
    }
    let shift = errors - 1;
    let base = if shift >= 20 {
        ERROR_BACKOFF_MS_MAX
    } else {
        (ERROR_BACKOFF_MS_BASE << shift).min(ERROR_BACKOFF_MS_MAX)
    };
    let half = base / 2;
    let mut rng = SplitMix64::new(seed ^ 0x6a09_e667_f3bc_c908);
    half + rng.below(base - half + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Profiles, ServerCount};
    use crate::rendezvous::rank;
    use std::collections::BTreeSet;

    fn servers(n: usize) -> ServerSnapshot {
        ServerSnapshot::with_group("default", (0..n).map(|i| format!("ss{i:02}")))
    }

    fn profiles(body: &str) -> Profiles {
        Profiles::from_toml_str(&format!("default = \"p\"\n[profiles.p]\n{body}\n")).unwrap()
    }

    fn busy(server: &str) -> Attempt {
        Attempt {
            server: server.into(),
            outcome: AttemptOutcome::Busy,
        }
    }

    fn error(server: &str) -> Attempt {
        Attempt {
            server: server.into(),
            outcome: AttemptOutcome::Error,
        }
    }

    fn dispatch(
        profile: &Profile,
        snap: &ServerSnapshot,
        tablet: &[u8],
        attempts: &[Attempt],
        seed: u64,
    ) -> Dispatch {
        let t = [TabletAttempts {
            tablet,
            attempts,
            heat: FirstPlanHeat::default(),
        }];
        match select(&Request {
            tablets: &t,
            servers: snap,
            profile,
            waited_for_servers_ms: 0,
            seed,
        })
        .unwrap()
        {
            Selection::Dispatch(d) => d,
            other => panic!("{other:?}"),
        }
    }

    fn server_of(d: &Dispatch) -> &str {
        match &d.targets[0] {
            Target::ScanServer(s) => s,
            Target::TabletServer => panic!("tablet server"),
        }
    }

    fn top(tablet: &[u8], salt: &str, snap: &ServerSnapshot, n: usize) -> Vec<String> {
        let g = snap.group("default");
        rank(tablet, salt, g)[..n]
            .iter()
            .map(|&i| g[i].clone())
            .collect()
    }

    #[test]
    fn escalation_sequence_through_select() {
        let p = Profiles::accumulo_default();
        let profile = p.default_profile();
        let snap = servers(23);
        let mut history = Vec::new();
        let mut timeouts = Vec::new();
        let mut plans = Vec::new();
        for i in 0..10u64 {
            let d = dispatch(profile, &snap, b"t", &history, i);
            timeouts.push(d.busy_timeout_ms);
            plans.push(d.plan);
            assert_eq!(d.delay_ms, 0, "busy never delays");
            history.push(busy(server_of(&d)));
        }
        assert_eq!(
            timeouts,
            vec![33, 33, 33, 264, 2112, 16896, 135168, 300000, 300000, 300000]
        );
        assert_eq!(plans, vec![0, 1, 2, 2, 2, 2, 2, 2, 2, 2]);
    }

    #[test]
    fn first_attempt_is_uniform_over_the_top_n() {
        let p = profiles("attempts = [ { servers = 3, busy_timeout_ms = 5, salt = \"one\" } ]");
        let snap = servers(23);
        let expect: BTreeSet<String> = top(b"tab", "one", &snap, 3).into_iter().collect();
        let mut counts = BTreeMap::new();
        for seed in 0..3000 {
            let d = dispatch(p.default_profile(), &snap, b"tab", &[], seed);
            *counts.entry(server_of(&d).to_string()).or_insert(0u32) += 1;
        }
        assert_eq!(counts.keys().cloned().collect::<BTreeSet<_>>(), expect);
        for &c in counts.values() {
            assert!((900..1100).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn tried_servers_are_excluded_then_widened_then_reused() {
        let p = profiles("attempts = [ { servers = 3, busy_timeout_ms = 5 } ]");
        let profile = p.default_profile();
        let snap = servers(10);
        let ranked = top(b"x", "", &snap, 10);
        // Two of the top three tried: the third is the only choice.
        let h = [busy(&ranked[0]), busy(&ranked[2])];
        for seed in 0..50 {
            assert_eq!(
                server_of(&dispatch(profile, &snap, b"x", &h, seed)),
                ranked[1]
            );
        }
        // All three tried: widen to the next three untried by rank.
        let h = [
            busy(&ranked[0]),
            busy(&ranked[1]),
            error(&ranked[2]),
            busy(&ranked[4]),
        ];
        let seen: BTreeSet<String> = (0..200)
            .map(|s| server_of(&dispatch(profile, &snap, b"x", &h, s)).to_string())
            .collect();
        let want: BTreeSet<String> = [&ranked[3], &ranked[5], &ranked[6]]
            .into_iter()
            .cloned()
            .collect();
        assert_eq!(seen, want);
        // Every live server tried: reuse the least-tried candidate.
        let mut h: Vec<Attempt> = ranked.iter().map(|s| busy(s)).collect();
        h.push(busy(&ranked[0]));
        h.push(busy(&ranked[1]));
        for seed in 0..50 {
            assert_eq!(
                server_of(&dispatch(profile, &snap, b"x", &h, seed)),
                ranked[2]
            );
        }
        // Attempts on servers no longer live are ignored for exclusion.
        let h = [busy("gone:1"), busy(&ranked[0]), busy(&ranked[1])];
        assert_eq!(server_of(&dispatch(profile, &snap, b"x", &h, 1)), ranked[2]);
    }

    #[test]
    fn widening_plan_excludes_tried_servers() {
        let p = Profiles::accumulo_2_1(ServerCount::Count(1), 33).unwrap();
        let profile = p.default_profile();
        let snap = servers(3);
        let first = server_of(&dispatch(profile, &snap, b"t", &[], 9)).to_string();
        for seed in 0..100 {
            let d = dispatch(profile, &snap, b"t", &[busy(&first)], seed);
            assert_ne!(server_of(&d), first);
            assert_eq!(d.plan, 1);
        }
    }

    #[test]
    fn percent_plans_round_in_select() {
        let p = profiles("attempts = [ { servers = \"50%\", busy_timeout_ms = 5 } ]");
        let snap = servers(3); // 1.5 -> 2 candidates
        let seen: BTreeSet<String> = (0..200)
            .map(|s| server_of(&dispatch(p.default_profile(), &snap, b"q", &[], s)).to_string())
            .collect();
        assert_eq!(seen, top(b"q", "", &snap, 2).into_iter().collect());
        let p = profiles("attempts = [ { servers = \"1%\", busy_timeout_ms = 5 } ]");
        let seen: BTreeSet<String> = (0..100)
            .map(|s| {
                server_of(&dispatch(p.default_profile(), &servers(23), b"q", &[], s)).to_string()
            })
            .collect();
        assert_eq!(seen.len(), 1, "1% of 23 rounds up to one server");
    }

    #[test]
    fn attempt_number_is_the_largest_over_tablets() {
        let p = Profiles::accumulo_default();
        let snap = servers(23);
        let h = [busy("ss01"), busy("ss02"), busy("ss03"), busy("ss04")];
        let tablets = [
            TabletAttempts {
                tablet: b"a",
                attempts: &[],
                heat: FirstPlanHeat::default(),
            },
            TabletAttempts {
                tablet: b"b",
                attempts: &h,
                heat: FirstPlanHeat::default(),
            },
        ];
        let sel = select(&Request {
            tablets: &tablets,
            servers: &snap,
            profile: p.default_profile(),
            waited_for_servers_ms: 0,
            seed: 3,
        })
        .unwrap();
        let Selection::Dispatch(d) = sel else {
            panic!()
        };
        assert_eq!(d.attempt, 4);
        assert_eq!(d.plan, 2);
        assert_eq!(d.busy_timeout_ms, 2112);
        assert_eq!(d.targets.len(), 2);
    }

    #[test]
    fn no_servers_waits_or_falls_back() {
        let empty = ServerSnapshot::new();
        let t = [TabletAttempts {
            tablet: b"t",
            attempts: &[],
            heat: FirstPlanHeat::default(),
        }];
        let wait = profiles(
            "wait_for_servers_ms = 250\nattempts = [ { servers = 3, busy_timeout_ms = 5 } ]",
        );
        let req = |waited| Request {
            tablets: &t,
            servers: &empty,
            profile: wait.default_profile(),
            waited_for_servers_ms: waited,
            seed: 0,
        };
        assert_eq!(
            select(&req(0)),
            Ok(Selection::WaitForServers {
                recheck_after_ms: 100
            })
        );
        assert_eq!(
            select(&req(200)),
            Ok(Selection::WaitForServers {
                recheck_after_ms: 50
            })
        );
        assert_eq!(
            select(&req(250)),
            Err(SelectError::NoScanServers {
                group: "default".into(),
                waited_ms: 250,
                limit_ms: 250
            })
        );
        // A snapshot with servers only in another group is still "no servers".
        let other = ServerSnapshot::with_group("analytics", ["a1"]);
        let r = Request {
            servers: &other,
            ..req(0)
        };
        assert!(matches!(select(&r), Ok(Selection::WaitForServers { .. })));

        let fallback = Profiles::accumulo_2_1(ServerCount::Count(3), 33).unwrap();
        let sel = select(&Request {
            tablets: &t,
            servers: &empty,
            profile: fallback.default_profile(),
            waited_for_servers_ms: 0,
            seed: 0,
        })
        .unwrap();
        let Selection::Dispatch(d) = sel else {
            panic!()
        };
        assert_eq!(d.targets, vec![Target::TabletServer]);
        assert_eq!(
            select(&Request {
                tablets: &[],
                ..req(0)
            }),
            Err(SelectError::NoTablets)
        );
    }

    #[test]
    fn error_backoff_is_jittered_and_bounded() {
        assert_eq!(error_backoff_ms(0, 1), 0);
        for errors in 1..=40u32 {
            let base = if errors > 20 {
                ERROR_BACKOFF_MS_MAX
            } else {
                (100u64 << (errors - 1)).min(ERROR_BACKOFF_MS_MAX)
            };
            let values: BTreeSet<u64> = (0..64).map(|s| error_backoff_ms(errors, s)).collect();
            assert!(values.len() > 10, "errors={errors}: no jitter {values:?}");
            for &v in &values {
                assert!(
                    v >= base / 2 && v <= base,
                    "errors={errors} v={v} base={base}"
                );
                assert!(v <= ERROR_BACKOFF_MS_MAX);
            }
        }
        assert!(error_backoff_ms(u32::MAX, 7) <= ERROR_BACKOFF_MS_MAX);
    }

    #[test]
    fn delay_only_after_an_error() {
        let p = Profiles::accumulo_default();
        let profile = p.default_profile();
        let snap = servers(23);
        assert_eq!(dispatch(profile, &snap, b"t", &[], 1).delay_ms, 0);
        let busies: Vec<Attempt> = (0..6).map(|i| busy(&format!("ss{i:02}"))).collect();
        for seed in 0..20 {
            assert_eq!(dispatch(profile, &snap, b"t", &busies, seed).delay_ms, 0);
        }
        let d = dispatch(profile, &snap, b"t", &[error("ss01")], 5);
        assert!((50..=100).contains(&d.delay_ms), "{}", d.delay_ms);
        let d = dispatch(profile, &snap, b"t", &[error("ss01"), error("ss02")], 5);
        assert!((100..=200).contains(&d.delay_ms), "{}", d.delay_ms);
        // The server answered after the error: a busy, so no delay.
        let d = dispatch(profile, &snap, b"t", &[error("ss01"), busy("ss02")], 5);
        assert_eq!(d.delay_ms, 0);
        let d = dispatch(
            profile,
            &snap,
            b"t",
            &[error("ss01"), busy("ss02"), error("ss03")],
            5,
        );
        assert!((100..=200).contains(&d.delay_ms), "{}", d.delay_ms);
    }

    #[test]
    fn same_seed_same_choice() {
        let p = Profiles::builtin();
        let snap = servers(23);
        for seed in 0..100 {
            assert_eq!(
                dispatch(p.default_profile(), &snap, b"t", &[busy("ss03")], seed),
                dispatch(p.default_profile(), &snap, b"t", &[busy("ss03")], seed)
            );
        }
    }

    #[test]
    fn hot_first_plan_is_skipped_up_to_the_cap() {
        let p = profiles(
            "first_plan_skip_max = 0.9\nattempts = [ { servers = 3, busy_timeout_ms = 2 }, { servers = \"100%\", busy_timeout_ms = 33 } ]",
        );
        let profile = p.default_profile();
        let snap = servers(23);
        let mut heat = FirstPlanHeat::default();
        let run = |heat: FirstPlanHeat, attempts: &[Attempt]| {
            let mut skipped = 0;
            for seed in 0..2000u64 {
                let t = [TabletAttempts {
                    tablet: b"hot",
                    attempts,
                    heat,
                }];
                let Selection::Dispatch(d) = select(&Request {
                    tablets: &t,
                    servers: &snap,
                    profile,
                    waited_for_servers_ms: 0,
                    seed,
                })
                .unwrap() else {
                    panic!()
                };
                if d.first_plan_skipped {
                    skipped += 1;
                    assert_eq!((d.attempt, d.plan, d.busy_timeout_ms), (1, 1, 33));
                } else {
                    assert_eq!(d.plan, usize::from(!attempts.is_empty()));
                }
            }
            skipped
        };
        assert_eq!(run(heat, &[]), 0, "cold tablets never skip");
        for _ in 0..200 {
            heat.record(true);
        }
        assert!(heat.busy_fraction() > 0.99);
        let skipped = run(heat, &[]);
        assert!((1700..1900).contains(&skipped), "capped at 0.9: {skipped}");
        assert_eq!(run(heat, &[busy("ss01")]), 0, "only fresh reads skip");
        for _ in 0..6 {
            heat.record(false);
        }
        let skipped = run(heat, &[]);
        assert!((700..1000).contains(&skipped), "heat decays: {skipped}");
        // Without the option (Accumulo's behaviour) nothing is skipped.
        let acc = Profiles::accumulo_default();
        let t = [TabletAttempts {
            tablet: b"hot",
            attempts: &[],
            heat,
        }];
        let Selection::Dispatch(d) = select(&Request {
            tablets: &t,
            servers: &snap,
            profile: acc.default_profile(),
            waited_for_servers_ms: 0,
            seed: 1,
        })
        .unwrap() else {
            panic!()
        };
        assert!(!d.first_plan_skipped);
        assert_eq!(d.plan, 0);
    }

    #[test]
    fn snapshot_insert_remove() {
        let mut s = ServerSnapshot::with_group("g", ["b", "a", "b"]);
        assert_eq!(s.group("g"), ["a".to_string(), "b".to_string()]);
        s.remove("g", "a");
        s.remove("g", "zz");
        s.remove("nope", "b");
        assert_eq!(s.group("g"), ["b".to_string()]);
        assert!(s.group("h").is_empty());
    }
}
