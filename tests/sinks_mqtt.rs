//! The `mqtt` sink, end to end: the real `holdfast` (an `otlp_http` source,
//! `mqtt` sinks) and a real mosquitto on loopback ports
//! (`tests/common/mosquitto.rs`), read back by a persistent `mosquitto_sub`
//! session.
//!
//! Every record posted carries its number in its body (`R00042`); the
//! checks read the numbers back from the subscriber's lines (one line per
//! message received, `TOPIC PAYLOAD`), so that each story says what
//! arrived, how often, in which order, and what went to the quarantine.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/mosquitto.rs"]
mod mosquitto;
#[path = "common/require.rs"]
mod require;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use daemon::{free_port, holdfast, wait_for, Agent};
use mosquitto::{Broker, BrokerOptions, TlsMode};

const SINK: &str = "broker";
const ARRIVE: Duration = Duration::from_secs(60);

/// Records `first..first + n` as one OTLP/JSON request of `host`, each
/// body `R<number>` and attribute `zone`.
fn request(host: &str, zone: &str, first: u64, n: u64) -> Vec<u8> {
    let records: Vec<serde_json::Value> = (first..first + n)
        .map(|i| {
            serde_json::json!({
                "timeUnixNano": (1_700_000_000_000_000_000u64 + i).to_string(),
                "body": {"stringValue": format!("R{i:05}")},
                "attributes": [{"key": "zone", "value": {"stringValue": zone}}],
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "resourceLogs": [{
            "resource": {"attributes": [{"key": "host.name", "value": {"stringValue": host}}]},
            "scopeLogs": [{"logRecords": records}],
        }]
    }))
    .unwrap()
}

fn post(addr: SocketAddr, body: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Posts records `first..first + n` of `host` in requests of 250.
fn post_records(addr: SocketAddr, host: &str, zone: &str, first: u64, n: u64) {
    let mut i = first;
    while i < first + n {
        let k = 250.min(first + n - i);
        assert_eq!(
            post(addr, &request(host, zone, i, k)),
            200,
            "posting R{i:05}"
        );
        i += k;
    }
}

/// The agent: an OTLP source and the sinks in `sinks` (TOML tables).
fn agent(sinks: &str) -> (Agent, SocketAddr) {
    let source: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut a = Agent::new(&format!(
        "[sources.app]\ntype = \"otlp_http\"\nlisten = \"{source}\"\n\n{sinks}"
    ));
    a.start();
    a.wait_ready();
    (a, source)
}

/// An `mqtt` sink table named `name` to `url`, with `own` keys.
fn sink(name: &str, url: &str, own: &str) -> String {
    format!(
        "[sinks.{name}]\ntype = \"mqtt\"\ninputs = [\"app\"]\nurl = \"{url}\"\n\
         batch_timeout = \"20ms\"\nbackoff_initial = \"50ms\"\nbackoff_max = \"1s\"\n\
         reconnect_backoff_initial = \"50ms\"\nreconnect_backoff_max = \"500ms\"\n{own}\n"
    )
}

/// Per topic, the record numbers in the order they arrived, read from the
/// JSON documents (`message` is the body).
fn by_topic(lines: &[String]) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for l in lines {
        let (topic, payload) = l.split_once(' ').expect("TOPIC PAYLOAD");
        let doc: serde_json::Value = serde_json::from_str(payload)
            .unwrap_or_else(|e| panic!("not a JSON document ({e}): {payload}"));
        let n = doc["message"]
            .as_str()
            .and_then(|m| m.strip_prefix('R'))
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("no record number: {payload}"));
        assert_eq!(
            doc["event_id"].as_str().map(str::len),
            Some(32),
            "the document carries the event id: {payload}"
        );
        out.entry(topic.to_string()).or_default().push(n);
    }
    out
}

/// Every number of `0..n` at least once; how many arrived more than once.
fn each_at_least_once(numbers: impl Iterator<Item = u64>, n: u64) -> u64 {
    let mut seen = vec![0u32; n as usize];
    for i in numbers {
        seen[i as usize] += 1;
    }
    let missing: Vec<usize> = (0..n as usize).filter(|&i| seen[i] == 0).collect();
    assert!(missing.is_empty(), "never arrived: {missing:?}");
    seen.iter().map(|&c| u64::from(c.saturating_sub(1))).sum()
}

