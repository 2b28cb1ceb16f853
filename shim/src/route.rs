//! Several CUDA runtimes in one process (a framework's bundled `libcudart` next to the
//! system's): each runtime call goes to the runtime its caller would have reached without us.
//!
//! - A call bound to our export by symbol (the program's own `cudaMalloc`, a library's, a
//!   pointer from `dlsym(RTLD_DEFAULT)`) is routed by its return address, which the export's
//!   entry passes on (`exports/mod.rs`): the calling module's binding is looked up once
//!   (`loader::binding_for_caller`: the loader's own rule, global scope first and then the
//!   module's dependencies, with the symbol version the module requires) and kept per module,
//!   so the fast path is a scan of a few address ranges and a load.
//! - A pointer our `dlsym(handle, name)` hands out calls the function found behind that handle
//!   for good: one of [`INSTANCES`] fixed copies of each export, each bound to one real function.
//!
//! Callers not in the table (more than [`CALLERS`] modules, an address in no module), callers
//! whose scopes define nothing (a pointer passed on), and targets without a return address go
//! to the one process-wide slot of `real.rs`. A call that reaches the export by a tail jump
//! (`jmp cudaMalloc@plt`) returns to its caller's caller and is routed as that module's.
//! Every address stored here comes from a library kept loaded (`loader::pin`); calling modules
//! are not kept loaded: one closed and replaced by another at the same address keeps the first
//! one's bindings (still loaded, so never a jump into unmapped memory).

use std::sync::atomic::{AtomicUsize, Ordering::*};

use crate::hook::{Hook, N};
use crate::{loader, real};

/// Fixed copies of each runtime export, for pointers handed out by `dlsym(handle, name)`: as
/// many distinct runtimes per function; a further one gets its own function unwrapped.
pub const INSTANCES: usize = 4;
/// Calling modules whose bindings are kept.
const CALLERS: usize = 64;

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicUsize = AtomicUsize::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const SLOTS: [AtomicUsize; N] = [ZERO; N];

/// One calling module: `[start, start + len)` of its mapping and its binding of each hook (0
/// until its first call of that hook).
struct Caller {
    start: AtomicUsize,
    len: AtomicUsize,
    real: [AtomicUsize; N],
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Caller = Caller { start: ZERO, len: ZERO, real: SLOTS };
/// The calling modules seen, in order of their first call; entries below [`USED`] are
/// published (their range is written before `USED` grows past them).
static TABLE: [Caller; CALLERS] = [EMPTY; CALLERS];
static USED: AtomicUsize = AtomicUsize::new(0);
/// The last page (address / 4096) a call returned to that lies in no module (generated code):
/// its calls take the process-wide slot without a module scan each.
static NO_MODULE: AtomicUsize = AtomicUsize::new(0);
/// The real function of each fixed copy of each export; 0 until a `dlsym` claims it.
static FIXED: [[AtomicUsize; N]; INSTANCES] = [SLOTS; INSTANCES];

/// The real function a call of `h` returning to `ra` reaches: the calling module's binding;
/// `None` if no CUDA library defines it. Never panics (the lookup runs under `catch_unwind`).
#[inline]
pub fn routed(h: Hook, ra: usize) -> Option<usize> {
    let n = USED.load(Acquire).min(CALLERS);
    for c in &TABLE[..n] {
        if ra.wrapping_sub(c.start.load(Relaxed)) < c.len.load(Relaxed) {
            let a = c.real[h as usize].load(Relaxed);
            if a != 0 {
                return Some(a);
            }
            return slow(h, ra, Some(c));
        }
    }
    slow(h, ra, None)
}

#[cold]
#[inline(never)]
fn slow(h: Hook, ra: usize, c: Option<&'static Caller>) -> Option<usize> {
    std::panic::catch_unwind(|| resolve(h, ra, c)).ok().flatten()
}

/// The first call of `h` from the module holding `ra`: finds its binding and keeps it.
fn resolve(h: Hook, ra: usize, c: Option<&'static Caller>) -> Option<usize> {
    if ra == 0 || loader::is_own(ra) || ra >> 12 == NO_MODULE.load(Relaxed) {
        return real::real(h);
    }
    // A table full or an address in no module: the process-wide slot, without a lookup per call.
    let Some(c) = c.or_else(|| add_caller(ra)) else { return real::real(h) };
    let a = match loader::binding_for_caller(ra, h.name()).filter(|&a| loader::pin(a)) {
        Some(a) => a,
        // Nothing in the caller's scopes (a pointer passed on from elsewhere): the
        // process-wide slot, as for an unknown caller.
        None => real::real(h)?,
    };
    // Only an address whose library is kept loaded is stored.
    if loader::pin(a) {
        c.real[h as usize].store(a, Relaxed);
    }
    Some(a)
}

/// Releases the fork lock when dropped.
struct ForkLock;

impl ForkLock {
    fn take() -> ForkLock {
        loader::fork_lock();
        ForkLock
    }
}

impl Drop for ForkLock {
    fn drop(&mut self) {
        loader::fork_unlock();
    }
}

/// The entry of the module holding `ra`, added if it is new; `None` if the table is full or
/// `ra` is in no module. Runs under the fork lock (a module scan; no other call into the loader).
fn add_caller(ra: usize) -> Option<&'static Caller> {
    let _lock = ForkLock::take();
    let n = USED.load(Relaxed).min(CALLERS);
    if let Some(c) = TABLE[..n].iter().find(|c| ra.wrapping_sub(c.start.load(Relaxed)) < c.len.load(Relaxed)) {
        return Some(c);
    }
    if n == CALLERS {
        return None;
    }
    let Some((start, end)) = loader::module_span(ra) else {
        NO_MODULE.store(ra >> 12, Relaxed);
        return None;
    };
    let c = &TABLE[n];
    c.start.store(start, Relaxed);
    c.len.store(end - start, Relaxed);
    USED.store(n + 1, Release);
    Some(c)
}

/// The real function of fixed copy `k` of `h`'s export; 0 if unclaimed.
#[inline]
pub fn fixed_real(h: Hook, k: usize) -> usize {
    FIXED[k][h as usize].load(Relaxed)
}

/// The fixed copy of `h`'s export that calls `addr` (a real function found by `dlsym` behind
/// a handle), claiming a free one; `None` when all are taken by other functions or `addr`'s
/// library cannot be kept loaded: the caller then gets `addr` itself, unwrapped.
pub fn claim_fixed(h: Hook, addr: usize) -> Option<usize> {
    if addr == 0 || loader::is_own(addr) {
        return None;
    }
    for (k, slots) in FIXED.iter().enumerate() {
        let slot = &slots[h as usize];
        let cur = slot.load(Relaxed);
        if cur == addr {
            return Some(k);
        }
        if cur == 0 {
            if !loader::pin(addr) {
                return None;
            }
            match slot.compare_exchange(0, addr, Relaxed, Relaxed) {
                Ok(_) => return Some(k),
                Err(now) if now == addr => return Some(k),
                Err(_) => {}
            }
        }
    }
    None
}
