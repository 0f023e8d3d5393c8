/*!
The two text formats `/metrics` serves, and which one a scraper asked for.

prometheus-client encodes only OpenMetrics. Prometheus asks for it, but
`promtool check metrics`, older scrapers and most `curl | grep` habits read
the classic text format (0.0.4), so anything that does not ask for
OpenMetrics gets the same text converted:

* a counter's family is named like its samples (`x_total`): in OpenMetrics
  the family is `x` and its samples `x_total`, and a classic parser would
  see a family without samples and samples without help;
* `# UNIT` and `# EOF` do not exist in the classic format;
* `_created` samples and exemplars have no classic form (holdfast sets
  neither today; they are dropped should a later family carry them);
* the OpenMetrics `unknown` type is the classic `untyped`.
*/

/// What a scraper gets from `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    Classic,
}

impl Format {
    /// Chooses by the request's `Accept` header: OpenMetrics when the client
    /// names it with at least the preference it gives plain text, else the
    /// classic format (also for no header, `*/*`, or one we cannot read).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Classic;
        };
        let (mut openmetrics, mut text) = (0.0f32, 0.0f32);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => openmetrics = openmetrics.max(q),
                "text/plain" | "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Format::OpenMetrics
        } else {
            Format::Classic
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Classic => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The classic text format (0.0.4) of an OpenMetrics exposition.
pub fn to_classic(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // A family's HELP comes before its TYPE, which decides its classic name.
    let mut help: Option<(&str, &str)> = None;
    let mut family = ("", "");
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush_help(&mut out, help.take());
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let kind = if kind == "unknown" { "untyped" } else { kind };
            let classic = match kind {
                "counter" => format!("{name}_total"),
                _ => name.to_string(),
            };
            match help.take() {
                Some((n, text)) if n == name => {
                    out.push_str(&format!(
                        "# HELP {classic} {}\n",
                        text.replace("\\\"", "\"")
                    ));
                }
                other => flush_help(&mut out, other),
            }
            out.push_str(&format!("# TYPE {classic} {kind}\n"));
            family = (name, kind);
        } else if line.starts_with("# UNIT ") || line == "# EOF" {
        } else if line.starts_with('#') {
            out.push_str(line);
            out.push('\n');
        } else {
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let created = line[..name_end]
                .strip_prefix(family.0)
                .is_some_and(|suffix| suffix == "_created");
            if created && matches!(family.1, "counter" | "histogram" | "summary") {
                continue;
            }
            let sample = line.find(" # ").map_or(line, |exemplar| &line[..exemplar]);
            out.push_str(sample);
            out.push('\n');
        }
    }
    flush_help(&mut out, help);
    out
}

/// A HELP line whose TYPE did not follow, kept as it was.
fn flush_help(out: &mut String, help: Option<(&str, &str)>) {
    if let Some((name, text)) = help {
        out.push_str(&format!("# HELP {name} {text}\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_take_their_samples_name_and_units_and_eof_go() {
        let om = "\
# HELP holdfast_sink_sent_bytes Bytes a sink delivered.
# TYPE holdfast_sink_sent_bytes counter
# UNIT holdfast_sink_sent_bytes bytes
holdfast_sink_sent_bytes_total{sink=\"es\"} 700
holdfast_sink_sent_bytes_created{sink=\"es\"} 1700000000.0
# HELP holdfast_log_segments Segment files on disk.
# TYPE holdfast_log_segments gauge
holdfast_log_segments 3
# HELP odd An unknown one, with an \\\"escaped\\\" quote.
# TYPE odd unknown
odd 1 # {trace_id=\"x\"} 1
# EOF
";
        assert_eq!(
            to_classic(om),
            "\
# HELP holdfast_sink_sent_bytes_total Bytes a sink delivered.
# TYPE holdfast_sink_sent_bytes_total counter
holdfast_sink_sent_bytes_total{sink=\"es\"} 700
# HELP holdfast_log_segments Segment files on disk.
# TYPE holdfast_log_segments gauge
holdfast_log_segments 3
# HELP odd An unknown one, with an \"escaped\" quote.
# TYPE odd untyped
odd 1
"
        );
    }

    #[test]
    fn histograms_keep_their_samples() {
        let om = "\
# HELP d_seconds Time.
# TYPE d_seconds histogram
# UNIT d_seconds seconds
d_seconds_sum 0.5
d_seconds_count 1
d_seconds_bucket{le=\"+Inf\"} 1
# EOF
";
        let classic = to_classic(om);
        assert!(classic.starts_with("# HELP d_seconds Time.\n# TYPE d_seconds histogram\n"));
        assert!(classic.ends_with("d_seconds_count 1\nd_seconds_bucket{le=\"+Inf\"} 1\n"));
    }

    #[test]
    fn openmetrics_only_when_asked_for_at_least_as_much_as_text() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let cases = [
            (None, Format::Classic),
            (Some("*/*"), Format::Classic),
            (Some("text/plain;version=0.0.4"), Format::Classic),
            (Some("garbage;;;q=x"), Format::Classic),
            (Some(prometheus), Format::OpenMetrics),
            (Some("application/openmetrics-text"), Format::OpenMetrics),
            (
                Some("text/plain, application/openmetrics-text"),
                Format::OpenMetrics,
            ),
            (
                Some("text/plain;q=0.9, application/openmetrics-text;q=0.2"),
                Format::Classic,
            ),
            (Some("application/openmetrics-text;q=0"), Format::Classic),
        ];
        for (accept, want) in cases {
            assert_eq!(Format::negotiate(accept), want, "{accept:?}");
        }
    }
}
