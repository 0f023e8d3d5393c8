//! OTLP names to Prometheus names, as the OpenTelemetry specification's
//! "Prometheus and OpenMetrics Compatibility" gives them: the metric name
//! sanitized, the unit's suffix added unless the name already ends with it,
//! `_total` for counters; attribute keys sanitized into label names.
//!
//! A scrape → log → remote write round trip gives the scraped names back:
//! the scrape source trims `_total` from a counter's name and keeps the
//! rest, so only `_total` comes back here (a unit it did not read from
//! `# UNIT` is empty and adds nothing).

/// How a metric is written, which decides its suffixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// A gauge, or a sum that is not monotonic: the unit `1` is `ratio`.
    Gauge,
    /// A monotonic sum: `_total` last.
    Counter,
    Histogram,
    Summary,
}

/// The Prometheus metric name of the OTLP metric `name` with `unit`.
pub(crate) fn metric_name(name: &str, unit: &str, kind: Kind) -> String {
    let mut out = sanitize(name, true);
    if out.is_empty() {
        out.push('_');
    }
    if out.as_bytes()[0].is_ascii_digit() {
        out.insert(0, '_');
    }
    if let Some(suffix) = unit_suffix(unit, kind) {
        // A counter's name may already end with `_total` after the unit
        // (`node_cpu_seconds_total`): the unit is then already there.
        let base = match kind {
            Kind::Counter => out.strip_suffix("_total").unwrap_or(&out),
            _ => &out,
        };
        let has = base == suffix || base.ends_with(&format!("_{suffix}"));
        if !has {
            if !out.ends_with('_') {
                out.push('_');
            }
            out.push_str(&suffix);
        }
    }
    if kind == Kind::Counter && !out.ends_with("_total") {
        if !out.ends_with('_') {
            out.push('_');
        }
        out.push_str("total");
    }
    out
}

/// The label name of the attribute key `key`. A key starting with a digit
/// gets `key_` before it; one starting with `__` (the names Prometheus
/// reserves, `__name__` among them) gets `key` before it, so an attribute
/// can never pass for a reserved label.
pub(crate) fn label_name(key: &str) -> String {
    let out = sanitize(key, false);
    if out.is_empty() {
        return "key_".to_string();
    }
    if out.as_bytes()[0].is_ascii_digit() {
        return format!("key_{out}");
    }
    if out.starts_with("__") {
        return format!("key{out}");
    }
    out
}

/// Every character outside `[a-zA-Z0-9_]` (and `:` in metric names) as
/// `_`; in metric names, runs of `_` as one.
fn sanitize(s: &str, metric: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let ok = c.is_ascii_alphanumeric() || c == '_' || (metric && c == ':');
        let c = if ok { c } else { '_' };
        if metric && c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    out
}

/// The suffix a unit gives a name of `kind`, if any: UCUM units as words,
/// `a/b` as `a_per_b`, annotations in braces (`{packets}`) dropped, `1` as
/// `ratio` for gauges only, an unknown unit as written (sanitized).
pub(crate) fn unit_suffix(unit: &str, kind: Kind) -> Option<String> {
    let unit = without_annotations(unit);
    let unit = unit.trim();
    if unit.is_empty() {
        return None;
    }
    if unit == "1" {
        return (kind == Kind::Gauge).then(|| "ratio".to_string());
    }
    let words = match unit.split_once('/') {
        Some((main, per)) => {
            let main = main.trim();
            let per = per.trim();
            let per = PER_UNITS
                .iter()
                .find(|(u, _)| *u == per)
                .map_or_else(|| sanitize(per, true), |(_, w)| w.to_string());
            if main.is_empty() || main == "1" {
                format!("per_{per}")
            } else {
                format!("{}_per_{per}", unit_word(main))
            }
        }
        None => unit_word(unit),
    };
    let words = words.trim_matches('_').to_string();
    (!words.is_empty()).then_some(words)
}

fn unit_word(unit: &str) -> String {
    UNITS
        .iter()
        .find(|(u, _)| *u == unit)
        .map_or_else(|| sanitize(unit, true), |(_, w)| w.to_string())
}

