//! `thermal`: each thermal zone's temperature
//! (`/sys/class/thermal/thermal_zone*/temp`, millidegrees Celsius).
//!
//! Named as the hardware semantic conventions name a temperature sensor,
//! `hw.temperature` (Gauge, `Cel`, with `hw.id`, `hw.type` and `hw.name`):
//! the system conventions have no temperature metric, and a thermal zone
//! is exactly the sensor `hw.temperature` describes.

use super::{Failure, Host};
use crate::sources::host_metrics::points::{Attr, Kind, Points};

pub(super) fn thermal(host: &mut Host, out: &mut Points) -> Result<(), Failure> {
    let dir = host.path("sys/class/thermal");
    let entries = std::fs::read_dir(&dir).map_err(|e| Failure::io(&dir, &e))?;
    let mut zones: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("thermal_zone"))
        .collect();
    zones.sort();
    for zone in &zones {
        let temp = host.path(&format!("sys/class/thermal/{zone}/temp"));
        // Some firmware zones answer EIO or ENODATA until the sensor is
        // up; such a zone is left out this time, not an error each interval.
        let millis: i64 = match host.read_path(&temp) {
            Ok(()) => match host.buf.trim().parse() {
                Ok(v) => v,
                Err(_) => continue,
            },
            Err(_) => continue,
        };
        let kind = match host.read_path(&host.path(&format!("sys/class/thermal/{zone}/type"))) {
            Ok(()) => host.buf.trim().to_string(),
            Err(_) => zone.clone(),
        };
        out.metric("hw.temperature", "Cel", Kind::Gauge).double(
            &[
                ("hw.id", Attr::Str(zone)),
                ("hw.type", Attr::Str("temperature")),
                ("hw.name", Attr::Str(&kind)),
            ],
            millis as f64 / 1e3,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixture::Fixture;
    use super::super::{Collector, Failure};

    #[test]
    fn each_zone_is_a_temperature_in_celsius() {
        let p = Fixture::new()
            .file("sys/class/thermal/thermal_zone0/temp", "45500\n")
            .file("sys/class/thermal/thermal_zone0/type", "x86_pkg_temp\n")
            .file("sys/class/thermal/thermal_zone1/temp", "-2000\n")
            .file("sys/class/thermal/cooling_device0/type", "Processor\n")
            .collect(Collector::Thermal);
        let at = |id, name| [("hw.id", id), ("hw.type", "temperature"), ("hw.name", name)];
        assert_eq!(
            p.value("hw.temperature", &at("thermal_zone0", "x86_pkg_temp")),
            45.5
        );
        // A zone without a type is named by its id.
        assert_eq!(
            p.value("hw.temperature", &at("thermal_zone1", "thermal_zone1")),
            -2.0
        );
        assert_eq!(p.points("hw.temperature").len(), 2);
        assert_eq!(p.unit("hw.temperature"), "Cel");
        assert_eq!(p.kind("hw.temperature"), "gauge");
    }

    #[test]
    fn no_thermal_zones_is_absent() {
        let e = Fixture::new().collect_err(Collector::Thermal);
        assert!(matches!(e, Failure::Absent(_)), "{e}");
    }
}
