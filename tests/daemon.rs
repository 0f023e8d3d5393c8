//! The daemon as an operator meets it: the real binary, its config errors,
//! its systemd notifications, its API, its drain, its lock and its tools.

#[path = "common/daemon.rs"]
mod daemon;

use daemon::{holdfast, http_get, Agent};

#[test]
fn check_prints_the_pipeline_for_a_good_config() {
    let a = Agent::new("[log]\nmax_bytes = \"256MiB\"\nsegment_size = \"16MiB\"\n");
    let out = holdfast(&["check", "--config", a.config_arg()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("fsync = always"), "{stdout}");
    assert!(
        stdout.contains("256 MiB") || stdout.contains("256MiB"),
        "{stdout}"
    );
    assert!(stdout.contains("configuration OK"), "{stdout}");
}

#[test]
fn check_names_the_line_and_key_of_a_mistake() {
    let a = Agent::new("[log]\nmax_bytes = \"1GiB\"\nfsnyc = \"always\"\n");
    let out = holdfast(&["check", "--config", a.config_arg()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    // data_dir, blank, [api], listen, blank, [daemon], shutdown_timeout,
    // blank, then the body: [log] is line 9 and the typo line 11.
    assert!(stderr.contains(":11:"), "{stderr}");
    assert!(stderr.contains("fsnyc"), "{stderr}");
    assert!(
        stderr.contains("did you mean") && stderr.contains("fsync"),
        "{stderr}"
    );
}

#[test]
fn check_rejects_a_zero_size_and_a_sink_without_a_source() {
    let a = Agent::new(
        "[log]\nsegment_size = \"0\"\n\n[sinks.out]\ntype = \"file\"\ninputs = [\"nowhere\"]\n",
    );
    let out = holdfast(&["check", "--config", a.config_arg()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("log.segment_size"), "{stderr}");
    assert!(stderr.contains("sinks.out.inputs"), "{stderr}");
    assert!(stderr.contains("nowhere"), "{stderr}");
}

#[test]
fn run_is_ready_serves_its_api_and_drains_on_sigterm() {
    let mut a = Agent::new("");
    a.start();
    a.wait_ready();
    assert!(
        a.notifications.iter().any(|n| n.contains("STATUS=running")),
        "{:?}",
        a.notifications
    );
    assert_eq!(http_get(a.api, "/healthz").unwrap().0, 200);
    assert_eq!(http_get(a.api, "/nope").unwrap().0, 404);
    let m = a.metrics();
    assert!(m.contains("holdfast_log_bytes "), "{m}");
    assert!(
        m.contains("holdfast_log_fsync_duration_seconds_bucket"),
        "{m}"
    );
    // No Accept header: the classic text format.
    assert!(
        m.contains("# TYPE holdfast_log_appended_events_total counter") && !m.contains("# EOF"),
        "{m}"
    );

    let status = a.stop();
    assert!(status.success(), "exit {status}; stderr:\n{}", a.stderr());
    a.poll_notifications();
    assert!(
        a.notifications.iter().any(|n| n.contains("STOPPING=1")),
        "{:?}",
        a.notifications
    );
    assert!(a.stderr().contains("stopped cleanly"), "{}", a.stderr());
}

#[test]
fn a_second_instance_on_the_same_data_dir_fails_clearly() {
    let mut a = Agent::new("");
    a.start();
    a.wait_ready();
    // Same data_dir, another API port.
    let second = a.path("second.toml");
    let text = std::fs::read_to_string(&a.config).unwrap().replace(
        &a.api.to_string(),
        &format!("127.0.0.1:{}", daemon::free_port()),
    );
    std::fs::write(&second, text).unwrap();
    let out = holdfast(&["run", "--config", second.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("locked by another process"), "{stderr}");
    // The first is unharmed.
    assert_eq!(http_get(a.api, "/readyz").unwrap().0, 200);
    assert!(a.stop().success());
}

#[test]
fn a_taken_api_port_is_a_clear_start_up_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let a = Agent::new("");
    let text = std::fs::read_to_string(&a.config)
        .unwrap()
        .replace(&a.api.to_string(), &format!("127.0.0.1:{port}"));
    std::fs::write(&a.config, text).unwrap();
    let out = holdfast(&["run", "--config", a.config_arg()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot listen on") && stderr.contains("[api] listen"),
        "{stderr}"
    );
}

#[test]
fn inspect_works_while_running_and_after_kill_9() {
    let mut a = Agent::new("");
    a.start();
    a.wait_ready();
    let out = holdfast(&["inspect", "--config", a.config_arg()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("segments") && text.contains("sequence 0..0"),
        "{text}"
    );

    a.kill9();
    let out = holdfast(&[
        "inspect",
        "--data-dir",
        a.data_dir().to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["segments"], 1);
    assert_eq!(v["next_seq"], 0);

    // And the agent starts again on the same directory after the kill.
    a.start();
    a.wait_ready();
    assert!(a.stop().success());
}
