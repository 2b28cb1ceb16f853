//! The capture of the hot path: the frame walk and the code ids in one, with each
//! thread's memo of its previous capture, so that the outer frames that did not change since are
//! not worked out again.
//!
//! What one frame of the report is made of: the code object's id and the byte offset of the
//! executing instruction (both functions of the frame's code object and instruction pointer),
//! and the entry flag (a function of the frame's own flag, 3.11, or of the chain outside it:
//! whether the next outer link is a shim frame of a native interpreter call, 3.12+, or whether it
//! is the outermost). So each link of the chain is read as (code object, instruction pointer,
//! flag), the flag being `is_entry` (3.11) or `owner` (3.12, 3.13); 3.10's `f_lasti` stands for
//! the instruction pointer. The frame's own address tells nothing more: what a link gives
//! depends only on these and on the links outside it.
//!
//! The memo keeps the previous capture's links, innermost first, each with the frame it gave.
//! The links of this capture are compared with it from the outermost side (one `memcmp` for all
//! but the innermost): while they are equal, the frame given before is the frame this link
//! gives, with one condition: the code object at that address is still the one the id was made
//! for. A frame's memory is reused at once by the next call at the same depth, and a code
//! object's address after it is freed, so an equal link may be another call, of another code
//! object at the same address. That is told apart as the shared code cache does (`cache`): by
//! the type pointer and the four check fields (first line, name, file name and line table),
//! read again on every capture. They are read once per run of frames of one code object: all
//! frames of one capture are alive at once and each holds a reference to its code object, so
//! two frames of one capture with the same code address have the same code object (recursion,
//! and the `nn.Module` call chain, repeat one code object over many frames).
//!
//! What is no longer done per frame, for the links that match: the bounds check of the
//! instruction pointer against the code's size, the offset, the entry flag and the id lookup
//! (before: six fields read per frame, then four check fields and the memo by frame number).
//! The links inside the first one that differs (the innermost part, where a loop allocates from
//! several places) are worked out as before: type check, bounds, the memo of code ids by frame
//! number (`cache::Interner`) and the shared cache.
//!
//! Same results as `walk` + `cache::intern_into` (which remain for `GPUSHIM_UNWIND_CACHE=0`, for
//! captures outside the hooks and for longer chains): the same reads are checked the same way
//! before they are followed (frames by `plausible`, code objects by `has_type` before any of
//! their fields), and any failure gives no Python frames. A chain of more than [`MAX_LINKS`]
//! links or more than `MAX_PY_FRAMES` frames, or an instruction pointer outside the user half,
//! falls back to them.
//!
//! `gen` numbers the captures whose frames may differ from the previous one's, so that
//! `last_stack` can tell "the same Python frames as this thread's previous allocation" without
//! comparing them.

use gpushim_wire::{PyFrame, PY_NO_OFFSET};

use super::cache::{check_of, Interner};
use super::layout::{has_type, plausible, rd, Layout, Model, OB_TYPE};
use super::walk::MAX_PY_FRAMES;

/// Most links of a chain the memo follows (frames and 3.12+'s shim frames).
pub(crate) const MAX_LINKS: usize = 2 * MAX_PY_FRAMES;

/// One link of the frame chain as read: the code object's address, and the instruction pointer
/// (3.10: `f_lasti` as a `u32`) with the flag in the top byte (addresses of the user half have
/// their top 17 bits clear, and `plausible` holds the frames to that half).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C)]
struct Link {
    code: usize,
    at: usize,
}

/// Where a link's flag starts.
const FLAG_SHIFT: u32 = 56;

impl Link {
    #[inline]
    fn new(code: usize, instr: usize, flag: usize) -> Link {
        Link { code, at: instr | flag << FLAG_SHIFT }
    }
    #[inline]
    fn instr(&self) -> usize {
        self.at & ((1 << FLAG_SHIFT) - 1)
    }
    #[inline]
    fn flag(&self) -> usize {
        self.at >> FLAG_SHIFT
    }
}

