//! The pipe `gpushim run` waits on, as a named pipe (FIFO) in a private directory: the
//! collectors reopen it by path (`GPUSHIM_RUN_NOTIFY`), which works from a PID namespace of the
//! program's own (`gpushim run -- unshare --pid --fork --mount-proc prog`, where the
//! `/proc/PID/fd/N` of `run` is not visible and no collector could say it started: `run`
//! said "no CUDA allocations" and returned before the report). Without a directory for it,
//! an anonymous pipe named through `/proc` as before.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The pipe: its read end (`run`'s), its write end (the program's, `GPUSHIM_RUN_FD`), the path
/// the collectors open, and the directory to remove at the end (for a FIFO).
pub(super) struct RunPipe {
    pub(super) read: Option<OwnedFd>,
    pub(super) write: Option<OwnedFd>,
    pub(super) path: PathBuf,
    dir: Option<PathBuf>,
}

impl Drop for RunPipe {
    fn drop(&mut self) {
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_file(&self.path);
            let _ = std::fs::remove_dir(d);
        }
    }
}

impl RunPipe {
    /// A FIFO in a new directory of the temporary directory (mode 0700), else an anonymous pipe.
    pub(super) fn new() -> io::Result<RunPipe> {
        let tmp = std::env::temp_dir();
        if let Some(p) = tmp.to_str().is_some().then(|| fifo(&tmp)).flatten() {
            return Ok(p);
        }
        let (read, write) = pipe()?;
        let path = PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), read.as_raw_fd()));
        Ok(RunPipe { read: Some(read), write: Some(write), path, dir: None })
    }
}

fn fifo(tmp: &Path) -> Option<RunPipe> {
    let mut template = tmp.join("gpushim-run-XXXXXX").into_os_string().into_vec();
    template.push(0);
    // SAFETY: mkdtemp rewrites the X's of a NUL-terminated template in place.
    if unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) }.is_null() {
        return None;
    }
    template.pop();
    let dir = PathBuf::from(std::ffi::OsString::from_vec(template));
    let path = dir.join("notify");
    let made = CString::new(path.as_os_str().as_bytes()).ok().and_then(|c| {
        // SAFETY: mkfifo and open take a NUL-terminated path; the read end is opened first
        // without blocking, so the write end's open does not block either.
        unsafe {
            if libc::mkfifo(c.as_ptr(), 0o600) != 0 {
                return None;
            }
            let r = libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC);
            if r < 0 {
                return None;
            }
            let read = OwnedFd::from_raw_fd(r);
            let w = libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if w < 0 {
                return None;
            }
            // Reads wait (after poll) as on a pipe.
            libc::fcntl(read.as_raw_fd(), libc::F_SETFL, 0);
            Some((read, OwnedFd::from_raw_fd(w)))
        }
    });
    match made {
        Some((read, write)) => Some(RunPipe { read: Some(read), write: Some(write), path, dir: Some(dir) }),
        None => {
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_dir(&dir);
            None
        }
    }
}

/// A pipe, both ends close-on-exec: (read, write).
pub(super) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both are fresh descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
