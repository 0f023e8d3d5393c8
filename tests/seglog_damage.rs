//! Damage tests for everything the segment log keeps on disk (DESIGN.md
//! promises 2, 3 and 9; STYLE.md habit 8): write known events, close the log,
//! damage the bytes at exact offsets computed from the layout in
//! `docs/on-disk-format.md`, reopen, and assert exactly which events are
//! delivered and what is counted.
//!
//! Most tests store blocks uncompressed (`small_options`) and write frames
//! of one append of three 60-byte events: a frame is 28 (frame header) +
//! 16 (block header) + 4 (context length, no context) + 3 × (4 + 60) = 240
//! bytes, and a 4352-byte segment holds a 32-byte header and 18 frames (54
//! events). Forty frames therefore make
//!
//! ```text
//! 00000000000000000000.seg  sealed  events   0..54   4352 bytes
//! 00000000000000000054.seg  sealed  events  54..108  4352 bytes
//! 00000000000000000108.seg  active  events 108..120   992 bytes
//! ```
//!
//! The tests at the end cover what format 2 adds: compressed blocks (zstd,
//! LZ4) damaged so that only decompression can tell, frames of several
//! blocks, and logs that mix format-1 segments (written by an older
//! holdfast) with format-2 ones.

#[path = "common/seglog.rs"]
mod common;

use holdfast::seglog::{Compression, LogError, LogOptions, LossReason, StartAt};

use common::*;

const PER_FRAME: u64 = 3;
const FRAME: u64 = 240;
const FRAMES_PER_SEGMENT: u64 = 18;
const SEGMENT_EVENTS: u64 = FRAMES_PER_SEGMENT * PER_FRAME;

/// A closed log holding `frames` frames of [`PER_FRAME`] events, with
/// consumers `a` and `b` registered at the oldest event and nothing
/// committed.
fn closed_log(frames: u64) -> TestDir {
    let t = TestDir::new();
    let log = t.open();
    let a = log.consumer("a", StartAt::Oldest).unwrap();
    let b = log.consumer("b", StartAt::Oldest).unwrap();
    append_frames(&log, frames, PER_FRAME);
    log.close_blocking().unwrap();
    drop((a, b, log));
    t
}

#[test]
fn the_layout_on_disk_is_the_documented_one() {
    assert_eq!(frame_len(PER_FRAME), FRAME);
    let t = closed_log(40);
    assert_eq!(
        t.segments(),
        [
            (0, SEGMENT_HEADER + FRAMES_PER_SEGMENT * FRAME),
            (54, SEGMENT_HEADER + FRAMES_PER_SEGMENT * FRAME),
            (108, SEGMENT_HEADER + 4 * FRAME),
        ]
    );
    for (i, f) in t.frames(54).iter().enumerate() {
        let i = i as u64;
        assert_eq!(
            *f,
            FrameAt {
                offset: SEGMENT_HEADER + i * FRAME,
                len: FRAME,
                first_seq: 54 + i * PER_FRAME,
                count: PER_FRAME,
            }
        );
    }
    let seg = std::fs::read(t.segment(54)).unwrap();
    assert_eq!(&seg[0..4], b"HFSG");
    assert_eq!(u64::from_le_bytes(seg[8..16].try_into().unwrap()), 54);
    assert_eq!(u16::from_le_bytes([seg[4], seg[5]]), 2, "format version");
    // The first frame's one block: stored length, count, raw length, codec
    // (0 = none), reserved; then the body: context length (no context), and
    // the first event's length and bytes.
    let f = t.frames(54)[0];
    let block = f.payload() as usize;
    let body_len = (FRAME - FRAME_HEADER - BLOCK_HEADER) as u32;
    let le32 = |at: usize| u32::from_le_bytes(seg[at..at + 4].try_into().unwrap());
    assert_eq!(
        (le32(block), le32(block + 4), le32(block + 8)),
        (body_len, 3, body_len)
    );
    assert_eq!(&seg[block + 12..block + 16], &[0, 0, 0, 0]);
    assert_eq!(le32(block + 16), 0, "context length");
    let ev = f.first_event() as usize;
    assert_eq!(le32(ev), 60);
    assert_eq!(&seg[ev + 4..ev + 64], payload(54).as_slice());
}

#[test]
fn a_torn_tail_in_the_active_segment_is_truncated_and_appends_continue() {
    // How many bytes of the last frame reached the disk: inside the length,
    // inside the CRC, inside the header, at the payload, inside an event.
    for kept in [1, 4, 7, 8, 27, 28, 100, FRAME - 1] {
        let t = closed_log(10); // events 0..30, all in the active segment
        let last = t.frames(0)[9];
        assert_eq!(last.seqs(), 27..30);
        truncate(&t.segment(0), last.offset + kept);

        let log = t.open();
        let c = log.stats().counters;
        assert_eq!((c.torn_tails, c.torn_bytes), (1, kept), "kept {kept}");
        assert_eq!((c.corrupt_frames, c.corrupt_headers), (0, 0));
        assert_eq!(log.next_seq(), 27);
        assert_eq!(t.segments(), [(0, last.offset)], "cut back on disk");

        let mut a = log.consumer("a", StartAt::Oldest).unwrap();
        assert_eq!(seqs(&read_all(&mut a)), span(0..27));
        // The torn frame was never acknowledged; the log carries on right
        // after the last intact event.
        assert_eq!(append_frames(&log, 1, PER_FRAME).start, 27);
        assert_eq!(seqs(&read_all(&mut a)), [27, 28, 29]);
        assert_eq!(lost(&log, "a", LossReason::Corrupt), 0);
    }
}

#[test]
fn a_zeroed_length_on_the_last_frame_of_the_active_segment_is_a_torn_tail() {
    let t = closed_log(10);
    let last = t.frames(0)[9];
    zero(&t.segment(0), last.offset, 4);

    let log = t.open();
    let c = log.stats().counters;
    assert_eq!((c.torn_tails, c.torn_bytes), (1, FRAME));
    assert_eq!((c.corrupt_frames, c.corrupt_bytes), (0, 0));
    assert_eq!(log.next_seq(), 27);
    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    assert_eq!(seqs(&read_all(&mut a)), span(0..27));
    assert_eq!(append_frames(&log, 1, PER_FRAME).start, 27);
    assert_eq!(seqs(&read_all(&mut a)), [27, 28, 29]);
}

