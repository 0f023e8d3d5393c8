//! A network sink proves which device it is with a client certificate
//! (mTLS), through the real binary, against a receiver that requires a
//! certificate signed by a test CA: without one the sink is refused and
//! keeps every event (retried, like a 401), with one every event arrives
//! once, and when the certificate files are replaced (a bad pair first,
//! then a good one) the sink goes on with the old certificate until the new
//! pair loads, then presents the new one — without a restart.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/identity.rs"]
mod identity;

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use daemon::{holdfast, wait_for, Agent};
use identity::{cert_der, mtls_acceptor, Pki, Receiver};

const DEADLINE: Duration = Duration::from_secs(60);

fn append(path: &Path, lines: impl IntoIterator<Item = String>) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}

/// An agent tailing `app.log` into an `otlp_http` sink at `receiver`,
/// trusting the test CA, with `extra` keys in the sink's table.
fn agent(pki: &Pki, receiver: &Receiver, extra: &str) -> Agent {
    let a = Agent::new("");
    let body = format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\n\
         scan_interval = \"100ms\"\n\n\
         [sinks.central]\ntype = \"otlp_http\"\ninputs = [\"app\"]\n\
         endpoint = \"https://{}\"\nencoding = \"json\"\ncompression = \"none\"\n\
         batch_timeout = \"50ms\"\nbackoff_initial = \"50ms\"\nbackoff_max = \"300ms\"\n\
         tls.ca_file = \"{}\"\n{extra}",
        a.path("app.log").display(),
        receiver.addr,
        pki.path("ca.pem").display(),
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    std::fs::write(a.path("app.log"), b"").unwrap();
    a
}

fn client_keys(cert: &Path, key: &Path) -> String {
    format!(
        "tls.client_cert_file = \"{}\"\ntls.client_key_file = \"{}\"\n",
        cert.display(),
        key.display()
    )
}

