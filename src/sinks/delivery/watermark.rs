//! The contiguous-completion watermark: how far a sink may commit.
//!
//! A sink reads events in sequence order but finishes them out of order:
//! several requests are in flight, some events are retried while later ones
//! succeed, some are quarantined. The cursor may only say "everything below N
//! is done", so N is the lowest sequence number that is *not* finished yet.
//!
//! The tracker keeps one flag per event between that point (`base`) and the
//! read position, in a ring buffer: registering and finishing are O(1), and
//! the watermark moves by popping finished flags off the front. Its length is
//! the sink's window (events read but not yet committable), which the
//! runtime bounds.
//!
//! Invariant: `position()` never passes an event that was registered and not
//! completed. Gaps in the sequence (events the log lost to eviction or damage
//! and already counted) are finished by definition.

use std::collections::VecDeque;

#[derive(Debug)]
pub(crate) struct Watermark {
    /// Every sequence number below this is finished.
    base: u64,
    /// `done[i]` is whether `base + i` is finished; the front is always
    /// false (or the deque is empty).
    done: VecDeque<bool>,
}

impl Watermark {
    pub fn new(at: u64) -> Watermark {
        Watermark {
            base: at,
            done: VecDeque::new(),
        }
    }

    /// Records that `seq` was read and is not finished. Sequence numbers must
    /// be registered in increasing order; numbers skipped over count as
    /// finished (the log lost them and counted the loss).
    pub fn register(&mut self, seq: u64) {
        let end = self.end();
        assert!(
            seq >= end,
            "event {seq} registered twice or out of order (read position {end})"
        );
        for _ in end..seq {
            self.done.push_back(true);
        }
        self.done.push_back(false);
        self.advance();
    }

    /// Records that `seq` is finished (delivered, or durably quarantined).
    pub fn complete(&mut self, seq: u64) {
        if seq < self.base {
            debug_assert!(false, "event {seq} completed twice");
            return;
        }
        let i = (seq - self.base) as usize;
        match self.done.get_mut(i) {
            Some(flag) => {
                debug_assert!(!*flag, "event {seq} completed twice");
                *flag = true;
            }
            None => panic!("event {seq} completed but never registered"),
        }
        self.advance();
    }

    /// Pops finished events off the front.
    fn advance(&mut self) {
        while self.done.front() == Some(&true) {
            self.done.pop_front();
            self.base += 1;
        }
    }

    /// The commit point: every event below it is finished.
    pub fn position(&self) -> u64 {
        self.base
    }

    /// One past the newest registered event.
    pub fn end(&self) -> u64 {
        self.base + self.done.len() as u64
    }

    /// Events between the commit point and the read position.
    pub fn span(&self) -> usize {
        self.done.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};

    #[test]
    fn the_watermark_stops_at_the_lowest_unfinished_event() {
        let mut w = Watermark::new(10);
        for s in 10..15 {
            w.register(s);
        }
        w.complete(11);
        w.complete(12);
        assert_eq!(w.position(), 10);
        w.complete(10);
        assert_eq!(w.position(), 13);
        w.complete(14);
        assert_eq!(w.position(), 13);
        w.complete(13);
        assert_eq!(w.position(), 15);
        assert_eq!(w.span(), 0);
    }

    #[test]
    fn gaps_in_the_sequence_count_as_finished() {
        let mut w = Watermark::new(0);
        w.register(5);
        assert_eq!(w.position(), 5);
        w.register(9);
        w.complete(9);
        assert_eq!(w.position(), 5);
        w.complete(5);
        assert_eq!(w.position(), 10);
    }

    /// Against a model: the watermark is always the smallest registered,
    /// unfinished sequence number (or the read position).
    #[test]
    fn random_completion_orders_agree_with_a_model() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..200 {
            let mut w = Watermark::new(100);
            let mut seqs = Vec::new();
            let mut next = 100u64;
            for _ in 0..rng.random_range(1..60) {
                next += rng.random_range(0..3);
                seqs.push(next);
                w.register(next);
                next += 1;
            }
            let mut order = seqs.clone();
            order.shuffle(&mut rng);
            let mut open: std::collections::BTreeSet<u64> = seqs.iter().copied().collect();
            for s in order {
                w.complete(s);
                open.remove(&s);
                let expect = open.iter().next().copied().unwrap_or(next);
                assert_eq!(w.position(), expect);
            }
        }
    }
}
