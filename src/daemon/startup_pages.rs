//! Handing back the program pages only start-up used.
//!
//! The agent's code and read-only data are mapped from its binary, and a
//! page of them counts in its RSS once touched. Start-up touches much that
//! never runs again (argument parsing, the config check, the log's
//! recovery) and, because the kernel maps and reads ahead whole windows
//! around each page faulted in, most of the binary ends up resident: about
//! 6 of its 7 MiB of code on an idle agent, a third of its RSS. Once every
//! component runs, those pages are unmapped; the code that keeps running
//! faults its own pages back from the page cache (no disk read: they are
//! still cached), and the rest stay out of the agent's RSS.

/// Unmaps the pages of the binary's clean read-only mappings (its code and
/// read-only data) from this process. Best effort: any failure leaves the
/// pages where they are, which costs memory and nothing else.
pub fn release() {
    #[cfg(target_os = "linux")]
    if let Err(e) = release_linux() {
        tracing::debug!(error = %e, "start-up pages of the binary kept");
    }
}

#[cfg(target_os = "linux")]
fn release_linux() -> std::io::Result<()> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    let exe = exe.to_string_lossy();
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut released = 0usize;
    for m in clean_read_only_maps(&smaps, &exe) {
        // SAFETY: the range is one whole mapping of the binary, private and
        // without write permission, with no page privately copied (no
        // relocation or other write ever made one): `MADV_DONTNEED`
        // only drops our page table entries, and the next access maps the
        // same bytes again from the file. The file cannot change or shrink
        // under the map: the kernel refuses writes to a running executable
        // (ETXTBSY), and a package upgrade replaces it by rename, which
        // leaves this inode as it is. No Rust reference covers these pages
        // as memory we own.
        let r = unsafe { libc::madvise(m.start as *mut libc::c_void, m.len, libc::MADV_DONTNEED) };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        released += m.len;
    }
    tracing::debug!(
        mapped_bytes = released,
        "start-up pages of the binary released"
    );
    Ok(())
}

#[derive(Debug, PartialEq, Eq)]
struct Map {
    start: usize,
    len: usize,
}

/// The mappings of `exe` in `/proc/self/smaps` text that are read-only,
/// private and hold no private copy of a page.
fn clean_read_only_maps(smaps: &str, exe: &str) -> Vec<Map> {
    let mut out = Vec::new();
    let mut current: Option<Map> = None;
    let mut clean = true;
    let finish = |m: Option<Map>, clean: bool, out: &mut Vec<Map>| {
        if let Some(m) = m.filter(|_| clean) {
            out.push(m);
        }
    };
    for line in smaps.lines() {
        let mut fields = line.split_ascii_whitespace();
        let Some(first) = fields.next() else { continue };
        if let Some((start, end)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
            finish(current.take(), clean, &mut out);
            clean = true;
            let perms = fields.next().unwrap_or("");
            let path = fields.nth(3).unwrap_or("");
            let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) else {
                continue;
            };
            if path == exe && (perms == "r-xp" || perms == "r--p") && end > start {
                current = Some(Map {
                    start,
                    len: end - start,
                });
            }
        } else if first == "Anonymous:" {
            // A private copy of a page (a relocation written into it):
            // dropping it would bring back the file's bytes. A page only
            // dirty in the page cache (a binary just written) is the file.
            clean &= fields.next() == Some("0");
        }
    }
    finish(current, clean, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
559de37fd000-559de3a2d000 r--p 00000000 fe:00 8521671                    /usr/bin/holdfast
Size:               2240 kB
Anonymous:             0 kB
559de3a2d000-559de40e8000 r-xp 0022f000 fe:00 8521671                    /usr/bin/holdfast
Size:               6892 kB
Anonymous:             0 kB
559de40e8000-559de4131000 r--p 008e9000 fe:00 8521671                    /usr/bin/holdfast
Size:                292 kB
Private_Dirty:       292 kB
Anonymous:           292 kB
559de4131000-559de4134000 rw-p 00931000 fe:00 8521671                    /usr/bin/holdfast
Anonymous:            12 kB
7f9865929000-7f9865a7f000 r-xp 00026000 fe:00 326279                     /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7f9865b00000-7f9865b01000 rw-p 00000000 00:00 0
Anonymous:             4 kB
";

    #[test]
    fn only_the_binarys_clean_read_only_maps_are_released() {
        let maps = clean_read_only_maps(SMAPS, "/usr/bin/holdfast");
        assert_eq!(
            maps,
            vec![
                Map {
                    start: 0x559de37fd000,
                    len: 0x559de3a2d000 - 0x559de37fd000
                },
                Map {
                    start: 0x559de3a2d000,
                    len: 0x559de40e8000 - 0x559de3a2d000
                },
            ],
            "the relocated read-only data and the writable data stay"
        );
        assert!(clean_read_only_maps(SMAPS, "/usr/bin/other").is_empty());
    }

    #[test]
    fn releasing_leaves_the_program_running() {
        release();
        // Code and constant data fault back in from the page cache.
        let v: Vec<String> = (0..1000).map(|i| format!("{i:x}")).collect();
        assert_eq!(v[255], "ff");
    }
}
