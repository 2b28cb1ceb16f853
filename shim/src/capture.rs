//! Which stream captures are in progress, so that a stream-ordered call need not ask the driver
//! whether its stream captures while no capture has begun.
//!
//! A stream captures into a graph only between a successful begin (`cuStreamBeginCapture`,
//! `cuStreamBeginCapture_v2`, `cuStreamBeginCaptureToGraph`, their `_ptsz` variants) on the
//! capture's origin stream and the end (`cuStreamEndCapture`) on that same stream; another stream
//! joins a capture only by waiting on an event recorded in a stream that is capturing (CUDA
//! Programming Guide, "CUDA Graphs", "Stream Capture", "Cross-stream Dependencies and Events"),
//! and leaves it when the origin's capture ends (the end fails with
//! `CUDA_ERROR_STREAM_CAPTURE_UNJOINED` otherwise, CUDA Driver API, `cuStreamEndCapture`). So
//! while no origin stream is between its begin and its end, no stream captures, and
//! `cuStreamIsCapturing` (100 to 300 ns of the driver's locks on a real driver) need not be asked.
//! The runtime's `cudaStreamBeginCapture`, `cudaStreamBeginCaptureToGraph` and
//! `cudaStreamEndCapture` reach these driver functions through the driver table it loads by
//! `cuGetProcAddress`, whose answers the shim wraps (as a static runtime's `cudaMallocAsync`
//! reaches `cuMemAllocAsync`), and a program's own driver calls come by symbol, `dlsym` or
//! `cuGetProcAddress`: every begin is seen.
//!
//! The origins in progress are kept in [`SLOTS`] (lock-free: a begin may run in a thread that a
//! signal interrupted, or in a child forked while another thread held a lock). Errors lean to
//! asking: a begin takes its slot before the real call (a call on a joined stream in another
//! thread cannot run before the driver has begun the capture); a slot is dropped only when the
//! end succeeded or said the capture was invalidated (both end the capture: CUDA Driver API,
//! `cuStreamEndCapture`, "If the capture was invalidated ... a NULL graph will be returned"),
//! or when a failed begin leaves the stream not capturing; when the slots are full, captures are
//! counted as in progress for the rest of the process. A driver that offers a way to begin a
//! capture that the shim does not wrap (`UNWRAPPED_BEGINS`) keeps every call asking.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};

/// Capture origins the table can hold; more at once make [`ACTIVE`] stay above 0 for good.
const SLOTS_N: usize = 64;
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicU64 = AtomicU64::new(0);
/// The key ([`key`]) of each capture origin in progress; 0 for a free slot.
static SLOTS: [AtomicU64; SLOTS_N] = [EMPTY; SLOTS_N];
/// Occupied slots, plus begins that found no free slot (never taken back), plus 1 until the
/// driver is checked for begin functions the shim does not wrap ([`any`]), for good if it has one.
static ACTIVE: AtomicUsize = AtomicUsize::new(1);
/// Whether the driver was checked ([`still_any`]).
static CHECKED: AtomicBool = AtomicBool::new(false);
/// Functions that begin a capture and that the shim does not wrap: a driver that has any of them
/// (CUDA 13.3's `cuStreamBeginRecaptureToGraph`, the CUDA-in-graphics `cuStreamBeginCaptureToCig`)
/// keeps every stream-ordered call asking `cuStreamIsCapturing`, as before.
const UNWRAPPED_BEGINS: [&std::ffi::CStr; 3] =
    [c"cuStreamBeginRecaptureToGraph", c"cuStreamBeginRecaptureToGraph_ptsz", c"cuStreamBeginCaptureToCig"];

/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` (`cuda.h`): the end of an invalidated capture, which
/// ends it.
const INVALIDATED: c_int = 901;

/// Whether some capture may be in progress in the process: false only when every capture that
/// began has ended (one load).
#[inline]
pub fn any() -> bool {
    ACTIVE.load(Acquire) != 0 && still_any()
}

/// [`any`] once the count is not 0: the first call checks the loaded driver for begin functions
/// the shim does not wrap (called after a stream-ordered call returned, so the driver is loaded;
/// without a driver, nothing can capture) and drops the count's initial 1 if it has none.
#[inline(never)]
fn still_any() -> bool {
    if !CHECKED.swap(true, AcqRel) && !UNWRAPPED_BEGINS.iter().any(|n| crate::real::driver_has(n)) {
        ACTIVE.fetch_sub(1, SeqCst);
    }
    ACTIVE.load(Acquire) != 0
}

/// The table's key of origin stream `stream` (already mapped from a `_ptsz` call's 0 to
/// `CU_STREAM_PER_THREAD`, 2): the handle; for the per-thread default stream (2), which is each
/// thread's own, 2 and the thread id (a real handle is a pointer, aligned to 8).
fn key(stream: *mut c_void) -> u64 {
    let s = stream as u64;
    if s == 2 {
        2 | (u64::from(crate::sys::gettid()) << 32)
    } else {
        s
    }
}

/// Takes a slot for `k` unless one holds it already (the runtime's hook and the driver's for one
/// begin). True if this call took it.
fn insert(k: u64) -> bool {
    if SLOTS.iter().any(|s| s.load(Acquire) == k) {
        return false;
    }
    for s in SLOTS.iter() {
        if s.compare_exchange(0, k, AcqRel, Acquire).is_ok() {
            ACTIVE.fetch_add(1, SeqCst);
            return true;
        }
    }
    // No room: count it and never take it back (every later call asks the driver).
    ACTIVE.fetch_add(1, SeqCst);
    false
}

/// Frees every slot that holds `k`.
fn remove(k: u64) {
    for s in SLOTS.iter() {
        if s.compare_exchange(k, 0, AcqRel, Acquire).is_ok() {
            ACTIVE.fetch_sub(1, SeqCst);
        }
    }
}

/// Runs the real begin `call` of a capture on origin `stream` with the slot taken first.
fn begin(stream: *mut c_void, call: impl FnOnce() -> c_int) -> c_int {
    let k = key(stream);
    let took = k != 0 && insert(k);
    let r = call();
    // A failed begin: the slot goes unless the stream captures (another thread's begin on the
    // same stream won). The legacy stream (0, 1) cannot capture and is not asked.
    if r != 0 && took && ((stream as usize) <= 1 || !crate::real::capturing_now(stream)) {
        remove(k);
    }
    r
}

/// Runs the real end `call` of the capture on origin `stream`; its slot goes if the capture ended.
fn end(stream: *mut c_void, call: impl FnOnce() -> c_int) -> c_int {
    let r = call();
    if r == 0 || r == INVALIDATED {
        remove(key(stream));
    }
    r
}

/// `CUresult cuStreamBeginCapture(CUstream hStream)` (CUDA 10.0's ABI, `cuGetProcAddress`
/// versions before 10010).
pub type Begin1 = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)`.
pub type Begin2 = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
/// `CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode
/// *dependencies, const CUgraphEdgeData *dependencyData, size_t numDependencies,
/// CUstreamCaptureMode mode)`.
pub type BeginToGraph =
    unsafe extern "C" fn(*mut c_void, *mut c_void, *const *mut c_void, *const c_void, usize, c_int) -> c_int;