#[test]
fn a_zeroed_length_inside_the_active_segment_skips_one_frame() {
    let t = closed_log(10);
    let f = t.frames(0)[4];
    assert_eq!(f.seqs(), 12..15);
    zero(&t.segment(0), f.offset, 4);

    let log = t.open();
    // The active segment is scanned at open: the damage is found there,
    // and it is not a torn tail since valid frames follow it.
    let c = log.stats().counters;
    assert_eq!((c.corrupt_frames, c.corrupt_bytes), (1, FRAME));
    assert_eq!((c.torn_tails, c.torn_bytes), (0, 0));
    assert_eq!(log.next_seq(), 30);

    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    assert_eq!(seqs(&read_all(&mut a)), span_without(0..30, 12..15));
    assert_eq!(lost(&log, "a", LossReason::Corrupt), 3);
    assert_eq!(log.stats().counters.corrupt_frames, 1, "counted once");
    assert_eq!(append_frames(&log, 1, PER_FRAME).start, 30);
    assert_eq!(seqs(&read_all(&mut a)), [30, 31, 32]);
}

#[test]
fn a_zeroed_length_in_a_sealed_segment_skips_one_frame_and_nothing_else() {
    let t = closed_log(40);
    let f = t.frames(0)[7];
    assert_eq!(f.seqs(), 21..24);
    zero(&t.segment(0), f.offset, 4);

    let log = t.open();
    // Sealed segments are not read at open (invariant 6): the damage is
    // found by the first reader.
    assert_eq!(log.stats().counters.corrupt_frames, 0);
    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    assert_eq!(seqs(&read_all(&mut a)), span_without(0..120, 21..24));
    let c = log.stats().counters;
    assert_eq!((c.corrupt_frames, c.corrupt_bytes), (1, FRAME));
    assert_eq!((c.torn_tails, c.corrupt_headers), (0, 0));
    assert_eq!(lost(&log, "a", LossReason::Corrupt), 3);
    assert_eq!(
        lost(&log, "b", LossReason::Corrupt),
        0,
        "b has not read yet"
    );
}

/// Where in a frame a single bit is flipped: (byte offset within the frame,
/// bit). Every one of them must make the whole frame unreadable.
const FRAME_BIT_FLIPS: [(u64, u8); 15] = [
    (0, 0),           // length, lowest bit: the CRC no longer covers the right bytes
    (3, 7),           // length, highest bit: an impossible length
    (4, 2),           // the CRC itself
    (8, 0),           // first sequence number
    (16, 1),          // event count
    (20, 5),          // append time
    (28, 3),          // the block's stored length
    (32, 0),          // the block's event count
    (36, 1),          // the block's raw length
    (40, 0),          // the block's codec
    (41, 2),          // a reserved byte of the block header
    (44, 3),          // the context length
    (48, 3),          // the first event's length
    (48 + 4 + 10, 6), // a byte of the first event
    (FRAME - 1, 0),   // the last byte of the last event
];

#[test]
fn a_flipped_bit_in_a_sealed_frame_loses_that_frame_for_each_consumer() {
    for (at, bit) in FRAME_BIT_FLIPS {
        let t = closed_log(40);
        let f = t.frames(0)[5];
        assert_eq!(f.seqs(), 15..18);
        flip_bit(&t.segment(0), f.offset + at, bit);

        let log = t.open();
        let mut a = log.consumer("a", StartAt::Oldest).unwrap();
        let mut b = log.consumer("b", StartAt::Oldest).unwrap();
        let expected = span_without(0..120, 15..18);
        assert_eq!(seqs(&read_all(&mut a)), expected, "flip at {at}");
        assert_eq!(seqs(&read_all(&mut b)), expected, "flip at {at}");
        // One damaged frame, counted once however many consumers read it;
        // each consumer counts the events it could not have.
        let c = log.stats().counters;
        assert_eq!(
            (c.corrupt_frames, c.corrupt_bytes),
            (1, FRAME),
            "flip at {at}"
        );
        assert_eq!(lost(&log, "a", LossReason::Corrupt), 3);
        assert_eq!(lost(&log, "b", LossReason::Corrupt), 3);
        assert_eq!(lost(&log, "a", LossReason::Size), 0);
    }
}

#[test]
fn a_flipped_bit_in_an_active_frame_is_found_at_open_and_skipped() {
    for (at, bit) in FRAME_BIT_FLIPS {
        let t = closed_log(40);
        let f = t.frames(108)[1]; // not the last of the active segment's 4 frames
        assert_eq!(f.seqs(), 111..114);
        flip_bit(&t.segment(108), f.offset + at, bit);

        let log = t.open();
        let c = log.stats().counters;
        assert_eq!(
            (c.corrupt_frames, c.corrupt_bytes),
            (1, FRAME),
            "flip at {at}"
        );
        assert_eq!(c.torn_tails, 0);
        assert_eq!(log.next_seq(), 120, "later frames keep the end of the log");

        let mut a = log.consumer("a", StartAt::Oldest).unwrap();
        let mut b = log.consumer("b", StartAt::Oldest).unwrap();
        let expected = span_without(0..120, 111..114);
        assert_eq!(seqs(&read_all(&mut a)), expected, "flip at {at}");
        assert_eq!(seqs(&read_all(&mut b)), expected, "flip at {at}");
        assert_eq!(log.stats().counters.corrupt_frames, 1, "counted once");
        assert_eq!(lost(&log, "a", LossReason::Corrupt), 3);
        assert_eq!(lost(&log, "b", LossReason::Corrupt), 3);

        // Appends go on after the damage, into the same segment.
        assert_eq!(append_frames(&log, 2, PER_FRAME).start, 120);
        assert_eq!(seqs(&read_all(&mut a)), span(120..126));
    }
}

