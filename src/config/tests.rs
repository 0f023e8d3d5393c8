//! The config's behaviour as an operator meets it: the shipped configs
//! parse, every broken config gets an error at the right line and key with a
//! message that says what to do, and the machine checks find what they
//! should.

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::seglog::{FsyncPolicy, WhenFull};
use crate::sinks::{SinkKind, SINK_TYPES};
use crate::sources::file::StartAt;
use crate::sources::{SourceKind, SOURCE_TYPES};

const FILE: &str = "/etc/holdfast/holdfast.toml";

fn repo_file(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn problems(text: &str) -> Vec<Diagnostic> {
    match parse(text, FILE) {
        Ok(s) => panic!("expected an error, got a valid config:\n{}", s.describe()),
        Err(e) => e.problems().to_vec(),
    }
}

fn warnings(text: &str) -> Vec<Diagnostic> {
    match parse(text, FILE) {
        Ok(s) => s.warnings().to_vec(),
        Err(e) => panic!("expected a valid config, got:\n{e}"),
    }
}

// ---------------------------------------------------------------- good configs

#[test]
fn the_default_config_and_every_example_parse() {
    let mut files = vec![repo_file("config/holdfast.toml")];
    let mut examples: Vec<_> = std::fs::read_dir(repo_file("config/examples"))
        .expect("config/examples exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 3, "examples: {examples:?}");
    files.extend(examples);
    for file in files {
        let settings = match load(&file) {
            Ok(s) => s,
            // A build without libsystemd refuses the shipped journald
            // sources, and for nothing else.
            Err(e) if !cfg!(feature = "journald") => {
                assert!(!e.problems().is_empty(), "{}: {e}", file.display());
                for p in e.problems() {
                    assert!(
                        p.key.ends_with(".type") && p.message.contains("`journald` feature"),
                        "{}: {p}",
                        file.display()
                    );
                }
                continue;
            }
            Err(e) => panic!("{}:\n{e}", file.display()),
        };
        assert!(!settings.sources.is_empty(), "{}", file.display());
        assert!(!settings.sinks.is_empty(), "{}", file.display());
        // Describing never fails and names every source and sink.
        let text = settings.describe();
        for name in settings.sources.keys().chain(settings.sinks.keys()) {
            assert!(text.contains(name.as_str()));
        }
    }
}

// The shipped config reads the journal.
#[cfg(feature = "journald")]
#[test]
fn the_default_config_is_quiet_and_spells_out_the_defaults() {
    let shipped = load(repo_file("config/holdfast.toml")).unwrap();
    assert!(shipped.warnings().is_empty(), "{:?}", shipped.warnings());

    // The same pipeline with nothing but the required keys: every key the
    // default config writes out must be the default it claims to be.
    let bare = parse(
        r#"
[sources.syslog]
type = "file"
include = ["/var/log/syslog", "/var/log/messages", "/var/log/*.log"]

[sources.journal]
type = "journald"

[sinks.archive]
type = "file"
inputs = ["syslog", "journal"]
max_bytes = "256MiB"
"#,
        FILE,
    )
    .unwrap();
    assert_eq!(shipped.data_dir, bare.data_dir);
    assert_eq!(format!("{:?}", shipped.log), format!("{:?}", bare.log));
    assert_eq!(shipped.api, bare.api);
    assert_eq!(shipped.daemon, bare.daemon);
    assert_eq!(shipped.logging, bare.logging);
    assert_eq!(
        format!("{:?}", shipped.sources),
        format!("{:?}", bare.sources)
    );
    assert_eq!(format!("{:?}", shipped.sinks), format!("{:?}", bare.sinks));
}

#[test]
fn an_empty_file_runs_with_defaults_and_says_it_collects_nothing() {
    let s = parse("", FILE).unwrap();
    assert_eq!(s.data_dir, Path::new(DEFAULT_DATA_DIR));
    assert_eq!(s.log_dir(), Path::new("/var/lib/holdfast/log"));
    assert_eq!(s.api.listen, DEFAULT_API_LISTEN);
    assert_eq!(s.daemon.shutdown_timeout, DEFAULT_SHUTDOWN_TIMEOUT);
    assert!(s.daemon.watchdog);
    assert_eq!(s.daemon.worker_threads, None);
    assert!((1..=DEFAULT_WORKER_THREADS).contains(&s.daemon.worker_threads()));
    assert_eq!(s.daemon.malloc_arenas, DEFAULT_MALLOC_ARENAS);
    assert_eq!(s.daemon.malloc_mmap_threshold, None);
    assert_eq!(s.logging.level, "info");
    assert_eq!(s.logging.format, LogFormat::Auto);
    assert!(s.sources.is_empty() && s.sinks.is_empty());
    let d = s.describe();
    assert!(d.contains("No sources and no sinks are configured"), "{d}");
    // Comments and blank lines only: the same.
    assert!(parse("# nothing yet\n\n", FILE).unwrap().sources.is_empty());
}

#[test]
fn the_daemon_table_sets_the_runtime_budget() {
    let s = parse("[daemon]\nworker_threads = 3\nmalloc_arenas = 1\n", FILE).unwrap();
    assert_eq!(s.daemon.worker_threads(), 3);
    assert_eq!(s.daemon.malloc_arenas, 1);
    let d = s.describe();
    assert!(
        d.contains("runtime: 3 worker thread(s), 1 malloc arena(s)"),
        "{d}"
    );
}

#[test]
fn the_log_table_becomes_log_options() {
    let s = load(repo_file("config/examples/edge-gateway.toml")).unwrap();
    assert_eq!(s.log.segment_bytes, 16 << 20);
    assert_eq!(s.log.max_bytes, 2 << 30);
    assert_eq!(s.log.max_age, Some(Duration::from_secs(3 * 86_400)));
    assert_eq!(s.log.fsync, FsyncPolicy::Interval(Duration::from_secs(2)));
    assert_eq!(s.log.when_full, WhenFull::DropOldest);
    s.log.validate().unwrap();

    let never = parse("[log]\nfsync = \"never\"\n", FILE).unwrap();
    assert_eq!(never.log.fsync, FsyncPolicy::Never);
    let interval = parse("[log]\nfsync = \"interval\"\n", FILE).unwrap();
    assert_eq!(
        interval.log.fsync,
        FsyncPolicy::Interval(Duration::from_secs(1))
    );
}

#[test]
fn sources_and_sinks_resolve_with_their_defaults() {
    let s = parse(
        r#"
data_dir = "state"

[sources.app]
type = "file"
include = ["logs/*.log"]
multiline.start_pattern = '^\S'

[sources.otlp]
type = "otlp_http"

[sinks.archive]
type = "file"
inputs = ["app", "otlp"]
"#,
        FILE,
    )
    .unwrap();
    // Relative paths hang off the config file's directory.
    assert_eq!(s.data_dir, Path::new("/etc/holdfast/state"));
    assert_eq!(s.log_dir(), Path::new("/etc/holdfast/state/log"));
    let SourceKind::File(app) = &s.sources["app"].kind else {
        panic!()
    };
    assert_eq!(app.include, ["/etc/holdfast/logs/*.log"]);
    assert_eq!(app.start_at, StartAt::End);
    assert_eq!(app.max_line_bytes, 256 << 10);
    let m = app.multiline.as_ref().unwrap();
    assert!(m.start_pattern.is_match("first") && !m.start_pattern.is_match("  continued"));
    assert_eq!(m.timeout, Duration::from_secs(1));
    let SourceKind::OtlpHttp(otlp) = &s.sources["otlp"].kind else {
        panic!()
    };
    assert_eq!(otlp.listener.listen, "127.0.0.1:4318".parse().unwrap());
    assert_eq!(otlp.max_body_bytes, 8 << 20);
    assert_eq!(otlp.listener.max_connections.get(), 256);
    assert!(otlp.bearer_token_file.is_none() && otlp.listener.tls.is_none());
    let sink = &s.sinks["archive"];
    assert_eq!(sink.inputs, ["app", "otlp"]);
    let SinkKind::File(f) = &sink.kind else {
        panic!()
    };
    assert_eq!(f.dir, Path::new("/etc/holdfast/state/out/archive"));
    assert_eq!(f.inputs, sink.inputs);
    assert_eq!(f.max_file_bytes, 64 << 20);
    assert_eq!(f.batch_max_events, 1000);
    // Where keys were set is remembered for later messages.
    assert_eq!(
        s.position_of("data_dir"),
        Some(Position {
            line: 2,
            column: 12
        })
    );
    assert_eq!(
        s.position_of("sources.app.include[0]"),
        Some(Position {
            line: 6,
            column: 12
        })
    );
    assert_eq!(s.position_of("api.listen"), None);
}

#[test]
fn network_sinks_resolve_with_their_defaults() {
    use crate::sinks::{Auth, Compression, OtlpEncoding, QuarantineFull};
    let s = parse(
        r#"
data_dir = "/d"
sources.app = { type = "file", include = ["/var/log/app.log"] }

[sinks.es]
type = "elasticsearch"
inputs = ["app"]
endpoints = ["https://es1:9200", "https://es2:9200/"]
auth.user = "holdfast"
auth.password_file = "es.password"

[sinks.otlp]
type = "otlp_http"
inputs = ["app"]
endpoint = "http://collector:4318"
traces_endpoint = "http://tempo:4318/v1/traces"
encoding = "json"
compression = "none"
quarantine.when_full = "drop"

[sinks.oo]
type = "openobserve"
inputs = ["app"]
endpoint = "http://oo:5080"
auth.user = "root@example.com"
auth.password_file = "/etc/holdfast/oo.password"
"#,
        FILE,
    )
    .unwrap();
    let SinkKind::Elasticsearch(es) = &s.sinks["es"].kind else {
        panic!()
    };
    assert_eq!(es.endpoints.len(), 2);
    assert_eq!(es.index.as_str(), "holdfast-{signal}-{date}");
    let c = &es.common;
    assert_eq!(c.inputs, ["app"]);
    assert_eq!(c.batch_max_events, 500);
    assert_eq!(c.batch_max_bytes, 5 << 20);
    assert_eq!(c.concurrency, 2);
    assert!(c.adaptive_concurrency);
    assert_eq!(c.max_attempts, 5);
    assert_eq!(c.request_timeout, Duration::from_secs(30));
    assert_eq!(c.backoff_initial, Duration::from_millis(500));
    assert_eq!(c.backoff_max, Duration::from_secs(60));
    assert_eq!(es.http.compression, Compression::Gzip);
    assert_eq!(
        es.http.auth,
        Some(Auth::Basic {
            user: "holdfast".into(),
            password_file: "/etc/holdfast/es.password".into()
        })
    );
    assert_eq!(c.quarantine.dir, Path::new("/d/quarantine/es"));
    assert_eq!(c.quarantine.max_bytes, 256 << 20);
    assert_eq!(c.quarantine.when_full, QuarantineFull::Block);
    assert_eq!(c.config_hash.len(), 16);
    let SinkKind::OtlpHttp(o) = &s.sinks["otlp"].kind else {
        panic!()
    };
    assert_eq!(o.logs_url.as_str(), "http://collector:4318/v1/logs");
    assert_eq!(o.traces_url.as_str(), "http://tempo:4318/v1/traces");
    assert_eq!(o.metrics_url.as_str(), "http://collector:4318/v1/metrics");
    assert_eq!(o.encoding, OtlpEncoding::Json);
    assert_eq!(o.http.compression, Compression::None);
    assert_eq!(o.common.quarantine.when_full, QuarantineFull::Drop);
    let SinkKind::OpenObserve(oo) = &s.sinks["oo"].kind else {
        panic!()
    };
    assert_eq!(oo.org, "default");
    assert_eq!(oo.stream.as_str(), "{signal}");
    // Basic auth over plain HTTP to another machine: a warning.
    let w = s.warnings();
    assert_eq!(w.len(), 1, "{w:#?}");
    assert_eq!(w[0].key, "sinks.oo.auth");
    assert!(w[0].message.contains("in clear text"), "{}", w[0]);
    let d = s.describe();
    assert!(d.contains("es (elasticsearch) <- app"), "{d}");
    assert!(
        d.contains("events rejected for good go to the quarantine /d/quarantine/es"),
        "{d}"
    );
}

#[test]
fn network_sink_secret_files_are_checked_on_the_machine() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing.password");
    let s = with_dir(
        tmp.path(),
        &format!(
            "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\nauth.user = \"u\"\nauth.password_file = {:?}\n",
            missing.display().to_string()
        ),
    );
    let errors = env_errors(&s);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].key, "sinks.s.auth.password_file");
    assert!(
        errors[0].message.contains("cannot read the password file"),
        "{}",
        errors[0]
    );
}

