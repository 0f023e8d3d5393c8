//! The delivery tasks' way into the quarantine: a rejected event becomes a
//! record (with its source, position, reason and the receiver's answer),
//! is written durably before it counts as finished, and waits parked while
//! a full quarantine says `block`.

use std::sync::Arc;

use prost::Message;
use tracing::{error, warn};

use super::item::{Item, Pos, Raw};
use super::retry::Rejection;
use super::shared::{log_seqs, pause, Parked, Shared, Which, FULL_RETRY};
use super::transport::Transport;
use crate::event;
use crate::sinks::quarantine::{self, EventInfo, Record, WriteError};
use crate::sinks::quarantine_options::QuarantineFull;

/// `event`: what the record keeps of the event, self-contained (see
/// [`Record::event`]).
fn record<T>(
    sh: &Shared<T>,
    ev: Option<&event::Stored>,
    id: String,
    pos: Pos,
    event: Vec<u8>,
    attempts: u32,
    r: &Rejection,
) -> Record {
    let (time_ms, time) = quarantine::now();
    Record {
        v: quarantine::FORMAT_VERSION,
        sink: sh.name.clone(),
        id,
        seq: pos.seq(),
        about: ev.map_or_else(EventInfo::unknown, EventInfo::of),
        kind: r.kind.to_string(),
        reason: r.reason.clone(),
        status: r.status,
        error: r.error.clone(),
        attempts,
        holdfast_version: env!("CARGO_PKG_VERSION").to_string(),
        config_hash: sh.config_hash.clone(),
        time,
        time_ms,
        event,
    }
}

/// What the quarantine keeps of a decoded event: a replay reads it without
/// the batch it came from, so a format-2 event is kept as the whole
/// (format-1) envelope it stands for.
fn kept(it: &Item) -> Vec<u8> {
    if it.context.is_empty() {
        it.data.to_vec()
    } else {
        it.ev.to_envelope().encode_to_vec()
    }
}

pub(super) async fn quarantine_invalid<T: Transport>(
    sh: &Arc<Shared<T>>,
    mut invalid: Vec<(Raw, String)>,
) -> bool {
    // Claimed like a send, so that an event evicted meanwhile is not both
    // counted lost and quarantined.
    let ok = sh
        .ledger
        .claim(&log_seqs(invalid.iter().map(|(r, _)| &r.pos)));
    if ok.iter().any(|&k| !k) {
        let mut ok = ok.into_iter();
        let mut gone = Vec::new();
        invalid.retain(|(r, _)| {
            if !matches!(r.pos, Pos::Log(_)) || ok.next().unwrap_or(true) {
                return true;
            }
            gone.push(r.pos);
            false
        });
        let _ = sh.done.send(gone);
        if invalid.is_empty() {
            return true;
        }
    }
    let mut records = Vec::new();
    let mut positions = Vec::new();
    for (raw, why) in invalid {
        let r = Rejection {
            kind: "invalid_event",
            reason: format!("not a valid event: {why}"),
            status: None,
            error: String::new(),
        };
        sh.count(Which::Rejected, r.kind, 1);
        error!(sink = %sh.name, seq = ?raw.pos.seq(), error = %why, "an event in the log is not a valid envelope; quarantining it");
        records.push(record(
            sh,
            None,
            String::new(),
            raw.pos,
            raw.data.to_vec(),
            raw.attempts,
            &r,
        ));
        positions.push(raw.pos);
    }
    store(sh, records, positions).await
}

pub(super) async fn quarantine<T: Transport>(
    sh: &Arc<Shared<T>>,
    rejected: Vec<(Item, Rejection)>,
) -> bool {
    let mut records = Vec::with_capacity(rejected.len());
    let mut positions = Vec::with_capacity(rejected.len());
    for (it, r) in &rejected {
        records.push(record(
            sh,
            Some(&it.ev),
            it.ev.id.to_hex(),
            it.pos,
            kept(it),
            it.attempts,
            r,
        ));
        positions.push(it.pos);
    }
    let first = &rejected[0].1;
    // The status as the number the receiver sent (`status=400`, not
    // `Some(400)`); none when the rejection came without one.
    let status = first.status.map_or("none".to_string(), |s| s.to_string());
    warn!(sink = %sh.name, events = rejected.len(), kind = first.kind, reason = %first.reason,
        status = %status, error = %first.error, "quarantining events the receiver rejected for good");
    store(sh, records, positions).await
}

