//! The retry policy: what every answer means for every event, and how long
//! to wait before trying again.
//!
//! [`Policy::classify`] is the one place where an outcome (no response, a
//! status, or a 2xx body as the protocol read it) becomes a [`Verdict`] per
//! event: delivered, duplicate (delivered earlier), retry, or reject. The
//! rules, from `DESIGN.md` promises 6-8 and issue 6:
//!
//! | outcome | verdict |
//! |---------|---------|
//! | connection error, timeout, reset | retry every event, without limit |
//! | 408, 429, 5xx | retry every event, without limit, honouring `Retry-After` |
//! | 401, 403 | hold: keep every event, retry slowly, alarm (a key expired) |
//! | 404, 405, 3xx | hold: the endpoint is wrong, which is configuration too |
//! | 413 | split the request in two; a single event too large is rejected |
//! | other 4xx | reject every event in the request |
//! | 2xx, body accepts all | delivered |
//! | 2xx, per-item answers | 2xx delivered, 409 duplicate, 429 retry (not counted: pushback), 408/5xx retry (counted), others rejected with the item's error |
//! | 2xx, partial success without saying which | reject the whole request ("partially rejected: N of M; receiver did not say which") |
//! | 2xx, unreadable body | retry (counted): a 200 is not a success until the body says so |
//! | 2xx, body longer than the request's limit (`http::response_limit`) | retry every event (`response_too_large`), without limit: the receiver may have stored them, and only it is at fault |
//!
//! A *counted* retry adds one to the event's tally; at `max_attempts` the
//! event is rejected with "retries exhausted". Whole-request transient
//! failures and per-item 429s are never counted: the log's own bounds limit
//! the backlog, and dropping data because a receiver was down or busy is
//! what holdfast exists to avoid.
//!
//! Waiting (the runtime's retry queue keeps the events meanwhile, see
//! `retry_queue.rs`): exponential backoff with full jitter (a uniform draw between
//! zero and `min(backoff_max, backoff_initial × 2^(n-1))` for the n-th
//! consecutive failure), never less than a `Retry-After` the receiver sent
//! (seconds or an HTTP date, capped at [`RETRY_AFTER_CAP`] or `backoff_max`,
//! whichever is larger). Held requests wait between half and all of
//! `backoff_max`.

use std::time::{Duration, SystemTime};

use rand::Rng;

use super::transport::{BodyVerdict, ItemAnswer};

/// The longest `Retry-After` honoured when `backoff_max` is shorter: a
/// receiver asking for an hour is more likely confused than right.
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(300);

/// How a request failed without a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TransportKind {
    /// Could not connect (refused, unreachable, DNS, TLS handshake).
    Connect,
    /// No complete answer within `request_timeout`.
    Timeout,
    /// The connection broke while sending or before the answer (reset):
    /// the receiver may have accepted the events.
    Connection,
}

impl TransportKind {
    pub fn reason(self) -> &'static str {
        match self {
            TransportKind::Connect => "connect",
            TransportKind::Timeout => "timeout",
            TransportKind::Connection => "connection",
        }
    }
}

/// What came back for one request.
#[derive(Debug)]
pub(crate) enum Outcome<'a> {
    Transport {
        kind: TransportKind,
    },
    /// A status outside 2xx; `error` is the receiver's text for it.
    Status {
        status: u16,
        retry_after: Option<Duration>,
        error: &'a str,
    },
    /// A 2xx status and what the protocol read in the body.
    Success {
        status: u16,
        body: &'a BodyVerdict,
    },
    /// A 2xx status whose body was longer than the request's limit: not
    /// read, so not known to say the events were stored.
    ResponseTooLarge,
}

/// What becomes of one event after an answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    Delivered,
    /// The receiver already had it (a 409 on create): delivered earlier,
    /// typically by a request whose answer was lost.
    Duplicate,
    /// Send it again. `counted` retries add to the event's tally.
    Retry {
        reason: &'static str,
        counted: bool,
    },
    /// It will never succeed: quarantine it.
    Reject(Rejection),
}

/// Why an event is rejected for good.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rejection {
    /// A short, fixed label for metrics and filters (`rejected`,
    /// `partially_rejected`, `retries_exhausted`, `too_large`, …).
    pub kind: &'static str,
    /// The reason in words, as stored in the quarantine.
    pub reason: String,
    /// The receiver's status for this event (the item's, or the request's).
    pub status: Option<u16>,
    /// The receiver's error text.
    pub error: String,
}

