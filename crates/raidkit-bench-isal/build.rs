//! Links libisal if it can be found (pkg-config `libisal`, else `libisal.so` in the usual
//! library directories) and then sets `cfg(have_isal)`. Without it the crate still
//! builds: the wrappers report `Error::Unavailable` and the bench explains how to
//! install it. `RAIDKIT_NO_ISAL=1` forces the fallback (to test it).

use std::path::Path;
use std::process::Command;

/// Where a distribution or a `make install` puts `libisal.so`.
const LIB_DIRS: [&str; 5] = [
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/local/lib64",
];

fn main() {
    println!("cargo:rustc-check-cfg=cfg(have_isal)");
    println!("cargo:rerun-if-env-changed=RAIDKIT_NO_ISAL");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    if std::env::var_os("RAIDKIT_NO_ISAL").is_some_and(|v| v != "0") {
        return;
    }
    // Probe again when the library appears or goes, so a build made before `libisal-dev`
    // was installed does not keep the fallback for good: Debian's package database
    // changes with every install, and an installed library changes when it is replaced.
    // (Only existing paths: cargo treats a missing one as changed on every build.)
    let watched = LIB_DIRS.iter().map(|dir| format!("{dir}/libisal.so"));
    for path in watched.chain(["/var/lib/dpkg/status".to_string()]) {
        if Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    if let Ok(out) = Command::new("pkg-config")
        .args(["--libs", "libisal"])
        .output()
    {
        if out.status.success() {
            for flag in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                if let Some(dir) = flag.strip_prefix("-L") {
                    println!("cargo:rustc-link-search=native={dir}");
                } else if let Some(lib) = flag.strip_prefix("-l") {
                    println!("cargo:rustc-link-lib={lib}");
                }
            }
            println!("cargo:rustc-cfg=have_isal");
            return;
        }
    }
    for dir in LIB_DIRS {
        if Path::new(dir).join("libisal.so").exists() {
            println!("cargo:rustc-link-search=native={dir}");
            println!("cargo:rustc-link-lib=isal");
            println!("cargo:rustc-cfg=have_isal");
            return;
        }
    }
    println!("cargo:warning=libisal not found: raidkit-bench-isal builds without ISA-L (run crates/raidkit-bench-isal/install-deps.sh)");
}
