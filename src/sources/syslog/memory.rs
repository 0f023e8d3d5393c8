/*!
What a TCP connection holds in memory, reserved from its source's budget
(`max_buffer_size`, [`crate::sources::budget`]) before it holds it: the
batch being built (its events and groups, as [`Pending::bytes`] counts
them) and the read buffer beyond [`BASE`].

Without it each connection could hold a read buffer of `max_message_size`
plus a read and a batch, times `max_connections`: hundreds of MiB that many
senders together can reach. With it, a connection that finds no room stops
reading (TCP flow control makes the sender wait; nothing is dropped) until
another gives room back.

No deadlock, whatever the senders do: a connection waits only when it
holds nothing of the budget. Before it waits it appends its batch (which
gives back the batch's room), and a read buffer grows past the base only
by taking at once [`unit`] bytes, enough to finish the largest message and
put it in a batch; so a connection holding room can always go on, and
gives it back once its large message is out. The budget is at least one
unit (checked in `config.rs`).

The fast path touches the budget once per [`BATCH_STEP`] of events and
once per read, never per message, and allocates nothing.

[`Pending::bytes`]: super::mapping::Pending::bytes
*/

use std::time::Duration;

use bytes::BytesMut;
use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::mapping::GROUP_BYTES;
use crate::sources::budget::Reservation;

/// Bytes asked of the socket per read.
pub(super) const READ_CHUNK: usize = 64 << 10;
/// The read buffer every connection has without asking the budget: two
/// reads, which a connection of messages under 64 KiB never outgrows.
/// `max_connections` bounds these.
pub(super) const BASE: usize = 2 * READ_CHUNK;
/// The batch's room is taken in steps of this much.
const BATCH_STEP: usize = 128 << 10;
/// The longest octet count and its space (`framing.rs`), which the buffer
/// holds with a message.
const COUNT_HEADER: usize = 11;

/// What one event may take in a batch for a message of `len` bytes,
/// reserved before it is written: its body and fields are the message's
/// bytes again, structured-data names get `syslog.sd.` in front, and a new
/// sender or hostname adds a group. An event of many tiny SD-PARAMs can
/// take more; what it took is charged before the next one.
fn event_bound(len: usize) -> usize {
    3 * len + GROUP_BYTES + 256
}

/// The allocation of a read buffer holding `len` bytes and room for one
/// read: whole reads, so that reclaiming its front is enough next time.
fn buffer_for(len: usize) -> usize {
    (len + READ_CHUNK).next_multiple_of(READ_CHUNK)
}

/// What a connection takes at once when its read buffer grows past
/// [`BASE`]: the buffer at its largest, and one largest message's event.
/// The least a source's `max_buffer_size` may be.
pub fn unit(max_message_size: usize) -> usize {
    buffer_for(max_message_size + COUNT_HEADER).saturating_sub(BASE) + event_bound(max_message_size)
}

/// One connection's part of the budget.
pub(super) struct Memory {
    res: Reservation,
    /// `holdfast_syslog_budget_waits_total` of the source.
    waits: Counter,
    unit: usize,
    /// The size of the read buffer's allocation, which grows only through
    /// [`Memory::room_to_read`].
    buffer: usize,
    /// The framer keeps the head of an overlong line, a slice of an
    /// earlier buffer that it keeps allocated until the line ends.
    pinned: bool,
}

impl Memory {
    pub fn new(res: Reservation, waits: Counter, max_message_size: usize, buffer: usize) -> Memory {
        Memory {
            res,
            waits,
            unit: unit(max_message_size),
            buffer,
            pinned: false,
        }
    }

    /// What the connection must keep holding: a unit while its buffer is
    /// past the base (the message in it is not out yet) or an earlier one
    /// is pinned by the head of an overlong line.
    fn floor(&self) -> usize {
        if self.buffer > BASE || self.pinned {
            self.unit
        } else {
            0
        }
    }

    fn buffer_charge(&self) -> usize {
        self.buffer.saturating_sub(BASE)
    }

    /// Whether `need` bytes are held, taking more now if they fit.
    fn try_hold(&mut self, need: usize) -> bool {
        let held = self.res.held();
        need <= held
            || self
                .res
                .try_grow((need - held).next_multiple_of(BATCH_STEP))
            || self.res.try_grow(need - held)
    }

    /// Whether a batch of `batch` bytes has room for one more message of
    /// `len` bytes. When not, the caller appends the batch and calls
    /// [`Memory::wait_for_event`].
    pub fn room_for_event(&mut self, batch: usize, len: usize) -> bool {
        self.try_hold(self.buffer_charge() + batch + event_bound(len))
    }

