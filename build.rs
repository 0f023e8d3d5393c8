//! Records the git commit this binary is built from, for
//! `holdfast_build_info{commit}`: `HOLDFAST_GIT_COMMIT` from the environment
//! if set (a packager building from a tarball knows it), else
//! `git rev-parse --short HEAD` when the package root is a git checkout's
//! top, else `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=HOLDFAST_GIT_COMMIT");
    // A source tree unpacked inside some other repository is not a checkout
    // of holdfast: that repository's commit would be a lie.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").ok();
    let own_checkout = git(&["rev-parse", "--show-toplevel"])
        .zip(manifest_dir)
        .is_some_and(|(top, dir)| {
            std::fs::canonicalize(top).ok() == std::fs::canonicalize(dir).ok()
        });
    let from_git = || match own_checkout {
        true => git(&["rev-parse", "--short", "HEAD"]),
        false => None,
    };
    let commit = std::env::var("HOLDFAST_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(from_git)
        .unwrap_or_else(|| "unknown".to_string());
    // A new commit moves HEAD or the branch it names (loose or packed); a
    // worktree keeps its HEAD apart from the shared refs.
    // A path that does not exist would rerun this script on every build.
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    let watched = ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref());
    for p in watched.filter_map(|path| git(&["rev-parse", "--git-path", path])) {
        if std::path::Path::new(&p).exists() {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rustc-env=HOLDFAST_GIT_COMMIT={commit}");
}
