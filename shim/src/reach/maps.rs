//! What the scan reads: the mappings of `/proc/self/maps` with the role of each, the threads'
//! stacks and the CUDA libraries told by name.

use std::ffi::c_void;

use gpushim_wire::ReachRegion;

/// True for the file name of a CUDA library whose data and heap blocks are the library's own
/// bookkeeping, not the program's: the driver (`libcuda`, `libnvidia-*`), the runtime
/// (`libcudart`) and the math and communication libraries that keep device pointers of their own
/// (`libcublas`, `libcublasLt`, `libcudnn*`, `libcufft`, `libcurand`, `libcusparse`,
/// `libcusolver`, `libnccl`, `libnvrtc`, `libnvJitLink`).
pub fn is_cuda_library(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    [
        "libcuda.so",
        "libcudart.so",
        "libnvidia-",
        "libcublas",
        "libcudnn",
        "libcufft",
        "libcurand",
        "libcusparse",
        "libcusolver",
        "libnccl",
        "libnvrtc",
        "libnvJitLink",
    ]
    .iter()
    .any(|p| base.starts_with(p))
}

/// One mapping, or part of one, to read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Role {
    /// A root of the program's: its references count.
    Root(ReachRegion, u32),
    /// Not the program's: a CUDA library's data. What it reaches in the main heap is theirs
    /// too, and is not read.
    Cuda,
    /// The shim's own memory: its module's data, the writer thread's stack and malloc arena, the
    /// exit path's frames. Read after the program's roots, so that a stale copy of the address
    /// of a block the program now owns (memory the shim freed and the program's next `malloc`
    /// got) never takes that block from the program; what only the shim reaches is the shim's.
    Own,
    /// glibc's main heap, walked chunk by chunk.
    Heap,
    /// Memory that may hold the program's pointers but is not trusted to: the part below a
    /// blocked thread's stack pointer of a stack the program gave it (`pthread_attr_setstack`, a
    /// fiber arena), which may be other data rather than dead frames. What it holds is
    /// "possibly lost".
    Possible,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Region {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) role: Role,
}

/// A line of `/proc/self/maps`: start, end, readable and writable, path.
pub(super) fn parse_maps_line(line: &str) -> Option<(u64, u64, bool, &str)> {
    let mut it = line.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?;
    let (_off, _dev, _inode) = (it.next()?, it.next()?, it.next()?);
    let path = it.next().unwrap_or("").trim_start();
    let (s, e) = range.split_once('-')?;
    let s = u64::from_str_radix(s, 16).ok()?;
    let e = u64::from_str_radix(e, 16).ok()?;
    let rw = perms.as_bytes().first() == Some(&b'r') && perms.as_bytes().get(1) == Some(&b'w');
    Some((s, e, rw, path))
}

/// Thread ids of this process with the stack pointer of each one blocked in a system call.
pub(super) fn blocked_threads() -> Vec<(u32, Option<u64>)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return out };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        // "nr a1 … a6 sp pc" in a system call, "-1 sp pc" blocked outside one, "running".
        let sp = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok().and_then(|s| {
            let f: Vec<&str> = s.split_whitespace().collect();
            if f.len() < 3 || f[0] == "running" {
                return None;
            }
            u64::from_str_radix(f[f.len() - 2].trim_start_matches("0x"), 16).ok()
        });
        out.push((tid, sp));
    }
    out
}

/// The calling thread's stack, `[start, end)`.
pub(super) fn own_stack() -> Option<(u64, u64)> {
    // SAFETY: pthread_getattr_np fills `attr` for the calling thread; destroyed after use.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut c_void = std::ptr::null_mut();
        let mut size = 0usize;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        ok.then(|| (addr as u64, addr as u64 + size as u64))
    }
}
