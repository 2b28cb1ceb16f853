//! The heap walk: in a CPython program, which Python objects own GPU memory and what keeps each
//! alive, found by a walker written in Python (`holders.py`, embedded here) that runs inside
//! the program, holding the GIL, at a point where the interpreter is safe.
//!
//! How it is run, and why that is safe:
//! - The shim does not link libpython: the few C API functions used are looked up at run time
//!   ([`CApi`]), and only when libpython's symbols are in the process.
//! - Only the writer thread (a shim thread, every asynchronous signal blocked) asks for a walk,
//!   with `Py_AddPendingCall`, which CPython documents as callable from any thread without the
//!   GIL ("Python/C API: Initialization, Finalization, and Threads", Asynchronous
//!   Notifications). Never from the signal handler and never inside a CUDA hook. The pending
//!   call runs on the main thread between two bytecodes.
//! - The first pending call ([`arm`]) registers a builtin function with Python's `atexit`; it
//!   runs the walk of the final report while module globals are still alive. `atexit` is
//!   removed from `sys.modules` again if the program had not imported it.
//! - The walker and that registration get their modules and module functions from two builtins
//!   made here ([`originals`]): the modules from `sys.modules` or the import machinery, not
//!   `builtins.__import__`; the functions made afresh from each module's own method table, not
//!   read from its attributes. A program's replacement of either never runs.
//! - A walk that has not started within `GPUSHIM_HEAP_WALK_MS` (the main thread is blocked in
//!   native code) is given up and reported as blocked; if its pending call runs later it does
//!   nothing. One walk at a time: a request while one waits or runs is reported as skipped.
//! - Every entry from Python (the pending calls, the atexit function, `emit`) runs under
//!   `catch_unwind`, keeps the interpreter's error indicator as it found it (`PyErr_Fetch` /
//!   `PyErr_Restore`) and never returns an error to the interpreter: a pending call that
//!   returned -1 would raise into the program.
//! - The walker hands its result back through `emit`, a builtin function object made here
//!   (`PyCFunction_NewEx` over [`emit`], `METH_O`), which queues it for the writer like any
//!   event. No ctypes.

mod capi;
mod fork_call;
mod originals;

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};

use gpushim_wire::{HeapWalk, WalkReason, WalkStatus};

use crate::event::Msg;
use crate::{config, state, sys};
use capi::{api, exec, exec_in, new_none, CApi, MethodDef, NoTracing, Obj};

/// The walker's source, compiled at the first walk.
const WALKER: &CStr = {
    const SRC: &str = concat!(include_str!("../holders.py"), "\0");
    match CStr::from_bytes_with_nul(SRC.as_bytes()) {
        Ok(s) => s,
        Err(_) => panic!("holders.py holds a NUL byte"),
    }
};

/// Registers the exit walk with `atexit`, leaving `sys.modules` as it was: the module and its
/// `register` are the interpreter's own ([`originals`]), never a replacement of
/// `builtins.__import__` or of `atexit.register` the program made.
const ARM: &CStr = c"_gpushim_original(_gpushim_module('atexit'), 'register')(_gpushim_exit_walk)
";

/// `Py_file_input` (Include/compile.h).
/// When the exit walk's atexit function was entered (monotonic ns; 0 before): the walk's
/// start as the collector sees it.
static EXIT_WALK_START_NS: AtomicU64 = AtomicU64::new(0);

const PY_FILE_INPUT: c_int = 257;
/// `METH_NOARGS` and `METH_O` (Include/methodobject.h).
const METH_NOARGS: c_int = 0x0004;
const METH_O: c_int = 0x0008;
/// `METH_VARARGS` (Include/methodobject.h).
const METH_VARARGS: c_int = 0x0001;

static EMIT_DEF: MethodDef =
    MethodDef { name: c"_gpushim_emit".as_ptr(), meth: emit, flags: METH_O, doc: std::ptr::null() };
static BFS_DEF: MethodDef =
    MethodDef { name: c"_gpushim_bfs".as_ptr(), meth: super::bfs::entry, flags: METH_VARARGS, doc: std::ptr::null() };
static FORK_DEF: MethodDef = MethodDef {
    name: c"_gpushim_fork_call".as_ptr(),
    meth: fork_call::entry,
    flags: METH_VARARGS,
    doc: std::ptr::null(),
};
static INTERRUPTED_DEF: MethodDef =
    MethodDef { name: c"_gpushim_interrupted".as_ptr(), meth: interrupted, flags: METH_NOARGS, doc: std::ptr::null() };
