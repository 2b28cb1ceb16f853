//! Where `libgpushim.so` is, for `gpushim run` and `gpushim preload-path`.
//!
//! Two layouts are known:
//! - a cargo build: `libgpushim.so` beside the `gpushim` executable (`target/release/`);
//! - an installed wheel (`pip install`): the executable in the environment's scripts directory,
//!   `PREFIX/bin/gpushim`, and the library in the `gpushim` Python package,
//!   `PREFIX/lib/pythonX.Y/site-packages/gpushim/libgpushim.so` (`lib64` for a platform
//!   library on some distributions, `dist-packages` on Debian's system Python). This is the
//!   layout of every install scheme that has a scripts directory (a virtual environment, `pip
//!   install --user`, a system or conda prefix).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};

use crate::error::{coded, USAGE};

/// The shim's file name, the same in both layouts.
pub const LIBRARY: &str = "libgpushim.so";

/// `libgpushim.so` for the `gpushim` executable at `exe`: beside it (a cargo build), else in the
/// `gpushim` package of a Python installed under the executable's prefix (a wheel). Where
/// several Pythons of that prefix have the package, the most recently modified library is taken
/// (the one installed with this executable, which the last install wrote). `None` when neither
/// layout has it.
pub fn find_library(exe: &Path) -> Option<PathBuf> {
    let dir = exe.parent()?;
    let beside = dir.join(LIBRARY);
    if beside.is_file() {
        return Some(beside);
    }
    let prefix = dir.parent()?;
    let mut found: Vec<(SystemTime, PathBuf)> = Vec::new();
    for lib in read_dir_matching(prefix, |n| n.starts_with("lib")) {
        for python in read_dir_matching(&lib, |n| n.starts_with("python")) {
            for packages in ["site-packages", "dist-packages"] {
                let candidate = python.join(packages).join("gpushim").join(LIBRARY);
                if let Ok(m) = std::fs::metadata(&candidate) {
                    if m.is_file() {
                        found.push((m.modified().unwrap_or(SystemTime::UNIX_EPOCH), candidate));
                    }
                }
            }
        }
    }
    // Newest first; among equal times the first path in sorted order, so the choice is stable.
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    found.into_iter().next().map(|(_, p)| p)
}

/// The directories in `dir` whose names pass `keep`, sorted; none if it cannot be read.
fn read_dir_matching(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(&keep))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

/// The absolute path of the `libgpushim.so` this `gpushim` executable uses.
///
/// # Errors
/// Exit code 2 when it is in neither layout, saying where it was looked for.
pub fn library() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the path of the gpushim executable")?;
    find_library(&exe).ok_or_else(|| {
        coded(
            USAGE,
            format!(
                "{LIBRARY} not found beside {} nor in a gpushim Python package under its prefix; build it with \
                 `cargo build --release` or reinstall the wheel",
                exe.display()
            ),
        )
    })
}

/// `gpushim preload-path`: prints the library's absolute path and a newline, for
/// `LD_PRELOAD=$(gpushim preload-path) python train.py`.
///
/// # Errors
/// As [`library`].
pub fn run() -> Result<std::process::ExitCode> {
    let lib = library()?;
    let lib = std::path::absolute(&lib).unwrap_or(lib);
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    let mut out = std::io::stdout().lock();
    out.write_all(lib.as_os_str().as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gpushim-preload-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_library_beside_the_executable_comes_first() {
        let d = scratch("beside");
        fs::create_dir_all(d.join("bin")).unwrap();
        fs::write(d.join("bin").join(LIBRARY), b"").unwrap();
        let pkg = d.join("lib/python3.11/site-packages/gpushim");
        fs::create_dir_all(&pkg).unwrap();
        fs::write(pkg.join(LIBRARY), b"").unwrap();
        assert_eq!(find_library(&d.join("bin/gpushim")), Some(d.join("bin").join(LIBRARY)));
        fs::remove_dir_all(&d).unwrap();
    }

    /// A wheel's layout: `PREFIX/bin/gpushim` and the package under `lib` or `lib64`,
    /// `site-packages` or `dist-packages`.
    #[test]
    fn an_installed_wheel_has_it_in_the_python_package() {
        for (lib, packages) in [("lib", "site-packages"), ("lib64", "site-packages"), ("lib", "dist-packages")] {
            let d = scratch(&format!("{lib}-{packages}"));
            fs::create_dir_all(d.join("bin")).unwrap();
            let pkg = d.join(lib).join("python3.12").join(packages).join("gpushim");
            fs::create_dir_all(&pkg).unwrap();
            assert_eq!(find_library(&d.join("bin/gpushim")), None, "no library yet");
            fs::write(pkg.join(LIBRARY), b"").unwrap();
            assert_eq!(find_library(&d.join("bin/gpushim")), Some(pkg.join(LIBRARY)));
            fs::remove_dir_all(&d).unwrap();
        }
    }

    #[test]
    fn of_two_pythons_the_newer_library_is_taken() {
        let d = scratch("two");
        let old = d.join("lib/python3.10/site-packages/gpushim");
        let new = d.join("lib/python3.12/site-packages/gpushim");
        for p in [&old, &new] {
            fs::create_dir_all(p).unwrap();
            fs::write(p.join(LIBRARY), b"").unwrap();
        }
        let past = SystemTime::now() - std::time::Duration::from_secs(3600);
        fs::File::options().write(true).open(old.join(LIBRARY)).unwrap().set_modified(past).unwrap();
        assert_eq!(find_library(&d.join("bin/gpushim")), Some(new.join(LIBRARY)));
        fs::File::options()
            .write(true)
            .open(new.join(LIBRARY))
            .unwrap()
            .set_modified(past - past.elapsed().unwrap())
            .unwrap();
        assert_eq!(find_library(&d.join("bin/gpushim")), Some(old.join(LIBRARY)));
        fs::remove_dir_all(&d).unwrap();
    }
}