/// `unit` without `{…}` annotations.
fn without_annotations(unit: &str) -> String {
    let mut out = String::with_capacity(unit.len());
    let mut depth = 0u32;
    for c in unit.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// UCUM units and their words, from the specification's table.
const UNITS: &[(&str, &str)] = &[
    // Time
    ("d", "days"),
    ("h", "hours"),
    ("min", "minutes"),
    ("s", "seconds"),
    ("ms", "milliseconds"),
    ("us", "microseconds"),
    ("ns", "nanoseconds"),
    // Bytes
    ("By", "bytes"),
    ("KiBy", "kibibytes"),
    ("MiBy", "mebibytes"),
    ("GiBy", "gibibytes"),
    ("TiBy", "tibibytes"),
    ("KBy", "kilobytes"),
    ("MBy", "megabytes"),
    ("GBy", "gigabytes"),
    ("TBy", "terabytes"),
    // SI
    ("m", "meters"),
    ("V", "volts"),
    ("A", "amperes"),
    ("J", "joules"),
    ("W", "watts"),
    ("g", "grams"),
    // Misc
    ("Cel", "celsius"),
    ("Hz", "hertz"),
    ("%", "percent"),
];

/// The units after `/`, singular.
const PER_UNITS: &[(&str, &str)] = &[
    ("s", "second"),
    ("m", "minute"),
    ("h", "hour"),
    ("d", "day"),
    ("w", "week"),
    ("mo", "month"),
    ("y", "year"),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// (OTLP name, unit, kind, Prometheus name): the specification's
    /// examples, then the cases round trips and edge devices meet.
    #[rustfmt::skip]
    const NAMES: &[(&str, &str, Kind, &str)] = &[
        // The specification's examples.
        ("system.cpu.time", "s", Kind::Counter, "system_cpu_time_seconds_total"),
        ("system.memory.usage", "By", Kind::Gauge, "system_memory_usage_bytes"),
        ("system.network.dropped", "{packets}", Kind::Counter, "system_network_dropped_total"),
        ("system.network.dropped", "packets", Kind::Counter, "system_network_dropped_packets_total"),
        ("system.filesystem.usage", "By", Kind::Gauge, "system_filesystem_usage_bytes"),
        ("system.memory.utilization", "1", Kind::Gauge, "system_memory_utilization_ratio"),
        ("http.server.duration", "ms", Kind::Histogram, "http_server_duration_milliseconds"),
        ("system.cpu.utilization", "1", Kind::Gauge, "system_cpu_utilization_ratio"),
        ("speed", "m/s", Kind::Gauge, "speed_meters_per_second"),
        ("throughput", "By/s", Kind::Gauge, "throughput_bytes_per_second"),
        ("requests", "{requests}/s", Kind::Gauge, "requests_per_second"),
        ("rotations", "1/m", Kind::Gauge, "rotations_per_minute"),
        ("temperature", "Cel", Kind::Gauge, "temperature_celsius"),
        ("disk.io", "By", Kind::Counter, "disk_io_bytes_total"),
        // `1` is `ratio` for gauges only.
        ("errors", "1", Kind::Counter, "errors_total"),
        ("load.share", "1", Kind::Summary, "load_share"),
        // A suffix already there is not repeated.
        ("node_cpu_seconds", "s", Kind::Counter, "node_cpu_seconds_total"),
        ("node_cpu_seconds_total", "s", Kind::Counter, "node_cpu_seconds_total"),
        ("process_resident_memory_bytes", "By", Kind::Gauge, "process_resident_memory_bytes"),
        ("up", "", Kind::Gauge, "up"),
        // The scrape source's names come back as scraped.
        ("node_cpu_seconds", "", Kind::Counter, "node_cpu_seconds_total"),
        ("http_requests", "", Kind::Counter, "http_requests_total"),
        // Characters outside the alphabet, runs of `_`, a leading digit.
        ("k8s.pod/cpu-usage", "", Kind::Gauge, "k8s_pod_cpu_usage"),
        ("a..b__c", "", Kind::Gauge, "a_b_c"),
        ("recording:rule", "", Kind::Gauge, "recording:rule"),
        ("2xx.count", "", Kind::Counter, "_2xx_count_total"),
        ("héllo", "", Kind::Gauge, "h_llo"),
        // An unknown unit, as written.
        ("link.speed", "bit/s", Kind::Gauge, "link_speed_bit_per_second"),
        ("queue.depth", "{items}", Kind::Gauge, "queue_depth"),
    ];

    #[test]
    fn names_follow_the_specification_table() {
        for (name, unit, kind, want) in NAMES {
            assert_eq!(
                metric_name(name, unit, *kind),
                *want,
                "{name} [{unit}] as {kind:?}"
            );
        }
    }

    #[test]
    fn label_names_are_sanitized_and_never_reserved() {
        for (key, want) in [
            ("cpu.mode", "cpu_mode"),
            ("http.status_code", "http_status_code"),
            ("k8s-namespace", "k8s_namespace"),
            ("0day", "key_0day"),
            ("__name__", "key__name__"),
            ("_private", "_private"),
            ("a..b", "a__b"),
            ("", "key_"),
        ] {
            assert_eq!(label_name(key), want, "{key}");
        }
    }
}
