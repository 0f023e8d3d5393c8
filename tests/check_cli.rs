//! `holdfast check` as a fleet and a CI pipeline use it, through the real
//! binary: environment interpolation (set, unset, defaults), secrets from a
//! systemd credentials directory, the masked effective config, `--offline`,
//! `--json`, every bad key of a table in one run, and a check beside the
//! running daemon with the same config.

#[path = "common/daemon.rs"]
mod daemon;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};
use std::time::Duration;

use daemon::{free_port, Agent, BIN};

/// `holdfast check ARGS…` with exactly the given environment variables
/// beyond PATH, so the test host's environment cannot leak in.
fn check(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("check").args(args).env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("running holdfast check")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A file sink reading an OTLP source on `${HF_PORT}`.
const PIPELINE: &str =
    "[sources.otlp]\ntype = \"otlp_http\"\nlisten = \"127.0.0.1:${HF_PORT}\"\n\n\
                        [sinks.archive]\ntype = \"file\"\ninputs = [\"otlp\"]\n";

#[test]
fn an_unset_variable_names_its_key_and_line_and_a_set_one_is_used() {
    let a = Agent::new(PIPELINE);
    let out = check(&["--config", a.config_arg()], &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    // The harness writes 8 lines before the body; listen is its third.
    let want = format!("{}:11:21: sources.otlp.listen: ", a.config_arg());
    assert!(stderr.contains(&want), "{want} in:\n{stderr}");
    assert!(stderr.contains("HF_PORT is not set"), "{stderr}");

    let port = free_port().to_string();
    let out = check(&["--config", a.config_arg()], &[("HF_PORT", &port)]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("http://127.0.0.1:{port}")),
        "{stdout}"
    );
}

#[test]
fn secrets_come_from_the_credentials_directory() {
    let a = Agent::new(
        "[sources.otlp]\ntype = \"otlp_http\"\nlisten = \"127.0.0.1:0\"\n\
         bearer_token_file = \"${CREDENTIALS_DIRECTORY}/otlp-token\"\n\n\
         [sinks.es]\ntype = \"elasticsearch\"\ninputs = [\"otlp\"]\n\
         endpoint = \"http://127.0.0.1:9/\"\nauth.user = \"${ES_AUTH_USER}\"\n\
         auth.password_file = \"${CREDENTIALS_DIRECTORY}/es-password\"\n",
    );
    let creds = a.path("credentials");
    std::fs::create_dir(&creds).unwrap();
    for (name, secret) in [("otlp-token", "t0ken"), ("es-password", "hunter2")] {
        let file = creds.join(name);
        std::fs::write(&file, secret).unwrap();
        // As systemd leaves them for a non-root User=: the ACL that lets
        // the service read the file shows in the group bits.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o440)).unwrap();
    }
    let creds_arg = creds.to_str().unwrap();
    let env = [
        ("CREDENTIALS_DIRECTORY", creds_arg),
        ("ES_AUTH_USER", "device-17"),
    ];
    let out = check(&["--config", a.config_arg()], &env);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("readable by other users"), "{stderr}");

    // The effective config: paths shown, the secret variable masked.
    let out = check(&["--config", a.config_arg(), "--print-config"], &env);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let password_file = format!("auth.password_file = \"{creds_arg}/es-password\"");
    assert!(stdout.contains(&password_file), "{stdout}");
    assert!(stdout.contains("auth.user = \"********\""), "{stdout}");
    for secret in ["device-17", "hunter2", "t0ken"] {
        assert!(!stdout.contains(secret), "{secret} in:\n{stdout}");
    }
    assert!(stderr.contains("configuration OK"), "{stderr}");

    // A missing credential file is named with its key.
    std::fs::remove_file(creds.join("es-password")).unwrap();
    let out = check(&["--config", a.config_arg()], &env);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("sinks.es.auth.password_file"), "{stderr}");
}

#[test]
fn offline_validates_a_config_for_another_machine() {
    let a = Agent::new(
        "[sources.otlp]\ntype = \"otlp_http\"\nlisten = \"127.0.0.1:0\"\n\
         bearer_token_file = \"/etc/holdfast/nowhere/token\"\n\n\
         [sinks.archive]\ntype = \"file\"\ninputs = [\"otlp\"]\npath = \"${HF_OUT}/archive\"\n",
    );
    // A sink directory under a regular file can never be created.
    let blocker = a.path("blocker");
    std::fs::write(&blocker, "").unwrap();
    let out_dir = blocker.join("out");
    let env = [("HF_OUT", out_dir.to_str().unwrap())];
    let out = check(&["--config", a.config_arg()], &env);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("sources.otlp.bearer_token_file"),
        "{stderr}"
    );
    assert!(stderr.contains("sinks.archive.path"), "{stderr}");

    let out = check(&["--config", a.config_arg(), "--offline"], &env);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("machine checks skipped"), "{stdout}");
}

