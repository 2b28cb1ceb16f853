//! The frame walk: the calling thread's chain of interpreter frames, read without the GIL, as
//! (code object address, instruction offset, entry flag) per frame, innermost first.

use gpushim_wire::PY_NO_OFFSET;

use super::layout::{has_type, plausible, rd, Layout, Model};

/// Most Python frames kept per stack (innermost first).
pub const MAX_PY_FRAMES: usize = 64;

/// One frame as read: the code object's address, the byte offset, the entry flag.
#[derive(Clone, Copy, Default)]
pub(crate) struct Raw {
    pub(crate) code: usize,
    pub(crate) offset: u32,
    pub(crate) entry: bool,
}

/// Walks the thread's frame chain into `out`; the number of frames, or `None` if something
/// looked wrong.
///
/// # Safety
/// `ts` must be the calling thread's live thread state of the interpreter `l` describes.
pub(crate) unsafe fn walk(l: &Layout, ts: usize, out: &mut [Raw; MAX_PY_FRAMES]) -> Option<usize> {
    // SAFETY: every read below is of the calling thread's own thread state and frames (it is
    // in native code, so none of them changes while we read) or of the code objects they hold
    // references to; each pointer is checked (`plausible`, `has_type`) before it is followed.
    unsafe {
        let mut n = 0usize;
        let mut frame: usize = match l.off.model {
            Model::Py310 | Model::Py313 => rd(ts + l.off.ts_frame),
            Model::Py311 | Model::Py312 => {
                let cframe: usize = rd(ts + l.off.ts_frame);
                if cframe == 0 {
                    return Some(0);
                }
                if !plausible(cframe) {
                    return None;
                }
                rd(cframe + l.off.cframe_current)
            }
        };
        while frame != 0 {
            if !plausible(frame) {
                return None;
            }
            if n == MAX_PY_FRAMES {
                break;
            }
            match l.off.model {
                Model::Py310 => {
                    if !has_type(frame, l.frame_type) {
                        return None;
                    }
                    let code: usize = rd(frame + l.off.fr_code);
                    if !has_type(code, l.code_type) {
                        return None;
                    }
                    let lasti: i32 = rd(frame + l.off.fr_instr);
                    // f_lasti counts 2-byte code units in 3.10 (PyFrame_GetLineNumber passes
                    // f_lasti * sizeof(_Py_CODEUNIT)).
                    let offset = if lasti < 0 { PY_NO_OFFSET } else { (lasti as u32).saturating_mul(2) };
                    out[n] = Raw { code, offset, entry: true };
                    n += 1;
                }
                Model::Py311 | Model::Py312 | Model::Py313 => {
                    let owner: u8 = if l.off.model == Model::Py311 { 0 } else { rd(frame + l.off.fr_owner) };
                    if owner == l.owned_by_cstack && l.off.model != Model::Py311 {
                        // The shim frame of a native interpreter call: the frame above it is
                        // the outermost of that call.
                        if n > 0 {
                            out[n - 1].entry = true;
                        }
                    } else {
                        let code: usize = rd(frame + l.off.fr_code);
                        if !has_type(code, l.code_type) {
                            return None;
                        }
                        let instr: usize = rd(frame + l.off.fr_instr);
                        let start = code + l.off.co_code_adaptive;
                        // Py_SIZE(code) is the number of code units (Include/cpython/code.h,
                        // _PyCode_NBYTES).
                        let units: isize = rd(code + l.ob_size);
                        let offset = if instr < start {
                            // prev_instr before the first instruction (a frame not started yet).
                            PY_NO_OFFSET
                        } else if units > 0 && instr - start < units as usize * 2 {
                            (instr - start) as u32
                        } else {
                            return None;
                        };
                        let entry = l.off.model == Model::Py311 && rd::<u8>(frame + l.off.fr_is_entry) != 0;
                        out[n] = Raw { code, offset, entry };
                        n += 1;
                    }
                }
            }
            frame = rd(frame + l.off.fr_previous);
        }
        if n > 0 && frame == 0 {
            // The outermost frame of the thread is always the outermost of its native call.
            out[n - 1].entry = true;
        }
        Some(n)
    }
}
