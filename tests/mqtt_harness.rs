//! Proves the MQTT test harness (tests/common/mosquitto.rs) against the
//! real mosquitto and paho-mqtt, before the mqtt source's and sink's tests
//! rely on it: delivery to a persistent `mosquitto_sub`, TLS with client
//! certificates, ACL refusals as paho sees them, and a graceful broker
//! restart that loses nothing acknowledged.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/mosquitto.rs"]
mod mosquitto;
#[path = "common/require.rs"]
mod require;

use std::collections::BTreeSet;
use std::time::Duration;

use mosquitto::{Broker, BrokerOptions, Paho, PahoTls, TlsMode};

const ARRIVE: Duration = Duration::from_secs(30);

/// The distinct `(publisher, seq)` of the JSON payloads among `lines`.
fn numbered(lines: &[String]) -> BTreeSet<(u64, u64)> {
    lines
        .iter()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(_, payload)| serde_json::from_str::<serde_json::Value>(payload).ok())
        .filter_map(|v| Some((v["publisher"].as_u64()?, v["seq"].as_u64()?)))
        .collect()
}

fn every(publishers: u64, messages: u64) -> BTreeSet<(u64, u64)> {
    (0..publishers)
        .flat_map(|p| (0..messages).map(move |i| (p, i)))
        .collect()
}

#[test]
fn paho_publishes_reach_a_persistent_subscriber() {
    if !mosquitto::available("paho_publishes_reach_a_persistent_subscriber") {
        return;
    }
    let broker = Broker::start(BrokerOptions::default());
    for version in ["5", "3.1.1"] {
        let topic = format!("v{version}/{{p}}/telemetry");
        let sub = broker.subscriber(&format!("v{version}/#"), 1, version);
        let summary = broker.publish_with_paho(&Paho {
            version,
            publishers: 2,
            messages: 100,
            topic,
            client_prefix: format!("dev-v{version}"),
            ..Paho::default()
        });
        assert!(summary.finished, "{summary:?}");
        assert_eq!(summary.acked, 200, "{summary:?}");
        assert_eq!(summary.per_publisher.values().sum::<u64>(), 200);
        let lines = sub.wait_for(200, ARRIVE);
        assert_eq!(numbered(&lines), every(2, 100), "MQTT {version}");
    }
}

#[test]
fn tls_takes_the_test_ca_client_cert_and_refuses_another() {
    if !mosquitto::available("tls_takes_the_test_ca_client_cert_and_refuses_another") {
        return;
    }
    let broker = Broker::start(BrokerOptions {
        tls: Some(TlsMode {
            require_certificate: true,
        }),
        ..BrokerOptions::default()
    });
    let sub = broker.subscriber("devices/#", 1, "5");
    let ok = broker.publish_with_paho(&Paho {
        tls: Some(PahoTls::TestCa),
        messages: 20,
        ..Paho::default()
    });
    assert_eq!(ok.acked, 20, "{ok:?}");
    assert_eq!(numbered(&sub.wait_for(20, ARRIVE)), every(1, 20));

    for (tls, prefix) in [
        (PahoTls::OtherCa, "other-ca"),
        (PahoTls::Anonymous, "no-cert"),
    ] {
        let refused = broker.publish_with_paho(&Paho {
            tls: Some(tls),
            messages: 5,
            client_prefix: prefix.into(),
            deadline: Duration::from_secs(4),
            ..Paho::default()
        });
        assert!(!refused.finished, "{tls:?}: {refused:?}");
        assert_eq!(refused.acked, 0, "{tls:?}: {refused:?}");
        assert!(!refused.connect_errors.is_empty(), "{tls:?}: {refused:?}");
    }
}

#[test]
fn acl_refused_topic_is_a_0x87_puback_under_mqtt5() {
    if !mosquitto::available("acl_refused_topic_is_a_0x87_puback_under_mqtt5") {
        return;
    }
    let broker = Broker::start(BrokerOptions {
        passwords: vec![
            ("reader".into(), "reader-secret".into()),
            ("device".into(), "device-secret".into()),
        ],
        acl: Some(
            "user device\ntopic write devices/0/#\n\nuser reader\ntopic read devices/#\n".into(),
        ),
        ..BrokerOptions::default()
    });
    // The subscriber logs in as the first user, `reader`.
    let sub = broker.subscriber("devices/#", 1, "5");
    let login = |version: &'static str, prefix: &str| Paho {
        version,
        publishers: 2,
        messages: 10,
        username: Some("device".into()),
        password: Some("device-secret".into()),
        client_prefix: prefix.into(),
        ..Paho::default()
    };
    let v5 = broker.publish_with_paho(&login("5", "acl5"));
    assert!(v5.finished, "{v5:?}");
    assert_eq!(v5.acked, 10, "{v5:?}");
    assert_eq!(v5.refused.len(), 10, "{v5:?}");
    assert!(
        v5.refused
            .iter()
            .all(|r| r.code == 0x87 && r.publisher == 1),
        "{v5:?}"
    );
    // MQTT 3.1.1 has no reason code: a plain PUBACK, the message dropped.
    let v3 = broker.publish_with_paho(&login("3.1.1", "acl3"));
    assert_eq!(v3.acked, 20, "{v3:?}");
    assert!(v3.refused.is_empty(), "{v3:?}");
    let lines = sub.wait_for(20, ARRIVE);
    assert!(
        numbered(&lines).iter().all(|(p, _)| *p == 0),
        "a refused message arrived: {lines:?}"
    );
}

#[test]
fn restart_during_publishing_loses_nothing_acknowledged() {
    if !mosquitto::available("restart_during_publishing_loses_nothing_acknowledged") {
        return;
    }
    let mut broker = Broker::start(BrokerOptions::default());
    let sub = broker.subscriber("devices/#", 1, "5");
    let run = broker.spawn_paho(&Paho {
        publishers: 2,
        messages: 2000,
        inflight: 5,
        ..Paho::default()
    });
    daemon::wait_for("some messages before the restart", ARRIVE, || {
        (sub.lines().len() >= 100).then_some(())
    });
    broker.restart();
    let summary = run.wait();
    assert!(summary.finished, "{summary:?}");
    assert_eq!(summary.acked, 4000, "{summary:?}");
    assert!(summary.reconnects >= 2, "no reconnect seen: {summary:?}");
    daemon::wait_for(
        "every acknowledged message at the subscriber",
        ARRIVE,
        || (numbered(&sub.lines()) == every(2, 2000)).then_some(()),
    );
}
