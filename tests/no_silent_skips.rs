//! No test passes by skipping under CI. A test that finds a tool or a
//! privilege missing goes through `tests/common/require.rs` (a `SKIPPED`
//! note on a developer's machine, a failure where `CI` is set); this file
//! keeps any other test file from printing its own `SKIPPED` or reading
//! `CI` itself, and checks that `.ci/run` installs the Debian package of
//! every outside program the tests run.

use std::path::{Path, PathBuf};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("reading tests/") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn only_the_require_helper_decides_to_skip() {
    let allowed = [
        repo("tests/common/require.rs"),
        repo("tests/no_silent_skips.rs"),
    ];
    let mut files = Vec::new();
    rust_files(&repo("tests"), &mut files);
    let mut found = Vec::new();
    for f in files.iter().filter(|f| !allowed.contains(f)) {
        let text = std::fs::read_to_string(f).expect("reading a test file");
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            if code.contains("\"SKIPPED")
                || code.contains("var_os(\"CI\")")
                || code.contains("var(\"CI\")")
            {
                found.push(format!("{}:{}: {}", f.display(), n + 1, code));
            }
        }
    }
    assert!(
        found.is_empty(),
        "tests that decide on their own to skip (use tests/common/require.rs, which fails under CI):\n{}",
        found.join("\n")
    );
}

/// The programs the tests run, and the Debian package that brings each.
/// (`mount`, for tests/disk_full.rs, is in every Debian system.)
const PROGRAMS: [(&str, &str); 11] = [
    ("promtool", "prometheus"),
    ("logrotate", "logrotate"),
    ("systemd-journal-remote", "systemd-journal-remote"),
    ("logger", "bsdutils"),
    ("rsyslogd", "rsyslog"),
    ("nats-server", "nats-server"),
    ("mosquitto", "mosquitto"),
    ("mosquitto_sub", "mosquitto-clients"),
    ("openssl", "openssl"),
    ("kill", "procps"),
    ("python3 -m venv", "python3-venv"),
];

#[test]
fn ci_installs_every_program_the_tests_run() {
    let run = std::fs::read_to_string(repo(".ci/run")).expect("reading .ci/run");
    let install: String = run
        .lines()
        .skip_while(|l| !l.starts_with("apt-get install"))
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let packages: Vec<&str> = install
        .split_whitespace()
        .filter(|w| !w.starts_with('-') && !w.contains('>') && *w != "\\")
        .collect();
    let missing: Vec<String> = PROGRAMS
        .iter()
        .filter(|(_, pkg)| !packages.contains(pkg))
        .map(|(prog, pkg)| format!("{prog} (Debian package {pkg})"))
        .collect();
    assert!(
        missing.is_empty(),
        ".ci/run's apt-get install does not bring: {}\n(its packages: {packages:?})",
        missing.join(", ")
    );
}
