//! `[sources.<name>]` with `type = "host_metrics"`: the table as written,
//! its check (producing the [`HostMetricsSettings`] the source runs with)
//! and its lines in `holdfast check`.

use std::fmt::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use toml::Spanned;

use super::collect::{Collector, Filters};
use super::filter::{check_pattern, Filter};
use super::metrics::HostMetricsSourceMetrics;
use super::{HostMetricsSettings, DROP_REASONS};
use crate::checking::raw::raw_table;
use crate::checking::units::{format_duration, Dur};
use crate::checking::{Checker, Env, NamedTable, Severity};
use crate::component::{ComponentContext, Run, Source, SourceEnv};
use crate::metrics::Metrics;
use crate::sources::raw::raw_source;

/// Default `interval`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);
/// The shortest `interval`: reading `/proc` more often than this measures
/// holdfast more than the machine.
const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Default `filesystem.fs_types_exclude`: file systems that hold no
/// operator data (kernel interfaces, memory, container layers, read-only
/// images that are always full).
pub const DEFAULT_FS_TYPES_EXCLUDE: &[&str] = &[
    "autofs",
    "binfmt_misc",
    "bpf",
    "cgroup",
    "cgroup2",
    "configfs",
    "debugfs",
    "devpts",
    "devtmpfs",
    "efivarfs",
    "fuse.lxcfs",
    "fusectl",
    "hugetlbfs",
    "mqueue",
    "nsfs",
    "overlay",
    "proc",
    "pstore",
    "ramfs",
    "rpc_pipefs",
    "securityfs",
    "selinuxfs",
    "squashfs",
    "sysfs",
    "tmpfs",
    "tracefs",
];

/// Default `filesystem.mount_points_exclude`: kernel trees and container
/// runtimes' private mounts.
pub const DEFAULT_MOUNT_POINTS_EXCLUDE: &[&str] = &[
    "/dev",
    "/dev/*",
    "/proc",
    "/proc/*",
    "/sys",
    "/sys/*",
    "/run/credentials/*",
    "/run/containerd/*",
    "/run/docker/*",
    "/var/lib/docker/*",
    "/var/lib/containers/*",
    "/var/lib/kubelet/*",
    "/snap/*",
];

/// Default `network.interfaces_exclude`.
pub const DEFAULT_INTERFACES_EXCLUDE: &[&str] = &["lo"];

raw_source! {
    /// `[sources.<name>]` with `type = "host_metrics"`, as written.
    struct RawHostMetricsSource {
        /// Default `"30s"`; at least `"1s"`.
        interval: Dur,
        /// Default: all (those this kernel lacks say nothing).
        collectors: Vec<Spanned<String>>,
        /// Default `"/"`: `<root>/proc` and `<root>/sys` are read.
        root: String,
        /// `[sources.<name>.filesystem]`. Default: every key at its default.
        filesystem: RawFilesystem,
        /// `[sources.<name>.network]`. Default: every key at its default.
        network: RawNetwork,
    }
}

raw_table! {
    /// `[sources.<name>.filesystem]`: which file systems are reported.
    RawFilesystem, "a table like [sources.<name>.filesystem] with mount_points_exclude, mount_points_include, fs_types_exclude or fs_types_include" {
        /// Default: kernel trees and container runtimes' mounts.
        mount_points_exclude: Vec<Spanned<String>>,
        /// Default: absent (all but the excluded).
        mount_points_include: Vec<Spanned<String>>,
        /// Default: pseudo and memory file systems.
        fs_types_exclude: Vec<Spanned<String>>,
        /// Default: absent (all but the excluded).
        fs_types_include: Vec<Spanned<String>>,
    }
}

raw_table! {
    /// `[sources.<name>.network]`: which interfaces are reported.
    RawNetwork, "a table like [sources.<name>.network] with interfaces_exclude or interfaces_include" {
        /// Default `["lo"]`.
        interfaces_exclude: Vec<Spanned<String>>,
        /// Default: absent (all but the excluded).
        interfaces_include: Vec<Spanned<String>>,
    }
}

type Patterns = Option<Spanned<Vec<Spanned<String>>>>;

/// One include/exclude pair under `table` (`sources.host.filesystem`),
/// keys `<what>_include` and `<what>_exclude`.
fn check_filter(
    cx: &mut Checker<'_>,
    table: &str,
    what: &str,
    include: &Patterns,
    exclude: &Patterns,
    default_exclude: &[&str],
) -> Filter {
    let (ikey, ekey) = (
        format!("{table}.{what}_include"),
        format!("{table}.{what}_exclude"),
    );
    let patterns = |cx: &mut Checker<'_>, key: &str, v: &Patterns| {
        let v = v.as_ref()?;
        cx.note(key, v);
        let mut out = Vec::new();
        for p in v.get_ref() {
            match check_pattern(p.get_ref()) {
                _ if p.get_ref().is_empty() => {
                    cx.error(Some(p.span()), key, "must not hold an empty pattern")
                }
                Err(why) => cx.error(
                    Some(p.span()),
                    key,
                    format!(
                        "{:?} is not a glob pattern ({why}): write a name, or a pattern \
                         like \"veth*\" or \"/var/lib/docker/*\"",
                        p.get_ref()
                    ),
                ),
                Ok(()) => out.push(p.get_ref().clone()),
            }
        }
        Some(out)
    };
    let inc = patterns(cx, &ikey, include);
    let exc = patterns(cx, &ekey, exclude);
    if let (Some(i), Some(_)) = (include, exclude) {
        cx.error(
            Some(i.span()),
            &ikey,
            format!(
                "{what}_include and {what}_exclude cannot both be set: include names what is \
                 reported (nothing else is), exclude what is left out; keep one"
            ),
        );
    }
    let exc = match (&inc, exc) {
        (None, None) => Some(default_exclude.iter().map(|s| s.to_string()).collect()),
        (_, e) => e,
    };
    // Patterns were checked one by one above: a set of good ones builds.
    Filter::new(inc, exc).unwrap_or_default()
}