    /// With the batch appended (empty), waits for room for a message of
    /// `len` bytes. Returns false if the source stopped first.
    pub async fn wait_for_event(&mut self, len: usize, stop: &CancellationToken) -> bool {
        let need = self.buffer_charge() + event_bound(len);
        self.wait(need, stop).await
    }

    /// With the batch appended (empty), makes room in `buf` for one more
    /// read, reserving before it grows; gives back what the batch held.
    /// `pinned`: the framer holds the head of an overlong line
    /// ([`Framer::holds_head`]). Returns false if the source stopped first.
    ///
    /// [`Framer::holds_head`]: super::framing::Framer::holds_head
    pub async fn room_to_read(
        &mut self,
        buf: &mut BytesMut,
        pinned: bool,
        stop: &CancellationToken,
    ) -> bool {
        self.pinned = pinned;
        if buf.is_empty() && self.buffer > BASE {
            // The large message is out: back to the base, its room given back.
            *buf = BytesMut::with_capacity(BASE);
            self.buffer = BASE;
        }
        self.res.shrink_to(self.floor());
        if buf.capacity() - buf.len() >= READ_CHUNK || buf.try_reclaim(READ_CHUNK) {
            return true;
        }
        let size = buffer_for(buf.len());
        if size > BASE && self.buffer <= BASE && !self.wait(self.unit, stop).await {
            return false;
        }
        // Not `reserve`, which may double the allocation past what the
        // budget was charged.
        let mut grown = BytesMut::with_capacity(size);
        grown.extend_from_slice(buf);
        *buf = grown;
        self.buffer = size;
        true
    }

    /// Holds `need` bytes, waiting for them if they do not fit now; it
    /// holds no more than its floor while it waits. Counts a wait.
    async fn wait(&mut self, need: usize, stop: &CancellationToken) -> bool {
        self.res.shrink_to(self.floor());
        if self.try_hold(need) {
            return true;
        }
        self.waits.inc();
        loop {
            let more = need.saturating_sub(self.res.held());
            // The deadline only lets the loop look at `stop` between tries
            // of a wait that has no end of its own.
            let until = Instant::now() + Duration::from_secs(3600);
            tokio::select! {
                _ = stop.cancelled() => return false,
                r = self.res.grow(more, until) => if r.is_ok() { return true },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::budget::Budget;

    fn memory(b: &Budget, max: usize) -> Memory {
        Memory::new(b.empty(), Counter::default(), max, READ_CHUNK)
    }

    /// Two connections with large messages on a budget of one unit: the
    /// second waits until the first's message is out, then goes on.
    #[tokio::test]
    async fn a_large_message_takes_a_unit_and_gives_it_back() {
        let max = 1 << 20;
        let b = Budget::with_bytes(unit(max));
        let stop = CancellationToken::new();
        let (mut one, mut two) = (memory(&b, max), memory(&b, max));
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        buf.extend_from_slice(&vec![b'x'; 3 * READ_CHUNK]);
        assert!(one.room_to_read(&mut buf, false, &stop).await);
        assert_eq!(buf.capacity(), 4 * READ_CHUNK);
        assert_eq!(b.available(), 0);
        assert!(
            one.room_for_event(0, max),
            "a unit holds its largest message's event"
        );

        let mut other = BytesMut::with_capacity(READ_CHUNK);
        other.extend_from_slice(&vec![b'y'; 3 * READ_CHUNK]);
        let waiting = tokio::spawn(async move {
            let ok = two
                .room_to_read(&mut other, false, &CancellationToken::new())
                .await;
            (ok, two.waits.get())
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        buf.clear();
        assert!(one.room_to_read(&mut buf, false, &stop).await);
        assert_eq!((one.res.held(), buf.capacity()), (0, BASE));
        assert_eq!(waiting.await.unwrap(), (true, 1));
    }

    /// Ordinary messages: the buffer stays at the base, the batch takes
    /// room in steps and gives it back at the next read.
    #[tokio::test]
    async fn a_batch_takes_room_in_steps() {
        let b = Budget::with_bytes(1 << 20);
        let stop = CancellationToken::new();
        let mut m = memory(&b, 64 << 10);
        assert!(m.room_for_event(0, 200));
        assert_eq!(m.res.held(), BATCH_STEP);
        assert!(m.room_for_event(50_000, 200));
        assert_eq!(m.res.held(), BATCH_STEP, "no new step while it fits");
        assert!(!m.room_for_event(1 << 20, 200));
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        assert!(m.room_to_read(&mut buf, false, &stop).await);
        assert_eq!(b.available(), 1 << 20);
    }
}
