//! The tailer's heartbeat: what step its thread is in and since when, so
//! that a thread that stopped cycling (a system call that does not return:
//! a hung network file system, a device) is seen from outside it, in
//! `/readyz` and `holdfast_file_source_tailer_stalled_seconds`, instead of
//! the source going quiet with every figure looking fine.
//!
//! Waiting is not a stall: neither waiting for something to read nor for
//! the log to take a chunk (the log's own figures show that).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use tracing::{error, info};

use crate::api::Health;

/// A step lasting this long makes the source stuck in `/readyz`. Well
/// above any step that works (a scan of thousands of files, a 4 MiB read),
/// well below what an operator would wait before looking.
pub const STALLED_AFTER: Duration = Duration::from_secs(30);
/// How often the watchdog looks.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// A step of the tailer thread, named in `/readyz` when it lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Step {
    Waiting = 0,
    Scanning = 1,
    Opening = 2,
    Reading = 3,
    Timers = 4,
}

impl Step {
    fn of(v: u8) -> Step {
        match v {
            1 => Step::Scanning,
            2 => Step::Opening,
            3 => Step::Reading,
            4 => Step::Timers,
            _ => Step::Waiting,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Step::Waiting => "waiting",
            Step::Scanning => "scanning the include globs",
            Step::Opening => "opening a matched file",
            Step::Reading => "reading a file",
            Step::Timers => "ending quiet lines and idle files",
        }
    }
}

/// Written by the tailer thread, read by the source's watchdog.
#[derive(Debug)]
pub struct Beat {
    base: Instant,
    /// Milliseconds from `base` to the start of the current step.
    since_ms: AtomicU64,
    step: AtomicU8,
}

impl Default for Beat {
    fn default() -> Beat {
        Beat {
            base: Instant::now(),
            since_ms: AtomicU64::new(0),
            step: AtomicU8::new(Step::Waiting as u8),
        }
    }
}

impl Beat {
    /// The thread starts `step` now. Two relaxed stores: cheap enough for
    /// every open and every file read.
    pub fn step(&self, step: Step) {
        let ms = self.base.elapsed().as_millis() as u64;
        self.since_ms.store(ms, Ordering::Relaxed);
        self.step.store(step as u8, Ordering::Relaxed);
    }

    /// How long the thread has been in its current step, unless waiting.
    pub fn busy_for(&self, now: Instant) -> Option<(Duration, Step)> {
        let step = Step::of(self.step.load(Ordering::Relaxed));
        if step == Step::Waiting {
            return None;
        }
        let since = Duration::from_millis(self.since_ms.load(Ordering::Relaxed));
        Some((now.saturating_duration_since(self.base + since), step))
    }
}

/// Watches the tailer thread of source `name` until dropped (abort the
/// task): sets `gauge` to the seconds of its current step, and lists the
/// source as stuck in `health` while a step lasts `stalled_after`
/// ([`STALLED_AFTER`] in the source).
pub async fn watchdog(
    name: String,
    beat: Arc<Beat>,
    gauge: Gauge,
    health: Option<Arc<Health>>,
    stalled_after: Duration,
) {
    let task = format!("source:{name}");
    let mut stuck = false;
    let mut tick = tokio::time::interval(WATCH_EVERY);
    loop {
        tick.tick().await;
        let busy = beat.busy_for(Instant::now());
        gauge.set(busy.map_or(0, |(d, _)| d.as_secs() as i64));
        match busy {
            Some((d, step)) if d >= stalled_after && !stuck => {
                let why = format!(
                    "its tailer thread has been {} for {} s without returning (a hung \
                         network file system or device?); its files are not read meanwhile",
                    step.as_str(),
                    d.as_secs()
                );
                error!(source = %name, step = step.as_str(), seconds = d.as_secs(),
                        "file source tailer stuck: {why}; check the files its globs match");
                if let Some(h) = &health {
                    h.set_stuck(&task, why);
                }
                stuck = true;
            }
            Some((d, _)) if d >= stalled_after => {}
            _ if stuck => {
                info!(source = %name, "file source tailer makes progress again");
                if let Some(h) = &health {
                    h.clear_stuck(&task);
                }
                stuck = false;
            }
            _ => {}
        }
    }
}

/// Ends the watchdog and takes the source off the stuck list.
pub fn end_watch(name: &str, task: tokio::task::JoinHandle<()>, health: Option<&Health>) {
    task.abort();
    if let Some(h) = health {
        h.clear_stuck(&format!("source:{name}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_is_never_busy_and_a_step_ages() {
        let b = Beat::default();
        assert_eq!(b.busy_for(Instant::now()), None);
        b.step(Step::Opening);
        let later = Instant::now() + Duration::from_secs(40);
        let (age, step) = b.busy_for(later).unwrap();
        assert_eq!(step, Step::Opening);
        assert!(age >= Duration::from_secs(39), "{age:?}");
        b.step(Step::Waiting);
        assert_eq!(b.busy_for(later), None);
    }

    #[tokio::test]
    async fn a_long_step_is_stuck_in_readyz_until_it_returns() {
        let (beat, gauge, health) = (
            Arc::new(Beat::default()),
            Gauge::default(),
            Arc::new(Health::default()),
        );
        let dog = tokio::spawn(watchdog(
            "app".into(),
            beat.clone(),
            gauge.clone(),
            Some(health.clone()),
            Duration::from_millis(1500),
        ));
        beat.step(Step::Opening);
        let end = Instant::now() + Duration::from_secs(10);
        while health.stuck().is_empty() {
            assert!(Instant::now() < end, "never listed as stuck");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let stuck = health.stuck();
        assert_eq!(stuck[0].0, "source:app");
        assert!(stuck[0].1.contains("opening a matched file"), "{stuck:?}");
        assert!(gauge.get() >= 1);
        beat.step(Step::Waiting);
        while !health.stuck().is_empty() {
            assert!(Instant::now() < end, "still stuck after the step returned");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        end_watch("app", dog, Some(&health));
    }
}