static EXIT_DEF: MethodDef =
    MethodDef { name: c"_gpushim_exit_walk".as_ptr(), meth: exit_walk, flags: METH_NOARGS, doc: std::ptr::null() };

/// No walk waits or runs.
const IDLE: u8 = 0;
/// A walk was asked for with `Py_AddPendingCall` and has not started.
const QUEUED: u8 = 1;
/// A walk runs (on the main thread).
const RUNNING: u8 = 2;

/// Where the one walk slot stands.
static SLOT: AtomicU8 = AtomicU8::new(IDLE);
/// The queued walk: `reason << 32 | number`.
static REQUEST: AtomicU64 = AtomicU64::new(0);
/// When it was queued, monotonic ns.
static QUEUED_AT: AtomicU64 = AtomicU64::new(0);
/// The `atexit` registration was asked for (stays set in a forked child, which inherits it).
static ARMED: AtomicBool = AtomicBool::new(false);
/// The exit walk ran in this process.
static EXIT_DONE: AtomicBool = AtomicBool::new(false);
/// The compiled walker's `walk` function and `emit` (strong references, never released); 0
/// before the first walk.
static WALK_FN: AtomicUsize = AtomicUsize::new(0);
/// The walker's `torch_history` function (a strong reference, never released), once compiled.
static TORCH_FN: AtomicUsize = AtomicUsize::new(0);
static EMIT_FN: AtomicUsize = AtomicUsize::new(0);

/// Asks, once, for the pending call that registers the exit walk. Called by the writer thread
/// when tracing starts (and when a libpython appears later); does nothing without a
/// CPython that is initialized, or with `GPUSHIM_HEAP_WALK=0`.
pub fn arm() {
    let Some(a) = api() else { return };
    // SAFETY: Py_IsInitialized may be called at any time without the GIL.
    if unsafe { (a.is_initialized)() } == 0 || ARMED.swap(true, AcqRel) {
        return;
    }
    // SAFETY: Py_AddPendingCall may be called from any thread without the GIL.
    if unsafe { (a.add_pending_call)(arm_pending, std::ptr::null_mut()) } != 0 {
        ARMED.store(false, Release);
    }
}

/// Asks for a walk for the report `reason` number `number`. Called by the writer thread only.
/// `None` when there is no CPython (nothing to report); otherwise the event to send at once
/// when the walk cannot be queued.
pub fn request(reason: WalkReason, number: u32) -> Option<HeapWalk> {
    let a = api()?;
    // SAFETY: as in `arm`.
    if unsafe { (a.is_initialized)() } == 0 {
        return None;
    }
    arm();
    let now = sys::now_ns();
    if SLOT.compare_exchange(IDLE, QUEUED, AcqRel, Acquire).is_err() {
        return Some(given_up(reason, number, WalkStatus::Skipped, now, 0));
    }
    REQUEST.store(u64::from(reason as u8) << 32 | u64::from(number), Release);
    QUEUED_AT.store(now, Release);
    // SAFETY: as in `arm`.
    if unsafe { (a.add_pending_call)(walk_pending, std::ptr::null_mut()) } != 0 {
        SLOT.store(IDLE, Release);
        return Some(given_up(reason, number, WalkStatus::Failed, now, 0));
    }
    None
}

/// The event for a queued walk that has not started within the cap, which is given up (its
/// pending call will do nothing). Called by the writer thread on each turn: one atomic load
/// when no walk waits.
pub fn poll() -> Option<HeapWalk> {
    if SLOT.load(Acquire) != QUEUED {
        return None;
    }
    let now = sys::now_ns();
    let waited = now.saturating_sub(QUEUED_AT.load(Acquire));
    if waited < config::heap_walk_ms().saturating_mul(1_000_000) {
        return None;
    }
    SLOT.compare_exchange(QUEUED, IDLE, AcqRel, Acquire).ok()?;
    let (reason, number) = unpack(REQUEST.load(Acquire))?;
    Some(given_up(reason, number, WalkStatus::Blocked, now, waited))
}

/// In a forked child: no walk waits or runs there; the exit walk has not run.
pub fn reset_after_fork() {
    SLOT.store(IDLE, Relaxed);
    // PyTorch's setting is the process's memory, which the child keeps; a queued call is not.
    TORCH_QUEUED.store(false, Relaxed);
    EXIT_DONE.store(false, Relaxed);
}

