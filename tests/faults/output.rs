//! Where the report goes when its place is taken: an unwritable output directory, a file-size
//! limit that no directory can take, a file or symlink at the report's name.

use std::fs;
use std::os::unix::fs::symlink;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use crate::util::*;

#[test]
fn unwritable_output_directory_falls_back_to_tmpdir_with_a_message() {
    let args = ["pause", "10"];
    let plain = plain_stdout("target_dynamic", &args);
    let scratch = TempDir::new("unwritable");
    let file = scratch.path().join("not-a-directory");
    fs::write(&file, "mine\n").unwrap();
    // Root ignores permission bits, so: a file where the directory should be, and /proc.
    for out in [file.clone(), PathBuf::from("/proc")] {
        let fallback = TempDir::new("fallback");
        let t = Target::new("target_dynamic", "unwritable")
            .args(&args)
            .env("GPUSHIM_OUTPUT", out.display())
            .env("TMPDIR", fallback.path().display());
        let d = run_bounded(&t);
        assert!(d.status.success(), "{d}");
        assert_eq!(d.stdout, plain, "{d}");
        let files = names_in(fallback.path());
        assert_eq!(files.len(), 1, "the report is in $TMPDIR: {files:?}{d}");
        let path = fallback.path().join(&files[0]);
        let r = read_json(&path, &d);
        assert_eq!(files[0], format!("gpushim-{}.json", r["pid"]), "{d}");
        assert_eq!(r["reason"], "exit", "{d}");
        assert_eq!(total(&r, "live_bytes"), 3 * MIB, "{d}");
        let msg = format!("gpushim: cannot write to {}: ", out.display());
        let line = d.stderr.lines().find(|l| l.starts_with(&msg)).unwrap_or_else(|| panic!("no line {msg:?}{d}"));
        assert!(line.ends_with(&format!("; wrote {} instead", path.display())), "{d}");
    }
    assert_eq!(fs::read_to_string(&file).unwrap(), "mine\n");
}

/// A `GPUSHIM_OUTPUT` that does not exist yet is made, as `gpushim run -o DIR` makes its
/// directory (the report went to $TMPDIR with a line).
#[test]
fn a_missing_output_directory_is_made() {
    let scratch = TempDir::new("missing-out");
    let out = scratch.path().join("reports/today");
    let fallback = TempDir::new("missing-out-tmp");
    let t = Target::new("target_dynamic", "missing-out")
        .args(&["pause", "10"])
        .env("GPUSHIM_OUTPUT", out.display())
        .env("TMPDIR", fallback.path().display());
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    let files = names_in(&out);
    assert!(files.iter().any(|f| f.starts_with("gpushim-") && f.ends_with(".json")), "{files:?}{d}");
    assert!(names_in(fallback.path()).is_empty(), "{d}");
    assert!(!d.stderr.contains("cannot write to"), "{d}");
}

#[test]
fn output_beyond_the_file_size_limit_leaves_no_file_and_says_so() {
    // A full disk, as far as the collector can tell without a small filesystem to fill:
    // `ulimit -f` (1 KiB; the report is larger), inherited by the collector. Every directory
    // fails, so the data cannot be kept; what matters is the program, a clear message, and no
    // partial file, under a final name or a temporary one.
    let args = ["pause", "10"];
    let plain = plain_stdout("target_dynamic", &args);
    let fallback = TempDir::new("fsize-fallback");
    let t = Target::new("target_dynamic", "fsize").args(&args).env("TMPDIR", fallback.path().display());
    let mut cmd = t.command();
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: 1024, rlim_max: 1024 };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let d = Live::spawn(cmd, format!("ulimit -f 1; {}", t.describe())).finish();
    assert!(d.status.success(), "{d}");
    assert_eq!(d.stdout, plain, "{d}");
    // The summary's lines (the totals: the data is not kept, its numbers are said), then one
    // line that names every directory tried.
    let err = d.stderr_lines();
    assert!(err.iter().any(|l| l.starts_with("gpushim: pid ") && l.contains(" (exit): ")), "the totals line{d}");
    let err: Vec<&str> = err.into_iter().filter(|l| l.contains("cannot write")).collect();
    assert_eq!(err.len(), 1, "{d}");
    let pid = err[0]
        .strip_prefix("gpushim: cannot write the report of pid ")
        .and_then(|r| r.split(':').next())
        .unwrap_or_else(|| panic!("unexpected message{d}"));
    assert!(err[0].contains("File too large"), "{d}");
    assert!(
        err[0].contains(&t.dir.path().display().to_string()) && err[0].contains(&fallback.path().display().to_string()),
        "{d}"
    );
    assert!(names_in(t.dir.path()).is_empty(), "{:?}{d}", names_in(t.dir.path()));
    assert!(names_in(fallback.path()).is_empty(), "{:?}{d}", names_in(fallback.path()));
    let stem = format!("gpushim-{pid}.");
    let in_tmp: Vec<String> =
        names_in(Path::new("/tmp")).into_iter().filter(|n| n.trim_start_matches('.').starts_with(&stem)).collect();
    assert!(in_tmp.is_empty(), "{in_tmp:?}{d}");
}

