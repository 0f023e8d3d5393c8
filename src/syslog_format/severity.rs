//! One table for syslog severities (RFC 5424 §6.2.1: 0 emerg … 7 debug),
//! so a message means the same whether it came over the network, from the
//! journal or from a file: the OpenTelemetry log data model's mapping,
//! "Appendix B: SeverityNumber example mappings" of
//! <https://github.com/open-telemetry/opentelemetry-specification/blob/main/specification/logs/data-model-appendix.md>:
//!
//! | syslog | OpenTelemetry |
//! |---|---|
//! | Emergency (0) | FATAL (21) |
//! | Alert (1) | ERROR3 (19) |
//! | Critical (2) | ERROR2 (18) |
//! | Error (3) | ERROR (17) |
//! | Warning (4) | WARN (13) |
//! | Notice (5) | INFO2 (10) |
//! | Informational (6) | INFO (9) |
//! | Debug (7) | DEBUG (5) |
//!
//! The severity text is the syslog keyword (`emerg`, `err`, …), as
//! `syslog(3)` and journalctl name them: the source's own word, as the
//! data model asks of `SeverityText`.

/// The OpenTelemetry severity number and the syslog keyword of severities
/// 0-7, by severity.
const TABLE: [(i32, &str); 8] = [
    (21, "emerg"),
    (19, "alert"),
    (18, "crit"),
    (17, "err"),
    (13, "warning"),
    (10, "notice"),
    (9, "info"),
    (5, "debug"),
];

/// The OpenTelemetry severity number and text of syslog severity `code`;
/// `None` past 7.
pub fn otel(code: u8) -> Option<(i32, &'static str)> {
    TABLE.get(usize::from(code)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_data_model_appendix() {
        let numbers: Vec<i32> = (0..8).map(|c| otel(c).unwrap().0).collect();
        assert_eq!(numbers, [21, 19, 18, 17, 13, 10, 9, 5]);
        assert_eq!(otel(0), Some((21, "emerg")));
        assert_eq!(otel(3), Some((17, "err")));
        assert_eq!(otel(8), None);
    }
}