#[test]
fn damage_in_two_segments_with_two_consumers_and_a_rewind_is_counted_once() {
    let t = closed_log(40);
    let sealed = t.frames(54)[17]; // the last frame of a sealed segment
    let active = t.frames(108)[0];
    assert_eq!((sealed.seqs(), active.seqs()), (105..108, 108..111));
    flip_bit(&t.segment(54), sealed.payload() + 30, 4);
    flip_bit(&t.segment(108), active.payload() + 100, 0);

    let log = t.open();
    assert_eq!(
        log.stats().counters.corrupt_frames,
        1,
        "the active one, at open"
    );
    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    let mut b = log.consumer("b", StartAt::Oldest).unwrap();
    let expected = span_without(0..120, 105..111);
    // `a` stops half-way, `b` reads everything, then `a` finishes.
    let first = a.read(60, usize::MAX).unwrap();
    assert_eq!(seqs(&first), span(0..60));
    assert_eq!(seqs(&read_all(&mut b)), expected);
    let rest = read_all(&mut a);
    assert_eq!(seqs(&rest), expected[60..]);

    // Reading the same damage again after a rewind counts nothing new.
    a.commit(50).unwrap();
    a.rewind();
    assert_eq!(seqs(&read_all(&mut a)), expected[50..]);

    let c = log.stats().counters;
    assert_eq!((c.corrupt_frames, c.corrupt_bytes), (2, 2 * FRAME));
    assert_eq!(lost(&log, "a", LossReason::Corrupt), 6);
    assert_eq!(lost(&log, "b", LossReason::Corrupt), 6);
}

#[test]
fn damage_before_a_committed_position_costs_no_intact_event() {
    // The consumer's committed position lies inside a frame that comes
    // after a damaged frame of the same segment. On restart the reader
    // walks that segment from its start, meets the damage, and must land
    // on the frame that holds its position, not on the one after it.
    let t = TestDir::new();
    let log = t.open();
    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    append_frames(&log, 40, PER_FRAME);
    assert_eq!(a.read(25, usize::MAX).unwrap().len(), 25);
    a.commit(25).unwrap(); // inside frame 8 (events 24..27)
    log.close_blocking().unwrap();
    drop((a, log));
    let f = t.frames(0)[5];
    assert_eq!(f.seqs(), 15..18);
    flip_bit(&t.segment(0), f.first_event() + 9, 2);

    let log = t.open();
    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    assert_eq!(a.position(), 25);
    assert_eq!(seqs(&read_all(&mut a)), span(25..120));
    assert_eq!(lost(&log, "a", LossReason::Corrupt), 0);

    // The same after a rewind within the running process.
    a.commit(26).unwrap();
    a.rewind();
    assert_eq!(seqs(&read_all(&mut a)), span(26..120));
    assert_eq!(lost(&log, "a", LossReason::Corrupt), 0);
    assert_eq!(log.stats().counters.corrupt_frames, 1);
}

#[test]
fn a_flipped_bit_in_a_segment_header_is_counted_and_its_frames_still_delivered() {
    let t = closed_log(40);
    flip_bit(&t.segment(0), 8, 0); // base sequence of a sealed segment
    flip_bit(&t.segment(54), 28, 3); // header CRC of a sealed segment
    flip_bit(&t.segment(108), 0, 1); // magic of the active segment

    let log = t.open();
    let c = log.stats().counters;
    assert_eq!(c.corrupt_headers, 3);
    assert_eq!((c.corrupt_frames, c.torn_tails), (0, 0));
    assert_eq!(log.next_seq(), 120);
    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    assert_eq!(seqs(&read_all(&mut a)), span(0..120));
    assert_eq!(append_frames(&log, 1, PER_FRAME).start, 120);
    assert_eq!(seqs(&read_all(&mut a)), [120, 121, 122]);
    assert_eq!(lost(&log, "a", LossReason::Corrupt), 0);
    assert_eq!(log.stats().counters.corrupt_frames, 0);
}

#[test]
fn a_deleted_sealed_segment_is_skipped_and_its_events_counted_lost() {
    let t = closed_log(60); // segments 0, 54, 108 sealed; 162 active (162..180)
    assert_eq!(
        t.segments().iter().map(|s| s.0).collect::<Vec<_>>(),
        [0, 54, 108, 162]
    );
    std::fs::remove_file(t.segment(54)).unwrap();

    let log = t.open();
    assert_eq!(log.stats().segments, 3);
    assert_eq!(log.next_seq(), 180);
    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    let mut b = log.consumer("b", StartAt::Oldest).unwrap();
    let expected = span_without(0..180, 54..108);
    assert_eq!(seqs(&read_all(&mut a)), expected);
    assert_eq!(seqs(&read_all(&mut b)), expected);
    assert_eq!(lost(&log, "a", LossReason::Corrupt), SEGMENT_EVENTS);
    assert_eq!(lost(&log, "b", LossReason::Corrupt), SEGMENT_EVENTS);
    let c = log.stats().counters;
    assert_eq!((c.corrupt_frames, c.corrupt_headers), (0, 0));
}

#[test]
fn a_sealed_segment_cut_short_is_skipped_and_stats_still_work() {
    // Cut inside a frame, inside the header, and to nothing (a segment
    // whose data never reached the disk before a power cut under
    // fsync = "never").
    for keep in [SEGMENT_HEADER + 5 * FRAME + 100, 20, 0] {
        let t = closed_log(60);
        truncate(&t.segment(54), keep);

        let log = t.open();
        let stats = log.stats(); // must not panic on a short segment
        assert_eq!(stats.next_seq, 180);
        let mut a = log.consumer("a", StartAt::Oldest).unwrap();
        let read = seqs(&read_all(&mut a));
        let c = log.stats().counters;
        if keep > SEGMENT_HEADER {
            // Frames 0..5 survive (events 54..69); the cut frame and the
            // rest of the segment are gone.
            assert_eq!(read, span_without(0..180, 69..108));
            assert_eq!(lost(&log, "a", LossReason::Corrupt), 39);
            assert_eq!((c.corrupt_frames, c.corrupt_bytes), (1, 100));
            assert_eq!(c.corrupt_headers, 0);
        } else {
            assert_eq!(read, span_without(0..180, 54..108));
            assert_eq!(lost(&log, "a", LossReason::Corrupt), SEGMENT_EVENTS);
            assert_eq!(c.corrupt_headers, 1);
        }
        assert_eq!(
            c.torn_tails, 0,
            "only the active segment has a tail to tear"
        );

        // A consumer whose committed position lies in the short segment.
        let b = log.consumer("b", StartAt::Oldest).unwrap();
        b.commit(60).unwrap();
        let _ = log.stats();
    }
}