// ---------------------------------------------------------------- broken configs

/// A broken config and where its (first) error must point.
struct Broken {
    what: &'static str,
    toml: &'static str,
    line: usize,
    key: &'static str,
    fragment: &'static str,
}

const SYSLOG: &str = "[sources.syslog]\ntype = \"file\"\ninclude = [\"/var/log/syslog\"]\n";

#[rustfmt::skip]
const BROKEN: &[Broken] = &[
    // Unknown keys, with a suggestion, at every level.
    Broken { what: "unknown top-level key", toml: "sorces = 1\n", line: 1, key: "sorces", fragment: "unknown key `sorces` (did you mean `sources`?)" },
    Broken { what: "unknown key in [log]", toml: "[log]\nsegmnt_size = \"64MiB\"\n", line: 2, key: "log.segmnt_size", fragment: "did you mean `segment_size`?" },
    Broken { what: "unknown key in [api]", toml: "\n[api]\nlisten_addr = \"127.0.0.1:1\"\n", line: 3, key: "api.listen_addr", fragment: "the keys allowed here are: listen" },
    Broken { what: "unknown key in a file source", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\nincldue = [\"/y\"]\n", line: 4, key: "sources.a.incldue", fragment: "did you mean `include`?" },
    Broken { what: "unknown key in an otlp source", toml: "[sources.o]\ntype = \"otlp_http\"\n\nmax_conections = 5\n", line: 4, key: "sources.o.max_conections", fragment: "did you mean `max_connections`?" },
    Broken { what: "unknown key in a sink", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"file\"\ninputs = [\"a\"]\nbatch_max_event = 5\n", line: 7, key: "sinks.s.batch_max_event", fragment: "did you mean `batch_max_events`?" },
    Broken { what: "unknown key in an inline source table", toml: "[sources]\na = { type = \"file\", include = [\"/x\"], bogus = 1 }\n", line: 2, key: "sources.a.bogus", fragment: "unknown key `bogus`" },
    Broken { what: "unknown key under multiline", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\nmultiline.start_pattern = 'x'\nmultiline.tmeout = \"1s\"\n", line: 5, key: "sources.a.multiline.tmeout", fragment: "did you mean `timeout`?" },
    Broken { what: "a key of the other source type", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\nlisten = \"127.0.0.1:1\"\n", line: 4, key: "sources.a.listen", fragment: "unknown key `listen`" },
    // Wrong types point at the value.
    Broken { what: "size as an integer", toml: "[log]\nsegment_size = 5\n", line: 2, key: "log.segment_size", fragment: "expected a size like \"64MiB\" (a quoted string with a unit), found integer 5" },
    Broken { what: "duration as an integer", toml: "[daemon]\nshutdown_timeout = 20\n", line: 2, key: "daemon.shutdown_timeout", fragment: "expected a duration like \"30s\"" },
    Broken { what: "boolean as a string", toml: "[daemon]\nwatchdog = \"yes\"\n", line: 2, key: "daemon.watchdog", fragment: "expected true or false, found string \"yes\"" },
    Broken { what: "list as a string", toml: "[sources.a]\ntype = \"file\"\ninclude = \"/var/log/syslog\"\n", line: 3, key: "sources.a.include", fragment: "expected a list like" },
    Broken { what: "list element of the wrong type", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\", 2]\n", line: 3, key: "sources.a.include[1]", fragment: "expected a string, found integer" },
    Broken { what: "count as a string", toml: "[sources.o]\ntype = \"otlp_http\"\nmax_connections = \"256\"\n", line: 3, key: "sources.o.max_connections", fragment: "without quotes" },
    Broken { what: "table as a number", toml: "log = 5\n", line: 1, key: "log", fragment: "expected a table like [log], found integer" },
    Broken { what: "enum as a boolean", toml: "[log]\nfsync = true\n", line: 2, key: "log.fsync", fragment: "expected one of \"always\", \"interval\", \"never\", found boolean" },
    // Sizes and durations out of bounds.
    Broken { what: "zero size", toml: "[log]\nsegment_size = \"0\"\n", line: 2, key: "log.segment_size", fragment: "a size of zero makes no sense here" },
    Broken { what: "negative size", toml: "[log]\n\nmax_bytes = \"-5MiB\"\n", line: 3, key: "log.max_bytes", fragment: "a size cannot be negative" },
    Broken { what: "size without a known unit", toml: "[log]\nmax_bytes = \"64 MiBs\"\n", line: 2, key: "log.max_bytes", fragment: "is not a size" },
    Broken { what: "size that overflows", toml: "[log]\nmax_bytes = \"99999999EiB\"\n", line: 2, key: "log.max_bytes", fragment: "too large" },
    Broken { what: "segment too small", toml: "[log]\nsegment_size = \"1KiB\"\n", line: 2, key: "log.segment_size", fragment: "set it between 64 KiB and 1 GiB" },
    Broken { what: "segment too large", toml: "[log]\nsegment_size = \"2GiB\"\nmax_bytes = \"8GiB\"\n", line: 2, key: "log.segment_size", fragment: "2 GiB is too large" },
    Broken { what: "segment_size more than max_bytes / 2", toml: "[log]\nsegment_size = \"512MiB\"\nmax_bytes = \"1000MiB\"\n", line: 3, key: "log.max_bytes", fragment: "must be at least twice log.segment_size (512 MiB)" },
    Broken { what: "segment_size more than the default max_bytes / 2", toml: "[log]\nsegment_size = \"1GiB\"\n", line: 2, key: "log.segment_size", fragment: "raise max_bytes to 2 GiB or more" },
    Broken { what: "zero duration", toml: "[log]\ncursor_sync_interval = \"0s\"\n", line: 2, key: "log.cursor_sync_interval", fragment: "must be greater than zero" },
    Broken { what: "zero max_age", toml: "[log]\nmax_age = \"0s\"\n", line: 2, key: "log.max_age", fragment: "remove max_age" },
    Broken { what: "zero worker threads", toml: "[daemon]\nworker_threads = 0\n", line: 2, key: "daemon.worker_threads", fragment: "0 is out of range: set it between 1 and 64" },
    Broken { what: "mmap threshold past glibc's ceiling", toml: "[daemon]\nmalloc_mmap_threshold = \"64MiB\"\n", line: 2, key: "daemon.malloc_mmap_threshold", fragment: "is too large" },
    Broken { what: "too many malloc arenas", toml: "[daemon]\nmalloc_arenas = 65\n", line: 2, key: "daemon.malloc_arenas", fragment: "65 is out of range: set it between 1 and 64" },
    Broken { what: "negative duration", toml: "[daemon]\nshutdown_timeout = \"-1s\"\n", line: 2, key: "daemon.shutdown_timeout", fragment: "cannot be negative" },
    Broken { what: "duration without unit", toml: "[daemon]\nshutdown_timeout = \"20\"\n", line: 2, key: "daemon.shutdown_timeout", fragment: "is not a duration" },
    Broken { what: "negative count", toml: "[sources.o]\ntype = \"otlp_http\"\nmax_connections = -1\n", line: 3, key: "sources.o.max_connections", fragment: "-1 is out of range: set it between 1 and 65536" },
    Broken { what: "zero body size", toml: "[sources.o]\ntype = \"otlp_http\"\nmax_body_bytes = \"0B\"\n", line: 3, key: "sources.o.max_body_bytes", fragment: "zero makes no sense" },
    Broken { what: "zero batch", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"file\"\ninputs = [\"a\"]\nbatch_max_events = 0\n", line: 7, key: "sinks.s.batch_max_events", fragment: "0 is out of range" },
    Broken { what: "sink max_bytes below twice max_file_bytes", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"file\"\ninputs = [\"a\"]\nmax_bytes = \"100MiB\"\n", line: 7, key: "sinks.s.max_bytes", fragment: "at least twice max_file_bytes (64 MiB)" },
    Broken { what: "line longer than a segment", toml: "[log]\nsegment_size = \"1MiB\"\n[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\nmax_line_bytes = \"2MiB\"\n", line: 6, key: "sources.a.max_line_bytes", fragment: "would not fit in one log segment" },
    // fsync and its interval.
    Broken { what: "fsync_interval with fsync = always", toml: "[log]\nfsync = \"always\"\nfsync_interval = \"1s\"\n", line: 3, key: "log.fsync_interval", fragment: "but fsync is \"always\" on line 2: set log.fsync = \"interval\"" },
    Broken { what: "fsync_interval with fsync = never", toml: "[log]\nfsync = \"never\"\nfsync_interval = \"1s\"\n", line: 3, key: "log.fsync_interval", fragment: "fsync is \"never\"" },
    Broken { what: "fsync_interval with the default fsync", toml: "[log]\nfsync_interval = \"1s\"\n", line: 2, key: "log.fsync_interval", fragment: "fsync is \"always\" by default" },
    Broken { what: "zero fsync_interval", toml: "[log]\nfsync = \"interval\"\nfsync_interval = \"0s\"\n", line: 3, key: "log.fsync_interval", fragment: "fsync = \"always\"" },
    Broken { what: "unknown fsync policy", toml: "[log]\nfsync = \"alway\"\n", line: 2, key: "log.fsync", fragment: "unknown value \"alway\" (did you mean \"always\"?); expected one of: \"always\", \"interval\", \"never\"" },
    Broken { what: "unknown when_full policy", toml: "[log]\nwhen_full = \"drop-oldest\"\n", line: 2, key: "log.when_full", fragment: "did you mean \"drop_oldest\"?" },
    Broken { what: "unknown compression", toml: "[log]\ncompression = \"zst\"\n", line: 2, key: "log.compression", fragment: "did you mean \"zstd\"?" },
    Broken { what: "zstd level out of range", toml: "[log]\ncompression_level = 22\n", line: 2, key: "log.compression_level", fragment: "between 1 and 19" },
    Broken { what: "unknown start_at", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\nstart_at = \"begining\"\n", line: 4, key: "sources.a.start_at", fragment: "did you mean \"beginning\"?" },
    // Source and sink types and names.
    Broken { what: "unknown source type", toml: "\n[sources.a]\ntype = \"kafka\"\n", line: 3, key: "sources.a.type", fragment: "unknown source type \"kafka\"; known types: \"file\", \"otlp_http\", \"journald\"" },
    Broken { what: "journald unknown priority", toml: "[sources.j]\ntype = \"journald\"\nmin_priority = \"warn\"\n", line: 3, key: "sources.j.min_priority", fragment: "did you mean \"warning\"?" },
    Broken { what: "journald directory and files", toml: "[sources.j]\ntype = \"journald\"\ndirectory = \"/j\"\nfiles = [\"/j/a.journal\"]\n", line: 3, key: "sources.j.directory", fragment: "cannot both be set" },
    Broken { what: "journald match without a field", toml: "[sources.j]\ntype = \"journald\"\nmatches = [\"ssh\"]\n", line: 3, key: "sources.j.matches", fragment: "not a journal match" },
    Broken { what: "journald entry larger than a segment", toml: "[log]\nsegment_size = \"1MiB\"\nmax_bytes = \"4MiB\"\n[sources.j]\ntype = \"journald\"\nmax_entry_bytes = \"2MiB\"\n", line: 6, key: "sources.j.max_entry_bytes", fragment: "would not fit in one log segment" },
    Broken { what: "misspelt source type", toml: "[sources.a]\ntype = \"otlp-http\"\n", line: 2, key: "sources.a.type", fragment: "did you mean \"otlp_http\"?" },
    Broken { what: "unknown sink type", toml: "[sinks.s]\ntype = \"kafka\"\ninputs = []\n", line: 2, key: "sinks.s.type", fragment: "unknown sink type \"kafka\"; known types: \"file\"" },
    Broken { what: "missing type", toml: "\n[sources.a]\ninclude = [\"/x\"]\n", line: 2, key: "sources.a", fragment: "missing `type`" },
    Broken { what: "type not a string", toml: "[sources.a]\ntype = 1\n", line: 2, key: "sources.a.type", fragment: "expected a string" },
    Broken { what: "name with a space", toml: "[sources.\"my logs\"]\ntype = \"file\"\ninclude = [\"/x\"]\n", line: 1, key: "sources.\"my logs\"", fragment: "the character ' ' is not allowed" },
    Broken { what: "name too long", toml: "[sinks.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa]\ntype = \"file\"\n", line: 1, key: "sinks.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", fragment: "1 to 64 characters" },
    Broken { what: "sources not a table", toml: "sources = [\"syslog\"]\n", line: 1, key: "sources", fragment: "must be a table of named sources" },
    Broken { what: "sources as an array of tables", toml: "[[sources]]\ntype = \"file\"\n", line: 1, key: "sources", fragment: "must be a table of named sources" },
    Broken { what: "source not a table", toml: "[sources]\nsyslog = \"/var/log/syslog\"\n", line: 2, key: "sources.syslog", fragment: "expected a table with a `type` key" },
    // Sink inputs.
    Broken { what: "sink input naming no source", toml: "[sources.syslog]\ntype = \"file\"\ninclude = [\"/x\"]\n[sources.otlp]\ntype = \"otlp_http\"\n[sinks.archive]\ntype = \"file\"\ninputs = [\n  \"otlp\",\n  \"syslg\",\n]\n", line: 10, key: "sinks.archive.inputs[1]", fragment: "no source named \"syslg\" (did you mean \"syslog\"?); sources defined: otlp, syslog" },
    Broken { what: "sink input with no sources at all", toml: "[sinks.s]\ntype = \"file\"\ninputs = [\"syslog\"]\n", line: 3, key: "sinks.s.inputs[0]", fragment: "no sources are defined yet" },
    Broken { what: "sink input listed twice", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"file\"\ninputs = [\"a\", \"a\"]\n", line: 6, key: "sinks.s.inputs[1]", fragment: "listed twice" },
    Broken { what: "empty inputs", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"file\"\ninputs = []\n", line: 6, key: "sinks.s.inputs", fragment: "the inputs list is empty" },
    Broken { what: "missing inputs", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"file\"\n", line: 4, key: "sinks.s", fragment: "missing `inputs`" },
    // File sources.
    Broken { what: "empty include list", toml: "[sources.a]\ntype = \"file\"\ninclude = []\n", line: 3, key: "sources.a.include", fragment: "the include list is empty" },
    Broken { what: "missing include", toml: "[sources.a]\ntype = \"file\"\n", line: 1, key: "sources.a", fragment: "missing `include`" },
    Broken { what: "empty include pattern", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\", \"\"]\n", line: 3, key: "sources.a.include[1]", fragment: "an empty pattern" },
    Broken { what: "bad regex", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\nmultiline.start_pattern = '(unclosed'\n", line: 4, key: "sources.a.multiline.start_pattern", fragment: "not a valid regular expression" },
    Broken { what: "multiline without a pattern", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\nmultiline.timeout = \"1s\"\n", line: 4, key: "sources.a.multiline", fragment: "multiline needs start_pattern" },
    Broken { what: "tailing holdfast's own output", toml: "data_dir = \"/d\"\n[sources.a]\ntype = \"file\"\ninclude = [\"/x\", \"/d/out/s/*.ndjson\"]\n[sinks.s]\ntype = \"file\"\ninputs = [\"a\"]\n", line: 4, key: "sources.a.include[1]", fragment: "feed holdfast its own events in a loop" },
    // Listeners and secrets.
    Broken { what: "listen host name", toml: "[api]\nlisten = \"localhost:9467\"\n", line: 2, key: "api.listen", fragment: "host names are not resolved" },
    Broken { what: "listen without port", toml: "[api]\nlisten = \"127.0.0.1\"\n", line: 2, key: "api.listen", fragment: "the port is missing: write it like \"127.0.0.1:9467\"" },
    Broken { what: "listen IPv6 without brackets", toml: "[sources.o]\ntype = \"otlp_http\"\nlisten = \"::1:4318\"\n", line: 3, key: "sources.o.listen", fragment: "in brackets" },
    Broken { what: "listen port out of range", toml: "[api]\nlisten = \"127.0.0.1:99999\"\n", line: 2, key: "api.listen", fragment: "is not an address and port" },
    Broken { what: "two listeners on one port", toml: "[api]\nlisten = \"0.0.0.0:4318\"\n[sources.o]\ntype = \"otlp_http\"\n", line: 2, key: "api.listen", fragment: "collides with sources.o.listen (127.0.0.1:4318, the default)" },
    Broken { what: "inline bearer token", toml: "[sources.o]\ntype = \"otlp_http\"\nbearer_token = \"s3cret\"\n", line: 3, key: "sources.o.bearer_token", fragment: "set bearer_token_file" },
    Broken { what: "tls key without cert", toml: "[sources.o]\ntype = \"otlp_http\"\ntls.key_file = \"/k.pem\"\n", line: 3, key: "sources.o.tls.key_file", fragment: "tls.key_file is set but tls.cert_file is not" },
    Broken { what: "tls cert without key", toml: "[sources.o]\ntype = \"otlp_http\"\ntls.cert_file = \"/c.pem\"\n", line: 3, key: "sources.o.tls.cert_file", fragment: "set tls.key_file" },
    Broken { what: "empty tls", toml: "[sources.o]\ntype = \"otlp_http\"\ntls = {}\n", line: 3, key: "sources.o.tls", fragment: "tls is empty" },
    // Paths.
    Broken { what: "empty data_dir", toml: "data_dir = \"\"\n", line: 1, key: "data_dir", fragment: "must not be empty" },
    Broken { what: "sink writing into the log", toml: "data_dir = \"/d\"\n[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"file\"\ninputs = [\"a\"]\npath = \"/d/log/out\"\n", line: 8, key: "sinks.s.path", fragment: "overlaps the log directory /d/log" },
    Broken { what: "two sinks in one directory", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"file\"\ninputs = [\"a\"]\npath = \"/out\"\n[sinks.t]\ntype = \"file\"\ninputs = [\"a\"]\npath = \"/out/t\"\n", line: 11, key: "sinks.t.path", fragment: "overlaps sinks.s.path (/out)" },
    // Network sinks.
    Broken { what: "network sink without endpoint", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\n", line: 4, key: "sinks.s", fragment: "missing `endpoint`" },
    Broken { what: "otlp sink without endpoint", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"otlp_http\"\ninputs = [\"a\"]\n", line: 4, key: "sinks.s", fragment: "missing `endpoint`: the collector's base URL" },
    Broken { what: "document of a protobuf nats sink", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"nats\"\ninputs = [\"a\"]\nservers = [\"nats://127.0.0.1:4222\"]\nstream = \"T\"\ndocument = \"full\"\n", line: 9, key: "sinks.s.document", fragment: "remove document or set encoding = \"json\"" },
    Broken { what: "document neither lean nor full", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"http://es:9200\"\ndocument = \"slim\"\n", line: 8, key: "sinks.s.document", fragment: "lean" },
    Broken { what: "endpoint not http", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"ftp://es:21\"\n", line: 7, key: "sinks.s.endpoint", fragment: "write an http:// or https:// URL" },
    Broken { what: "endpoint not a URL", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"openobserve\"\ninputs = [\"a\"]\nendpoint = \"openobserve:5080\"\n", line: 7, key: "sinks.s.endpoint", fragment: "write an http:// or https:// URL" },
    Broken { what: "credentials in the URL", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://elastic:pw@es:9200\"\n", line: 7, key: "sinks.s.endpoint", fragment: "holds credentials" },
    Broken { what: "endpoint and endpoints", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\nendpoints = [\"https://es2:9200\"]\n", line: 8, key: "sinks.s.endpoints", fragment: "not both" },
    Broken { what: "bad URL in endpoints", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoints = [\"https://es:9200\", \"es2\"]\n", line: 7, key: "sinks.s.endpoints[1]", fragment: "is not a URL" },
    Broken { what: "inline password", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\nauth.password = \"x\"\n", line: 8, key: "sinks.s.auth.password", fragment: "must not be written in the config" },
    Broken { what: "inline api key", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\nauth.api_key = \"x\"\n", line: 8, key: "sinks.s.auth.api_key", fragment: "set auth.api_key_file instead" },
    Broken { what: "user without password file", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\nauth.user = \"u\"\n", line: 8, key: "sinks.s.auth.user", fragment: "needs auth.password_file" },
    Broken { what: "two kinds of credentials", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\nauth = { bearer_token_file = \"/t\", api_key_file = \"/k\" }\n", line: 8, key: "sinks.s.auth", fragment: "more than one kind of credentials" },
    Broken { what: "api key outside elasticsearch", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"otlp_http\"\ninputs = [\"a\"]\nendpoint = \"https://c:4318\"\nauth.api_key_file = \"/k\"\n", line: 8, key: "sinks.s.auth.api_key_file", fragment: "API keys are an Elasticsearch scheme" },
    Broken { what: "backoff_max below backoff_initial", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\nbackoff_initial = \"10s\"\nbackoff_max = \"1s\"\n", line: 9, key: "sinks.s.backoff_max", fragment: "is shorter than backoff_initial" },
    Broken { what: "zero concurrency", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"openobserve\"\ninputs = [\"a\"]\nendpoint = \"http://oo:5080\"\nconcurrency = 0\n", line: 8, key: "sinks.s.concurrency", fragment: "0 is out of range: set it between 1 and 64" },
    Broken { what: "concurrency written the Vector way", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\nconcurrency = \"adaptive\"\n", line: 8, key: "sinks.s.concurrency", fragment: "adapts between 1 and it by default (adaptive_concurrency = true); write a number like 8" },
    Broken { what: "adaptive_concurrency not a boolean", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\nadaptive_concurrency = \"yes\"\n", line: 8, key: "sinks.s.adaptive_concurrency", fragment: "expected true or false, found string \"yes\"" },
    Broken { what: "zero request_timeout", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"otlp_http\"\ninputs = [\"a\"]\nendpoint = \"http://c:4318\"\nrequest_timeout = \"0s\"\n", line: 8, key: "sinks.s.request_timeout", fragment: "must be greater than zero" },
    Broken { what: "unknown index placeholder", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\nindex = \"logs-{sginal}\"\n", line: 8, key: "sinks.s.index", fragment: "unknown placeholder {sginal}" },
    Broken { what: "upper-case index", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\nindex = \"Logs-{date}\"\n", line: 8, key: "sinks.s.index", fragment: "has the character 'L'" },
    Broken { what: "bad stream name", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"openobserve\"\ninputs = [\"a\"]\nendpoint = \"http://oo:5080\"\nstream = \"my logs\"\n", line: 8, key: "sinks.s.stream", fragment: "has the character ' '" },
    Broken { what: "unknown compression", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\ncompression = \"gzp\"\n", line: 8, key: "sinks.s.compression", fragment: "did you mean \"gzip\"?" },
    Broken { what: "unknown encoding", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"otlp_http\"\ninputs = [\"a\"]\nendpoint = \"http://c:4318\"\nencoding = \"proto\"\n", line: 8, key: "sinks.s.encoding", fragment: "expected one of: \"protobuf\", \"json\"" },
    Broken { what: "unknown when_full of the quarantine", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\nquarantine.when_full = \"dorp\"\n", line: 8, key: "sinks.s.quarantine.when_full", fragment: "did you mean \"drop\"?" },
    Broken { what: "quarantine too small", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\nquarantine.max_bytes = \"1KiB\"\n", line: 8, key: "sinks.s.quarantine.max_bytes", fragment: "is too small" },
    Broken { what: "unknown key in a network sink", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\nbatch_max_event = 5\n", line: 8, key: "sinks.s.batch_max_event", fragment: "did you mean `batch_max_events`?" },
    Broken { what: "file sink key in a network sink", toml: "[sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\n[sinks.s]\ntype = \"elasticsearch\"\ninputs = [\"a\"]\nendpoint = \"https://es:9200\"\nmax_file_bytes = \"1MiB\"\n", line: 8, key: "sinks.s.max_file_bytes", fragment: "unknown key `max_file_bytes`" },
    // Logging.
    Broken { what: "misspelt level", toml: "[logging]\nlevel = \"inof\"\n", line: 2, key: "logging.level", fragment: "\"inof\" is not a level (did you mean \"info\"?)" },
    Broken { what: "bad filter directive", toml: "[logging]\nlevel = \"holdfast=verbose\"\n", line: 2, key: "logging.level", fragment: "is not a valid filter" },
    Broken { what: "unknown log format", toml: "[logging]\nformat = \"jsn\"\n", line: 2, key: "logging.format", fragment: "did you mean \"json\"?" },
    // TOML syntax, which the parser rejects before any of the above.
    Broken { what: "duplicate key", toml: "[log]\nfsync = \"always\"\nfsync = \"never\"\n", line: 3, key: "log.fsync", fragment: "`fsync` is set twice" },
    Broken { what: "duplicate table", toml: "[log]\nfsync = \"always\"\n\n[log]\nmax_bytes = \"2GiB\"\n", line: 4, key: "log", fragment: "the table [log] is defined twice" },
    Broken { what: "duplicate source", toml: "[sources.a]\ntype = \"file\"\n[sources.a]\ntype = \"file\"\n", line: 3, key: "sources.a", fragment: "defined twice" },
    Broken { what: "unterminated string", toml: "[api]\nlisten = \"127.0.0.1:9467\n", line: 2, key: "api", fragment: "invalid TOML" },
    Broken { what: "unquoted value", toml: "[log]\nfsync = always\n", line: 2, key: "log", fragment: "invalid TOML" },
];

#[test]
fn every_broken_config_is_reported_at_its_line_and_key() {
    let mut failures = Vec::new();
    for case in BROKEN {
        // Without libsystemd a journald table's first error is that
        // (`sources/journald/config.rs` tests it).
        if !cfg!(feature = "journald") && case.toml.contains("type = \"journald\"") {
            continue;
        }
        let found = problems(case.toml);
        let first = &found[0];
        let ok = first.position.map(|p| p.line) == Some(case.line)
            && first.key == case.key
            && first.message.contains(case.fragment)
            && first.file == Path::new(FILE)
            && first.severity == Severity::Error;
        if !ok {
            failures.push(format!(
                "{}: expected line {} key {:?} containing {:?}\n  got: {}",
                case.what, case.line, case.key, case.fragment, first
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn errors_point_at_the_value_column() {
    let e = &problems("[log]\nsegment_size = 5\n")[0];
    assert_eq!(
        e.position,
        Some(Position {
            line: 2,
            column: 16
        })
    );
    let e = &problems(&format!(
        "{SYSLOG}[sinks.a]\ntype = \"file\"\ninputs = [\"syslog\", \"syslg\"]\n"
    ))[0];
    assert_eq!(
        e.position,
        Some(Position {
            line: 6,
            column: 21
        })
    );
    assert_eq!(
        e.to_string(),
        "/etc/holdfast/holdfast.toml:6:21: sinks.a.inputs[1]: no source named \"syslg\" (did you mean \"syslog\"?); sources defined: syslog"
    );
}

#[test]
fn all_problems_are_reported_at_once_in_file_order() {
    let text = r#"
[log]
fsync = "sometimes"

[sources.a]
type = "file"
include = []

[sinks.s]
type = "file"
inputs = ["b"]
"#;
    let found = problems(text);
    let lines: Vec<usize> = found.iter().map(|d| d.position.unwrap().line).collect();
    assert_eq!(lines, [3, 7, 11], "{found:#?}");
    // Display: one line per problem.
    let shown = parse(text, FILE).unwrap_err().to_string();
    assert_eq!(shown.lines().count(), 3, "{shown}");
    assert!(
        shown.starts_with("/etc/holdfast/holdfast.toml:3:9: log.fsync: "),
        "{shown}"
    );
}

#[test]
fn a_broken_source_does_not_also_break_the_sinks_that_read_it() {
    // `a` is declared but invalid: the sink's input is fine, only `a` is
    // reported.
    let found = problems("[sources.a]\ntype = \"file\"\ninclude = []\n[sinks.s]\ntype = \"file\"\ninputs = [\"a\"]\n");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].key, "sources.a.include");
}

#[test]
fn a_file_that_is_not_utf8_is_reported_at_the_bad_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("latin1.toml");
    std::fs::write(&path, b"[log]\n# caf\xe9\nfsync = \"always\"\n").unwrap();
    let err = load(&path).unwrap_err();
    let d = &err.problems()[0];
    assert_eq!(d.position, Some(Position { line: 2, column: 6 }));
    assert!(d.message.contains("not valid UTF-8 (byte 0xe9)"), "{d}");
    assert_eq!(d.file, path);
}

#[test]
fn a_missing_file_says_how_to_fix_it() {
    let err = load("/nonexistent/holdfast.toml").unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    let shown = err.to_string();
    assert!(
        shown.starts_with("/nonexistent/holdfast.toml: cannot read the config file"),
        "{shown}"
    );
    assert!(shown.contains("--config"), "{shown}");
}

#[test]
fn a_byte_order_mark_is_accepted() {
    let s = parse("\u{feff}[log]\nfsync = \"never\"\n", FILE).unwrap();
    assert_eq!(s.log.fsync, FsyncPolicy::Never);
}

// ---------------------------------------------------------------- warnings

#[test]
fn allowed_but_risky_settings_are_warnings() {
    let cases: &[(&str, usize, &str, &str)] = &[
        (
            "[sources.o]\ntype = \"otlp_http\"\nlisten = \"0.0.0.0:4318\"\n[sinks.s]\ntype = \"file\"\ninputs = [\"o\"]\n",
            3,
            "sources.o.listen",
            "without TLS or a bearer token",
        ),
        (
            "[sources.o]\ntype = \"otlp_http\"\nlisten = \"192.0.2.1:4318\"\nbearer_token_file = \"/t\"\n[sinks.s]\ntype = \"file\"\ninputs = [\"o\"]\n",
            3,
            "sources.o.listen",
            "travel in clear text",
        ),
        ("[api]\nlisten = \"0.0.0.0:9467\"\n", 2, "api.listen", "/metrics has no authentication"),
        ("[daemon]\nshutdown_timeout = \"45s\"\n", 2, "daemon.shutdown_timeout", "TimeoutStopSec=30"),
        (
            "[log]\nwhen_full = \"drop_oldest\"\nappend_timeout = \"5s\"\n",
            3,
            "log.append_timeout",
            "has no effect with when_full = \"drop_oldest\"",
        ),
        (
            "[log]\ncompression = \"lz4\"\ncompression_level = 3\n",
            3,
            "log.compression_level",
            "unless compression = \"zstd\"",
        ),
        (SYSLOG, 1, "sources.syslog", "no sink reads this source"),
        (
            "[sources.o]\ntype = \"otlp_http\"\nheader_timeout = \"1m\"\n[sinks.s]\ntype = \"file\"\ninputs = [\"o\"]\n",
            3,
            "sources.o.header_timeout",
            "can never fire",
        ),
    ];
    for (text, line, key, fragment) in cases {
        let found = warnings(text);
        assert_eq!(found.len(), 1, "{text}: {found:#?}");
        let w = &found[0];
        assert_eq!(w.severity, Severity::Warning);
        assert_eq!(w.position.map(|p| p.line), Some(*line), "{w}");
        assert_eq!(w.key, *key, "{w}");
        assert!(w.message.contains(fragment), "{w}");
        assert!(w.to_string().contains(": warning: "), "{w}");
    }
    // A public listener with both protections is quiet.
    let quiet = warnings(
        "[sources.o]\ntype = \"otlp_http\"\nlisten = \"0.0.0.0:4318\"\nbearer_token_file = \"/t\"\ntls.cert_file = \"/c\"\ntls.key_file = \"/k\"\n[sinks.s]\ntype = \"file\"\ninputs = [\"o\"]\n",
    );
    assert!(quiet.is_empty(), "{quiet:#?}");
}

// ---------------------------------------------------------------- describe

#[test]
fn describe_tells_the_pipeline_its_bounds_and_guarantees() {
    let s = load(repo_file("config/examples/edge-gateway.toml")).unwrap();
    let d = s.describe();
    let at = |needle: &str| {
        d.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in:\n{d}"))
    };
    // Sources, then the log, then sinks.
    assert!(at("sources (2):") < at("log: /var/lib/holdfast/log"));
    assert!(at("log: /var/lib/holdfast/log") < at("sinks (1):"));
    at("receives OTLP/HTTP on http://127.0.0.1:4318");
    at("at most 2 GiB on disk, in segments of 16 MiB");
    at("older than 3d");
    at(&s.log.fsync.guarantee());
    at("when full (drop_oldest)");
    at("archive (file) <- otlp, system");
    at("oldest files are removed beyond 512 MiB");
    at("warnings (1):");
    at("api.listen");

    let always = parse("", FILE).unwrap().describe();
    assert!(
        always.contains(&FsyncPolicy::Always.guarantee()),
        "{always}"
    );
    assert!(
        always.contains("when full (block): nothing is dropped"),
        "{always}"
    );
}

// ---------------------------------------------------------------- the machine

/// Settings with `data_dir` in `dir`. The API listens on port 0 unless
/// `extra` says otherwise, so a daemon running on this machine does not
/// make the tests fail.
fn with_dir(dir: &Path, extra: &str) -> Settings {
    let api = if extra.contains("[api]") {
        ""
    } else {
        "[api]\nlisten = \"127.0.0.1:0\"\n"
    };
    let text = format!("data_dir = {:?}\n{extra}{api}", dir.display().to_string());
    parse(&text, dir.join("holdfast.toml")).unwrap()
}

fn env_errors(s: &Settings) -> Vec<Diagnostic> {
    s.check_environment()
        .into_iter()
        .filter(|d| d.is_error())
        .collect()
}

#[test]
fn a_creatable_data_dir_passes_and_is_left_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("a/b/state");
    let s = with_dir(&data, "");
    assert!(env_errors(&s).is_empty(), "{:#?}", s.check_environment());
    assert!(
        !tmp.path().join("a").exists(),
        "check must remove what it created"
    );
    // An existing one is left with nothing in it.
    std::fs::create_dir_all(data.join("log")).unwrap();
    assert!(env_errors(&s).is_empty());
    assert_eq!(std::fs::read_dir(data.join("log")).unwrap().count(), 0);
}

#[test]
fn a_data_dir_blocked_by_a_file_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("file"), b"x").unwrap();
    let s = with_dir(&tmp.path().join("file/state"), "");
    let errors = env_errors(&s);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].key, "data_dir");
    assert_eq!(
        errors[0].position,
        Some(Position {
            line: 1,
            column: 12
        })
    );
    assert!(errors[0].message.contains("file"), "{}", errors[0]);
    assert!(
        errors[0].message.contains("not a directory"),
        "{}",
        errors[0]
    );
}

#[test]
fn a_read_only_data_dir_is_named() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let ro = tmp.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();
    if std::fs::write(ro.join("probe"), b"").is_ok() {
        // Running as root: permissions do not apply; nothing to test.
        return;
    }
    let s = with_dir(&ro, "");
    let errors = env_errors(&s);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].message.contains("cannot create"), "{}", errors[0]);
    assert!(
        errors[0].message.contains(&ro.display().to_string()),
        "{}",
        errors[0]
    );
}

#[test]
fn a_port_in_use_names_its_key_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let s = with_dir(
        tmp.path(),
        &format!("[api]\nlisten = \"127.0.0.1:{port}\"\n"),
    );
    let errors = env_errors(&s);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].key, "api.listen");
    assert_eq!(errors[0].position.map(|p| p.line), Some(3));
    assert!(
        errors[0].message.contains("already in use"),
        "{}",
        errors[0]
    );
    drop(taken);
    assert!(env_errors(&s).is_empty());
}

