//! Dispatch profiles: the TOML that says, per named profile, which scan-server
//! group serves eventual reads, what to do when that group has no live server,
//! and the attempt plans (how many servers, which busy timeout, which hashing
//! salt) with the escalation of the busy timeout after the last plan.
//!
//! This module owns parsing, every limit on those fields, and validation into
//! typed errors that name the profile and the field. It must never pick a
//! server, read a clock or talk to the network. [`Profiles::load`] is the
//! crate's only I/O (one file read, at the edge); everything else is pure and
//! [`Profiles::from_toml_str`] is what tests and the simulator use.
//!
//! File shape:
//!
//! ```toml
//! default = "fast"                 # the one default profile
//! [profiles.fast]
//! group = "default"                # scan-server group (default "default")
//! when_no_servers = "wait"         # or "tablet-server" (default "wait")
//! wait_for_servers_ms = 30000      # only with "wait" (default 30000)
//! busy_timeout_multiplier = 8      # default 8
//! busy_timeout_max_ms = 300000     # default 300000
//! attempts = [ { servers = 3, busy_timeout_ms = 5, salt = "one" },
//!              { servers = "100%", busy_timeout_ms = 33 } ]
//! hedge = { after_ms = 10 }        # optional; or { after_percentile = 95.0, min_ms = 2 }
//! first_plan_skip_max = 0.9        # optional, default 0 (never skip; see select)
//! ```
//!
//! The file has a single top-level `default` key, so "more than one default
//! profile" cannot be written: a second `default` key is a TOML duplicate-key
//! error ([`ProfileError::Toml`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// Largest busy timeout a plan or `busy_timeout_max_ms` may name: one hour.
pub const BUSY_TIMEOUT_MS_MAX: u64 = 3_600_000;
/// Default cap on the escalated busy timeout (Accumulo's `maxBusyTimeout` of 5 m).
pub const BUSY_TIMEOUT_MAX_MS_DEFAULT: u64 = 300_000;
/// Default factor applied to the last plan's busy timeout per attempt past it.
pub const BUSY_TIMEOUT_MULTIPLIER_DEFAULT: f64 = 8.0;
/// Largest accepted `busy_timeout_multiplier`.
pub const BUSY_TIMEOUT_MULTIPLIER_MAX: f64 = 1_000.0;
/// Default time to wait for a scan server of the group to appear.
pub const WAIT_FOR_SERVERS_MS_DEFAULT: u64 = 30_000;
/// Largest accepted `wait_for_servers_ms`: one day.
pub const WAIT_FOR_SERVERS_MS_MAX: u64 = 86_400_000;
/// Most attempt plans one profile may list.
pub const ATTEMPTS_MAX: usize = 64;
/// Largest accepted hedge delay (`after_ms`, `min_ms`): one minute.
pub const HEDGE_AFTER_MS_MAX: u64 = 60_000;
/// Upper limit on `first_plan_skip_max`: some fresh reads always try the
/// first plan, so the caller's heat estimate keeps learning.
pub const FIRST_PLAN_SKIP_LIMIT: f64 = 0.95;
/// Scan-server group used when a profile names none.
pub const GROUP_DEFAULT: &str = "default";

/// The tablinum built-in profiles, as TOML (what [`Profiles::builtin`] parses).
///
/// `default`: the first attempt goes to one of the tablet's top 3 rendezvous
/// servers (cache affinity) with a 2 ms busy timeout, so a saturated first
/// set sheds queued work at once instead of queueing it; the second attempt
/// goes to any live server of the group with 33 ms; past that the timeout
/// escalates ×8 up to 5 minutes. `first_plan_skip_max = 0.9`: a client whose
/// recent first attempts on a tablet came back busy sends up to 90 % of its
/// fresh reads of that tablet straight to the second plan, so a hot tablet
/// does not pay a bounce per read (a cold tablet never skips). With no live
/// scan server it waits up to 30 s rather than loading the tablet servers
/// (Accumulo #4814, thundering herd). The numbers come from the simulated
/// report grids in `tablinum-sim` (see its crate docs).
pub const BUILTIN_PROFILES_TOML: &str = r#"
default = "default"

[profiles.default]
group = "default"
when_no_servers = "wait"
wait_for_servers_ms = 30000
busy_timeout_multiplier = 8
busy_timeout_max_ms = 300000
first_plan_skip_max = 0.9
attempts = [
  { servers = 3, busy_timeout_ms = 2 },
  { servers = "100%", busy_timeout_ms = 33 },
]
"#;

/// How many servers an attempt plan may choose among.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServerCount {
    /// At most this many servers (at least 1), capped by the live count.
    Count(u32),
    /// This percentage of the live servers, in (0, 100], rounded half up, at least 1.
    Percent(f64),
}

impl ServerCount {
    /// Number of candidate servers when `live` servers of the group are up.
    ///
    /// Returns 0 only when `live` is 0; otherwise a value in `1..=live`.
    pub fn resolve(&self, live: usize) -> usize {
        if live == 0 {
            return 0;
        }
        match *self {
            ServerCount::Count(n) => (n as usize).clamp(1, live),
            ServerCount::Percent(p) => {
                let exact = p * live as f64 / 100.0;
                let rounded = (exact + 0.5).floor() as usize;
                rounded.clamp(1, live)
            }
        }
    }
}

impl fmt::Display for ServerCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerCount::Count(n) => write!(f, "{n}"),
            ServerCount::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// One attempt plan: the candidate set and busy timeout for one attempt number.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptPlan {
    /// How many top rendezvous servers form the candidate set.
    pub servers: ServerCount,
    /// Busy timeout sent with this attempt, at least 1 ms.
    pub busy_timeout_ms: u64,
    /// Salt mixed into the rendezvous hash; plans sharing a salt have nested sets.
    pub salt: String,
}

