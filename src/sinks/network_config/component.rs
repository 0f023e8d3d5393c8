//! A network sink as a component [`Sink`] (the contract, `src/component/`):
//! each type gives what is its own ([`NetworkSink`]); the check of the
//! shared keys, their lines in `holdfast check`, their metrics, their
//! machine checks and the run on the shared runtime are written here once.

use std::fmt::{self, Write};
use std::path::PathBuf;

use anyhow::Context;
use serde::de::DeserializeOwned;

use super::{check_network, Place, RawNetworkSink};
use crate::checking::units::{format_duration, format_size};
use crate::checking::{Checker, Env, NamedTable, Severity};
use crate::component::{ComponentContext, Run, Sink, SinkEnv};
use crate::metrics::Metrics;
use crate::sinks::client_tls::load_pair;
use crate::sinks::credentials::TlsFiles;
use crate::sinks::delivery::options::DeliveryOptions;
use crate::sinks::delivery::runtime;
use crate::sinks::delivery::transport::Transport;
use crate::sinks::http::{Auth, Compression, Header, HeaderValueFrom, HttpOptions};
use crate::sinks::quarantine_options::QuarantineFull;

/// The shared transport keys as a sink uses them, for its lines in
/// `holdfast check` and its machine checks.
pub(crate) struct TransportKeys<'a> {
    pub compression: Compression,
    pub auth: Option<Auth>,
    pub tls: &'a TlsFiles,
    pub headers: &'a [Header],
}

impl TransportKeys<'_> {
    /// An HTTP sink's: every key as written.
    pub(crate) fn of(http: &HttpOptions) -> TransportKeys<'_> {
        TransportKeys {
            compression: http.compression,
            auth: http.auth.clone(),
            tls: &http.tls,
            headers: &http.headers,
        }
    }
}

/// The lines every network sink shares: batching, retries, credentials,
/// the quarantine.
fn describe_network(out: &mut String, o: &DeliveryOptions, t: &TransportKeys<'_>) -> fmt::Result {
    let compression = match t.compression {
        Compression::Gzip => "gzip",
        Compression::None => "no compression",
        Compression::Snappy => "snappy (as the protocol requires)",
    };
    let auth = match &t.auth {
        None => "no credentials".to_string(),
        Some(Auth::Basic {
            user,
            password_file,
        }) => format!(
            "basic auth as \"{user}\" (password in {})",
            password_file.display()
        ),
        Some(Auth::Bearer { token_file }) => {
            format!("a bearer token from {}", token_file.display())
        }
        Some(Auth::ApiKey { key_file }) => format!("an API key from {}", key_file.display()),
    };
    let in_flight = if o.adaptive_concurrency && o.concurrency > 1 {
        format!(
            "1 to {} requests in flight, adapting to the receiver",
            o.concurrency
        )
    } else if o.concurrency == 1 {
        "1 request in flight at a time".to_string()
    } else {
        format!("{} requests in flight", o.concurrency)
    };
    writeln!(
        out,
        "    batches of up to {} events or {}, sent at least every {}; {in_flight}, \
         each within {}; {compression}; {auth}",
        o.batch_max_events,
        format_size(o.batch_max_bytes as u64),
        format_duration(o.batch_timeout),
        format_duration(o.request_timeout)
    )?;
    writeln!(
        out,
        "    the cursor moves only past events the receiver accepted (per event, not per request) \
         or that are quarantined"
    )?;
    writeln!(
        out,
        "    retries: connection errors, timeouts, 408/429/5xx and per-event 429 without limit, \
         waiting {} doubling up to {} (full jitter, Retry-After honoured; a probe each second \
         ends the wait once the receiver is back); an event the receiver asks to retry is tried \
         {} time(s), then quarantined; 401/403 keep every event and retry every {}-{}",
        format_duration(o.backoff_initial),
        format_duration(o.backoff_max),
        o.max_attempts,
        format_duration(o.backoff_max / 2),
        format_duration(o.backoff_max)
    )?;
    let full = match o.quarantine.when_full {
        QuarantineFull::Block => {
            "when full, the cursor stops at the next rejected event until there is room"
        }
        QuarantineFull::Drop => "when full, further rejected events are dropped and counted",
    };
    writeln!(
        out,
        "    events rejected for good go to the quarantine {} (at most {}; {full})",
        o.quarantine.dir.display(),
        format_size(o.quarantine.max_bytes)
    )?;
    if let Some(ca) = &t.tls.ca_file {
        writeln!(
            out,
            "    trusts the CA certificates in {} besides the system's",
            ca.display()
        )?;
    }
    if let Some(c) = &t.tls.client_cert {
        let (cert, key) = (c.cert_file.display(), c.key_file.display());
        let reload = "loaded again when the files change";
        writeln!(
            out,
            "    presents the client certificate {cert} (key {key}), {reload}"
        )?;
    }
    if !t.headers.is_empty() {
        let list: Vec<String> = t
            .headers
            .iter()
            .map(|h| match &h.value {
                HeaderValueFrom::Inline(v) => format!("{}: {v}", h.name),
                HeaderValueFrom::File(f) => format!("{} from {}", h.name, f.display()),
            })
            .collect();
        writeln!(out, "    sends the headers {}", list.join("; "))?;
    }
    Ok(())
}

