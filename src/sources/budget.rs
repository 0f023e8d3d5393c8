/*!
A source's memory budget: bytes that every connection or request of one
source reserves from before it holds them, so that however many clients
send at once the memory they cost stays within one figure.

The budget is a semaphore whose permits are bytes. A [`Reservation`] holds
some of them and gives them back when dropped (or, in part, with
[`Reservation::shrink_to`]). `otlp_http` reserves a request's body and
what decoding it takes (`otlp_http/body.rs`, `otlp_http/cost/`); `syslog`
reserves a connection's batch and its read buffer beyond a small base
(`syslog/memory.rs`).
*/

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// No room in the budget before the deadline (or ever, for a request
/// larger than the budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NoRoom;

/// The bytes one source may hold at once, across all its connections.
pub(crate) struct Budget {
    sem: Arc<Semaphore>,
    /// Its size: what one connection or request may hold at most, alone.
    bytes: usize,
}

impl Budget {
    pub(crate) fn with_bytes(bytes: usize) -> Budget {
        // A semaphore holds at most `Semaphore::MAX_PERMITS`; a budget that
        // large is no bound anyway.
        let bytes = bytes.min(Semaphore::MAX_PERMITS);
        Budget {
            sem: Arc::new(Semaphore::new(bytes)),
            bytes,
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn empty(&self) -> Reservation {
        Reservation {
            sem: self.sem.clone(),
            permit: None,
        }
    }

    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.sem.available_permits()
    }
}

/// Bytes of the budget one request or connection holds; given back on drop.
pub(crate) struct Reservation {
    sem: Arc<Semaphore>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Reservation {
    pub(crate) fn held(&self) -> usize {
        self.permit.as_ref().map_or(0, |p| p.num_permits())
    }

    fn add(&mut self, p: OwnedSemaphorePermit) {
        match &mut self.permit {
            Some(held) => held.merge(p),
            None => self.permit = Some(p),
        }
    }

    /// Waits until `n` more bytes fit the budget, or fails at `deadline`.
    pub(crate) async fn grow(&mut self, n: usize, deadline: Instant) -> Result<(), NoRoom> {
        if n == 0 {
            return Ok(());
        }
        let n = u32::try_from(n).map_err(|_| NoRoom)?;
        // Room is there nearly always: take it without the waiting
        // machinery (a timer and a queued acquire).
        if let Ok(p) = self.sem.clone().try_acquire_many_owned(n) {
            self.add(p);
            return Ok(());
        }
        let acquire = self.sem.clone().acquire_many_owned(n);
        match tokio::time::timeout_at(deadline, acquire).await {
            Ok(Ok(p)) => {
                self.add(p);
                Ok(())
            }
            // Timed out, or the semaphore was closed (never done).
            _ => Err(NoRoom),
        }
    }

    /// Takes `n` more bytes if they fit now; for code that must not wait.
    pub(crate) fn try_grow(&mut self, n: usize) -> bool {
        if n == 0 {
            return true;
        }
        let Ok(n) = u32::try_from(n) else {
            return false;
        };
        match self.sem.clone().try_acquire_many_owned(n) {
            Ok(p) => {
                self.add(p);
                true
            }
            Err(_) => false,
        }
    }

    /// Gives back all but `keep` bytes (nothing if it holds no more).
    pub(crate) fn shrink_to(&mut self, keep: usize) {
        let held = self.held();
        if held <= keep {
            return;
        }
        if keep == 0 {
            self.permit = None;
        } else if let Some(p) = &mut self.permit {
            // Dropping the part split off returns it to the budget.
            drop(p.split(held - keep));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn reservations_come_back_when_dropped() {
        let b = Budget::with_bytes(100);
        let mut r = b.empty();
        let soon = Instant::now() + Duration::from_millis(50);
        r.grow(60, soon).await.unwrap();
        assert_eq!(b.available(), 40);
        assert!(r.try_grow(40));
        assert!(!r.try_grow(1));
        let mut other = b.empty();
        assert_eq!(other.grow(1, soon).await, Err(NoRoom));
        drop(r);
        assert_eq!(b.available(), 100);
        other.grow(100, soon).await.unwrap();
        assert_eq!(other.held(), 100);
    }

    #[test]
    fn shrinking_gives_back_the_rest() {
        let b = Budget::with_bytes(100);
        let mut r = b.empty();
        assert!(r.try_grow(70));
        r.shrink_to(20);
        assert_eq!((r.held(), b.available()), (20, 80));
        r.shrink_to(50);
        assert_eq!(r.held(), 20, "shrinking never grows");
        r.shrink_to(0);
        assert_eq!((r.held(), b.available()), (0, 100));
    }
}