fn lines(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn all_arrived(r: &Receiver, lines: &[String]) -> Option<()> {
    let st = r.state();
    lines
        .iter()
        .all(|l| st.arrivals.contains_key(l))
        .then_some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_client_certificate_events_are_held_and_with_one_delivered_once() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let (cert, key) = pki.client("device", 1001);
    let receiver = Receiver::start(Some(mtls_acceptor(&pki))).await;

    let mut a = agent(&pki, &receiver, "");
    let first = lines("held", 50);
    append(&a.path("app.log"), first.clone());
    a.start();
    a.wait_ready();
    wait_for("three refused handshakes", DEADLINE, || {
        (receiver.state().refused >= 3).then_some(())
    });
    assert!(receiver.state().requests.is_empty());
    let metrics = a.metrics();
    let dropped: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("holdfast_dropped_events_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(dropped, 0.0, "{metrics}");
    // The operator reads why: the receiver asked for a certificate.
    assert!(a.stderr().contains("CertificateRequired"), "{}", a.stderr());
    assert!(a.stop().success(), "{}", a.stderr());

    // The same data directory with the certificate: the held events go.
    let text = std::fs::read_to_string(&a.config).unwrap() + &client_keys(&cert, &key);
    std::fs::write(&a.config, text).unwrap();
    let out = holdfast(&["check", "--config", a.config_arg()]);
    assert!(out.status.success(), "{out:?}");
    let second = lines("after", 50);
    append(&a.path("app.log"), second.clone());
    a.start();
    a.wait_ready();
    let all: Vec<String> = first.iter().chain(&second).cloned().collect();
    wait_for("every event at the receiver", DEADLINE, || {
        all_arrived(&receiver, &all)
    });
    assert!(a.stop().success(), "{}", a.stderr());
    let device = cert_der(&cert);
    let certs = receiver.certs_of_lines();
    for l in &all {
        assert_eq!(certs[l], vec![Some(device.clone())], "{l}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_certificate_files_are_presented_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let (old_cert, old_key) = pki.client("old", 2001);
    let (new_cert, new_key) = pki.client("new", 2002);
    let receiver = Receiver::start(Some(mtls_acceptor(&pki))).await;
    let (cert, key) = (dir.path().join("device.pem"), dir.path().join("device.key"));
    std::fs::copy(&old_cert, &cert).unwrap();
    std::fs::copy(&old_key, &key).unwrap();

    let mut a = agent(&pki, &receiver, &client_keys(&cert, &key));
    let app = a.path("app.log");
    let before = lines("before", 100);
    append(&app, before.clone());
    a.start();
    a.wait_ready();
    wait_for("the first events", DEADLINE, || {
        all_arrived(&receiver, &before)
    });

    // Half a rotation: the new certificate, with the old key. The pair does
    // not load; the sink keeps the old certificate and says why.
    let replace = |from: &Path, to: &Path| {
        let tmp = to.with_extension("tmp");
        std::fs::copy(from, &tmp).unwrap();
        std::fs::rename(&tmp, to).unwrap();
    };
    replace(&new_cert, &cert);
    let mut n = 0;
    let mut tick = |prefix: &str| {
        n += 1;
        append(&app, [format!("{prefix}-{n}")]);
    };
    wait_for("the warning about the bad pair", DEADLINE, || {
        tick("halfway");
        a.stderr()
            .contains("keeping the current client certificate")
            .then_some(())
    });

    // The rotation completes: the new pair is presented from now on.
    replace(&new_key, &key);
    let new_der = cert_der(&new_cert);
    wait_for("a request with the new certificate", DEADLINE, || {
        tick("rotating");
        let st = receiver.state();
        st.requests
            .iter()
            .any(|r| r.client_cert.as_ref() == Some(&new_der))
            .then_some(())
    });
    let after = lines("after", 100);
    append(&app, after.clone());
    wait_for("the last events", DEADLINE, || {
        all_arrived(&receiver, &after)
    });
    assert!(a.stop().success(), "{}", a.stderr());

    let old_der = cert_der(&old_cert);
    let certs = receiver.certs_of_lines();
    for l in &before {
        assert_eq!(certs[l], vec![Some(old_der.clone())], "{l}");
    }
    for l in &after {
        assert_eq!(certs[l], vec![Some(new_der.clone())], "{l}");
    }
    let st = receiver.state();
    assert!(
        st.arrivals.values().all(|&n| n == 1),
        "an event arrived twice"
    );
    assert!(
        st.requests
            .iter()
            .filter(|r| !r.lines.is_empty())
            .all(|r| r.client_cert.is_some()),
        "a request without a client certificate"
    );
    assert!(
        st.arrivals.keys().any(|l| l.starts_with("halfway")),
        "events went on during the half rotation"
    );
}

/// `holdfast check` loads the pair as `run` will: a key that does not fit
/// the certificate, and a certificate without its key, are errors naming
/// the key (and its line).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_refuses_a_client_certificate_that_cannot_be_used() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let (cert, _) = pki.client("one", 3001);
    let (_, other_key) = pki.client("two", 3002);
    let receiver = Receiver::start(None).await;

    let a = agent(&pki, &receiver, &client_keys(&cert, &other_key));
    let out = holdfast(&["check", "--config", a.config_arg()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("sinks.central.tls.client_cert_file")
            && stderr.contains("does not fit the certificate"),
        "{stderr}"
    );

    let lone = format!("tls.client_cert_file = \"{}\"\n", cert.display());
    let a = agent(&pki, &receiver, &lone);
    let out = holdfast(&["check", "--config", a.config_arg()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let text = std::fs::read_to_string(&a.config).unwrap();
    let line = text
        .lines()
        .position(|l| l.contains("client_cert_file"))
        .unwrap()
        + 1;
    assert!(
        stderr.contains(&format!(
            "holdfast.toml:{line}:24: sinks.central.tls.client_cert_file: tls.client_cert_file \
             is set but tls.client_key_file is not"
        )),
        "{stderr}"
    );
}
