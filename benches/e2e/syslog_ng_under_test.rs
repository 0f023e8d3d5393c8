//! syslog-ng as a contender of phases 5-7: files -> `http()` posting
//! `_bulk` bodies, started again and again on the same persist file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::contender::Contender;
use crate::syslog_ng::syslog_ng_bin;

pub(crate) struct SyslogNgUnderTest {
    pub(crate) bin: PathBuf,
    pub(crate) dir: PathBuf,
    pub(crate) conf: PathBuf,
    pub(crate) child: Option<Child>,
    pub(crate) runs: u32,
}

impl SyslogNgUnderTest {
    /// syslog-ng tailing `input` (the same source options as the syslog-ng
    /// phase) into an `http()` destination that posts `_bulk` bodies to
    /// the receiver, with flow control and no disk buffer: file positions
    /// advance in its persist file as the destination acknowledges.
    /// Err, with the reason, when it cannot run this config.
    pub(crate) fn new(
        dir: PathBuf,
        input: &Path,
        receiver: SocketAddr,
        buffer: Buffer,
    ) -> Result<SyslogNgUnderTest, String> {
        let bin =
            syslog_ng_bin().ok_or("syslog-ng is not installed (apt-get install syslog-ng-core)")?;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("syslog-ng.conf");
        std::fs::write(&conf, syslog_ng_http_conf(input, receiver, buffer, &dir)).unwrap();
        let check = Command::new(&bin)
            .arg("--syntax-only")
            .arg("-f")
            .arg(&conf)
            .output()
            .map_err(|e| format!("running {}: {e}", bin.display()))?;
        if !check.status.success() {
            return Err(format!(
                "syslog-ng rejects the http() config (apt-get install syslog-ng-mod-http): {}",
                String::from_utf8_lossy(&check.stderr).trim()
            ));
        }
        Ok(SyslogNgUnderTest {
            bin,
            dir,
            conf,
            child: None,
            runs: 0,
        })
    }

    fn stderr_path(&self) -> PathBuf {
        self.dir.join(format!("stderr-{}.log", self.runs))
    }
}

/// Where syslog-ng keeps what its destination has not sent yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Buffer {
    /// In memory, with flow control back to the file positions: a line is
    /// read again after a crash, lost if its file was rotated away meanwhile.
    Memory,
    /// `disk-buffer(reliable(yes))`: every line written to the disk buffer
    /// before it counts as received, syslog-ng's closest match to holdfast's
    /// own log (`fsync = "always"`), and what its documentation offers for
    /// "no message loss".
    ReliableDisk,
}

impl Buffer {
    pub(crate) fn settings(self) -> &'static str {
        match self {
            Buffer::Memory => SYSLOG_NG_HTTP_SETTINGS,
            Buffer::ReliableDisk => SYSLOG_NG_HTTP_RELIABLE_SETTINGS,
        }
    }
}

/// The http() settings beside holdfast's sink defaults: 2 requests in
/// flight, a partial batch sent a second after it began (holdfast's
/// `batch_timeout`: with 100 ms here, as before, the last lines of a run
/// waited a tenth of holdfast's linger and the lines/s compared the two
/// timeouts as much as the agents), batches of 1,000 lines (the issue's;
/// holdfast's default is 500). `max-files(10)`, not the syslog-ng phase's 100:
/// `log-iw-size` is shared out over `max-files`, and a window of 1,000
/// lines per file left its batches half full (5,000 lines/s). `time-reopen(1)` (default 60 s) and `retries`
/// high so that an outage delays lines instead of dropping them.
fn syslog_ng_http_conf(input: &Path, receiver: SocketAddr, buffer: Buffer, dir: &Path) -> String {
    // 1 GiB on disk (the whole input fits), the default 1,000 lines kept
    // in memory beside it (`qout-size`).
    let disk_buffer = match buffer {
        Buffer::Memory => String::new(),
        Buffer::ReliableDisk => format!(
            "disk-buffer(reliable(yes) disk-buf-size(1073741824) mem-buf-size(16777216) dir(\"{}\")) ",
            dir.display()
        ),
    };
    format!(
        "@version: 3.38\n\
         options {{ threaded(yes); stats-freq(0); log-msg-size(262144); time-reopen(1); }};\n\
         source s_files {{ wildcard-file(base-dir(\"{}\") filename-pattern(\"*.log\") recursive(no) \
         flags(no-parse) follow-freq(1) log-fetch-limit(10000) log-iw-size(100000) max-files(10)); }};\n\
         destination d_bulk {{ http(url(\"http://{receiver}/_bulk\") method(\"POST\") \
         headers(\"Content-Type: application/x-ndjson\") workers(2) batch-lines(1000) batch-timeout(1000) \
         retries(1000000) time-reopen(1) {disk_buffer}\
         body(\"{{\\\"index\\\":{{}}}}\\n$(format-json message=${{MSG}})\") body-suffix(\"\\n\")); }};\n\
         log {{ source(s_files); destination(d_bulk); flags(flow-control); }};\n",
        input.display()
    )
}

/// What `syslog_ng_http_conf` says, for the table.
pub(crate) const SYSLOG_NG_HTTP_SETTINGS: &str = "syslog-ng: wildcard-file (log-iw-size(100000) max-files(10)) -> http() _bulk, \
     flow-control, no disk-buffer, workers(2) batch-lines(1000) batch-timeout(1000) retries(1000000) time-reopen(1)";

/// What `syslog_ng_http_conf` says with a reliable disk buffer.
pub(crate) const SYSLOG_NG_HTTP_RELIABLE_SETTINGS: &str = "syslog-ng: the same, with disk-buffer(reliable(yes) disk-buf-size(1 GiB) mem-buf-size(16 MiB)), \
     every line on disk before it counts as received";

impl Contender for SyslogNgUnderTest {
    fn name(&self) -> &'static str {
        "syslog-ng"
    }

    fn start(&mut self) -> Instant {
        self.runs += 1;
        let at = Instant::now();
        let child = Command::new(&self.bin)
            .arg("-F")
            .arg("--no-caps")
            .arg("-f")
            .arg(&self.conf)
            .arg("-R")
            .arg(self.dir.join("persist"))
            .arg("-p")
            .arg(self.dir.join("pid"))
            .arg("-c")
            .arg(self.dir.join("ctl"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.stderr_path()).unwrap())
            .spawn()
            .expect("starting syslog-ng");
        self.child = Some(child);
        at
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let end = Instant::now() + Duration::from_secs(60);
            while c.try_wait().unwrap().is_none() {
                assert!(Instant::now() < end, "syslog-ng did not stop within 60s");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    fn check_alive(&mut self) {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                panic!(
                    "syslog-ng exited ({status}): {}",
                    std::fs::read_to_string(self.stderr_path()).unwrap_or_default()
                );
            }
        }
    }

    fn appends(&self) -> Option<u64> {
        None
    }
}

impl Drop for SyslogNgUnderTest {
    fn drop(&mut self) {
        self.kill9();
    }
}
