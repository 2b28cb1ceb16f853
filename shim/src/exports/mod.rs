//! Every symbol this library exports: the inventory of what we intercept.
//!
//! The CUDA functions are generated from the one list in `hook.rs`. Each has the same shape:
//! find the real function (for a runtime function, the one its caller reaches: the export's
//! entry passes the return address on to `route.rs`, see `export!`), or return the error CUDA
//! gives when the library is missing (`3`, not initialized); enter the re-entrancy guard (or
//! forward at once if this thread is already inside an intercepted call), call the real function
//! with the caller's arguments unchanged, record a small event, and return the real result
//! unchanged. `custom` entries do the same in
//! a handler of their own (`vmm.rs`, `procaddr.rs`, `capture.rs`). The other exports are `dlsym`
//! (dlsym.rs), the exits that run no atexit handler (quick.rs), the end of `main` and `exit`
//! (start.rs) and the C entry points of the Python API (api.rs).
//!
//! Signatures are those of CUDA 13.0's `cuda_runtime_api.h` and `cuda.h`; the `_ptsz` variants
//! are the per-thread-default-stream ABIs of the same functions.
#![allow(non_snake_case)]

mod api;
mod arrays;
mod capture;
mod contexts;
mod dlsym;
mod graphs;
mod procaddr;
mod quick;
mod start;
mod vmm;

use std::ffi::{c_char, c_int, c_uint, c_void};

use gpushim_wire::{Api, Kind};

use arrays::{Array3dDesc, ArrayDesc, ChannelDesc, Extent};

use crate::hook::{for_each_hook, Hook};
use crate::record::{self, Guard, DEV_CURRENT};
use crate::{real, route};

/// `CUdeviceptr`.
type DevPtr = u64;
/// `CUresult` / `cudaError_t`: 3 is `CUDA_ERROR_NOT_INITIALIZED` / `cudaErrorInitializationError`.
const NOT_INITIALIZED: c_int = 3;
/// `CUDA_ERROR_NOT_FOUND`.
const NOT_FOUND: c_int = 500;

/// An out-pointer an allocation function writes its result through.
///
/// The real function writes into a slot of the hook's own ([`OutPtr::staged`]), and the hook
/// copies what it wrote into the caller's out-parameter ([`OutPtr::publish`]) only once the
/// allocation has its sequence number: another thread that frees the pointer as soon as it
/// appears there then always frees it after its allocation in the stream.
trait OutPtr: Copy {
    /// The hook's slot for what the real function writes.
    type Slot;
    /// A slot holding [`UNWRITTEN`] in each field, to tell which fields the real call wrote.
    fn slot(self) -> Self::Slot;
    /// An out-pointer to `slot`, or NULL when `self` is NULL (the real function gets the
    /// caller's NULL).
    fn staged(self, slot: *mut Self::Slot) -> Self;
    /// The value written, as an address; 0 for a NULL out-pointer.
    ///
    /// # Safety
    /// Call only after the real function returned success, which means it wrote the target.
    unsafe fn value(self) -> u64;
    /// Writes each field of `slot` that the real call wrote into `self` (nothing for NULL).
    ///
    /// # Safety
    /// `self` is the caller's out-parameter, which the real function would have written.
    unsafe fn publish(self, slot: &Self::Slot);
}

/// What a slot field holds until the real call writes it: an odd address, which no allocation
/// function returns.
const UNWRITTEN: usize = 0x6770_7573_6869_6d01;

impl OutPtr for *mut *mut c_void {
    type Slot = *mut c_void;
    fn slot(self) -> Self::Slot {
        UNWRITTEN as *mut c_void
    }
    fn staged(self, slot: *mut Self::Slot) -> Self {
        if self.is_null() {
            self
        } else {
            slot
        }
    }
    unsafe fn value(self) -> u64 {
        if self.is_null() {
            0
        } else {
            // SAFETY: non-NULL and written by the real call (the caller's contract).
            unsafe { *self as u64 }
        }
    }
    unsafe fn publish(self, slot: &Self::Slot) {
        if !self.is_null() && *slot as usize != UNWRITTEN {
            // SAFETY: the caller's out-parameter (the caller's contract).
            unsafe { self.write(*slot) }
        }
    }
}

