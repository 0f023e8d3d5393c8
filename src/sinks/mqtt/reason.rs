//! What an MQTT 5 PUBACK reason code means for the event it acknowledges,
//! in the shared retry policy's per-event terms (`delivery/retry/`): each
//! code becomes an [`ItemAnswer`] with an HTTP-like status, and the
//! policy does the rest (deliver, retry, quarantine).
//!
//! | code | name | becomes |
//! |-----:|------|---------|
//! | 0x00 | success | delivered |
//! | 0x10 | no matching subscribers | delivered: the broker took it; nobody listens yet (a retained message, or subscribers to come) |
//! | 0x80 | unspecified error | retried with backoff, counted toward `max_attempts`, then quarantined as "retries exhausted" |
//! | 0x83 | implementation specific error | the same: a broker plugin's refusal may pass |
//! | 0x87 | not authorized | quarantined: the broker's ACL refuses this topic for this client, and the same publish will be refused again |
//! | 0x90 | topic name invalid | quarantined |
//! | 0x91 | packet identifier in use | retried without limit (a session mix-up of the broker's, not the event's fault) |
//! | 0x97 | quota exceeded | retried without limit, with backoff: pushback, like an HTTP 429 |
//! | 0x99 | payload format invalid | quarantined |
//!
//! MQTT 3.1.1 has no reason codes: its PUBACK always means delivered, and
//! a broker that refuses a publish (mosquitto's ACL) drops it silently and
//! still acknowledges it, so under 3.1.1 refused events are counted as
//! delivered (`docs/sinks-mqtt.md`). No other code may appear in a PUBACK
//! (rumqttc closes the connection on one).

use crate::sinks::delivery::transport::ItemAnswer;

/// A PUBACK's reason code, as its number.
pub(super) type Code = u8;

/// The code's name in the MQTT 5 specification (section 3.4.2.1), for
/// logs and the quarantine.
pub(super) fn name(code: Code) -> &'static str {
    match code {
        0x00 => "success",
        0x10 => "no matching subscribers",
        0x80 => "unspecified error",
        0x83 => "implementation specific error",
        0x87 => "not authorized",
        0x90 => "topic name invalid",
        0x91 => "packet identifier in use",
        0x97 => "quota exceeded",
        0x99 => "payload format invalid",
        _ => "unknown reason code",
    }
}

/// The per-event answer for a PUBACK with `code` (and the broker's
/// reason string, when it sent one).
pub(super) fn answer(code: Code, reason_string: Option<&str>) -> ItemAnswer {
    let status = match code {
        0x00 | 0x10 => 201,
        0x80 | 0x83 => 500,
        0x91 | 0x97 => 429,
        0x87 => 403,
        // 0x90, 0x99 and anything the specification does not list for a
        // PUBACK: the event itself is refused.
        _ => 400,
    };
    let error = (status != 201).then(|| {
        let mut text = format!("MQTT PUBACK 0x{code:02x} {}", name(code));
        if let Some(r) = reason_string.filter(|r| !r.is_empty()) {
            text.push_str(": ");
            text.push_str(r);
        }
        text
    });
    ItemAnswer { status, error }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::delivery::retry::{Decision, Outcome, Policy, Verdict};
    use crate::sinks::delivery::transport::BodyVerdict;
    use std::time::Duration;

    /// What the shared policy makes of each code, on a first attempt.
    fn verdict(code: Code) -> Verdict {
        let policy = Policy {
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(1),
            max_attempts: 5,
        };
        let body = BodyVerdict::PerItem(vec![answer(code, None)]);
        let outcome = Outcome::Success {
            status: 200,
            body: &body,
        };
        match policy.classify(&outcome, &[0]) {
            Decision::PerEvent { mut verdicts, .. } => verdicts.remove(0),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn codes_below_0x80_deliver_and_the_table_decides_the_rest() {
        assert_eq!(verdict(0x00), Verdict::Delivered);
        assert_eq!(verdict(0x10), Verdict::Delivered);
        for code in [0x87, 0x90, 0x99] {
            let Verdict::Reject(r) = verdict(code) else {
                panic!("0x{code:02x} is not quarantined");
            };
            assert!(r.error.contains(name(code)), "{r:?}");
        }
        for code in [0x91, 0x97] {
            assert!(
                matches!(verdict(code), Verdict::Retry { counted: false, .. }),
                "0x{code:02x}"
            );
        }
        for code in [0x80, 0x83] {
            assert!(
                matches!(verdict(code), Verdict::Retry { counted: true, .. }),
                "0x{code:02x}"
            );
        }
    }

    #[test]
    fn a_refusal_names_its_code_and_the_brokers_words() {
        let a = answer(0x87, Some("acl: telemetry/secret"));
        assert_eq!(a.status, 403);
        assert_eq!(
            a.error.as_deref(),
            Some("MQTT PUBACK 0x87 not authorized: acl: telemetry/secret")
        );
        assert_eq!(answer(0, Some("ignored")).error, None);
    }
}
