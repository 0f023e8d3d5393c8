//! The order in which batches start, for transports that need it.
//!
//! Each batch is its own task, and two tasks spawned one after the other
//! may first run in either order. A transport whose receiver sees the order
//! of requests (MQTT: a topic's messages in the order they were published)
//! asks for [`Transport::starts_in_order`](super::transport::Transport):
//! then each batch waits, before preparing its first request, until the
//! batch formed before it prepared its own (or ended without one). The
//! transport keeps that order from `prepare` to the wire itself.

use tokio::sync::oneshot;

/// The runtime's end: hands each new batch its [`Turn`].
pub(crate) struct Turns {
    ordered: bool,
    /// Fires when the last batch handed a turn has prepared its first
    /// request (or is gone).
    last: Option<oneshot::Receiver<()>>,
}

impl Turns {
    pub fn new(ordered: bool) -> Turns {
        Turns {
            ordered,
            last: None,
        }
    }

    /// The turn of the batch formed now: after every batch formed before.
    pub fn next(&mut self) -> Turn {
        if !self.ordered {
            return Turn {
                after: None,
                done: None,
            };
        }
        let (done, next) = oneshot::channel();
        Turn {
            after: self.last.replace(next),
            done: Some(done),
        }
    }
}

/// One batch's place in the order of starts. Dropped, it lets the next
/// batch go.
pub(crate) struct Turn {
    after: Option<oneshot::Receiver<()>>,
    done: Option<oneshot::Sender<()>>,
}

impl Turn {
    /// Waits until the batch before has prepared its first request; at
    /// once after the first call.
    pub async fn wait(&mut self) {
        if let Some(before) = self.after.take() {
            // An error is the batch before ending without a request: its
            // turn is over all the same.
            let _ = before.await;
        }
    }

    /// Lets the next batch prepare its requests.
    pub fn pass(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Spawned in reverse, and the later ones ready first: they still
    /// pass in the order their turns were handed out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_start_in_the_order_they_were_formed() {
        let mut turns = Turns::new(true);
        let mut handed: Vec<Turn> = (0..8).map(|_| turns.next()).collect();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in (0..8).rev() {
            let mut turn = handed.pop().unwrap();
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                turn.wait().await;
                order.lock().unwrap().push(i);
                turn.pass();
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
    }

    /// A batch that ends without a request (every event dropped) passes
    /// its turn by being dropped.
    #[tokio::test]
    async fn a_dropped_turn_lets_the_next_go() {
        let mut turns = Turns::new(true);
        let first = turns.next();
        let mut second = turns.next();
        drop(first);
        tokio::time::timeout(std::time::Duration::from_secs(5), second.wait())
            .await
            .expect("the second batch waits for nothing");
    }

    #[tokio::test]
    async fn unordered_turns_never_wait() {
        let mut turns = Turns::new(false);
        let _first = turns.next();
        let mut second = turns.next();
        tokio::time::timeout(std::time::Duration::from_secs(5), second.wait())
            .await
            .expect("no order asked for");
    }
}
