//! Every `GPUSHIM_*` setting, each read once: the snapshot signal when the library loads (its
//! handler is installed then), everything else into one [`Config`] when tracing starts in a
//! process (so a program may still set them before its first CUDA allocation). What the hot
//! path and the exit paths need is published in atomics, which a signal handler may read.
//!
//! A bad value is said in one line on stderr, and only by a process that traces: a process
//! that never allocates CUDA memory prints nothing. The same lines go into the report's
//! `notes` (sent as `Note` events after `Hello`).

use crate::race_once::RaceOnce;
use std::ffi::{c_int, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::time::Duration;

use crate::{loader, sys};

/// `GPUSHIM_BACKTRACE` is not `0`.
static BACKTRACES: AtomicBool = AtomicBool::new(true);
/// `GPUSHIM_UNWIND` is not `libgcc`: the cached unwinder is used.
static FAST_UNWIND: AtomicBool = AtomicBool::new(true);
/// `GPUSHIM_UNWIND_CACHE` is not `0`: the hot path's per-thread caches are used (the unwinder's
/// memo of rules, the thread's previous stack, the Python frames' code ids). Off, every event is
/// captured without them; the reports are the same either way.
static UNWIND_CACHE: AtomicBool = AtomicBool::new(true);
/// `GPUSHIM_MAX_FRAMES`, 1 to 256 (default 64).
static MAX_FRAMES: AtomicUsize = AtomicUsize::new(64);
/// `GPUSHIM_PYTHON` is not `0`.
static PYTHON: AtomicBool = AtomicBool::new(true);
/// `GPUSHIM_EXIT_TIMEOUT`, seconds (default 60; at least 1).
static EXIT_TIMEOUT_S: AtomicU64 = AtomicU64::new(60);
/// The descriptor `gpushim run` passed (`GPUSHIM_RUN_FD`), or -1: kept open in the collector,
/// close-on-exec in the program.
static RUN_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);
/// The copy of `gpushim run`'s own stderr it passed (`GPUSHIM_RUN_STDERR`), or -1, and its
/// identity (device, inode): the collector's stderr, so that its lines reach the terminal of
/// `run` even when the program has redirected its fd 2 (pytest's capture).
static RUN_STDERR: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);
static RUN_STDERR_ID: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
/// `GPUSHIM_HEAP_WALK` is not `0`: a CPython program's heap is walked for the objects that own
/// GPU memory at each snapshot, out-of-memory report and normal exit.
static HEAP_WALK: AtomicBool = AtomicBool::new(true);
/// `GPUSHIM_HEAP_WALK_NATIVE` is not `0`: the walk's breadth-first core runs in native code
/// (shim/src/python/bfs.rs) where the interpreter allows it; `0` keeps the walker's Python loop.
static HEAP_WALK_NATIVE: AtomicBool = AtomicBool::new(true);
/// `GPUSHIM_TORCH_STACKS` is not `0`: in a CPython program using PyTorch's CUDA caching
/// allocator, the shim turns on PyTorch's record of each live block's Python stack
/// (python/heap), unless the program keeps a record of its own, so that suspects are named by
/// the lines of the tensors inside the allocator's segments.
static TORCH_STACKS: AtomicBool = AtomicBool::new(true);
/// `GPUSHIM_HEAP_WALK_MS`: the cap on one heap walk, milliseconds (default 2000), also the
/// longest the shim waits for a walk to start.
static HEAP_WALK_MS: AtomicU64 = AtomicU64::new(2000);
/// `GPUSHIM_REACHABILITY` is not `0`: the shim scans the program's memory for references to
/// live allocations at each snapshot, out-of-memory report and normal exit (`reach`).
static REACHABILITY: AtomicBool = AtomicBool::new(true);
/// `GPUSHIM_REACHABILITY_MS`: the cap on one reachability scan (both passes), milliseconds
/// (default 3000); 0 cuts every scan at once.
static REACHABILITY_MS: AtomicU64 = AtomicU64::new(3000);
/// `GPUSHIM_REACHABILITY_THREADS`: the most threads one scan reads with (0: one per CPU the
/// process may run on, at most 8; reach/roots.rs).
static REACHABILITY_THREADS: AtomicU64 = AtomicU64::new(0);
/// `GPUSHIM_REACHABILITY_CUDA_DATA=1`: the CUDA libraries' data and the heap blocks it reaches
/// are read as the program's roots, like any module's (`reach`; for measuring what leaving them
/// out does, docs/gpu-matrix.md). Off by default.
static REACHABILITY_CUDA_DATA: AtomicBool = AtomicBool::new(false);
/// Where reports go ([`Config::output_dir`]), kept for the line the exit path says when its
/// wait times out.
static OUTPUT_DIR: RaceOnce<PathBuf> = RaceOnce::new();
/// The rank in the report's name (`gpushim_wire::naming::rank` of [`Config::identity`]), once
/// tracing started: the collector names the report by the variables read then.
static RANK: RaceOnce<Option<u32>> = RaceOnce::new();
/// The value of a `GPUSHIM_SIGNAL` that is not USR1, USR2 or none (USR1 is used).
static BAD_SIGNAL: RaceOnce<String> = RaceOnce::new();

