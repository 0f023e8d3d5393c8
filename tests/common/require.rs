//! The one place a test may find a tool or a privilege missing. On a
//! developer's machine the test (or the part that needs it) is skipped with
//! a `SKIPPED` note; where `CI` is set to anything non-empty it fails,
//! naming what is missing and how `.ci/run` provides it: a test that passes
//! by skipping checks nothing, and CI must never be that test.
//! `tests/no_silent_skips.rs` keeps every other test file from skipping on
//! its own.
//!
//! Included with `#[path = "common/require.rs"] mod require;` (or
//! `#[path = "../common/require.rs"]` from a test's own directory).
#![allow(dead_code)]

use std::process::{Command, Stdio};

/// Whether the tests run under CI (`CI` set and not empty).
pub fn under_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// Reports that `test` cannot run (all of it, or the part that needs
/// `what`) because `what` is missing; `provided_by` says how CI provides
/// it. Panics under CI; elsewhere prints a `SKIPPED` note and returns, so
/// that the caller skips.
pub fn missing(test: &str, what: &str, provided_by: &str) {
    let why = format!("{test}: {what}; {provided_by}");
    if under_ci() {
        panic!("{why} (CI is set, so a missing tool or privilege fails the test instead of skipping it)");
    }
    eprintln!("SKIPPED {why}");
}

/// Whether `program --version` (or `probe`) runs and succeeds; if not,
/// reports it as [`missing`].
pub fn tool(test: &str, program: &str, probe: &[&str], provided_by: &str) -> bool {
    let ran = Command::new(program)
        .args(probe)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match ran {
        Ok(s) if s.success() => true,
        Ok(s) => {
            missing(
                test,
                &format!("`{program} {}` failed ({s})", probe.join(" ")),
                provided_by,
            );
            false
        }
        Err(e) => {
            missing(test, &format!("`{program}` cannot run ({e})"), provided_by);
            false
        }
    }
}
