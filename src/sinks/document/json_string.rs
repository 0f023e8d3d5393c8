//! JSON strings: the one escaper of every document a sink writes.
//!
//! Log lines often hold a few quotes (`msg="…"`) and nothing else to
//! escape, so a string is copied in runs: 16-byte blocks are checked at
//! once (a compare the compiler vectorizes) and copied whole when clean;
//! only a block holding a byte to escape is walked byte by byte.

use std::io::Write;

/// Bytes checked at once.
const BLOCK: usize = 16;

/// Whether JSON requires `b` to be escaped inside a string.
#[inline(always)]
fn needs_escape(b: u8) -> bool {
    (b < 0x20) | (b == b'"') | (b == b'\\')
}

/// Whether any byte of the block must be escaped: branch-free, so that
/// the compiler compares the block in one go.
#[inline(always)]
fn block_needs_escape(block: &[u8; BLOCK]) -> bool {
    block.iter().fold(false, |acc, &b| acc | needs_escape(b))
}

/// Appends `s` as a JSON string (quoted, with the escapes JSON requires).
pub(crate) fn string(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // `bytes[start..i]` is clean and not yet copied.
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(block) = bytes[i..].first_chunk::<BLOCK>() {
            if !block_needs_escape(block) {
                i += BLOCK;
                continue;
            }
        }
        // A block with something to escape, or the tail shorter than one.
        let end = (i + BLOCK).min(bytes.len());
        for (j, &b) in bytes.iter().enumerate().take(end).skip(i) {
            if needs_escape(b) {
                out.extend_from_slice(&bytes[start..j]);
                escape(out, b);
                start = j + 1;
            }
        }
        i = end;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// The escape of one byte that needs one.
fn escape(out: &mut Vec<u8>, b: u8) {
    let short: &[u8] = match b {
        b'"' => b"\\\"",
        b'\\' => b"\\\\",
        b'\n' => b"\\n",
        b'\r' => b"\\r",
        b'\t' => b"\\t",
        _ => {
            let _ = write!(out, "\\u{b:04x}");
            return;
        }
    };
    out.extend_from_slice(short);
}

#[cfg(test)]
mod tests {
    use super::string;

    fn json(s: &str) -> String {
        let mut out = Vec::new();
        string(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_string_is_what_serde_json_writes_and_reads_back() {
        let mut cases: Vec<String> = vec![
            String::new(),
            "plain".into(),
            "a\u{1}b\u{7f}é".into(),
            "2026-01-01T00:00:00.000000+00:00 edge-gw-01 anchor-app[4242]: level=info \
             seq=0000000001 msg=\"telemetry payload telemetry payload\""
                .into(),
            "tab\there\r\nand \\ back".into(),
            "\u{0}\u{1f}\u{20}".into(),
            "ünïcödé \u{1F600} \"quoted\"".into(),
        ];
        // A byte to escape at every position of strings around the block
        // size, alone and in pairs.
        for len in 0..40 {
            for at in 0..len {
                for esc in ['"', '\\', '\n', '\u{1}'] {
                    let mut s: Vec<char> = "x".repeat(len).chars().collect();
                    s[at] = esc;
                    cases.push(s.iter().collect());
                    if at + 1 < len {
                        s[at + 1] = '"';
                        cases.push(s.iter().collect());
                    }
                }
            }
        }
        for s in &cases {
            let ours = json(s);
            assert_eq!(ours, serde_json::to_string(s).unwrap(), "{s:?}");
            assert_eq!(&serde_json::from_str::<String>(&ours).unwrap(), s);
        }
    }
}
