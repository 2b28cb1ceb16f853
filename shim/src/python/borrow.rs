//! Python frames for allocations on PyTorch's autograd engine threads, which run no Python
//! code of their own: the frames of the thread that started the backward pass.
//!
//! `loss.backward()` runs `torch.autograd.backward` and then `_engine_run_backward`
//! (torch/autograd/graph.py; `backward` itself in torch before 2.2), which calls the engine
//! with the GIL released and waits in `Engine::execute` until the engine's threads
//! (`pt_autograd_<device>`, named by PyTorch's engine, torch/csrc/autograd/engine.cpp) have run
//! the graph. While it waits, its frames cannot change, so an allocation on an engine thread is
//! reported with them: the user's line that started the backward.
//!
//! Finding that thread: the interpreter's list of thread states
//! (`PyInterpreterState_ThreadHead`, `PyThreadState.next`: CPython's C API, "Advanced Debugger
//! Support") and, per thread, its innermost frames. Those threads are not the caller, so they may
//! run, push and pop frames, or end while we read; every read here goes through
//! `process_vm_readv` on this process, which fails cleanly on memory unmapped meanwhile. A thread
//! counts only when its innermost Python frame is `_engine_run_backward`, or `backward` or `grad`
//! of torch/autograd/__init__.py, and the frames given are those of the first such thread.
//! Several backward passes at once on several threads cannot be told apart: the first is taken
//! (docs/guarantees.md).
//!
//! Cost: nothing on threads that have Python frames of their own or are not named
//! `pt_autograd_*` (one `pthread_getname_np` per thread, cached); on an engine thread, a few
//! hundred system calls per allocation that reaches the shim (the caching allocator's segment
//! requests, not every tensor).

use crate::race_once::RaceOnce;
use std::cell::Cell;
use std::ffi::c_void;

use super::layout::{plausible, Layout};
use super::walk::{walk_in, Mem, Raw, MAX_PY_FRAMES};

/// `PyThreadState.next` (Include/cpython/pystate.h, struct _ts: prev, next, interp; 3.10 to
/// 3.13).
const TS_NEXT: usize = 8;
/// Most thread states looked at.
const MAX_THREADS: usize = 256;
/// Longest name compared, bytes (`_engine_run_backward` and a file name's end).
const PEEK: usize = 256;

/// The interpreter's `PyInterpreterState_Main` and `PyInterpreterState_ThreadHead`.
struct Api {
    main: unsafe extern "C" fn() -> *mut c_void,
    head: unsafe extern "C" fn(*mut c_void) -> *mut c_void,
}

static API: RaceOnce<Option<Api>> = RaceOnce::new();

thread_local! {
    /// Whether this thread is one of PyTorch's autograd engine threads: 0 not asked yet, 1 yes,
    /// 2 no. Reset in a forked child (its only thread is no engine thread of the child's).
    static ENGINE: Cell<u8> = const { Cell::new(0) };
}

/// Looks up the two functions, once, when Python frames are first captured.
pub(crate) fn init() {
    API.get_or_init(|| {
        let sym = super::detect::python_symbols()?;
        let (main, head) = (sym.get(c"PyInterpreterState_Main"), sym.get(c"PyInterpreterState_ThreadHead"));
        if main == 0 || head == 0 {
            return None;
        }
        // SAFETY: the interpreter's `PyInterpreterState *PyInterpreterState_Main(void)` and
        // `PyThreadState *PyInterpreterState_ThreadHead(PyInterpreterState *)` (C API, 3.8+).
        unsafe {
            Some(Api {
                main: std::mem::transmute::<usize, unsafe extern "C" fn() -> *mut c_void>(main),
                head: std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void) -> *mut c_void>(head),
            })
        }
    });
}

/// In a forked child: the calling thread is asked again.
pub(crate) fn reset_after_fork() {
    let _ = ENGINE.try_with(|e| e.set(0));
}

/// True if and only if the calling thread is named `pt_autograd_*` (asked once per thread).
fn engine_thread() -> bool {
    ENGINE
        .try_with(|e| {
            if e.get() == 0 {
                let mut buf = [0u8; 16];
                // SAFETY: `buf` is writable for the 16 bytes passed; the thread is the caller.
                let rc = unsafe { libc::pthread_getname_np(libc::pthread_self(), buf.as_mut_ptr().cast(), buf.len()) };
                e.set(if rc == 0 && buf.starts_with(b"pt_autograd") { 1 } else { 2 });
            }
            e.get() == 1
        })
        .unwrap_or(false)
}

