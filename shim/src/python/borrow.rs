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
//! Once per backward pass: the waiting thread's chain is read in full (a few hundred system
//! calls) on an engine thread's first allocation, and remembered with the bytes of the links it
//! followed. Each later allocation on that engine thread reads those bytes again, with the thread
//! state's frame pointer, in one `process_vm_readv`: while they are all equal, the chain is the
//! one remembered (the same frames at the same addresses, with the same code objects,
//! instruction pointers and locals), and its frames are given again without another walk. Any
//! difference (the pass ended, another began) means a full read again.
//!
//! Cost: nothing on threads that have Python frames of their own or are not named
//! `pt_autograd_*` (one `pthread_getname_np` per thread, cached); on an engine thread, one
//! system call per allocation while a backward pass lasts, and a full read at each new one
//! (`scripts/bench-engine.sh`).

use crate::race_once::RaceOnce;
use std::cell::Cell;
use std::ffi::c_void;

use super::layout::{plausible, Layout};
use crate::per_thread::{zeroed_box, PerThread};
use gpushim_wire::PyFrame;

use super::layout::Model;
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

/// Most links of a remembered chain (frames and 3.12+'s shim frames).
const MAX_LINKS: usize = 2 * MAX_PY_FRAMES;
/// Most bytes of links read again per allocation.
const MAX_BYTES: usize = 16 << 10;
/// Most ranges read again per allocation (the thread state's pointers included): beyond it the
/// chain is not remembered.
const MAX_RANGES: usize = 8;
/// Links closer than this are read as one range (3.11+ keeps a thread's frames side by side).
const MERGE_GAP: usize = 1024;

/// An engine thread's memo of the chain it borrowed last: what to read again, the bytes read
/// when it was walked, and the frames it gave. All-zero bytes: nothing remembered.
struct Memo {
    /// Ranges to read again (`(address, length)`), the thread state's pointer first.
    ranges: [(u64, usize); MAX_RANGES],
    nranges: usize,
    /// Their bytes as read after the walk, one after another (`len` of them).
    bytes: [u8; MAX_BYTES],
    len: usize,
    /// The same ranges read again now.
    scratch: [u8; MAX_BYTES],
    /// The frames given, and how many.
    out: [PyFrame; MAX_PY_FRAMES],
    n: usize,
    /// `fast::gen()` after these frames were last given.
    gen: u64,
}

thread_local! {
    /// Whether this thread is one of PyTorch's autograd engine threads: 0 not asked yet, 1 yes,
    /// 2 no. Reset in a forked child (its only thread is no engine thread of the child's).
    static ENGINE: Cell<u8> = const { Cell::new(0) };
    /// On the heap (`per_thread`, about 34 KiB), made on an engine thread's first borrow. Used
    /// only inside the hooks' guard. Forgotten in a forked child.
    static MEMO: PerThread<Memo> = const { PerThread::new() };
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
    let _ = MEMO.try_with(|m| {
        // SAFETY: the child's only thread, outside any hook.
        if let Some(m) = unsafe { m.existing() } {
            m.nranges = 0;
        }
    });
}

