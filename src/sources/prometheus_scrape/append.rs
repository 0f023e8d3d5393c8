//! A collection's one append, for both metric sources of this folder and
//! `internal_metrics`: the encoded points (`encode.rs`) as one batch,
//! appended with the sources' retries. Under
//! `when_full = "block"` the append waits, and so does the next
//! collection of its target: collections are never queued in memory.

use std::time::Duration;

use tracing::{error, warn};

use crate::append_retry::{self, Appended, Retry};
use crate::backoff::Backoff;
use crate::component::ComponentContext;
use crate::metrics::SourceLabels;
use crate::seglog::Batch;
use crate::seglog::LogError;
use crate::sources::metric_points::{self, Collected};

use super::encode::Encoder;

const RETRY_BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
/// A full log or failing disk: retried until the source stops.
const RETRY: Retry = Retry {
    wait_for_room: None,
    retry: true,
    back_off_when_full: true,
};

/// How an append ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Durable: this many points.
    Appended(u64),
    /// Dropped and counted (too large for one append).
    Dropped,
    /// The source is stopping; nothing was appended.
    Stopped,
}

/// The encoder of one collection for `ctx`'s log: its points go to
/// [`append`].
pub fn encoder(ctx: &ComponentContext, scope: &'static str) -> Encoder {
    Encoder::new(scope, metric_points::max_append_bytes(&ctx.log))
}

/// Appends the points of `encoded`, observed at `observed` (Unix ns), as
/// one batch. `what` names the collection in log lines (the target's URL).
pub async fn append(
    ctx: &ComponentContext,
    encoded: Encoder,
    observed: u64,
    what: &str,
) -> anyhow::Result<Outcome> {
    let name = &ctx.name;
    let component = format!("source:{name}");
    let points = encoded.points();
    let collected = match encoded.finish(name, observed) {
        Ok(e) => Collected {
            // Framed by the encoder, one event per point.
            batch: Batch::from_framed_trusted(e.framed, e.events as u32).with_context(e.context),
            events: e.events,
            bytes: e.bytes,
        },
        Err(e) => {
            ctx.metrics.drop_events(&component, "too_large", points);
            error!(source = %name, target = %what, points, error = %e,
                "a collection too large for one log append was dropped; raise log.segment_size, or collect fewer series (max_samples)");
            return Ok(Outcome::Dropped);
        }
    };
    let (events, bytes) = (collected.events, collected.bytes);
    // The log takes the batch it is given; a refused one is offered again
    // from this one, whose events are shared bytes: a clone copies none.
    let batch = collected.batch;
    let make = || batch.clone();
    let mut backoff = RETRY_BACKOFF;
    let appended = append_retry::append(&ctx.log, make, RETRY, &mut backoff, &ctx.stop, |e, wait| {
        warn!(source = %name, target = %what, error = %e,
            "the log refused a collection's append; the next collection of this target waits, retrying in {wait:?}");
    })
    .await;
    match appended {
        Appended::Done(_) => {
            let labels = SourceLabels {
                source: name.clone(),
            };
            ctx.metrics
                .sources
                .events
                .get_or_create(&labels)
                .inc_by(events);
            ctx.metrics
                .sources
                .bytes
                .get_or_create(&labels)
                .inc_by(bytes);
            Ok(Outcome::Appended(events))
        }
        Appended::TooLarge(e) => {
            ctx.metrics.drop_events(&component, "too_large", events);
            let (bytes, max) = match e {
                LogError::TooLarge { bytes, max } => (bytes, max),
                _ => (0, 0),
            };
            error!(source = %name, target = %what, bytes, max, events,
                "a collection too large for one log append was dropped; raise log.segment_size, or collect fewer series (max_samples)");
            Ok(Outcome::Dropped)
        }
        Appended::GaveUp(refusal, _) => {
            let reason = match refusal {
                append_retry::Refusal::Full => "log_full",
                _ => "log_error",
            };
            ctx.metrics.drop_events(&component, reason, events);
            Ok(Outcome::Stopped)
        }
        Appended::Failed(e) => Err(anyhow::anyhow!(e).context(format!("source {name}: appending"))),
    }
}
