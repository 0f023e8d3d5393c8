//! A real MQTT broker for the mqtt source's and sink's tests: Debian's
//! `mosquitto` 2.0 (installed by `.ci/run`, with `mosquitto-clients`) on a
//! loopback port the test picks (never 1883, where the package may run a
//! system broker), with its config, log and persistence file in its own
//! temporary directory, killed on drop. Start-up is waited for as a
//! condition with a deadline, never with sleeps.
//!
//! * [`Broker::start`] with [`BrokerOptions`]: a TLS listener from a test CA
//!   made with `openssl` ([`Pki`]: server certificate for 127.0.0.1 and
//!   localhost, a client certificate of that CA, and one of another CA that
//!   the broker must refuse), a password file, an ACL file,
//!   `max_inflight_messages` / `max_queued_messages`, persistence.
//! * [`Broker::restart`] stops it gracefully (SIGTERM: mosquitto writes its
//!   persistence file) and starts it on the same ports and file, so queued
//!   messages of persistent sessions survive; [`Broker::kill9`] +
//!   [`Broker::start_again`] loses what was not yet saved.
//! * [`Broker::subscriber`]: a `mosquitto_sub -c -i ID` persistent session
//!   writing `TOPIC PAYLOAD` lines to a file (for the sink's tests).
//! * [`Broker::publish_with_paho`] / [`Broker::spawn_paho`]: the devices,
//!   `tests/python/mqtt_publish.py` (paho-mqtt 2.1.0 in
//!   `target/venv-otlp-proto`, or `HOLDFAST_PYTHON_PROTO`), for the source's
//!   tests; its summary says what the broker acknowledged.
//!
//! What mosquitto 2.0.11 does (seen in tests/mqtt_harness.rs):
//! * A MQTT 5 QoS 1 PUBLISH that the ACL refuses is answered with a PUBACK
//!   with reason 0x87 (Not authorized); the connection stays up. Under
//!   MQTT 3.1.1 there is no reason code: the PUBACK is a plain success and
//!   the message is silently dropped (`acl_refused_topic_*`).
//! * `max_inflight_messages` (man mosquitto.conf): the outgoing QoS 1/2
//!   messages the broker has in transmission at once towards each client,
//!   retries included; default 20, 0 = no maximum, 1 = in-order delivery.
//!   Beyond it messages wait in the client's queue, bounded by
//!   `max_queued_messages` (default 1000; then dropped).
//!   A MQTT 5 subscriber's Receive Maximum (CONNECT property) REPLACES it
//!   for that connection's outgoing window, it is not capped by it:
//!   mosquitto's `property__process_connect` sets `msgs_out.inflight_maximum`
//!   to the client's value. Checked by hand on 2.0.11: with
//!   `max_inflight_messages 2`, a paho v5 subscriber with manual acks that
//!   never acks got 10 unacknowledged QoS 1 messages with Receive Maximum
//!   10, and 1 with Receive Maximum 1. The other way, the broker's CONNACK
//!   carries `ReceiveMaximum = max_inflight_messages` (2 there): the window
//!   a MQTT 5 publisher (paho, or the mqtt sink) may have towards the broker.
//!
//! Included with `#[path = "common/mosquitto.rs"] mod mosquitto;` after
//! `#[path = "common/daemon.rs"] mod daemon;` and
//! `#[path = "common/require.rs"] mod require;`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::daemon::{free_port, wait_for};

const START: Duration = Duration::from_secs(20);

/// The python with paho-mqtt: `HOLDFAST_PYTHON_PROTO`, else the proto venv.
pub fn python() -> PathBuf {
    match std::env::var_os("HOLDFAST_PYTHON_PROTO") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/venv-otlp-proto/bin/python"),
    }
}

/// Whether mosquitto, mosquitto_sub and paho-mqtt are here; under CI a
/// missing one fails the test (it never passes by skipping).
pub fn available(test: &str) -> bool {
    runs(test, "mosquitto", "the Debian package mosquitto")
        && runs(test, "mosquitto_passwd", "the Debian package mosquitto")
        && runs(
            test,
            "mosquitto_sub",
            "the Debian package mosquitto-clients",
        )
        && crate::require::tool(
            test,
            python().to_str().unwrap_or("python3"),
            &["-c", "import paho.mqtt"],
            "run tests/python/setup-venvs.sh (paho-mqtt in target/venv-otlp-proto; .ci/run does)",
        )
}

