//! Which mount points, file system types and interfaces a collector takes:
//! an include list or an exclude list of glob patterns (`*` crosses `/`,
//! so `"/var/lib/docker/*"` excludes everything below it). Applied before
//! anything is read about the item, so an excluded mount is never statted.

use globset::{Glob, GlobSet, GlobSetBuilder};

#[derive(Debug, Clone, Default)]
pub enum Filter {
    /// Everything.
    #[default]
    All,
    /// Only names matching one of these.
    Include(GlobSet, Vec<String>),
    /// Everything but names matching one of these.
    Exclude(GlobSet, Vec<String>),
}

impl Filter {
    /// `include` or `exclude` (at most one is set; the check refuses both).
    pub fn new(
        include: Option<Vec<String>>,
        exclude: Option<Vec<String>>,
    ) -> Result<Filter, String> {
        match (include, exclude) {
            (Some(i), _) => Ok(Filter::Include(set(&i)?, i)),
            (None, Some(e)) => Ok(Filter::Exclude(set(&e)?, e)),
            (None, None) => Ok(Filter::All),
        }
    }

    pub fn takes(&self, name: &str) -> bool {
        match self {
            Filter::All => true,
            Filter::Include(s, _) => s.is_match(name),
            Filter::Exclude(s, _) => !s.is_match(name),
        }
    }

    /// For `holdfast check`.
    pub fn describe(&self) -> String {
        match self {
            Filter::All => "all".to_string(),
            Filter::Include(_, p) => format!("only {}", p.join(", ")),
            Filter::Exclude(_, p) => format!("all but {}", p.join(", ")),
        }
    }
}

/// Checks one pattern: the message names what is wrong with it.
pub fn check_pattern(p: &str) -> Result<(), String> {
    Glob::new(p).map(drop).map_err(|e| e.kind().to_string())
}

fn set(patterns: &[String]) -> Result<GlobSet, String> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(Glob::new(p).map_err(|e| format!("{p:?}: {}", e.kind()))?);
    }
    b.build().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Option<Vec<String>> {
        Some(s.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn include_takes_only_matches_and_exclude_takes_the_rest() {
        let i = Filter::new(v(&["eth*", "wlan0"]), None).unwrap();
        assert!(i.takes("eth0") && i.takes("wlan0") && !i.takes("lo"));
        let e = Filter::new(None, v(&["/var/lib/docker/*", "/proc"])).unwrap();
        assert!(!e.takes("/var/lib/docker/overlay2/abc/merged"));
        assert!(!e.takes("/proc") && e.takes("/") && e.takes("/var"));
        assert!(Filter::default().takes("anything"));
    }

    #[test]
    fn a_bad_pattern_is_named() {
        assert!(check_pattern("[").is_err());
        assert!(check_pattern("veth*").is_ok());
    }
}