/// `CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)`.
pub type End = unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> c_int;

/// Defines a handler `$name(f, args...)` for `custom` entries of `hook.rs`: the capture's origin
/// is the first argument (`ptsz`: of a per-thread-default-stream ABI, where 0 means
/// `CU_STREAM_PER_THREAD`).
macro_rules! handler {
    ($(#[doc = $doc:literal])* $name:ident: $ty:ty, $what:ident, ptsz = $ptsz:literal, ($s:ident $(, $a:ident: $aty:ty)*)) => {
        $(#[doc = $doc])*
        ///
        /// # Safety
        /// The caller's contract for `f`, the real function; arguments are forwarded unchanged.
        pub unsafe fn $name(f: $ty, $s: *mut c_void $(, $a: $aty)*) -> c_int {
            let origin = if $ptsz { crate::real::per_thread($s) } else { $s };
            // SAFETY: the caller's arguments, unchanged, to the real function.
            $what(origin, || unsafe { f($s $(, $a)*) })
        }
    };
}

handler!(
    /// `cuStreamBeginCapture`'s handler.
    begin1: Begin1, begin, ptsz = false, (s));
handler!(
    /// `cuStreamBeginCapture_ptsz`'s handler.
    begin1_ptsz: Begin1, begin, ptsz = true, (s));
handler!(
    /// `cuStreamBeginCapture_v2`'s handler.
    begin2: Begin2, begin, ptsz = false, (s, mode: c_int));
handler!(
    /// `cuStreamBeginCapture_v2_ptsz`'s handler.
    begin2_ptsz: Begin2, begin, ptsz = true, (s, mode: c_int));
handler!(
    /// `cuStreamBeginCaptureToGraph`'s handler.
    begin_to_graph: BeginToGraph, begin, ptsz = false,
    (s, graph: *mut c_void, deps: *const *mut c_void, data: *const c_void, n: usize, mode: c_int));
handler!(
    /// `cuStreamBeginCaptureToGraph_ptsz`'s handler.
    begin_to_graph_ptsz: BeginToGraph, begin, ptsz = true,
    (s, graph: *mut c_void, deps: *const *mut c_void, data: *const c_void, n: usize, mode: c_int));
handler!(
    /// `cuStreamEndCapture`'s handler.
    end_capture: End, end, ptsz = false, (s, graph: *mut *mut c_void));
handler!(
    /// `cuStreamEndCapture_ptsz`'s handler.
    end_capture_ptsz: End, end, ptsz = true, (s, graph: *mut *mut c_void));

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream handle of value `v`.
    fn h(v: usize) -> *mut c_void {
        v as *mut c_void
    }

    #[test]
    fn a_capture_counts_from_its_begin_to_an_end_that_ends_it() {
        let s = h(0x7000_1000);
        assert!(!any());
        assert_eq!(begin(s, || 0), 0);
        assert!(any());
        // The runtime's hook and the driver's for one begin: one slot.
        assert_eq!(begin(s, || 0), 0);
        assert_eq!(ACTIVE.load(SeqCst), 1);
        // An end that fails otherwise (unjoined, 904) leaves the capture counted.
        assert_eq!(end(s, || 904), 904);
        assert!(any());
        assert_eq!(end(s, || INVALIDATED), INVALIDATED);
        assert!(!any());
        // A failed begin on the legacy stream takes nothing.
        assert_eq!(begin(std::ptr::null_mut(), || 900), 900);
        assert_eq!(begin(h(1), || 900), 900);
        assert!(!any());
        // Per-thread default streams of two threads are two origins.
        assert_eq!(begin(h(2), || 0), 0);
        let (began, wait) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let other = std::thread::spawn(move || {
            assert_eq!(begin(h(2), || 0), 0);
            began.0.send(()).unwrap();
            wait.1.recv().unwrap();
            assert_eq!(end(h(2), || 0), 0);
        });
        began.1.recv().unwrap();
        assert_eq!(ACTIVE.load(SeqCst), 2);
        assert_eq!(end(h(2), || 0), 0);
        assert_eq!(ACTIVE.load(SeqCst), 1);
        wait.0.send(()).unwrap();
        other.join().unwrap();
        assert!(!any());
    }
}