/// Whether `program` can be started: mosquitto's tools have no probe that
/// exits 0 (`-h` exits 1 or 3), so any exit status will do.
fn runs(test: &str, program: &str, provided_by: &str) -> bool {
    let ran = Command::new(program)
        .arg("--help")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match ran {
        Ok(_) => true,
        Err(e) => {
            crate::require::missing(test, &format!("`{program}` cannot run ({e})"), provided_by);
            false
        }
    }
}

/// A TLS listener's client-certificate policy.
#[derive(Clone, Copy, Debug)]
pub struct TlsMode {
    /// `require_certificate true`: a client without a certificate of the
    /// test CA is refused in the handshake.
    pub require_certificate: bool,
}

#[derive(Clone, Debug)]
pub struct BrokerOptions {
    /// A second listener with TLS ([`Broker::tls_url`]).
    pub tls: Option<TlsMode>,
    /// Users in a password file; if any, anonymous clients are refused.
    pub passwords: Vec<(String, String)>,
    /// The ACL file's text (`user NAME` / `topic read|write|readwrite T`).
    pub acl: Option<String>,
    pub max_inflight_messages: Option<u32>,
    pub max_queued_messages: Option<u32>,
    /// `persistence true` with the file in the broker's directory.
    pub persistence: bool,
    /// `log_type all` (every packet, what a failing test wants to read);
    /// off, the Debian package's default types (errors to information)
    /// and subscriptions, so that a benchmark does not measure the
    /// broker's debug log.
    pub log_every_packet: bool,
    /// More config lines.
    pub extra: Vec<String>,
}

impl Default for BrokerOptions {
    fn default() -> Self {
        BrokerOptions {
            tls: None,
            passwords: Vec::new(),
            acl: None,
            max_inflight_messages: None,
            max_queued_messages: None,
            persistence: true,
            log_every_packet: true,
            extra: Vec::new(),
        }
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running openssl (Debian package openssl; .ci/run installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test PKI in the broker's directory: all paths are PEM files.
#[derive(Clone, Debug)]
pub struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// Signed by `ca`: accepted.
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// Signed by another CA: refused when certificates are required.
    pub other_client_cert: PathBuf,
    pub other_client_key: PathBuf,
}

impl Pki {
    fn new(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).unwrap();
        for ca in ["ca", "other-ca"] {
            let (key, pem, subj) = (
                format!("{ca}.key"),
                format!("{ca}.pem"),
                format!("/CN=holdfast test {ca}"),
            );
            openssl(
                dir,
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                    "-nodes",
                    "-keyout",
                    &key,
                    "-out",
                    &pem,
                    "-days",
                    "2",
                    "-subj",
                    &subj,
                ],
            );
        }
        let ext = "basicConstraints=CA:FALSE\n";
        sign(
            dir,
            "ca",
            "server",
            1,
            &format!(
                "{ext}subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
            ),
        );
        sign(
            dir,
            "ca",
            "client",
            2,
            &format!("{ext}extendedKeyUsage=clientAuth\n"),
        );
        sign(
            dir,
            "other-ca",
            "other-client",
            3,
            &format!("{ext}extendedKeyUsage=clientAuth\n"),
        );
        Pki {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
            other_client_cert: dir.join("other-client.pem"),
            other_client_key: dir.join("other-client.key"),
        }
    }
}

fn sign(dir: &Path, ca: &str, name: &str, serial: u32, extensions: &str) {
    let ext = format!("{name}.ext");
    std::fs::write(dir.join(&ext), extensions).unwrap();
    let (key, csr, pem) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
    );
    let subject = format!("/CN=holdfast test {name}");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &subject,
        ],
    );
    let (ca_pem, ca_key, serial) = (format!("{ca}.pem"), format!("{ca}.key"), serial.to_string());
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-set_serial",
            &serial,
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &pem,
        ],
    );
}