/// Whether to capture backtraces.
pub fn backtraces() -> bool {
    BACKTRACES.load(Relaxed)
}

/// Whether to use the cached unwinder (else libgcc's).
pub fn fast_unwind() -> bool {
    FAST_UNWIND.load(Relaxed)
}

/// Whether the hot path's per-thread caches are on (`GPUSHIM_UNWIND_CACHE`, default on).
pub fn unwind_cache() -> bool {
    UNWIND_CACHE.load(Relaxed)
}

/// Most frames kept per backtrace, 1 to 256.
pub fn max_frames() -> usize {
    MAX_FRAMES.load(Relaxed)
}

/// Whether to capture Python frames (they need backtraces too).
pub fn python_frames() -> bool {
    BACKTRACES.load(Relaxed) && PYTHON.load(Relaxed)
}

/// The longest the exit path waits for the collector. Safe in a signal handler.
pub fn exit_timeout() -> Duration {
    Duration::from_secs(EXIT_TIMEOUT_S.load(Relaxed))
}

/// The report directory of the process that traces, once tracing started.
pub fn output_dir() -> Option<&'static Path> {
    OUTPUT_DIR.get().map(PathBuf::as_path)
}

/// The launcher's variables ([`IDENTITY_VARS`]) that are set now, `(name, value)`.
fn identity_vars() -> Vec<(String, String)> {
    IDENTITY_VARS.iter().filter_map(|&k| Some((k.to_string(), env(k)?))).collect()
}

/// The rank the final report's name carries (`gpushim_wire::naming`, the collector's rule):
/// of the variables read when tracing started, else of those set now.
pub fn report_rank() -> Option<u32> {
    match RANK.get() {
        Some(r) => *r,
        None => gpushim_wire::naming::rank(&identity_vars()),
    }
}

/// Where reports would go if tracing started now: `GPUSHIM_OUTPUT`, made absolute against the
/// working directory, else the working directory.
pub fn output_dir_from_env() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    match env_path("GPUSHIM_OUTPUT") {
        Some(d) if d.is_absolute() => d,
        Some(d) => cwd.join(d),
        None => cwd,
    }
}

/// Whether heap walks are on (`GPUSHIM_HEAP_WALK` is not `0`).
pub fn heap_walk() -> bool {
    HEAP_WALK.load(Relaxed)
}

/// Whether the heap walk's core may run in native code (`GPUSHIM_HEAP_WALK_NATIVE` is not `0`).
pub fn heap_walk_native() -> bool {
    HEAP_WALK_NATIVE.load(Relaxed)
}

/// Whether the shim turns on PyTorch's record of live blocks' Python stacks
/// (`GPUSHIM_TORCH_STACKS` not `0`, heap walks on).
pub fn torch_stacks() -> bool {
    TORCH_STACKS.load(Relaxed) && heap_walk()
}

/// The cap on one heap walk, milliseconds (`GPUSHIM_HEAP_WALK_MS`, default 2000).
pub fn heap_walk_ms() -> u64 {
    HEAP_WALK_MS.load(Relaxed)
}

/// Whether reachability scans are on (`GPUSHIM_REACHABILITY` is not `0`).
pub fn reachability() -> bool {
    REACHABILITY.load(Relaxed)
}

