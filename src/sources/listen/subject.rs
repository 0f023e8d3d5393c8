/*!
The subject of a client certificate as an RFC 4514 string (`CN=gw01,O=Acme`),
the value of the record attribute `tls.client.subject`.

Only the few DER structures on the way to the subject are read: the
certificate was verified by rustls before this runs, so this is formatting,
not validation. Anything unexpected gives `None` (no attribute) rather than
a guess.
*/

use std::fmt::Write;

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
/// `[0] EXPLICIT Version` at the start of a v3 TBSCertificate.
const VERSION: u8 = 0xa0;

/// Short names RFC 4514 (and common practice: `emailAddress` aside) gives
/// attribute types, by the DER content of their OID.
const NAMES: [(&[u8], &str); 9] = [
    (&[0x55, 0x04, 0x03], "CN"),
    (&[0x55, 0x04, 0x06], "C"),
    (&[0x55, 0x04, 0x07], "L"),
    (&[0x55, 0x04, 0x08], "ST"),
    (&[0x55, 0x04, 0x09], "STREET"),
    (&[0x55, 0x04, 0x0a], "O"),
    (&[0x55, 0x04, 0x0b], "OU"),
    (
        &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19],
        "DC",
    ),
    (
        &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01],
        "UID",
    ),
];

/// One DER element: its tag, its content, the whole element (header
/// included), and what follows it.
struct Element<'a> {
    tag: u8,
    content: &'a [u8],
    whole: &'a [u8],
    rest: &'a [u8],
}

fn element(input: &[u8]) -> Option<Element<'_>> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    let header = input.len() - rest.len();
    Some(Element {
        tag,
        content: &rest[..len],
        whole: &input[..header + len],
        rest: &rest[len..],
    })
}

/// The content of an element with `tag`, and what follows it.
fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let e = element(input)?;
    (e.tag == tag).then_some((e.content, e.rest))
}

/// The subject of the DER certificate `der`, RFC 4514 style.
pub(crate) fn of_certificate(der: &[u8]) -> Option<String> {
    let (cert, _) = expect(der, SEQUENCE)?;
    let (mut tbs, _) = expect(cert, SEQUENCE)?;
    if tbs.first() == Some(&VERSION) {
        tbs = element(tbs)?.rest;
    }
    // serialNumber, signature, issuer, validity, then the subject.
    for _ in 0..4 {
        tbs = element(tbs)?.rest;
    }
    let (name, _) = expect(tbs, SEQUENCE)?;
    // A certificate may name its subject only in subjectAltName: no
    // attribute then, rather than an empty one.
    format_name(name).filter(|n| !n.is_empty())
}

/// A Name's RDNs, most specific first as RFC 4514 writes them (the reverse
/// of their order in the certificate).
fn format_name(mut name: &[u8]) -> Option<String> {
    let mut rdns = Vec::new();
    while !name.is_empty() {
        let (mut set, rest) = expect(name, SET)?;
        name = rest;
        let mut parts = Vec::new();
        while !set.is_empty() {
            let (atv, rest) = expect(set, SEQUENCE)?;
            set = rest;
            parts.push(format_attribute(atv)?);
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

fn format_attribute(atv: &[u8]) -> Option<String> {
    let (oid, value) = expect(atv, OID)?;
    let Element {
        tag,
        content,
        whole,
        ..
    } = element(value)?;
    let mut out = match NAMES.iter().find(|(o, _)| *o == oid) {
        Some((_, n)) => n.to_string(),
        None => dotted(oid)?,
    };
    out.push('=');
    match text(tag, content) {
        Some(s) => escape(&s, &mut out),
        // A value of a type that is not a string: its DER in hex, as the
        // RFC says.
        None => {
            out.push('#');
            for b in whole {
                let _ = write!(out, "{b:02x}");
            }
        }
    }
    Some(out)
}

/// The text of a directory string, if `tag` is one.
fn text(tag: u8, content: &[u8]) -> Option<String> {
    match tag {
        // UTF8String, PrintableString, IA5String, NumericString, VisibleString
        0x0c | 0x13 | 0x16 | 0x12 | 0x1a => std::str::from_utf8(content).ok().map(str::to_string),
        // TeletexString: Latin-1 in practice.
        0x14 => Some(content.iter().map(|&b| b as char).collect()),
        // BMPString: UTF-16 big-endian.
        0x1e if content.len().is_multiple_of(2) => {
            let units = content.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]]));
            char::decode_utf16(units)
                .collect::<Result<String, _>>()
                .ok()
        }
        _ => None,
    }
}

/// An OID's dotted form, for types without a short name.
fn dotted(oid: &[u8]) -> Option<String> {
    let (&first, rest) = oid.split_first()?;
    let mut out = format!("{}.{}", first / 40, first % 40);
    let mut arc: u64 = 0;
    for &b in rest {
        arc = arc.checked_shl(7)? | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            let _ = write!(out, ".{arc}");
            arc = 0;
        }
    }
    Some(out)
}

/// RFC 4514 section 2.4: the special characters, a leading `#` or space and
/// a trailing space are escaped with a backslash; control characters in hex.
fn escape(value: &str, out: &mut String) {
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '#' if i == 0 => out.push_str("\\#"),
            ' ' if i == 0 || i == last => out.push_str("\\ "),
            c if c.is_control() => {
                let mut buf = [0; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    let _ = write!(out, "\\{b:02x}");
                }
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        if content.len() < 0x80 {
            v.push(content.len() as u8);
        } else {
            v.extend([0x82, (content.len() >> 8) as u8, content.len() as u8]);
        }
        v.extend(content);
        v
    }

    fn atv(oid: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
        tlv(SEQUENCE, &[tlv(OID, oid), tlv(tag, value)].concat())
    }

    #[test]
    fn names_are_written_most_specific_first_with_escapes() {
        let name = [
            tlv(SET, &atv(&[0x55, 4, 6], 0x13, b"DE")),
            tlv(
                SET,
                &[
                    atv(&[0x55, 4, 0x0a], 0x0c, b"Acme, Inc"),
                    atv(&[0x55, 4, 0x0b], 0x0c, b"Ops"),
                ]
                .concat(),
            ),
            tlv(SET, &atv(&[0x55, 4, 3], 0x0c, b" gw01")),
            tlv(
                SET,
                &atv(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 1, 9, 1], 0x02, &[5]),
            ),
        ]
        .concat();
        assert_eq!(
            format_name(&name).unwrap(),
            "1.2.840.113549.1.9.1=#020105,CN=\\ gw01,O=Acme\\, Inc+OU=Ops,C=DE"
        );
    }

    #[test]
    fn the_subject_of_a_whole_certificate() {
        let subject = tlv(SET, &atv(&[0x55, 4, 3], 0x0c, b"client"));
        let tbs = [
            tlv(VERSION, &tlv(0x02, &[2])),
            tlv(0x02, &[1]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &tlv(SET, &atv(&[0x55, 4, 3], 0x0c, b"ca"))),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &subject),
            tlv(SEQUENCE, &[0; 200]),
        ]
        .concat();
        let cert = tlv(
            SEQUENCE,
            &[tlv(SEQUENCE, &tbs), tlv(SEQUENCE, &[])].concat(),
        );
        assert_eq!(of_certificate(&cert).as_deref(), Some("CN=client"));
        assert_eq!(of_certificate(&cert[..cert.len() / 2]), None);
        assert_eq!(of_certificate(b""), None);
    }
}
