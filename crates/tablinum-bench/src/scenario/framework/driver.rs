//! The closed loop of a scenario that measures in its own process: `clients`
//! threads, each sending its next request as soon as the last one returned,
//! until a deadline.
//!
//! Owns the threads (one `std::thread::scope`, one seeded RNG per thread,
//! [`crate::generators::worker_rng`]), timing each request into an HDR
//! histogram of the harness's shape ([`crate::stats::new_histogram`]; only
//! successful requests), adding up the named counts a request reports
//! (`rows_sent`, `waits`, ...), and the first error. What a request *is*
//! belongs to the scenario (the closure). It must never run two loops at
//! once, never stop on a failed request (it is counted), and never measure
//! the warm-up: a warm-up is a separate loop whose result is dropped.
//!
//! The `bench run` runner ([`crate::runner`]) keeps its own workers: it
//! drives the `Target` trait open- or closed-loop with report intervals and
//! an op budget; this loop is for scenarios whose request is not a `Target`
//! op (a coordinated index query, a scan-server read).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::generators::{worker_rng, BenchRng};
use crate::stats::new_histogram;

/// Named counts one request (or one loop) adds up.
pub type Counts = BTreeMap<&'static str, u64>;

/// What a closed loop measured.
#[derive(Debug, Clone)]
pub struct LoopResult {
    /// Seconds from the start until the last request ended.
    pub elapsed_s: f64,
    /// Successful requests.
    pub requests: u64,
    /// Failed requests.
    pub errors: u64,
    /// The counts successful requests reported, added up.
    pub counts: Counts,
    /// Latency of successful requests, µs.
    pub latency_us: Histogram<u64>,
    /// The first error.
    pub first_error: Option<String>,
}

impl LoopResult {
    fn empty() -> LoopResult {
        LoopResult {
            elapsed_s: 0.0,
            requests: 0,
            errors: 0,
            counts: Counts::new(),
            latency_us: new_histogram(),
            first_error: None,
        }
    }

    fn add(&mut self, o: LoopResult) {
        self.requests += o.requests;
        self.errors += o.errors;
        for (k, v) in o.counts {
            *self.counts.entry(k).or_default() += v;
        }
        // Same shape on both sides: cannot fail.
        let _ = self.latency_us.add(&o.latency_us);
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
    }

    /// The count `name` (0 when no request reported it).
    pub fn count(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    /// The count `name` per successful request (0 without requests).
    pub fn per_request(&self, name: &str) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.count(name) as f64 / self.requests as f64
        }
    }

    /// The count `name` per measured second.
    pub fn per_second(&self, name: &str) -> f64 {
        self.count(name) as f64 / self.elapsed_s.max(f64::MIN_POSITIVE)
    }
}

/// Runs `request` in a closed loop of `clients` threads for `seconds`
/// (thread `w` draws from `worker_rng(seed, w)`). A request adds its counts
/// and returns `Err(message)` when it failed.
pub fn closed_loop<F>(clients: u32, seconds: f64, seed: u64, request: F) -> LoopResult
where
    F: Fn(&mut BenchRng, &mut Counts) -> Result<(), String> + Sync,
{
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(seconds.max(0.0));
    let mut total = LoopResult::empty();
    let request = &request;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..clients)
            .map(|w| {
                s.spawn(move || {
                    let mut rng = worker_rng(seed, u64::from(w));
                    let mut r = LoopResult::empty();
                    let mut counts = Counts::new();
                    while Instant::now() < deadline {
                        counts.clear();
                        let t = Instant::now();
                        match request(&mut rng, &mut counts) {
                            Ok(()) => {
                                let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
                                r.latency_us.saturating_record(us.max(1));
                                r.requests += 1;
                                for (&k, &v) in &counts {
                                    *r.counts.entry(k).or_default() += v;
                                }
                            }
                            Err(e) => {
                                r.errors += 1;
                                r.first_error.get_or_insert(e);
                            }
                        }
                    }
                    r
                })
            })
            .collect();
        for w in workers {
            match w.join() {
                Ok(r) => total.add(r),
                Err(_) => {
                    total.errors += 1;
                    total
                        .first_error
                        .get_or_insert_with(|| "a client thread panicked".into());
                }
            }
        }
    });
    total.elapsed_s = t0.elapsed().as_secs_f64();
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;

    #[test]
    fn counts_errors_and_latency_add_up_over_threads() {
        let r = closed_loop(3, 0.2, 1, |rng, counts| {
            std::thread::sleep(Duration::from_millis(2));
            let x: u32 = rng.random_range(0..4);
            if x == 0 {
                return Err(format!("failed {x}"));
            }
            counts.insert("rows", 10);
            counts.insert("waits", u64::from(x));
            Ok(())
        });
        assert!(r.requests > 10, "{r:?}");
        assert!(r.errors > 0, "{r:?}");
        assert_eq!(r.first_error.as_deref(), Some("failed 0"));
        assert_eq!(r.count("rows"), r.requests * 10);
        assert_eq!(r.per_request("rows"), 10.0);
        let waits = r.per_request("waits");
        assert!((1.0..=3.0).contains(&waits), "{waits}");
        assert_eq!(r.latency_us.len(), r.requests);
        assert!(r.latency_us.value_at_quantile(0.5) >= 2000);
        assert!(r.elapsed_s >= 0.2);
        assert!((r.per_second("rows") - r.count("rows") as f64 / r.elapsed_s).abs() < 1e-6);
        assert_eq!(r.count("absent"), 0);
    }
}
