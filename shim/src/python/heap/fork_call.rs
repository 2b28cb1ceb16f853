//! `_gpushim_fork_call(fn, args, dumps, module_dict)`: a call made in a short-lived copy of the
//! process, whose result comes back as bytes, so that what the call does to the interpreter
//! (an import) happens in the copy only.
//!
//! Why: PyTorch's snapshot of its caching allocator turns every Python frame it recorded into
//! text with `py::hasattr(torch, "_inductor")`, and `torch`'s lazy `__getattr__` then imports
//! `torch._inductor` and `torch._dynamo` (seconds; `../shared/CUDA-FACTS.md`). The walker takes
//! that snapshot here instead when they are not imported: the copy sets the module's
//! `_inductor` to `None` in its own memory (so the check finds no code cache and imports
//! nothing), calls `fn(*args)`, and writes `dumps(result)` to a pipe; the program never
//! imports anything because of it.
//!
//! How the copy is made, and why that is safe for the program:
//! - A raw `clone` with no flags and no exit signal: a copy of the address space (copy on
//!   write) holding only the calling thread. No fork handler runs in either process (none of
//!   the program's, glibc's or the shim's), and its end sends the program no `SIGCHLD`; it is
//!   waited for here (`__WALL`): once it has sent its whole result the call returns without
//!   waiting for its end (tearing down its copy of a large address space takes a while), and
//!   it is reaped at the next call. A program that waits for its own children without
//!   `__WALL` never sees it.
//! - The copy runs no Python bytecode of its own: `fn` and `dumps` are builtins the walker
//!   checked (PyTorch's `torch._C._cuda_memorySnapshot`, `marshal.dumps`), called through the C
//!   API with the GIL the calling thread holds. Bytecode there could wait forever for a GIL
//!   hand-off to a thread the copy does not have.
//! - The copy ends with `exit_group`: no exit handler, destructor or buffer flush of the
//!   program runs there.
//! - A copy that cannot finish (a lock another thread of the program held when it was made) is
//!   killed at [`DEADLINE_MS`]; the call then returns `None`, as it does for any failure, and
//!   every later call returns `None` at once (a program where one copy hangs pays that once).
//!   The program's GIL is let go of while this thread waits, as in a blocking read.
//! - The copy starts with every signal blocked (none of the program's handlers runs there, such
//!   as CPython's, which writes to the program's wakeup descriptor) and is killed if the
//!   program ends first (`PR_SET_PDEATHSIG`): no orphan keeps the program's descriptors open.
//!   It is not dumpable: a crash there (the synchronous signal, blocked, kills it) leaves no
//!   core file and no report of the program's crash handler.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::*};

use super::capi::{api, new_none, CApi, Obj};
use crate::sys;

/// How long the copy may take, ms: PyTorch's snapshot of 50 blocks took 1.6 ms in one on the
/// H200 (docs/gpu-matrix.md).
const DEADLINE_MS: u64 = 2_000;
/// The most bytes taken back.
const MAX_BYTES: u64 = 1 << 30;
/// A copy did not finish by its deadline: no more are made in this process.
static GAVE_UP: AtomicBool = AtomicBool::new(false);
/// A copy that had sent its result but not yet ended when the call returned (its address space
/// takes time to tear down): reaped at the next call (0: none).
static UNREAPED: AtomicI32 = AtomicI32::new(0);

/// Reaps the copy left by the previous call, waiting for it with `block`.
fn reap_previous(block: bool) {
    let pid = UNREAPED.swap(0, AcqRel);
    if pid > 0 {
        let flags = libc::__WALL | if block { 0 } else { libc::WNOHANG };
        let mut status = 0;
        // SAFETY: a child of ours (exit signal none: only `__WALL` waits for it).
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        if r == 0 {
            UNREAPED.store(pid, Release);
        }
    }
}

