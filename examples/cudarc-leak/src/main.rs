//! A Rust program with a known device-memory leak, for trying gpushim on Rust code.
//!
//! It reaches the CUDA driver the way cudarc's `dynamic-loading` feature does: `dlopen` of
//! `libcuda.so*` and `dlsym` of each function by handle (libloading), so LD_PRELOAD symbol
//! interposition alone would see nothing. The leak: `cache_batch` keeps a 4 MiB device buffer
//! per step in a cache that is never evicted. `workspace` allocates and frees 1 MiB per step
//! (not a leak), and `load_weights` allocates 16 MiB once and uses it for the whole run (no
//! growth, so no suspect; but it is never freed, and once `run` returns no pointer to it is
//! left: the exit's scan counts it definitely lost beside the cache's buffers).
//!
//! Run: `gpushim run -- target/release/cudarc-leak [steps]` (default 100 steps).

use cudarc::driver::{result, sys::CUdeviceptr, DriverError};

const MIB: usize = 1 << 20;

#[inline(never)]
fn load_weights() -> Result<CUdeviceptr, DriverError> {
    // SAFETY: plain device allocation; the pointer is only stored, never dereferenced on the host.
    unsafe { result::malloc_sync(16 * MIB) }
}

#[inline(never)]
fn cache_batch(cache: &mut Vec<CUdeviceptr>) -> Result<(), DriverError> {
    // SAFETY: as above.
    cache.push(unsafe { result::malloc_sync(4 * MIB) }?);
    Ok(())
}

/// The step's own work (here plain arithmetic, on a GPU the kernels): it spreads the steps, and
/// so the leak, over the run, as in a real training loop, instead of a burst of allocations just
/// before a slow exit that timing alone could not tell from a warm-up.
#[inline(never)]
fn compute(step: usize) -> u64 {
    let mut h = step as u64;
    for _ in 0..200_000 {
        h = std::hint::black_box(h.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
    }
    h
}

#[inline(never)]
fn workspace() -> Result<(), DriverError> {
    // SAFETY: allocated and freed here, never used on the host.
    unsafe {
        let p = result::malloc_sync(MIB)?;
        result::free_sync(p)
    }
}

fn main() {
    let steps: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(100);
    if let Err(e) = run(steps) {
        eprintln!("cudarc-leak: CUDA error: {e:?}");
        std::process::exit(1);
    }
}

fn run(steps: usize) -> Result<(), DriverError> {
    result::init()?;
    let dev = result::device::get(0)?;
    // SAFETY: the primary context of device 0, made current on this thread before any allocation.
    unsafe { result::ctx::set_current(result::primary_ctx::retain(dev)?) }?;
    let _weights = load_weights()?;
    let mut cache = Vec::new();
    for step in 0..steps {
        workspace()?;
        cache_batch(&mut cache)?;
        std::hint::black_box(compute(step));
    }
    println!("cudarc-leak: {steps} steps, {} MiB cached on the device and never freed", cache.len() * 4);
    Ok(())
}
