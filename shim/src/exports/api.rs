//! The C entry points behind the Python API (`python/gpushim/__init__.py`, through ctypes on
//! the already-loaded library): `gpushim_is_tracing`, `gpushim_report_path`,
//! `gpushim_snapshot` and `gpushim_snapshot_in`. No signal is involved.
//!
//! A snapshot asked for here travels like an event: the calling thread reads the current
//! sequence number as the boundary and queues a [`Msg::ApiSnapshot`] with a reply channel; the
//! writer sends the wire event `ApiSnapshot` (boundary, label) and remembers the snapshot's
//! number; the collector writes the file when every event before the boundary has been applied
//! and answers on the socket with one line, `snapshot N PATH`; the writer reads it and replies.
//! The caller waits for that reply at most `timeout_ms`.
//!
//! The heap walk that completes a snapshot (who holds the memory, `*.holders.json`) runs on the
//! main thread between two bytecodes (python/heap.rs). It is *not* waited for: a caller on the
//! main thread is blocked here, so the walk can only start after this call returns (ctypes
//! releases the GIL during the call, which lets other threads run, not the pending call). The
//! snapshot file itself needs nothing from the main thread, so a call from the main thread
//! never deadlocks. The writer asks for the walk when the collector's answer arrives, just
//! before it wakes the caller, so that the walk's wait (capped by `GPUSHIM_HEAP_WALK_MS`) does
//! not include the time the collector took to write the file; the holders file appears beside
//! the snapshot shortly after the call returns.
//!
//! Every entry catches panics, never blocks longer than its timeout (plus the start of the
//! collector at the first event), and reports failure by its return value only.

use std::ffi::{c_char, c_int, CStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering::*;
use std::time::Duration;

use crate::event::Msg;
use crate::state::{self, SEQ};
use crate::{config, record, sys};

pub use crate::event::SnapshotReply as Reply;

/// The longest label kept, characters.
pub const MAX_LABEL: usize = 64;

/// `gpushim_snapshot` results below 0.
/// Recording is off: the collector could not be started or went away, or the exit path ran.
pub const E_NOT_TRACING: c_int = -1;
/// No answer from the collector within the timeout (the snapshot may still be written later).
pub const E_TIMEOUT: c_int = -2;
/// The collector answered that it could not write the file, or went away while we waited.
pub const E_NOT_WRITTEN: c_int = -3;
/// `path_out` is NULL while `cap` is not 0, or the directory is not valid UTF-8 or cannot be
/// made absolute.
pub const E_ARGS: c_int = -4;

/// The label reduced to what may go into a file name: each character outside
/// `[A-Za-z0-9._-]` becomes `_`, at most [`MAX_LABEL`] characters are kept, and leading dots
/// become `_` (no hidden files).
pub fn sanitize_label(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw);
    let mut out: String = s
        .chars()
        .take(MAX_LABEL)
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .collect();
    if out.starts_with('.') {
        out.replace_range(..1, "_");
    }
    out
}

/// Whether this process records: 1 while recording or ready to start at the first event
/// (the library is loaded and nothing stopped it), 0 once recording stopped (the collector
/// could not be started or went away, the exit path ran, or a forked child of a process whose
/// collector failed).
#[no_mangle]
pub extern "C" fn gpushim_is_tracing() -> c_int {
    c_int::from(state::recording())
}

/// Writes the path where this process's final report will be written (`GPUSHIM_OUTPUT`,
/// made absolute against the working directory, else the working directory, then
/// `gpushim-PID.json`, or `gpushim-rank<RANK>-PID.json` for a process with a rank: the
/// collector's rule, `gpushim_wire::naming`, with the rank of the variables read when tracing
/// started, else of those set now; the collector takes the next free name if that one exists) into
/// `out` (NUL-terminated when it fits) and returns its length in bytes without the NUL; when
/// that is `cap` or more, nothing useful was written and the caller should retry with a
/// larger buffer. Returns -1 on an internal error.
///
/// # Safety
/// `out` is NULL (then `cap` must be 0) or points to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn gpushim_report_path(out: *mut c_char, cap: usize) -> isize {
    let r = std::panic::catch_unwind(|| {
        let dir = config::output_dir().map(PathBuf::from).unwrap_or_else(config::output_dir_from_env);
        let stem = gpushim_wire::naming::report_stem(sys::getpid_raw() as u32, config::report_rank());
        dir.join(format!("{stem}.json")).into_os_string()
    });
    let Ok(path) = r else { return -1 };
    // SAFETY: the caller's contract.
    unsafe { copy_out(path.as_bytes(), out, cap) }
}

/// Asks for a snapshot labelled `label` (NULL or empty: none; see [`sanitize_label`]) and
/// waits, at most `timeout_ms` milliseconds, for the collector to confirm that its file is
/// written; the file holds exactly the allocations made before this call. Starts tracing
/// (the collector) if no CUDA event has yet. On success writes the file's path into `path_out`
/// as [`gpushim_report_path`] does and returns its length in bytes (>= 0); otherwise one of
/// [`E_NOT_TRACING`], [`E_TIMEOUT`], [`E_NOT_WRITTEN`], [`E_ARGS`]. Never raises a signal and
/// never calls into Python; the heap walk of the snapshot is not waited for (module docs).
///
/// # Safety
/// `label` is NULL or a NUL-terminated string; `path_out` is NULL (then `cap` must be 0) or
/// points to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn gpushim_snapshot(
    label: *const c_char,
    timeout_ms: u32,
    path_out: *mut c_char,
    cap: usize,
) -> isize {
    // SAFETY: the caller's contract, passed on.
    unsafe { gpushim_snapshot_in(std::ptr::null(), label, timeout_ms, path_out, cap) }
}