#[test]
fn json_reports_every_bad_key_of_a_table_in_one_run() {
    let a = Agent::new(
        "[log]\nsegmnt_size = \"1MiB\"\nfsnyc = \"always\"\nmax_bytes = \"1GiB\"\ncompresion = \"zstd\"\n",
    );
    let out = check(&["--config", a.config_arg(), "--json"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["ok"], false);
    let errors = v["errors"].as_array().unwrap();
    let seen: Vec<(u64, &str)> = errors
        .iter()
        .map(|e| (e["line"].as_u64().unwrap(), e["key"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            (10, "log.segmnt_size"),
            (11, "log.fsnyc"),
            (13, "log.compresion")
        ],
        "{v:#}"
    );
    assert_eq!(errors[0]["column"], 1);
    assert_eq!(errors[0]["file"], a.config_arg());
    assert!(errors[1]["message"]
        .as_str()
        .unwrap()
        .contains("did you mean `fsync`"));

    // A good config: ok, the description, and no errors.
    let good = Agent::new(PIPELINE);
    let out = check(
        &["--config", good.config_arg(), "--json", "--offline"],
        &[("HF_PORT", "4318")],
    );
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["errors"].as_array().unwrap().len(), 0);
    assert!(v["describe"].as_str().unwrap().contains("otlp (otlp_http)"));
    assert!(v["effective_config"]
        .as_str()
        .unwrap()
        .contains("listen = \"127.0.0.1:4318\""));
}

#[test]
fn check_beside_the_running_daemon_accepts_the_ports_it_holds() {
    let port = free_port().to_string();
    let mut a = Agent::new(PIPELINE);
    let env = [("HF_PORT", port.as_str())];
    // The daemon reads its port from the environment too.
    let body = std::fs::read_to_string(&a.config)
        .unwrap()
        .replace("${HF_PORT}", &port);
    std::fs::write(&a.config, body).unwrap();
    a.start();
    a.wait_ready();

    let out = check(&["--config", a.config_arg()], &env);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("configuration OK"), "{stdout}");
    // Under the machine checks' own heading on stdout, like the config's
    // warnings in the description.
    assert!(
        stdout.contains("\nmachine checks, warnings and notes (2):\n"),
        "{stdout}"
    );
    for key in ["api.listen", "sources.otlp.listen"] {
        let note = stdout
            .lines()
            .find(|l| l.contains(key) && l.contains("note: "))
            .unwrap_or_else(|| panic!("{key} in:\n{stdout}"));
        assert!(note.contains("in use"), "{note}");
    }
    let status = a.stop();
    assert!(status.success(), "{}", a.stderr());

    // With the daemon gone, a port held by another program is an error.
    let taken = std::net::TcpListener::bind(format!("127.0.0.1:{port}")).unwrap();
    let out = check(&["--config", a.config_arg()], &env);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("already in use"), "{stderr}");
    // No holdfast holds this data directory now: the message must not
    // suggest one might, which would be "expected".
    assert!(!stderr.contains("which is expected"), "{stderr}");
    assert!(
        stderr.contains("not a holdfast running with this data directory"),
        "{stderr}"
    );
    drop(taken);
}

