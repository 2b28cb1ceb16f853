//! The stream-capture handlers of the `custom` entries of `hook.rs`: each runs the real begin
//! or end of a capture around the table of captures in progress (`capture.rs`), so that
//! stream-ordered calls need not ask the driver while no capture has begun.

use std::ffi::{c_int, c_void};

use crate::capture::{self, end};
use crate::real;

/// A begin of a capture on origin `stream`: [`capture::begin`], which asks the driver whether
/// the stream captures after a failed begin.
fn begin(stream: *mut c_void, call: impl FnOnce() -> c_int) -> c_int {
    capture::begin(stream, real::capturing_now, call)
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
            let origin = if $ptsz { real::per_thread($s) } else { $s };
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