/// A thread's memo: its previous capture's links, innermost first, and what each gave. All-zero
/// bytes: nothing remembered.
struct Memo {
    /// Links remembered (0: none).
    n: usize,
    /// `links[which]` holds the remembered links; the other is this capture's scratch (kept off
    /// the thread's stack), and becomes the remembered one when the capture succeeds.
    which: usize,
    links: [[Link; MAX_LINKS]; 2],
    /// Per remembered link: its code object's check fields, its frame, and whether it gave one
    /// (a shim frame gives none).
    check: [[usize; 4]; MAX_LINKS],
    out: [PyFrame; MAX_LINKS],
    has: [bool; MAX_LINKS],
    /// Bit `j`: the remembered link `j` gives a frame whose code object is not the one of the
    /// next outer link (the first of a run of frames of one code object: only those are checked).
    starts: u128,
    /// Changed by every capture whose frames may differ from the previous one's (`gen`).
    gen: u64,
}

fn new_memo() -> Box<Memo> {
    // SAFETY: all-zero bytes are a valid `Memo` (integers, `bool` false, `PyFrame`s of zeros).
    unsafe { crate::per_thread::zeroed_box::<Memo>() }
}

thread_local! {
    /// On the heap (`per_thread`, about 16 KiB). Used only inside the hooks' re-entrancy guard:
    /// one capture at a time per thread. Forgotten in a forked child (`reset`).
    static MEMO: crate::per_thread::PerThread<Memo> = const { crate::per_thread::PerThread::new() };
}

/// The outcome of [`capture`].
pub(crate) enum Outcome {
    /// The number of frames written (`None`: no Python frames, as `walk` would say).
    Done(Option<usize>),
    /// The chain is longer than the memo follows: use `walk` and `intern_into`.
    TooLong,
}

/// The calling thread's Python frames into `out`, innermost first.
///
/// # Safety
/// `ts` must be the calling thread's live thread state of the interpreter `l` describes; only
/// inside the hooks' guard.
pub(crate) unsafe fn capture(l: &Layout, ts: usize, out: &mut [PyFrame; MAX_PY_FRAMES]) -> Outcome {
    let Ok(m) = MEMO.try_with(|m| {
        // SAFETY: this thread's memo, one use at a time (inside the guard).
        unsafe { m.get(new_memo) as *mut Memo }
    }) else {
        return Outcome::TooLong;
    };
    // SAFETY: as above; the reads are those `walk` makes, checked the same way (see there).
    unsafe {
        match l.off.model {
            Model::Py310 => capture_with::<PY310>(l, ts, &mut *m, out),
            Model::Py311 => capture_with::<PY311>(l, ts, &mut *m, out),
            Model::Py312 | Model::Py313 => capture_with::<PY312>(l, ts, &mut *m, out),
        }
    }
}

/// The chain models, as const parameters (one loop per model, no branch on it per link).
const PY310: u8 = 0;
const PY311: u8 = 1;
/// 3.12 and 3.13 (`owner`, shim frames).
const PY312: u8 = 2;

/// The bits below bit `k`.
#[inline]
fn low_bits(k: usize) -> u128 {
    1u128.checked_shl(k as u32).map_or(u128::MAX, |b| b - 1)
}

/// The bytes of `links`, for a `memcmp`.
fn bytes(links: &[Link]) -> &[u8] {
    // SAFETY: `Link` is two `usize` without padding; any bytes are valid `u8`s.
    unsafe { std::slice::from_raw_parts(links.as_ptr().cast::<u8>(), std::mem::size_of_val(links)) }
}

