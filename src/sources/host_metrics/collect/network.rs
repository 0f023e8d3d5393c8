//! `network`: traffic per interface the filters take (`/proc/net/dev`).
//!
//! `/proc/net/dev` shows the reader's network namespace, so with a `root`
//! other than `/` the host's is read through its init,
//! `<root>/proc/1/net/dev`.

use super::{Failure, Host};
use crate::sources::host_metrics::points::{Attr, Kind, Points};

pub(super) fn network(host: &mut Host, out: &mut Points) -> Result<(), Failure> {
    let rel = if host.root == std::path::Path::new("/") {
        "proc/net/dev"
    } else {
        "proc/1/net/dev"
    };
    let path = host.path(rel);
    host.read_path(&path)?;
    let (text, filters) = (&host.buf, &host.filters);
    // Two header lines, then "name: 8 receive columns 8 transmit columns".
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        if !filters.interfaces.takes(name) {
            continue;
        }
        let mut c = [0u64; 16];
        let mut n = 0;
        for (slot, v) in c.iter_mut().zip(rest.split_ascii_whitespace()) {
            *slot = v
                .parse()
                .map_err(|_| Failure::parse(&path, format!("{name}: {v:?} is not a count")))?;
            n += 1;
        }
        if n < 12 {
            return Err(Failure::parse(
                &path,
                format!("{name}: {n} columns, not 16"),
            ));
        }
        let at = |d| {
            [
                ("network.interface.name", Attr::Str(name)),
                ("network.io.direction", Attr::Str(d)),
            ]
        };
        let (rx, tx) = (at("receive"), at("transmit"));
        out.metric("system.network.io", "By", Kind::Counter)
            .uint(&rx, c[0])
            .uint(&tx, c[8]);
        out.metric("system.network.packet.count", "{packet}", Kind::Counter)
            .uint(&rx, c[1])
            .uint(&tx, c[9]);
        out.metric("system.network.errors", "{error}", Kind::Counter)
            .uint(&rx, c[2])
            .uint(&tx, c[10]);
        out.metric("system.network.packet.dropped", "{packet}", Kind::Counter)
            .uint(&rx, c[3])
            .uint(&tx, c[11]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixture::Fixture;
    use super::super::{Collector, Filters};
    use crate::sources::host_metrics::filter::Filter;

    const DEV: &str = "Inter-|   Receive                            |  Transmit\n \
        face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
        lo: 5000 50 0 0 0 0 0 0 5000 50 0 0 0 0 0 0\n  \
        eth0: 123456 789 1 2 0 0 0 3 654321 987 4 5 0 0 0 0\n";

    #[test]
    fn traffic_per_interface_and_direction_without_lo() {
        let p = Fixture::new()
            .file("proc/1/net/dev", DEV)
            .filters(Filters {
                interfaces: Filter::new(None, Some(vec!["lo".into()])).unwrap(),
                ..Filters::default()
            })
            .collect(Collector::Network);
        let (i, d) = ("network.interface.name", "network.io.direction");
        assert_eq!(
            p.value("system.network.io", &[(i, "eth0"), (d, "receive")]),
            123456.0
        );
        assert_eq!(
            p.value("system.network.io", &[(i, "eth0"), (d, "transmit")]),
            654321.0
        );
        assert_eq!(
            p.value(
                "system.network.packet.count",
                &[(i, "eth0"), (d, "transmit")]
            ),
            987.0
        );
        assert_eq!(
            p.value("system.network.errors", &[(i, "eth0"), (d, "transmit")]),
            4.0
        );
        assert_eq!(
            p.value(
                "system.network.packet.dropped",
                &[(i, "eth0"), (d, "receive")]
            ),
            2.0
        );
        assert_eq!(p.points("system.network.io").len(), 2, "lo is excluded");
        assert_eq!(p.unit("system.network.io"), "By");
        assert_eq!(p.unit("system.network.packet.dropped"), "{packet}");
    }
}