#[test]
fn run_reads_the_same_variables() {
    let a = Agent::new(PIPELINE);
    let port = free_port();
    let mut child = Command::new(BIN)
        .args(["run", "--config", a.config_arg()])
        .env("HF_PORT", port.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting holdfast run");
    let otlp: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // The OTLP receiver answers on the port the variable named.
    daemon::wait_for("the OTLP port to answer", Duration::from_secs(30), || {
        daemon::http_get(otlp, "/")
    });
    let term = Command::new("kill")
        .args(["-s", "TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = daemon::wait_for("holdfast to exit", Duration::from_secs(30), || {
        child.try_wait().ok().flatten()
    });
    assert!(status.success(), "{status:?}");

    // Without it, run refuses to start, naming the key.
    let out = Command::new(BIN)
        .args(["run", "--config", a.config_arg()])
        .env_remove("HF_PORT")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sources.otlp.listen"), "{stderr}");
}

/// `holdfast check | head`: the reader goes away before check prints; the
/// command ends quietly, as other command-line tools do, not with a panic.
#[test]
fn a_reader_that_goes_away_ends_check_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("holdfast.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\n{}",
            dir.path().join("data").display(),
            PIPELINE.replace("${HF_PORT}", "4399")
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["check", "--offline", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running holdfast check");
    // Close the reading end before check writes a byte.
    drop(child.stdout.take());
    let out = child
        .wait_with_output()
        .expect("waiting for holdfast check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("invalid configuration") && !stderr.contains("Usage"),
        "the check itself failed:\n{stderr}"
    );
    assert!(
        !stderr.contains("panicked"),
        "check panicked on a closed pipe:\n{stderr}"
    );
}

/// The error lines of `holdfast check --offline` on a config body.
fn errors_of(body: &str) -> Vec<String> {
    let a = Agent::new(body);
    let out = check(&["--config", a.config_arg(), "--offline"], &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    stderr
        .lines()
        .filter(|l| l.starts_with(a.config_arg()))
        .map(|l| l[a.config_arg().len()..].to_string())
        .collect()
}

fn has(errors: &[String], key: &str, words: &str) -> bool {
    errors
        .iter()
        .any(|e| e.contains(&format!(": {key}: ")) && e.contains(words))
}

#[test]
fn a_type_error_in_a_table_does_not_hide_its_other_problems() {
    let errors = errors_of(
        "[log]\nfsync = 3\nmax_bytes = \"1MiB\"\nsegment_size = \"8MiB\"\n\n\
         [sources.app]\ntype = \"file\"\ninclude = [\"/tmp/x/*.log\"]\n\n\
         [[sources.app.process.steps]]\ntype = \"json\"\nname = \"a\"\nfield = 3\n\n\
         [[sources.app.process.steps]]\ntype = \"json\"\nname = \"a\"\n\n\
         [sinks.es]\ntype = \"elasticsearch\"\nendpoint = \"http://127.0.0.1:9200\"\n\
         inputs = [\"app\", \"app\", \"nope\"]\nconcurrency = \"adaptive\"\ncolour = \"blue\"\n\
         batch_max_events = 0\nmax_attempts = 5000\n",
    );
    let want = [
        ("log.fsync", "expected one of"),
        ("log.max_bytes", "at least twice log.segment_size"),
        ("sources.app.process.steps[0].field", "expected a string"),
        ("sources.app.process.steps[1].name", "used twice"),
        ("sinks.es.inputs[1]", "listed twice"),
        ("sinks.es.inputs[2]", "no source named \"nope\""),
        ("sinks.es.concurrency", "expected a whole number"),
        ("sinks.es.colour", "unknown key"),
        ("sinks.es.batch_max_events", "out of range"),
        ("sinks.es.max_attempts", "out of range"),
    ];
    for (key, words) in want {
        assert!(has(&errors, key, words), "{key}: {words} in:\n{errors:#?}");
    }
    assert_eq!(errors.len(), want.len(), "nothing else: {errors:#?}");
}

#[test]
fn a_required_key_of_the_wrong_type_is_reported_once() {
    let errors = errors_of("[sources.a]\ntype = \"file\"\ninclude = \"/var/log/*.log\"\n");
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        has(&errors, "sources.a.include", "expected a list"),
        "{errors:#?}"
    );
}

#[test]
fn a_refused_listen_address_collides_with_nothing() {
    let errors = errors_of(
        "[sources.otlp]\ntype = \"otlp_http\"\nlisten = \"localhost:4319\"\n\n\
         [sources.otlp2]\ntype = \"otlp_http\"\n\n\
         [sinks.archive]\ntype = \"file\"\ninputs = [\"otlp\", \"otlp2\"]\n",
    );
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        has(
            &errors,
            "sources.otlp.listen",
            "host names are not resolved"
        ),
        "{errors:#?}"
    );
}

#[test]
fn a_misspelt_level_is_the_only_problem_and_gets_a_suggestion() {
    let errors = errors_of(
        "[sources.app]\ntype = \"file\"\ninclude = [\"/tmp/x/*.log\"]\n\n\
         [[sources.app.process.steps]]\ntype = \"filter\"\nseverity_below = \"infoo\"\n\n\
         [sinks.archive]\ntype = \"file\"\ninputs = [\"app\"]\n",
    );
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        has(
            &errors,
            "sources.app.process.steps[0].severity_below",
            "(did you mean \"info\"?)"
        ),
        "{errors:#?}"
    );
}

