/*!
The daemon's lifecycle: `holdfast run`.

Start-up, in this order, so that READY means what it says:

1. take the data-directory lock and recover the log (the lock is the log's);
2. bind the API listener (a port in use is a start-up error, not a retry);
3. start sinks, then sources, each as a supervised task;
4. tell systemd READY=1 and mark `/readyz` ready.

SIGHUP reloads the config file (`reload.rs`): the sources and sinks it
adds, removes or changes are started, stopped or restarted
(`components.rs`), the others run on; an invalid file changes nothing.

Shutdown on SIGTERM or SIGINT is a drain, within `shutdown_timeout`: stop
accepting (`/readyz` and the listeners answer 503), let sources flush what
they hold into the log, let sinks finish their in-flight work and commit,
persist every cursor, exit 0. A second signal during the drain exits at once:
everything acknowledged is already on disk, and cursor progress since the
last sync is replayed next time (duplicates, never loss).
*/

mod components;
pub mod forget;
pub mod metrics;
mod private;
mod reload;
mod startup_pages;
pub mod supervisor;
pub mod systemd;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::api::{self, Health, Phase};
use crate::config::Settings;
use components::Components;

use crate::seglog::Log;

/// How `run` ended, for the process exit code.
#[derive(Debug, PartialEq, Eq)]
pub enum Exit {
    /// Drained and stopped cleanly.
    Clean,
    /// A second signal cut the drain short.
    Interrupted,
}

/// How often the main loop turns when systemd asks for no watchdog.
const IDLE_TICK: Duration = Duration::from_secs(5);

/// Runs the agent until a signal stops it.
pub async fn run(mut settings: Settings) -> anyhow::Result<Exit> {
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    // Installed before anything else: SIGHUP's default action ends the
    // process, which systemd takes for a clean exit and does not restart.
    let mut sighup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;

    systemd::status("recovering the log");
    let log_dir = settings.log_dir();
    let opts = settings.log.clone();
    let started = Instant::now();
    // Each file source's hold is in place before any sink can commit, so no
    // segment its crash recovery reads is deleted meanwhile.
    private::tighten(&settings);
    let holds: Vec<String> = settings
        .sources
        .iter()
        .filter_map(|(name, s)| s.kind.component().hold(name))
        .collect();
    let log = tokio::task::spawn_blocking(move || {
        let holds: Vec<&str> = holds.iter().map(String::as_str).collect();
        Log::open_with_holds(&log_dir, opts, &holds)
    })
    .await?
    .with_context(|| {
        format!(
            "opening the log in {} (the `log` directory of data_dir)",
            settings.log_dir().display()
        )
    })?;
    let s = log.stats();
    info!(
        segments = s.segments,
        bytes = s.bytes,
        first_seq = s.first_seq,
        next_seq = s.next_seq,
        took = ?started.elapsed(),
        "log ready"
    );

    let metrics = Arc::new(metrics::assemble(Some(log.clone())));
    reload::declare_metrics(&metrics);
    let health = Arc::new(Health::default());
    let api_stop = CancellationToken::new();
    let listener = api::bind(settings.api.listen).await?;
    info!(listen = %settings.api.listen, "API listening: /metrics /healthz /readyz");
    let api_task = tokio::spawn(api::serve(
        listener,
        metrics.clone(),
        health.clone(),
        api_stop.clone(),
    ));

    forget::apply(&log, &settings);
    let mut components = Components::new(log.clone(), metrics.clone(), health.clone());
    components.start_all(&settings);
    health.set(Phase::Ready);
    let status = format!(
        "running: {} source(s), {} sink(s), log {} in {} segment(s)",
        settings.sources.len(),
        settings.sinks.len(),
        human_bytes(s.bytes),
        s.segments
    );
    systemd::ready(&status);
    info!("{status}");
    // Start-up is over: what it alone ran need not stay resident.
    startup_pages::release();

    // The main loop: wait for a signal, pinging the watchdog meanwhile. A
    // ping is sent only if the log's state can still be read, so a wedged
    // writer lets systemd restart us.
    let watchdog = settings
        .daemon
        .watchdog
        .then(systemd::watchdog_interval)
        .flatten();
    let tick = watchdog.unwrap_or(IDLE_TICK);
    let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = sigterm.recv() => { info!("SIGTERM: draining"); break; }
            _ = sigint.recv() => { info!("SIGINT: draining"); break; }
            _ = sighup.recv() => {
                // Stopping components may take up to shutdown_timeout: the
                // watchdog is kept fed meanwhile.
                {
                    let reload = reload::reload(&mut settings, &mut components, &metrics);
                    tokio::pin!(reload);
                    loop {
                        tokio::select! {
                            _ = &mut reload => break,
                            _ = beat.tick() => beat_once(&log, watchdog.is_some()),
                        }
                    }
                }
                forget::apply(&log, &settings);
            }
            _ = beat.tick() => beat_once(&log, watchdog.is_some()),
        }
    }

    // The drain.
    health.set(Phase::Draining);
    systemd::stopping("draining: finishing in-flight work and saving cursors");
    let deadline = tokio::time::Instant::now() + settings.daemon.shutdown_timeout;
    let drain = async {
        components.stop(deadline).await;
        if let Err(e) = log.close().await {
            error!(error = %e, "closing the log failed; cursor progress since the last sync will be replayed");
        }
        api_stop.cancel();
        let _ = api_task.await;
    };
    tokio::select! {
        _ = drain => {
            info!("stopped cleanly");
            Ok(Exit::Clean)
        }
        _ = sigterm.recv() => {
            warn!("second signal: exiting without finishing the drain (acknowledged data is safe; some events may be delivered again)");
            Ok(Exit::Interrupted)
        }
        _ = sigint.recv() => {
            warn!("second signal: exiting without finishing the drain (acknowledged data is safe; some events may be delivered again)");
            Ok(Exit::Interrupted)
        }
    }
}

/// One turn of the main loop's beat: the watchdog is pinged only if the
/// log's state can still be read.
fn beat_once(log: &Log, watchdog: bool) {
    let _ = log.next_seq();
    if watchdog {
        systemd::watchdog();
    }
}

/// Sets glibc's allocator to the memory budget of `[daemon]`: at most
/// `malloc_arenas` arenas and, if `malloc_mmap_threshold` is set, buffers
/// from that size up in their own mappings, given back when freed (see
/// "Memory" in docs/configuration.md for what each costs). Called in `main`
/// before the runtime starts any thread, as `mallopt` asks. Other C
/// libraries have none of these knobs: a no-op there.
pub fn tune_allocator(daemon: &crate::config::DaemonSettings) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let arenas = i32::try_from(daemon.malloc_arenas).unwrap_or(i32::MAX);
        // SAFETY: mallopt only changes allocator parameters; it is called
        // before any other thread exists.
        let mut ok = unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) == 1 };
        if let Some(t) = daemon.malloc_mmap_threshold {
            let t = i32::try_from(t).unwrap_or(i32::MAX);
            // SAFETY: as above. The trim threshold goes with it: glibc's
            // default (twice the mmap threshold, once that has grown) keeps
            // up to 64 MiB of free space at the top of an arena.
            ok &= unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, t) == 1
                    && libc::mallopt(libc::M_TRIM_THRESHOLD, t) == 1
            };
        }
        if !ok {
            warn!("mallopt refused the allocator settings; memory use may exceed its budget");
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = daemon;
}

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
