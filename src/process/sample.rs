//! `sample`: keep a fraction of the events a condition selects (all events
//! without one), deciding by the event's id: the same id always gets the
//! same decision, so a line read again after a crash is kept or dropped
//! exactly as before. The id is hashed with the rule's name, so two sample
//! steps decide independently.

use super::filter::Condition;
use super::{Event, Flow};

#[derive(Debug, Clone)]
pub struct Sample {
    /// Fraction kept, in (0, 1].
    pub rate: f64,
    pub when: Condition,
    /// The rule's name hashed: mixes the id per rule.
    pub seed: u64,
}

impl Sample {
    pub fn new(rate: f64, when: Condition, rule: &str) -> Sample {
        Sample {
            rate,
            when,
            seed: xxhash_rust::xxh3::xxh3_64(rule.as_bytes()),
        }
    }

    /// Whether an event with id bytes `id` is kept.
    pub fn keeps(&self, id: &[u8; 16]) -> bool {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(id, self.seed);
        // Kept when the hash, as a fraction of 2^64, is below the rate.
        (h as f64) < self.rate * 18_446_744_073_709_551_616.0
    }

    pub fn apply(&self, ev: &mut Event<'_>) -> Flow {
        if !self.when.holds(ev) || self.keeps(&ev.id.0) {
            Flow::Next
        } else {
            Flow::Drop
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventId;

    #[test]
    fn decisions_follow_the_id_and_the_rate() {
        let s = Sample::new(0.25, Condition::default(), "tenth");
        let ids: Vec<EventId> = (0..20_000u64)
            .map(|o| EventId::for_file_line(7, 0, o * 100))
            .collect();
        let kept = ids.iter().filter(|id| s.keeps(&id.0)).count();
        assert!((4_500..5_500).contains(&kept), "{kept}");
        // Same id, same answer, whatever came before.
        let again = ids.iter().rev().filter(|id| s.keeps(&id.0)).count();
        assert_eq!(kept, again);
        let all = Sample::new(1.0, Condition::default(), "all");
        assert!(ids.iter().all(|id| all.keeps(&id.0)));
    }
}