fn metric(a: &Agent, sample: &str) -> u64 {
    a.metric(sample).unwrap_or(0.0) as u64
}

fn wait_lag_zero(a: &Agent, sink: &str) {
    wait_for(&format!("sink {sink} to commit everything"), ARRIVE, || {
        (metric(
            a,
            &format!("holdfast_consumer_lag_events{{sink=\"{sink}\"}}"),
        ) == 0)
            .then_some(())
    });
}

fn quarantine_list(a: &Agent, sink: &str) -> String {
    let data = a.data_dir();
    let list = holdfast(&[
        "quarantine",
        "list",
        "--data-dir",
        data.to_str().unwrap(),
        "--sink",
        sink,
        "--json",
    ]);
    String::from_utf8_lossy(&list.stdout).into_owned()
}

#[test]
fn every_event_once_in_order_per_topic_from_resource_and_attribute_fields() {
    if !mosquitto::available(
        "every_event_once_in_order_per_topic_from_resource_and_attribute_fields",
    ) {
        return;
    }
    let broker = Broker::start(BrokerOptions::default());
    let sub = broker.subscriber("t/#", 1, "5");
    let json = broker.subscriber("j/#", 1, "5");
    let (mut a, source) = agent(&format!(
        "{}{}",
        sink(
            SINK,
            &broker.url(),
            "topic = \"t/{resource.host.name}/{attributes.zone}\""
        ),
        sink(
            "otlp",
            &broker.url(),
            "topic = \"j/{resource.host.name}\"\npayload = \"otlp_json\"\nprotocol = \"3.1.1\""
        ),
    ));
    for round in 0..4 {
        post_records(source, "gw-1", "north", round * 500, 500);
        post_records(source, "GW 2", "south", 2000 + round * 500, 500);
    }
    let lines = sub.wait_for(4000, ARRIVE);
    let topics = by_topic(&lines);
    // Fields render lower-cased, anything but a-z 0-9 - _ as _.
    assert_eq!(
        topics.keys().collect::<Vec<_>>(),
        ["t/gw-1/north", "t/gw_2/south"]
    );
    assert_eq!(topics["t/gw-1/north"], (0..2000).collect::<Vec<_>>());
    assert_eq!(topics["t/gw_2/south"], (2000..4000).collect::<Vec<_>>());
    // The OTLP/JSON sink (MQTT 3.1.1): one export request per event.
    let otlp = json.wait_for(4000, ARRIVE);
    let mut numbers = Vec::new();
    for l in &otlp {
        let (_, payload) = l.split_once(' ').unwrap();
        let v: serde_json::Value = serde_json::from_str(payload).unwrap();
        let records = &v["resourceLogs"][0]["scopeLogs"][0]["logRecords"];
        assert_eq!(records.as_array().map(Vec::len), Some(1), "{payload}");
        let body = records[0]["body"]["stringValue"].as_str().unwrap();
        numbers.push(body[1..].parse::<u64>().unwrap());
    }
    assert_eq!(each_at_least_once(numbers.into_iter(), 4000), 0);
    wait_lag_zero(&a, SINK);
    wait_lag_zero(&a, "otlp");
    assert_eq!(
        metric(
            &a,
            &format!("holdfast_sink_sent_events_total{{sink=\"{SINK}\"}}")
        ),
        4000
    );
    assert_eq!(
        metric(
            &a,
            &format!("holdfast_mqtt_sink_connected{{sink=\"{SINK}\"}}")
        ),
        1
    );
    // mosquitto's default max_inflight_messages is its Receive Maximum.
    assert_eq!(
        metric(
            &a,
            &format!("holdfast_mqtt_sink_in_flight_limit{{sink=\"{SINK}\"}}")
        ),
        20
    );
    a.stop();
}

