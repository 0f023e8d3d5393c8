//! The limiter's rules, and the lines the formatter writes.

use std::io;
use std::sync::{Arc, Mutex};

use tracing::{error, info, warn};

use super::*;

fn key(callsite: usize, message: &str) -> Key {
    Key {
        callsite,
        message: message.into(),
    }
}

#[test]
fn limiter_passes_a_burst_then_counts_until_the_window_ends() {
    let mut l = Limiter::new(Duration::from_secs(60));
    let t0 = Instant::now();
    let pass =
        |l: &mut Limiter, k: &Key, at: Duration| l.check(k.clone(), Level::WARN, "t", t0 + at);
    let a = key(1, "receiver down");
    for _ in 0..BURST {
        assert!(pass(&mut l, &a, Duration::ZERO));
    }
    for _ in 0..57 {
        assert!(!pass(&mut l, &a, Duration::from_secs(1)));
    }
    // Another message of the same callsite, and the same message of
    // another callsite, have their own limits.
    assert!(pass(&mut l, &key(1, "other"), Duration::from_secs(2)));
    assert!(pass(
        &mut l,
        &key(2, "receiver down"),
        Duration::from_secs(2)
    ));

    assert!(l.sweep(t0 + Duration::from_secs(59)).is_empty());
    let ended = l.sweep(t0 + Duration::from_secs(61));
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0].count, 57);
    assert_eq!(ended[0].message, "receiver down");
    assert_eq!(
        l.tracked(),
        2,
        "ended windows are forgotten, the others kept"
    );
    assert!(pass(&mut l, &a, Duration::from_secs(62)), "a new window");
    assert!(
        l.sweep(t0 + Duration::from_secs(70)).is_empty(),
        "nothing held back"
    );
    assert_eq!(l.tracked(), 1);
}

#[test]
fn limiter_memory_is_bounded() {
    let mut l = Limiter::new(Duration::from_secs(60));
    let now = Instant::now();
    for i in 0..MAX_KEYS + 100 {
        assert!(l.check(key(i, "m"), Level::WARN, "t", now));
    }
    assert_eq!(l.tracked(), MAX_KEYS);
    // Untracked pairs are not limited.
    for _ in 0..2 * BURST {
        assert!(l.check(key(MAX_KEYS + 50, "m"), Level::WARN, "t", now));
    }
}

/// A writer into a shared buffer.
#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Buf {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

fn journal_subscriber(buf: &Buf, window: Duration) -> impl Subscriber {
    let b = buf.clone();
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || b.clone())
        .with_max_level(Level::DEBUG)
        .event_format(Lines {
            inner: journal_inner(),
            style: Style::Journal,
            limiter: Mutex::new(Limiter::new(window)),
        })
        .finish()
}

#[test]
fn journal_lines_start_with_their_priority_and_no_time() {
    let buf = Buf::default();
    tracing::subscriber::with_default(journal_subscriber(&buf, WINDOW), || {
        error!("e1");
        warn!(x = 1, "w1");
        info!("i1");
        tracing::debug!("d1");
        tracing::trace!("not enabled");
    });
    let text = buf.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    for (line, (p, m)) in
        lines
            .iter()
            .zip([("<3>", "e1"), ("<4>", "w1"), ("<6>", "i1"), ("<7>", "d1")])
    {
        assert!(line.starts_with(p), "{line}");
        assert!(line.contains(m), "{line}");
        assert!(
            !line[3..].starts_with(|c: char| c.is_ascii_digit()),
            "no time: {line}"
        );
    }
}

#[test]
fn text_lines_keep_their_timestamp() {
    let buf = Buf::default();
    let b = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || b.clone())
        .event_format(Lines {
            inner: plain(),
            style: Style::Text,
            limiter: Mutex::new(Limiter::new(WINDOW)),
        })
        .finish();
    tracing::subscriber::with_default(sub, || warn!("w"));
    let text = buf.text();
    // Like 2026-12-02T03:04:05.123456Z
    assert!(
        text.starts_with("20") && text.as_bytes()[10] == b'T',
        "{text}"
    );
}

#[test]
fn repeated_warnings_end_in_a_count_line() {
    let buf = Buf::default();
    let window = Duration::from_millis(200);
    tracing::subscriber::with_default(journal_subscriber(&buf, window), || {
        let end = Instant::now() + Duration::from_secs(10);
        let mut sent = 0u64;
        while !buf.text().contains("more in the last") {
            assert!(Instant::now() < end, "no count line after {sent} warnings");
            warn!("receiver down");
            sent += 1;
            std::thread::yield_now();
        }
    });
    let text = buf.text();
    let count_line = text
        .lines()
        .find(|l| l.contains("more in the last"))
        .unwrap();
    assert!(count_line.starts_with("<4>WARN "), "{count_line}");
    assert!(count_line.ends_with(": receiver down"), "{count_line}");
    let before = text.split(count_line).next().unwrap();
    let passed = before
        .lines()
        .filter(|l| l.contains("receiver down"))
        .count();
    assert_eq!(passed as u32, BURST, "{text}");
    let n: u64 = count_line
        .split("… ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(n > 0, "{count_line}");
}