impl OutPtr for *mut DevPtr {
    type Slot = DevPtr;
    fn slot(self) -> Self::Slot {
        UNWRITTEN as DevPtr
    }
    fn staged(self, slot: *mut Self::Slot) -> Self {
        if self.is_null() {
            self
        } else {
            slot
        }
    }
    unsafe fn value(self) -> u64 {
        if self.is_null() {
            0
        } else {
            // SAFETY: non-NULL and written by the real call (the caller's contract).
            unsafe { *self }
        }
    }
    unsafe fn publish(self, slot: &Self::Slot) {
        if !self.is_null() && *slot != UNWRITTEN as DevPtr {
            // SAFETY: the caller's out-parameter (the caller's contract).
            unsafe { self.write(*slot) }
        }
    }
}

/// `struct cudaPitchedPtr` (driver_types.h), which `cudaMalloc3D` writes: the allocation's
/// address, its pitch (bytes per row) and the logical width and height asked for.
#[repr(C)]
pub struct PitchedPtr {
    ptr: *mut c_void,
    pitch: usize,
    xsize: usize,
    ysize: usize,
}

impl OutPtr for *mut PitchedPtr {
    type Slot = PitchedPtr;
    fn slot(self) -> Self::Slot {
        PitchedPtr { ptr: UNWRITTEN as *mut c_void, pitch: UNWRITTEN, xsize: UNWRITTEN, ysize: UNWRITTEN }
    }
    fn staged(self, slot: *mut Self::Slot) -> Self {
        if self.is_null() {
            self
        } else {
            slot
        }
    }
    unsafe fn value(self) -> u64 {
        if self.is_null() {
            0
        } else {
            // SAFETY: non-NULL and written by the real call (the caller's contract).
            unsafe { (*self).ptr as u64 }
        }
    }
    unsafe fn publish(self, slot: &Self::Slot) {
        if self.is_null() {
            return;
        }
        // SAFETY: the caller's out-parameter (the caller's contract); each field is written
        // through a raw place, as the real function would have written it.
        unsafe {
            if slot.ptr as usize != UNWRITTEN {
                std::ptr::addr_of_mut!((*self).ptr).write(slot.ptr);
            }
            for (field, got) in [
                (std::ptr::addr_of_mut!((*self).pitch), slot.pitch),
                (std::ptr::addr_of_mut!((*self).xsize), slot.xsize),
                (std::ptr::addr_of_mut!((*self).ysize), slot.ysize),
            ] {
                if got != UNWRITTEN {
                    field.write(got);
                }
            }
        }
    }
}

/// Bytes of a pitched allocation, `row × height`; saturates instead of overflowing, because
/// the caller may pass any sizes (the real function rejects those that overflow) and an
/// overflow would panic inside the hook in a debug build.
fn pitched(row: usize, height: usize) -> u64 {
    (row as u64).saturating_mul(height as u64)
}