/// A whole segment header, as the writer makes it.
fn header(base_seq: u64) -> [u8; 32] {
    holdfast::seglog::format::SegmentHeader {
        base_seq,
        created_ms: 1_700_000_000_000,
        version: holdfast::seglog::format::FORMAT_VERSION,
    }
    .encode()
}

#[test]
fn an_active_segment_torn_while_being_created_is_rewritten() {
    // A fresh log whose first segment never got its whole header.
    for len in [0, 1, 17, 31] {
        let t = TestDir::new();
        std::fs::write(t.segment(0), &header(0)[..len]).unwrap();
        let log = t.open();
        assert_eq!(log.next_seq(), 0);
        let mut a = log.consumer("a", StartAt::Oldest).unwrap();
        assert_eq!(append_frames(&log, 2, PER_FRAME).start, 0);
        assert_eq!(seqs(&read_all(&mut a)), span(0..6));
        assert_eq!(t.segments(), [(0, SEGMENT_HEADER + 2 * FRAME)]);
        let c = log.stats().counters;
        assert_eq!(
            (c.corrupt_headers, c.torn_tails, c.corrupt_frames),
            (0, 0, 0)
        );
    }

    // A log that was rolling to a new segment when the power went.
    for len in [0, 12, 31] {
        let t = closed_log(20); // 0..54 sealed, 54..60 active
        std::fs::write(t.segment(60), &header(60)[..len]).unwrap();

        let log = t.open();
        assert_eq!(log.next_seq(), 60);
        assert_eq!(log.stats().segments, 3);
        let mut a = log.consumer("a", StartAt::Oldest).unwrap();
        assert_eq!(seqs(&read_all(&mut a)), span(0..60));
        assert_eq!(append_frames(&log, 1, PER_FRAME).start, 60);
        assert_eq!(seqs(&read_all(&mut a)), [60, 61, 62]);
        let segs = t.segments();
        assert_eq!(segs.last(), Some(&(60, SEGMENT_HEADER + FRAME)));
        let head = std::fs::read(t.segment(60)).unwrap();
        assert_eq!(&head[0..4], b"HFSG");
        assert_eq!(u64::from_le_bytes(head[8..16].try_into().unwrap()), 60);
        let c = log.stats().counters;
        assert_eq!(
            (c.corrupt_headers, c.torn_tails, c.corrupt_frames),
            (0, 0, 0)
        );
        assert_eq!(lost(&log, "a", LossReason::Corrupt), 0);
    }
}

/// A closed log of 10 events whose cursor slots hold, for consumer `a`:
/// `cursors.1` generation 1 → 0 (registration), `cursors.0` generation 2 → 4
/// (explicit sync), `cursors.1` generation 3 → 7 (close).
fn log_with_three_cursor_generations() -> TestDir {
    let t = TestDir::new();
    let log = t.open();
    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    append_frames(&log, 10, 1);
    assert_eq!(a.read(10, usize::MAX).unwrap().len(), 10);
    a.commit(4).unwrap();
    log.sync_cursors_blocking().unwrap();
    a.commit(7).unwrap();
    log.close_blocking().unwrap();
    drop((a, log));
    t
}

#[test]
fn a_damaged_newest_cursor_slot_falls_back_to_the_older_one() {
    let t = log_with_three_cursor_generations();
    flip_bit(&t.file("cursors.1"), 10, 0);
    let log = t.open();
    assert_eq!(log.stats().counters.damaged_cursor_files, 1);
    let mut a = log.consumer("a", StartAt::Latest).unwrap();
    // One persist interval of progress is redelivered, nothing skipped.
    assert_eq!(a.committed(), 4);
    assert_eq!(seqs(&read_all(&mut a)), span(4..10));
}

#[test]
fn a_damaged_older_cursor_slot_is_ignored() {
    let t = log_with_three_cursor_generations();
    truncate(&t.file("cursors.0"), 13); // torn mid-write
    let log = t.open();
    assert_eq!(log.stats().counters.damaged_cursor_files, 1);
    let mut a = log.consumer("a", StartAt::Latest).unwrap();
    assert_eq!(a.committed(), 7);
    assert_eq!(seqs(&read_all(&mut a)), span(7..10));
}

#[test]
fn with_both_cursor_slots_damaged_consumers_start_from_the_oldest_event() {
    let t = log_with_three_cursor_generations();
    flip_bit(&t.file("cursors.0"), 0, 0);
    std::fs::write(t.file("cursors.1"), b"not a cursor file").unwrap();
    let log = t.open();
    assert_eq!(log.stats().counters.damaged_cursor_files, 2);
    assert!(log.consumers().is_empty(), "no cursor could be trusted");
    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    assert_eq!(a.committed(), 0);
    assert_eq!(seqs(&read_all(&mut a)), span(0..10));
    a.commit(10).unwrap();
    log.close_blocking().unwrap();
    drop((a, log));

    // The next start trusts the freshly written slot.
    let log = t.open();
    let a = log.consumer("a", StartAt::Oldest).unwrap();
    assert_eq!(a.committed(), 10);
}

#[test]
fn unexpected_files_in_the_directory_are_left_alone() {
    let t = closed_log(20);
    let strays: [(&str, &[u8]); 5] = [
        ("notes.txt", b"operator notes"),
        ("123.seg", b"short name"),
        ("00000000000000000054.seg.bak", b"a backup"),
        ("cursors.2", b"HFCU"),
        (".nfs000000001", b""),
    ];
    for (name, bytes) in strays {
        std::fs::write(t.file(name), bytes).unwrap();
    }
    std::fs::create_dir(t.file("lost+found")).unwrap();
    std::fs::write(t.file("lost+found/x"), b"x").unwrap();

    let log = t.open();
    let c = log.stats().counters;
    assert_eq!(c, holdfast::seglog::Counters::default());
    assert_eq!(log.stats().segments, 2);
    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    assert_eq!(seqs(&read_all(&mut a)), span(0..60));
    a.commit(60).unwrap();
    log.remove_consumer("b").unwrap();
    append_frames(&log, 20, PER_FRAME); // rolls, then deletes what `a` is done with
    assert_eq!(log.stats().first_seq, 54);
    assert!(!t.segment(0).exists());
    log.close_blocking().unwrap();
    drop((a, log));

    for (name, bytes) in strays {
        assert_eq!(std::fs::read(t.file(name)).unwrap(), bytes, "{name}");
    }
    assert_eq!(std::fs::read(t.file("lost+found/x")).unwrap(), b"x");
}

