//! Point reads (`Get`, `Head`) at a chosen consistency: immediate ones go
//! to the key's tablet server; eventual ones to a scan server the pure
//! dispatcher (`tablinum_dispatch::select`) picks for the key's tablet, with
//! the profile's busy timeouts, re-dispatched at once on busy and after the
//! selector's backoff on errors, and — when the profile hedges — a second
//! request to the tablet's next rendezvous server once the first has gone
//! unanswered for the hedge delay (fixed, or a percentile of this client's
//! recent eventual reads); the first answer wins and the other request is
//! dropped, which cancels it on its server.
//!
//! Owns the attempt loop of one point read and its [`ReadStats`]. Never
//! writes, and never returns an answer from a server other than the one it
//! reports in the stats.

use std::future::Future;
use std::time::{Duration, Instant};

use tablinum_dispatch::select::{
    select, Attempt, AttemptOutcome, Request, Selection, TabletAttempts, Target,
};
use tablinum_proto::v1;
use tablinum_proto::v1::tablet_server_client::TabletServerClient;
use tonic::Status;

use crate::eventual::{busy_timeout_ms, tablet_key, EVENTUAL_ATTEMPTS_MAX};
use crate::{error, AsyncClient, Consistency, Error, Result, Transport};

/// What one point read did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Requests whose answer was waited for (1 when nothing was busy or
    /// failed; a hedge is not an attempt of its own).
    pub attempts: u32,
    /// Busy answers from scan servers.
    pub busy_answers: u32,
    /// Hedged requests sent.
    pub hedges: u32,
    /// Whether the answer came from a hedged request.
    pub hedge_won: bool,
    /// The server that answered.
    pub server: String,
    /// The profile's attempt plan that answered (`None`: a tablet server).
    pub plan: Option<usize>,
}

/// How one request of a point read ended.
struct Answer<T> {
    result: std::result::Result<T, Status>,
    server: String,
    hedged: bool,
}

impl AsyncClient {
    /// Reads one object's value at `consistency`, with what the read did.
    pub async fn get_with(
        &self,
        table: &str,
        key: &[u8],
        consistency: &Consistency,
    ) -> Result<(Option<Vec<u8>>, ReadStats)> {
        let (r, stats) = self
            .point_read(table, key, consistency, |mut c, req| async move {
                Ok(c.get(req).await?.into_inner())
            })
            .await?;
        Ok((r.found.then_some(r.value), stats))
    }

    /// Reads one object's metadata at `consistency`, with what the read did.
    pub async fn head_with(
        &self,
        table: &str,
        key: &[u8],
        consistency: &Consistency,
    ) -> Result<(Option<crate::Head>, ReadStats)> {
        let (r, stats) = self
            .point_read(table, key, consistency, |mut c, req| async move {
                Ok(c.head(req).await?.into_inner())
            })
            .await?;
        Ok((r.found.then(|| r.into()), stats))
    }