/// What to do when the profile's group has no live scan server.
#[derive(Debug, Clone, PartialEq)]
pub enum WhenNoServers {
    /// Wait for a server of the group to appear, up to this long, then fail.
    Wait {
        /// Longest total wait for a server of the group, in milliseconds.
        wait_for_servers_ms: u64,
    },
    /// Send the read to the tablet server (the write tier).
    TabletServer,
}

/// When to send a hedged second request for point reads and small scans.
#[derive(Debug, Clone, PartialEq)]
pub enum Hedge {
    /// Hedge after a fixed delay.
    AfterMs {
        /// Delay before the hedge, in milliseconds (at least 1).
        after_ms: u64,
    },
    /// Hedge after the observed latency percentile, never sooner than `min_ms`.
    AfterPercentile {
        /// Percentile of recent latencies, in (0, 100).
        percentile: f64,
        /// Floor on the hedge delay, in milliseconds.
        min_ms: u64,
    },
}

/// One validated dispatch profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// The profile's name (its key under `[profiles]`).
    pub name: String,
    /// Scan-server group that serves this profile's reads.
    pub group: String,
    /// Behaviour when the group has no live server.
    pub when_no_servers: WhenNoServers,
    /// Factor applied to the last plan's busy timeout per attempt past it (≥ 1).
    pub busy_timeout_multiplier: f64,
    /// Cap on the escalated busy timeout, in milliseconds.
    pub busy_timeout_max_ms: u64,
    /// Attempt plans, first attempt first; never empty.
    pub attempts: Vec<AttemptPlan>,
    /// Optional hedging of small reads.
    pub hedge: Option<Hedge>,
    /// Largest probability of skipping the first plan for a fresh read of a
    /// tablet whose recent first attempts came back busy (see
    /// [`crate::select::FirstPlanHeat`]); 0 never skips (Accumulo's behaviour).
    pub first_plan_skip_max: f64,
}

impl Profile {
    /// Index of the plan used for zero-based `attempt`: `min(attempt, last)`.
    pub fn plan_index(&self, attempt: u32) -> usize {
        (attempt as usize).min(self.attempts.len() - 1)
    }

    /// The plan used for zero-based `attempt`.
    pub fn plan(&self, attempt: u32) -> &AttemptPlan {
        &self.attempts[self.plan_index(attempt)]
    }

    /// Busy timeout for zero-based `attempt`.
    ///
    /// Within the plans it is the plan's own timeout. Past the last plan it is
    /// `last × multiplier^(attempt − plans + 1)`, rounded down and capped at
    /// `busy_timeout_max_ms`: Accumulo's default gives 33, 33, 33, 264, 2112,
    /// 16896, 135168, 300000, 300000, …
    pub fn busy_timeout_ms(&self, attempt: u32) -> u64 {
        let plans = self.attempts.len();
        let index = attempt as usize;
        if index < plans {
            return self.attempts[index].busy_timeout_ms;
        }
        let last = self.attempts[plans - 1].busy_timeout_ms as f64;
        let steps = (index - plans + 1).min(i32::MAX as usize) as i32;
        let escalated = last * self.busy_timeout_multiplier.powi(steps);
        let capped = escalated.min(self.busy_timeout_max_ms as f64);
        (capped as u64).max(1)
    }
}

