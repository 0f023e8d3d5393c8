//! Replays the saved fuzz inputs in `tests/fixtures/fuzz/<target>/` through
//! the same checks the fuzz targets run (`fuzz/src/checks.rs`), on stable,
//! in the normal suite: the seeds each target starts from, and every crash a
//! fuzzer found, minimized, so that it stays fixed. See `docs/fuzzing.md`.
//!
//! `cargo test --test fuzz_regressions -- --ignored regenerate_seeds`
//! rewrites the generated seeds (never the crash inputs).

#[path = "../fuzz/src/checks.rs"]
mod checks;
#[path = "../fuzz/src/readers.rs"]
mod readers;

use std::path::{Path, PathBuf};

fn fixtures(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fuzz")
        .join(target)
}

/// Every saved input of a target, by file name.
fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(fixtures(target))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    assert!(
        v.len() >= 3,
        "{target}: expected saved inputs, found {}",
        v.len()
    );
    v
}

fn replay(target: &str, check: impl Fn(&[u8])) {
    for (name, data) in inputs(target) {
        // Named first, so a failing input is identified above the panic.
        eprintln!("{target}: {name} ({} bytes)", data.len());
        check(&data);
    }
}

#[test]
fn seglog_scan() {
    replay("seglog_scan", checks::seglog_scan::check);
}

#[test]
fn seglog_recover() {
    replay("seglog_recover", |data| {
        let dir = tempfile::tempdir().unwrap();
        let valid = checks::seglog_recover::write_dir(data, dir.path());
        checks::seglog_recover::check_dir(dir.path(), &valid);
    });
}

#[test]
fn seglog_block() {
    replay("seglog_block", checks::seglog_block::check);
}

#[test]
fn otlp_decode() {
    replay("otlp_decode", checks::otlp_decode::check);
}

#[test]
fn config_parse() {
    replay("config_parse", checks::config_parse::check);
}

#[test]
fn process_parse() {
    replay("process_parse", readers::process_parse::check);
}

#[test]
fn journald_mapping() {
    replay("journald_mapping", readers::journald_mapping::check);
}

#[test]
fn file_lines() {
    replay("file_lines", readers::file_lines::check);
}

#[test]
fn quarantine_ndjson() {
    replay("quarantine_ndjson", readers::quarantine_ndjson::check);
}

#[test]
fn prometheus_text() {
    replay("prometheus_text", readers::prometheus_text::check);
}

#[test]
fn syslog() {
    replay("syslog", checks::syslog::check);
}

/// Writes the generated seeds into `tests/fixtures/fuzz/`: segment and
/// data-directory images made by the real log (under each codec, and a
/// format-1 directory continued in format 2), blocks made by the real
/// encoder, OTLP bodies from `tests/fixtures/otlp` behind their selector
/// byte, and the shipped configs. The `v1-*` inputs (format-1 images made
/// by holdfast before format 2) are never rewritten.
#[test]
#[ignore = "writes fixtures; run by hand"]
fn regenerate_seeds() {
    seeds::seglog();
    seeds::block();
    seeds::otlp();
    seeds::config();
}

mod seeds {
    use super::checks::otlp_decode::selector;
    use super::checks::seglog_recover::SEP;
    use super::fixtures;
    use bytes::Bytes;
    use holdfast::fuzzing::{Compression, Signal};
    use holdfast::seglog::{Batch, Compression as Codec, FsyncPolicy, Log, LogOptions, StartAt};
    use std::io::Write;
    use std::path::Path;

