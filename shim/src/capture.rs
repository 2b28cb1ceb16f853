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
pub fn any(driver_has: impl Fn(&std::ffi::CStr) -> bool) -> bool {
    ACTIVE.load(Acquire) != 0 && still_any(driver_has)
}

/// [`any`] once the count is not 0: the first call checks the loaded driver for begin functions
/// the shim does not wrap (`driver_has`: whether the driver exports a name; called after a
/// stream-ordered call returned, so the driver is loaded; without a driver, nothing can capture)
/// and drops the count's initial 1 if it has none.
#[inline(never)]
fn still_any(driver_has: impl Fn(&std::ffi::CStr) -> bool) -> bool {
    if !CHECKED.swap(true, AcqRel) && !UNWRAPPED_BEGINS.iter().any(|n| driver_has(n)) {
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

/// Runs the real begin `call` of a capture on origin `stream` with the slot taken first;
/// `capturing_now` asks the driver whether a stream captures.
pub fn begin(
    stream: *mut c_void,
    capturing_now: impl FnOnce(*mut c_void) -> bool,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let k = key(stream);
    let took = k != 0 && insert(k);
    let r = call();
    // A failed begin: the slot goes unless the stream captures (another thread's begin on the
    // same stream won). The legacy stream (0, 1) cannot capture and is not asked.
    if r != 0 && took && ((stream as usize) <= 1 || !capturing_now(stream)) {
        remove(k);
    }
    r
}

/// Runs the real end `call` of the capture on origin `stream`; its slot goes if the capture ended.
pub fn end(stream: *mut c_void, call: impl FnOnce() -> c_int) -> c_int {
    let r = call();
    if r == 0 || r == INVALIDATED {
        remove(key(stream));
    }
    r
}

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
        assert!(!any(|_| false));
        assert_eq!(begin(s, |_| false, || 0), 0);
        assert!(any(|_| false));
        // The runtime's hook and the driver's for one begin: one slot.
        assert_eq!(begin(s, |_| false, || 0), 0);
        assert_eq!(ACTIVE.load(SeqCst), 1);
        // An end that fails otherwise (unjoined, 904) leaves the capture counted.
        assert_eq!(end(s, || 904), 904);
        assert!(any(|_| false));
        assert_eq!(end(s, || INVALIDATED), INVALIDATED);
        assert!(!any(|_| false));
        // A failed begin on the legacy stream takes nothing.
        assert_eq!(begin(std::ptr::null_mut(), |_| false, || 900), 900);
        assert_eq!(begin(h(1), |_| false, || 900), 900);
        assert!(!any(|_| false));
        // Per-thread default streams of two threads are two origins.
        assert_eq!(begin(h(2), |_| false, || 0), 0);
        let (began, wait) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let other = std::thread::spawn(move || {
            assert_eq!(begin(h(2), |_| false, || 0), 0);
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
        assert!(!any(|_| false));
    }
}