/// Everything wrong a profiles file or a profile lookup can be.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The profiles file could not be read.
    #[error("cannot read profiles file {}: {source}", path.display())]
    Read {
        /// The file asked for.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not valid TOML or does not have the profiles shape.
    #[error("malformed profiles TOML{}: {message}", fmt_location(*line, *column))]
    Toml {
        /// 1-based line of the problem, when the parser knows it.
        line: Option<usize>,
        /// 1-based column (in characters) of the problem, when known.
        column: Option<usize>,
        /// The parser's message.
        message: String,
    },
    /// No `[profiles.NAME]` table at all.
    #[error("no profiles defined: expected at least one [profiles.NAME] table")]
    NoProfiles,
    /// The top-level `default` key is missing.
    #[error("no default profile: set `default = \"NAME\"` at the top level (profiles: {known:?})")]
    MissingDefault {
        /// The profiles that are defined.
        known: Vec<String>,
    },
    /// `default` names a profile that is not defined.
    #[error("default profile {default:?} is not defined (profiles: {known:?})")]
    UnknownDefault {
        /// The name given as default.
        default: String,
        /// The profiles that are defined.
        known: Vec<String>,
    },
    /// A lookup asked for a profile that is not defined.
    #[error("unknown profile {name:?} (profiles: {known:?})")]
    UnknownProfile {
        /// The name asked for.
        name: String,
        /// The profiles that are defined.
        known: Vec<String>,
    },
    /// A profile's `group` is the empty string.
    #[error("profile {profile:?}: group is empty")]
    EmptyGroup {
        /// The profile.
        profile: String,
    },
    /// A profile lists no attempt plan.
    #[error("profile {profile:?}: attempts is empty; at least one attempt plan is required")]
    EmptyAttempts {
        /// The profile.
        profile: String,
    },
    /// A profile lists more attempt plans than [`ATTEMPTS_MAX`].
    #[error("profile {profile:?}: {count} attempt plans exceed the limit of {max}")]
    TooManyAttempts {
        /// The profile.
        profile: String,
        /// Plans listed.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// `attempts[i].servers` is zero, negative, not a count or an out-of-range percentage.
    #[error("profile {profile:?}: attempts[{attempt}].servers = {value}: {reason}")]
    BadServers {
        /// The profile.
        profile: String,
        /// Zero-based index of the plan.
        attempt: usize,
        /// The value as written.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A busy timeout field is 0 ms.
    #[error("profile {profile:?}: {field} = 0 ms; a busy timeout must be at least 1 ms")]
    ZeroBusyTimeout {
        /// The profile.
        profile: String,
        /// The field, e.g. `attempts[1].busy_timeout_ms`.
        field: String,
    },
    /// A busy timeout field exceeds [`BUSY_TIMEOUT_MS_MAX`].
    #[error("profile {profile:?}: {field} = {value_ms} ms exceeds the limit of {max_ms} ms")]
    BusyTimeoutTooLarge {
        /// The profile.
        profile: String,
        /// The field, e.g. `attempts[0].busy_timeout_ms`.
        field: String,
        /// The value given.
        value_ms: u64,
        /// The limit.
        max_ms: u64,
    },
    /// `busy_timeout_max_ms` is below a plan's own busy timeout.
    #[error("profile {profile:?}: busy_timeout_max_ms = {max_ms} ms is below attempts[{attempt}].busy_timeout_ms = {value_ms} ms")]
    BusyTimeoutMaxBelowPlan {
        /// The profile.
        profile: String,
        /// The cap given.
        max_ms: u64,
        /// Zero-based index of the plan above the cap.
        attempt: usize,
        /// That plan's busy timeout.
        value_ms: u64,
    },
    /// `busy_timeout_multiplier` is below 1, above the limit or not finite.
    #[error("profile {profile:?}: busy_timeout_multiplier = {value} must be a finite number in [1, {max}]")]
    BadMultiplier {
        /// The profile.
        profile: String,
        /// The value given.
        value: f64,
        /// The limit, [`BUSY_TIMEOUT_MULTIPLIER_MAX`].
        max: f64,
    },
    /// `wait_for_servers_ms` was given with `when_no_servers = "tablet-server"`.
    #[error(
        "profile {profile:?}: wait_for_servers_ms is only allowed with when_no_servers = \"wait\""
    )]
    WaitWithoutWaiting {
        /// The profile.
        profile: String,
    },
    /// `wait_for_servers_ms` is 0 or above [`WAIT_FOR_SERVERS_MS_MAX`].
    #[error("profile {profile:?}: wait_for_servers_ms = {value_ms} must be in [1, {max_ms}] ms")]
    BadWaitForServers {
        /// The profile.
        profile: String,
        /// The value given.
        value_ms: u64,
        /// The limit.
        max_ms: u64,
    },
    /// `first_plan_skip_max` is outside [0, [`FIRST_PLAN_SKIP_LIMIT`]].
    #[error("profile {profile:?}: first_plan_skip_max = {value} must be in [0, {limit}]")]
    BadFirstPlanSkip {
        /// The profile.
        profile: String,
        /// The value given.
        value: f64,
        /// The limit.
        limit: f64,
    },
    /// `hedge.after_percentile` is outside the open interval (0, 100).
    #[error("profile {profile:?}: hedge.after_percentile = {value} is outside (0, 100)")]
    HedgePercentileOutOfRange {
        /// The profile.
        profile: String,
        /// The value given.
        value: f64,
    },
    /// The `hedge` table has a missing, conflicting or out-of-range field.
    #[error("profile {profile:?}: hedge.{field}: {reason}")]
    BadHedge {
        /// The profile.
        profile: String,
        /// The field at fault.
        field: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
}

fn fmt_location(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" at line {l}, column {c}"),
        (Some(l), None) => format!(" at line {l}"),
        _ => String::new(),
    }
}

/// A validated set of named profiles with exactly one default.
#[derive(Debug, Clone, PartialEq)]
pub struct Profiles {
    default: String,
    profiles: BTreeMap<String, Profile>,
}

impl Profiles {
    /// Parses and validates profiles from TOML text. Pure.
    pub fn from_toml_str(text: &str) -> Result<Profiles, ProfileError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
        raw.validate()
    }

    /// Reads a profiles file and parses it; the crate's only I/O.
    pub fn load(path: &Path) -> Result<Profiles, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Profiles::from_toml_str(&text)
    }

    /// The tablinum built-in profiles ([`BUILTIN_PROFILES_TOML`]).
    pub fn builtin() -> Profiles {
        Profiles::from_toml_str(BUILTIN_PROFILES_TOML)
            .expect("BUILTIN_PROFILES_TOML is valid (checked by a unit test)")
    }

    /// The selector setup of the seed report's experiments on Accumulo 2.1: a
    /// random server among the tablet's `initial` hashed servers with
    /// `busy_timeout_ms`; after a busy, a random server among all live ones
    /// with the same timeout; then ×8 up to 5 minutes; tablet-server fallback
    /// when no scan server is live (2.1's `timeToWaitForScanServers = 0s`).
    /// The single profile is named `accumulo-2.1` and is the default.
    pub fn accumulo_2_1(
        initial: ServerCount,
        busy_timeout_ms: u64,
    ) -> Result<Profiles, ProfileError> {
        let name = "accumulo-2.1".to_string();
        let raw = RawProfile {
            when_no_servers: Some(RawWhen::TabletServer),
            attempts: vec![
                RawPlan {
                    servers: RawServers::from(initial),
                    busy_timeout_ms,
                    salt: "one".into(),
                },
                RawPlan {
                    servers: RawServers::Text("100%".into()),
                    busy_timeout_ms,
                    salt: String::new(),
                },
            ],
            ..RawProfile::default()
        };
        RawFile {
            default: Some(name.clone()),
            profiles: BTreeMap::from([(name, raw)]),
        }
        .validate()
    }

    /// Accumulo's `PROFILES_DEFAULT` (2.1.0 to `main`): plans 3/33 ms salt
    /// "one", 13/33 ms salt "two", 100%/33 ms, ×8, capped at 5 minutes, with
    /// 2.1's tablet-server fallback. Named `accumulo-default`.
    pub fn accumulo_default() -> Profiles {
        let name = "accumulo-default".to_string();
        let plan = |servers: RawServers, salt: &str| RawPlan {
            servers,
            busy_timeout_ms: 33,
            salt: salt.into(),
        };
        let raw = RawProfile {
            when_no_servers: Some(RawWhen::TabletServer),
            attempts: vec![
                plan(RawServers::Count(3), "one"),
                plan(RawServers::Count(13), "two"),
                plan(RawServers::Text("100%".into()), ""),
            ],
            ..RawProfile::default()
        };
        RawFile {
            default: Some(name.clone()),
            profiles: BTreeMap::from([(name, raw)]),
        }
        .validate()
        .expect("Accumulo's default profile is valid")
    }

    /// The profile called `name`.
    pub fn get(&self, name: &str) -> Result<&Profile, ProfileError> {
        self.profiles
            .get(name)
            .ok_or_else(|| ProfileError::UnknownProfile {
                name: name.to_string(),
                known: self.names(),
            })
    }

    /// The default profile.
    pub fn default_profile(&self) -> &Profile {
        &self.profiles[&self.default]
    }

    /// Name of the default profile.
    pub fn default_name(&self) -> &str {
        &self.default
    }

    /// Names of all profiles, sorted.
    pub fn names(&self) -> Vec<String> {
        self.profiles.keys().cloned().collect()
    }
}