    fn save(target: &str, name: &str, data: &[u8]) {
        let dir = fixtures(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("seed-{name}")), data).unwrap();
    }

    /// A small log made by the real writer under `codec`: several segments
    /// of a few frames each, some batches with a context, one consumer
    /// part-way through and one at the start. Returns the cursor files and
    /// the segments, oldest first.
    fn make_log(dir: &Path, codec: Codec) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let opts = LogOptions {
            segment_bytes: 320,
            max_bytes: 1 << 20,
            fsync: FsyncPolicy::Never,
            compression: codec,
            ..LogOptions::default()
        };
        let log = Log::open(dir, opts).unwrap();
        let a = log.consumer("sink-a", StartAt::Oldest).unwrap();
        log.consumer("sink_b", StartAt::Oldest).unwrap();
        append_some(&log, 8);
        a.commit(4).unwrap();
        log.close_blocking().unwrap();
        drop(log);
        let (cursors, segments) = read_dir(dir);
        assert!(segments.len() >= 3, "{} segments", segments.len());
        (cursors, segments)
    }

    /// `n` batches of one to three short, compressible events, every third
    /// batch with a context and one with an empty event.
    fn append_some(log: &Log, n: u32) {
        for i in 0..n {
            let mut b = Batch::new();
            for j in 0..=(i % 3) {
                let x = "x".repeat(16 + (i * 7 % 30) as usize);
                b.push(format!("event {i}.{j}: {x}").as_bytes());
            }
            if i == 5 {
                b.push(b"");
            }
            if i % 3 == 1 {
                b.set_context(Bytes::from(format!("context of batch {i}")));
            }
            log.append_blocking(b).unwrap();
        }
    }

    /// The cursor files and the segments of a closed log, oldest first.
    fn read_dir(dir: &Path) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let mut cursors = Vec::new();
        let mut segments = Vec::new();
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        for n in names {
            let bytes = std::fs::read(dir.join(&n)).unwrap();
            if n.starts_with("cursors.") {
                cursors.push(bytes);
            } else if n.ends_with(".seg") {
                segments.push(bytes);
            }
        }
        (cursors, segments)
    }

    fn join(parts: &[Vec<u8>]) -> Vec<u8> {
        parts.join(SEP)
    }

    /// The first frame of a segment image whose first block is compressed,
    /// with one byte of that block's body inverted and the frame's CRC
    /// computed again: damage only decompression can find.
    fn damaged_block(seg: &[u8]) -> Vec<u8> {
        let le32 =
            |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        let mut at = 32;
        while at < seg.len() {
            let len = le32(seg, at);
            if seg[at + 28 + 12] != 0 {
                let mut g = seg.to_vec();
                g[at + 28 + 16 + 1] ^= 0xff;
                let crc = crc32fast::hash(&g[at + 8..at + 8 + len]);
                g[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
                return g;
            }
            at += 8 + len;
        }
        panic!("no compressed block in the segment");
    }

    pub fn seglog() {
        let dir = tempfile::tempdir().unwrap();
        let (cursors, segs) = make_log(dir.path(), Codec::Zstd { level: 1 });
        let active = segs.last().unwrap().clone();

        save("seglog_scan", "header-only", &segs[0][..32]);
        save("seglog_scan", "sealed", &segs[0]);
        save("seglog_scan", "active", &active);
        save("seglog_scan", "torn-tail", &active[..active.len() - 5]);
        let mut flipped = segs[1].clone();
        let mid = 32 + (flipped.len() - 32) / 2;
        flipped[mid] ^= 0x20;
        save("seglog_scan", "bit-flip", &flipped);
        let mut twice = segs[0].clone();
        twice.extend_from_slice(&segs[0][32..]);
        save("seglog_scan", "frames-repeated", &twice);
        save("seglog_scan", "damaged-block", &damaged_block(&segs[0]));
        let mut no_header = segs[0].clone();
        no_header[29] ^= 1;
        save("seglog_scan", "damaged-header", &no_header);
        for (codec, name) in [(Codec::None, "none"), (Codec::Lz4, "lz4")] {
            let d = tempfile::tempdir().unwrap();
            let (_, s) = make_log(d.path(), codec);
            save("seglog_scan", &format!("sealed-{name}"), &s[0]);
        }

        let all: Vec<Vec<u8>> = cursors.iter().chain(&segs).cloned().collect();
        save("seglog_recover", "log", &join(&all));
        save("seglog_recover", "no-cursors", &join(&segs));
        let mut torn = all.clone();
        let last = torn.last_mut().unwrap();
        last.truncate(last.len() - 3);
        save("seglog_recover", "torn-tail", &join(&torn));
        let mut damaged = all.clone();
        damaged[cursors.len()] = flipped_at(&segs[0], 40);
        save("seglog_recover", "damaged-sealed", &join(&damaged));
        let mut block = all.clone();
        block[cursors.len()] = damaged_block(&segs[0]);
        save("seglog_recover", "damaged-block", &join(&block));
        let mut gap = all.clone();
        gap.remove(cursors.len() + 1);
        save("seglog_recover", "missing-segment", &join(&gap));
        let mut short = all.clone();
        *short.last_mut().unwrap() = active[..20].to_vec();
        save("seglog_recover", "short-active-header", &join(&short));

        // A format-1 directory (the saved `v1-log`, written by holdfast
        // before format 2) opened by this build and appended to: sealed
        // format-1 segments, then format-2 ones.
        let v1 = std::fs::read(fixtures("seglog_recover").join("v1-log")).unwrap();
        let d = tempfile::tempdir().unwrap();
        let valid = super::checks::seglog_recover::write_dir(&v1, d.path());
        assert!(!valid.is_empty());
        let log = Log::open(
            d.path(),
            LogOptions {
                segment_bytes: 320,
                fsync: FsyncPolicy::Never,
                ..LogOptions::default()
            },
        )
        .unwrap();
        append_some(&log, 4);
        log.close_blocking().unwrap();
        drop(log);
        let (c, s) = read_dir(d.path());
        let mixed: Vec<Vec<u8>> = c.into_iter().chain(s).collect();
        save("seglog_recover", "mixed-v1-v2", &join(&mixed));
    }

    /// Blocks made by the real encoder, behind the selector, raw length
    /// and count bytes `seglog_block` reads.
    pub fn block() {
        use holdfast::seglog::block;
        let line = b"Jun 14 15:16:01 combo sshd(pam_unix)[19939]: authentication failure; uid=0";
        let mut framed = Vec::new();
        for i in 0..6u32 {
            framed.extend_from_slice(&((line.len() + 2) as u32).to_le_bytes());
            framed.extend_from_slice(line);
            framed.extend_from_slice(format!("{i:02}").as_bytes());
        }
        for (codec, name) in [
            (Codec::None, "none"),
            (Codec::Zstd { level: 1 }, "zstd"),
            (Codec::Lz4, "lz4"),
        ] {
            let e = block::encode(b"ctx", Bytes::from(framed.clone()), 6, codec);
            let mut all = e.head.to_vec();
            all.extend_from_slice(&e.body);
            let h = block::BlockHeader::decode(&all).unwrap();
            let mut input = vec![h.codec, 0, 0, h.count as u8];
            input[1..3].copy_from_slice(&(h.raw_len as u16).to_le_bytes());
            input.extend_from_slice(&all[block::BLOCK_HEADER_LEN..]);
            save("seglog_block", name, &input);
            if h.codec != 0 {
                let mut bad = input.clone();
                let mid = 4 + (bad.len() - 4) / 2;
                bad[mid] ^= 0x55;
                save("seglog_block", &format!("{name}-damaged"), &bad);
            }
        }
    }

    fn flipped_at(b: &[u8], at: usize) -> Vec<u8> {
        let mut b = b.to_vec();
        b[at] ^= 1;
        b
    }

    pub fn otlp() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/otlp");
        for (signal, name) in [
            (Signal::Logs, "logs"),
            (Signal::Traces, "traces"),
            (Signal::Metrics, "metrics"),
        ] {
            for (json, ext) in [(false, "pb"), (true, "json")] {
                let plain = std::fs::read(src.join(format!("{name}.{ext}"))).unwrap();
                let gz = std::fs::read(src.join(format!("{name}.{ext}.gz"))).unwrap();
                let mut z =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
                z.write_all(&plain).unwrap();
                let z = z.finish().unwrap();
                for (c, cname, body) in [
                    (Compression::Identity, "identity", &plain),
                    (Compression::Gzip, "gzip", &gz),
                    (Compression::Deflate, "zlib", &z),
                ] {
                    let mut input = vec![selector(signal, json, c)];
                    input.extend_from_slice(body);
                    save("otlp_decode", &format!("{name}-{ext}-{cname}"), &input);
                }
            }
        }
        for (signal, name) in [
            (Signal::Logs, "logs"),
            (Signal::Logs, "events"),
            (Signal::Traces, "trace"),
            (Signal::Metrics, "metrics"),
        ] {
            let body = std::fs::read(src.join(format!("examples/{name}.json"))).unwrap();
            let mut input = vec![selector(signal, true, Compression::Identity)];
            input.extend_from_slice(&body);
            save("otlp_decode", &format!("example-{name}-json"), &input);
        }
    }

    pub fn config() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
        for dir in [root.clone(), root.join("examples")] {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "toml") {
                    let name = p.file_name().unwrap().to_string_lossy().into_owned();
                    save("config_parse", &name, &std::fs::read(&p).unwrap());
                }
            }
        }
    }
}