/// # Safety
/// As [`capture`]; `M` is `l`'s model.
#[inline(always)]
unsafe fn capture_with<const M: u8>(
    l: &Layout,
    ts: usize,
    m: &mut Memo,
    out: &mut [PyFrame; MAX_PY_FRAMES],
) -> Outcome {
    let cstack = l.owned_by_cstack as usize;
    // SAFETY: (the whole function) every read is of the calling thread's own thread state and frames
    // (it is in native code, so none of them changes while we read) or of the code objects they
    // hold references to; each pointer is checked (`plausible`, `has_type`) before it is followed,
    // as in `walk`.
    unsafe {
        // 1. The chain's links, innermost first, into the scratch half.
        let mut frame: usize = if M == PY311 || (M == PY312 && l.off.model == Model::Py312) {
            let cframe: usize = rd(ts + l.off.ts_frame);
            if cframe == 0 || !plausible(cframe) {
                return Outcome::Done(None);
            }
            rd(cframe + l.off.cframe_current)
        } else {
            rd(ts + l.off.ts_frame)
        };
        let (old, prev_i) = (m.n, m.which);
        let [a, b] = &mut m.links;
        let (prev, cur) = if prev_i == 0 { (&*a, b) } else { (&*b, a) };
        let mut n = 0usize;
        let mut shims = 0usize;
        // The instruction pointers' bits or-ed together: any in the flag's byte (not an address
        // of the user half) and `walk` tells what to do (checked once, after the loop).
        let mut high = 0usize;
        while frame != 0 {
            if !plausible(frame) {
                return Outcome::Done(None);
            }
            if n == MAX_LINKS {
                return Outcome::TooLong;
            }
            let link = if M == PY310 {
                let ty: usize = rd(frame + OB_TYPE);
                if ty != l.frame_type {
                    return Outcome::Done(None);
                }
                let lasti: i32 = rd(frame + l.off.fr_instr);
                // The flag is the type, checked above: not kept.
                Link::new(rd(frame + l.off.fr_code), lasti as u32 as usize, 0)
            } else if M == PY311 {
                let instr: usize = rd(frame + l.off.fr_instr);
                high |= instr;
                Link::new(rd(frame + l.off.fr_code), instr, rd::<u8>(frame + l.off.fr_is_entry) as usize)
            } else {
                let owner = rd::<u8>(frame + l.off.fr_owner) as usize;
                if owner == cstack {
                    // A shim frame: nothing of it but its place in the chain.
                    shims += 1;
                    Link::new(0, 0, owner)
                } else {
                    let instr: usize = rd(frame + l.off.fr_instr);
                    high |= instr;
                    Link::new(rd(frame + l.off.fr_code), instr, owner)
                }
            };
            cur[n] = link;
            n += 1;
            frame = rd(frame + l.off.fr_previous);
        }
        if high >> FLAG_SHIFT != 0 {
            return Outcome::TooLong;
        }
        if n == shims {
            return Outcome::Done(None);
        }
        if n - shims > MAX_PY_FRAMES {
            return Outcome::TooLong;
        }

        // 2. How many outer links are the remembered ones: all but the innermost in one compare
        // (a loop allocating from one place, or from several in its innermost frame), else one
        // by one from the outermost.
        let both = n.min(old);
        let mut k = if both > 0 && bytes(&cur[n - both + 1..n]) == bytes(&prev[old - both + 1..old]) {
            both - 1 + usize::from(cur[n - both] == prev[old - both])
        } else {
            let mut k = 0;
            while k < both && cur[n - 1 - k] == prev[old - 1 - k] {
                k += 1;
            }
            k
        };
        // Their code objects must still be the ones their ids were made for: checked once per
        // run of frames of one code object (`start`; the frames of one capture are all alive,
        // each holding its code object, so one address is one object within a capture).
        let bits = m.starts & low_bits(old) & !low_bits(old - k);
        // The outermost first, one 64-bit half at a time.
        'check: for (half, base) in [((bits >> 64) as u64, 64usize), (bits as u64, 0)] {
            let mut half = half;
            while half != 0 {
                let q = 63 - half.leading_zeros() as usize;
                half ^= 1 << q;
                let p = base + q;
                let code = prev[p].code;
                // `code` is the value found plausible when it was remembered: its type first.
                if rd::<usize>(code + OB_TYPE) != l.code_type {
                    return Outcome::Done(None);
                }
                let (now, then) = (check_of(l, code), &m.check[p]);
                if (now[0] ^ then[0]) | (now[1] ^ then[1]) | (now[2] ^ then[2]) | (now[3] ^ then[3]) != 0 {
                    k = old - 1 - p;
                    break 'check;
                }
            }
        }

        // 3. The memo is empty until this capture succeeds. What the matched links gave moves
        // to their depth in this capture; the links inside them are worked out in full.
        m.n = 0;
        m.starts = (m.starts.checked_shr((old - k) as u32).unwrap_or(0) & low_bits(k))
            .checked_shl((n - k) as u32)
            .unwrap_or(0);
        if k > 0 && n != old {
            m.check.copy_within(old - k..old, n - k);
            m.out.copy_within(old - k..old, n - k);
            m.has.copy_within(old - k..old, n - k);
        }
        let fresh = n - k;
        let mut ids = None;
        let mut i = 0usize;
        for j in 0..fresh {
            let c = cur[j];
            if M == PY312 && c.flag() == cstack {
                m.has[j] = false;
                continue;
            }
            if !has_type(c.code, l.code_type) {
                return Outcome::Done(None);
            }
            let (offset, entry) = if M == PY310 {
                // f_lasti counts 2-byte code units in 3.10 (PyFrame_GetLineNumber passes
                // f_lasti * sizeof(_Py_CODEUNIT)).
                let lasti = c.instr() as u32 as i32;
                (if lasti < 0 { PY_NO_OFFSET } else { (lasti as u32).saturating_mul(2) }, true)
            } else {
                let start = c.code + l.off.co_code_adaptive;
                // Py_SIZE(code) is the number of code units (Include/cpython/code.h,
                // _PyCode_NBYTES).
                let units: isize = rd(c.code + l.ob_size);
                let instr = c.instr();
                let offset = if instr < start {
                    // prev_instr before the first instruction (a frame not started yet).
                    PY_NO_OFFSET
                } else if units > 0 && instr - start < units as usize * 2 {
                    (instr - start) as u32
                } else {
                    return Outcome::Done(None);
                };
                let entry = if M == PY311 {
                    c.flag() != 0
                } else {
                    // The frame just inside a native interpreter call's shim frame is the
                    // outermost of that call.
                    j + 1 < n && cur[j + 1].flag() == cstack
                };
                (offset, entry)
            };
            let Some((id, check)) = ids.get_or_insert_with(|| Interner::new(l, true)).id(i, c.code) else {
                return Outcome::Done(None);
            };
            // A shim frame outside breaks the run (its code is 0), which only costs one more
            // check.
            if j + 1 == n || cur[j + 1].code != c.code {
                m.starts |= 1 << j;
            }
            i += 1;
            m.check[j] = check;
            m.out[j] = PyFrame { code: id, offset, entry };
            m.has[j] = true;
        }
        drop(ids);
        // The outermost frame of the thread is always the outermost of its native call.
        if let Some(j) = (0..n).rev().find(|&j| M != PY312 || m.has[j]) {
            m.out[j].entry = true;
        }
        if !(k == n && n == old) {
            m.gen += 1;
        }
        m.n = n;
        m.which = 1 - prev_i;

        // 4. The frames, innermost first.
        let w = n - shims;
        if shims == 0 {
            out[..n].copy_from_slice(&m.out[..n]);
        } else {
            let mut w = 0usize;
            for j in 0..n {
                if m.has[j] {
                    out[w] = m.out[j];
                    w += 1;
                }
            }
        }
        Outcome::Done(Some(w))
    }
}

/// The calling thread's capture number: see `python::capture_gen`. Only inside the hooks' guard.
pub(crate) fn gen() -> u64 {
    MEMO.try_with(|m| {
        // SAFETY: this thread's memo, one use at a time (inside the guard, between captures).
        unsafe { m.existing() }.map_or(0, |m| m.gen)
    })
    .unwrap_or(0)
}

/// A capture gave frames without the memo (`walk`): they may differ from the previous ones.
pub(crate) fn changed() {
    let _ = MEMO.try_with(|m| {
        // SAFETY: as in `gen`.
        if let Some(m) = unsafe { m.existing() } {
            m.gen += 1;
        }
    });
}

/// In a forked child: the code ids restart from 0, so the memo is forgotten.
pub(crate) fn reset() {
    let _ = MEMO.try_with(|m| {
        // SAFETY: the child's only thread, outside any capture.
        if let Some(m) = unsafe { m.existing() } {
            m.n = 0;
            m.gen += 1;
        }
    });
}
