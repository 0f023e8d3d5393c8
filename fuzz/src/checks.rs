//! What each fuzz target does with one input, and what it asserts.
//!
//! Shared by the libFuzzer targets (`fuzz_targets/*.rs`, nightly) and by
//! `tests/fuzz_regressions.rs`, which includes this file with `#[path]` and
//! replays the saved inputs under `tests/fixtures/fuzz/` on stable. So it
//! may use only what the holdfast crate's tests can: holdfast itself,
//! crc32fast, prost and the standard library. Every check panics on failure,
//! which libFuzzer reports as a crash.

#![allow(dead_code)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// An independent decoder of one frame, written from the layout in
/// `docs/on-disk-format.md` rather than reusing `format.rs`, so the checks
/// do not share the code they check. Returns the frame's first sequence
/// number, append time, events and total length.
pub fn oracle_frame(b: &[u8]) -> Option<(u64, u64, Vec<&[u8]>, usize)> {
    let le32 = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
    let le64 = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    if b.len() < 28 {
        return None;
    }
    let len = le32(0);
    if !(24..=20 + (64 << 20)).contains(&len) || b.len() < 8 + len {
        return None;
    }
    if crc32fast::hash(&b[8..8 + len]) != le32(4) as u32 {
        return None;
    }
    let (first, count, append_ms) = (le64(8), le32(16), le64(20));
    // Sequence numbers must fit in 64 bits.
    if count == 0 || first.checked_add(count as u64).is_none() {
        return None;
    }
    let payload = &b[28..8 + len];
    let mut events = Vec::new();
    let mut at = 0;
    for _ in 0..count {
        if payload.len() - at < 4 {
            return None;
        }
        let n = u32::from_le_bytes(payload[at..at + 4].try_into().unwrap()) as usize;
        at += 4;
        if payload.len() - at < n {
            return None;
        }
        events.push(&payload[at..at + n]);
        at += n;
    }
    (at == payload.len()).then_some((first, append_ms, events, 8 + len))
}

// ---------------------------------------------------------------------------

pub mod seglog_scan {
    //! The recovery scan over one arbitrary segment image, and the frame
    //! decoders at every offset of it.

    use super::oracle_frame;
    use holdfast::fuzzing::scan_segment;
    use holdfast::seglog::format::{self, Decoded, EventIter, SegmentHeader};

