//! Two things the compiler cannot know by itself:
//!
//! * the git commit this binary is built from, for
//!   `holdfast_build_info{commit}`: `HOLDFAST_GIT_COMMIT` from the
//!   environment if set (a packager building from a tarball knows it), else
//!   `git rev-parse --short HEAD` when the package root is a git checkout's
//!   top, else `unknown`;
//! * in release builds (the `release` and `bench` profiles, and so the
//!   .deb), the order of the functions in the binary: those the agent runs
//!   once it is up, listed in `packaging/hot-text.order` (made by
//!   `packaging/hot-text.sh` from profiles of the e2e benchmark), are laid
//!   out together. The kernel maps a program's text in 64 KiB windows
//!   around each page it runs, so with those functions spread over the 7 MiB
//!   of text, most of it stayed resident; packed, they take about 1 MiB.
//!   The order needs lld, which rustup's toolchains carry (`gcc-ld/ld.lld`);
//!   without it the build goes on with the default layout and says so.
//!   Behaviour is the same either way.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    hot_text_layout();
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

/// Links the `holdfast` binary of a release build with the functions of
/// `packaging/hot-text.order` first (see the module docs).
fn hot_text_layout() {
    let order = Path::new("packaging/hot-text.order");
    println!("cargo:rerun-if-changed={}", order.display());
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    if !(release && linux && order.exists()) {
        return;
    }
    // rustup's toolchains carry lld (as `gcc-ld/ld.lld` for the C
    // compiler driver); it takes the order as symbol names.
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let host = std::env::var("HOST").unwrap_or_default();
    let sysroot = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let gcc_ld = sysroot.map(|s| {
        Path::new(&s)
            .join("lib/rustlib")
            .join(&host)
            .join("bin/gcc-ld")
    });
    let Some(gcc_ld) = gcc_ld.filter(|d| d.join("ld.lld").exists()) else {
        println!(
            "cargo:warning=lld not found in the Rust toolchain (rustup ships it): linking without \
             {}, so more of the program's text stays resident",
            order.display()
        );
        return;
    };
    let order = std::fs::canonicalize(order).unwrap_or_else(|_| order.to_path_buf());
    for arg in [
        format!("-B{}", gcc_ld.display()),
        "-fuse-ld=lld".to_string(),
        format!("-Wl,--symbol-ordering-file={}", order.display()),
        // Symbols of an older build that this one no longer has are fine.
        "-Wl,--no-warn-symbol-ordering".to_string(),
    ] {
        println!("cargo:rustc-link-arg-bin=holdfast={arg}");
    }
}