#[test]
fn a_second_open_of_the_same_directory_is_refused() {
    let t = closed_log(2);
    let log = t.open();
    match holdfast::seglog::Log::open(t.path(), t.opts.clone()) {
        Err(LogError::Locked { dir }) => assert_eq!(dir, t.path()),
        Err(e) => panic!("expected Locked, got {e}"),
        Ok(_) => panic!("a second open of a locked directory succeeded"),
    }
    // The first handle is unaffected, and the lock goes with it.
    assert_eq!(append_frames(&log, 1, PER_FRAME).start, 6);
    drop(log);
    let log = t.open();
    assert_eq!(log.next_seq(), 9);
}

#[test]
fn a_read_only_view_of_a_damaged_log_delivers_the_same_and_changes_no_byte() {
    let t = closed_log(40);
    let sealed = t.frames(0)[5]; // events 15..18
    let active = t.frames(108)[1]; // events 111..114
    let last = t.frames(108)[3]; // events 117..120
    flip_bit(&t.segment(0), sealed.payload() + 70, 1);
    flip_bit(&t.segment(108), active.payload() + 5, 3);
    truncate(&t.segment(108), last.offset + 50);
    let files = |t: &TestDir| {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let bytes = std::fs::read(e.path()).unwrap();
                (e.file_name().into_string().unwrap(), bytes)
            })
            .collect();
        v.sort();
        v
    };
    let before = files(&t);

    let view = holdfast::seglog::Log::open_read_only(t.path()).unwrap();
    assert_eq!(view.stats().next_seq, 117);
    let mut r = view.reader(0);
    assert_eq!(
        seqs(&read_all(&mut r)),
        span_without_all(0..117, &[15..18, 111..114])
    );
    assert_eq!(view.stats().counters.corrupt_frames, 2);
    assert!(matches!(
        view.consumer("a", StartAt::Oldest),
        Err(LogError::ReadOnly)
    ));
    assert_eq!(files(&t), before, "the view changed the directory");
    // It takes no lock either: the daemon can open the directory beside it,
    // and repairs the torn tail as usual.
    let log = t.open();
    assert_eq!(log.stats().counters.torn_tails, 1);
    assert_eq!(t.segments().last(), Some(&(108, last.offset)));
    drop((r, view, log));
}

#[test]
fn damage_is_counted_lost_once_across_restarts() {
    let t = closed_log(40);
    let f = t.frames(0)[5];
    flip_bit(&t.segment(0), f.first_event() + 9, 2);
    for _ in 0..3 {
        let log = t.open();
        let mut a = log.consumer("a", StartAt::Oldest).unwrap();
        assert_eq!(seqs(&read_all(&mut a)), span_without(0..120, 15..18));
        assert_eq!(lost(&log, "a", LossReason::Corrupt), 3);
        log.close_blocking().unwrap();
    }
}

// ---------------------------------------------------------------------------
// Format 2: compressed blocks, frames of several blocks, mixed formats.

/// The compressing codecs.
const COMPRESSED: [Compression; 2] = [Compression::Zstd { level: 1 }, Compression::Lz4];

/// A closed log under `codec` of frames of [`PER_FRAME`] events, at least
/// one segment sealed and at least five frames in the active one
/// (compressed frames vary in size, so the layout is found, not computed),
/// consumers `a` and `b` registered at the oldest event, nothing committed.
fn closed_log_with(codec: Compression) -> TestDir {
    let t = TestDir::with_options(LogOptions {
        compression: codec,
        ..small_options()
    });
    let log = t.open();
    let a = log.consumer("a", StartAt::Oldest).unwrap();
    let b = log.consumer("b", StartAt::Oldest).unwrap();
    loop {
        append_frames(&log, 1, PER_FRAME);
        let segs = t.segments();
        if segs.len() >= 2 && t.frames(segs.last().unwrap().0).len() >= 5 {
            break;
        }
        assert!(log.next_seq() < 10_000, "{codec:?}: the log never rolled");
    }
    log.close_blocking().unwrap();
    drop((a, b, log));
    t
}

/// In segment `base` of `t`, frames 2 and 3 merged into one frame of two
/// blocks (events `base + 6 .. base + 12`), as a group commit of those two
/// appends writes it. Returns the image, the frame and its blocks; checks
/// that both blocks really are compressed.
fn two_block_frame(t: &TestDir, base: u64) -> (Vec<u8>, FrameAt, Vec<BlockAt>) {
    let image = std::fs::read(t.segment(base)).unwrap();
    let (image, f) = merge_frames(&image, 2);
    assert_eq!(f.seqs(), base + 6..base + 12);
    let blocks = walk_blocks(&image, &f);
    assert_eq!(blocks.len(), 2);
    for b in &blocks {
        assert_ne!(
            b.codec, 0,
            "the block was stored plain: nothing tests decompression"
        );
        assert!(b.stored_len < b.raw_len);
    }
    (image, f, blocks)
}

/// How a block is damaged behind a CRC that was computed for the damage.
#[derive(Debug, Clone, Copy)]
enum BlockDamage {
    /// The raw length in the block header, one more or one less: the body
    /// decompresses to a size the header does not claim.
    RawLength(i64),
    /// The last bytes of the stored body gone (and the stored length and
    /// the frame's length told so): the body does not decompress.
    CutShort(u64),
    /// The first four bytes of the body zeroed: for zstd, its magic number.
    Zeroed,
}

