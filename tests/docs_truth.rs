//! The docs' promises an operator acts on, checked against the real binary
//! by reading the docs themselves, so neither can drift from the other:
//! every counter `docs/metrics.md` lists is served at 0 before the first
//! event by an agent running every source and sink type; every example in
//! `config/examples/` passes `check --offline`, and `docs/configuration.md`
//! lists each of them.

#[path = "common/daemon.rs"]
mod daemon;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use daemon::{free_port, holdfast, wait_for, Agent};

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// `(name, type)` of every row of docs/metrics.md's tables.
fn documented_metrics() -> Vec<(String, String)> {
    let docs = std::fs::read_to_string(repo_file("docs/metrics.md")).expect("read docs");
    docs.lines()
        .filter_map(|l| {
            let mut cells = l.split('|').map(str::trim).skip(1);
            let name = cells.next()?.strip_prefix('`')?.strip_suffix('`')?;
            let kind = cells.next()?;
            Some((name.to_string(), kind.to_string()))
        })
        .collect()
}

/// Every source and sink type and a processing chain, the network sinks
/// aimed at a closed port: nothing is sent, nothing arrives.
fn every_component() -> String {
    let closed = free_port();
    format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"/nonexistent-holdfast-test/*.log\"]\n\n\
         [[sources.app.process.steps]]\ntype = \"json\"\n\n\
         [sources.otlp]\ntype = \"otlp_http\"\nlisten = \"127.0.0.1:{}\"\n\n\
         [sources.both]\ntype = \"otlp\"\n[sources.both.grpc]\nlisten = \"127.0.0.1:{}\"\n\n\
         [sources.devices]\ntype = \"syslog\"\nmode = \"tcp\"\nlisten = \"127.0.0.1:{}\"\n\n\
         [sources.journal]\ntype = \"journald\"\n\n\
         [sources.scrape]\ntype = \"prometheus_scrape\"\ntargets = [\"http://127.0.0.1:{closed}/metrics\"]\n\n\
         [sources.self]\ntype = \"internal_metrics\"\n\n\
         [sources.host]\ntype = \"host_metrics\"\n\n\
         [sources.sensors]\ntype = \"mqtt\"\nurl = \"mqtt://127.0.0.1:{closed}\"\ntopics = [\"devices/#\"]\n\n\
         [sinks.archive]\ntype = \"file\"\ninputs = [\"app\", \"otlp\", \"both\", \"devices\", \"journal\", \"scrape\", \"self\", \"host\", \"sensors\"]\n\n\
         [sinks.es]\ntype = \"elasticsearch\"\ninputs = [\"otlp\"]\nendpoint = \"http://127.0.0.1:{closed}\"\n\n\
         [sinks.oo]\ntype = \"openobserve\"\ninputs = [\"otlp\"]\nendpoint = \"http://127.0.0.1:{closed}\"\n\n\
         [sinks.collector]\ntype = \"otlp_http\"\ninputs = [\"otlp\"]\nendpoint = \"http://127.0.0.1:{closed}\"\n\n\
         [sinks.bus]\ntype = \"nats\"\ninputs = [\"otlp\"]\nservers = [\"nats://127.0.0.1:{closed}\"]\nstream = \"T\"\n\n\
         [sinks.gw]\ntype = \"otlp_grpc\"\ninputs = [\"otlp\"]\nendpoint = \"http://127.0.0.1:{closed}\"\n\n\
         [sinks.prom]\ntype = \"prometheus_remote_write\"\ninputs = [\"otlp\"]\nendpoint = \"http://127.0.0.1:{closed}/api/v1/write\"\n\n\
         [sinks.broker]\ntype = \"mqtt\"\ninputs = [\"otlp\"]\nurl = \"mqtt://127.0.0.1:{closed}\"\ntopic = \"t/{{signal}}\"\n",
        free_port(),
        free_port(),
        free_port(),
    )
}