impl RawHostMetricsSource {
    fn check(self, cx: &mut Checker<'_>, t: &NamedTable<'_>) -> HostMetricsSettings {
        let key = |k: &str| format!("{}.{k}", t.key);
        let mut interval = cx.duration(
            &key("interval"),
            self.interval.as_ref(),
            DEFAULT_INTERVAL,
            Some("the machine would be read without pause"),
        );
        if let Some(v) = &self.interval {
            if !interval.is_zero() && interval < MIN_INTERVAL {
                cx.error(
                    Some(v.span()),
                    &key("interval"),
                    format!(
                        "{} is too short: at least 1s (reading /proc more often measures \
                         holdfast more than the machine); the default is {}",
                        format_duration(interval),
                        format_duration(DEFAULT_INTERVAL)
                    ),
                );
                interval = DEFAULT_INTERVAL;
            }
        }
        let (collectors, chosen) = match &self.collectors {
            None => (Collector::ALL.to_vec(), false),
            Some(list) => {
                cx.note(&key("collectors"), list);
                let mut out = Vec::new();
                for name in list.get_ref() {
                    match Collector::named(name.get_ref()) {
                        Some(c) if !out.contains(&c) => out.push(c),
                        Some(_) => cx.error(
                            Some(name.span()),
                            &key("collectors"),
                            format!("{:?} is listed twice: keep one", name.get_ref()),
                        ),
                        None => cx.error(
                            Some(name.span()),
                            &key("collectors"),
                            format!(
                                "unknown collector {:?}: write some of {}",
                                name.get_ref(),
                                Collector::ALL
                                    .map(|c| format!("\"{}\"", c.name()))
                                    .join(", ")
                            ),
                        ),
                    }
                }
                if list.get_ref().is_empty() {
                    cx.error(
                        Some(list.span()),
                        &key("collectors"),
                        "is empty, so this source would collect nothing: name collectors, or \
                         remove the key for all of them",
                    );
                }
                (out, true)
            }
        };
        let root = cx
            .path(&key("root"), self.root.as_ref())
            .unwrap_or_else(|| PathBuf::from("/"));
        let fs = self.filesystem.as_ref().map(|f| f.get_ref());
        let net = self.network.as_ref().map(|n| n.get_ref());
        let none = None;
        let filters = Filters {
            mount_points: check_filter(
                cx,
                &key("filesystem"),
                "mount_points",
                fs.map_or(&none, |f| &f.mount_points_include),
                fs.map_or(&none, |f| &f.mount_points_exclude),
                DEFAULT_MOUNT_POINTS_EXCLUDE,
            ),
            fs_types: check_filter(
                cx,
                &key("filesystem"),
                "fs_types",
                fs.map_or(&none, |f| &f.fs_types_include),
                fs.map_or(&none, |f| &f.fs_types_exclude),
                DEFAULT_FS_TYPES_EXCLUDE,
            ),
            interfaces: check_filter(
                cx,
                &key("network"),
                "interfaces",
                net.map_or(&none, |n| &n.interfaces_include),
                net.map_or(&none, |n| &n.interfaces_exclude),
                DEFAULT_INTERFACES_EXCLUDE,
            ),
        };
        for (table, collector, span) in [
            (
                "filesystem",
                Collector::Filesystem,
                self.filesystem.as_ref().map(|f| f.span()),
            ),
            (
                "network",
                Collector::Network,
                self.network.as_ref().map(|n| n.span()),
            ),
        ] {
            if span.is_some() && !collectors.contains(&collector) {
                cx.warn(
                    span,
                    &key(table),
                    format!(
                        "has no effect: the {table} collector is not in collectors; add \
                         \"{table}\" to collectors, or remove this table"
                    ),
                );
            }
        }
        HostMetricsSettings {
            interval,
            collectors,
            chosen,
            root,
            filters,
        }
    }
}

