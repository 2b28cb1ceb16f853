//! Starting the collector: a socketpair, and `gpushim collect` started through a short-lived
//! intermediate process, so that the collector is not the program's child.

use std::ffi::c_int;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use crate::config::Config;

/// Starts the collector; our end of the socket to it and the (reaped) intermediate process.
/// `None`, with one line on stderr, if it cannot be started.
pub fn collector(cfg: &Config) -> Option<(RawFd, Child)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
        eprintln!(
            "gpushim: cannot create a socket for the collector: {}; recording is off",
            std::io::Error::last_os_error()
        );
        return None;
    }
    // SAFETY: socketpair returned two fresh descriptors that nothing else owns.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut cmd = Command::new(&cfg.collector);
    cmd.arg("collect")
        .stdin(Stdio::from(theirs))
        .env_remove("LD_PRELOAD")
        // Its own process group: Ctrl-C and SIGTERM sent to the target's group do not stop it
        // before it has written the report.
        .process_group(0);
    // The collector must not be the program's child: a program that reaps every child
    // (`wait()` until ECHILD, as shells and supervisors do) would wait for it forever (it ends
    // after the program), and a SIGCHLD handler would see it. So an intermediate process
    // starts it and exits at once: the collector is reparented to init (or a subreaper).
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe system calls: a raw clone (which, unlike fork(), runs no fork
    // handlers of the program's libraries) and _exit.
    unsafe {
        cmd.pre_exec(|| match libc::syscall(libc::SYS_clone, libc::c_long::from(libc::SIGCHLD), 0, 0, 0, 0) {
            0 => Ok(()),
            n if n > 0 => libc::_exit(0),
            _ => Err(std::io::Error::last_os_error()),
        });
    }
    let child = cmd.spawn().map(|mut intermediate| {
        // It has exited (spawn returns once the collector has exec'd); reap it now.
        let _ = intermediate.wait();
        intermediate
    });
    match child {
        Ok(c) => Some((ours.into_raw_fd(), c)),
        Err(e) => {
            eprintln!(
                "gpushim: cannot start the collector '{}': {e}; recording is off (set GPUSHIM_COLLECTOR to the gpushim binary)",
                cfg.collector
            );
            None
        }
    }
}
