//! holdfast as a contender of phases 5-7: file -> log -> elasticsearch,
//! started again and again on the same data directory.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use crate::agent::{http_get, wait_until, Agent};
use crate::contender::Contender;

pub(crate) struct HoldfastUnderTest {
    pub(crate) dir: PathBuf,
    pub(crate) body: String,
    pub(crate) api: Option<SocketAddr>,
    pub(crate) agent: Option<Agent>,
}

impl HoldfastUnderTest {
    pub(crate) fn new(dir: PathBuf, body: String) -> HoldfastUnderTest {
        let _ = std::fs::remove_dir_all(&dir);
        HoldfastUnderTest {
            dir,
            body,
            api: None,
            agent: None,
        }
    }
}

impl Contender for HoldfastUnderTest {
    fn name(&self) -> &'static str {
        "holdfast"
    }

    fn start(&mut self) -> Instant {
        let agent = match self.api {
            None => Agent::spawn(&self.dir, &self.body),
            Some(api) => Agent::spawn_config(&self.dir, &self.dir.join("holdfast.toml"), api),
        };
        self.api = Some(agent.api);
        let at = agent.spawned;
        self.agent = Some(agent);
        at
    }

    fn kill9(&mut self) {
        // Agent's drop is kill -9 and wait.
        self.agent = None;
    }

    fn stop(&mut self) {
        if let Some(mut a) = self.agent.take() {
            // A run can have nothing left to do (the crash loop delivered
            // every line): a SIGTERM before the agent handles it kills it.
            let api = a.api;
            wait_until("the agent to be ready before its stop", &mut a, || {
                http_get(api, "/readyz").is_some_and(|(s, _)| s == 200)
            });
            let status = a.stop();
            assert!(
                status.success(),
                "holdfast stop: {status}\n{}",
                a.stderr_tail()
            );
        }
    }

    fn check_alive(&mut self) {
        if let Some(a) = self.agent.as_mut() {
            a.check_alive();
        }
    }

    fn appends(&self) -> Option<u64> {
        // Sequence numbers run on across restarts and start at 0 in a fresh
        // log, so the next one is the number of appends over all runs.
        let log = holdfast::seglog::Log::open_read_only(self.dir.join("data/log")).ok()?;
        Some(log.stats().next_seq)
    }
}