/// The builtin (`METH_VARARGS`): `_gpushim_fork_call(fn, args, dumps, module_dict)` returns
/// `dumps(fn(*args))` as made in a copy of the process, or `None`.
pub(super) extern "C" fn entry(_self: Obj, args: Obj) -> Obj {
    let Some(a) = api() else { return std::ptr::null_mut() };
    if GAVE_UP.load(Acquire) {
        return new_none(a);
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: a builtin runs with the GIL held; `args` is the call's argument tuple.
        unsafe { call(a, args) }
    }));
    match r {
        Ok(Some(bytes)) => bytes,
        _ => new_none(a),
    }
}

/// # Safety
/// The GIL is held; `args` is a tuple.
unsafe fn call(a: &CApi, args: Obj) -> Option<Obj> {
    // SAFETY: the caller's promise; every item is borrowed from the tuple, which outlives this.
    let (f, f_args, dumps, module_dict) = unsafe {
        if (a.tuple_size)(args) != 4 {
            (a.err_clear)();
            return None;
        }
        let item = |i| (a.tuple_get_item)(args, i);
        (item(0), item(1), item(2), item(3))
    };
    if [f, f_args, dumps, module_dict].iter().any(|o| o.is_null()) {
        // SAFETY: the GIL is held.
        unsafe { (a.err_clear)() };
        return None;
    }
    // The previous call's copy has surely ended by now.
    reap_previous(true);
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    let [rd, wr] = fds;
    // Every signal blocked in this thread across the clone, so that the copy starts with all of
    // them blocked: a signal sent to the program's process group while the copy runs (Ctrl-C)
    // runs none of the program's handlers there (CPython's writes the signal's number to the
    // program's wakeup descriptor, which the copy shares: asyncio would see it twice).
    // SAFETY: sigset_t values filled by sigfillset, the old mask written by the kernel.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above (all zeros is a valid sigset_t).
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let masked =
        unsafe { libc::sigfillset(&mut all) == 0 && libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old) == 0 };
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: a raw clone with no flags: a copy of this process holding only this thread, with
    // no exit signal. The copy runs `in_copy`, which never returns.
    let pid = unsafe { libc::syscall(libc::SYS_clone, 0 as libc::c_ulong, 0usize, 0usize, 0usize, 0usize) };
    if pid == 0 {
        // SAFETY: in the copy. It is killed if the program ends first (however: SIGKILL, the
        // OOM killer), so that no orphan outlives it holding the program's descriptors (the
        // collector's connection among them: it would wait for the copy's end). It is not
        // dumpable: a copy that crashes writes no core file of the program's address space.
        unsafe {
            libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong);
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 || libc::getppid() != parent {
                loop {
                    libc::syscall(libc::SYS_exit_group, 9 as libc::c_long);
                }
            }
        }
        // SAFETY: in the copy, with the GIL this thread held.
        unsafe { in_copy(a, f, f_args, dumps, module_dict, wr) }
    }
    if masked {
        // SAFETY: the mask this thread had, put back.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    }
    // SAFETY: closing this process's copy of the write end, so that the read sees the end.
    unsafe { libc::close(wr) };
    if pid < 0 {
        // SAFETY: the read end is ours.
        unsafe { libc::close(rd) };
        return None;
    }
    // SAFETY: the GIL is held; it is taken again below on every path.
    let ts = unsafe { (a.eval_save_thread)() };
    let deadline = sys::deadline_after(std::time::Duration::from_millis(DEADLINE_MS));
    let got = read_until(rd, deadline);
    // SAFETY: the copy is ours; a kill of one that has ended already does nothing.
    unsafe {
        if got.is_none() {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
            if sys::now_ns() >= deadline {
                GAVE_UP.store(true, Release);
            }
        }
        libc::close(rd);
        // A copy that sent its result is ending on its own: not waited for now (tearing down
        // its copy of a large address space takes a while), but at the next call.
        let flags = libc::__WALL | if got.is_some() { libc::WNOHANG } else { 0 };
        let mut status = 0;
        let mut r;
        loop {
            r = libc::waitpid(pid as libc::pid_t, &mut status, flags);
            if r >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
        if r == 0 {
            UNREAPED.store(pid as i32, Release);
        }
        (a.eval_restore_thread)(ts);
    }
    let data = got?;
    // SAFETY: the GIL is held again; the bytes are copied into a new object.
    let b = unsafe { (a.bytes_from_string_and_size)(data.as_ptr() as *const c_char, data.len() as isize) };
    if b.is_null() {
        // SAFETY: the GIL is held.
        unsafe { (a.err_clear)() };
        return None;
    }
    Some(b)
}

/// What the copy wrote: an 8-byte little-endian length, then that many bytes. `None` if it did
/// not write all of it before the deadline.
fn read_until(fd: c_int, deadline_ns: u64) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        let now = sys::now_ns();
        if now >= deadline_ns {
            return None;
        }
        let ms = ((deadline_ns - now) / 1_000_000).clamp(1, i32::MAX as u64) as c_int;
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
        if n <= 0 {
            continue;
        }
        // SAFETY: reads into the chunk's own bytes.
        let r = unsafe { libc::read(fd, chunk.as_mut_ptr() as *mut c_void, chunk.len()) };
        if r < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return None;
        }
        if r == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..r as usize]);
        if buf.len() as u64 > MAX_BYTES + 8 {
            return None;
        }
        // The whole result: no need to wait for the copy to close its end (at its exit).
        if let Some(n) = buf.get(..8).and_then(|h| Some(u64::from_le_bytes(h.try_into().ok()?))) {
            if buf.len() as u64 == n + 8 {
                break;
            }
        }
    }
    let n = u64::from_le_bytes(buf.get(..8)?.try_into().ok()?);
    (buf.len() as u64 == n + 8).then(|| buf.split_off(8))
}