/// PyTorch's record of live blocks' stacks (`torch_history` in holders.py): not asked yet or
/// not yet possible, on, the program's own, or not possible (its values: holders.py's TORCH_*).
const TORCH_NOT_YET: u8 = 0;
static TORCH: AtomicU8 = AtomicU8::new(TORCH_NOT_YET);
/// A `torch_history` pending call is queued and has not run.
static TORCH_QUEUED: AtomicBool = AtomicBool::new(false);
/// When the latest `torch_history` call was queued (monotonic ns).
static TORCH_ASKED_NS: AtomicU64 = AtomicU64::new(0);
/// The least time between two `torch_history` calls while PyTorch has not initialized CUDA.
const TORCH_RETRY_NS: u64 = 200_000_000;

/// Asks the main thread, by a pending call, to turn on PyTorch's record of each live block's
/// Python stack (holders.py `torch_history`), so that the heap walks can name the line that
/// allocated each block inside the caching allocator's segments. Called by the writer thread
/// when an allocation came through PyTorch's CUDA caching allocator's library; does nothing
/// once it was turned on, found the program's own, or found impossible, nor more than once per
/// [`TORCH_RETRY_NS`], nor with `GPUSHIM_TORCH_STACKS=0` or heap walks off.
pub fn torch_stacks_wanted() {
    if !torch_stacks_open() {
        return;
    }
    let Some(a) = api() else { return };
    let now = sys::now_ns();
    if now.saturating_sub(TORCH_ASKED_NS.load(Acquire)) < TORCH_RETRY_NS || TORCH_QUEUED.swap(true, AcqRel) {
        return;
    }
    TORCH_ASKED_NS.store(now, Release);
    // SAFETY: as in `arm`.
    if unsafe { (a.is_initialized)() } == 0 || unsafe { (a.add_pending_call)(torch_pending, std::ptr::null_mut()) } != 0
    {
        TORCH_QUEUED.store(false, Release);
    }
}

/// Whether PyTorch's block stacks are still to be asked for: `GPUSHIM_TORCH_STACKS=1` and no
/// answer yet (two atomic loads: the writer looks before it searches an allocation's frames).
pub fn torch_stacks_open() -> bool {
    config::torch_stacks() && TORCH.load(Acquire) == TORCH_NOT_YET
}

/// The pending call of [`torch_stacks_wanted`]: runs `torch_history` and keeps its answer.
extern "C" fn torch_pending(_: *mut c_void) -> c_int {
    TORCH_QUEUED.store(false, Release);
    let Some(a) = api() else { return 0 };
    if !traced_here() {
        return 0;
    }
    from_python(a, |a| {
        // Nothing to do (and the walker not compiled) until the program imports torch.
        // SAFETY: the GIL is held; both calls return borrowed references (or NULL).
        let torch = unsafe {
            let modules = (a.import_get_module_dict)();
            !modules.is_null() && !(a.dict_get_item_string)(modules, c"torch".as_ptr()).is_null()
        };
        if !torch {
            return;
        }
        // SAFETY: the GIL is held (a pending call); NoTracing as in a walk.
        let _no_tracing = unsafe { NoTracing::new(a) };
        if walker(a).is_none() {
            return;
        }
        let f = TORCH_FN.load(Acquire) as Obj;
        if f.is_null() {
            return;
        }
        // SAFETY: the GIL is held; `f` is a live function (a reference kept for good); a NULL
        // argument tuple calls it without arguments; the result is released.
        unsafe {
            let r = (a.call_object)(f, std::ptr::null_mut());
            if r.is_null() {
                clear_keeping_interrupt(a);
                return;
            }
            let v = (a.long_as_long)(r);
            (a.decref)(r);
            (a.err_clear)();
            if (1..=3).contains(&v) {
                TORCH.store(v as u8, Release);
            }
        }
    });
    0
}

fn given_up(reason: WalkReason, number: u32, status: WalkStatus, ts_ns: u64, elapsed_ns: u64) -> HeapWalk {
    HeapWalk { reason, number, status, ts_ns, elapsed_ns, visited: 0, result: String::new() }
}

fn unpack(r: u64) -> Option<(WalkReason, u32)> {
    let reason = match (r >> 32) as u8 {
        1 => WalkReason::Snapshot,
        2 => WalkReason::Oom,
        3 => WalkReason::Exit,
        _ => return None,
    };
    Some((reason, r as u32))
}