    async fn point_read<T, F, Fut>(
        &self,
        table: &str,
        key: &[u8],
        consistency: &Consistency,
        call: F,
    ) -> Result<(T, ReadStats)>
    where
        F: Fn(TabletServerClient<Transport>, v1::GetRequest) -> Fut,
        Fut: Future<Output = std::result::Result<T, Status>>,
    {
        let Consistency::Eventual {
            profile,
            busy_timeout_ms: override_ms,
        } = consistency
        else {
            let mut server = String::new();
            let v = self
                .with_tablet(table, key, true, |c, table_id| {
                    let req = v1::GetRequest {
                        table: table.to_string(),
                        key: key.to_vec(),
                        table_id,
                        tablet_id: 0,
                        busy_timeout_ms: 0,
                        attempt: 0,
                        plan: 0,
                    };
                    call(c, req)
                })
                .await?;
            if let Ok((_, t)) = self.route(table, key, false).await {
                server = t.server;
            }
            let stats = ReadStats {
                attempts: 1,
                server,
                ..ReadStats::default()
            };
            return Ok((v, stats));
        };
        let profile = self.profile(profile.as_deref())?;
        let mut stats = ReadStats::default();
        let mut attempts: Vec<Attempt> = Vec::new();
        let mut refresh = false;
        loop {
            let (table_id, tablet) = self.route(table, key, refresh).await?;
            refresh = false;
            let tk = tablet_key(table_id, tablet.id);
            let waited_from = Instant::now();
            let dispatch = loop {
                let servers = self.scan_server_snapshot(&profile.group, false).await?;
                let tablets = [TabletAttempts {
                    tablet: &tk,
                    attempts: &attempts,
                    heat: self.heat(&tk),
                }];
                let req = Request {
                    tablets: &tablets,
                    servers: &servers,
                    profile: &profile,
                    waited_for_servers_ms: waited_from.elapsed().as_millis() as u64,
                    seed: rand::random(),
                };
                match select(&req).map_err(|e| Error::Unavailable(e.to_string()))? {
                    Selection::Dispatch(d) => break d,
                    Selection::WaitForServers { recheck_after_ms } => {
                        tokio::time::sleep(Duration::from_millis(recheck_after_ms.max(1))).await;
                        self.scan_server_snapshot(&profile.group, true).await?;
                    }
                }
            };
            if dispatch.delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(dispatch.delay_ms)).await;
            }
            let busy = busy_timeout_ms(
                &profile,
                *override_ms,
                attempts.len(),
                dispatch.busy_timeout_ms,
            );
            let (primary, plan, busy) = match dispatch.targets.first() {
                Some(Target::ScanServer(s)) => (s.clone(), Some(dispatch.plan), busy),
                _ => (tablet.server.clone(), None, 0),
            };
            if primary.is_empty() {
                return Err(Error::Unavailable(format!(
                    "tablet {} of {table} has no server to read from",
                    tablet.id
                )));
            }
            let req = v1::GetRequest {
                table: table.to_string(),
                key: key.to_vec(),
                table_id,
                tablet_id: tablet.id,
                busy_timeout_ms: u32::try_from(busy).unwrap_or(u32::MAX),
                attempt: u32::try_from(attempts.len() + 1).unwrap_or(u32::MAX),
                plan: plan.map_or(0, |p| u32::try_from(p).unwrap_or(u32::MAX)),
            };
            let hedge = match plan {
                Some(_) => {
                    let servers = self.scan_server_snapshot(&profile.group, false).await?;
                    let tracker = self.inner.point_latency.lock().clone();
                    tablinum_dispatch::hedge::hedge(&profile, &tracker, &tk, &servers, &primary)
                }
                None => None,
            };
            stats.attempts += 1;
            let started = Instant::now();
            let answer = self.race(&call, req, &primary, hedge, &mut stats).await?;
            let busy_answer = answer
                .result
                .as_ref()
                .err()
                .is_some_and(crate::error::is_busy);
            if plan == Some(0) {
                self.record_heat(&tk, busy_answer);
            }
            match answer.result {
                Ok(v) => {
                    if plan.is_some() {
                        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                        self.inner.point_latency.lock().record_us(us);
                    }
                    stats.server = answer.server;
                    stats.hedge_won = answer.hedged;
                    stats.plan = plan;
                    return Ok((v, stats));
                }
                Err(s) => {
                    let op = if plan.is_some() {
                        error::Op::Eventual
                    } else {
                        error::Op::Read
                    };
                    let retry = error::classify(&s, op).retry;
                    if busy_answer {
                        stats.busy_answers += 1;
                    }
                    attempts.push(Attempt {
                        server: answer.server,
                        outcome: if busy_answer {
                            AttemptOutcome::Busy
                        } else {
                            AttemptOutcome::Error
                        },
                    });
                    if plan.is_none() && !retry {
                        return Err(s.into());
                    }
                    if !retry || attempts.len() >= EVENTUAL_ATTEMPTS_MAX {
                        return Err(Error::Unavailable(format!(
                            "eventual read of tablet {} of {table} after {} attempts: {}",
                            tablet.id,
                            attempts.len(),
                            s.message()
                        )));
                    }
                    if !busy_answer {
                        refresh = true;
                        self.scan_server_snapshot(&profile.group, true).await?;
                    }
                }
            }
        }
    }

    /// Sends `req` to `primary` and, when `hedge` says so and no answer
    /// came within its delay, to its server too; the first success wins
    /// (a failure waits for the other request), the loser is dropped.
    async fn race<T, F, Fut>(
        &self,
        call: &F,
        req: v1::GetRequest,
        primary: &str,
        hedge: Option<tablinum_dispatch::hedge::HedgeDecision>,
        stats: &mut ReadStats,
    ) -> Result<Answer<T>>
    where
        F: Fn(TabletServerClient<Transport>, v1::GetRequest) -> Fut,
        Fut: Future<Output = std::result::Result<T, Status>>,
    {
        let first = call(self.tserver(primary)?, req.clone());
        tokio::pin!(first);
        let Some(h) = hedge else {
            return Ok(Answer {
                result: first.await,
                server: primary.to_string(),
                hedged: false,
            });
        };
        tokio::select! {
            r = &mut first => {
                return Ok(Answer { result: r, server: primary.to_string(), hedged: false });
            }
            () = tokio::time::sleep(Duration::from_millis(h.after_ms)) => {}
        }
        stats.hedges += 1;
        let second = call(self.tserver(&h.server)?, req);
        tokio::pin!(second);
        let (r, from_second) = tokio::select! {
            r = &mut first => (r, false),
            r = &mut second => (r, true),
        };
        let answer = |result, hedged: bool| Answer {
            result,
            server: if hedged {
                h.server.clone()
            } else {
                primary.to_string()
            },
            hedged,
        };
        if r.is_ok() {
            return Ok(answer(r, from_second));
        }
        // The first to answer failed: the other may still succeed.
        let other = if from_second {
            (&mut first).await
        } else {
            (&mut second).await
        };
        Ok(if other.is_ok() {
            answer(other, !from_second)
        } else {
            answer(r, from_second)
        })
    }
}