/// Applies `damage` to `block` of frame `f` in `image` and recomputes the
/// frame's length and CRC, so the frame itself is valid.
fn damage_block(image: &[u8], f: &FrameAt, block: &BlockAt, damage: BlockDamage) -> Vec<u8> {
    let mut img = image.to_vec();
    let at = block.offset as usize;
    let set32 = |img: &mut Vec<u8>, at: usize, v: u64| {
        img[at..at + 4].copy_from_slice(&(v as u32).to_le_bytes())
    };
    match damage {
        BlockDamage::RawLength(d) => set32(&mut img, at + 8, (block.raw_len as i64 + d) as u64),
        BlockDamage::CutShort(n) => {
            let body_end = (block.body() + block.stored_len) as usize;
            img.drain(body_end - n as usize..body_end);
            set32(&mut img, at, block.stored_len - n);
            set32(&mut img, f.offset as usize, f.len - 8 - n);
        }
        BlockDamage::Zeroed => img[at + 16..at + 20].fill(0),
    }
    fix_frame_crc(&mut img, f.offset);
    img
}

const BLOCK_DAMAGE: [BlockDamage; 5] = [
    BlockDamage::RawLength(1),
    BlockDamage::RawLength(-1),
    BlockDamage::CutShort(1),
    BlockDamage::CutShort(5),
    BlockDamage::Zeroed,
];

#[test]
fn a_compressed_block_that_does_not_decompress_loses_only_its_events() {
    for codec in COMPRESSED {
        for damage in BLOCK_DAMAGE {
            if matches!((codec, damage), (Compression::Lz4, BlockDamage::Zeroed)) {
                // LZ4's block format has no magic number: zeroed bytes may
                // decode to something; covered by the sweep below.
                continue;
            }
            for which in 0..2 {
                let what = format!("{codec:?}, {damage:?}, block {which}");
                let t = closed_log_with(codec);
                let segs = t.segments();
                assert!(segs.len() >= 2, "{what}: {segs:?}");
                let end = {
                    let log = t.open();
                    log.next_seq()
                };
                let cut = match damage {
                    BlockDamage::CutShort(n) => n,
                    _ => 0,
                };
                // In the first (sealed) segment and in the active one.
                let mut damaged_bytes = 0;
                for &(base, _) in [segs[0], *segs.last().unwrap()].iter() {
                    let (image, f, blocks) = two_block_frame(&t, base);
                    let img = damage_block(&image, &f, &blocks[which], damage);
                    std::fs::write(t.segment(base), &img).unwrap();
                    damaged_bytes += blocks[which].len() - cut;
                }
                let hole = |base: u64| {
                    let first = base + 6 + 3 * which as u64;
                    first..first + 3
                };
                let holes = [hole(segs[0].0), hole(segs.last().unwrap().0)];

                let log = t.open();
                // The frames are whole: nothing is found at open, and the
                // active segment keeps its end.
                let c = log.stats().counters;
                assert_eq!((c.corrupt_frames, c.torn_tails), (0, 0), "{what}");
                assert_eq!(log.next_seq(), end, "{what}");
                let mut a = log.consumer("a", StartAt::Oldest).unwrap();
                let mut b = log.consumer("b", StartAt::Oldest).unwrap();
                let expected = span_without_all(0..end, &holes);
                assert_eq!(seqs(&read_all(&mut a)), expected, "{what}");
                assert_eq!(seqs(&read_all(&mut b)), expected, "{what}");
                a.commit(2).unwrap();
                a.rewind();
                assert_eq!(seqs(&read_all(&mut a)), expected[2..], "{what}");
                // Counted once each, however often it is read.
                let c = log.stats().counters;
                assert_eq!(
                    (c.corrupt_frames, c.corrupt_bytes),
                    (2, damaged_bytes),
                    "{what}: one block in each segment"
                );
                assert_eq!(lost(&log, "a", LossReason::Corrupt), 6, "{what}");
                assert_eq!(lost(&log, "b", LossReason::Corrupt), 6, "{what}");
                // Appends go on.
                assert_eq!(append_frames(&log, 1, PER_FRAME).start, end, "{what}");
                assert_eq!(seqs(&read_all(&mut a)), span(end..end + 3), "{what}");
            }
        }
    }
}

#[test]
fn any_damage_to_a_compressed_body_behind_a_good_crc_is_skipped_or_decodes_whole() {
    // Every byte of a compressed body inverted, the frame's CRC recomputed:
    // the CRC cannot help, only the codec and the body's layout can. With
    // no checksum of its own over the raw bytes, a body may still decode to
    // other events of the right sizes (as an uncompressed event with a
    // recomputed CRC would); what must hold is that the log never panics,
    // hands out what the block decoder makes of the bytes or nothing of
    // that block, counts what it skips, and loses nothing else.
    use holdfast::seglog::block;
    for codec in COMPRESSED {
        let t = closed_log_with(codec);
        let (image, f, blocks) = two_block_frame(&t, 0);
        let end = t.open().next_seq();
        let body = blocks[0];
        let (mut skipped, mut decoded) = (0, 0);
        for i in body.body()..body.body() + body.stored_len {
            let what = format!("{codec:?}, body byte {}", i - body.body());
            let mut img = image.clone();
            img[i as usize] ^= 0xff;
            fix_frame_crc(&mut img, f.offset);
            std::fs::write(t.segment(0), &img).unwrap();
            let h = block::BlockHeader::decode(&img[body.offset as usize..]).unwrap();
            let stored = bytes::Bytes::copy_from_slice(
                &img[body.body() as usize..(body.body() + body.stored_len) as usize],
            );
            let opened = block::open(&h, stored);

            // Each open reuses the directory: loss counts may carry over.
            let log = t.open();
            let mut a = log.consumer("a", StartAt::Oldest).unwrap();
            let lost_before = lost(&log, "a", LossReason::Corrupt);
            let got = read_all(&mut a);
            let lost_now = lost(&log, "a", LossReason::Corrupt) - lost_before;
            let (damaged, intact): (Vec<_>, Vec<_>) = got
                .iter()
                .partition(|e| f.first_seq + 3 > e.seq && e.seq >= f.first_seq);
            // Everything outside the damaged block is exact.
            assert_eq!(
                seqs(&intact.into_iter().cloned().collect::<Vec<_>>()),
                span_without(0..end, f.first_seq..f.first_seq + 3),
                "{what}"
            );
            let c = log.stats().counters;
            match opened {
                Err(_) => {
                    skipped += 1;
                    assert!(damaged.is_empty(), "{what}: events of a damaged block");
                    assert_eq!(
                        (c.corrupt_frames, c.corrupt_bytes),
                        (1, body.len()),
                        "{what}"
                    );
                    assert_eq!(lost_now, 3, "{what}");
                }
                Ok(b) => {
                    decoded += 1;
                    let want: Vec<&[u8]> = b.events().map(|r| &b.bytes[r]).collect();
                    let got: Vec<&[u8]> = damaged.iter().map(|e| &e.data[..]).collect();
                    assert_eq!(got, want, "{what}: not what the block decodes to");
                    assert_eq!(c.corrupt_frames, 0, "{what}");
                    assert_eq!(lost_now, 0, "{what}");
                }
            }
        }
        eprintln!("{codec:?}: {skipped} damaged bodies skipped, {decoded} decoded whole");
        assert!(skipped > 0, "{codec:?}: no damage was ever caught");
    }
}

