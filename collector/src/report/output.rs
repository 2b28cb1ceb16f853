//! Writing report files without overwriting anything and without following symlinks.
//!
//! A report is written to a fresh temporary file in the target directory (created with
//! `O_CREAT | O_EXCL | O_NOFOLLOW`), synced, then hard-linked to its final name. `link(2)`
//! fails if anything, a file or a symlink, already has that name; then the next free name is
//! tried (`stem.1.json`, `stem.2.json`, …). If the directory cannot be written at all, the
//! report goes to `$TMPDIR` or `/tmp` instead, and the caller says so.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Highest `.N` suffix tried before giving up on a directory.
const MAX_SUFFIX: u32 = 9999;

/// Characters of a path a line on stderr shows at most (the shim's lines too,
/// `sys::LINE_PATH_MAX`): a longer one is shown as `…` and its end, where the file's name is. A
/// 70 KB directory name made a 70 KB line.
pub const LINE_PATH_MAX: usize = 160;

/// `p` as a line on stderr shows it: whole up to [`LINE_PATH_MAX`] characters, else `…` and its
/// last characters. (The report's JSON and `gpushim snapshot`'s output keep paths whole.)
pub fn in_a_line(p: &Path) -> String {
    let s = p.display().to_string();
    let n = s.chars().count();
    if n <= LINE_PATH_MAX {
        return s;
    }
    let tail: String = s.chars().skip(n - (LINE_PATH_MAX - 1)).collect();
    format!("…{tail}")
}

/// Where a report ended up.
#[derive(Debug)]
pub struct Written {
    /// The file written.
    pub path: PathBuf,
    /// The name that was wanted, if it existed already and another was used.
    pub taken: Option<PathBuf>,
    /// The directories that could not be written, with why, if the file went elsewhere.
    pub fell_back: Vec<(PathBuf, io::Error)>,
}

impl Written {
    /// The lines (without `gpushim: `) that tell the user the report is not where expected;
    /// empty if it is.
    pub fn messages(&self) -> Vec<String> {
        let mut v = Vec::new();
        for (dir, e) in &self.fell_back {
            v.push(format!("cannot write to {}: {e}; wrote {} instead", in_a_line(dir), in_a_line(&self.path)));
        }
        if let Some(t) = &self.taken {
            v.push(format!("{} already exists; wrote {}", in_a_line(t), in_a_line(&self.path)));
        }
        v
    }
}

/// Writes `bytes` to `dir/stem.ext`, or the first free `dir/stem.N.ext`; if `dir` cannot be
/// written, to the same name in `$TMPDIR`, then `/tmp`.
///
/// # Errors
/// If no directory could take the file; the error names every directory tried and why.
#[cfg_attr(not(test), allow(dead_code))]
pub fn write_new(dir: &Path, stem: &str, ext: &str, bytes: &[u8]) -> io::Result<Written> {
    write_new_with(dir, stem, ext, &mut |w| w.write_all(bytes))
}

/// Like [`write_new`], with the contents written by `write` (into a buffered writer on the
/// temporary file, so a large report is never held in memory whole). `write` runs again for
/// each directory tried.
///
/// # Errors
/// If no directory could take the file; the error names every directory tried and why.
pub fn write_new_with(
    dir: &Path,
    stem: &str,
    ext: &str,
    write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
) -> io::Result<Written> {
    let mut dirs = vec![dir.to_path_buf()];
    if let Some(t) = crate::settings::Settings::global().tmpdir.as_ref().filter(|t| !t.is_empty()) {
        dirs.push(PathBuf::from(t));
    }
    dirs.push(PathBuf::from("/tmp"));
    dirs.dedup();
    let mut fell_back = Vec::new();
    for d in dirs {
        match write_in(&d, stem, ext, write) {
            Ok((path, taken)) => return Ok(Written { path, taken, fell_back }),
            Err(e) => fell_back.push((d, e)),
        }
    }
    let why: Vec<String> = fell_back.iter().map(|(d, e)| format!("{}: {e}", in_a_line(d))).collect();
    Err(io::Error::other(format!("no directory would take {stem}.{ext} ({})", why.join("; "))))
}