/// Reads through `process_vm_readv` on this process: memory another thread frees meanwhile
/// makes the read fail, never fault.
struct Checked;

impl Checked {
    /// Fills `buf` from `addr`; false if any byte could not be read.
    fn bytes(&self, addr: usize, buf: &mut [u8]) -> bool {
        crate::sys::read_own(addr as u64, buf) == buf.len()
    }
}

impl Mem for Checked {
    /// # Safety
    /// `T` must be valid for any bytes (the plain integers and addresses the walk reads).
    #[inline]
    unsafe fn rd<T: Copy>(&self, addr: usize) -> Option<T> {
        let mut v = std::mem::MaybeUninit::<T>::zeroed();
        // SAFETY: `v`'s bytes are initialized (zeroed) and ours for its size.
        let buf = unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of::<T>()) };
        // SAFETY: every byte was written, and the caller's T takes any bytes.
        self.bytes(addr, buf).then(|| unsafe { v.assume_init() })
    }
}

/// The ASCII text of a compact ASCII `str` object, read through [`Checked`], into `buf`: its
/// length, or `None`.
fn ascii_of(l: &Layout, s: usize, buf: &mut [u8; PEEK]) -> Option<usize> {
    let m = Checked;
    // SAFETY: checked reads.
    unsafe {
        if !m.has_type(s, l.unicode_type) {
            return None;
        }
        let len: isize = m.rd(s + l.str_length)?;
        let state: u32 = m.rd(s + l.str_state)?;
        // compact (bit 5) and ascii (bit 6), PyASCIIObject's state (layout.rs).
        if len < 0 || state & 0x60 != 0x60 {
            return None;
        }
        // The end of a long name is what is compared (a file name's `torch/autograd/…`).
        let len = len as usize;
        let n = len.min(PEEK);
        m.bytes(s + l.off.ascii_data + (len - n), &mut buf[..n]).then_some(n)
    }
}

/// True if and only if `code` is where a backward pass waits for the engine:
/// `_engine_run_backward`, or `backward`/`grad` in torch/autograd/__init__.py.
fn starts_backward(l: &Layout, code: usize) -> bool {
    let m = Checked;
    let mut buf = [0u8; PEEK];
    // SAFETY: checked reads of the code object's name and file name fields.
    let Some(name) = (unsafe { m.rd::<usize>(code + l.off.co_name) }) else { return false };
    let Some(n) = ascii_of(l, name, &mut buf) else { return false };
    let name = &buf[..n];
    if name == b"_engine_run_backward" {
        return true;
    }
    if name != b"backward" && name != b"grad" {
        return false;
    }
    // SAFETY: as above.
    let Some(file) = (unsafe { m.rd::<usize>(code + l.off.co_filename) }) else { return false };
    let Some(n) = ascii_of(l, file, &mut buf) else { return false };
    buf[..n].ends_with(b"torch/autograd/__init__.py")
}

/// On a PyTorch autograd engine thread, the raw Python frames of the thread that started the
/// backward pass (innermost first, into `out`): their number, or `None` on any other thread,
/// when no thread waits in a backward pass, or when anything could not be read.
pub(crate) fn backward_frames(l: &Layout, out: &mut [Raw; MAX_PY_FRAMES]) -> Option<usize> {
    if !engine_thread() {
        return None;
    }
    let api = API.get()?.as_ref()?;
    // SAFETY: both only read the interpreter's fields (the main interpreter lives until the
    // process ends; its list head is a pointer read).
    let mut ts = unsafe { (api.head)((api.main)()) } as usize;
    let m = Checked;
    for _ in 0..MAX_THREADS {
        if !plausible(ts) {
            return None;
        }
        // SAFETY: `ts` is (or was, if the thread ended meanwhile) a thread state of the
        // interpreter `l` describes; every read is checked.
        // The innermost frame first; the whole walk only for the thread that matches.
        if unsafe { walk_in(l, ts, out, &m, 1) } == Some(1) && starts_backward(l, out[0].code) {
            // SAFETY: as above.
            return unsafe { walk_in(l, ts, out, &m, MAX_PY_FRAMES) }.filter(|&n| n > 0);
        }
        // SAFETY: a checked read.
        ts = unsafe { m.rd::<usize>(ts + TS_NEXT) }?;
    }
    None
}