/// Whether the CUDA libraries' data counts as the program's roots in a reachability scan
/// (`GPUSHIM_REACHABILITY_CUDA_DATA=1`; off by default).
pub fn reachability_cuda_data() -> bool {
    REACHABILITY_CUDA_DATA.load(Relaxed)
}

/// The cap on one reachability scan, milliseconds (`GPUSHIM_REACHABILITY_MS`, default 3000).
pub fn reachability_ms() -> u64 {
    REACHABILITY_MS.load(Relaxed)
}

/// The most threads a reachability scan reads with; 0 for the default
/// (`GPUSHIM_REACHABILITY_THREADS`).
pub fn reachability_threads() -> u64 {
    REACHABILITY_THREADS.load(Relaxed)
}

fn env(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()).filter(|v| !v.is_empty())
}

/// A path setting, byte for byte (a directory name need not be UTF-8).
fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The descriptor that variable `name` (`fd:dev:inode`, set by `gpushim run`) names, with its
/// identity, if it is open, above 2 and still that file (device and inode, `fstat`); `None`
/// for a malformed value or a number that names anything else (a child that inherited the
/// variable, not the descriptor).
fn inherited_fd(name: &str) -> Option<(i32, (u64, u64))> {
    let v = env(name)?;
    let mut parts = v.split(':').map(|p| p.parse::<u64>().ok());
    let (Some(Some(fd)), Some(Some(dev)), Some(Some(ino))) = (parts.next(), parts.next(), parts.next()) else {
        return None;
    };
    let fd = i32::try_from(fd).ok()?;
    (fd >= 3 && sys::fd_identity(fd) == Some((dev, ino))).then_some((fd, (dev, ino)))
}

/// `GPUSHIM_RUN_FD` (`fd:dev:inode`, set by `gpushim run`), read once by the library's
/// constructor: if that descriptor is open and is that pipe, it is marked close-on-exec (the
/// programs this one runs must not hold it, or `gpushim run` would wait for them) and remembered
/// for the collector. A number that names anything else (a child that inherited the variable,
/// not the descriptor) is left alone.
pub fn take_run_fd() {
    let Some((fd, _)) = inherited_fd("GPUSHIM_RUN_FD") else { return };
    // SAFETY: setting a flag on the descriptor `gpushim run` made for us (identity checked).
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    RUN_FD.store(fd, Relaxed);
}

/// `GPUSHIM_RUN_STDERR` (`fd:dev:inode`, set by `gpushim run`), read once by the library's
/// constructor: if that descriptor is open and is that file, it is remembered for the
/// collector's stderr ([`run_stderr`]). It is left open across `exec` (it is a copy of a
/// stderr that the program's children hold anyway), so the collectors of the whole process
/// tree find it; a number that names anything else is left alone.
pub fn take_run_stderr() {
    let Some((fd, (dev, ino))) = inherited_fd("GPUSHIM_RUN_STDERR") else { return };
    RUN_STDERR_ID[0].store(dev, Relaxed);
    RUN_STDERR_ID[1].store(ino, Relaxed);
    RUN_STDERR.store(fd, Relaxed);
}

/// The descriptor of [`take_run_stderr`] if it still names the same file (the program may
/// have closed it or put another file at its number since), else -1.
pub fn run_stderr() -> i32 {
    let fd = RUN_STDERR.load(Relaxed);
    let id = (RUN_STDERR_ID[0].load(Relaxed), RUN_STDERR_ID[1].load(Relaxed));
    if fd >= 3 && sys::fd_identity(fd) == Some(id) {
        fd
    } else {
        -1
    }
}

/// The descriptor of [`take_run_fd`], or -1.
pub fn run_fd() -> i32 {
    RUN_FD.load(Relaxed)
}

/// `GPUSHIM_SIGNAL`, read once by the library's constructor: `USR1` (default), `USR2`, or
/// `none`. Any other value is remembered, said when tracing starts, and USR1 is used.
pub fn snapshot_signal() -> Option<c_int> {
    let value = env("GPUSHIM_SIGNAL");
    match value.as_deref().map(str::to_ascii_uppercase).as_deref() {
        None | Some("USR1") | Some("SIGUSR1") => Some(libc::SIGUSR1),
        Some("USR2") | Some("SIGUSR2") => Some(libc::SIGUSR2),
        Some("NONE") => None,
        Some(_) => {
            BAD_SIGNAL.set(value.unwrap_or_default());
            Some(libc::SIGUSR1)
        }
    }
}