#[test]
fn every_documented_counter_is_served_at_zero_from_the_start() {
    let mut a = Agent::new(&every_component());
    a.start();
    // Not `wait_ready`: the network sinks' receivers are closed ports and
    // may hold readiness back; the counters must be there regardless.
    let counters: Vec<String> = documented_metrics()
        .into_iter()
        .filter(|(_, kind)| kind == "counter")
        .map(|(name, _)| name)
        .collect();
    assert!(counters.len() > 30, "{counters:?}");
    let served = |text: &str, name: &str| {
        text.lines()
            .any(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
    };
    // The log's per-sink families appear once each sink has opened its
    // cursor, which the docs say takes milliseconds.
    let give_up = std::time::Instant::now() + Duration::from_secs(8);
    let missing = wait_for("every documented counter", Duration::from_secs(10), || {
        let text = daemon::http_get(a.api, "/metrics")?.1;
        let missing: BTreeSet<&String> = counters.iter().filter(|n| !served(&text, n)).collect();
        if missing.is_empty() {
            return Some(None);
        }
        // Past a few seconds, the family is not coming: say which.
        (std::time::Instant::now() > give_up).then(|| Some(format!("{missing:?}")))
    });
    assert_eq!(
        missing,
        None,
        "documented counters not served; stderr:\n{}",
        a.stderr()
    );
    a.stop();
}

fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo_file("config/examples"))
        .expect("config/examples exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_passes_check_offline() {
    let files = examples();
    assert!(files.len() >= 5, "{files:?}");
    for file in files.iter().chain([&repo_file("config/holdfast.toml")]) {
        let out = holdfast(&["check", "--offline", "--config", file.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}:\n{}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn configuration_md_lists_every_example() {
    let docs = std::fs::read_to_string(repo_file("docs/configuration.md")).unwrap();
    let (_, list) = docs
        .split_once("`config/examples/`:\n")
        .expect("configuration.md has a list of the examples");
    let list = list.split("\n\n").next().unwrap_or_default();
    for file in examples() {
        let name = file.file_name().unwrap().to_str().unwrap();
        assert!(
            list.contains(&format!("* `{name}`")),
            "config/examples/{name} is not in configuration.md's list:\n{list}"
        );
    }
}

/// A config that makes every message the docs quote from `check`; a new
/// quoted message needs its mistake added here.
const DOCS_MISTAKES: &str = "[log]\nmax_bytes = \"1GiB\"\nfsync = \"alway\"\n\n\
    [sources.otlp]\ntype = \"otlp_http\"\n\n\
    [sources.syslog]\ntype = \"file\"\ninclude = [\"/var/log/syslog\"]\n\n\
    [sinks.archive]\ntype = \"file\"\ninputs = [\"otlp\", \"syslg\"]\n";

#[test]
fn every_check_message_quoted_in_the_docs_is_what_check_says() {
    // Lines like `/etc/holdfast/holdfast.toml:3:9: log.fsync: unknown …`.
    let mut quoted = Vec::new();
    for entry in std::fs::read_dir(repo_file("docs")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            let Some((_, rest)) = line.split_once("holdfast.toml:") else {
                continue;
            };
            let mut parts = rest.splitn(3, ':');
            let (Some(l), Some(c), Some(message)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if l.parse::<u32>().is_ok() && c.parse::<u32>().is_ok() {
                quoted.push((path.display().to_string(), message.trim().to_string()));
            }
        }
    }
    assert!(!quoted.is_empty());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("holdfast.toml");
    std::fs::write(&config, DOCS_MISTAKES).unwrap();
    let out = holdfast(&["check", "--offline", "--config", config.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for (doc, message) in quoted {
        assert!(
            stderr.lines().any(|l| l.ends_with(&format!(": {message}"))),
            "{doc} quotes `{message}`, which check does not say:\n{stderr}"
        );
    }
}