/// What to do with a whole request.
#[derive(Debug)]
pub(crate) enum Decision {
    /// One verdict per event, in request order.
    PerEvent {
        verdicts: Vec<Verdict>,
        /// The receiver's `Retry-After`, for the events being retried.
        retry_after: Option<Duration>,
    },
    /// A configuration problem (credentials, endpoint): keep every event,
    /// send it again slowly, and alarm. Nothing is counted against
    /// `max_attempts`.
    Hold {
        reason: &'static str,
        status: u16,
        message: String,
    },
    /// 413 with more than one event: send them in two halves.
    Split,
}

/// The policy of one sink.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Answers asking for a retry that an event may get before it is
    /// rejected with "retries exhausted" (at least 1).
    pub max_attempts: u32,
}

impl Policy {
    /// Classifies an outcome for the events of one request. `retries[i]` is
    /// how many counted retries event `i` already had.
    pub fn classify(&self, outcome: &Outcome<'_>, retries: &[u32]) -> Decision {
        let n = retries.len();
        let all = |v: Verdict| Decision::PerEvent {
            verdicts: vec![v; n],
            retry_after: None,
        };
        match *outcome {
            Outcome::Transport { kind } => all(Verdict::Retry {
                reason: kind.reason(),
                counted: false,
            }),
            // Not counted: quarantining events a receiver may well have
            // stored, for an answer it made too long, would punish the
            // events for the receiver's fault.
            Outcome::ResponseTooLarge => all(Verdict::Retry {
                reason: "response_too_large",
                counted: false,
            }),
            Outcome::Status {
                status,
                retry_after,
                error,
            } => match status {
                401 | 403 => Decision::Hold {
                    reason: "auth",
                    status,
                    message: error.to_string(),
                },
                404 | 405 | 300..=399 => Decision::Hold {
                    reason: "endpoint",
                    status,
                    message: error.to_string(),
                },
                413 if n > 1 => Decision::Split,
                413 => all(Verdict::Reject(Rejection {
                    kind: "too_large",
                    reason: "too large for the receiver, even alone (HTTP 413)".into(),
                    status: Some(413),
                    error: error.to_string(),
                })),
                408 | 429 | 500..=599 => Decision::PerEvent {
                    verdicts: vec![
                        Verdict::Retry {
                            reason: status_reason(status),
                            counted: false,
                        };
                        n
                    ],
                    retry_after,
                },
                _ => all(Verdict::Reject(Rejection {
                    kind: "rejected",
                    reason: format!("request rejected by the receiver (HTTP {status})"),
                    status: Some(status),
                    error: error.to_string(),
                })),
            },
            Outcome::Success { status, body } => {
                let verdicts = match body {
                    BodyVerdict::Accepted | BodyVerdict::AcceptedWithWarning(_) => {
                        vec![Verdict::Delivered; n]
                    }
                    BodyVerdict::PerItem(items) if items.len() == n => items
                        .iter()
                        .zip(retries)
                        .map(|(a, &r)| self.item(a, r))
                        .collect(),
                    BodyVerdict::PerItem(items) => retries
                        .iter()
                        .map(|&r| {
                            self.counted(
                                "unreadable_response",
                                r,
                                status,
                                &format!(
                                    "the receiver answered for {} events, {n} were sent",
                                    items.len()
                                ),
                            )
                        })
                        .collect(),
                    BodyVerdict::PartiallyRejected { rejected, message } => {
                        vec![
                            Verdict::Reject(Rejection {
                                kind: "partially_rejected",
                                reason: format!(
                                    "partially rejected: {rejected} of {n}; receiver did not say which"
                                ),
                                status: Some(status),
                                error: message.clone(),
                            });
                            n
                        ]
                    }
                    BodyVerdict::Unreadable(why) => retries
                        .iter()
                        .map(|&r| self.counted("unreadable_response", r, status, why))
                        .collect(),
                };
                Decision::PerEvent {
                    verdicts,
                    retry_after: None,
                }
            }
        }
    }

    /// One item of a per-item answer (Elasticsearch `_bulk` `items[]`).
    fn item(&self, a: &ItemAnswer, retries: u32) -> Verdict {
        match a.status {
            200..=299 => Verdict::Delivered,
            409 => Verdict::Duplicate,
            // Pushback, not a judgement of the event (Elasticsearch's full
            // write queue): retried without limit, like a whole-request 429.
            // The adaptive limit and the backoff slow the sink down instead.
            429 => Verdict::Retry {
                reason: "item_429",
                counted: false,
            },
            408 | 500..=599 => self.counted(
                "item_5xx",
                retries,
                a.status,
                a.error.as_deref().unwrap_or(""),
            ),
            status => Verdict::Reject(Rejection {
                kind: "rejected",
                reason: format!("rejected by the receiver (status {status})"),
                status: Some(status),
                error: a.error.clone().unwrap_or_default(),
            }),
        }
    }

