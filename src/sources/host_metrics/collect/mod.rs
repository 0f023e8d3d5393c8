//! The collectors: each reads its files under `<root>/proc` and
//! `<root>/sys` and writes its metrics into a [`Points`]. One file per
//! group of collectors; [`Host`] is what they share (the root, a read
//! buffer reused every interval, the boot time, the filters).
//!
//! A file that does not exist (no PSI in this kernel, no thermal zone, a
//! container without `/sys`) means the collector has nothing to say:
//! [`Failure::Absent`], logged once at debug by the caller. Anything else
//! (permission, a line that does not parse) is [`Failure::Broken`], counted.

mod cpu;
mod disk;
mod filesystem;
mod memory;
mod network;
mod pressure;
mod system;
mod thermal;

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::filter::Filter;
use super::points::Points;

/// The collectors, in the order they run and appear in the docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Collector {
    Cpu,
    Load,
    Memory,
    Paging,
    Pressure,
    Disk,
    Filesystem,
    Network,
    Thermal,
    System,
    Processes,
}

impl Collector {
    pub const ALL: [Collector; 11] = [
        Collector::Cpu,
        Collector::Load,
        Collector::Memory,
        Collector::Paging,
        Collector::Pressure,
        Collector::Disk,
        Collector::Filesystem,
        Collector::Network,
        Collector::Thermal,
        Collector::System,
        Collector::Processes,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Collector::Cpu => "cpu",
            Collector::Load => "load",
            Collector::Memory => "memory",
            Collector::Paging => "paging",
            Collector::Pressure => "pressure",
            Collector::Disk => "disk",
            Collector::Filesystem => "filesystem",
            Collector::Network => "network",
            Collector::Thermal => "thermal",
            Collector::System => "system",
            Collector::Processes => "processes",
        }
    }

    pub fn named(name: &str) -> Option<Collector> {
        Collector::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// Why a collector said nothing this time.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The file is not there: this kernel or container does not have it.
    #[error("{} does not exist", .0.display())]
    Absent(PathBuf),
    /// The file is there and could not be read or understood.
    #[error("{}: {why}", path.display())]
    Broken { path: PathBuf, why: String },
}

impl Failure {
    fn io(path: &Path, e: &io::Error) -> Failure {
        if e.kind() == io::ErrorKind::NotFound {
            Failure::Absent(path.to_path_buf())
        } else {
            Failure::Broken {
                path: path.to_path_buf(),
                why: e.to_string(),
            }
        }
    }

    fn parse(path: &Path, why: impl std::fmt::Display) -> Failure {
        Failure::Broken {
            path: path.to_path_buf(),
            why: why.to_string(),
        }
    }
}

/// What the file system and network collectors take and leave.
#[derive(Debug, Clone, Default)]
pub struct Filters {
    pub mount_points: Filter,
    pub fs_types: Filter,
    pub interfaces: Filter,
}

/// The machine the collectors read, and what they keep between intervals.
#[derive(Debug)]
pub struct Host {
    root: PathBuf,
    /// Every file is read into this, cleared, never shrunk.
    buf: String,
    /// Clock ticks per second (`/proc/stat` counts in ticks).
    ticks: u64,
    /// Boot time, unix seconds (from `/proc/stat`'s `btime`, read by the
    /// `cpu` or `system` collector; 0 until one has).
    pub boot_secs: u64,
    filters: Filters,
}

impl Host {
    pub fn new(root: &Path, filters: Filters) -> Host {
        Host {
            root: root.to_path_buf(),
            buf: String::with_capacity(16 << 10),
            ticks: procfs::ticks_per_second(),
            boot_secs: 0,
            filters,
        }
    }

    /// `<root>/<rel>`.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Reads `<root>/<rel>` into the reused buffer.
    fn read(&mut self, rel: &str) -> Result<(PathBuf, &str), Failure> {
        let path = self.path(rel);
        self.read_path(&path)?;
        Ok((path, &self.buf))
    }

    fn read_path(&mut self, path: &Path) -> Result<(), Failure> {
        self.buf.clear();
        std::fs::File::open(path)
            .and_then(|mut f| f.read_to_string(&mut self.buf))
            .map_err(|e| Failure::io(path, &e))?;
        Ok(())
    }

    /// Runs one collector into `out`.
    pub fn collect(&mut self, c: Collector, out: &mut Points) -> Result<(), Failure> {
        match c {
            Collector::Cpu => cpu::cpu(self, out),
            Collector::Load => cpu::load(self, out),
            Collector::Memory => memory::memory(self, out),
            Collector::Paging => memory::paging(self, out),
            Collector::Pressure => pressure::pressure(self, out),
            Collector::Disk => disk::disk(self, out),
            Collector::Filesystem => filesystem::filesystem(self, out),
            Collector::Network => network::network(self, out),
            Collector::Thermal => thermal::thermal(self, out),
            Collector::System => system::uptime(self, out),
            Collector::Processes => system::processes(self, out),
        }
    }

    /// Reads the boot time from `/proc/stat` (once: it does not change).
    pub fn boot_time(&mut self) -> Result<u64, Failure> {
        if self.boot_secs == 0 {
            let (path, text) = self.read("proc/stat")?;
            let btime = text
                .lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| Failure::parse(&path, "no btime line"))?;
            self.boot_secs = btime;
        }
        Ok(self.boot_secs)
    }
}

#[cfg(test)]
pub(super) mod fixture;