/// Writes into one directory; returns the path and, if the plain name was taken, that name.
fn write_in(
    dir: &Path,
    stem: &str,
    ext: &str,
    write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
) -> io::Result<(PathBuf, Option<PathBuf>)> {
    let (tmp, file) = create_temp(dir, stem, ext)?;
    let result = (|| {
        let mut out = io::BufWriter::with_capacity(1 << 16, file);
        write(&mut out)?;
        let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
        file.sync_all()?;
        drop(file);
        let want = dir.join(format!("{stem}.{ext}"));
        for n in 0..=MAX_SUFFIX {
            let path = if n == 0 { want.clone() } else { dir.join(format!("{stem}.{n}.{ext}")) };
            match fs::hard_link(&tmp, &path) {
                Ok(()) => {
                    // Make the new name durable; a failure here loses nothing already written.
                    if let Ok(d) = File::open(dir) {
                        let _ = d.sync_all();
                    }
                    return Ok((path, (n > 0).then_some(want)));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{stem}.{ext} and {stem}.1.{ext} … {stem}.{MAX_SUFFIX}.{ext} all exist"),
        ))
    })();
    let _ = fs::remove_file(&tmp);
    result
}

/// Creates `dir/.stem.ext.tmp-XXXX` exclusively, never through a symlink.
fn create_temp(dir: &Path, stem: &str, ext: &str) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    for _ in 0..100 {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tag = mix(nanos ^ (u64::from(std::process::id()) << 32) ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut name = OsString::from(format!(".{stem}.{ext}.tmp-"));
        name.push(format!("{tag:016x}"));
        let path = dir.join(name);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(f) => return Ok((path, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(io::ErrorKind::AlreadyExists, "could not find a free temporary name"))
}

/// A 64-bit finalizer (splitmix64), to spread the bits of the temporary name.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    #[test]
    fn a_path_in_a_line_keeps_its_end_behind_an_ellipsis_when_long() {
        assert_eq!(in_a_line(Path::new("/tmp/r/gpushim-7.json")), "/tmp/r/gpushim-7.json");
        let dir = "é".repeat(70_000);
        let long = in_a_line(&Path::new("/").join(&dir).join("gpushim-7.json"));
        assert_eq!(long.chars().count(), LINE_PATH_MAX);
        assert!(long.starts_with('…') && long.ends_with("éé/gpushim-7.json"), "{long}");
        let exact = "a".repeat(LINE_PATH_MAX);
        assert_eq!(in_a_line(Path::new(&exact)), exact);
    }

    /// A unique, empty directory, removed when dropped.
    pub(crate) struct TempDir(pub PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> TempDir {
            static N: AtomicU64 = AtomicU64::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
            let p = std::env::temp_dir().join(format!("gpushim-test-{tag}-{}-{n}-{nanos}", std::process::id()));
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn writes_then_picks_the_next_free_name() {
        let d = TempDir::new("out");
        let w = write_new(&d.0, "gpushim-7", "json", b"one").unwrap();
        assert_eq!(w.path, d.0.join("gpushim-7.json"));
        assert!(w.taken.is_none() && w.fell_back.is_empty() && w.messages().is_empty());
        let w = write_new(&d.0, "gpushim-7", "json", b"two").unwrap();
        assert_eq!(w.path, d.0.join("gpushim-7.1.json"));
        assert_eq!(w.taken.as_deref(), Some(d.0.join("gpushim-7.json").as_path()));
        assert_eq!(
            w.messages(),
            vec![format!("{}/gpushim-7.json already exists; wrote {}/gpushim-7.1.json", d.0.display(), d.0.display())]
        );
        assert_eq!(fs::read(d.0.join("gpushim-7.json")).unwrap(), b"one");
        assert_eq!(fs::read(d.0.join("gpushim-7.1.json")).unwrap(), b"two");
        assert_eq!(names(&d.0), vec!["gpushim-7.1.json", "gpushim-7.json"], "no temporary file is left");
    }

    #[test]
    fn does_not_follow_a_symlink() {
        let d = TempDir::new("link");
        let victim = d.0.join("victim");
        fs::write(&victim, b"precious").unwrap();
        symlink(&victim, d.0.join("gpushim-8.json")).unwrap();
        // A dangling link is not followed either.
        symlink(d.0.join("nowhere"), d.0.join("gpushim-8.1.json")).unwrap();
        let w = write_new(&d.0, "gpushim-8", "json", b"report").unwrap();
        assert_eq!(w.path, d.0.join("gpushim-8.2.json"));
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert!(!d.0.join("nowhere").exists());
        assert!(fs::symlink_metadata(d.0.join("gpushim-8.json")).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(&w.path).unwrap(), b"report");
    }

    #[test]
    fn falls_back_when_the_directory_is_unwritable() {
        let d = TempDir::new("ro");
        let missing = d.0.join("does-not-exist");
        let stem = format!("gpushim-test-fallback-{}", std::process::id());
        let w = write_new(&missing, &stem, "json", b"x").unwrap();
        assert_ne!(w.path.parent(), Some(missing.as_path()));
        assert_eq!(w.fell_back.len(), 1);
        assert!(w.messages()[0].starts_with(&format!("cannot write to {}: ", missing.display())));
        assert_eq!(fs::read(&w.path).unwrap(), b"x");
        fs::remove_file(&w.path).unwrap();
        // Read-only directory (skipped where permissions do not bind, e.g. as root).
        let ro = d.0.join("ro");
        fs::create_dir(&ro).unwrap();
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
        if File::create(ro.join("probe")).is_err() {
            let w = write_new(&ro, &stem, "json", b"y").unwrap();
            assert_ne!(w.path.parent(), Some(ro.as_path()));
            fs::remove_file(&w.path).unwrap();
        }
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o755)).unwrap();
    }
}