fn toml_error(text: &str, e: &toml::de::Error) -> ProfileError {
    let (line, column) = match e.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let before = text.get(..start).unwrap_or("");
            let line = before.matches('\n').count() + 1;
            let line_start = before.rfind('\n').map_or(0, |i| i + 1);
            let column = before[line_start..].chars().count() + 1;
            (Some(line), Some(column))
        }
        None => (None, None),
    };
    ProfileError::Toml {
        line,
        column,
        message: e.message().trim().to_string(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    default: Option<String>,
    #[serde(default)]
    profiles: BTreeMap<String, RawProfile>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    group: Option<String>,
    when_no_servers: Option<RawWhen>,
    wait_for_servers_ms: Option<u64>,
    busy_timeout_multiplier: Option<f64>,
    busy_timeout_max_ms: Option<u64>,
    #[serde(default)]
    attempts: Vec<RawPlan>,
    hedge: Option<RawHedge>,
    first_plan_skip_max: Option<f64>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "kebab-case")]
enum RawWhen {
    Wait,
    TabletServer,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    servers: RawServers,
    busy_timeout_ms: u64,
    #[serde(default)]
    salt: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHedge {
    after_ms: Option<u64>,
    after_percentile: Option<f64>,
    min_ms: Option<u64>,
}

/// `servers` as written: an integer, a string ("3" or "P%"), or (wrongly) a float.
enum RawServers {
    Count(i64),
    Text(String),
    Float(f64),
}

impl From<ServerCount> for RawServers {
    fn from(c: ServerCount) -> Self {
        match c {
            ServerCount::Count(n) => RawServers::Count(i64::from(n)),
            ServerCount::Percent(p) => RawServers::Text(format!("{p}%")),
        }
    }
}

impl fmt::Display for RawServers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RawServers::Count(n) => write!(f, "{n}"),
            RawServers::Text(s) => write!(f, "{s:?}"),
            RawServers::Float(x) => write!(f, "{x}"),
        }
    }
}