/// What became of one attempt to write to the quarantine.
enum Stored {
    Written,
    Dropped,
    Full(String),
    Failed(String),
}

async fn write<T: Transport>(sh: &Arc<Shared<T>>, records: &[Record], positions: &[Pos]) -> Stored {
    let n = records.len() as u64;
    let q = sh.quarantine.clone();
    let batch = records.to_vec();
    match tokio::task::spawn_blocking(move || q.write(&batch)).await {
        Ok(Ok(_)) => {
            let mut by_kind: Vec<(&str, u64)> = Vec::new();
            for r in records {
                match by_kind.iter_mut().find(|(k, _)| *k == r.kind) {
                    Some(e) => e.1 += 1,
                    None => by_kind.push((&r.kind, 1)),
                }
            }
            for (k, c) in by_kind {
                sh.count(Which::Quarantined, k, c);
            }
            sh.m.quarantine_bytes.set(sh.quarantine.used_bytes() as i64);
            sh.finished(positions.to_vec());
            Stored::Written
        }
        Ok(Err(WriteError::Full { .. })) if sh.quarantine.when_full == QuarantineFull::Drop => {
            sh.metrics
                .drop_events(&format!("sink:{}", sh.name), "quarantine_full", n);
            warn!(sink = %sh.name, events = n, dir = %sh.quarantine.dir().display(),
                "the quarantine is full: dropping rejected events (when_full = \"drop\")");
            sh.finished(positions.to_vec());
            Stored::Dropped
        }
        Ok(Err(e @ WriteError::Full { .. })) => Stored::Full(e.to_string()),
        Ok(Err(e)) => Stored::Failed(e.to_string()),
        Err(e) => Stored::Failed(format!("the quarantine writer failed: {e}")),
    }
}

/// Writes the records durably, then reports their events finished. When the
/// quarantine is full: drops them (counted) under `when_full = "drop"`, or
/// parks them unfinished for the runtime to retry. When writing fails
/// (I/O), keeps trying. False if the sink stopped meanwhile.
async fn store<T: Transport>(
    sh: &Arc<Shared<T>>,
    records: Vec<Record>,
    positions: Vec<Pos>,
) -> bool {
    loop {
        match write(sh, &records, &positions).await {
            Stored::Written | Stored::Dropped => return true,
            Stored::Full(error) => {
                sh.m.quarantine_full.set(1);
                error!(sink = %sh.name, events = records.len(), %error,
                    "cannot quarantine rejected events: the sink's cursor stops at them until there is room (holdfast quarantine purge, or raise quarantine.max_bytes)");
                sh.parked
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(Parked { records, positions });
                return true;
            }
            Stored::Failed(error) => {
                error!(sink = %sh.name, events = records.len(), %error,
                    "cannot write to the quarantine; trying again (the events stay unfinished)");
                if !pause(&sh.stop, FULL_RETRY.min(sh.policy.backoff_max)).await {
                    return false;
                }
            }
        }
    }
}

/// Tries the parked events again (the runtime calls this periodically).
pub(crate) async fn retry_parked<T: Transport>(sh: &Arc<Shared<T>>) {
    let parked = std::mem::take(&mut *sh.parked.lock().unwrap_or_else(|p| p.into_inner()));
    let mut left = Vec::new();
    for p in parked {
        match write(sh, &p.records, &p.positions).await {
            Stored::Written | Stored::Dropped => {}
            Stored::Full(_) | Stored::Failed(_) => left.push(p),
        }
    }
    let mut parked = sh.parked.lock().unwrap_or_else(|p| p.into_inner());
    parked.extend(left);
    if parked.is_empty() {
        sh.m.quarantine_full.set(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::test_events::{both_formats, mixed};

    #[test]
    fn a_format_2_event_is_kept_whole_as_format_1() {
        for (a, b) in both_formats(&mixed(), 0) {
            assert_eq!(kept(&a), a.data.to_vec());
            assert_eq!(kept(&b), a.data.to_vec());
            let mut ra = quarantine::testing::record("s", "", "rejected", 0);
            let mut rb = ra.clone();
            ra.about = EventInfo::of(&a.ev);
            rb.about = EventInfo::of(&b.ev);
            assert_eq!(ra, rb);
        }
    }
}