    /// A retry that counts toward `max_attempts`, or the rejection once
    /// they are used up.
    fn counted(&self, reason: &'static str, retries: u32, status: u16, error: &str) -> Verdict {
        if retries + 1 >= self.max_attempts {
            Verdict::Reject(Rejection {
                kind: "retries_exhausted",
                reason: "retries exhausted".into(),
                status: Some(status),
                error: error.to_string(),
            })
        } else {
            Verdict::Retry {
                reason,
                counted: true,
            }
        }
    }

    /// The wait before the `attempt`-th consecutive retry (1-based): full
    /// jitter under an exponential ceiling, never less than `retry_after`.
    pub fn backoff(
        &self,
        attempt: u32,
        retry_after: Option<Duration>,
        rng: &mut impl Rng,
    ) -> Duration {
        let jittered = uniform(self.ceiling(attempt), rng);
        match retry_after {
            Some(ra) => jittered.max(ra.min(self.backoff_max.max(RETRY_AFTER_CAP))),
            None => jittered,
        }
    }

    /// The exponential ceiling of the `attempt`-th consecutive wait:
    /// `min(backoff_max, backoff_initial × 2^(attempt-1))`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let shift = attempt.saturating_sub(1).min(30);
        self.backoff_initial
            .saturating_mul(1u32 << shift)
            .min(self.backoff_max)
    }

    /// The wait before resending a held request (credentials, endpoint):
    /// slow, between half and all of `backoff_max`.
    pub fn hold(&self, rng: &mut impl Rng) -> Duration {
        let half = self.backoff_max / 2;
        half + uniform(self.backoff_max - half, rng)
    }
}

fn uniform(max: Duration, rng: &mut impl Rng) -> Duration {
    let nanos = max.as_nanos().min(u64::MAX as u128) as u64;
    if nanos == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(rng.random_range(0..=nanos))
}

fn status_reason(status: u16) -> &'static str {
    match status {
        408 => "http_408",
        429 => "http_429",
        _ => "http_5xx",
    }
}

