//! The exits that run no atexit handler, `_exit` and `_Exit`: the stream is ended here first.

use std::ffi::c_int;

use crate::exit;

/// `void _exit(int status)` (Python's `os._exit`, forked workers): no atexit handler runs, so
/// the stream is ended here, then the process exits with the status unchanged through the
/// system call glibc's `_exit` makes (`exit_group`). What runs first is safe in a signal
/// handler (`exit::quick_finish`): crash handlers call `_exit`.
///
/// # Safety
/// The same contract as `_exit(2)`.
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    let _ = std::panic::catch_unwind(exit::quick_finish);
    loop {
        // SAFETY: exit_group ends every thread of the process and does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, libc::c_long::from(status)) };
    }
}

/// `void _Exit(int status)`, C99's name for [`_exit`].
///
/// # Safety
/// The same contract as `_Exit(3)`.
#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    // SAFETY: the same contract.
    unsafe { _exit(status) }
}
