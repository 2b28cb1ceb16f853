//! The end of the program's own work: `__libc_start_main`, so that the end of `main` is seen,
//! and `exit`. At either, the exit's reachability scan is made (`exit_scan::now`)
//! before the atexit handlers and C++ static destructors run: a static container that holds
//! device pointers for the whole run is still whole then, as it is not when this library's
//! destructor runs. glibc calls `exit` after `main` returns from inside libc, a call no
//! preloaded library sees; hence the wrapper of `main`.
//!
//! - **One exit at a time**: the first thread of the process to call `exit()` (or return from
//!   `main`) does the shim's part and glibc's `exit`; another thread that calls `exit()`
//!   meanwhile waits for ever (as Rust's `std::process::exit` makes a second thread wait,
//!   rust-lang/rust#126600; C11 leaves two calls undefined), until the first ends the process.
//!   Without that, a second caller passed the first while it waited for the scan, and the
//!   process ended with the second one's status. The same thread again (an exit handler or a
//!   signal handler that calls `exit()`) goes straight to glibc's `exit`. Not guaranteed: an
//!   exit handler of the first that waits for the second thread (joins it) waits for ever.
//! - **A vfork child's `exit()`** (after a failed `exec`) runs glibc's exit handlers and library
//!   destructors in the memory it shares with its parent, and glibc marks them done there: the
//!   parent's own `exit()` then runs none, this library's destructor (the end of the stream)
//!   included, and the parent's report said "killed". The child does none of the shim's part
//!   and leaves a mark; the parent's exit then ends the stream itself, before glibc's `exit`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};

use crate::state::PROCESS_PID;
use crate::{exit, exit_scan, loader, sys};

/// `int main(int, char **, char **)`.
type MainFn = unsafe extern "C" fn(c_int, *mut *mut c_char, *mut *mut c_char) -> c_int;
/// glibc's `__libc_start_main`: `main`, `argc`, `argv`, `init`, `fini`, `rtld_fini`,
/// `stack_end` (the last four passed on untouched).
type StartFn =
    unsafe extern "C" fn(MainFn, c_int, *mut *mut c_char, *mut c_void, *mut c_void, *mut c_void, *mut c_void) -> c_int;
/// `void exit(int)`.
type ExitFn = unsafe extern "C" fn(c_int) -> !;

/// The program's `main`, for [`main_then_scan`].
static MAIN: AtomicUsize = AtomicUsize::new(0);

/// glibc's `__libc_start_main`, called with `main` replaced by [`main_then_scan`]; every other
/// argument and the result are passed on unchanged.
///
/// # Safety
/// The contract of glibc's `__libc_start_main` (only the C runtime's start code calls it).
#[no_mangle]
pub unsafe extern "C" fn __libc_start_main(
    main: MainFn,
    argc: c_int,
    argv: *mut *mut c_char,
    init: *mut c_void,
    fini: *mut c_void,
    rtld_fini: *mut c_void,
    stack_end: *mut c_void,
) -> c_int {
    let real = loader::dlsym(libc::RTLD_NEXT, c"__libc_start_main");
    if real == 0 {
        // No C library after us: nothing can start the program. Cannot happen in a process
        // glibc's start code runs in.
        // SAFETY: abort has no preconditions.
        unsafe { libc::abort() };
    }
    // SAFETY: `real` is glibc's `__libc_start_main`, of this type.
    let real: StartFn = unsafe { std::mem::transmute::<usize, StartFn>(real) };
    MAIN.store(main as usize, Release);
    // SAFETY: the caller's arguments, passed on; `main_then_scan` calls `main` as glibc would.
    unsafe { real(main_then_scan, argc, argv, init, fini, rtld_fini, stack_end) }
}

/// The program's `main`, then the exit's scan; its result unchanged.
unsafe extern "C" fn main_then_scan(argc: c_int, argv: *mut *mut c_char, envp: *mut *mut c_char) -> c_int {
    // SAFETY: MAIN holds the `main` glibc's start code was given, stored before it called us.
    let main: MainFn = unsafe { std::mem::transmute::<usize, MainFn>(MAIN.load(Acquire)) };
    // SAFETY: called as glibc calls `main`.
    let status = unsafe { main(argc, argv, envp) };
    // glibc's `exit` follows, from inside libc.
    if first_to_exit() {
        shims_part_of_exit();
    }
    status
}

/// The thread that called `exit()` (or returned from `main`) first: its process id in the high
/// half, its thread id in the low half; 0 before.
static EXITING: AtomicU64 = AtomicU64::new(0);

/// Set by a vfork child's `exit()`: glibc's exit handlers and library destructors are spent in
/// the memory it shared with this process (see the module's doc).
static HANDLERS_SPENT: AtomicBool = AtomicBool::new(false);

/// Whether the calling thread is the first of its process to exit, and so does the shim's part
/// (false: the same thread again). Another thread of the process that exits meanwhile waits
/// here for ever: the first one's `exit` ends the process, with its status.
fn first_to_exit() -> bool {
    let pid = sys::getpid_raw();
    let me = (u64::from(pid as u32) << 32) | u64::from(sys::gettid());
    let mut seen = EXITING.load(Acquire);
    loop {
        if seen == me {
            return false;
        }
        // Free, or set in the process this one was forked from (the copy of its memory).
        if seen == 0 || (seen >> 32) as u32 != pid as u32 {
            match EXITING.compare_exchange(seen, me, AcqRel, Acquire) {
                Ok(_) => return true,
                Err(now) => {
                    seen = now;
                    continue;
                }
            }
        }
        loop {
            // Waits for ever (signal handlers still run), by raw system call: `pause` is a
            // cancellation point, and a cancellation acted on here would unwind through Rust
            // frames, which aborts the process.
            // SAFETY: ppoll of no descriptors, with no timeout and no signal mask.
            unsafe {
                libc::syscall(
                    libc::SYS_ppoll,
                    std::ptr::null_mut::<libc::pollfd>(),
                    0,
                    std::ptr::null::<libc::timespec>(),
                    std::ptr::null::<libc::sigset_t>(),
                    8,
                )
            };
        }
    }
}

/// The exit's scan, and the end of the stream if a vfork child spent this process's exit
/// handlers (the library's destructor will not run).
fn shims_part_of_exit() {
    exit_scan::now();
    if HANDLERS_SPENT.load(Acquire) {
        exit::finish();
    }
}

/// In a child of `vfork` (or of a raw `clone`: no fork handler ran, so the process id the shim
/// knows is its parent's)?
fn in_a_vfork_child() -> bool {
    let known = PROCESS_PID.load(Acquire);
    known != 0 && known != sys::getpid_raw()
}

/// `void exit(int status)`: the exit's scan, then glibc's `exit` with the status unchanged.
///
/// # Safety
/// The contract of `exit(3)`.
#[no_mangle]
pub unsafe extern "C" fn exit(status: c_int) -> ! {
    if in_a_vfork_child() {
        // Nothing of the shim's (the stream is the parent's), and a mark for the parent.
        HANDLERS_SPENT.store(true, Release);
    } else if first_to_exit() {
        shims_part_of_exit();
    }
    let real = loader::dlsym(libc::RTLD_NEXT, c"exit");
    if real != 0 {
        // SAFETY: `real` is glibc's `exit`, of this type.
        let real: ExitFn = unsafe { std::mem::transmute::<usize, ExitFn>(real) };
        // SAFETY: the caller's contract.
        unsafe { real(status) }
    }
    loop {
        // SAFETY: exit_group ends every thread of the process and does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, libc::c_long::from(status)) };
    }
}