/// The body of one export, by the entry's shape (see `hook.rs`).
macro_rules! hook_body {
    // The shapes' common parts. `@enter`: enters the re-entrancy guard for the rest of the
    // enclosing block, or forwards at once when this thread is already inside an intercepted
    // call (`phase` names the call for the probe: 0 an allocation, 1 a free).
    (@enter $phase:literal, ($($arg:ident),*), $f:ident) => {
        crate::probe::probe!(enter $phase);
        let Some(_g) = Guard::enter() else {
            crate::probe::probe!(InnerHook);
            // SAFETY: the caller's arguments, unchanged, to the real function.
            let r = unsafe { $f($($arg),*) };
            crate::probe::probe!(Driver);
            return r;
        };
    };
    // `@stage`: the out-parameter `$out` is shadowed by one pointing at the hook's own slot
    // (`OutPtr`) for the rest of the enclosing block; `@publish` copies what the real call wrote
    // there to the caller's, after the event took its sequence number.
    (@stage $out:ident, $caller:ident, $slot:ident) => {
        let $caller = $out;
        let mut $slot = OutPtr::slot($caller);
        let $out = OutPtr::staged($caller, std::ptr::addr_of_mut!($slot));
    };
    (@publish $caller:ident, $slot:ident) => {
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        // SAFETY: the caller's own out-parameter, given what the real call wrote.
        unsafe { OutPtr::publish($caller, &$slot) };
    };
    // `@call`: the real call, the caller's arguments unchanged (an out-parameter staged).
    (@call ($($arg:ident),*), $f:ident) => {{
        crate::probe::probe!(real_begins);
        // SAFETY: the caller's arguments, unchanged, to the real function.
        let r = unsafe { $f($($arg),*) };
        crate::probe::probe!(real_ends);
        r
    }};
    // `@free`: a free's sequence number before the real call, its event after.
    (@free $api:ident, $addr:expr, $stream:expr, ($($arg:ident),*), $f:ident) => {{
        let addr = $addr as u64;
        crate::probe::probe!(Guard);
        let ticket = record::free_begin(Api::$api, addr, $stream as u64);
        crate::probe::probe!(FreeBegin);
        let r = hook_body!(@call ($($arg),*), $f);
        record::free_end(ticket, Api::$api, addr, $stream as u64, r);
        crate::probe::probe!(FreeEnd);
        r
    }};
    // An allocation returned through an out-pointer.
    (alloc($kind:ident, $api:ident) { out = $out:ident; size = $size:expr; req = $req:expr; device = $dev:expr; stream = $stream:expr }
        $v:ident, ($($arg:ident),*), $f:ident) => {{
        hook_body!(@enter 0, ($($arg),*), $f);
        crate::probe::probe!(Guard);
        hook_body!(@stage $out, caller_out, out_slot);
        let r = hook_body!(@call ($($arg),*), $f);
        if r == 0 {
            // SAFETY: the real call succeeded, so it wrote its out-parameters.
            let (addr, size) = unsafe { ($out.value(), $size) };
            record::alloc(Api::$api, Kind::$kind, r, addr, size, $dev, $stream as u64);
        } else {
            #[allow(unused_unsafe)] // most entries' `req` is plain arithmetic
            // SAFETY: `req` reads only what the caller passed (sizes, descriptors), which the
            // function's contract makes valid whatever the call returned.
            let req = unsafe { $req };
            record::alloc(Api::$api, Kind::$kind, r, 0, req, $dev, $stream as u64);
        }
        hook_body!(@publish caller_out, out_slot);
        r
    }};
    // A stream-ordered allocation: on a stream that is capturing into a graph it makes an
    // allocation node (not live until the graph is launched; `graphs.rs`), else an allocation.
    (async_alloc($kind:ident, $api:ident) { out = $out:ident; size = $size:expr; req = $req:expr; device = $dev:expr; stream = $stream:expr; capture = $cap:expr }
        $v:ident, ($($arg:ident),*), $f:ident) => {{
        hook_body!(@enter 0, ($($arg),*), $f);
        crate::probe::probe!(Guard);
        hook_body!(@stage $out, caller_out, out_slot);
        let r = hook_body!(@call ($($arg),*), $f);
        // Asked first: on a capturing stream the shim may make no call the capture does not
        // support. `cuStreamGetDevice` (the `device` of these entries) is one: it fails with
        // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and the program's capture ends with
        // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (CUDA 13.0; docs/gpu-matrix.md). The current
        // device (`cuCtxGetDevice`, allowed) stands in; the node's own device comes with the
        // instantiation.
        let capturing = real::capturing($cap);
        if r == 0 {
            // SAFETY: the real call succeeded, so it wrote its out-parameters.
            let (addr, size) = unsafe { ($out.value(), $size) };
            if capturing {
                record::graph_node(Api::$api, Kind::$kind, addr, size, DEV_CURRENT, 0, $stream as u64);
            } else {
                record::alloc(Api::$api, Kind::$kind, r, addr, size, $dev, $stream as u64);
            }
        } else {
            let device = if capturing { DEV_CURRENT } else { $dev };
            record::alloc(Api::$api, Kind::$kind, r, 0, $req, device, $stream as u64);
        }
        hook_body!(@publish caller_out, out_slot);
        r
    }};
    // A stream-ordered free: on a capturing stream it makes a free node of the graph being
    // captured (seen when the graph is instantiated), not a free now.
    (async_free($api:ident) { addr = $addr:expr; stream = $stream:expr; capture = $cap:expr } $v:ident, ($($arg:ident),*), $f:ident) => {{
        hook_body!(@enter 1, ($($arg),*), $f);
        if real::capturing($cap) {
            // SAFETY: the caller's arguments, unchanged, to the real function.
            return unsafe { $f($($arg),*) };
        }
        hook_body!(@free $api, $addr, $stream, ($($arg),*), $f)
    }};
    // A free.
    (free($api:ident) { addr = $addr:expr; stream = $stream:expr } $v:ident, ($($arg:ident),*), $f:ident) => {{
        hook_body!(@enter 1, ($($arg),*), $f);
        hook_body!(@free $api, $addr, $stream, ($($arg),*), $f)
    }};
    // A call counted as the program's activity (`state::ACTIVITY`), then forwarded: no guard,
    // no record, one relaxed increment.
    (count() $v:ident, ($($arg:ident),*), $f:ident) => {{
        crate::state::ACTIVITY.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller's arguments, unchanged, to the real function.
        unsafe { $f($($arg),*) }
    }};
    // A handler of its own.
    (custom($handler:path, $missing:expr) $v:ident, ($($arg:ident),*), $f:ident) => {{
        // SAFETY: the handler's contract is the export's: the real function and the caller's
        // arguments, unchanged.
        unsafe { $handler($f, $($arg),*) }
    }};
}