#[test]
fn secret_files_must_exist_hold_something_and_be_private() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let token = tmp.path().join("otlp.token");
    let cert = tmp.path().join("cert.pem");
    let key = tmp.path().join("key.pem");
    let otlp = format!(
        "[sources.o]\ntype = \"otlp_http\"\nlisten = \"127.0.0.1:0\"\nbearer_token_file = {:?}\ntls.cert_file = {:?}\ntls.key_file = {:?}\n[sinks.s]\ntype = \"file\"\ninputs = [\"o\"]\n",
        token.display().to_string(),
        cert.display().to_string(),
        key.display().to_string()
    );
    let s = with_dir(tmp.path(), &otlp);

    let errors = env_errors(&s);
    let keys: Vec<&str> = errors.iter().map(|d| d.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "sources.o.bearer_token_file",
            "sources.o.tls.cert_file",
            "sources.o.tls.key_file"
        ],
        "{errors:#?}"
    );
    assert_eq!(errors[0].position.map(|p| p.line), Some(5));

    std::fs::write(&token, b"\n").unwrap();
    std::fs::write(&cert, b"not pem").unwrap();
    std::fs::write(
        &key,
        b"-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let errors = env_errors(&s);
    assert!(errors[0].message.contains("is empty"), "{errors:#?}");
    assert!(
        errors[1].message.contains("no PEM \"CERTIFICATE\" block"),
        "{errors:#?}"
    );
    assert_eq!(errors.len(), 2, "{errors:#?}");

    std::fs::write(&token, b"s3cret\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    // Blocks that only look like PEM are loaded as `run` loads them, and fail.
    std::fs::write(
        &cert,
        b"-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let errors = env_errors(&s);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].key, "sources.o.tls.cert_file");
    assert!(
        errors[0].message.contains("reading the certificate chain"),
        "{errors:#?}"
    );

    let tls = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/otlp/tls");
    std::fs::copy(tls.join("cert.pem"), &cert).unwrap();
    std::fs::copy(tls.join("key.pem"), &key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let all = s.check_environment();
    assert!(all.iter().all(|d| !d.is_error()), "{all:#?}");
    let private = all
        .iter()
        .find(|d| d.key == "sources.o.bearer_token_file")
        .expect("a warning about the token's mode");
    assert!(private.message.contains("mode 0644"), "{private}");
}

#[test]
fn missing_tailed_files_are_warnings_not_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let s = with_dir(
        tmp.path(),
        &format!(
            "[sources.a]\ntype = \"file\"\ninclude = [{:?}, {:?}]\n[sinks.s]\ntype = \"file\"\ninputs = [\"a\"]\n",
            tmp.path().join("missing.log").display().to_string(),
            tmp.path().join("nodir/*.log").display().to_string()
        ),
    );
    let found: Vec<_> = s
        .check_environment()
        .into_iter()
        .filter(|d| d.key.starts_with("sources.a"))
        .collect();
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found.iter().all(|d| d.severity == Severity::Warning));
    assert_eq!(found[0].key, "sources.a.include[0]");
    assert!(
        found[0].message.contains("does not exist (yet)"),
        "{}",
        found[0]
    );
    assert!(found[1].message.contains("nodir"), "{}", found[1]);
}

// ---------------------------------------------------------------- docs

/// Every key the code accepts is documented: the allowed keys are taken from
/// the code's own unknown-key errors, table by table, and looked up in
/// docs/configuration.md.
#[test]
fn every_key_is_documented() {
    let docs = std::fs::read_to_string(repo_file("docs/configuration.md")).unwrap();
    // Every registered type's own table, so a new source or sink is
    // checked without touching this test.
    let tables: Vec<String> = SOURCE_TYPES
        .iter()
        .map(|t| format!("[sources.a]\ntype = \"{t}\"\nzzz = 1\n"))
        .chain(
            SINK_TYPES
                .iter()
                .map(|t| format!("[sinks.a]\ntype = \"{t}\"\nzzz = 1\n")),
        )
        .collect();
    let mut probes: Vec<(&str, &str)> = vec![
        ("", "zzz = 1\n"),
        ("", "[log]\nzzz = 1\n"),
        ("", "[api]\nzzz = 1\n"),
        ("", "[daemon]\nzzz = 1\n"),
        ("", "[logging]\nzzz = 1\n"),
        (
            "multiline.",
            "[sources.a]\ntype = \"file\"\nmultiline.zzz = 1\n",
        ),
        ("tls.", "[sources.a]\ntype = \"otlp_http\"\ntls.zzz = 1\n"),
        (
            "filesystem.",
            "[sources.a]\ntype = \"host_metrics\"\nfilesystem.zzz = 1\n",
        ),
        (
            "network.",
            "[sources.a]\ntype = \"host_metrics\"\nnetwork.zzz = 1\n",
        ),
        (
            "auth.",
            "[sinks.a]\ntype = \"elasticsearch\"\nauth.zzz = 1\n",
        ),
        ("tls.", "[sinks.a]\ntype = \"elasticsearch\"\ntls.zzz = 1\n"),
        (
            "quarantine.",
            "[sinks.a]\ntype = \"elasticsearch\"\nquarantine.zzz = 1\n",
        ),
    ];
    probes.extend(tables.iter().map(|t| ("", t.as_str())));
    let mut missing = Vec::new();
    for (prefix, text) in probes {
        // Other problems of the table (a missing required key) come too.
        let message = problems(text)
            .into_iter()
            .map(|p| p.message)
            .find(|m| m.contains("the keys allowed here are: "))
            .unwrap_or_else(|| panic!("no unknown-key problem for {text}"));
        let (_, allowed) = message
            .split_once("the keys allowed here are: ")
            .unwrap_or_else(|| panic!("{message}"));
        for key in allowed.split(", ") {
            if [
                "sources",
                "sinks",
                "log",
                "api",
                "daemon",
                "logging",
                "multiline",
                "filesystem",
                "network",
                "tls",
                "auth",
                "quarantine",
            ]
            .contains(&key)
            {
                continue; // tables, documented by their headings
            }
            let documented = format!("`{prefix}{key}`");
            if !docs.contains(&documented) {
                missing.push(documented);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in docs/configuration.md: {missing:?}"
    );
    // And every type.
    for t in SOURCE_TYPES.iter().chain(SINK_TYPES) {
        assert!(docs.contains(&format!("`{t}`")), "type {t} not documented");
    }
}

#[test]
fn every_bad_key_of_a_table_is_reported_in_one_run() {
    let found = problems(
        "[log]\nsegmnt_size = \"1MiB\"\nmax_bytes = \"2GiB\"\nfsnyc = \"always\"\ncompresion = \"zstd\"\n\
         [sources.a]\ntype = \"file\"\ninclude = [\"/x\"]\nbogus = 1\nstart_at = 5\n",
    );
    let seen: Vec<(usize, &str)> = found
        .iter()
        .map(|d| (d.position.map_or(0, |p| p.line), d.key.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (2, "log.segmnt_size"),
            (4, "log.fsnyc"),
            (5, "log.compresion"),
            (9, "sources.a.bogus"),
            (10, "sources.a.start_at"),
        ],
        "{found:#?}"
    );
    assert!(
        found[1].message.contains("did you mean `fsync`"),
        "{}",
        found[1]
    );
}