/// The settings read when tracing starts.
pub struct Config {
    /// The `gpushim` binary (`GPUSHIM_COLLECTOR`, else `gpushim` beside this library or, for an
    /// installed wheel, in its scripts directory: `collector_for`). Paths
    /// are kept as the bytes the system gave, whatever their encoding.
    pub collector: PathBuf,
    /// Where reports go (`GPUSHIM_OUTPUT`, made absolute against `cwd`; default `cwd`).
    pub output_dir: PathBuf,
    /// The working directory when tracing started.
    pub cwd: PathBuf,
    /// One line per bad value that was replaced (without the `gpushim: ` prefix), said on
    /// stderr once tracing has started and sent as the report's notes.
    pub warnings: Vec<String>,
    /// The launcher's variables that are set ([`IDENTITY_VARS`]), `(name, value)`, sent as the
    /// stream's `Identity` event.
    pub identity: Vec<(String, String)>,
}

/// The environment variables that say who a process is in a multi-process job, in the order
/// sent: PyTorch's `torchrun` (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`,
/// `GROUP_RANK`, `TORCHELASTIC_RUN_ID`), Slurm's `srun` (`SLURM_JOB_ID`, `SLURM_STEP_ID`,
/// `SLURM_PROCID`, `SLURM_LOCALID`, `SLURM_NTASKS`), Open MPI's `mpirun`
/// (`OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_SIZE`), MPICH/Hydra
/// (`PMI_RANK`, `PMI_SIZE`), and `CUDA_VISIBLE_DEVICES`, which maps the process's device
/// ordinals to the machine's GPUs (CUDA Programming Guide, "CUDA Environment Variables").
pub const IDENTITY_VARS: &[&str] = &[
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NTASKS",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "CUDA_VISIBLE_DEVICES",
];

/// A switch: `0`, `false`, `no`, `off` are off; `1`, `true`, `yes`, `on` are on (any case);
/// anything else is `None`.
fn switch(v: &str) -> Option<bool> {
    gpushim_wire::setting::switch(v)
}

/// Reads the switch `name` into `flag` (left as it is when unset); a bad value is said in
/// `warnings`, naming what stays in force (`what` when on).
fn read_switch(name: &str, flag: &AtomicBool, what: &str, warnings: &mut Vec<String>) {
    let Some(v) = env(name) else { return };
    match switch(&v) {
        Some(on) => flag.store(on, Relaxed),
        None => {
            let state = if flag.load(Relaxed) { "on" } else { "off" };
            warnings.push(format!("{name}={v} {}; {what} stay {state}", gpushim_wire::setting::NOT_A_SWITCH));
        }
    }
}

/// `GPUSHIM_MAX_FRAMES`'s value `v`: the frames to keep, and the warning if it was changed.
/// Above 256 it is clamped to 256 (the wire format's and unwinder's limit); not a number, or 0,
/// keeps `current`.
fn max_frames_value(v: &str, current: usize) -> (usize, Option<String>) {
    match v.parse::<u64>() {
        Ok(n @ 1..=256) => (n as usize, None),
        Ok(n) if n > 256 => (256, Some(format!("GPUSHIM_MAX_FRAMES={v} is above 256; using 256"))),
        _ => (current, Some(format!("GPUSHIM_MAX_FRAMES={v} is not a number from 1 to 256; using {current}"))),
    }
}