/// One `mosquitto` process.
pub struct Broker {
    pub port: u16,
    pub tls_port: u16,
    pub options: BrokerOptions,
    /// Present when `options.tls` is.
    pub pki: Option<Pki>,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Broker {
    /// Writes the config (and PKI, password and ACL files) and starts the
    /// broker; returns once every listener accepts connections.
    pub fn start(options: BrokerOptions) -> Broker {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = options.tls.map(|_| Pki::new(&dir.path().join("pki")));
        let mut broker = Broker {
            port: free_port(),
            tls_port: free_port(),
            options,
            pki,
            dir,
            child: None,
        };
        broker.write_config();
        broker.start_again();
        broker
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    pub fn tls_url(&self) -> String {
        assert!(self.options.tls.is_some(), "the broker has no TLS listener");
        format!("mqtts://127.0.0.1:{}", self.tls_port)
    }

    fn write_config(&self) {
        let d = self.dir.path();
        let o = &self.options;
        let mut conf = vec![
            "per_listener_settings false".to_string(),
            format!("listener {} 127.0.0.1", self.port),
            "log_dest stderr".into(),
            "log_timestamp_format %H:%M:%S".into(),
            "connection_messages true".into(),
        ];
        if o.log_every_packet {
            conf.push("log_type all".into());
        } else {
            // `subscribe`: the subscriber waits for its line.
            for t in ["error", "warning", "notice", "information", "subscribe"] {
                conf.push(format!("log_type {t}"));
            }
        }
        // Run as root (CI), mosquitto would switch to the user `mosquitto`,
        // who cannot write the persistence file in this directory.
        conf.push(format!("user {}", whoami()));
        if o.persistence {
            conf.push("persistence true".into());
            conf.push(format!("persistence_location {}/", d.display()));
        }
        if o.passwords.is_empty() {
            conf.push("allow_anonymous true".into());
        } else {
            let file = d.join("passwords");
            for (i, (user, pass)) in o.passwords.iter().enumerate() {
                let mut cmd = Command::new("mosquitto_passwd");
                if i == 0 {
                    cmd.arg("-c");
                }
                let st = cmd
                    .arg("-b")
                    .arg(&file)
                    .arg(user)
                    .arg(pass)
                    .status()
                    .expect("running mosquitto_passwd (Debian package mosquitto)");
                assert!(st.success(), "mosquitto_passwd for {user}: {st}");
            }
            conf.push("allow_anonymous false".into());
            conf.push(format!("password_file {}", file.display()));
        }
        if let Some(acl) = &o.acl {
            let file = d.join("acl");
            std::fs::write(&file, acl).unwrap();
            conf.push(format!("acl_file {}", file.display()));
        }
        if let Some(n) = o.max_inflight_messages {
            conf.push(format!("max_inflight_messages {n}"));
        }
        if let Some(n) = o.max_queued_messages {
            conf.push(format!("max_queued_messages {n}"));
        }
        conf.extend(o.extra.iter().cloned());
        if let (Some(tls), Some(pki)) = (o.tls, &self.pki) {
            conf.push(format!("listener {} 127.0.0.1", self.tls_port));
            conf.push(format!("cafile {}", pki.ca.display()));
            conf.push(format!("certfile {}", pki.server_cert.display()));
            conf.push(format!("keyfile {}", pki.server_key.display()));
            conf.push(format!("require_certificate {}", tls.require_certificate));
        }
        std::fs::write(d.join("mosquitto.conf"), conf.join("\n") + "\n").unwrap();
    }

    /// Starts the process again (after [`Broker::kill9`]), same ports,
    /// config and persistence; waits until the listeners accept.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "the broker is running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("mosquitto.log"))
            .unwrap();
        let child = Command::new("mosquitto")
            .arg("-c")
            .arg(self.dir.path().join("mosquitto.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting mosquitto (Debian package mosquitto)");
        self.child = Some(child);
        let mut ports = vec![self.port];
        if self.options.tls.is_some() {
            ports.push(self.tls_port);
        }
        for port in ports {
            wait_for(&format!("mosquitto to accept on {port}"), START, || {
                if let Some(st) = self
                    .child
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten())
                {
                    panic!(
                        "mosquitto exited ({st}) while starting; its log:\n{}",
                        self.log()
                    );
                }
                TcpStream::connect(("127.0.0.1", port)).ok()
            });
        }
    }

    /// A graceful stop (SIGTERM, mosquitto saves its persistence file)
    /// and a start on the same port and file.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// SIGTERM and wait for the exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let st = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status()
                .expect("running kill (Debian package procps)");
            assert!(st.success());
            wait_for("mosquitto to stop after SIGTERM", START, || {
                c.try_wait().ok().flatten()
            });
        }
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The broker process's id while it runs (benchmarks read its CPU).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The broker's log (`log_type all`) across its runs.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("mosquitto.log")).unwrap_or_default()
    }

    /// A `mosquitto_sub` persistent session (`-c -i ID`, on the plain
    /// listener, as the first user of `passwords` if any) subscribed to
    /// `topic`; returns once the broker logged the subscription.
    /// `version` is "5" or "3.1.1".
    pub fn subscriber(&self, topic: &str, qos: u8, version: &str) -> Subscriber {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut s = Subscriber {
            id: format!("sub-{}-{n}", self.port),
            topic: topic.into(),
            qos,
            version: version.into(),
            port: self.port,
            login: self.options.passwords.first().cloned(),
            out: self.dir.path().join(format!("sub-{n}.out")),
            log: self.dir.path().join("mosquitto.log"),
            child: None,
        };
        s.start();
        s
    }

    /// Runs the paho devices to the end.
    pub fn publish_with_paho(&self, args: &Paho) -> PahoSummary {
        self.spawn_paho(args).wait()
    }

    /// Starts the paho devices; [`PahoRun::wait`] for the summary.
    pub fn spawn_paho(&self, args: &Paho) -> PahoRun {
        let mut cmd = Command::new(python());
        cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/mqtt_publish.py"));
        match args.tls {
            None => {
                cmd.args(["--url", &self.url()]);
            }
            Some(tls) => {
                let pki = self.pki.as_ref().expect("the broker has no TLS listener");
                cmd.args(["--url", &self.tls_url()])
                    .arg("--ca")
                    .arg(&pki.ca);
                let pair = match tls {
                    PahoTls::Anonymous => None,
                    PahoTls::TestCa => Some((&pki.client_cert, &pki.client_key)),
                    PahoTls::OtherCa => Some((&pki.other_client_cert, &pki.other_client_key)),
                };
                if let Some((cert, key)) = pair {
                    cmd.arg("--cert").arg(cert).arg("--key").arg(key);
                }
            }
        }
        cmd.args(["--version", args.version])
            .args(["--publishers", &args.publishers.to_string()])
            .args(["--messages", &args.messages.to_string()])
            .args(["--topic", &args.topic])
            .args(["--payload", &args.payload])
            .args(["--inflight", &args.inflight.to_string()])
            .args(["--client-prefix", &args.client_prefix])
            .args(["--deadline", &args.deadline.as_secs_f64().to_string()]);
        if let Some(u) = &args.username {
            cmd.args(["--username", u]);
        }
        if let Some(p) = &args.password {
            cmd.args(["--password", p]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting tests/python/mqtt_publish.py (run tests/python/setup-venvs.sh)");
        PahoRun { child }
    }
}

fn whoami() -> String {
    let out = Command::new("id").arg("-un").output().expect("running id");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Which client certificate the devices show on the TLS listener.
#[derive(Clone, Copy, Debug)]
pub enum PahoTls {
    /// No client certificate.
    Anonymous,
    /// `client_cert`, signed by the test CA.
    TestCa,
    /// `other_client_cert`, signed by another CA.
    OtherCa,
}

/// The arguments of `tests/python/mqtt_publish.py`.
#[derive(Clone, Debug)]
pub struct Paho {
    /// "5" or "3.1.1".
    pub version: &'static str,
    pub publishers: u32,
    pub messages: u32,
    /// `{p}` is the publisher's number.
    pub topic: String,
    /// json | text | bytes:N | invalid-json | oversize:N
    pub payload: String,
    pub username: Option<String>,
    pub password: Option<String>,
    pub inflight: u32,
    /// Client ids are `PREFIX-p`; the same prefix resumes the sessions.
    pub client_prefix: String,
    /// `Some` = the TLS listener.
    pub tls: Option<PahoTls>,
    /// The script exits non-zero, `finished: false`, if not done by then.
    pub deadline: Duration,
}

impl Default for Paho {
    fn default() -> Self {
        Paho {
            version: "5",
            publishers: 1,
            messages: 10,
            topic: "devices/{p}/telemetry".into(),
            payload: "json".into(),
            username: None,
            password: None,
            inflight: 10,
            client_prefix: "device".into(),
            tls: None,
            deadline: Duration::from_secs(60),
        }
    }
}

/// A PUBACK with reason >= 0x80 (MQTT 5).
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Refusal {
    pub publisher: u32,
    pub seq: u32,
    pub code: u8,
    pub reason: String,
}

/// The script's last line.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct PahoSummary {
    /// Successful PUBACKs.
    pub acked: u64,
    pub per_publisher: BTreeMap<String, u64>,
    pub reconnects: u64,
    pub refused: Vec<Refusal>,
    pub connect_errors: Vec<String>,
    /// Every publish answered before the deadline (the exit status says
    /// the same).
    pub finished: bool,
}

pub struct PahoRun {
    child: Child,
}

impl PahoRun {
    /// Waits for the script's end (it has its own deadline) and parses its
    /// summary; panics with its stderr if there is none.
    pub fn wait(self) -> PahoSummary {
        let out = self
            .child
            .wait_with_output()
            .expect("waiting for mqtt_publish.py");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().last().unwrap_or("");
        let summary: PahoSummary = serde_json::from_str(line).unwrap_or_else(|e| {
            panic!(
                "mqtt_publish.py ({}) printed no summary ({e}): stdout {stdout:?}, stderr:\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert_eq!(
            summary.finished,
            out.status.success(),
            "summary and exit status disagree"
        );
        summary
    }
}

/// A `mosquitto_sub` persistent session writing `TOPIC PAYLOAD` lines.
pub struct Subscriber {
    pub id: String,
    topic: String,
    qos: u8,
    version: String,
    port: u16,
    login: Option<(String, String)>,
    out: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Subscriber {
    fn subscribed_count(&self) -> usize {
        let needle = format!("{} {} {}", self.id, self.qos, self.topic);
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines().filter(|l| l.ends_with(&needle)).count()
    }

    fn start(&mut self) {
        assert!(self.child.is_none());
        let before = self.subscribed_count();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.out)
            .unwrap();
        let mut cmd = Command::new("mosquitto_sub");
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-t", &self.topic, "-q", &self.qos.to_string()])
            .args(["-c", "-i", &self.id, "-F", "%t %p"]);
        if self.version == "5" {
            // A MQTT 5 session ends with the connection unless it has an expiry.
            cmd.args(["-V", "mqttv5", "-x", "3600"]);
        } else {
            cmd.args(["-V", "mqttv311"]);
        }
        if let Some((u, p)) = &self.login {
            cmd.args(["-u", u, "-P", p]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .expect("starting mosquitto_sub (Debian package mosquitto-clients)");
        self.child = Some(child);
        wait_for(
            "mosquitto_sub's subscription in the broker's log",
            START,
            || (self.subscribed_count() > before).then_some(()),
        );
    }

    /// Every line received so far (payloads not UTF-8 are lossy).
    pub fn lines(&self) -> Vec<String> {
        let bytes = std::fs::read(&self.out).unwrap_or_default();
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Waits until at least `n` lines arrived; returns them.
    pub fn wait_for(&self, n: usize, deadline: Duration) -> Vec<String> {
        wait_for(&format!("{n} messages at {}", self.id), deadline, || {
            let l = self.lines();
            (l.len() >= n).then_some(l)
        })
    }

    /// Ends the client; its session (and what is queued for it) stays.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Connects again with the same client id: the session resumes.
    pub fn restart(&mut self) {
        self.stop();
        self.start();
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.stop();
    }
}
