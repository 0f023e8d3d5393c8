/*!
A gRPC connection's turn on its task: the connection and its inline call
(`grpc_calls.rs`) polled with a waker of the connection's own, which folds
the wakes they give each other during the turn into the turn itself.

h2 wakes the task that polls the connection whenever a call queues
something to send (the answer's headers, its message, its trailers, a
window update), and the call's body is woken by the connection when a DATA
frame arrives. With the call on the connection's task, every such wake is
the task waking itself while it runs: tokio then polls the whole task again
once the turn is over, a second turn (the connection's frames, its flush,
the call) that finds nothing to do, several times per call. OTLP/HTTP's
connection has no such wakes (hyper's HTTP/1.1 dispatcher loops over its
request and its answer itself).

So during a turn a wake only marks the turn to go round again; outside a
turn (the log's writer finishing an append, bytes arriving) it wakes the
task as any waker does. The loop is bounded ([`MAX_ROUNDS`]): past it, a
wake still pending is handed to the task's own waker, so a connection that
keeps waking itself (tokio's cooperative budget spent) yields as before.
*/

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};

/// How many times one turn goes round before it yields to the scheduler:
/// a call's turn needs two or three (frames in, the call, its answer out).
pub(crate) const MAX_ROUNDS: usize = 8;

/// The waker a connection and its inline call are polled with.
pub(crate) struct Turn {
    shared: Arc<Shared>,
    waker: Waker,
}

struct Shared {
    /// Set by a wake; cleared by the turn at the start of each round.
    woken: AtomicBool,
    /// Whether a turn is running, in which case a wake is the turn's to
    /// handle rather than the task's.
    in_turn: AtomicBool,
    /// The task's own waker, from the last turn's context.
    task: Mutex<Option<Waker>>,
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // SeqCst on both sides: either the turn sees `woken` before it ends,
        // or this sees `in_turn` cleared and wakes the task (or both: one
        // spare poll, never a lost wake).
        self.woken.store(true, Ordering::SeqCst);
        if !self.in_turn.load(Ordering::SeqCst) {
            let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(t) = task {
                t.wake();
            }
        }
    }
}

impl Turn {
    pub(crate) fn new() -> Turn {
        let shared = Arc::new(Shared {
            woken: AtomicBool::new(false),
            in_turn: AtomicBool::new(false),
            task: Mutex::new(None),
        });
        let waker = Waker::from(shared.clone());
        Turn { shared, waker }
    }

    /// Runs `round` (which polls with the context it is given) until a
    /// round neither was woken nor asks to go again, at most
    /// [`MAX_ROUNDS`] times; `Some` as soon as a round returns it.
    pub(crate) fn run<T>(
        &self,
        cx: &mut Context<'_>,
        mut round: impl FnMut(&mut Context<'_>) -> Result<T, bool>,
    ) -> Option<T> {
        {
            let mut task = self.shared.task.lock().unwrap_or_else(|e| e.into_inner());
            match &*task {
                Some(t) if t.will_wake(cx.waker()) => {}
                _ => *task = Some(cx.waker().clone()),
            }
        }
        let s = &self.shared;
        s.in_turn.store(true, Ordering::SeqCst);
        let mut inner = Context::from_waker(&self.waker);
        let mut out = None;
        for _ in 0..MAX_ROUNDS {
            s.woken.store(false, Ordering::SeqCst);
            match round(&mut inner) {
                Ok(v) => {
                    out = Some(v);
                    break;
                }
                Err(again) => {
                    if !again && !s.woken.load(Ordering::SeqCst) {
                        break;
                    }
                }
            }
        }
        s.in_turn.store(false, Ordering::SeqCst);
        // A wake the rounds did not see (the last round's, or one from
        // another thread as the turn ended): the task's to run.
        if out.is_none() && s.woken.swap(false, Ordering::SeqCst) {
            cx.waker().wake_by_ref();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_wake_inside_the_turn_goes_round_again_and_one_outside_wakes_the_task() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let task = Waker::from(count.clone());
        let mut cx = Context::from_waker(&task);
        let turn = Turn::new();
        let mut rounds = 0;
        let mut kept = None;
        let out: Option<()> = turn.run(&mut cx, |cx| {
            rounds += 1;
            if rounds == 1 {
                // As h2 does when a call queues its answer.
                cx.waker().wake_by_ref();
                kept = Some(cx.waker().clone());
            }
            Err(false)
        });
        assert_eq!(out, None);
        assert_eq!(rounds, 2);
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "no wake left over");
        // After the turn: the task is woken.
        kept.unwrap().wake();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_turn_that_keeps_waking_itself_yields_to_the_task() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let task = Waker::from(count.clone());
        let mut cx = Context::from_waker(&task);
        let turn = Turn::new();
        let mut rounds = 0;
        let out: Option<()> = turn.run(&mut cx, |cx| {
            rounds += 1;
            cx.waker().wake_by_ref();
            Err(false)
        });
        assert_eq!(out, None);
        assert_eq!(rounds, MAX_ROUNDS);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_round_that_asks_goes_again_and_a_result_ends_the_turn() {
        let task = Waker::noop();
        let mut cx = Context::from_waker(task);
        let turn = Turn::new();
        let mut rounds = 0;
        let out = turn.run(&mut cx, |_| {
            rounds += 1;
            if rounds == 3 {
                Ok(rounds)
            } else {
                Err(true)
            }
        });
        assert_eq!(out, Some(3));
    }
}
