//! The frame walk: the calling thread's chain of interpreter frames, read without the GIL, as
//! (code object address, instruction offset, entry flag) per frame, innermost first.

use gpushim_wire::PY_NO_OFFSET;

use super::layout::{plausible, rd, Layout, Model, OB_TYPE};

/// Most Python frames kept per stack (innermost first).
pub const MAX_PY_FRAMES: usize = 64;

/// One frame as read: the code object's address, the byte offset, the entry flag.
#[derive(Clone, Copy, Default)]
pub(crate) struct Raw {
    pub(crate) code: usize,
    pub(crate) offset: u32,
    pub(crate) entry: bool,
}

/// How a walk reads the interpreter's memory.
pub(crate) trait Mem {
    /// The `T` at `addr`, or `None` if it cannot be read.
    ///
    /// # Safety
    /// As the implementation says.
    unsafe fn rd<T: Copy>(&self, addr: usize) -> Option<T>;

    /// True if and only if `p` is an object whose type is `ty`.
    ///
    /// # Safety
    /// As [`Mem::rd`].
    #[inline(always)]
    unsafe fn has_type(&self, p: usize, ty: usize) -> bool {
        // SAFETY: the caller's promise, for the object header of a plausible pointer.
        plausible(p) && unsafe { self.rd::<usize>(p + OB_TYPE) } == Some(ty)
    }
}

/// Plain loads: the calling thread's own frames, which cannot change while it is in native
/// code.
pub(crate) struct Direct;

impl Mem for Direct {
    /// # Safety
    /// `addr` must be readable for `size_of::<T>()` bytes.
    #[inline(always)]
    unsafe fn rd<T: Copy>(&self, addr: usize) -> Option<T> {
        // SAFETY: the caller's promise.
        Some(unsafe { rd(addr) })
    }
}

/// Walks the calling thread's frame chain into `out`; the number of frames, or `None` if
/// something looked wrong.
///
/// # Safety
/// `ts` must be the calling thread's live thread state of the interpreter `l` describes.
#[inline]
pub(crate) unsafe fn walk(l: &Layout, ts: usize, out: &mut [Raw; MAX_PY_FRAMES]) -> Option<usize> {
    // SAFETY: the caller's promise; the calling thread's own thread state and frames do not
    // change while it is in native code, and each frame holds a reference to its code object.
    unsafe { walk_in(l, ts, out, &Direct, MAX_PY_FRAMES, &mut |_| {}) }
}

/// [`walk`] through `m`, of at most `max` frames (at most [`MAX_PY_FRAMES`]): with [`Direct`],
/// of the calling thread; with a checked reader, of another thread (a read of memory freed
/// meanwhile fails instead of faulting). `trail` is given the address of every link followed
/// (frames and 3.12+'s shim frames), innermost first.
///
/// # Safety
/// `ts` must be a thread state of the interpreter `l` describes, and `m` able to read what
/// the walk follows from it (see each reader).
pub(crate) unsafe fn walk_in<M: Mem>(
    l: &Layout,
    ts: usize,
    out: &mut [Raw; MAX_PY_FRAMES],
    m: &M,
    max: usize,
    trail: &mut impl FnMut(usize),
) -> Option<usize> {
    let max = max.min(MAX_PY_FRAMES);
    // SAFETY: every read below goes through `m`; each pointer is checked (`plausible`,
    // `has_type`) before it is followed.
    unsafe {
        let mut n = 0usize;
        let mut frame: usize = match l.off.model {
            Model::Py310 | Model::Py313 => m.rd(ts + l.off.ts_frame)?,
            Model::Py311 | Model::Py312 => {
                let cframe: usize = m.rd(ts + l.off.ts_frame)?;
                if cframe == 0 {
                    return Some(0);
                }
                if !plausible(cframe) {
                    return None;
                }
                m.rd(cframe + l.off.cframe_current)?
            }
        };
        while frame != 0 {
            if !plausible(frame) {
                return None;
            }
            if n == max {
                break;
            }
            trail(frame);
            match l.off.model {
                Model::Py310 => {
                    if !m.has_type(frame, l.frame_type) {
                        return None;
                    }
                    let code: usize = m.rd(frame + l.off.fr_code)?;
                    if !m.has_type(code, l.code_type) {
                        return None;
                    }
                    let lasti: i32 = m.rd(frame + l.off.fr_instr)?;
                    // f_lasti counts 2-byte code units in 3.10 (PyFrame_GetLineNumber passes
                    // f_lasti * sizeof(_Py_CODEUNIT)).
                    let offset = if lasti < 0 { PY_NO_OFFSET } else { (lasti as u32).saturating_mul(2) };
                    out[n] = Raw { code, offset, entry: true };
                    n += 1;
                }
                Model::Py311 | Model::Py312 | Model::Py313 => {
                    let owner: u8 = if l.off.model == Model::Py311 { 0 } else { m.rd(frame + l.off.fr_owner)? };
                    if owner == l.owned_by_cstack && l.off.model != Model::Py311 {
                        // The shim frame of a native interpreter call: the frame above it is
                        // the outermost of that call.
                        if n > 0 {
                            out[n - 1].entry = true;
                        }
                    } else {
                        let code: usize = m.rd(frame + l.off.fr_code)?;
                        if !m.has_type(code, l.code_type) {
                            return None;
                        }
                        let instr: usize = m.rd(frame + l.off.fr_instr)?;
                        let start = code + l.off.co_code_adaptive;
                        // Py_SIZE(code) is the number of code units (Include/cpython/code.h,
                        // _PyCode_NBYTES).
                        let units: isize = m.rd(code + l.ob_size)?;
                        let offset = if instr < start {
                            // prev_instr before the first instruction (a frame not started yet).
                            PY_NO_OFFSET
                        } else if units > 0 && instr - start < units as usize * 2 {
                            (instr - start) as u32
                        } else {
                            return None;
                        };
                        let entry = l.off.model == Model::Py311 && m.rd::<u8>(frame + l.off.fr_is_entry)? != 0;
                        out[n] = Raw { code, offset, entry };
                        n += 1;
                    }
                }
            }
            frame = m.rd(frame + l.off.fr_previous)?;
        }
        if n > 0 && frame == 0 {
            // The outermost frame of the thread is always the outermost of its native call.
            out[n - 1].entry = true;
        }
        Some(n)
    }
}