#[test]
fn a_broker_restart_during_delivery_loses_nothing() {
    if !mosquitto::available("a_broker_restart_during_delivery_loses_nothing") {
        return;
    }
    // The subscriber's queue holds everything while it reconnects (the
    // default, 1000, would make the broker drop what the sink delivered).
    let mut broker = Broker::start(BrokerOptions {
        max_queued_messages: Some(100_000),
        ..Default::default()
    });
    // MQTT 3.1.1: the broker's max_inflight_messages (20) bounds what it
    // has in flight to the subscriber, and so what it hands it again after
    // the restart (a v5 subscriber's Receive Maximum would replace it).
    let sub = broker.subscriber("t/#", 1, "3.1.1");
    let (mut a, source) = agent(&sink(
        SINK,
        &broker.url(),
        "topic = \"t/{resource.host.name}\"\nmax_in_flight = 200",
    ));
    post_records(source, "gw", "z", 0, 6000);
    sub.wait_for(1000, ARRIVE);
    // Stopped and started on the same port and persistence, while the
    // sink has publishes in flight: they are sent again after the
    // reconnect, and the subscriber's queue survives.
    broker.restart();
    post_records(source, "gw", "z", 6000, 2000);
    wait_lag_zero(&a, SINK);
    let lines = wait_for("the 8000 records at the subscriber", ARRIVE, || {
        let l = sub.lines();
        let mut n: Vec<u64> = by_topic(&l).into_values().flatten().collect();
        n.sort_unstable();
        n.dedup();
        (n.len() == 8000).then_some(l)
    });
    let topics = by_topic(&lines);
    let dups = each_at_least_once(topics.values().flatten().copied(), 8000);
    // Repeats: at most the sink's publishes in flight when the broker went
    // down (max_in_flight), and the broker's own to the subscriber (20).
    eprintln!("broker restart: {dups} repeats");
    assert!(dups <= 200 + 20, "{dups} repeats");
    assert!(
        metric(
            &a,
            &format!("holdfast_mqtt_sink_connection_errors_total{{sink=\"{SINK}\"}}")
        ) >= 1
    );
    a.stop();
}

#[test]
fn holdfast_killed_twice_during_delivery_loses_nothing() {
    if !mosquitto::available("holdfast_killed_twice_during_delivery_loses_nothing") {
        return;
    }
    let broker = Broker::start(BrokerOptions::default());
    let sub = broker.subscriber("t/#", 1, "5");
    let window = 100;
    let (mut a, source) = agent(&sink(
        SINK,
        &broker.url(),
        &format!("topic = \"t/x\"\nmax_in_flight = {window}"),
    ));
    post_records(source, "gw", "z", 0, 6000);
    for seen in [500, 2500] {
        sub.wait_for(seen, ARRIVE);
        a.kill9();
        a.start();
        a.wait_ready();
    }
    post_records(source, "gw", "z", 6000, 1000);
    wait_lag_zero(&a, SINK);
    let lines = sub.wait_for(7000, ARRIVE);
    let dups = each_at_least_once(by_topic(&lines).values().flatten().copied(), 7000);
    // Each kill repeats at most the batch in flight and the commits the
    // log had not written yet: a window, and one more, per kill.
    eprintln!("two kill -9: {dups} repeats (window {window})");
    assert!(dups <= 2 * 2 * window, "{dups} repeats");
    a.stop();
}

