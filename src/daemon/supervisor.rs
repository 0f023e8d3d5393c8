//! Supervised tasks: a source or sink that fails (returns an error or
//! panics) is logged with its name and started again after a backoff, and
//! never takes the others down.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::metrics::{Metrics, TaskLabels};

const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A task that ran this long before failing starts again from the first backoff.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// Runs `make()` until it returns `Ok` after `stop` was cancelled, restarting
/// it with exponential backoff whenever it fails.
pub fn spawn<F, Fut>(
    name: String,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    make: F,
) -> JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    tokio::spawn(async move {
        let mut backoff = FIRST_BACKOFF;
        loop {
            let started = Instant::now();
            let outcome = tokio::spawn(make()).await;
            if stop.is_cancelled() {
                if let Ok(Err(e)) = &outcome {
                    error!(task = %name, error = format!("{e:#}"), "task failed while stopping");
                }
                return;
            }
            match outcome {
                Ok(Ok(())) => error!(task = %name, "task ended on its own; starting it again"),
                Ok(Err(e)) => {
                    error!(task = %name, error = format!("{e:#}"), "task failed; starting it again in {backoff:?}")
                }
                Err(e) => {
                    error!(task = %name, error = %e, "task panicked; starting it again in {backoff:?}")
                }
            }
            if started.elapsed() >= HEALTHY_RUN {
                backoff = FIRST_BACKOFF;
            }
            metrics
                .task_restarts
                .get_or_create(&TaskLabels { task: name.clone() })
                .inc();
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.cancelled() => return,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            info!(task = %name, "restarting task");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn a_failing_task_is_restarted_until_stopped() {
        let metrics = Arc::new(Metrics::new(None));
        let stop = CancellationToken::new();
        let runs = Arc::new(AtomicU32::new(0));
        let r = runs.clone();
        let s = stop.clone();
        let h = spawn("t".into(), metrics.clone(), stop.clone(), move || {
            let r = r.clone();
            let s = s.clone();
            async move {
                if r.fetch_add(1, Ordering::SeqCst) < 3 {
                    anyhow::bail!("boom");
                }
                s.cancelled().await;
                Ok(())
            }
        });
        while runs.load(Ordering::SeqCst) < 4 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop.cancel();
        h.await.unwrap();
        let restarts = metrics
            .task_restarts
            .get_or_create(&TaskLabels { task: "t".into() })
            .get();
        assert_eq!(restarts, 3);
    }
}