/// The walker caught a KeyboardInterrupt (a SIGINT whose Python handler ran in the walker's
/// code): [`from_python`] hands it back to the program when the walker is done.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// `_gpushim_interrupted()` (`METH_NOARGS`): the walker says it caught a KeyboardInterrupt.
/// Only a flag: the SIGINT is made again once no walker code runs (raised again here, it would
/// be raised at once in the walker, which would catch it again).
extern "C" fn interrupted(_self: Obj, _args: Obj) -> Obj {
    INTERRUPTED.store(true, Release);
    let Some(a) = api() else { return std::ptr::null_mut() };
    new_none(a)
}

/// Clears the exception the walker raised; a KeyboardInterrupt (a SIGINT whose handler ran
/// where the walker could not catch it) is handed back to the program by [`from_python`].
///
/// # Safety
/// The GIL is held and an exception is set.
unsafe fn clear_keeping_interrupt(a: &CApi) {
    // SAFETY: the caller's promise; the variable holds the interpreter's exception type.
    unsafe {
        if (a.err_exception_matches)(*a.exc_keyboard_interrupt) != 0 {
            INTERRUPTED.store(true, Release);
        }
        (a.err_clear)();
    }
}

/// Runs `f` with the GIL held (the caller's promise) under `catch_unwind`, with the
/// interpreter's error indicator saved before and put back after, so that nothing `f` does
/// can leave an exception set. A KeyboardInterrupt the walker caught meanwhile is handed back
/// as the SIGINT it was (`PyErr_SetInterrupt`): the program's handler runs at its next check,
/// in the program's code.
fn from_python(a: &CApi, f: impl FnOnce(&CApi)) {
    let (mut t, mut v, mut tb) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the GIL is held (pending calls, atexit functions and builtin functions run with it).
    unsafe { (a.err_fetch)(&mut t, &mut v, &mut tb) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(a)));
    // SAFETY: as above; restores exactly what was fetched (clearing anything set since), then
    // trips SIGINT's flag (no Python code runs before this returns to the interpreter).
    unsafe {
        (a.err_clear)();
        (a.err_restore)(t, v, tb);
        if INTERRUPTED.swap(false, AcqRel) {
            (a.err_set_interrupt)();
        }
    }
}

/// Tracing runs in this very process (not a child that inherited the atexit registration).
fn traced_here() -> bool {
    state::STATE.load(Acquire) == state::ENABLED && state::TRACED_PID.load(Acquire) == sys::getpid_raw()
}

/// The pending call of [`arm`]: registers [`exit_walk`] with `atexit`.
extern "C" fn arm_pending(_: *mut c_void) -> c_int {
    let Some(a) = api() else { return 0 };
    from_python(a, |a| {
        // SAFETY: the GIL is held; every new reference is released, every NULL checked.
        unsafe {
            let hook = (a.cfunction_new_ex)(&EXIT_DEF, std::ptr::null_mut(), std::ptr::null_mut());
            if hook.is_null() {
                return;
            }
            let mut names = originals::make(a);
            names.push((c"_gpushim_exit_walk", hook));
            if let Some(r) = exec(a, ARM, c"<gpushim-arm>", &names) {
                (a.decref)(r);
            }
            for (_, o) in names {
                (a.decref)(o);
            }
        }
    });
    0
}

/// The pending call of [`request`]: runs the queued walk unless it was given up.
extern "C" fn walk_pending(_: *mut c_void) -> c_int {
    if SLOT.compare_exchange(QUEUED, RUNNING, AcqRel, Acquire).is_err() {
        return 0;
    }
    if let (Some(a), Some((reason, number))) = (api(), unpack(REQUEST.load(Acquire))) {
        if traced_here() {
            from_python(a, |a| run_walk(a, reason, number));
        }
    }
    SLOT.store(IDLE, Release);
    0
}

/// How long the walk of the final report took, ns (0: none ran); the exit path says it when the
/// exit was slow (`writer`).
pub static EXIT_WALK_NS: AtomicU64 = AtomicU64::new(0);

/// The `atexit` function: the walk of the final report, once per process.
extern "C" fn exit_walk(_self: Obj, _arg: Obj) -> Obj {
    let Some(a) = api() else { return std::ptr::null_mut() };
    if traced_here() && !EXIT_DONE.swap(true, AcqRel) && SLOT.swap(RUNNING, AcqRel) != RUNNING {
        let t0 = sys::now_ns();
        EXIT_WALK_START_NS.store(t0, Release);
        from_python(a, |a| run_walk(a, WalkReason::Exit, 0));
        EXIT_WALK_NS.store(sys::now_ns().saturating_sub(t0).max(1), Release);
        // Right after the walk, so that the scan reads the program the walk saw, before the
        // interpreter's teardown frees it (the report's live set is that moment's).
        crate::exit_scan::now();
        SLOT.store(IDLE, Release);
    }
    new_none(a)
}