#[test]
fn an_acl_refusal_quarantines_exactly_those_events_under_mqtt_5() {
    if !mosquitto::available("an_acl_refusal_quarantines_exactly_those_events_under_mqtt_5") {
        return;
    }
    let broker = Broker::start(BrokerOptions {
        passwords: vec![("hf".into(), "pw".into())],
        acl: Some("user hf\ntopic readwrite t/open/#\n".into()),
        ..Default::default()
    });
    let sub = broker.subscriber("t/#", 1, "5");
    let pass = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(pass.path(), "pw\n").unwrap();
    let login = format!(
        "username = \"hf\"\npassword_file = \"{}\"\ntopic = \"t/{{attributes.zone}}/x\"",
        pass.path().display()
    );
    let (mut a, source) = agent(&format!(
        "{}{}",
        sink(SINK, &broker.url(), &login),
        sink(
            "old",
            &broker.url(),
            &format!("{login}\nprotocol = \"3.1.1\"")
        ),
    ));
    post_records(source, "gw", "open", 0, 300);
    post_records(source, "gw", "secret", 300, 50);
    post_records(source, "gw", "open", 350, 300);
    wait_lag_zero(&a, SINK);
    wait_lag_zero(&a, "old");
    let q = |sink: &str| {
        metric(
            &a,
            &format!(
                "holdfast_sink_quarantined_events_total{{sink=\"{sink}\",reason=\"rejected\"}}"
            ),
        )
    };
    assert_eq!(q(SINK), 50);
    let listed = quarantine_list(&a, SINK);
    assert_eq!(
        listed.matches("0x87 not authorized").count(),
        50,
        "{listed}"
    );
    // MQTT 3.1.1 has no reason codes: mosquitto drops the refused
    // publishes and acknowledges them, so they count as delivered.
    assert_eq!(q("old"), 0);
    assert_eq!(
        metric(&a, "holdfast_sink_sent_events_total{sink=\"old\"}"),
        650
    );
    // Each allowed record twice (both sinks), no refused one.
    let lines = sub.wait_for(1200, ARRIVE);
    let topics = by_topic(&lines);
    assert_eq!(topics.keys().collect::<Vec<_>>(), ["t/open/x"]);
    let mut got = topics["t/open/x"].clone();
    got.sort_unstable();
    let open: Vec<u64> = (0..300).chain(350..650).flat_map(|i| [i, i]).collect();
    assert_eq!(
        got, open,
        "the refused records never reached the subscriber"
    );
    a.stop();
}

#[test]
fn tls_with_a_client_certificate_and_a_wrong_password() {
    if !mosquitto::available("tls_with_a_client_certificate_and_a_wrong_password") {
        return;
    }
    let broker = Broker::start(BrokerOptions {
        tls: Some(TlsMode {
            require_certificate: true,
        }),
        passwords: vec![("hf".into(), "right".into())],
        acl: Some("user hf\ntopic readwrite #\n".into()),
        ..Default::default()
    });
    let pki = broker.pki.clone().unwrap();
    let sub = broker.subscriber("t/#", 1, "5");
    let pass = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(pass.path(), "wrong\n").unwrap();
    let (mut a, source) = agent(&sink(
        SINK,
        &broker.tls_url(),
        &format!(
            "topic = \"t/tls\"\nusername = \"hf\"\npassword_file = \"{}\"\n\
             tls.ca_file = \"{}\"\ntls.client_cert_file = \"{}\"\ntls.client_key_file = \"{}\"",
            pass.path().display(),
            pki.ca.display(),
            pki.client_cert.display(),
            pki.client_key.display()
        ),
    ));
    post_records(source, "gw", "z", 0, 200);
    wait_for("the refusal to be logged", ARRIVE, || {
        a.stderr()
            .contains("the MQTT broker refused the credentials")
            .then_some(())
    });
    wait_for("the batch held as a 401", ARRIVE, || {
        (metric(
            &a,
            &format!("holdfast_sink_auth_failures_total{{sink=\"{SINK}\"}}"),
        ) > 0)
            .then_some(())
    });
    // Nothing committed, nothing quarantined, nothing published.
    assert_eq!(
        metric(
            &a,
            &format!("holdfast_consumer_lag_events{{sink=\"{SINK}\"}}")
        ),
        200
    );
    assert_eq!(
        metric(
            &a,
            &format!(
                "holdfast_sink_quarantined_events_total{{sink=\"{SINK}\",reason=\"rejected\"}}"
            )
        ),
        0
    );
    assert!(sub.lines().is_empty());
    // Fixed in the file: read again at the next connect.
    std::fs::write(pass.path(), "right\n").unwrap();
    let lines = sub.wait_for(200, ARRIVE);
    assert_eq!(
        each_at_least_once(by_topic(&lines).values().flatten().copied(), 200),
        0
    );
    wait_lag_zero(&a, SINK);
    a.stop();
}