/// Paths of the secret files of a network sink, for the machine checks:
/// (key, path, what).
fn files_to_check(name: &str, o: &TransportKeys<'_>) -> Vec<(String, PathBuf, &'static str)> {
    let key = |k: &str| format!("sinks.{name}.{k}");
    let mut out = Vec::new();
    match &o.auth {
        Some(Auth::Basic { password_file, .. }) => {
            out.push((key("auth.password_file"), password_file.clone(), "password"))
        }
        Some(Auth::Bearer { token_file }) => {
            out.push((key("auth.bearer_token_file"), token_file.clone(), "token"))
        }
        Some(Auth::ApiKey { key_file }) => {
            out.push((key("auth.api_key_file"), key_file.clone(), "API key"))
        }
        None => {}
    }
    for h in o.headers {
        if let HeaderValueFrom::File(f) = &h.value {
            out.push((
                key(&format!("headers_file.{}", h.name)),
                f.clone(),
                "header value",
            ));
        }
    }
    out
}

/// The CA file and the client certificate: readable PEM, and a key that
/// fits its certificate, as `run` will load them.
fn check_tls_files(name: &str, o: &TlsFiles, env: &mut Env<'_>) {
    let key = |k: &str| format!("sinks.{name}.tls.{k}");
    if let Some(ca) = &o.ca_file {
        env.pem_file(&key("ca_file"), ca, "CERTIFICATE");
    }
    if let Some(c) = &o.client_cert {
        let (cert_key, key_key) = (key("client_cert_file"), key("client_key_file"));
        let pem = [
            env.pem_file(&cert_key, &c.cert_file, "CERTIFICATE"),
            env.pem_file(&key_key, &c.key_file, "PRIVATE KEY"),
        ];
        if pem[1] {
            env.secret_file(&key_key, &c.key_file, "private key");
        }
        // Loaded as `run` will, so that a file that only looks like PEM, or
        // a key that does not fit the certificate, is found before start.
        let loaded = pem
            .iter()
            .all(|ok| *ok)
            .then(|| load_pair(&c.cert_file, &c.key_file));
        if let Some(Err(e)) = loaded {
            env.push(Severity::Error, &cert_key, e.to_string());
        }
    }
}

