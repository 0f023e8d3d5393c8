//! Damage tests for everything the segment log keeps on disk (DESIGN.md
//! promises 2, 3 and 9; STYLE.md habit 8): write known events, close the log,
//! damage the bytes at exact offsets computed from the layout in
//! `src/seglog/format.rs`, reopen, and assert exactly which events are
//! delivered and what is counted.
//!
//! Every test writes frames of three 60-byte events: a frame is
//! 28 + 3 × (4 + 60) = 220 bytes, and a 4096-byte segment holds a 32-byte
//! header and 18 frames (54 events). Forty frames therefore make
//!
//! ```text
//! 00000000000000000000.seg  sealed  events   0..54   3992 bytes
//! 00000000000000000054.seg  sealed  events  54..108  3992 bytes
//! 00000000000000000108.seg  active  events 108..120   912 bytes
//! ```

#[path = "common/seglog.rs"]
mod common;

use holdfast::seglog::{LogError, LossReason, StartAt};

use common::*;

const PER_FRAME: u64 = 3;
const FRAME: u64 = 220;
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
    // The first event of the first frame: its length, then its bytes.
    let ev = (SEGMENT_HEADER + FRAME_HEADER) as usize;
    assert_eq!(u32::from_le_bytes(seg[ev..ev + 4].try_into().unwrap()), 60);
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
const FRAME_BIT_FLIPS: [(u64, u8); 9] = [
    (0, 0),           // length, lowest bit: the CRC no longer covers the right bytes
    (3, 7),           // length, highest bit: an impossible length
    (4, 2),           // the CRC itself
    (8, 0),           // first sequence number
    (16, 1),          // event count
    (20, 5),          // append time
    (28, 3),          // the first event's length
    (28 + 4 + 10, 6), // a byte of the first event
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
    flip_bit(&t.segment(0), f.payload() + 9, 2);

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
    flip_bit(&t.segment(0), f.payload() + 9, 2);
    for _ in 0..3 {
        let log = t.open();
        let mut a = log.consumer("a", StartAt::Oldest).unwrap();
        assert_eq!(seqs(&read_all(&mut a)), span_without(0..120, 15..18));
        assert_eq!(lost(&log, "a", LossReason::Corrupt), 3);
        log.close_blocking().unwrap();
    }
}
