use prost::Message;

use super::super::encode::{Encoder, LineMeta, Template};
use super::super::lines::Line;
use super::chunk::Ids;
use super::out::{cut, Limits, Out};
use super::protocol::Chunk;
use super::*;
use crate::event::Context;
use crate::metrics::Metrics;

#[test]
fn cut_respects_characters() {
    assert_eq!(cut(b"abc", 5), b"abc");
    assert_eq!(cut("aé".as_bytes(), 2), b"a");
    assert_eq!(cut("aé".as_bytes(), 3), "aé".as_bytes());
    assert_eq!(cut(b"\xffabc", 2), b"\xffa");
}

/// Lines of several files emitted in format 2, across chunks cut by
/// size, read back through the `Decoder` with each chunk's context as
/// exactly the format-1 envelopes of the same lines.
#[test]
fn format_2_chunks_read_back_as_format_1_envelopes() {
    use crate::event::{Decoder, Envelope};
    let metrics = Arc::new(Metrics::new(None));
    let (tx, mut rx) = mpsc::channel(64);
    let limits = Limits {
        max_frame: 2000,
        chunk_bytes: 1500,
        max_line: 300,
    };
    let c = Counters::new(&metrics, "app");
    let mut out = Out::new(
        Encoder::new("app", "box1"),
        None,
        tx,
        c,
        limits,
        false,
        true,
    );
    let reference = Encoder::new("app", "box1");
    let files = [
        ("/var/log/a.log", 11u64, 0u32),
        ("/var/log/b.log", 12, 3),
        ("/var/log/a.log", 11, 1),
    ];
    let templates: Vec<Template> = files
        .iter()
        .map(|f| out.enc.template(std::path::Path::new(f.0)))
        .collect();
    let mut pos = [0u64; 3];
    let mut want = Vec::new();
    let mut whole = Vec::new();
    let tailer = std::thread::spawn(move || {
        for i in 0..200u64 {
            let f = (i % 7 % 3) as usize;
            out.observed_ns = 1_000_000 + i / 2 * 1000;
            let text = format!(
                "line {i} of {} {}",
                files[f].0,
                "z".repeat((i % 40) as usize)
            );
            let len = if i % 50 == 0 { 400 } else { text.len() as u64 };
            let line = Line {
                bytes: text.as_bytes(),
                start: pos[f],
                end: pos[f] + len + 1,
                len,
            };
            pos[f] = line.end;
            let ids = Ids {
                id: f as u64,
                key: files[f].1,
                generation: files[f].2,
                template: &templates[f],
                ahead: &[],
            };
            let mut emitted = 0;
            out.emit(&ids, line, &mut emitted);
            let meta = LineMeta {
                key: files[f].1,
                generation: files[f].2,
                offset: line.start,
                end: line.end,
                observed_ns: out.observed_ns,
                truncated_from: (len > 300).then_some(len),
                invalid_utf8: false,
            };
            whole.clear();
            reference.encode(&templates[f], &text, &meta, &mut whole);
            want.push(Envelope::decode_event(&whole[4..]).unwrap());
        }
        out.flush();
        want
    });
    let mut chunks = Vec::new();
    while let Some(u) = rx.blocking_recv() {
        if let Update::Chunk(c) = u {
            chunks.push(c);
        }
    }
    let want = tailer.join().unwrap();
    assert!(chunks.len() > 3, "cut by size: {}", chunks.len());
    // A group per file and read, up to the cap; then deltas.
    let most = chunks
        .iter()
        .map(|c| Context::decode(c.context.as_ref()).unwrap().groups.len())
        .max();
    assert!(most > Some(files.len()), "{most:?}");
    let mut dec = Decoder::new();
    let mut got = Vec::new();
    for c in &chunks {
        assert!(c.data.len() + c.context.len() <= 2000);
        let b = crate::seglog::Batch::from_framed(c.data.clone().into(), c.events).unwrap();
        assert_eq!(b.len(), c.events as usize);
        let mut at = 0;
        for index in 0..c.events as u64 {
            let n = u32::from_le_bytes(c.data[at..at + 4].try_into().unwrap()) as usize;
            let e = dec
                .decode(&c.data[at + 4..at + 4 + n], &c.context, index)
                .unwrap();
            got.push(e.to_envelope());
            at += 4 + n;
        }
    }
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "line {i}");
    }
}

#[test]
fn chunks_are_batches_as_they_are() {
    use crate::seglog::Batch;
    let mut c = Chunk::default();
    for e in [&b"one"[..], b"", b"three"] {
        c.data.extend_from_slice(&(e.len() as u32).to_le_bytes());
        c.data.extend_from_slice(e);
        c.events += 1;
    }
    let b = Batch::from_framed(c.data.clone().into(), c.events).unwrap();
    assert_eq!(b.len(), 3);
    // Framing that does not hold exactly the events counted is refused.
    assert!(Batch::from_framed(c.data.clone().into(), 2).is_none());
    assert!(Batch::from_framed(c.data[..c.data.len() - 1].to_vec().into(), 3).is_none());
    assert_eq!(b.encoded_len(), c.data.len());
    assert_eq!(c.payload_bytes(), 8);
    c.set_pos(1, 5);
    c.set_pos(1, 9);
    c.set_pos(2, 3);
    assert_eq!(c.positions, vec![(1, 9), (2, 3)]);
}