/// A network sink type: its options, with the delivery options in
/// `common`. Every such type is a [`Sink`] through the impl below, so a new
/// network sink writes only what is its own: its keys, its transport, and
/// the line saying where it sends.
pub(crate) trait NetworkSink: Clone + fmt::Debug + Send + Sync + 'static {
    /// The table as written (declared with [`network_sink!`]).
    type Raw: DeserializeOwned + RawNetworkSink;
    /// How it reaches its receiver (the HTTP sinks: `HttpTransport` with
    /// their API).
    type Transport: Transport;
    /// Checks the sink's own keys and, through [`Common`], the shared ones.
    fn check_raw(raw: Self::Raw, cx: &mut Checker<'_>, p: &Place<'_, '_>) -> Self;
    /// The options the delivery runtime runs with.
    fn common(&self) -> &DeliveryOptions;
    /// The shared transport keys as it uses them.
    fn transport_keys(&self) -> TransportKeys<'_>;
    /// The line saying where it sends, for `holdfast check`.
    fn describe_target(&self, out: &mut String) -> fmt::Result;
    /// Its transport, built for one run; fails (naming the file) when a
    /// file it reads at start cannot be read.
    fn transport(&self) -> anyhow::Result<Self::Transport>;
    /// Its own machine checks, after the shared ones (the `nats` sink's
    /// secret files and its probe of the stream).
    fn check_own_environment(&self, _name: &str, _env: &mut Env<'_>) {}
    /// Its own series, at 0, after the shared ones (reasons only its
    /// receiver gives).
    fn declare_own_metrics(&self, _name: &str, _metrics: &Metrics) {}
}

/// The items of a [`NetworkSink`] impl that only name its types: the raw
/// struct (with its `check`) and the transport; the options keep the
/// delivery options in `common`.
macro_rules! network_sink_types {
    ($raw:ident, $transport:ty) => {
        type Raw = $raw;
        type Transport = $transport;

        fn check_raw(
            raw: $raw,
            cx: &mut $crate::checking::Checker<'_>,
            p: &$crate::sinks::network_config::Place<'_, '_>,
        ) -> Self {
            raw.check(cx, p)
        }

        fn common(&self) -> &$crate::sinks::delivery::options::DeliveryOptions {
            &self.common
        }
    };
}
pub(crate) use network_sink_types;

/// The items of an HTTP sink's [`NetworkSink`] impl: [`network_sink_types!`]
/// with the shared HTTP transport over the sink's API (built by its
/// `new`); the options keep the HTTP transport's in `http`.
macro_rules! http_sink_types {
    ($raw:ident, $api:ident) => {
        $crate::sinks::network_config::network_sink_types!(
            $raw,
            $crate::sinks::http::HttpTransport<$api>
        );

        fn transport_keys(&self) -> $crate::sinks::network_config::TransportKeys<'_> {
            $crate::sinks::network_config::TransportKeys::of(&self.http)
        }

        fn transport(&self) -> anyhow::Result<$crate::sinks::http::HttpTransport<$api>> {
            $crate::sinks::http::HttpTransport::new($api::new(self), &self.http, &self.common)
        }
    };
}
pub(crate) use http_sink_types;

impl<T: NetworkSink> Sink for T {
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, env: &SinkEnv<'_>) -> Option<Self> {
        check_network(cx, t, env, T::check_raw)
    }

    fn inputs(&self) -> &[String] {
        &self.common().inputs
    }

    fn describe(&self, out: &mut String) -> fmt::Result {
        self.describe_target(out)?;
        describe_network(out, self.common(), &self.transport_keys())
    }

    fn declare_metrics(&self, name: &str, metrics: &Metrics) {
        metrics.sinks.declare(name);
        metrics.declare_sink_drops(name, DROP_REASONS);
        self.declare_own_metrics(name, metrics);
    }

    fn run(&self, ctx: &ComponentContext) -> Run {
        let ctx = ctx.clone();
        let common = self.common().clone();
        let transport = self.transport();
        Box::pin(async move {
            let transport = transport.with_context(|| format!("starting sink {}", ctx.name))?;
            runtime::run(ctx.name, common, transport, ctx.log, ctx.metrics, ctx.stop).await
        })
    }

    fn check_environment(&self, name: &str, env: &mut Env<'_>) {
        let keys = self.transport_keys();
        for (key, path, what) in files_to_check(name, &keys) {
            env.secret_file(&key, &path, what);
        }
        check_tls_files(name, keys.tls, env);
        self.check_own_environment(name, env);
    }
}

/// Every `reason` of `holdfast_dropped_events_total` for a network sink (a
/// full quarantine under `when_full = "drop"`, damaged replay lines).
pub const DROP_REASONS: &[&str] = &["quarantine_full", "replay_damaged"];
