//! The input files: Loghub lines for the throughput phases, numbered
//! syslog-style lines for the kill -9 and outage phases.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

pub(crate) struct Corpus {
    pub(crate) lines: u64,
    pub(crate) bytes: u64,
}

/// The Loghub sample lines, without their line ends (a CR of a CRLF sample
/// is kept, as a tailer would see it), empty lines left out.
pub(crate) fn loghub_lines() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/loghub");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/loghub")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    names.sort();
    let mut lines = Vec::new();
    for n in names {
        let b = std::fs::read(&n).unwrap();
        lines.extend(
            b.split(|&c| c == b'\n')
                .filter(|l| !l.is_empty() && *l != b"\r")
                .map(|l| l.to_vec()),
        );
    }
    lines
}

/// Whether the throughput input is the busy application log of issue 32
/// (`HOLDFAST_E2E_SHAPE=app`): lines of about 195 bytes,
/// `2026-01-01T00:00:00.000000+00:00 edge-gw-01 anchor-app[4242]:
/// level=info seq=0000000001 msg="telemetry payload …"` (a 100-character
/// `msg`), all in one file.
pub(crate) fn app_shape() -> bool {
    std::env::var("HOLDFAST_E2E_SHAPE").is_ok_and(|v| v == "app")
}

/// Writes the application-log shape ([`app_shape`]) into one file, about
/// `total` bytes; each line carries its own number (`seq=`).
fn write_app_corpus(dir: &Path, total: u64) -> Corpus {
    let f = std::fs::File::create(dir.join("app-00.log")).unwrap();
    let mut w = BufWriter::with_capacity(8 << 20, f);
    let msg: String = "telemetry payload ".repeat(6).chars().take(100).collect();
    let (mut n, mut bytes) = (0u64, 0u64);
    while bytes < total {
        let us = n * 10;
        let line = format!(
            "2026-01-01T{:02}:{:02}:{:02}.{:06}+00:00 edge-gw-01 anchor-app[4242]: level=info seq={n:010} msg=\"{msg}\"\n",
            us / 3_600_000_000 % 24,
            us / 60_000_000 % 60,
            us / 1_000_000 % 60,
            us % 1_000_000,
        );
        w.write_all(line.as_bytes()).unwrap();
        bytes += line.len() as u64;
        n += 1;
    }
    w.into_inner().unwrap().sync_all().unwrap();
    Corpus { lines: n, bytes }
}

/// Writes `files` files of about `total / files` bytes each: Loghub lines
/// in turn, each prefixed with its number across all files, so every line
/// (and every file's first KiB, its fingerprint) is unique. With
/// [`app_shape`], the application-log shape in one file instead.
pub(crate) fn write_corpus(dir: &Path, files: usize, total: u64) -> Corpus {
    if app_shape() {
        return write_app_corpus(dir, total);
    }
    let unit = loghub_lines();
    let per_file = total.div_ceil(files as u64);
    let (mut n, mut bytes) = (0u64, 0u64);
    for i in 0..files {
        let f = std::fs::File::create(dir.join(format!("app-{i:02}.log"))).unwrap();
        let mut w = BufWriter::with_capacity(8 << 20, f);
        let mut written = 0u64;
        while written < per_file {
            let line = &unit[(n % unit.len() as u64) as usize];
            let mut num = itoa_buf(n);
            num.push(b' ');
            w.write_all(&num).unwrap();
            w.write_all(line).unwrap();
            w.write_all(b"\n").unwrap();
            written += (num.len() + line.len() + 1) as u64;
            n += 1;
        }
        w.into_inner().unwrap().sync_all().unwrap();
        bytes += written;
    }
    Corpus { lines: n, bytes }
}

fn itoa_buf(n: u64) -> Vec<u8> {
    format!("{n:010}").into_bytes()
}

/// What each numbered line carries: the receiver finds it in every
/// document and counts the number after it.
pub(crate) const LINENO: &[u8] = b"lineno=";

/// `lines` syslog-style lines in `files` files, each line carrying its own
/// number (`lineno=0000000042`) once, numbered across the files.
pub(crate) fn write_numbered_corpus(dir: &Path, files: usize, lines: u64) -> Corpus {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    const WHAT: [&str; 4] = [
        "Accepted publickey for",
        "Failed password for invalid user",
        "pam_unix(sshd:session): session opened for user",
        "Disconnected from user",
    ];
    let per_file = lines.div_ceil(files as u64);
    let mut bytes = 0u64;
    for i in 0..files as u64 {
        let f = std::fs::File::create(dir.join(format!("sys-{i:02}.log"))).unwrap();
        let mut w = BufWriter::with_capacity(8 << 20, f);
        for n in i * per_file..((i + 1) * per_file).min(lines) {
            let secs = n / 40;
            let line = format!(
                "{} {:2} {:02}:{:02}:{:02} gw-017 sshd[{}]: lineno={n:010} {} user{} from 10.{}.{}.{} port {} ssh2\n",
                MONTHS[(n / 3_000_000 % 12) as usize],
                1 + n / 100_000 % 28,
                secs / 3600 % 24,
                secs / 60 % 60,
                secs % 60,
                1000 + n % 30_000,
                WHAT[(n % 4) as usize],
                n % 997,
                n % 251,
                n / 7 % 256,
                n / 13 % 256,
                1024 + n * 7 % 60_000,
            );
            w.write_all(line.as_bytes()).unwrap();
            bytes += line.len() as u64;
        }
        w.into_inner().unwrap().sync_all().unwrap();
    }
    Corpus { lines, bytes }
}