/// The error an export returns when no CUDA library defines its real function.
macro_rules! missing {
    (custom($handler:path, $missing:expr)) => {
        $missing
    };
    ($shape:ident($($sarg:tt)*)) => {
        NOT_INITIALIZED
    };
}

/// One element per argument counted.
macro_rules! one {
    ($x:ident) => {
        0u8
    };
}

/// One export, by the library of its entry.
///
/// A driver function (one driver per process) calls the one slot of `real.rs`. A runtime
/// function is routed by its caller (`route.rs`, several runtimes in one process): its exported
/// entry is a few instructions that pass the return address on as a first argument, shifting
/// the others by one register, and jump to `$v::routed`, which finds the real function the
/// caller would have reached. Stack-passed arguments (a `cudaExtent` by value on x86-64) stay
/// where they are, since the jump keeps the stack as the caller left it; at most five register
/// arguments (asserted) leave room for the sixth. `$v::fixed::<K>` are the copies `dlsym`
/// hands out, each bound to one real function.
macro_rules! export {
    (driver, $v:ident, $name:ident, ($($arg:ident: $ty:ty),*), [$($docs:tt)*], [$($missing:tt)*], [$($body:tt)*]) => {
        $($docs)*
        ///
        /// # Safety
        /// The same contract as the CUDA function of this name; arguments are forwarded unchanged.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            type F = unsafe extern "C" fn($($ty),*) -> c_int;
            let Some(a) = real::real(Hook::$v) else { return missing!($($missing)*) };
            // SAFETY: the slot holds the real function of exactly this ABI variant.
            let f = unsafe { std::mem::transmute::<usize, F>(a) };
            hook_body!($($body)* $v, ($($arg),*), f)
        }
    };
    (runtime, $v:ident, $name:ident, ($($arg:ident: $ty:ty),*), [$($docs:tt)*], [$($missing:tt)*], [$($body:tt)*]) => {
        #[allow(non_snake_case)]
        mod $v {
            use super::*;

            const _: () = assert!(
                <[u8]>::len(&[$(one!($arg)),*]) <= 5,
                "the entry passes the return address in the sixth register"
            );

            /// The export's body: `ra` is the caller's return address.
            pub(super) unsafe extern "C" fn routed(ra: usize, $($arg: $ty),*) -> c_int {
                type F = unsafe extern "C" fn($($ty),*) -> c_int;
                crate::probe::probe!(start);
                let Some(a) = route::routed(Hook::$v, ra) else { return missing!($($missing)*) };
                // SAFETY: the caller's binding of exactly this ABI variant.
                let f = unsafe { std::mem::transmute::<usize, F>(a) };
                hook_body!($($body)* $v, ($($arg),*), f)
            }

            /// Fixed copy `K`, handed out by `dlsym`.
            pub(super) unsafe extern "C" fn fixed<const K: usize>($($arg: $ty),*) -> c_int {
                type F = unsafe extern "C" fn($($ty),*) -> c_int;
                let a = route::fixed_real(Hook::$v, K);
                if a == 0 {
                    return missing!($($missing)*);
                }
                // SAFETY: the real function `dlsym` found for this copy, of exactly this ABI variant.
                let f = unsafe { std::mem::transmute::<usize, F>(a) };
                hook_body!($($body)* $v, ($($arg),*), f)
            }

            /// The address of fixed copy `k` (below `route::INSTANCES`).
            pub(super) fn fixed_copy(k: usize) -> usize {
                let all: [usize; route::INSTANCES] = [
                    fixed::<0> as *const () as usize,
                    fixed::<1> as *const () as usize,
                    fixed::<2> as *const () as usize,
                    fixed::<3> as *const () as usize,
                ];
                all[k]
            }
        }

        $($docs)*
        ///
        /// # Safety
        /// The same contract as the CUDA function of this name; arguments are forwarded unchanged.
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            std::arch::naked_asm!(
                "mov r9, r8",
                "mov r8, rcx",
                "mov rcx, rdx",
                "mov rdx, rsi",
                "mov rsi, rdi",
                "mov rdi, qword ptr [rsp]",
                "jmp {routed}",
                routed = sym $v::routed,
            )
        }

        $($docs)*
        ///
        /// # Safety
        /// The same contract as the CUDA function of this name; arguments are forwarded unchanged.
        #[cfg(target_arch = "aarch64")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            std::arch::naked_asm!(
                "mov x6, x5",
                "mov x5, x4",
                "mov x4, x3",
                "mov x3, x2",
                "mov x2, x1",
                "mov x1, x0",
                "mov x0, x30",
                "b {routed}",
                routed = sym $v::routed,
            )
        }

        $($docs)*
        ///
        /// Without the return address (no entry in assembly for this target), every caller gets
        /// the one process-wide slot.
        ///
        /// # Safety
        /// The same contract as the CUDA function of this name; arguments are forwarded unchanged.
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            // SAFETY: the caller's arguments, unchanged.
            unsafe { $v::routed(0, $($arg),*) }
        }
    };
}