#[test]
fn a_flipped_bit_in_a_compressed_frame_is_caught_by_its_crc() {
    use holdfast::seglog::format::{self, Decoded};
    for codec in COMPRESSED {
        let t = closed_log_with(codec);
        let (image, f, blocks) = two_block_frame(&t, 0);
        let frame = &image[f.offset as usize..(f.offset + f.len) as usize];
        // Every bit, at the format level: never a frame.
        for bit in 0..frame.len() * 8 {
            let mut g = frame.to_vec();
            g[bit / 8] ^= 1 << (bit % 8);
            let d = format::decode_frame(&g, format::FORMAT_VERSION);
            assert!(
                !matches!(d, Decoded::Frame { .. }),
                "{codec:?}: bit {bit} undetected"
            );
        }
        // A few, through the log: the whole frame (both blocks) is lost.
        let end = t.open().next_seq();
        let at = |b: &BlockAt, within: u64| b.offset - f.offset + within;
        for (off, bit) in [
            (0, 0),
            (16, 1),
            (at(&blocks[0], 0), 2),
            (at(&blocks[0], 8), 0),
            (at(&blocks[0], 12), 1),
            (at(&blocks[0], BLOCK_HEADER + 2), 5),
            (at(&blocks[1], BLOCK_HEADER + blocks[1].stored_len / 2), 3),
            (f.len - 1, 7),
        ] {
            let mut img = image.clone();
            img[(f.offset + off) as usize] ^= 1 << bit;
            std::fs::write(t.segment(0), &img).unwrap();
            let log = t.open();
            let mut a = log.consumer("a", StartAt::Oldest).unwrap();
            let mut b = log.consumer("b", StartAt::Oldest).unwrap();
            // Each open reuses the directory: loss counts may carry over.
            let before = [
                lost(&log, "a", LossReason::Corrupt),
                lost(&log, "b", LossReason::Corrupt),
            ];
            let expected = span_without(0..end, f.seqs());
            assert_eq!(
                seqs(&read_all(&mut a)),
                expected,
                "{codec:?}, flip at {off}"
            );
            assert_eq!(
                seqs(&read_all(&mut b)),
                expected,
                "{codec:?}, flip at {off}"
            );
            let c = log.stats().counters;
            assert_eq!(
                (c.corrupt_frames, c.corrupt_bytes),
                (1, f.len),
                "{codec:?}, flip at {off}"
            );
            assert_eq!(lost(&log, "a", LossReason::Corrupt) - before[0], 6);
            assert_eq!(lost(&log, "b", LossReason::Corrupt) - before[1], 6);
        }
    }
}

#[test]
fn a_reader_resuming_inside_a_frame_of_several_compressed_blocks_gets_exactly_the_rest() {
    for codec in CODECS {
        let t = closed_log_with(codec);
        let (image, f, _) = two_block_frame_any(&t, 0);
        std::fs::write(t.segment(0), &image).unwrap();
        let log = t.open();
        let end = log.next_seq();
        for from in f.seqs() {
            let mut r = log.reader(from);
            let got = read_all(&mut r);
            assert_eq!(seqs(&got), span(from..end), "{codec:?} from {from}");
            let e = &got[0];
            // Which append it came with is known from the block, not the frame.
            let batch = if from < f.first_seq + 3 {
                f.first_seq
            } else {
                f.first_seq + 3
            };
            assert_eq!(
                (e.batch_start, e.format),
                (batch, 2),
                "{codec:?} from {from}"
            );
            assert!(e.context.is_empty());
        }
    }
}

/// [`two_block_frame`] without the check that the blocks are compressed.
fn two_block_frame_any(t: &TestDir, base: u64) -> (Vec<u8>, FrameAt, Vec<BlockAt>) {
    let image = std::fs::read(t.segment(base)).unwrap();
    let (image, f) = merge_frames(&image, 2);
    let blocks = walk_blocks(&image, &f);
    (image, f, blocks)
}

// Logs that mix formats: segments written by an older holdfast (format 1,
// made here by hand from the documented layout) before format-2 ones.

const OLD_MS: u64 = 1_700_000_000_000;

/// A log directory as an older holdfast left it: format-1 segments 0
/// (events 0..30, sealed) and 30 (events 30..45, active), frames of three
/// events, no cursor file.
fn v1_log(codec: Compression) -> TestDir {
    let t = TestDir::with_options(LogOptions {
        compression: codec,
        ..small_options()
    });
    std::fs::write(t.segment(0), v1_segment(0, &[3; 10], OLD_MS)).unwrap();
    std::fs::write(t.segment(30), v1_segment(30, &[3; 5], OLD_MS)).unwrap();
    t
}

fn version_on_disk(t: &TestDir, base: u64) -> u16 {
    let b = std::fs::read(t.segment(base)).unwrap();
    u16::from_le_bytes([b[4], b[5]])
}

/// Checks the format, context and batch start each event reports: the
/// events below `v2_from` come from format-1 frames of three events.
fn check_origin(events: &[holdfast::seglog::Event], v2_from: u64, v2_batches: &[u64]) {
    for e in events {
        assert!(e.context.is_empty(), "event {}", e.seq);
        if e.seq < v2_from {
            assert_eq!(
                (e.format, e.batch_start),
                (1, e.seq - e.seq % 3),
                "event {}",
                e.seq
            );
            assert_eq!(e.append_ms, OLD_MS);
        } else {
            let start = v2_batches.iter().rev().find(|&&s| s <= e.seq).unwrap();
            assert_eq!((e.format, e.batch_start), (2, *start), "event {}", e.seq);
        }
    }
}

