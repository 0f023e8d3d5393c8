//! What every answer means for every event: [`Policy::classify`] turns an
//! [`Outcome`] into a [`Decision`], per event a [`Verdict`] (the table in
//! `mod.rs`).

use std::time::Duration;

use super::policy::Policy;
use crate::sinks::delivery::transport::{BodyVerdict, ItemAnswer, TransportKind};

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
    /// A refusal saying some events can never be stored, not which
    /// (`reason`, the rejection's kind: `too_old`, `out_of_order`).
    SomeRefused {
        status: u16,
        reason: &'static str,
        error: &'a str,
    },
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
    /// Send the events again in two halves: 413 with more than one event
    /// (`too_large_split`), or a refusal of some unknown events
    /// (`refused_split`), to find them.
    Split { reason: &'static str },
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
                413 if n > 1 => Decision::Split {
                    reason: "too_large_split",
                },
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
            Outcome::SomeRefused { .. } if n > 1 => Decision::Split {
                reason: "refused_split",
            },
            Outcome::SomeRefused {
                status,
                reason,
                error,
            } => all(Verdict::Reject(Rejection {
                kind: reason,
                reason: format!("refused by the receiver (HTTP {status}): {reason}"),
                status: Some(status),
                error: error.to_string(),
            })),
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
}

fn status_reason(status: u16) -> &'static str {
    match status {
        408 => "http_408",
        429 => "http_429",
        _ => "http_5xx",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy::for_tests()
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
        assert!(matches!(
            p.classify(&status(413), &[0, 0]),
            Decision::Split {
                reason: "too_large_split"
            }
        ));
        let v = verdicts(p.classify(&status(413), &[0]));
        assert!(matches!(&v[0], Verdict::Reject(r) if r.kind == "too_large"));
    }

    #[test]
    fn a_refusal_of_unknown_events_splits_until_each_is_alone() {
        let p = policy();
        let refused = Outcome::SomeRefused {
            status: 400,
            reason: "too_old",
            error: "out of bounds",
        };
        assert!(matches!(
            p.classify(&refused, &[0, 0, 0]),
            Decision::Split {
                reason: "refused_split"
            }
        ));
        let v = verdicts(p.classify(&refused, &[0]));
        let Verdict::Reject(r) = &v[0] else { panic!() };
        assert_eq!(
            (r.kind, r.status, r.error.as_str()),
            ("too_old", Some(400), "out of bounds")
        );
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
}