/// The walker's `walk` function, compiled into a private namespace at first use.
fn walker(a: &CApi) -> Option<Obj> {
    let w = WALK_FN.load(Acquire);
    if w != 0 {
        return Some(w as Obj);
    }
    // SAFETY: called with the GIL held (from `run_walk`); references kept are never released.
    unsafe {
        let ns = (a.dict_new)();
        if ns.is_null() {
            (a.err_clear)();
            return None;
        }
        // The native core, when this interpreter allows it: the walker finds it by name.
        let bfs = if config::heap_walk_native() && super::bfs::available() {
            (a.cfunction_new_ex)(&BFS_DEF, std::ptr::null_mut(), std::ptr::null_mut())
        } else {
            std::ptr::null_mut()
        };
        if bfs.is_null() {
            (a.err_clear)();
        }
        let fork = (a.cfunction_new_ex)(&FORK_DEF, std::ptr::null_mut(), std::ptr::null_mut());
        if fork.is_null() {
            (a.err_clear)();
        }
        let intr = (a.cfunction_new_ex)(&INTERRUPTED_DEF, std::ptr::null_mut(), std::ptr::null_mut());
        if intr.is_null() {
            (a.err_clear)();
        }
        let mut names: Vec<(&CStr, Obj)> =
            [(c"_gpushim_bfs", bfs), (c"_gpushim_fork_call", fork), (c"_gpushim_interrupted", intr)]
                .into_iter()
                .filter(|(_, o)| !o.is_null())
                .collect();
        // The modules and module functions the walker calls, the interpreter's own.
        names.extend(originals::make(a));
        let r = exec_in(a, ns, WALKER, c"<gpushim-heap-walk>", &names);
        for (_, o) in names {
            // The namespace holds them now.
            (a.decref)(o);
        }
        match r {
            Some(r) => (a.decref)(r),
            None => {
                (a.decref)(ns);
                return None;
            }
        }
        let f = (a.dict_get_item_string)(ns, c"walk".as_ptr());
        let th = (a.dict_get_item_string)(ns, c"torch_history".as_ptr());
        let e = (a.cfunction_new_ex)(&EMIT_DEF, std::ptr::null_mut(), std::ptr::null_mut());
        if f.is_null() || e.is_null() || th.is_null() {
            (a.err_clear)();
            return None;
        }
        (a.incref)(f);
        (a.incref)(th);
        TORCH_FN.store(th as usize, Release);
        // The namespace stays alive through the function's globals.
        (a.decref)(ns);
        EMIT_FN.store(e as usize, Release);
        WALK_FN.store(f as usize, Release);
        Some(f)
    }
}

/// Calls `walk(reason, number, cap_ms, emit)` (compiling the walker first if needed), with the
/// program's trace and profile functions suspended.
fn run_walk(a: &CApi, reason: WalkReason, number: u32) {
    // SAFETY: run_walk is called with the GIL held (from_python).
    let _no_tracing = unsafe { NoTracing::new(a) };
    let Some(f) = walker(a) else {
        send(given_up(reason, number, WalkStatus::Failed, sys::now_ns(), 0));
        return;
    };
    let emit = EMIT_FN.load(Acquire) as Obj;
    let cap = i64::try_from(config::heap_walk_ms()).unwrap_or(i64::MAX);
    // SAFETY: the GIL is held; PyTuple_SetItem steals each reference given to it.
    unsafe {
        let args = (a.tuple_new)(4);
        if args.is_null() {
            (a.err_clear)();
            return;
        }
        let items = [
            (a.long_from_long_long)(reason as i64),
            (a.long_from_long_long)(i64::from(number)),
            (a.long_from_long_long)(cap),
        ];
        let mut ok = true;
        for (i, it) in items.into_iter().enumerate() {
            ok &= !it.is_null() && (a.tuple_set_item)(args, i as isize, it) == 0;
        }
        (a.incref)(emit);
        ok &= (a.tuple_set_item)(args, 3, emit) == 0;
        if ok {
            let r = (a.call_object)(f, args);
            if r.is_null() {
                clear_keeping_interrupt(a);
            } else {
                (a.decref)(r);
            }
        } else {
            (a.err_clear)();
        }
        (a.decref)(args);
    }
}

