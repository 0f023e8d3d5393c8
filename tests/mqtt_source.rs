//! The `mqtt` source against brokers: a scripted one that breaks
//! mid-packet (here), and mosquitto (below, through the broker harness).
//! Each test runs the real binary with a `file` sink and reads what it
//! wrote.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/file_sink_out.rs"]
mod file_sink_out;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use daemon::{wait_for, Agent};
use file_sink_out::{lines, string_attr};

/// A config body: an `mqtt` source `m` (its own keys in `source`) into a
/// `file` sink at `out/`.
fn config(agent_dir_hint: &str, source: &str) -> String {
    format!(
        "[sources.m]\ntype = \"mqtt\"\n{source}\n\n\
         [sinks.out]\ntype = \"file\"\ninputs = [\"m\"]\npath = \"{agent_dir_hint}\"\n"
    )
}

/// Reads one MQTT packet: its first byte and its body.
fn read_packet(s: &mut TcpStream) -> std::io::Result<(u8, Vec<u8>)> {
    let mut first = [0u8; 1];
    s.read_exact(&mut first)?;
    let (mut len, mut shift) = (0usize, 0);
    loop {
        let mut b = [0u8; 1];
        s.read_exact(&mut b)?;
        len |= ((b[0] & 0x7f) as usize) << shift;
        if b[0] & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    let mut body = vec![0; len];
    s.read_exact(&mut body)?;
    Ok((first[0], body))
}

/// A QoS 1 PUBLISH (MQTT 3.1.1) of `payload` on `topic` with packet id `id`.
fn publish(topic: &str, id: u16, payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend((topic.len() as u16).to_be_bytes());
    body.extend(topic.as_bytes());
    body.extend(id.to_be_bytes());
    body.extend(payload);
    let mut p = vec![0x32];
    let mut len = body.len();
    loop {
        let mut b = (len % 128) as u8;
        len /= 128;
        if len > 0 {
            b |= 0x80;
        }
        p.push(b);
        if len == 0 {
            break;
        }
    }
    p.extend(body);
    p
}

/// Answers a CONNECT and a SUBSCRIBE as a 3.1.1 broker does.
fn accept_session(s: &mut TcpStream) {
    let (kind, _) = read_packet(s).expect("CONNECT");
    assert_eq!(kind >> 4, 1, "CONNECT first");
    s.write_all(&[0x20, 0x02, 0x01, 0x00]).unwrap(); // CONNACK, session present
    let (kind, body) = read_packet(s).expect("SUBSCRIBE");
    assert_eq!(kind >> 4, 8, "then SUBSCRIBE");
    s.write_all(&[0x90, 0x03, body[0], body[1], 0x01]).unwrap(); // SUBACK, QoS 1
}

/// A broker that breaks mid-packet: the first connection gets one whole
/// PUBLISH (whose PUBACK it waits for), then half of another, then is
/// closed; the second gets that message whole. The message acknowledged is
/// stored; the half one is neither stored nor acknowledged, and arrives
/// whole after the reconnect.
#[test]
fn a_broker_that_drops_the_connection_mid_packet_loses_nothing_acknowledged() {
    let broker = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = broker.local_addr().unwrap().port();
    let (acked, acks) = mpsc::channel();
    let (finished, done) = mpsc::channel::<()>();
    let script = std::thread::spawn(move || {
        let (mut s, _) = broker.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        accept_session(&mut s);
        s.write_all(&publish("devices/a/telemetry", 1, br#"{"n": 1}"#))
            .unwrap();
        loop {
            let (kind, body) = read_packet(&mut s).expect("PUBACK");
            if kind >> 4 == 4 {
                acked.send(u16::from_be_bytes([body[0], body[1]])).unwrap();
                break;
            }
        }
        let second = publish("devices/a/telemetry", 2, br#"{"n": 2}"#);
        s.write_all(&second[..second.len() / 2]).unwrap();
        drop(s);
        let (mut s, _) = broker.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        accept_session(&mut s);
        let mut again = publish("devices/a/telemetry", 2, br#"{"n": 2}"#);
        again[0] |= 0x08; // DUP: the broker sends it again
        s.write_all(&again).unwrap();
        loop {
            let (kind, body) = read_packet(&mut s).expect("PUBACK");
            if kind >> 4 == 4 {
                acked.send(u16::from_be_bytes([body[0], body[1]])).unwrap();
                break;
            }
        }
        // Held open until the test is done with the agent.
        let _ = done.recv_timeout(Duration::from_secs(60));
    });
    let mut agent = Agent::new("");
    let out = agent.path("out");
    std::fs::write(
        &agent.config,
        std::fs::read_to_string(&agent.config).unwrap()
            + &config(
                out.to_str().unwrap(),
                &format!(
                    "url = \"mqtt://127.0.0.1:{port}\"\nprotocol = \"3.1.1\"\ntopics = [\"devices/#\"]\n\
                     reconnect_backoff_initial = \"50ms\"\nreconnect_backoff_max = \"100ms\""
                ),
            ),
    )
    .unwrap();
    agent.start();
    agent.wait_ready();
    assert_eq!(acks.recv_timeout(Duration::from_secs(30)), Ok(1));
    assert_eq!(acks.recv_timeout(Duration::from_secs(30)), Ok(2));
    let stored = wait_for("both messages in the sink", Duration::from_secs(30), || {
        let l = lines(&out);
        (l.len() >= 2).then_some(l)
    });
    assert_eq!(stored.len(), 2, "{stored:?}");
    let dup: Vec<Option<String>> = stored
        .iter()
        .map(|v| {
            v["record"]["attributes"]
                .as_array()
                .and_then(|a| a.iter().find(|kv| kv["key"] == "mqtt.dup"))
                .map(|kv| kv["value"].to_string())
        })
        .collect();
    assert_eq!(dup[0], None);
    assert!(dup[1].is_some(), "the redelivery is marked: {stored:?}");
    assert_eq!(
        string_attr(&stored[0], "mqtt.topic").as_deref(),
        Some("devices/a/telemetry")
    );
    let lost = agent
        .metric("holdfast_mqtt_source_connection_errors_total{source=\"m\",reason=\"lost\"}")
        .unwrap_or(0.0);
    assert!(lost >= 1.0, "the broken connection is counted");
    assert!(
        agent.stderr().contains("the MQTT connection was lost"),
        "{}",
        agent.stderr()
    );
    agent.stop();
    finished.send(()).unwrap();
    script.join().unwrap();
}