    pub fn check(data: &[u8]) {
        let _ = SegmentHeader::decode(data);
        // The base the file name would give: the header's, if there is one.
        let base = data
            .get(8..16)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));

        for at in 0..data.len() {
            let d = format::decode_frame(&data[at..], format::FORMAT_V1);
            let o = oracle_frame(&data[at..]);
            match (&d, &o) {
                (
                    Decoded::Frame {
                        header,
                        payload,
                        len,
                    },
                    Some((first, ms, events, olen)),
                ) => {
                    assert_eq!(
                        (header.first_seq, header.append_ms),
                        (*first, *ms),
                        "at {at}"
                    );
                    assert_eq!(header.count as usize, events.len(), "at {at}");
                    assert_eq!(len, olen, "at {at}");
                    let got: Vec<&[u8]> = EventIter::new(payload).map(|r| &payload[r]).collect();
                    assert_eq!(&got, events, "at {at}");
                    let peeked = format::peek_frame(&data[at..], format::FORMAT_V1);
                    assert_eq!(peeked, Some((*header, *len)), "at {at}");
                }
                (Decoded::Frame { .. }, None) => {
                    panic!("at {at}: decoded a frame the oracle rejects")
                }
                (_, Some(_)) => panic!("at {at}: rejected a valid frame: {d:?}"),
                (_, None) => {}
            }
        }

        let s = scan_segment(data, base);
        let len = data.len() as u64;
        assert!(s.valid_end <= len);
        assert!(s.next_seq >= base);
        if data.len() >= 32 {
            // Everything is either valid frames, skipped damage, or the torn tail.
            let torn = s.torn.map_or(0, |(at, n)| {
                assert_eq!(at, s.valid_end, "torn tail starts where valid data ends");
                n
            });
            assert_eq!(s.valid_end + torn, len);
        } else {
            assert_eq!(s.valid_end, len);
            assert_eq!((s.next_seq, s.torn, s.damaged.len()), (base, None, 0));
            return;
        }

        // Replay the scan's path with the oracle: from the header, frame to
        // frame, jumping over each damaged region it reports.
        let mut at = 32usize;
        let mut next = base;
        let mut skipped = 0u64;
        let mut damaged = s.damaged.iter().peekable();
        while (at as u64) < s.valid_end {
            if let Some((off, _, n)) = damaged.peek() {
                if *off == at as u64 {
                    assert!(*n > 0);
                    // The region really is damaged from `next`'s point of
                    // view, and no acceptable frame starts inside it.
                    for i in at..at + *n as usize {
                        if let Some((first, ..)) = oracle_frame(&data[i..]) {
                            assert!(first < next, "a valid frame at {i} was skipped as damage");
                        }
                    }
                    at += *n as usize;
                    damaged.next();
                    continue;
                }
            }
            let (first, _, events, flen) = oracle_frame(&data[at..])
                .unwrap_or_else(|| panic!("scan accepted an invalid frame at {at}"));
            assert!(first >= next, "frame at {at} goes back in sequence");
            skipped += first - next;
            next = first
                .checked_add(events.len() as u64)
                .unwrap_or_else(|| panic!("frame at {at}: sequence numbers overflow"));
            at += flen;
        }
        assert!(
            damaged.next().is_none(),
            "damage reported past the valid end"
        );
        assert_eq!(at as u64, s.valid_end);
        assert_eq!(s.next_seq, next);
        assert_eq!(s.events_skipped, skipped);
        if let Some((t, _)) = s.torn {
            // Truncating the tail loses no frame that would have been accepted.
            for i in t as usize..data.len() {
                if let Some((first, ..)) = oracle_frame(&data[i..]) {
                    assert!(first < next, "a valid frame at {i} is inside the torn tail");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------

pub mod seglog_recover {
    //! A whole data directory built from the input, opened read-only and
    //! read-write (which repairs), read back through readers and consumers.
    //!
    //! Input: parts separated by [`SEP`]. A part starting with `HFCU` is a
    //! cursor file (`cursors.0`, then `cursors.1`); any other part is a
    //! segment file, named after the base sequence in its header (bytes
    //! 8..16) or one past the previous segment's, whichever is larger.

    use super::*;
    use holdfast::seglog::{Batch, Event, FsyncPolicy, Log, LogOptions, StartAt};

    pub const SEP: &[u8] = b"#HF#";
    const APPENDED: &[u8] = b"appended after recovery";
    const MAX_SEGMENTS: usize = 8;

    type Key = (u64, u64, Vec<u8>);

    /// Writes the directory image; returns every (seq, append time, bytes)
    /// that any valid frame anywhere in any segment carries.
    pub fn write_dir(data: &[u8], dir: &Path) -> HashSet<Key> {
        let mut valid = HashSet::new();
        let mut cursor_slot = 0;
        let mut prev: Option<u64> = None;
        let mut segments = 0;
        for part in split(data, SEP) {
            if part.starts_with(b"HFCU") && cursor_slot < 2 {
                std::fs::write(dir.join(format!("cursors.{cursor_slot}")), part).unwrap();
                cursor_slot += 1;
                continue;
            }
            if prev.is_some_and(|p| p == u64::MAX) {
                break;
            }
            let from_header = part
                .get(8..16)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap()));
            let base = match (prev, from_header) {
                (None, h) => h.unwrap_or(0),
                (Some(p), h) => h.unwrap_or(0).max(p + 1),
            };
            prev = Some(base);
            segments += 1;
            std::fs::write(dir.join(format!("{base:020}.seg")), part).unwrap();
            for at in 32..part.len() {
                if let Some((first, ms, events, _)) = oracle_frame(&part[at..]) {
                    for (i, e) in events.into_iter().enumerate() {
                        if let Some(seq) = first.checked_add(i as u64) {
                            valid.insert((seq, ms, e.to_vec()));
                        }
                    }
                }
            }
            if segments >= MAX_SEGMENTS {
                break;
            }
        }
        valid
    }

    fn split<'a>(data: &'a [u8], sep: &[u8]) -> Vec<&'a [u8]> {
        let mut parts = Vec::new();
        let mut rest = data;
        while let Some(i) = rest.windows(sep.len()).position(|w| w == sep) {
            parts.push(&rest[..i]);
            rest = &rest[i + sep.len()..];
        }
        parts.push(rest);
        parts
    }

    fn opts() -> LogOptions {
        LogOptions {
            // Nothing here is about durability; syncing would only slow the
            // fuzzer down.
            fsync: FsyncPolicy::Never,
            ..LogOptions::default()
        }
    }

    /// Every event a reader without a cursor sees, from the oldest, each one
    /// checked against what valid frames carry.
    fn read_all(log: &Log, valid: &HashSet<Key>) -> Vec<(u64, Vec<u8>)> {
        let mut r = log.reader(0);
        drain(&mut r, valid, log.next_seq())
    }

    /// Reads until caught up; `end` is the log's acknowledged end.
    fn drain(
        r: &mut holdfast::seglog::Consumer,
        valid: &HashSet<Key>,
        end: u64,
    ) -> Vec<(u64, Vec<u8>)> {
        let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
        loop {
            let batch: Vec<Event> = match r.read(64, 1 << 20) {
                Ok(b) => b,
                // An unreadable segment is an error, not a panic.
                Err(_) => break,
            };
            if batch.is_empty() {
                break;
            }
            for e in batch {
                let key = (e.seq, e.append_ms, e.data.to_vec());
                assert!(
                    valid.contains(&key),
                    "delivered event {} ({} bytes) that no valid frame carries",
                    e.seq,
                    e.data.len()
                );
                assert!(
                    e.seq < end,
                    "delivered event {} at or past the log's end {end}",
                    e.seq
                );
                if let Some((last, _)) = out.last() {
                    assert!(e.seq > *last, "sequence went back: {} after {last}", e.seq);
                }
                out.push((e.seq, e.data.to_vec()));
            }
        }
        out
    }

    fn from(events: &[(u64, Vec<u8>)], min: u64) -> Vec<(u64, Vec<u8>)> {
        events.iter().filter(|(s, _)| *s >= min).cloned().collect()
    }

    /// The lowest committed position: below it, the writer may delete
    /// sealed segments at any moment, so reads there are not comparable.
    fn min_committed(log: &Log) -> u64 {
        let st = log.stats();
        st.consumers.iter().map(|c| c.committed).min().unwrap_or(0)
    }

    pub fn check(data: &[u8]) {
        let root = scratch_dir();
        let dir = root.join("log");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let valid = write_dir(data, &dir);
        check_dir(&dir, &valid);
        let _ = std::fs::remove_dir_all(&dir);
    }

    pub fn check_dir(dir: &Path, valid: &HashSet<Key>) {
        // Read-only first: it must change nothing and take no lock.
        let before = Log::open_read_only(dir).ok().map(|log| {
            let _ = log.stats();
            read_all(&log, valid)
        });

        // Read-write: repairs, then the same events from wherever the
        // consumers' commits protect them.
        let Ok(log) = Log::open(dir, opts()) else {
            return;
        };
        let _ = log.stats();
        let floor = min_committed(&log);
        let first = read_all(&log, valid);
        if let Some(before) = &before {
            assert_eq!(
                from(before, floor),
                from(&first, floor),
                "read-only and read-write differ"
            );
        }
        log.close_blocking().unwrap();
        drop(log);

        // Opened again: repair is idempotent.
        let log = Log::open(dir, opts()).unwrap();
        let floor = floor.max(min_committed(&log));
        let second = read_all(&log, valid);
        assert_eq!(
            from(&first, floor),
            from(&second, floor),
            "second open differs"
        );

        // Each consumer reads what is left for it and commits it all.
        let mut committed = Vec::new();
        for name in log.consumers() {
            let mut c = log.consumer(&name, StartAt::Oldest).unwrap();
            let at = c.committed();
            let got = drain(&mut c, valid, log.next_seq());
            if let Some((s, _)) = got.first() {
                assert!(*s >= at, "consumer {name} read {s}, below its commit {at}");
            }
            let end = got.last().map_or(at, |(s, _)| s + 1);
            c.commit(end).unwrap();
            committed.push((name, end));
        }

        // Sequence numbers are never reused: an append after recovery gets
        // numbers above every event any reader saw, and reads back.
        let end = log.next_seq();
        let mut batch = Batch::new();
        batch.push(APPENDED);
        let r = log
            .append_blocking(batch)
            .expect("an append after recovery failed");
        assert_eq!(r.start, end);
        if let Some((last, _)) = first.iter().chain(&second).max() {
            assert!(r.start > *last, "append reused sequence {}", r.start);
        }
        let back = log.reader(r.start).read(1, 1 << 20).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!((back[0].seq, &back[0].data[..]), (r.start, APPENDED));
        let mut valid = valid.clone();
        valid.insert((back[0].seq, back[0].append_ms, APPENDED.to_vec()));
        log.close_blocking().unwrap();
        drop(log);

        // The commits survived the close.
        let log = Log::open_read_only(dir).unwrap();
        let st = log.stats();
        for (name, end) in committed {
            let c = st.consumers.iter().find(|c| c.name == name).unwrap();
            assert!(
                c.committed >= end,
                "consumer {name}: committed {end}, reopened at {}",
                c.committed
            );
        }
        let floor = floor.max(min_committed(&log));
        let third = read_all(&log, &valid);
        assert_eq!(third.last(), Some(&(end, APPENDED.to_vec())));
        assert_eq!(
            from(&second, floor),
            from(&third[..third.len() - 1], floor),
            "read-only after close differs"
        );
    }

    /// One directory per process, on tmpfs when there is one.
    fn scratch_dir() -> PathBuf {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("holdfast-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}

// ---------------------------------------------------------------------------

pub mod otlp_decode {
    //! The OTLP/HTTP handler's path from body bytes to envelopes.
    //!
    //! Input: one selector byte, then the body. The selector picks the
    //! signal (`b % 3`: logs, traces, metrics), the encoding (`b / 3 % 2`:
    //! protobuf, JSON) and the compression (`b / 6 % 3`: identity, gzip,
    //! deflate).

    use holdfast::event::{Envelope, Record};
    use holdfast::fuzzing::{otlp_prepare, Compression, Signal};
    use prost::Message;

    const MAX_BODY: u64 = 1 << 20;
    const OBSERVED: u64 = 1_700_000_000_000_000_000;

    pub fn selector(signal: Signal, json: bool, c: Compression) -> u8 {
        let s = match signal {
            Signal::Logs => 0,
            Signal::Traces => 1,
            Signal::Metrics => 2,
        };
        let c = match c {
            Compression::Identity => 0,
            Compression::Gzip => 1,
            Compression::Deflate => 2,
        };
        s + 3 * u8::from(json) + 6 * c
    }

    pub fn check(data: &[u8]) {
        let Some((&sel, body)) = data.split_first() else {
            return;
        };
        let signal = [Signal::Logs, Signal::Traces, Signal::Metrics][(sel % 3) as usize];
        let json = (sel / 3) % 2 == 1;
        let c = [
            Compression::Identity,
            Compression::Gzip,
            Compression::Deflate,
        ][((sel / 6) % 3) as usize];
        let Ok(p) = otlp_prepare(signal, json, c, body, MAX_BODY, OBSERVED) else {
            return;
        };
        assert!(p.body_len as u64 <= MAX_BODY.max(body.len() as u64));
        assert_eq!(
            p.envelopes.len() as u64,
            p.records,
            "one envelope per record"
        );
        let mut stripped = Vec::with_capacity(p.envelopes.len());
        for bytes in &p.envelopes {
            let mut env = Envelope::decode_event(bytes).expect("an envelope we made decodes");
            assert_eq!(env.signal(), Some(signal));
            assert_eq!(
                (env.source.as_str(), env.observed_time_unix_nano),
                ("fuzz", OBSERVED)
            );
            assert!(env.origin.is_none());
            // The split's hand-assembled bytes are what prost would write.
            assert_eq!(
                &env.encode_to_vec(),
                bytes,
                "split encodes differently from prost"
            );
            if let Some(Record::Metric(m)) = &env.record {
                use opentelemetry_proto::tonic::metrics::v1::metric::Data;
                let points = match &m.data {
                    Some(Data::Gauge(d)) => d.data_points.len(),
                    Some(Data::Sum(d)) => d.data_points.len(),
                    Some(Data::Histogram(d)) => d.data_points.len(),
                    Some(Data::ExponentialHistogram(d)) => d.data_points.len(),
                    Some(Data::Summary(d)) => d.data_points.len(),
                    None => 0,
                };
                assert_eq!(points, 1, "a metric envelope holds exactly one point");
            }
            env.id.clear();
            stripped.push(env.encode_to_vec());
        }

        // The same request as protobuf gives the same envelopes: JSON and
        // protobuf decoding agree, and protobuf decoding is stable.
        let again = otlp_prepare(
            signal,
            false,
            Compression::Identity,
            &p.protobuf,
            MAX_BODY,
            OBSERVED,
        )
        .unwrap_or_else(|e| panic!("the request re-encoded as protobuf is refused: {e}"));
        assert_eq!(
            again.protobuf, p.protobuf,
            "protobuf re-encoding is not stable"
        );
        assert_eq!(again.records, p.records);
        let again: Vec<Vec<u8>> = again
            .envelopes
            .iter()
            .map(|b| {
                let mut env = Envelope::decode(&b[..]).unwrap();
                env.id.clear();
                env.encode_to_vec()
            })
            .collect();
        assert_eq!(again, stripped, "envelopes differ between encodings");
    }
}

// ---------------------------------------------------------------------------

pub mod config_parse {
    //! `holdfast::config::parse` over arbitrary text.

    use holdfast::config::{parse, ConfigError};

    pub const PATH: &str = "/etc/holdfast/holdfast.toml";

    pub fn check(data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let result = parse(text, PATH);
        let lines = text.lines().count().max(1) + 1;
        match &result {
            Ok(s) => {
                // A config `check` accepts starts: its log options are valid.
                s.log
                    .validate()
                    .expect("accepted config has invalid log options");
                for sink in s.sinks.values() {
                    for input in &sink.inputs {
                        assert!(
                            s.sources.contains_key(input),
                            "sink input {input} is not a source"
                        );
                    }
                }
                for w in s.warnings() {
                    assert!(!w.is_error());
                    let _ = w.to_string();
                }
                let _ = s.describe();
            }
            Err(ConfigError::Invalid { problems }) => {
                assert!(!problems.is_empty(), "refused without a reason");
                for p in problems {
                    assert!(p.is_error());
                    assert!(!p.message.is_empty());
                    if let Some(pos) = p.position {
                        assert!(pos.line >= 1 && pos.column >= 1, "{pos:?}");
                        assert!(pos.line <= lines, "line {} of {lines}: {p}", pos.line);
                    }
                }
                let _ = result.as_ref().map_err(|e| e.to_string());
            }
            Err(e @ ConfigError::Read { .. }) => panic!("parse read a file: {e}"),
        }
        // Deterministic: the same text gives the same verdict.
        let again = parse(text, PATH);
        assert_eq!(
            again
                .as_ref()
                .map(|s| s.describe())
                .map_err(|e| e.to_string()),
            result
                .as_ref()
                .map(|s| s.describe())
                .map_err(|e| e.to_string())
        );
    }
}