#[cfg(feature = "journald")]
#[test]
fn a_missing_journal_directory_is_a_warning_at_its_key_under_a_heading() {
    let a = Agent::new(
        "[sources.journal]\ntype = \"journald\"\ndirectory = \"/nonexistent/journal\"\n\n\
         [sinks.archive]\ntype = \"file\"\ninputs = [\"journal\"]\n",
    );
    let out = check(&["--config", a.config_arg()], &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let (_, machine) = stdout
        .split_once("\nmachine checks, warnings and notes (1):\n")
        .unwrap_or_else(|| panic!("a heading in:\n{stdout}"));
    let want = format!(
        "{}:11:13: warning: sources.journal.directory: the journal is not readable: the \
         directory /nonexistent/journal does not exist",
        a.config_arg()
    );
    assert!(machine.contains(&want), "{want} in:\n{machine}");
    assert!(!machine.contains("can be opened by this user"), "{machine}");

    let out = check(&["--config", a.config_arg(), "--json"], &[]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let w = &v["warnings"][0];
    assert_eq!(
        (&w["key"], &w["line"], &w["column"]),
        (
            &serde_json::json!("sources.journal.directory"),
            &serde_json::json!(11),
            &serde_json::json!(13)
        ),
        "{v:#}"
    );
}

#[cfg(feature = "journald")]
#[test]
fn a_table_level_machine_warning_has_a_line_in_json() {
    // The local journal, unreadable to a test user or absent in a
    // container: either way the warning is the table's, at its `type`.
    let a = Agent::new(
        "[sources.journal]\ntype = \"journald\"\n\n[sinks.archive]\ntype = \"file\"\ninputs = [\"journal\"]\n",
    );
    let out = check(&["--config", a.config_arg(), "--json"], &[]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for w in v["warnings"].as_array().unwrap() {
        assert!(w["line"].is_u64() && w["column"].is_u64(), "{w:#}");
    }
}

#[test]
fn concurrency_one_warns_with_adaptive_at_its_default() {
    let a = Agent::new(
        "[sources.app]\ntype = \"file\"\ninclude = [\"/tmp/x/*.log\"]\n\n\
         [sinks.es]\ntype = \"elasticsearch\"\ninputs = [\"app\"]\n\
         endpoint = \"http://127.0.0.1:9200\"\nconcurrency = 1\n",
    );
    let out = check(&["--config", a.config_arg(), "--offline"], &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("warning: sinks.es.concurrency: adaptive_concurrency (on by default) has nothing to adapt"),
        "{stdout}"
    );
    assert!(stdout.contains("1 request in flight at a time"), "{stdout}");
    assert!(!stdout.contains("request(s)"), "{stdout}");

    // Saying it is meant silences it.
    let body = std::fs::read_to_string(&a.config).unwrap() + "adaptive_concurrency = false\n";
    std::fs::write(&a.config, body).unwrap();
    let out = check(&["--config", a.config_arg(), "--offline"], &[]);
    let (stdout, _) = text(&out);
    assert!(!stdout.contains("warning"), "{stdout}");
}

#[test]
fn the_cursor_sync_interval_is_described_as_the_docs_say() {
    let a = Agent::new("");
    let out = check(&["--config", a.config_arg(), "--offline"], &[]);
    let (stdout, _) = text(&out);
    // docs/configuration.md, `cursor_sync_interval`: it bounds what a power
    // cut replays; after a kill, what was in flight is sent again.
    assert!(
        stdout.contains(
            "sink positions written after each batch and synced every 1s (after a kill or crash, \
             what was in flight is sent again; after a power cut, also up to 1s of progress)"
        ),
        "{stdout}"
    );
}

#[test]
fn a_zero_log_max_bytes_names_its_real_bound() {
    let errors = errors_of("[log]\nmax_bytes = \"0\"\n");
    assert_eq!(errors.len(), 1, "{errors:#?}");
    // Not "at least 1 B": the bound is twice segment_size.
    assert!(
        has(
            &errors,
            "log.max_bytes",
            "must be at least twice log.segment_size (64 MiB)"
        ),
        "{errors:#?}"
    );
}

#[test]
fn every_problem_of_a_nested_table_is_reported() {
    let errors = errors_of(
        "[sources.app]\ntype = \"file\"\ninclude = [\"/tmp/x/*.log\"]\n\n\
         [sinks.es]\ntype = \"elasticsearch\"\ninputs = [\"app\"]\nendpoint = \"http://127.0.0.1:9200\"\n\
         quarantine = { max_bytes = 5, bogus = 1, when_full = \"never\" }\n",
    );
    for (key, words) in [
        ("sinks.es.quarantine.max_bytes", "expected a size"),
        ("sinks.es.quarantine.bogus", "unknown key"),
        ("sinks.es.quarantine.when_full", "unknown value \"never\""),
    ] {
        assert!(has(&errors, key, words), "{key}: {words} in:\n{errors:#?}");
    }
    assert_eq!(errors.len(), 3, "{errors:#?}");
}