/// `_gpushim_emit(bytes)`: the walker's result, five little-endian u64 (reason, number,
/// status, elapsed ns, objects visited) then the JSON; queued for the writer.
extern "C" fn emit(_self: Obj, arg: Obj) -> Obj {
    let Some(a) = api() else { return std::ptr::null_mut() };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut p: *mut c_char = std::ptr::null_mut();
        let mut n: isize = 0;
        // SAFETY: the GIL is held; on success `p` points at `n` bytes owned by the bytes object,
        // which lives for this call.
        let bytes = unsafe {
            if (a.bytes_as_string_and_size)(arg, &mut p, &mut n) != 0 || p.is_null() || n < 0 {
                (a.err_clear)();
                return;
            }
            std::slice::from_raw_parts(p as *const u8, n as usize)
        };
        if let Some(h) = parse(bytes) {
            send(h);
        }
    }));
    new_none(a)
}

/// The walk result `emit` got, or `None` if it is malformed.
/// The longest walk result sent, bytes: the wire's largest frame (`MAX_FRAME`, 16 MiB) less
/// room for the event's other fields.
const MAX_RESULT: usize = gpushim_wire::MAX_FRAME as usize - 4096;

fn parse(b: &[u8]) -> Option<HeapWalk> {
    let word = |i: usize| -> Option<u64> { Some(u64::from_le_bytes(b.get(i * 8..i * 8 + 8)?.try_into().ok()?)) };
    let (r, n) = (word(0)?, word(1)?);
    if r > 0xff || n > 0xffff_ffff {
        return None;
    }
    let (reason, number) = unpack(r << 32 | n)?;
    let status = match word(2)? {
        0 => WalkStatus::Complete,
        1 => WalkStatus::Cut,
        _ => WalkStatus::Failed,
    };
    let (elapsed_ns, visited) = (word(3)?, word(4)?);
    // The exit walk starts when the atexit function is entered: the program's own work ended
    // then, before the walker was compiled (milliseconds at the first walk).
    let ts_ns = match (reason, EXIT_WALK_START_NS.load(Acquire)) {
        (WalkReason::Exit, t0) if t0 != 0 => t0,
        _ => sys::now_ns().saturating_sub(elapsed_ns),
    };
    let result = String::from_utf8_lossy(b.get(40..)?).into_owned();
    if result.len() > MAX_RESULT {
        // A frame the collector could not take would break the stream: the walk is said to
        // have failed instead, with the reason.
        let result = format!("{{\"error\":\"result too large ({} bytes)\"}}", result.len());
        return Some(HeapWalk { reason, number, status: WalkStatus::Failed, ts_ns, elapsed_ns, visited, result });
    }
    Some(HeapWalk { reason, number, status, ts_ns, elapsed_ns, visited, result })
}

/// Queues a walk's event for the writer (waiting for room like any event): through the calling
/// thread's ring when it has one, so that it comes before the thread's later events (the exit
/// walk's before the interpreter's teardown frees, which the collector tells by it), else
/// through the channel.
fn send(h: HeapWalk) {
    if let Some(tx) = state::channel() {
        if state::recording() {
            if let Err(m) = crate::ring::push_if_mine(Msg::HeapWalk(h)) {
                let _ = state::send_until(tx, m, u64::MAX);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_parse() {
        let mut b = Vec::new();
        for v in [1u64, 2, 1, 5_000_000, 1234] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(b"{\"objects\":[]}");
        let h = parse(&b).unwrap();
        assert_eq!(
            (h.reason, h.number, h.status, h.elapsed_ns, h.visited),
            (WalkReason::Snapshot, 2, WalkStatus::Cut, 5_000_000, 1234)
        );
        assert_eq!(h.result, "{\"objects\":[]}");
        assert!(parse(&b[..39]).is_none());
        b[0] = 9;
        assert!(parse(&b).is_none());
    }

    #[test]
    fn a_result_too_large_for_one_frame_is_a_failed_walk_that_says_so() {
        let mut b = Vec::new();
        for v in [3u64, 0, 0, 1, 2] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.resize(40 + MAX_RESULT + 1, b'x');
        let h = parse(&b).unwrap();
        assert_eq!(h.status, WalkStatus::Failed);
        assert_eq!(h.result, format!("{{\"error\":\"result too large ({} bytes)\"}}", MAX_RESULT + 1));
        b.truncate(40 + MAX_RESULT);
        assert_eq!(parse(&b).unwrap().status, WalkStatus::Complete);
    }
}