impl Config {
    /// Reads every setting from the environment and publishes those the hot path and the exit
    /// paths read. A bad `GPUSHIM_MAX_FRAMES` is said here.
    pub fn from_env() -> Config {
        let mut warnings = Vec::new();
        if let Some(v) = BAD_SIGNAL.get() {
            warnings.push(format!("GPUSHIM_SIGNAL={v} is not USR1, USR2 or none; snapshots use USR1"));
        }
        read_switch("GPUSHIM_BACKTRACE", &BACKTRACES, "backtraces", &mut warnings);
        match env("GPUSHIM_UNWIND").as_deref() {
            None | Some("cached") => {}
            Some("libgcc") => FAST_UNWIND.store(false, Relaxed),
            Some(v) => warnings.push(format!("GPUSHIM_UNWIND={v} is not libgcc or cached; using the cached unwinder")),
        }
        read_switch("GPUSHIM_UNWIND_CACHE", &UNWIND_CACHE, "the per-thread caches", &mut warnings);
        if let Some(v) = env("GPUSHIM_MAX_FRAMES") {
            let (n, warning) = max_frames_value(&v, MAX_FRAMES.load(Relaxed));
            MAX_FRAMES.store(n, Relaxed);
            warnings.extend(warning);
        }
        read_switch("GPUSHIM_PYTHON", &PYTHON, "Python frames", &mut warnings);
        read_switch("GPUSHIM_HEAP_WALK", &HEAP_WALK, "heap walks", &mut warnings);
        read_switch("GPUSHIM_HEAP_WALK_NATIVE", &HEAP_WALK_NATIVE, "the heap walk's native core", &mut warnings);
        read_switch("GPUSHIM_TORCH_STACKS", &TORCH_STACKS, "PyTorch's block stacks", &mut warnings);
        if let Some(v) = env("GPUSHIM_HEAP_WALK_MS") {
            match v.parse::<u64>() {
                Ok(ms) if ms > 0 => HEAP_WALK_MS.store(ms, Relaxed),
                _ => warnings.push(format!(
                    "GPUSHIM_HEAP_WALK_MS={v} is not a number of milliseconds above 0; using {}",
                    HEAP_WALK_MS.load(Relaxed)
                )),
            }
        }
        read_switch("GPUSHIM_REACHABILITY", &REACHABILITY, "reachability scans", &mut warnings);
        read_switch(
            "GPUSHIM_REACHABILITY_CUDA_DATA",
            &REACHABILITY_CUDA_DATA,
            "the CUDA libraries' data as roots",
            &mut warnings,
        );
        if let Some(v) = env("GPUSHIM_REACHABILITY_MS") {
            match v.parse::<u64>() {
                Ok(ms) => REACHABILITY_MS.store(ms, Relaxed),
                Err(_) => warnings.push(format!(
                    "GPUSHIM_REACHABILITY_MS={v} is not a number of milliseconds; using {}",
                    REACHABILITY_MS.load(Relaxed)
                )),
            }
        }
        if let Some(v) = env("GPUSHIM_REACHABILITY_THREADS") {
            match v.parse::<u64>() {
                Ok(n) => REACHABILITY_THREADS.store(n, Relaxed),
                Err(_) => warnings.push(format!(
                    "GPUSHIM_REACHABILITY_THREADS={v} is not a number of threads; using one per CPU (at most 16)"
                )),
            }
        }
        if let Some(v) = env("GPUSHIM_EXIT_TIMEOUT") {
            // 0 would let the program exit before the events still in flight reach the
            // collector: its report would be a killed process's, with what had arrived.
            match v.parse::<u64>() {
                Ok(s) if s > 0 => EXIT_TIMEOUT_S.store(s, Relaxed),
                _ => warnings.push(format!(
                    "GPUSHIM_EXIT_TIMEOUT={v} is not a whole number of seconds above 0; using {}",
                    EXIT_TIMEOUT_S.load(Relaxed)
                )),
            }
        }
        // A misspelt setting would otherwise be ignored without a word.
        for (name, _) in std::env::vars_os() {
            // A name that is not UTF-8 is said with its bad bytes replaced.
            if let Some(line) = gpushim_wire::setting::unknown(&name.to_string_lossy()) {
                warnings.push(line);
            }
        }
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let output_dir = output_dir_from_env();
        let collector = env_path("GPUSHIM_COLLECTOR").unwrap_or_else(default_collector);
        OUTPUT_DIR.set(output_dir.clone());
        let identity = identity_vars();
        RANK.set(gpushim_wire::naming::rank(&identity));
        Config { collector, output_dir, cwd, warnings, identity }
    }

    /// Says, once tracing has started, the bad values that were replaced, one line each.
    pub fn warn_after_start(&self) {
        for w in &self.warnings {
            eprintln!("gpushim: {w}");
        }
    }
}

/// `gpushim` for the directory this library was loaded from ([`collector_for`]).
fn default_collector() -> PathBuf {
    let mut info = loader::empty_dl_info();
    // SAFETY: dladdr only writes `info`.
    let ok = unsafe { libc::dladdr(default_collector as *const libc::c_void, &mut info) } != 0;
    if ok && !info.dli_fname.is_null() {
        // SAFETY: the loader's NUL-terminated path.
        let me = Path::new(OsStr::from_bytes(unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes()));
        if let Some(dir) = me.parent().filter(|d| !d.as_os_str().is_empty()) {
            return collector_for(dir);
        }
    }
    PathBuf::from("gpushim")
}