/// [`gpushim_snapshot`] with the snapshot's files (the report, and the heap walk's and the
/// reachability scan's beside it) written into `dir` rather than the output directory: NULL
/// or empty for the output directory; a relative path is taken against the working
/// directory. The collector falls back to `$TMPDIR`, then `/tmp`, as for any report, if `dir`
/// cannot be written. Returns [`E_ARGS`] for a directory that is not UTF-8.
///
/// # Safety
/// `dir` and `label` are NULL or NUL-terminated strings; `path_out` is NULL (then `cap` must
/// be 0) or points to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn gpushim_snapshot_in(
    dir: *const c_char,
    label: *const c_char,
    timeout_ms: u32,
    path_out: *mut c_char,
    cap: usize,
) -> isize {
    if path_out.is_null() && cap != 0 {
        return E_ARGS as isize;
    }
    let label = if label.is_null() {
        String::new()
    } else {
        // SAFETY: the caller's contract: a NUL-terminated string.
        sanitize_label(unsafe { CStr::from_ptr(label) }.to_bytes())
    };
    let dir = if dir.is_null() {
        Vec::new()
    } else {
        // SAFETY: the caller's contract: a NUL-terminated string.
        unsafe { CStr::from_ptr(dir) }.to_bytes().to_vec()
    };
    let r = std::panic::catch_unwind(move || {
        let dir = absolute_dir(&dir).ok_or(E_ARGS)?;
        sys::no_cancel(|| request(label, dir, Duration::from_millis(u64::from(timeout_ms))))
    });
    match r {
        // SAFETY: the caller's contract.
        Ok(Ok(path)) => unsafe { copy_out(&path, path_out, cap) },
        Ok(Err(code)) => code as isize,
        Err(_) => E_NOT_WRITTEN as isize,
    }
}

/// `dir` as an absolute UTF-8 path (empty stays empty: the output directory); None if it is
/// not UTF-8 or the working directory cannot be read for a relative one.
fn absolute_dir(dir: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(dir).ok()?;
    if s.is_empty() || s.starts_with('/') {
        return Some(s.to_owned());
    }
    let cwd = std::env::current_dir().ok()?;
    cwd.join(s).into_os_string().into_string().ok()
}

/// Queues the request and waits for the writer's reply.
fn request(label: String, dir: String, timeout: Duration) -> Result<Vec<u8>, c_int> {
    let (tx, rx) = crossbeam_channel::bounded::<Reply>(1);
    let queued = record::send_starting(|| {
        // The boundary is read once tracing runs: every event numbered before it is in the
        // snapshot, every later one is not.
        Msg::ApiSnapshot(Box::new(crate::event::ApiRequest {
            boundary: SEQ.load(Acquire),
            ts_ns: sys::now_ns(),
            label,
            dir,
            reply: tx,
        }))
    });
    if !queued {
        return Err(E_NOT_TRACING);
    }
    // Polled, not the channel's blocking receive, which would register a thread-local
    // destructor on this program thread that its `exit()` runs (see `per_thread`).
    let got = sys::poll_until(sys::deadline_after(timeout), || match rx.try_recv() {
        Err(crossbeam_channel::TryRecvError::Empty) => None,
        r => Some(r),
    });
    match got {
        Some(Ok(Ok(path))) => Ok(path),
        Some(Ok(Err(_))) => Err(E_NOT_WRITTEN),
        None => Err(E_TIMEOUT),
        Some(Err(_)) => Err(E_NOT_WRITTEN),
    }
}

/// Copies `bytes` and a NUL into `out` if they fit in `cap`; returns `bytes.len()`.
///
/// # Safety
/// `out` is NULL with `cap` 0, or points to `cap` writable bytes.
unsafe fn copy_out(bytes: &[u8], out: *mut c_char, cap: usize) -> isize {
    if !out.is_null() && bytes.len() < cap {
        // SAFETY: `bytes.len() + 1 <= cap` bytes are writable at `out`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.cast::<u8>(), bytes.len());
            *out.add(bytes.len()) = 0;
        }
    }
    isize::try_from(bytes.len()).unwrap_or(isize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_reduced_to_file_name_characters() {
        assert_eq!(sanitize_label(b"after epoch 3/../x"), "after_epoch_3_.._x");
        assert_eq!(sanitize_label(b".hidden"), "_hidden");
        assert_eq!(sanitize_label("caf\u{e9}".as_bytes()), "caf_");
        assert_eq!(sanitize_label(&[b'a'; 100]).len(), MAX_LABEL);
    }

    #[test]
    fn a_snapshot_directory_is_made_absolute() {
        assert_eq!(absolute_dir(b"").as_deref(), Some(""));
        assert_eq!(absolute_dir(b"/tmp/k").as_deref(), Some("/tmp/k"));
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(absolute_dir(b"snaps").unwrap(), cwd.join("snaps").to_str().unwrap());
        assert_eq!(absolute_dir(b"bad\xff"), None);
    }
}