impl<'de> Deserialize<'de> for RawServers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawServers;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a server count (integer) or a percentage string like \"50%\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawServers, E> {
                Ok(RawServers::Count(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawServers, E> {
                Ok(RawServers::Count(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawServers, E> {
                Ok(RawServers::Float(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawServers, E> {
                Ok(RawServers::Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

impl RawServers {
    fn validate(&self, profile: &str, attempt: usize) -> Result<ServerCount, ProfileError> {
        let bad = |reason: &'static str| ProfileError::BadServers {
            profile: profile.to_string(),
            attempt,
            value: self.to_string(),
            reason,
        };
        let count = |n: i64| -> Result<ServerCount, ProfileError> {
            if n <= 0 {
                Err(bad("a server count must be at least 1"))
            } else {
                u32::try_from(n)
                    .map(ServerCount::Count)
                    .map_err(|_| bad("a server count must fit in 32 bits"))
            }
        };
        match self {
            RawServers::Count(n) => count(*n),
            RawServers::Float(_) => Err(bad(
                "must be an integer count or a percentage string like \"50%\"",
            )),
            RawServers::Text(s) => {
                let s = s.trim();
                if let Some(p) = s.strip_suffix('%') {
                    let p: f64 = p
                        .trim()
                        .parse()
                        .map_err(|_| bad("the percentage is not a number"))?;
                    if !p.is_finite() || p <= 0.0 {
                        Err(bad("a percentage must be above 0%"))
                    } else if p > 100.0 {
                        Err(bad("a percentage must be at most 100%"))
                    } else {
                        Ok(ServerCount::Percent(p))
                    }
                } else {
                    let n: i64 = s.parse().map_err(|_| {
                        bad("must be an integer count or a percentage string like \"50%\"")
                    })?;
                    count(n)
                }
            }
        }
    }
}

fn check_busy_timeout(profile: &str, field: String, value_ms: u64) -> Result<u64, ProfileError> {
    if value_ms == 0 {
        return Err(ProfileError::ZeroBusyTimeout {
            profile: profile.to_string(),
            field,
        });
    }
    if value_ms > BUSY_TIMEOUT_MS_MAX {
        return Err(ProfileError::BusyTimeoutTooLarge {
            profile: profile.to_string(),
            field,
            value_ms,
            max_ms: BUSY_TIMEOUT_MS_MAX,
        });
    }
    Ok(value_ms)
}

impl RawFile {
    fn validate(self) -> Result<Profiles, ProfileError> {
        if self.profiles.is_empty() {
            return Err(ProfileError::NoProfiles);
        }
        let known: Vec<String> = self.profiles.keys().cloned().collect();
        let default = self.default.ok_or_else(|| ProfileError::MissingDefault {
            known: known.clone(),
        })?;
        if !self.profiles.contains_key(&default) {
            return Err(ProfileError::UnknownDefault { default, known });
        }
        let mut profiles = BTreeMap::new();
        for (name, raw) in self.profiles {
            let profile = raw.validate(&name)?;
            profiles.insert(name, profile);
        }
        Ok(Profiles { default, profiles })
    }
}

impl RawProfile {
    fn validate(self, name: &str) -> Result<Profile, ProfileError> {
        let group = self.group.unwrap_or_else(|| GROUP_DEFAULT.to_string());
        if group.is_empty() {
            return Err(ProfileError::EmptyGroup {
                profile: name.to_string(),
            });
        }
        let when_no_servers = match (
            self.when_no_servers.unwrap_or(RawWhen::Wait),
            self.wait_for_servers_ms,
        ) {
            (RawWhen::TabletServer, Some(_)) => {
                return Err(ProfileError::WaitWithoutWaiting {
                    profile: name.to_string(),
                })
            }
            (RawWhen::TabletServer, None) => WhenNoServers::TabletServer,
            (RawWhen::Wait, wait) => {
                let wait_for_servers_ms = wait.unwrap_or(WAIT_FOR_SERVERS_MS_DEFAULT);
                if wait_for_servers_ms == 0 || wait_for_servers_ms > WAIT_FOR_SERVERS_MS_MAX {
                    return Err(ProfileError::BadWaitForServers {
                        profile: name.to_string(),
                        value_ms: wait_for_servers_ms,
                        max_ms: WAIT_FOR_SERVERS_MS_MAX,
                    });
                }
                WhenNoServers::Wait {
                    wait_for_servers_ms,
                }
            }
        };
        let busy_timeout_multiplier = self
            .busy_timeout_multiplier
            .unwrap_or(BUSY_TIMEOUT_MULTIPLIER_DEFAULT);
        if !busy_timeout_multiplier.is_finite()
            || !(1.0..=BUSY_TIMEOUT_MULTIPLIER_MAX).contains(&busy_timeout_multiplier)
        {
            return Err(ProfileError::BadMultiplier {
                profile: name.to_string(),
                value: busy_timeout_multiplier,
                max: BUSY_TIMEOUT_MULTIPLIER_MAX,
            });
        }
        let busy_timeout_max_ms = check_busy_timeout(
            name,
            "busy_timeout_max_ms".into(),
            self.busy_timeout_max_ms
                .unwrap_or(BUSY_TIMEOUT_MAX_MS_DEFAULT),
        )?;
        if self.attempts.is_empty() {
            return Err(ProfileError::EmptyAttempts {
                profile: name.to_string(),
            });
        }
        if self.attempts.len() > ATTEMPTS_MAX {
            return Err(ProfileError::TooManyAttempts {
                profile: name.to_string(),
                count: self.attempts.len(),
                max: ATTEMPTS_MAX,
            });
        }
        let mut attempts = Vec::with_capacity(self.attempts.len());
        for (i, plan) in self.attempts.into_iter().enumerate() {
            let servers = plan.servers.validate(name, i)?;
            let busy_timeout_ms = check_busy_timeout(
                name,
                format!("attempts[{i}].busy_timeout_ms"),
                plan.busy_timeout_ms,
            )?;
            if busy_timeout_ms > busy_timeout_max_ms {
                return Err(ProfileError::BusyTimeoutMaxBelowPlan {
                    profile: name.to_string(),
                    max_ms: busy_timeout_max_ms,
                    attempt: i,
                    value_ms: busy_timeout_ms,
                });
            }
            attempts.push(AttemptPlan {
                servers,
                busy_timeout_ms,
                salt: plan.salt,
            });
        }
        let hedge = self.hedge.map(|h| h.validate(name)).transpose()?;
        let first_plan_skip_max = self.first_plan_skip_max.unwrap_or(0.0);
        if !(0.0..=FIRST_PLAN_SKIP_LIMIT).contains(&first_plan_skip_max) {
            return Err(ProfileError::BadFirstPlanSkip {
                profile: name.to_string(),
                value: first_plan_skip_max,
                limit: FIRST_PLAN_SKIP_LIMIT,
            });
        }
        Ok(Profile {
            name: name.to_string(),
            group,
            when_no_servers,
            busy_timeout_multiplier,
            busy_timeout_max_ms,
            attempts,
            hedge,
            first_plan_skip_max,
        })
    }
}

impl RawHedge {
    fn validate(self, profile: &str) -> Result<Hedge, ProfileError> {
        let bad = |field: &'static str, reason: &'static str| ProfileError::BadHedge {
            profile: profile.to_string(),
            field,
            reason,
        };
        let check_ms = |field: &'static str, ms: u64, zero_ok: bool| {
            if ms == 0 && !zero_ok {
                Err(bad(field, "must be at least 1 ms"))
            } else if ms > HEDGE_AFTER_MS_MAX {
                Err(bad(field, "exceeds the limit of 60000 ms"))
            } else {
                Ok(ms)
            }
        };
        match (self.after_ms, self.after_percentile, self.min_ms) {
            (Some(_), Some(_), _) => Err(bad(
                "after_percentile",
                "give either after_ms or after_percentile, not both",
            )),
            (Some(_), None, Some(_)) => Err(bad("min_ms", "is only allowed with after_percentile")),
            (Some(ms), None, None) => Ok(Hedge::AfterMs {
                after_ms: check_ms("after_ms", ms, false)?,
            }),
            (None, Some(p), min_ms) => {
                if !p.is_finite() || p <= 0.0 || p >= 100.0 {
                    return Err(ProfileError::HedgePercentileOutOfRange {
                        profile: profile.to_string(),
                        value: p,
                    });
                }
                Ok(Hedge::AfterPercentile {
                    percentile: p,
                    min_ms: check_ms("min_ms", min_ms.unwrap_or(0), true)?,
                })
            }
            (None, None, _) => Err(bad(
                "after_ms",
                "a hedge needs after_ms or after_percentile",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
default = "fast"
[profiles.fast]
group = "default"
when_no_servers = "wait"
wait_for_servers_ms = 30000
busy_timeout_multiplier = 8
busy_timeout_max_ms = 300000
attempts = [ { servers = 3, busy_timeout_ms = 5, salt = "one" }, { servers = "100%", busy_timeout_ms = 33 } ]
hedge = { after_ms = 10 }

[profiles.slow]
when_no_servers = "tablet-server"
attempts = [ { servers = "50%", busy_timeout_ms = 100 } ]
hedge = { after_percentile = 95.0, min_ms = 2 }
"#;

    fn parse(text: &str) -> Result<Profiles, ProfileError> {
        Profiles::from_toml_str(text)
    }

    /// One profile `p` whose body is `body`.
    fn one(body: &str) -> Result<Profiles, ProfileError> {
        parse(&format!("default = \"p\"\n[profiles.p]\n{body}\n"))
    }

    #[test]
    fn good_file_parses_every_field() {
        let p = parse(GOOD).unwrap();
        assert_eq!(p.default_name(), "fast");
        assert_eq!(p.names(), vec!["fast".to_string(), "slow".to_string()]);
        let fast = p.default_profile();
        assert_eq!(fast.group, "default");
        assert_eq!(
            fast.when_no_servers,
            WhenNoServers::Wait {
                wait_for_servers_ms: 30_000
            }
        );
        assert_eq!(fast.attempts.len(), 2);
        assert_eq!(fast.attempts[0].servers, ServerCount::Count(3));
        assert_eq!(fast.attempts[0].salt, "one");
        assert_eq!(fast.attempts[1].servers, ServerCount::Percent(100.0));
        assert_eq!(fast.attempts[1].salt, "");
        assert_eq!(fast.hedge, Some(Hedge::AfterMs { after_ms: 10 }));
        let slow = p.get("slow").unwrap();
        assert_eq!(slow.when_no_servers, WhenNoServers::TabletServer);
        assert_eq!(slow.busy_timeout_multiplier, 8.0);
        assert_eq!(slow.busy_timeout_max_ms, 300_000);
        assert_eq!(
            slow.hedge,
            Some(Hedge::AfterPercentile {
                percentile: 95.0,
                min_ms: 2
            })
        );
    }

    #[test]
    fn builtin_and_accumulo_profiles_are_valid() {
        let b = Profiles::builtin();
        assert_eq!(b.default_name(), "default");
        let d = b.default_profile();
        assert!(d.attempts[0].servers.resolve(23) <= 3);
        assert_eq!(
            (
                d.busy_timeout_ms(0),
                d.busy_timeout_ms(1),
                d.busy_timeout_ms(2)
            ),
            (2, 33, 264)
        );
        assert_eq!(d.first_plan_skip_max, 0.9);
        assert_eq!(
            d.when_no_servers,
            WhenNoServers::Wait {
                wait_for_servers_ms: 30_000
            }
        );
        assert_eq!(
            Profiles::accumulo_default()
                .default_profile()
                .first_plan_skip_max,
            0.0
        );
        let a = Profiles::accumulo_default();
        let d = a.default_profile();
        let timeouts: Vec<u64> = (0..10).map(|i| d.busy_timeout_ms(i)).collect();
        assert_eq!(
            timeouts,
            vec![33, 33, 33, 264, 2112, 16896, 135168, 300000, 300000, 300000]
        );
        let r = Profiles::accumulo_2_1(ServerCount::Count(3), 10).unwrap();
        let d = r.default_profile();
        assert_eq!(d.attempts[0].servers.resolve(23), 3);
        assert_eq!(d.attempts[1].servers.resolve(23), 23);
        assert_eq!(d.busy_timeout_ms(0), 10);
        assert_eq!(d.busy_timeout_ms(1), 10);
        assert_eq!(d.busy_timeout_ms(2), 80);
        assert!(matches!(
            Profiles::accumulo_2_1(ServerCount::Count(0), 10),
            Err(ProfileError::BadServers { .. })
        ));
    }

    #[test]
    fn escalation_is_capped_and_saturates() {
        let p = one(
            "busy_timeout_multiplier = 8\nbusy_timeout_max_ms = 1000\nattempts = [ { servers = 1, busy_timeout_ms = 33 } ]",
        )
        .unwrap();
        let d = p.default_profile();
        assert_eq!(d.busy_timeout_ms(0), 33);
        assert_eq!(d.busy_timeout_ms(1), 264);
        assert_eq!(d.busy_timeout_ms(2), 1000);
        assert_eq!(d.busy_timeout_ms(u32::MAX), 1000);
        assert_eq!(d.plan_index(u32::MAX), 0);
    }

    #[test]
    fn percent_rounds_half_up_with_at_least_one() {
        assert_eq!(ServerCount::Percent(50.0).resolve(3), 2); // 1.5 -> 2
        assert_eq!(ServerCount::Percent(10.0).resolve(12), 1); // 1.2 -> 1
        assert_eq!(ServerCount::Percent(1.0).resolve(23), 1); // 0.23 -> 1
        assert_eq!(ServerCount::Percent(50.0).resolve(5), 3); // 2.5 -> 3
        assert_eq!(ServerCount::Percent(100.0).resolve(23), 23);
        assert_eq!(ServerCount::Percent(100.0).resolve(0), 0);
        assert_eq!(ServerCount::Count(3).resolve(2), 2);
        assert_eq!(ServerCount::Count(3).resolve(0), 0);
    }

    #[test]
    fn malformed_toml_carries_the_line() {
        let e = parse(
            "default = \"p\"\n[profiles.p]\nattempts = [ { servers = 3, busy_timeout_ms = } ]\n",
        )
        .unwrap_err();
        match e {
            ProfileError::Toml { line, .. } => assert_eq!(line, Some(3)),
            other => panic!("expected Toml, got {other:?}"),
        }
        let e =
            one("attempts = [ { servers = 3, busy_timeout_ms = 5, salty = \"x\" } ]").unwrap_err();
        match &e {
            ProfileError::Toml { line, message, .. } => {
                assert_eq!(*line, Some(3));
                assert!(message.contains("salty"), "{message}");
            }
            other => panic!("expected Toml, got {other:?}"),
        }
        assert!(e.to_string().contains("line 3"), "{e}");
        // Unknown top-level and profile fields are rejected too.
        assert!(matches!(
            parse("default = \"p\"\nextra = 1\n[profiles.p]\nattempts = [ { servers = 1, busy_timeout_ms = 1 } ]"),
            Err(ProfileError::Toml { .. })
        ));
        assert!(matches!(
            one("isDefault = true\nattempts = [ { servers = 1, busy_timeout_ms = 1 } ]"),
            Err(ProfileError::Toml { .. })
        ));
        assert!(matches!(
            one("when_no_servers = \"fallback\"\nattempts = [ { servers = 1, busy_timeout_ms = 1 } ]"),
            Err(ProfileError::Toml { .. })
        ));
        // A second default key is a duplicate-key error: two defaults cannot be written.
        assert!(matches!(
            parse("default = \"p\"\ndefault = \"q\"\n[profiles.p]\nattempts = [ { servers = 1, busy_timeout_ms = 1 } ]"),
            Err(ProfileError::Toml { line: Some(2), .. })
        ));
    }

    #[test]
    fn default_must_exist_and_be_defined() {
        assert!(matches!(parse(""), Err(ProfileError::NoProfiles)));
        assert!(matches!(
            parse("[profiles.p]\nattempts = [ { servers = 1, busy_timeout_ms = 1 } ]"),
            Err(ProfileError::MissingDefault { .. })
        ));
        match parse(
            "default = \"q\"\n[profiles.p]\nattempts = [ { servers = 1, busy_timeout_ms = 1 } ]",
        ) {
            Err(ProfileError::UnknownDefault { default, known }) => {
                assert_eq!(default, "q");
                assert_eq!(known, vec!["p".to_string()]);
            }
            other => panic!("{other:?}"),
        }
        let p = parse(GOOD).unwrap();
        match p.get("medium") {
            Err(ProfileError::UnknownProfile { name, known }) => {
                assert_eq!(name, "medium");
                assert_eq!(known.len(), 2);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn attempts_must_be_sane() {
        assert!(
            matches!(one("attempts = []"), Err(ProfileError::EmptyAttempts { profile }) if profile == "p")
        );
        assert!(matches!(
            one("group = \"x\""),
            Err(ProfileError::EmptyAttempts { .. })
        ));
        let cases: &[(&str, &str)] = &[
            ("0", "at least 1"),
            ("-2", "at least 1"),
            ("\"0%\"", "above 0%"),
            ("\"0.0%\"", "above 0%"),
            ("\"101%\"", "at most 100%"),
            ("\"abc%\"", "not a number"),
            ("\"lots\"", "integer count"),
            ("2.5", "integer count"),
        ];
        for (value, reason_part) in cases {
            let body = format!(
                "attempts = [ {{ servers = 1, busy_timeout_ms = 1 }}, {{ servers = {value}, busy_timeout_ms = 1 }} ]"
            );
            match one(&body) {
                Err(ProfileError::BadServers {
                    profile,
                    attempt,
                    reason,
                    ..
                }) => {
                    assert_eq!(profile, "p");
                    assert_eq!(attempt, 1, "{value}");
                    assert!(reason.contains(reason_part), "{value}: {reason}");
                }
                other => panic!("{value}: {other:?}"),
            }
        }
        assert!(one("attempts = [ { servers = \"3\", busy_timeout_ms = 1 } ]").is_ok());
        assert!(one("attempts = [ { servers = \"12.5%\", busy_timeout_ms = 1 } ]").is_ok());
        let many = vec!["{ servers = 1, busy_timeout_ms = 1 }"; ATTEMPTS_MAX + 1].join(", ");
        assert!(matches!(
            one(&format!("attempts = [ {many} ]")),
            Err(ProfileError::TooManyAttempts { count, .. }) if count == ATTEMPTS_MAX + 1
        ));
    }

    #[test]
    fn busy_timeouts_must_be_positive_and_bounded() {
        match one("attempts = [ { servers = 1, busy_timeout_ms = 5 }, { servers = 1, busy_timeout_ms = 0 } ]") {
            Err(ProfileError::ZeroBusyTimeout { profile, field }) => {
                assert_eq!(profile, "p");
                assert_eq!(field, "attempts[1].busy_timeout_ms");
            }
            other => panic!("{other:?}"),
        }
        match one("attempts = [ { servers = 1, busy_timeout_ms = 3600001 } ]") {
            Err(ProfileError::BusyTimeoutTooLarge {
                field, value_ms, ..
            }) => {
                assert_eq!(field, "attempts[0].busy_timeout_ms");
                assert_eq!(value_ms, 3_600_001);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            one("busy_timeout_max_ms = 0\nattempts = [ { servers = 1, busy_timeout_ms = 5 } ]"),
            Err(ProfileError::ZeroBusyTimeout { field, .. }) if field == "busy_timeout_max_ms"
        ));
        assert!(matches!(
            one("busy_timeout_max_ms = 10\nattempts = [ { servers = 1, busy_timeout_ms = 33 } ]"),
            Err(ProfileError::BusyTimeoutMaxBelowPlan {
                attempt: 0,
                max_ms: 10,
                value_ms: 33,
                ..
            })
        ));
        assert!(matches!(
            one("attempts = [ { servers = 1, busy_timeout_ms = -1 } ]"),
            Err(ProfileError::Toml { .. })
        ));
    }

    #[test]
    fn multiplier_wait_and_group_rules() {
        assert!(matches!(
            one("busy_timeout_multiplier = 0.5\nattempts = [ { servers = 1, busy_timeout_ms = 5 } ]"),
            Err(ProfileError::BadMultiplier { value, .. }) if value == 0.5
        ));
        assert!(matches!(
            one("busy_timeout_multiplier = 1e9\nattempts = [ { servers = 1, busy_timeout_ms = 5 } ]"),
            Err(ProfileError::BadMultiplier { .. })
        ));
        assert!(matches!(
            one("busy_timeout_multiplier = nan\nattempts = [ { servers = 1, busy_timeout_ms = 5 } ]"),
            Err(ProfileError::BadMultiplier { .. })
        ));
        let p =
            one("busy_timeout_multiplier = 1\nattempts = [ { servers = 1, busy_timeout_ms = 5 } ]")
                .unwrap();
        assert_eq!(p.default_profile().busy_timeout_ms(7), 5);
        assert!(matches!(
            one("when_no_servers = \"tablet-server\"\nwait_for_servers_ms = 5\nattempts = [ { servers = 1, busy_timeout_ms = 5 } ]"),
            Err(ProfileError::WaitWithoutWaiting { .. })
        ));
        assert!(matches!(
            one("wait_for_servers_ms = 0\nattempts = [ { servers = 1, busy_timeout_ms = 5 } ]"),
            Err(ProfileError::BadWaitForServers { value_ms: 0, .. })
        ));
        let p = one("attempts = [ { servers = 1, busy_timeout_ms = 5 } ]").unwrap();
        assert_eq!(
            p.default_profile().when_no_servers,
            WhenNoServers::Wait {
                wait_for_servers_ms: WAIT_FOR_SERVERS_MS_DEFAULT
            }
        );
        assert!(matches!(
            one("group = \"\"\nattempts = [ { servers = 1, busy_timeout_ms = 5 } ]"),
            Err(ProfileError::EmptyGroup { .. })
        ));
    }

    #[test]
    fn hedge_rules() {
        let plan = "attempts = [ { servers = 1, busy_timeout_ms = 5 } ]";
        for p in ["0.0", "100.0", "-3.0", "150.0"] {
            match one(&format!("{plan}\nhedge = {{ after_percentile = {p} }}")) {
                Err(ProfileError::HedgePercentileOutOfRange { profile, .. }) => {
                    assert_eq!(profile, "p")
                }
                other => panic!("{p}: {other:?}"),
            }
        }
        assert!(matches!(
            one(&format!("{plan}\nhedge = {{ after_ms = 0 }}")),
            Err(ProfileError::BadHedge {
                field: "after_ms",
                ..
            })
        ));
        assert!(matches!(
            one(&format!(
                "{plan}\nhedge = {{ after_ms = 5, after_percentile = 90.0 }}"
            )),
            Err(ProfileError::BadHedge { .. })
        ));
        assert!(matches!(
            one(&format!("{plan}\nhedge = {{ after_ms = 5, min_ms = 1 }}")),
            Err(ProfileError::BadHedge {
                field: "min_ms",
                ..
            })
        ));
        assert!(matches!(
            one(&format!("{plan}\nhedge = {{ }}")),
            Err(ProfileError::BadHedge { .. })
        ));
        assert!(matches!(
            one(&format!("{plan}\nhedge = {{ after_ms = 5, when = 1 }}")),
            Err(ProfileError::Toml { .. })
        ));
        let p = one(&format!("{plan}\nhedge = {{ after_percentile = 99.9 }}")).unwrap();
        assert_eq!(
            p.default_profile().hedge,
            Some(Hedge::AfterPercentile {
                percentile: 99.9,
                min_ms: 0
            })
        );
    }

    #[test]
    fn first_plan_skip_must_be_a_probability_below_the_limit() {
        let plan = "attempts = [ { servers = 1, busy_timeout_ms = 5 }, { servers = 2, busy_timeout_ms = 5 } ]";
        for v in ["-0.1", "0.96", "1.0", "nan"] {
            match one(&format!("{plan}\nfirst_plan_skip_max = {v}")) {
                Err(ProfileError::BadFirstPlanSkip { profile, .. }) => assert_eq!(profile, "p"),
                other => panic!("{v}: {other:?}"),
            }
        }
        let p = one(&format!("{plan}\nfirst_plan_skip_max = 0.95")).unwrap();
        assert_eq!(
            p.default_profile().first_plan_skip_max,
            FIRST_PLAN_SKIP_LIMIT
        );
    }

    #[test]
    fn load_reads_a_file() {
        let path = std::env::temp_dir().join(format!(
            "tablinum-dispatch-profiles-{}.toml",
            std::process::id()
        ));
        std::fs::write(&path, GOOD).unwrap();
        let p = Profiles::load(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(p, parse(GOOD).unwrap());
    }

    #[test]
    fn load_reports_the_path() {
        let path = Path::new("/nonexistent/tablinum/profiles.toml");
        match Profiles::load(path) {
            Err(e @ ProfileError::Read { .. }) => assert!(e.to_string().contains("profiles.toml")),
            other => panic!("{other:?}"),
        }
    }
}