/// The `gpushim` executable for a library in `dir`: beside it (a cargo build, `target/release/`),
/// else, when `dir` is the `gpushim` package of an installed wheel
/// (`PREFIX/lib/pythonX.Y/site-packages/gpushim/`, also `lib64` and `dist-packages`), the
/// wheel's script `PREFIX/bin/gpushim`; where neither exists, the one beside it (which the error
/// that follows then names).
fn collector_for(dir: &Path) -> PathBuf {
    let beside = dir.join("gpushim");
    if beside.is_file() {
        return beside;
    }
    let name = |p: Option<&Path>| p.and_then(Path::file_name).and_then(OsStr::to_str).unwrap_or("").to_owned();
    let packages = dir.parent();
    let python = packages.and_then(Path::parent);
    let lib = python.and_then(Path::parent);
    let wheel = name(Some(dir)) == "gpushim"
        && matches!(name(packages).as_str(), "site-packages" | "dist-packages")
        && name(python).starts_with("python")
        && name(lib).starts_with("lib");
    if let Some(prefix) = lib.and_then(Path::parent).filter(|_| wheel) {
        let script = prefix.join("bin").join("gpushim");
        if script.is_file() {
            return script;
        }
    }
    beside
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_and_max_frames_read_their_values_and_say_what_they_replaced() {
        assert_eq!(switch("0"), Some(false));
        assert_eq!(switch("OFF"), Some(false));
        assert_eq!(switch("yes"), Some(true));
        assert_eq!(switch("maybe"), None);
        assert_eq!(max_frames_value("32", 64), (32, None));
        assert_eq!(max_frames_value("1000", 64), (256, Some("GPUSHIM_MAX_FRAMES=1000 is above 256; using 256".into())));
        assert_eq!(
            max_frames_value("x", 64),
            (64, Some("GPUSHIM_MAX_FRAMES=x is not a number from 1 to 256; using 64".into()))
        );
        assert_eq!(max_frames_value("0", 64).0, 64);
    }

    /// The report's name takes its rank from the variables the shim sends (the collector's rule,
    /// `gpushim_wire::naming`): every variable that can give a rank is one the shim reads.
    #[test]
    fn every_variable_that_gives_a_rank_is_sent() {
        for v in gpushim_wire::naming::RANK_VARS {
            assert!(IDENTITY_VARS.contains(v), "{v} is not in IDENTITY_VARS");
        }
    }

    /// A cargo build has the collector beside the library; an installed wheel has the library
    /// in `PREFIX/lib/pythonX.Y/site-packages/gpushim/` and the collector in `PREFIX/bin/`.
    #[test]
    fn the_collector_is_found_beside_the_library_or_in_the_wheels_scripts() {
        let root = std::env::temp_dir().join(format!("gpushim-collector-for-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (lib, packages) in [("lib", "site-packages"), ("lib64", "site-packages"), ("lib", "dist-packages")] {
            let prefix = root.join(format!("{lib}-{packages}"));
            let pkg = prefix.join(lib).join("python3.11").join(packages).join("gpushim");
            std::fs::create_dir_all(&pkg).unwrap();
            std::fs::create_dir_all(prefix.join("bin")).unwrap();
            // Neither there: the one beside, for the error message.
            assert_eq!(collector_for(&pkg), pkg.join("gpushim"));
            std::fs::write(prefix.join("bin/gpushim"), b"").unwrap();
            assert_eq!(collector_for(&pkg), prefix.join("bin/gpushim"));
            std::fs::write(pkg.join("gpushim"), b"").unwrap();
            assert_eq!(collector_for(&pkg), pkg.join("gpushim"), "beside comes first");
        }
        // A directory that is not a package of a Python prefix never looks in `../../../../bin`.
        let other = root.join("x/y/z/gpushim");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::create_dir_all(root.join("x/bin")).unwrap();
        std::fs::write(root.join("x/bin/gpushim"), b"").unwrap();
        assert_eq!(collector_for(&other), other.join("gpushim"));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
