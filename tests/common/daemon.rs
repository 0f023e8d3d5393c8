//! A harness for tests that run the real `holdfast` binary: write a config
//! into a temporary directory, start the agent, wait for conditions with a
//! deadline (never a fixed sleep), talk to its API, stop it with SIGTERM or
//! SIGKILL, and read what systemd would have been told.
//!
//! Included with `#[path = "common/daemon.rs"] mod daemon;`.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_holdfast");

/// Waits until `f` returns `Some`, or panics with `what` after `deadline`.
pub fn wait_for<T>(what: &str, deadline: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < end,
            "timed out after {deadline:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A free loopback port (bound and released; the agent binds it next).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `N` distinct free loopback ports: all are held until all are chosen, so
/// the kernel cannot hand the same one out twice (as two `free_port()`
/// calls in a row may).
pub fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

/// Runs `holdfast ARGS…` to completion.
pub fn holdfast(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("running holdfast")
}

/// A plain HTTP/1.1 GET on loopback: (status, body), or None if nothing answers.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// A test directory with a config file and a data directory.
pub struct Agent {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub api: SocketAddr,
    child: Option<Child>,
    notify: Option<UnixDatagram>,
    pub notifications: Vec<String>,
    /// The binary `start` runs: this build's, unless a bench compares
    /// another (`HOLDFAST_BENCH_BIN`).
    pub bin: String,
}

impl Agent {
    /// `body` is the config after `data_dir` and `[api]`, which the harness writes.
    pub fn new(body: &str) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let config = dir.path().join("holdfast.toml");
        let text = format!(
            "data_dir = \"{}\"\n\n[api]\nlisten = \"{api}\"\n\n[daemon]\nshutdown_timeout = \"10s\"\n\n{body}\n",
            dir.path().join("data").display()
        );
        std::fs::write(&config, text).unwrap();
        Agent {
            dir,
            config,
            api,
            child: None,
            notify: None,
            notifications: Vec::new(),
            bin: BIN.to_string(),
        }
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn config_arg(&self) -> &str {
        self.config.to_str().unwrap()
    }

    /// Starts `holdfast run` with a NOTIFY_SOCKET the test reads.
    pub fn start(&mut self) {
        let sock_path = self
            .dir
            .path()
            .join(format!("notify-{}.sock", self.notifications.len()));
        let _ = std::fs::remove_file(&sock_path);
        let sock = UnixDatagram::bind(&sock_path).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let child = Command::new(&self.bin)
            .args(["run", "--config", self.config_arg()])
            .env("NOTIFY_SOCKET", &sock_path)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join("stderr.log")).unwrap())
            .spawn()
            .expect("starting holdfast run");
        self.child = Some(child);
        self.notify = Some(sock);
    }

    /// Reads notifications that arrived since the last call.
    pub fn poll_notifications(&mut self) {
        if let Some(sock) = &self.notify {
            let mut buf = [0u8; 4096];
            while let Ok(n) = sock.recv(&mut buf) {
                self.notifications
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
    }

    /// Waits for READY=1 and a 200 from /readyz.
    pub fn wait_ready(&mut self) {
        self.wait_started();
        let api = self.api;
        wait_for("/readyz to answer 200", Duration::from_secs(10), || {
            http_get(api, "/readyz").filter(|(s, _)| *s == 200)
        });
    }

    /// Waits for READY=1 only: for a config where a source is meant to
    /// fail, so `/readyz` rightly answers 503.
    pub fn wait_started(&mut self) {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            self.poll_notifications();
            if self
                .notifications
                .iter()
                .any(|n| n.lines().any(|l| l == "READY=1"))
            {
                break;
            }
            if let Some(status) = self.try_exit() {
                panic!(
                    "holdfast exited before READY ({status}); stderr:\n{}",
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < end,
                "no READY=1 within 30s; stderr:\n{}",
                self.stderr()
            );
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args(["-s", sig, &self.pid().to_string()])
            .status()
            .expect("running kill (Debian package procps; .ci/run installs it)")
            .success();
        assert!(ok, "kill -s {sig} failed");
    }

    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok()?
    }

    /// Waits for the process to exit and returns its status.
    pub fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        let status = wait_for("holdfast to exit", deadline, || self.try_exit());
        self.child = None;
        status
    }

    /// SIGTERM, then wait for the drain to finish.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal("TERM");
        self.wait_exit(Duration::from_secs(30))
    }

    /// SIGKILL: no drain, no cursor persistence.
    pub fn kill9(&mut self) {
        self.signal("KILL");
        self.wait_exit(Duration::from_secs(10));
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    /// `holdfast inspect --json` on this agent's config (works while it runs).
    pub fn inspect_json(&self) -> serde_json::Value {
        let out = holdfast(&["inspect", "--config", self.config_arg(), "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("inspect --json prints JSON")
    }

    pub fn metrics(&self) -> String {
        http_get(self.api, "/metrics").expect("metrics answer").1
    }

    /// The value of a sample line `name{labels} value` in /metrics.
    pub fn metric(&self, sample: &str) -> Option<f64> {
        self.metrics().lines().find_map(|l| {
            l.strip_prefix(sample)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn read_to_string(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}