impl Source for HostMetricsSettings {
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, _env: &SourceEnv<'_>) -> Option<Self> {
        cx.deserialize::<RawHostMetricsSource>(&t.key, t.value)
            .map(|raw| raw.check(cx, t))
    }

    fn describe(&self, out: &mut String) -> fmt::Result {
        let names: Vec<&str> = self.collectors.iter().map(|c| c.name()).collect();
        writeln!(
            out,
            "    collects {} from {} and {} every {}{}",
            names.join(", "),
            self.root.join("proc").display(),
            self.root.join("sys").display(),
            format_duration(self.interval),
            if self.chosen {
                ""
            } else {
                " (those this kernel has)"
            }
        )?;
        if self.collectors.contains(&Collector::Filesystem) {
            writeln!(
                out,
                "    file systems: types {}; mount points {}",
                self.filters.fs_types.describe(),
                self.filters.mount_points.describe()
            )?;
        }
        if self.collectors.contains(&Collector::Network) {
            writeln!(
                out,
                "    interfaces: {}",
                self.filters.interfaces.describe()
            )?;
        }
        Ok(())
    }

    fn register_families(metrics: &Metrics) {
        metrics.group::<HostMetricsSourceMetrics>();
    }

    fn declare_metrics(&self, name: &str, metrics: &Metrics) {
        metrics
            .group::<HostMetricsSourceMetrics>()
            .declare(name, &self.collectors);
        metrics.declare_source_drops(name, DROP_REASONS);
    }

    fn run(&self, ctx: &ComponentContext) -> Run {
        Box::pin(super::run(ctx.clone(), self.clone()))
    }

    fn check_environment(&self, name: &str, env: &mut Env<'_>) {
        let stat = self.root.join("proc/stat");
        if let Err(e) = std::fs::read_to_string(&stat) {
            let key = if self.root == std::path::Path::new("/") {
                format!("sources.{name}")
            } else {
                format!("sources.{name}.root")
            };
            env.push(
                Severity::Warning,
                &key,
                format!(
                    "{} cannot be read ({e}): this is not a Linux /proc, so the collectors \
                     will report nothing; set root to where the host's /proc and /sys are \
                     mounted (\"/host\" when they are /host/proc and /host/sys)",
                    stat.display()
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {

    /// `(key, message)` of each error `text`'s host source gets.
    fn errors(source: &str) -> Vec<(String, String)> {
        let text = format!(
            "[sources.host]\ntype = \"host_metrics\"\n{source}\n\n\
             [sinks.out]\ntype = \"file\"\ninputs = [\"host\"]\n"
        );
        crate::config::error_messages(&text)
    }

    fn one_error(source: &str, key: &str, says: &str) {
        let e = errors(source);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].0, key, "{e:?}");
        assert!(e[0].1.contains(says), "{e:?}");
    }

    #[test]
    fn the_defaults_and_a_full_table_pass() {
        assert_eq!(errors(""), []);
        assert_eq!(
            errors(
                "interval = \"10s\"\ncollectors = [\"cpu\", \"filesystem\", \"network\"]\n\
                 root = \"/host\"\n\
                 [sources.host.filesystem]\nfs_types_include = [\"ext4\", \"xfs\"]\n\
                 mount_points_exclude = [\"/boot/*\"]\n\
                 [sources.host.network]\ninterfaces_exclude = [\"lo\", \"veth*\"]\n"
            ),
            []
        );
    }

    #[test]
    fn bad_intervals_are_refused() {
        one_error(
            "interval = \"0s\"",
            "sources.host.interval",
            "greater than zero",
        );
        one_error(
            "interval = \"500ms\"",
            "sources.host.interval",
            "at least 1s",
        );
        assert!(!errors("interval = \"soon\"").is_empty());
    }

    #[test]
    fn an_unknown_collector_is_named_with_the_list() {
        one_error(
            "collectors = [\"cpu\", \"gpu\"]",
            "sources.host.collectors",
            "unknown collector \"gpu\": write some of \"cpu\", \"load\"",
        );
        one_error("collectors = []", "sources.host.collectors", "is empty");
        one_error(
            "collectors = [\"cpu\", \"cpu\"]",
            "sources.host.collectors",
            "listed twice",
        );
    }

    #[test]
    fn include_and_exclude_together_are_refused() {
        one_error(
            "[sources.host.network]\ninterfaces_include = [\"eth0\"]\ninterfaces_exclude = [\"lo\"]",
            "sources.host.network.interfaces_include",
            "cannot both be set",
        );
        one_error(
            "[sources.host.filesystem]\nfs_types_include = [\"ext4\"]\nfs_types_exclude = [\"tmpfs\"]",
            "sources.host.filesystem.fs_types_include",
            "cannot both be set",
        );
    }

    #[test]
    fn bad_patterns_and_unknown_keys_are_refused() {
        one_error(
            "[sources.host.network]\ninterfaces_exclude = [\"eth[\"]",
            "sources.host.network.interfaces_exclude",
            "is not a glob pattern",
        );
        one_error(
            "[sources.host.filesystem]\nmount_points_exclude = [\"\"]",
            "sources.host.filesystem.mount_points_exclude",
            "empty pattern",
        );
        assert!(!errors("[sources.host.filesystem]\nmountpoints = [\"/\"]").is_empty());
        assert!(!errors("collector = [\"cpu\"]").is_empty());
    }
}