/// The fixed copy `k` of a runtime entry's export; `None` for a driver entry.
macro_rules! fixed_of {
    (runtime, $v:ident, $k:expr) => {
        Some($v::fixed_copy($k))
    };
    (driver, $v:ident, $k:expr) => {
        None
    };
}

/// Generates every export, [`wrapper`] and [`fixed_wrapper`] from the list.
macro_rules! define_exports {
    ($(
        $(#[doc = $doc:literal])*
        $v:ident = $name:ident($($arg:ident: $ty:ty),*) in $lib:ident $(($proc:literal, $minv:literal, $pt:ident))?
            => $shape:ident ($($sarg:tt)*) $({ $($field:tt)* })?;
    )*) => {
        $(
            export!($lib, $v, $name, ($($arg: $ty),*), [$(#[doc = $doc])*], [$shape($($sarg)*)],
                [$shape($($sarg)*) $({ $($field)* })?]);
        )*

        /// Our exported function for `h`.
        pub(crate) fn wrapper(h: Hook) -> usize {
            match h {
                $(Hook::$v => $name as *const () as usize,)*
            }
        }

        /// Fixed copy `k` (below `route::INSTANCES`) of our export of the runtime function `h`,
        /// which calls the real function `route::claim_fixed` bound to it; `None` for a driver
        /// function.
        pub(crate) fn fixed_wrapper(h: Hook, k: usize) -> Option<usize> {
            match h {
                $(Hook::$v => fixed_of!($lib, $v, k),)*
            }
        }
    };
}

for_each_hook!(define_exports);
