//! The accounting of a consumer's events between read and finished, for
//! eviction to count exactly what the consumer did not finish.

use super::state::Outcome;
use super::writer::{Msg, Reply};
use super::Log;

/// What a consumer's delivery tasks tell the log about the events they
/// handle, so that eviction counts exactly what the consumer did not finish
/// (see `ConsumerState::evict`):
///
/// * [`finished`](Self::finished): done, out of order, above the commit
///   point (e.g. events a sink skips because they are not for it);
/// * [`claim`](Self::claim) right before sending: refused for events already
///   evicted, which were counted lost and must not be sent;
/// * [`release`](Self::release) with the outcome once the answer is in.
///
/// Each call takes the state lock once for all the events given. A reader
/// without a cursor has no accounting: everything may be sent. Neither has
/// a log that never evicts (`block` without `max_age`): the calls cost
/// nothing there.
#[derive(Clone)]
pub struct Ledger {
    log: Log,
    name: String,
    /// Whether the log can evict at all.
    evicts: bool,
}

impl Ledger {
    pub(super) fn new(log: Log, name: String, evicts: bool) -> Ledger {
        Ledger { log, name, evicts }
    }

    /// For each event, whether it may be sent (false: evicted and counted
    /// lost for this consumer; treat it as finished and drop it).
    pub fn claim(&self, seqs: &[u64]) -> Vec<bool> {
        if !self.evicts {
            return vec![true; seqs.len()];
        }
        let shared = self.log.shared();
        let mut st = shared.lock();
        let floor = st.floor();
        match st.consumers.get_mut(&self.name) {
            Some(c) => seqs.iter().map(|&s| c.claim(s, floor)).collect(),
            None => vec![true; seqs.len()],
        }
    }

    /// Hands claimed events back with their outcome. For each, whether the
    /// sink must drop it: it was evicted while on the wire, its answer asked
    /// for a retry, and it is now counted lost (treat it as finished).
    pub fn release(&self, seqs: &[u64], outcome: Outcome) -> Vec<bool> {
        if !self.evicts {
            return vec![false; seqs.len()];
        }
        let shared = self.log.shared();
        let mut st = shared.lock();
        let Some(c) = st.consumers.get_mut(&self.name) else {
            return vec![false; seqs.len()];
        };
        let pending = c.pending_in_doubt();
        let drops = c.release_all(seqs, outcome);
        let settled = c.pending_in_doubt() < pending;
        drop(st);
        if settled {
            // Evicted events on the wire got their answer. Until the cursors
            // are stored again, a crash would take them for in doubt: store
            // them now rather than at the next interval (this happens only
            // around evictions). Nobody waits for the result; after a
            // failure the next interval's store tries again, and logs.
            let (tx, _) = tokio::sync::oneshot::channel();
            self.log.send(Msg::PersistCursors(Reply::Async(tx)));
        }
        drops
    }

    /// Records events finished without being claimed.
    pub fn finished(&self, seqs: &[u64]) {
        if seqs.is_empty() || !self.evicts {
            return;
        }
        let shared = self.log.shared();
        let mut st = shared.lock();
        if let Some(c) = st.consumers.get_mut(&self.name) {
            c.finish(seqs.iter().copied());
        }
    }
}
