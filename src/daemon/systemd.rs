//! The systemd notification protocol: READY after recovery, STATUS in plain
//! words, RELOADING while a SIGHUP reload runs (READY again after it),
//! STOPPING when the drain starts, and watchdog pings. Outside
//! systemd (no `NOTIFY_SOCKET`) every call is a no-op.

use std::time::Duration;

use sd_notify::NotifyState;
use tracing::debug;

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(false, states) {
        debug!(error = %e, "sd_notify failed");
    }
}

pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

/// A reload has started; [`ready`] ends it. systemd wants the monotonic
/// clock's time with it, to match the reload to the request.
pub fn reloading(status: &str) {
    let mut states = vec![NotifyState::Reloading, NotifyState::Status(status)];
    match NotifyState::monotonic_usec_now() {
        Ok(now) => states.push(now),
        Err(e) => debug!(error = %e, "reading the monotonic clock for RELOADING=1"),
    }
    send(&states);
}

pub fn stopping(status: &str) {
    send(&[NotifyState::Stopping, NotifyState::Status(status)]);
}

pub fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

/// How often to ping when the unit sets `WatchdogSec`: half the timeout, as
/// sd_watchdog_enabled(3) recommends.
pub fn watchdog_interval() -> Option<Duration> {
    let mut usec = 0;
    sd_notify::watchdog_enabled(false, &mut usec).then(|| Duration::from_micros(usec / 2))
}

/// True when the process was started by systemd with its journal as output,
/// so log lines need neither colours nor timestamps.
pub fn under_journal() -> bool {
    std::env::var_os("JOURNAL_STREAM").is_some()
}
