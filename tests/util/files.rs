//! Files: where the built artifacts are, fresh scratch directories, scripts, directory listings.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Directory holding the C stand-ins and test programs (built by build.rs).
pub fn standins() -> PathBuf {
    PathBuf::from(env!("GPUSHIM_STANDINS"))
}

/// A stand-in program or library by file name.
pub fn standin(name: &str) -> PathBuf {
    standins().join(name)
}

/// The target directory of this profile (`target/debug`), found from this test binary's path
/// (`target/debug/deps/tests-*`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().and_then(Path::parent).expect("test binary lives in target/<profile>/deps").to_path_buf()
}

/// An artifact of `cargo build --workspace` in [`bin_dir`], which must exist.
pub fn built(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(p.exists(), "{} is missing: run `cargo build --workspace` before `cargo test`", p.display());
    p
}

/// `libgpushim.so`.
pub fn shim() -> PathBuf {
    built("libgpushim.so")
}

/// The `gpushim` binary.
pub fn collector() -> PathBuf {
    built("gpushim")
}

/// A fresh empty directory, removed when dropped unless the test panicked.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "gpushim-test-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

/// An executable script in `dir`.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, body).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// File names in `dir`, sorted, or why it cannot be listed.
pub fn try_names_in(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut v: Vec<String> =
        fs::read_dir(dir)?.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    Ok(v)
}

/// File names in `dir`, sorted.
pub fn names_in(dir: &Path) -> Vec<String> {
    try_names_in(dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
}