/// True if and only if the calling thread is named `pt_autograd_*` (asked once per thread).
pub(crate) fn engine_thread() -> bool {
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
/// when no thread waits in a backward pass, or when anything could not be read. `trail` gets the
/// address of every link followed (`walk_in`), and the thread state's.
pub(crate) fn backward_frames(
    l: &Layout,
    out: &mut [Raw; MAX_PY_FRAMES],
    trail: &mut impl FnMut(usize),
) -> Option<usize> {
    if !engine_thread() {
        return None;
    }
    let api = API.get()?.as_ref()?;
    // SAFETY: it only reads the runtime's field; NULL once the interpreter's finalization has
    // cleared it (an engine thread can still allocate then).
    let main = unsafe { (api.main)() };
    if main.is_null() {
        return None;
    }
    // SAFETY: a pointer read of the main interpreter's list head.
    let mut ts = unsafe { (api.head)(main) } as usize;
    let m = Checked;
    for _ in 0..MAX_THREADS {
        if !plausible(ts) {
            return None;
        }
        // SAFETY: `ts` is (or was, if the thread ended meanwhile) a thread state of the
        // interpreter `l` describes; every read is checked.
        // The innermost frame first; the whole walk only for the thread that matches.
        if unsafe { walk_in(l, ts, out, &m, 1, &mut |_| {}) } == Some(1) && starts_backward(l, out[0].code) {
            trail(ts);
            // SAFETY: as above.
            return unsafe { walk_in(l, ts, out, &m, MAX_PY_FRAMES, trail) }.filter(|&n| n > 0);
        }
        // SAFETY: a checked read.
        ts = unsafe { m.rd::<usize>(ts + TS_NEXT) }?;
    }
    None
}

/// The result of [`borrowed_into`].
pub(crate) struct Borrowed {
    /// Frames written.
    pub(crate) n: usize,
    /// True if and only if they may differ from those this thread's previous capture gave.
    pub(crate) changed: bool,
}

/// On an engine thread (the caller checked [`engine_thread`]), the frames of the thread waiting
/// for its backward pass, interned into `out`: from this thread's memo while the chain read again
/// is byte for byte the one remembered, else by [`backward_frames`] and `intern`, remembered for
/// the next allocation. `None` as [`backward_frames`]. `gen` is `fast::gen()` now. Only inside
/// the hooks' guard.
pub(crate) fn borrowed_into(
    l: &Layout,
    out: &mut [PyFrame; MAX_PY_FRAMES],
    gen: u64,
    intern: impl FnOnce(&[Raw], &mut [PyFrame; MAX_PY_FRAMES]) -> Option<usize>,
) -> Option<Borrowed> {
    let Ok(memo) = MEMO.try_with(|m| {
        // SAFETY: this thread's memo, one use at a time (inside the guard).
        unsafe { m.get(new_memo) as *mut Memo }
    }) else {
        let mut raw = [Raw::default(); MAX_PY_FRAMES];
        let n = backward_frames(l, &mut raw, &mut |_| {})?;
        return Some(Borrowed { n: intern(&raw[..n], out)?, changed: true });
    };
    // SAFETY: made above, used by this call alone.
    let memo = unsafe { &mut *memo };
    if memo.nranges > 0 {
        let len = memo.len;
        if crate::sys::read_own_ranges(&memo.ranges[..memo.nranges], &mut memo.scratch[..len])
            && memo.scratch[..len] == memo.bytes[..len]
        {
            out[..memo.n].copy_from_slice(&memo.out[..memo.n]);
            let changed = memo.gen != gen;
            return Some(Borrowed { n: memo.n, changed });
        }
        memo.nranges = 0;
    }
    let mut raw = [Raw::default(); MAX_PY_FRAMES];
    let mut links = [0usize; MAX_LINKS + 1];
    let mut k = 0usize;
    let n = backward_frames(l, &mut raw, &mut |a| {
        if k < links.len() {
            links[k] = a;
        }
        k += 1;
    })?;
    let n = intern(&raw[..n], out)?;
    if k <= links.len() && remember(l, memo, &links[..k]) {
        memo.out[..n].copy_from_slice(&out[..n]);
        memo.n = n;
    } else {
        memo.nranges = 0;
    }
    Some(Borrowed { n, changed: true })
}

/// Records `gen` as the generation at which this thread's memo last gave its frames.
pub(crate) fn given_at(gen: u64) {
    let _ = MEMO.try_with(|m| {
        // SAFETY: this thread's memo, one use at a time (inside the guard).
        if let Some(m) = unsafe { m.existing() } {
            m.gen = gen;
        }
    });
}

fn new_memo() -> Box<Memo> {
    // SAFETY: all-zero bytes are a valid `Memo` (integers, byte arrays, `PyFrame`s of zeros).
    unsafe { zeroed_box::<Memo>() }
}

/// Works out the ranges that hold the chain `links` (the thread state first, then every link
/// followed, innermost first) and reads them once, as the reference the next allocations compare
/// with. False (nothing remembered) when they do not fit the memo, cannot be read, or the chain
/// read back is not the one walked (the thread moved meanwhile).
fn remember(l: &Layout, memo: &mut Memo, links: &[usize]) -> bool {
    let [ts, frames @ ..] = links else { return false };
    if frames.is_empty() {
        return false;
    }
    // The link to the innermost frame: the thread state's, or for 3.11 and 3.12 that of the C
    // frame of the interpreter loop running it (whose address cannot change while the thread
    // waits; another loop's C frame later at that address is followed only if it links to the
    // same frames, whose bytes are then compared too).
    let mut ranges = [(0u64, 0usize); MAX_RANGES];
    let mut head = [0u8; 8];
    if !crate::sys::read_own_ranges(&[((ts + l.off.ts_frame) as u64, 8)], &mut head) {
        return false;
    }
    let first_link = if matches!(l.off.model, Model::Py311 | Model::Py312) {
        let cframe = usize::from_ne_bytes(head);
        if !plausible(cframe) {
            return false;
        }
        cframe + l.off.cframe_current
    } else {
        ts + l.off.ts_frame
    };
    ranges[0] = (first_link as u64, 8);
    let mut nr = 1;
    // Each link's fields, from its start to the last field the walk reads, merged into ranges.
    let end = [l.off.fr_code, l.off.fr_previous, l.off.fr_instr, l.off.fr_owner, l.off.fr_is_entry]
        .into_iter()
        .max()
        .unwrap_or(0)
        + 8;
    let mut sorted = [0usize; MAX_LINKS];
    let sorted = &mut sorted[..frames.len().min(MAX_LINKS)];
    sorted.copy_from_slice(&frames[..sorted.len()]);
    sorted.sort_unstable();
    let (mut lo, mut hi) = (sorted[0], sorted[0] + end);
    for &a in sorted[1..].iter().chain(std::iter::once(&usize::MAX)) {
        if a != usize::MAX && a <= hi + MERGE_GAP {
            hi = hi.max(a + end);
            continue;
        }
        if nr == MAX_RANGES {
            return false;
        }
        ranges[nr] = (lo as u64, hi - lo);
        nr += 1;
        if a != usize::MAX {
            (lo, hi) = (a, a + end);
        }
    }
    let total: usize = ranges[..nr].iter().map(|r| r.1).sum();
    if total > MAX_BYTES || !crate::sys::read_own_ranges(&ranges[..nr], &mut memo.bytes[..total]) {
        return false;
    }
    // The chain as read back: the thread state's (and C frame's) link is the innermost walked,
    // and each link's `previous` is the next one walked.
    let word = |addr: usize| -> Option<usize> {
        let mut at = 0;
        for &(start, len) in &ranges[..nr] {
            let start = start as usize;
            if addr >= start && addr + 8 <= start + len {
                let o = at + addr - start;
                return Some(usize::from_ne_bytes(memo.bytes[o..o + 8].try_into().ok()?));
            }
            at += len;
        }
        None
    };
    let first = word(first_link);
    if first != Some(frames[0]) {
        return false;
    }
    for w in frames.windows(2) {
        if word(w[0] + l.off.fr_previous) != Some(w[1]) {
            return false;
        }
    }
    memo.ranges = ranges;
    memo.nranges = nr;
    memo.len = total;
    true
}
