//! Running `holdfast run`: its config file, spawning, stopping, its
//! `/metrics` and `/readyz`, and waiting on a condition while it runs.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::measure::{proc_sample, ProcSample, RssPeaks};
use crate::{bin, PHASE_DEADLINE};

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
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

pub(crate) struct Agent {
    pub(crate) child: Option<Child>,
    pub(crate) api: SocketAddr,
    pub(crate) stderr: PathBuf,
    pub(crate) spawned: Instant,
    pub(crate) rss: Arc<RssPeaks>,
}

impl Agent {
    /// Writes `<dir>/holdfast.toml` (data directory, API, logging, then
    /// `body`) and spawns `holdfast run` on it.
    pub(crate) fn spawn(dir: &Path, body: &str) -> Agent {
        std::fs::create_dir_all(dir).unwrap();
        let config = dir.join("holdfast.toml");
        let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let text = format!(
            "data_dir = \"{}\"\n\n[api]\nlisten = \"{api}\"\n\n[daemon]\nshutdown_timeout = \"25s\"\n{}\n\
             [logging]\nlevel = \"warn\"\nformat = \"text\"\n\n{body}\n",
            dir.join("data").display(),
            crate::config::extra_toml("HOLDFAST_E2E_DAEMON_TOML")
        );
        std::fs::write(&config, text).unwrap();
        Agent::spawn_config(dir, &config, api)
    }

    pub(crate) fn spawn_config(dir: &Path, config: &Path, api: SocketAddr) -> Agent {
        let stderr = dir.join(format!("stderr-{}.log", now_nanos()));
        let spawned = Instant::now();
        let child = Command::new(bin())
            .arg("run")
            .arg("--config")
            .arg(config)
            .env_remove("NOTIFY_SOCKET")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("starting holdfast run");
        let rss = RssPeaks::watch(child.id());
        Agent {
            child: Some(child),
            api,
            stderr,
            spawned,
            rss,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub(crate) fn sample(&self) -> ProcSample {
        proc_sample(&format!("/proc/{}", self.pid()))
    }

    pub(crate) fn stderr_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Panics with the agent's last log lines if it has exited.
    pub(crate) fn check_alive(&mut self) {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                panic!(
                    "holdfast exited ({status}); stderr:\n{}",
                    self.stderr_tail()
                );
            }
        }
    }

    pub(crate) fn metrics(&self) -> String {
        http_get(self.api, "/metrics")
            .map(|r| r.1)
            .unwrap_or_default()
    }

    /// SIGTERM, then waits for the drain to finish.
    pub(crate) fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < end, "holdfast did not stop within 60s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.rss.stop.store(true, Ordering::Relaxed);
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The value of the first sample `name{…} value` or `name value` in a
/// Prometheus text answer, summed over label sets.
pub(crate) fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            if !(rest.starts_with(' ') || rest.starts_with('{')) {
                return None;
            }
            l.rsplit(' ').next()?.parse::<f64>().ok()
        })
        // Not `sum()`: the sum of no samples is -0.0, printed "-0".
        .fold(0.0, |a, b| a + b)
}

/// Polls `f` every 2 ms until it is true; checks the agent is still alive.
pub(crate) fn wait_until(what: &str, agent: &mut Agent, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + PHASE_DEADLINE;
    let mut last_note = Instant::now();
    while !f() {
        agent.check_alive();
        assert!(
            Instant::now() < end,
            "timed out after {PHASE_DEADLINE:?} waiting for {what}"
        );
        if last_note.elapsed() > Duration::from_secs(10) {
            eprintln!("  ... waiting for {what}");
            last_note = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}