#[test]
fn a_file_or_symlink_at_the_report_path_is_neither_followed_nor_overwritten() {
    let t = Target::new("target_dynamic", "in-the-way").args(&["pause", "0"]);
    let outside = TempDir::new("victim");
    let victim = outside.path().join("victim");
    fs::write(&victim, "precious\n").unwrap();
    let mut live = Live::start(&t);
    assert_eq!(live.line(), "ready");
    let dir = t.dir.path();
    let pid = live.pid;
    let name = |n: &str| dir.join(format!("gpushim-{pid}{n}.json"));
    let nowhere = dir.join("created-through-a-link");
    symlink(&nowhere, name("")).unwrap();
    symlink(&victim, name(".1")).unwrap();
    fs::write(name(".2"), "mine\n").unwrap();
    let d = live.finish();
    assert!(d.status.success(), "{d}");
    assert!(!nowhere.exists(), "a dangling symlink was followed{d}");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n", "{d}");
    assert_eq!(fs::read_to_string(name(".2")).unwrap(), "mine\n", "{d}");
    for n in ["", ".1"] {
        assert!(fs::symlink_metadata(name(n)).unwrap().file_type().is_symlink(), "{d}");
    }
    let r = read_json(&name(".3"), &d);
    assert_eq!(r["reason"], "exit", "{d}");
    assert_eq!(total(&r, "live_bytes"), 3 * MIB, "{d}");
    let msg = format!("gpushim: {} already exists; wrote {}", name("").display(), name(".3").display());
    assert!(d.stderr.lines().any(|l| l == msg), "expected {msg:?}{d}");
    assert!(!names_in(dir).iter().any(|n| n.contains(".tmp-")), "{:?}{d}", names_in(dir));
}

#[test]
fn output_directory_and_collector_paths_that_are_not_utf8_are_used_byte_for_byte() {
    // GPUSHIM_OUTPUT and GPUSHIM_COLLECTOR are paths, not text: a 0xff byte in them was replaced
    // (U+FFFD), the report went to $TMPDIR ("No such file or directory"), and a collector
    // installed under such a name could not be started at all.
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let scratch = TempDir::new("non-utf8");
    let out = scratch.path().join(OsStr::from_bytes(b"out\xffdir"));
    let bin = scratch.path().join(OsStr::from_bytes(b"inst\xffx"));
    fs::create_dir(&out).unwrap();
    fs::create_dir(&bin).unwrap();
    fs::copy(collector(), bin.join("gpushim")).unwrap();
    let t = Target::new("target_dynamic", "non-utf8").args(&["pause", "10"]);
    let mut cmd = t.command();
    cmd.env("GPUSHIM_OUTPUT", &out).env("GPUSHIM_COLLECTOR", bin.join("gpushim"));
    let d = Live::spawn(cmd, t.describe()).finish();
    assert!(d.status.success(), "{d}");
    assert!(!d.stderr.contains("cannot"), "{d}");
    let files: Vec<_> = fs::read_dir(&out).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(files.len(), 1, "{files:?}{d}");
    let r = read_json(&out.join(&files[0]), &d);
    assert_eq!(total(&r, "live_bytes"), 3 * MIB, "{d}");
}

#[test]
fn a_70_kb_output_directory_name_gives_short_stderr_lines() {
    // Each line showed the whole directory: one line of 70 KB.
    let scratch = TempDir::new("long-dir");
    let fallback = TempDir::new("long-dir-fallback");
    let long = scratch.path().join(vec!["d".repeat(250); 280].join("/"));
    assert!(long.as_os_str().len() > 70_000);
    let t = Target::new("target_dynamic", "long-dir")
        .args(&["pause", "10"])
        .env("GPUSHIM_OUTPUT", long.display())
        .env("TMPDIR", fallback.path().display());
    let d = run_bounded(&t);
    assert!(d.status.success(), "{d}");
    let files = names_in(fallback.path());
    assert_eq!(files.len(), 1, "the report is in $TMPDIR: {files:?}{d}");
    let path = fallback.path().join(&files[0]);
    // A path in a line: at most 160 characters, its end kept behind an ellipsis.
    let line =
        d.stderr.lines().find(|l| l.starts_with("gpushim: cannot write to …ddd")).unwrap_or_else(|| panic!("{d}"));
    assert!(line.ends_with(&format!("; wrote {} instead", path.display())), "{d}");
    for l in d.stderr.lines() {
        assert!(l.chars().count() <= 400, "a line of {} characters{d}", l.chars().count());
    }
}