#[test]
fn a_format_1_log_is_read_in_order_and_continues_in_format_2() {
    let t = v1_log(Compression::Zstd { level: 1 });
    let old_active = std::fs::read(t.segment(30)).unwrap();
    assert_eq!(
        old_active.len() as u64,
        SEGMENT_HEADER + 5 * v1_frame_len(3)
    );

    let log = t.open();
    assert_eq!(log.next_seq(), 45);
    assert_eq!(log.stats().counters, holdfast::seglog::Counters::default());
    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    let mut b = log.consumer("b", StartAt::Oldest).unwrap();
    // Half of the old log, before anything new is appended.
    let first = a.read(20, usize::MAX).unwrap();
    assert_eq!(seqs(&first), span(0..20));
    // The old active segment is sealed, not appended to: a segment never
    // mixes formats.
    let added = append_frames(&log, 4, PER_FRAME);
    assert_eq!((added.start, added.end), (45, 57));
    assert_eq!(
        t.segments(),
        [
            (0, SEGMENT_HEADER + 10 * v1_frame_len(3)),
            (30, old_active.len() as u64),
            (45, t.segments()[2].1),
        ]
    );
    assert_eq!(std::fs::read(t.segment(30)).unwrap(), old_active);
    assert_eq!(version_on_disk(&t, 45), 2);
    let batches = [45, 48, 51, 54];

    let rest = read_all(&mut a);
    assert_eq!(seqs(&rest), span(20..57));
    check_origin(&first, 45, &batches);
    check_origin(&rest, 45, &batches);
    let all = read_all(&mut b);
    assert_eq!(seqs(&all), span(0..57));
    check_origin(&all, 45, &batches);

    // Readers starting anywhere, in a format-1 frame or a format-2 block.
    for from in [0, 1, 29, 31, 44, 45, 47, 56] {
        let got = read_all(&mut log.reader(from));
        assert_eq!(seqs(&got), span(from..57), "from {from}");
        check_origin(&got, 45, &batches);
    }

    // Across a restart, with a commit inside an old frame.
    a.commit(31).unwrap();
    log.close_blocking().unwrap();
    drop((a, b, log));
    let log = t.open();
    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    assert_eq!(seqs(&read_all(&mut a)), span(31..57));
    assert_eq!(
        version_on_disk(&t, 0),
        1,
        "old segments are never rewritten"
    );
    assert_eq!(lost(&log, "a", LossReason::Corrupt), 0);
    assert_eq!(log.stats().counters, holdfast::seglog::Counters::default());
}

#[test]
fn an_empty_format_1_active_segment_becomes_format_2_in_place() {
    let t = v1_log(Compression::Zstd { level: 1 });
    std::fs::write(t.segment(45), segment_header(1, 45, OLD_MS)).unwrap();
    let log = t.open();
    assert_eq!(log.next_seq(), 45);
    assert_eq!(version_on_disk(&t, 45), 2, "rewritten at open");
    assert_eq!(append_frames(&log, 2, PER_FRAME).start, 45);
    assert_eq!(
        t.segments().iter().map(|s| s.0).collect::<Vec<_>>(),
        [0, 30, 45],
        "no new segment: the rewritten one takes the appends"
    );
    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    let got = read_all(&mut a);
    assert_eq!(seqs(&got), span(0..51));
    check_origin(&got, 45, &[45, 48]);
    let c = log.stats().counters;
    assert_eq!(
        (c.corrupt_headers, c.corrupt_frames, c.torn_tails),
        (0, 0, 0)
    );
}

#[test]
fn damaged_headers_of_both_formats_are_counted_and_the_format_found_from_the_frames() {
    // Format 1: 0 and 30 sealed; format 2: 45 sealed (18 frames), 99 active.
    let t = v1_log(Compression::None);
    let log = t.open();
    append_frames(&log, 20, PER_FRAME);
    log.close_blocking().unwrap();
    drop(log);
    assert_eq!(
        t.segments().iter().map(|s| s.0).collect::<Vec<_>>(),
        [0, 30, 45, 99]
    );
    let batches: Vec<u64> = (45..105).step_by(3).collect();
    flip_bit(&t.segment(0), 28, 0); // header CRC, format 1, sealed
    flip_bit(&t.segment(30), 4, 1); // the version itself, format 1, sealed
    flip_bit(&t.segment(45), 4, 0); // the version itself, format 2, sealed
    flip_bit(&t.segment(99), 0, 3); // magic, format 2, active

    let log = t.open();
    assert_eq!(log.stats().counters.corrupt_headers, 4);
    assert_eq!(log.next_seq(), 105);
    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    let got = read_all(&mut a);
    assert_eq!(seqs(&got), span(0..105));
    check_origin(&got, 45, &batches);
    // A reader starting inside each segment finds the format too.
    for from in [1, 31, 46, 100] {
        let got = read_all(&mut log.reader(from));
        assert_eq!(seqs(&got), span(from..105), "from {from}");
        check_origin(&got, 45, &batches);
    }
    assert_eq!(append_frames(&log, 1, PER_FRAME).start, 105);
    assert_eq!(seqs(&read_all(&mut a)), [105, 106, 107]);
    let c = log.stats().counters;
    assert_eq!((c.corrupt_frames, c.torn_tails), (0, 0));
    assert_eq!(lost(&log, "a", LossReason::Corrupt), 0);
}

#[test]
fn a_format_1_active_segment_with_a_damaged_header_is_still_sealed_before_appending() {
    let t = v1_log(Compression::Zstd { level: 1 });
    flip_bit(&t.segment(30), 16, 2); // created time: the header CRC fails
    let log = t.open();
    assert_eq!(log.stats().counters.corrupt_headers, 1);
    assert_eq!(log.next_seq(), 45);
    assert_eq!(append_frames(&log, 1, PER_FRAME).start, 45);
    assert_eq!(
        t.segments().iter().map(|s| s.0).collect::<Vec<_>>(),
        [0, 30, 45],
        "its frames told it was format 1: appended to, it would mix formats"
    );
    let mut a = log.consumer("a", StartAt::Oldest).unwrap();
    let got = read_all(&mut a);
    assert_eq!(seqs(&got), span(0..48));
    check_origin(&got, 45, &[45]);
}
