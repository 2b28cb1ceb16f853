//! The socket to the collector, known by number and identity: a program may close every
//! descriptor and reuse the number (daemons do), so before each use the shim checks that the
//! descriptor is still the socket it opened (same device and inode), and it never writes to,
//! shuts down or closes what is now the program's.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering::*};

use crate::sys;

/// Our end of the socket to the collector; -1 if none. Closed in a forked child.
static SOCKET_FD: AtomicI32 = AtomicI32::new(-1);
/// Identity of that socket (`st_dev`, `st_ino`).
static SOCKET_ID: (AtomicU64, AtomicU64) = (AtomicU64::new(0), AtomicU64::new(0));

/// Remembers `fd` and its identity as the shim's socket.
pub fn adopt(fd: RawFd) {
    if let Some((dev, ino)) = sys::fd_identity(fd) {
        SOCKET_ID.0.store(dev, Release);
        SOCKET_ID.1.store(ino, Release);
    }
    SOCKET_FD.store(fd, Release);
}

/// True if and only if `fd` is still the socket the shim opened.
pub fn still_ours(fd: RawFd) -> bool {
    fd >= 0 && sys::fd_identity(fd) == Some((SOCKET_ID.0.load(Acquire), SOCKET_ID.1.load(Acquire)))
}

/// Closes `fd` if, and only if, it is still the shim's socket and nobody closed it before.
pub fn close_if_ours(fd: RawFd) {
    if still_ours(fd) && SOCKET_FD.compare_exchange(fd, -1, AcqRel, Acquire).is_ok() {
        // SAFETY: the descriptor is the socket the shim opened (same device and inode).
        unsafe { libc::close(fd) };
    }
}

/// Closes the inherited socket in a forked child, so the parent's collector still sees the end
/// of the parent's stream.
pub fn close_after_fork() {
    let fd = SOCKET_FD.swap(-1, AcqRel);
    if still_ours(fd) {
        // SAFETY: the fd is this process's copy of our socket; no thread of the child uses it.
        unsafe { libc::close(fd) };
    }
}
