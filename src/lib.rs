/*!
holdfast: a telemetry agent for edge devices.

```text
 sources                         the log                           sinks
 file tail  ─┐                ┌─────────────────┐       ┌─ cursor ─ batch → send → per-event results
 OTLP/HTTP  ─┼─ append ──────▶│ segments on disk │──read─┼─ cursor ─ batch → send → ...
             ┘ (group commit) └─────────────────┘       └─ quarantine
```

Components, bottom to top (each imports only from its own layer or lower
ones; the layer table is in `docs/ARCHITECTURE.md`, and `tests/layers.rs`
holds the code to it):

* [`seglog`] — the durable, bounded, append-only segment log every record
  passes through: group-committed appends, one cursor per consumer, eviction
  by size and age, recovery from torn writes and damage. Also usable on its
  own as a library.
* [`event`] — the envelope one event in the log is: an OTLP record with its
  resource, scope, origin and stable id.
* [`metrics`] — every Prometheus metric, in one place; the log's figures are
  read at scrape time.
* [`api`] — `/metrics`, `/healthz`, `/readyz` on a local address.
* [`sinks`] — the log's consumers: deliver, then commit.
* [`sources`] — where events come from: file tailing, OTLP/HTTP; each
  acknowledges its input only after the append is durable.
* [`checking`] — the config's checking machinery (the checker, diagnostics
  naming file, line, key and fix, units, `${VAR}` interpolation, the
  machine checks' probes), which imports nothing of the settings.
* [`component`] — the component contract: the `Source` and `Sink` traits
  (check, describe, metrics, run), what a started component runs with.
* [`mqtt`] — the MQTT connection the `mqtt` source and sink share: its
  keys and their check, the client options built at each connect.
* [`config`] — the TOML config in stages (raw serde structs → validated
  [`config::Settings`]), assembled with [`checking`] and the list of kinds;
  `holdfast check` runs it.
* [`daemon`] — `holdfast run`: start-up, supervision, systemd protocol, the
  drain on SIGTERM. [`logging`] sets up `tracing` for terminal or journal.
* [`inspect`] — `holdfast inspect` and `dump`, over a read-only view of the log.
* [`cli`] — the operator's other subcommands: `holdfast quarantine`.
* [`process`] — a source's processing chain (parse, timestamp, severity,
  label, filter, sample, redact), run before the append so the log stores
  what will be sent.
* [`syslog_format`] — the syslog wire-format kit: the RFC 5424 / 3164
  parser, the mapping of a parsed message onto a log record, and one
  severity table for every reader of syslog priorities; below the
  components that use it.
* [`state_file`] — the checksummed, crash-safe state file (a `file`
  source's checkpoint, a `journald` source's cursor), written through the
  log's file-system seam.
* [`backoff`] — the wait between retries (exponential, capped, reset on
  success; full jitter for the sinks), for every retry loop.
* [`append_retry`] — what a refused append means for a source, and the
  loop that retries it (`journald`, `syslog`; `file` uses its verdicts).
* [`tls_material`] — PEM certificates and keys, and following their files
  when they rotate, for the listeners' and the sinks' TLS.
* [`host`] — the machine's name, as the components that describe it give it.
* [`rpc_status`] — gRPC status details (`google.rpc.Status`, `RetryInfo`)
  and the codes' names, for the OTLP/gRPC receiver and sink.
* [`calendar`] — dates and time zones: the syslog parser's timestamps, the
  `timestamp` step's patterns, the sinks' `{date}` templates.
* [`pool`] — bounded reuse of the data path's large buffers (chunks,
  blocks, request bodies), so they neither fault in fresh pages nor leave
  holes in the heap.
*/

pub mod api;
pub mod append_retry;
pub mod backoff;
pub mod calendar;
pub mod checking;
pub mod cli;
pub mod component;
pub mod config;
pub mod daemon;
pub mod event;
pub mod fuzzing;
pub mod host;
pub mod inspect;
pub mod logging;
pub mod metrics;
pub mod mqtt;
pub mod pool;
pub mod process;
pub mod rpc_status;
pub mod seglog;
pub mod sinks;
pub mod sources;
pub mod state_file;
pub mod syslog_format;
pub mod tls_material;
