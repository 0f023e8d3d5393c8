//! Real `nats-server` processes for the `nats` sink's tests (Debian's
//! package, installed by `.ci/run`): one server, or a 3-node JetStream
//! cluster with routes, on loopback ports the tests pick, each with its own
//! temporary store directory. Start-up, elections and restarts are waited
//! for as conditions with a deadline, never with sleeps.
//!
//! Included with `#[path = "common/nats.rs"] mod nats;` after
//! `#[path = "common/daemon.rs"] mod daemon;`.
#![allow(dead_code)]

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use async_nats::jetstream::{self, stream};

use crate::daemon::{free_port, wait_for};

/// One `nats-server` process with JetStream, its config file and store.
pub struct Server {
    pub name: String,
    pub port: u16,
    pub cluster_port: u16,
    dir: tempfile::TempDir,
    /// Lines added to the config (auth, limits).
    extra: String,
    routes: Vec<u16>,
    child: Option<Child>,
}

impl Server {
    fn new(name: &str, extra: &str) -> Server {
        Server {
            name: name.into(),
            port: free_port(),
            cluster_port: free_port(),
            dir: tempfile::tempdir().unwrap(),
            extra: extra.into(),
            routes: Vec::new(),
            child: None,
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn write_config(&self) -> PathBuf {
        let mut conf = format!(
            "server_name: {}\nlisten: 127.0.0.1:{}\njetstream {{ store_dir: \"{}\" }}\n{}\n",
            self.name,
            self.port,
            self.dir.path().join("store").display(),
            self.extra
        );
        if !self.routes.is_empty() {
            let routes: Vec<String> = self
                .routes
                .iter()
                .map(|p| format!("nats-route://127.0.0.1:{p}"))
                .collect();
            conf += &format!(
                "cluster {{ name: holdfast-test, listen: 127.0.0.1:{}, routes: [{}] }}\n",
                self.cluster_port,
                routes.join(", ")
            );
        }
        let path = self.dir.path().join("nats.conf");
        std::fs::write(&path, conf).unwrap();
        path
    }

    /// Starts the process and waits until it accepts connections.
    pub fn start(&mut self) {
        assert!(self.child.is_none());
        let conf = self.write_config();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.log"))
            .unwrap();
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting nats-server (Debian package nats-server)");
        self.child = Some(child);
        let port = self.port;
        wait_for(
            "nats-server to accept connections",
            Duration::from_secs(20),
            || TcpStream::connect(("127.0.0.1", port)).ok(),
        );
    }

    /// Changes the extra config lines; they take effect at the next start.
    pub fn set_extra(&mut self, extra: &str) {
        self.extra = extra.into();
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill9();
        self.start();
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// The process id, for CPU accounting.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// One server, or three with routes to each other.
pub struct Nats {
    pub servers: Vec<Server>,
}

impl Nats {
    /// One server; `extra` goes into its config.
    pub fn single(extra: &str) -> Nats {
        let mut s = Server::new("n1", extra);
        s.start();
        Nats { servers: vec![s] }
    }

    /// Three servers in one JetStream cluster; returns once the cluster
    /// has a JetStream meta leader.
    pub async fn cluster() -> Nats {
        let mut servers: Vec<Server> = (1..=3).map(|i| Server::new(&format!("n{i}"), "")).collect();
        let ports: Vec<u16> = servers.iter().map(|s| s.cluster_port).collect();
        for (i, s) in servers.iter_mut().enumerate() {
            s.routes = ports
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, p)| *p)
                .collect();
        }
        for s in &mut servers {
            s.start();
        }
        let n = Nats { servers };
        // The meta leader answers stream lookups (an account query would
        // do too, but async-nats cannot read 2.9's answer to it).
        let js = n.js().await;
        wait_async("a JetStream meta leader", Duration::from_secs(30), || {
            let js = js.clone();
            async move {
                match js.get_stream("NO_SUCH_STREAM").await {
                    Err(e) => matches!(
                        e.kind(),
                        jetstream::context::GetStreamErrorKind::JetStream(_)
                    )
                    .then_some(()),
                    Ok(_) => Some(()),
                }
            }
        })
        .await;
        n
    }

    /// Every server's URL, for a sink's `servers`.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(Server::url).collect()
    }

    /// `servers = [...]` for a sink table.
    pub fn toml_servers(&self) -> String {
        let quoted: Vec<String> = self.urls().iter().map(|u| format!("\"{u}\"")).collect();
        format!("[{}]", quoted.join(", "))
    }

    /// A client of the servers that are running, for the test's own
    /// questions (stream info, reading messages back).
    pub async fn js(&self) -> jetstream::Context {
        let urls: Vec<String> = self
            .servers
            .iter()
            .filter(|s| s.is_running())
            .map(Server::url)
            .collect();
        let client = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect(urls)
            .await
            .unwrap();
        let mut js = jetstream::new(client);
        js.set_timeout(Duration::from_secs(5));
        js
    }

    /// Creates `name` over `subjects` with `replicas`, retrying while the
    /// cluster settles.
    pub async fn create_stream(&self, name: &str, subjects: &[&str], replicas: usize) {
        let js = self.js().await;
        let config = stream::Config {
            name: name.into(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
            num_replicas: replicas,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        };
        wait_async("the stream to be created", Duration::from_secs(30), || {
            let (js, config) = (js.clone(), config.clone());
            async move { js.get_or_create_stream(config).await.ok() }
        })
        .await;
    }

    /// The index of the server that leads `stream`.
    pub async fn leader(&self, js: &jetstream::Context, stream: &str) -> usize {
        let name = wait_async("the stream's leader", Duration::from_secs(30), || {
            let js = js.clone();
            async move {
                let mut s = js.get_stream(stream).await.ok()?;
                let info = s.info().await.ok()?;
                info.cluster.as_ref()?.leader.clone()
            }
        })
        .await;
        self.servers.iter().position(|s| s.name == name).unwrap()
    }
}

/// A message read back from a stream.
pub struct Msg {
    pub seq: u64,
    /// The `Nats-Msg-Id` header.
    pub id: String,
    pub subject: String,
    pub payload: Vec<u8>,
}

/// Every message of `stream` in sequence order: (sequence, Nats-Msg-Id,
/// payload).
pub async fn read_all(js: &jetstream::Context, stream: &str) -> Vec<(u64, String, Vec<u8>)> {
    read_after(js, stream, 0).await.unwrap()
}

/// Every message of `stream` in sequence order, with its subject.
pub async fn messages(js: &jetstream::Context, stream: &str) -> Vec<Msg> {
    messages_after(js, stream, 0).await.unwrap()
}

/// The messages of `stream` after sequence `after` as (sequence,
/// Nats-Msg-Id, payload); `None` when the stream cannot be read right now.
pub async fn read_after(
    js: &jetstream::Context,
    stream: &str,
    after: u64,
) -> Option<Vec<(u64, String, Vec<u8>)>> {
    let all = messages_after(js, stream, after).await?;
    Some(all.into_iter().map(|m| (m.seq, m.id, m.payload)).collect())
}

/// The messages of `stream` after sequence `after`, many lookups at once;
/// `None` when the stream cannot be read right now (a restarting server).
/// A hole (a purged or deleted message) is skipped.
pub async fn messages_after(js: &jetstream::Context, stream: &str, after: u64) -> Option<Vec<Msg>> {
    let s = js.get_stream(stream).await.ok()?;
    let last = s.get_info().await.ok()?.state.last_sequence;
    let mut out = Vec::new();
    let mut next = after + 1;
    while next <= last {
        let mut set = tokio::task::JoinSet::new();
        for seq in next..=last.min(next + 255) {
            let s = s.clone();
            set.spawn(async move { (seq, s.get_raw_message(seq).await) });
        }
        next = last.min(next + 255) + 1;
        while let Some(joined) = set.join_next().await {
            let (seq, got) = joined.ok()?;
            match got {
                Ok(m) => {
                    let id = m
                        .headers
                        .get("Nats-Msg-Id")
                        .map(|v| v.as_str().to_string())
                        .unwrap_or_default();
                    out.push(Msg {
                        seq,
                        id,
                        subject: m.subject.to_string(),
                        payload: m.payload.to_vec(),
                    });
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        jetstream::stream::RawMessageErrorKind::NoMessageFound
                    ) => {}
                Err(_) => return None,
            }
        }
    }
    out.sort_by_key(|m| m.seq);
    Some(out)
}

/// Waits until `f` yields `Some`, or panics after `deadline`.
pub async fn wait_async<T, F, Fut>(what: &str, deadline: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