/// Parses a `Retry-After` value: a number of seconds, or an HTTP date
/// (which yields the time from `now` until then, zero if past).
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn policy() -> Policy {
        Policy {
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            max_attempts: 3,
        }
    }

    fn status(s: u16) -> Outcome<'static> {
        Outcome::Status {
            status: s,
            retry_after: None,
            error: "boom",
        }
    }

    fn verdicts(d: Decision) -> Vec<Verdict> {
        match d {
            Decision::PerEvent { verdicts, .. } => verdicts,
            other => panic!("expected per-event verdicts, got {other:?}"),
        }
    }

    #[test]
    fn transient_failures_retry_every_event_without_counting() {
        let p = policy();
        for o in [
            Outcome::Transport {
                kind: TransportKind::Connect,
            },
            Outcome::Transport {
                kind: TransportKind::Timeout,
            },
            Outcome::Transport {
                kind: TransportKind::Connection,
            },
            status(408),
            status(429),
            status(500),
            status(502),
            status(503),
            status(504),
        ] {
            // Even events far beyond max_attempts are retried.
            for v in verdicts(p.classify(&o, &[0, 99])) {
                assert!(
                    matches!(v, Verdict::Retry { counted: false, .. }),
                    "{o:?}: {v:?}"
                );
            }
        }
    }

    #[test]
    fn an_answer_too_long_to_read_retries_every_event_without_counting() {
        let p = policy();
        // Even events far beyond max_attempts are retried, never quarantined.
        for v in verdicts(p.classify(&Outcome::ResponseTooLarge, &[0, 99])) {
            assert_eq!(
                v,
                Verdict::Retry {
                    reason: "response_too_large",
                    counted: false
                }
            );
        }
    }

    #[test]
    fn credentials_and_endpoints_hold_the_data() {
        let p = policy();
        for (s, reason) in [
            (401, "auth"),
            (403, "auth"),
            (404, "endpoint"),
            (301, "endpoint"),
        ] {
            match p.classify(&status(s), &[0; 1000]) {
                Decision::Hold { reason: r, .. } => assert_eq!(r, reason),
                other => panic!("{s}: {other:?}"),
            }
        }
    }

    #[test]
    fn too_large_splits_until_one_event_is_left() {
        let p = policy();
        assert!(matches!(p.classify(&status(413), &[0, 0]), Decision::Split));
        let v = verdicts(p.classify(&status(413), &[0]));
        assert!(matches!(&v[0], Verdict::Reject(r) if r.kind == "too_large"));
    }

    #[test]
    fn other_client_errors_reject_the_request() {
        let v = verdicts(policy().classify(&status(400), &[0, 0]));
        assert_eq!(v.len(), 2);
        for v in v {
            let Verdict::Reject(r) = v else { panic!() };
            assert_eq!(r.status, Some(400));
            assert_eq!(r.error, "boom");
        }
    }

    #[test]
    fn a_200_is_judged_by_its_body() {
        let p = policy();
        let body = BodyVerdict::PerItem(vec![
            ItemAnswer::new(201, None),
            ItemAnswer::new(409, Some("exists")),
            ItemAnswer::new(429, Some("busy")),
            ItemAnswer::new(400, Some("mapper_parsing_exception: bad")),
            ItemAnswer::new(503, Some("unavailable")),
            ItemAnswer::new(500, Some("still failing")),
            ItemAnswer::new(429, Some("busy again")),
        ]);
        let v = verdicts(p.classify(
            &Outcome::Success {
                status: 200,
                body: &body,
            },
            &[0, 0, 0, 0, 1, 2, 99],
        ));
        assert_eq!(v[0], Verdict::Delivered);
        assert_eq!(v[1], Verdict::Duplicate);
        assert_eq!(
            v[2],
            Verdict::Retry {
                reason: "item_429",
                counted: false
            }
        );
        assert!(
            matches!(&v[3], Verdict::Reject(r) if r.kind == "rejected" && r.status == Some(400) && r.error.contains("mapper"))
        );
        assert_eq!(
            v[4],
            Verdict::Retry {
                reason: "item_5xx",
                counted: true
            }
        );
        // The third counted retry of a max_attempts = 3 policy is the last.
        assert!(
            matches!(&v[5], Verdict::Reject(r) if r.kind == "retries_exhausted" && r.reason == "retries exhausted" && r.error == "still failing")
        );
        // A per-item 429 is pushback: never exhausted, however many.
        assert_eq!(
            v[6],
            Verdict::Retry {
                reason: "item_429",
                counted: false
            }
        );

        // Answers that do not match the events sent prove nothing.
        let short = BodyVerdict::PerItem(vec![ItemAnswer::new(201, None)]);
        for v in verdicts(p.classify(
            &Outcome::Success {
                status: 200,
                body: &short,
            },
            &[0, 0],
        )) {
            assert!(matches!(v, Verdict::Retry { counted: true, .. }), "{v:?}");
        }
        let garbage = BodyVerdict::Unreadable("not JSON".into());
        let v = verdicts(p.classify(
            &Outcome::Success {
                status: 200,
                body: &garbage,
            },
            &[0],
        ));
        assert!(matches!(v[0], Verdict::Retry { counted: true, .. }));
    }

    #[test]
    fn partial_success_rejects_the_whole_request_with_the_count() {
        let body = BodyVerdict::PartiallyRejected {
            rejected: 2,
            message: "too old".into(),
        };
        let v = verdicts(policy().classify(
            &Outcome::Success {
                status: 200,
                body: &body,
            },
            &[0; 5],
        ));
        assert_eq!(v.len(), 5);
        for v in v {
            let Verdict::Reject(r) = v else { panic!() };
            assert_eq!(
                r.reason,
                "partially rejected: 2 of 5; receiver did not say which"
            );
            assert_eq!(r.error, "too old");
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            parse_retry_after(&later, now),
            Some(Duration::from_secs(30))
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(parse_retry_after(&past, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
    }

    /// The waits, measured on tokio's paused clock: each one within its
    /// exponential ceiling, the ceiling capped, Retry-After honoured (and
    /// capped), held requests slow.
    #[tokio::test(start_paused = true)]
    async fn backoff_on_paused_time() {
        let p = policy();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut total = Duration::ZERO;
        for attempt in 1..=12u32 {
            let d = p.backoff(attempt, None, &mut rng);
            let ceiling =
                (Duration::from_millis(100) * 2u32.pow(attempt - 1)).min(Duration::from_secs(10));
            assert!(d <= ceiling, "attempt {attempt}: {d:?} > {ceiling:?}");
            let start = tokio::time::Instant::now();
            tokio::time::sleep(d).await;
            // The paused clock moves in whole milliseconds.
            let slept = start.elapsed();
            assert!(
                slept >= d && slept <= d + Duration::from_millis(1),
                "{slept:?} for {d:?}"
            );
            total += d;
        }
        // Full jitter: the draws are spread, not all at the ceiling.
        assert!(total < Duration::from_secs(12 * 10));
        assert!(total > Duration::from_secs(1));

        let start = tokio::time::Instant::now();
        let d = p.backoff(1, Some(Duration::from_secs(7)), &mut rng);
        tokio::time::sleep(d).await;
        assert!(start.elapsed() >= Duration::from_secs(7));
        // A huge Retry-After is capped.
        let d = p.backoff(1, Some(Duration::from_secs(86_400)), &mut rng);
        assert_eq!(d, RETRY_AFTER_CAP);

        for _ in 0..100 {
            let h = p.hold(&mut rng);
            assert!(h >= Duration::from_secs(5) && h <= Duration::from_secs(10));
        }
    }
}