/// The copy's part: `module_dict['_inductor'] = None` unless it is there, then
/// `dumps(f(*f_args))` written to `wr` after its length; ends the copy.
///
/// # Safety
/// Only in the copy, with the GIL its one thread holds; the objects are live.
unsafe fn in_copy(a: &CApi, f: Obj, f_args: Obj, dumps: Obj, module_dict: Obj, wr: c_int) -> ! {
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the caller's promise. Nothing here is released: the copy ends below.
        unsafe {
            if (a.dict_get_item_string)(module_dict, c"_inductor".as_ptr()).is_null()
                && (a.dict_set_item_string)(module_dict, c"_inductor".as_ptr(), a.none) != 0
            {
                return 3;
            }
            let r = (a.call_object)(f, f_args);
            if r.is_null() {
                return 4;
            }
            let one = (a.tuple_new)(1);
            if one.is_null() || (a.tuple_set_item)(one, 0, r) != 0 {
                return 5;
            }
            let b = (a.call_object)(dumps, one);
            let (mut p, mut n): (*mut c_char, isize) = (std::ptr::null_mut(), 0);
            if b.is_null() || (a.bytes_as_string_and_size)(b, &mut p, &mut n) != 0 || p.is_null() || n < 0 {
                return 6;
            }
            let data = std::slice::from_raw_parts(p as *const u8, n as usize);
            if write_all(wr, &(n as u64).to_le_bytes()) && write_all(wr, data) {
                0
            } else {
                7
            }
        }
    }))
    .unwrap_or(8);
    loop {
        // SAFETY: ends the copy (its one thread) at once: no handler of the program runs.
        unsafe { libc::syscall(libc::SYS_exit_group, libc::c_long::from(code)) };
    }
}

fn write_all(fd: c_int, mut b: &[u8]) -> bool {
    while !b.is_empty() {
        // SAFETY: writes from the slice's own bytes.
        let n = unsafe { libc::write(fd, b.as_ptr() as *const c_void, b.len()) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return false;
        }
        b = &b[n as usize..];
    }
    true
}
