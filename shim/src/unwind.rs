//! Fast native backtraces on x86-64: the DWARF call-frame rules (`.eh_frame`) of each return
//! address are computed once, packed into one `u64`, and kept in a lock-free table; every later
//! capture through that address costs a table lookup and one or two stack reads.
//!
//! Why: libgcc's `_Unwind_Backtrace` finds and interprets each frame's CFI anew on every call;
//! measured with scripts/bench-cpu.sh (40-frame stack, 100 extra shared objects) that is about
//! 12 µs per allocation, against a goal of 1 µs.
//!
//! Safety of the reads: the walk starts only when the stack pointer lies on the capturing
//! thread's own stack (`pthread_getattr_np`); every stack slot read then lies between the
//! stack pointer and the top of that stack, 8-byte aligned, and each frame's CFA must be above
//! the previous one, so a wrong or missing rule ends the backtrace early instead of faulting.
//! Code without CFI (JIT code) is crossed through its frame pointer when `rbp` points into the
//! stack, else the backtrace ends there. On any other stack the fast walk does not start.
//!
//! Per-thread memo: each thread remembers its previous walk (`MEMO`, on the heap:
//! `per_thread`): where it started (stack and frame pointer), and for every frame the slots read
//! (the return address, and the saved frame pointer where the rule reads one) with the values
//! found there, and the state they led to. The next walk that starts at the same stack and frame
//! pointer replays it: for each frame it reads the same slots and compares; while every value is
//! the one remembered, the frame is the one remembered, without the rule's lookup and
//! arithmetic. At the first difference it goes on as a full walk from that frame's state (whose
//! rules come from a per-frame memo before the shared table). Why this gives exactly the full
//! walk's frames: a walk is a function of its start (the instruction pointer, which is this
//! function's, and the stack and frame pointers), of the rules (each fixed by its address; the
//! shared table is never invalidated either) and of the values of the slots it reads; by
//! induction over the frames, an equal start and equal values read so far mean the same state,
//! so the same rule, the same slots and the same next state. Every slot is still read on every
//! walk, and a stack that changed anywhere shows as a difference (tests/unwinding.rs compares
//! reports with `GPUSHIM_UNWIND_CACHE=0`). A walk that stops early on a match of the innermost
//! return addresses and the stack depth was not taken: two outer call paths can share both.

use std::cell::Cell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};

use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, RegisterRule, UnwindContext, UnwindSection, X86_64,
};

/// Slots in the rule cache (a power of two); 2 × 8 bytes each: 2 MiB of zero pages until used.
const SLOTS: usize = 1 << 17;
/// Slots probed before giving up on caching an address.
const PROBES: usize = 16;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicU64 = AtomicU64::new(0);
static KEYS: [AtomicU64; SLOTS] = [EMPTY; SLOTS];
static RULES: [AtomicU64; SLOTS] = [EMPTY; SLOTS];

// Packed rule layout (bit 0 set means "valid"; 0 means "not computed yet").
const VALID: u64 = 1;
/// CFA base register: 0 = rsp, 1 = rbp (bits 1..2); 2 = no CFI here: use the frame pointer;
/// 3 = cannot unwind past this frame.
const BASE_SHIFT: u32 = 1;
const BASE_RSP: u64 = 0;
const BASE_RBP: u64 = 1;
const BASE_FP: u64 = 2;
const BASE_STOP: u64 = 3;
/// CFA offset, i32, bits 3..35.
const CFA_SHIFT: u32 = 3;
/// Rule for the caller's rbp (bits 35..37): 0 same value, 1 saved at CFA + offset.
const RBP_SHIFT: u32 = 35;
const RBP_SAME: u64 = 0;
const RBP_SAVED: u64 = 1;
/// Offset of the saved rbp from the CFA, i16, bits 37..53.
const RBP_OFF_SHIFT: u32 = 37;

fn pack(base: u64, cfa_off: i32, rbp: u64, rbp_off: i16) -> u64 {
    VALID
        | base << BASE_SHIFT
        | u64::from(cfa_off as u32) << CFA_SHIFT
        | rbp << RBP_SHIFT
        | u64::from(rbp_off as u16) << RBP_OFF_SHIFT
}

fn base(rule: u64) -> u64 {
    (rule >> BASE_SHIFT) & 3
}
fn cfa_off(rule: u64) -> i64 {
    i64::from((rule >> CFA_SHIFT) as u32 as i32)
}
fn rbp_rule(rule: u64) -> u64 {
    (rule >> RBP_SHIFT) & 3
}
fn rbp_off(rule: u64) -> i64 {
    i64::from((rule >> RBP_OFF_SHIFT) as u16 as i16)
}

fn slot(addr: u64) -> usize {
    // Fibonacci hashing: return addresses share their low and high bits.
    (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize
}

/// The cached rule for `addr` (the address looked up: a return address minus one), computing
/// and caching it on first use.
fn rule_for(addr: u64) -> u64 {
    let mut i = slot(addr);
    for _ in 0..PROBES {
        let k = KEYS[i].load(Acquire);
        if k == addr {
            let r = RULES[i].load(Acquire);
            if r != 0 {
                return r;
            }
            return compute(addr); // another thread is filling it in
        }
        if k == 0 {
            let r = compute(addr);
            if KEYS[i].compare_exchange(0, addr, AcqRel, Acquire).is_ok() {
                RULES[i].store(r, Release);
            }
            return r;
        }
        i = (i + 1) & (SLOTS - 1);
    }
    compute(addr)
}

/// Where one loaded object's unwind tables are (runtime addresses).
struct Cfi {
    start: u64,
    end: u64,
    hdr: u64,
    hdr_len: u64,
    /// End of the loaded segment holding `.eh_frame` (its length is not recorded anywhere).
    seg_end: u64,
}

/// The loaded objects' CFI, replaced (and the old list leaked) when the set of loaded objects
/// changes; readers never wait.
static MODULES: AtomicPtr<Vec<Cfi>> = AtomicPtr::new(std::ptr::null_mut());
/// `dlpi_adds + dlpi_subs` (objects loaded plus unloaded so far) when MODULES was built.
static MODULES_ADDS: AtomicUsize = AtomicUsize::new(usize::MAX);

fn modules() -> &'static [Cfi] {
    // SAFETY: MODULES only ever holds leaked, never-freed vectors.
    unsafe { MODULES.load(Acquire).as_ref() }.map_or(&[], |v| v.as_slice())
}

fn rescan() {
    unsafe extern "C" fn cb(info: *mut libc::dl_phdr_info, _: usize, data: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `data` is the Vec passed below; `info` is valid during the call.
        let (out, info) = unsafe { (&mut *(data as *mut (Vec<Cfi>, u64)), &*info) };
        out.1 = info.dlpi_adds.wrapping_add(info.dlpi_subs);
        let bias = info.dlpi_addr;
        let mut hdr = None;
        let (mut start, mut end) = (u64::MAX, 0u64);
        let mut loads = Vec::new();
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: dlpi_phdr has dlpi_phnum entries.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            let s = bias.wrapping_add(ph.p_vaddr);
            match ph.p_type {
                libc::PT_LOAD => {
                    start = start.min(s);
                    end = end.max(s + ph.p_memsz);
                    loads.push((s, s + ph.p_memsz));
                }
                libc::PT_GNU_EH_FRAME => hdr = Some((s, ph.p_memsz)),
                _ => {}
            }
        }
        if let Some((h, len)) = hdr {
            let seg_end = loads.iter().find(|&&(s, e)| h >= s && h < e).map_or(h + len, |&(_, e)| e);
            out.0.push(Cfi { start, end, hdr: h, hdr_len: len, seg_end });
        }
        0
    }
    let mut acc: (Vec<Cfi>, u64) = (Vec::new(), 0);
    // SAFETY: the callback only reads the loader's data during each call.
    unsafe { crate::loader::iterate_phdr(cb, &mut acc as *mut _ as *mut libc::c_void) };
    MODULES_ADDS.store(acc.1 as usize, Release);
    MODULES.store(Box::into_raw(Box::new(acc.0)), Release);
}

/// Computes the packed rule for `addr` from its object's `.eh_frame`.
fn compute(addr: u64) -> u64 {
    let find = || modules().iter().position(|m| addr >= m.start && addr < m.end);
    // Any load or unload since the list was built (dlpi_adds + dlpi_subs changed): rebuild it
    // first, so that an unloaded library's tables are never read.
    if current_adds() != MODULES_ADDS.load(Acquire) {
        rescan();
    }
    let idx = find();
    let Some(m) = idx.map(|i| &modules()[i]) else { return pack(BASE_FP, 0, RBP_SAME, 0) };
    from_cfi(m, addr).unwrap_or(pack(BASE_FP, 0, RBP_SAME, 0))
}

fn current_adds() -> usize {
    unsafe extern "C" fn cb(info: *mut libc::dl_phdr_info, _: usize, data: *mut libc::c_void) -> libc::c_int {
        // SAFETY: as in rescan; stop after the first object.
        unsafe { *(data as *mut u64) = (*info).dlpi_adds.wrapping_add((*info).dlpi_subs) };
        1
    }
    let mut adds = 0u64;
    // SAFETY: as in rescan.
    unsafe { crate::loader::iterate_phdr(cb, &mut adds as *mut _ as *mut libc::c_void) };
    adds as usize
}

fn from_cfi(m: &Cfi, addr: u64) -> Option<u64> {
    // SAFETY: [hdr, hdr + hdr_len) and [eh_frame, seg_end) lie in segments of a loaded object
    // (from its program headers), mapped readable for as long as it stays loaded.
    let hdr_bytes = unsafe { std::slice::from_raw_parts(m.hdr as *const u8, m.hdr_len as usize) };
    let bases = BaseAddresses::default().set_eh_frame_hdr(m.hdr);
    let hdr = EhFrameHdr::new(hdr_bytes, LittleEndian).parse(&bases, 8).ok()?;
    let gimli::Pointer::Direct(eh) = hdr.eh_frame_ptr() else { return None };
    if eh < m.start || eh >= m.seg_end {
        return None;
    }
    // SAFETY: as above.
    let eh_bytes = unsafe { std::slice::from_raw_parts(eh as *const u8, (m.seg_end - eh) as usize) };
    let eh_frame = EhFrame::new(eh_bytes, LittleEndian);
    let bases = bases.set_eh_frame(eh).set_text(m.start);
    let table = hdr.table()?;
    let mut ctx = Box::new(UnwindContext::new());
    let row = table.unwind_info_for_address(&eh_frame, &bases, &mut ctx, addr, EhFrame::cie_from_offset).ok()?;
    let (base, off) = match *row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } if register == X86_64::RSP => (BASE_RSP, offset),
        CfaRule::RegisterAndOffset { register, offset } if register == X86_64::RBP => (BASE_RBP, offset),
        _ => return Some(pack(BASE_STOP, 0, RBP_SAME, 0)),
    };
    let off = i32::try_from(off).ok()?;
    match row.register(X86_64::RA) {
        Some(RegisterRule::Offset(-8)) => {}
        _ => return Some(pack(BASE_STOP, 0, RBP_SAME, 0)),
    }
    let (rbp, rbp_off) = match row.register(X86_64::RBP) {
        None | Some(RegisterRule::SameValue) => (RBP_SAME, 0),
        Some(RegisterRule::Offset(o)) => (RBP_SAVED, i16::try_from(o).ok()?),
        _ => return Some(pack(BASE_STOP, 0, RBP_SAME, 0)),
    };
    Some(pack(base, off, rbp, rbp_off))
}

/// Frames the per-thread memo covers (the most a walk writes: 256 kept + 16 of our own).
pub const MEMO_FRAMES: usize = 256 + 16;

/// One frame of a walk, as the replay reads it (16 bytes, so that a 49-frame replay reads 13
/// cache lines of the memo, not 37: the real CUDA call between two hooks leaves little of the
/// shim's data in the first-level cache, and the replay's cost is its memory reads,
/// docs/performance.md): the return address, its slot's offset from the walk's
/// starting stack pointer, and [`Seen::bp`]: whether a saved frame pointer was read and
/// where, and whether the rule used the incoming frame pointer.
#[derive(Clone, Copy, Default)]
struct Seen {
    ra: u64,
    /// Bytes from the starting stack pointer to the return address's slot.
    ra_off: u32,
    /// Bit [`USES_BP`]: the rule used the incoming frame pointer (as the CFA's base, or the
    /// chain of a frame without CFI), whose value then is in `Memo::in_bp`. Bits below it: 0
    /// if no saved frame pointer was read (the frame pointer is passed on unchanged), else its
    /// slot's offset from the starting stack pointer in 8-byte words, plus 1.
    bp: u32,
}

/// [`Seen::bp`]'s flag bit.
const USES_BP: u32 = 1 << 31;

/// One thread's previous walk (see the module doc), and per frame number the address last
/// looked up there and its rule.
struct Memo {
    /// Whether `seen[..n]` describe the previous walk.
    valid: bool,
    /// Where it started (the stack pointer; the instruction pointer is `capture`'s), and the
    /// room it had (`out.len()`).
    sp: u64,
    limit: usize,
    n: usize,
    /// Counts the walks whose frames differed from the walk before them (see [`Walk::gen`]).
    gen: u64,
    seen: [Seen; MEMO_FRAMES],
    /// Per frame, read only where the replay stops or the frame's rule used it: the CFA (the
    /// caller's stack pointer), and the incoming frame pointer.
    cfa: [u64; MEMO_FRAMES],
    in_bp: [u64; MEMO_FRAMES],
    rules: [(u64, u64); MEMO_FRAMES],
}

/// A capture's result: the frames written, and `gen`: while it stays the same from one
/// capture to the next on a thread, every capture in between found the same frames (`None`
/// when the capture used no memo). Lets `last_stack` know a stack is the one it remembers
/// without comparing the frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walk {
    pub n: usize,
    pub gen: Option<u64>,
}

fn new_memo() -> Box<Memo> {
    // Zeroed on the heap, never built on the stack (13 KiB): `valid` false, every other field 0.
    // SAFETY: all-zero bytes are a valid `Memo` (integers, `bool` false, `usize` 0).
    unsafe { crate::per_thread::zeroed_box::<Memo>() }
}

thread_local! {
    /// `[low, high)` of this thread's stack; `(0, 0)` until read.
    static STACK: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    /// This thread's memo (see the module doc). Used only by `capture`, inside the hooks'
    /// re-entrancy guard: never two uses at once on one thread.
    static MEMO: crate::per_thread::PerThread<Memo> = const { crate::per_thread::PerThread::new() };
}

/// Stack an unwinder may need below the caller: computing a rule parses DWARF call-frame
/// information with gimli, whose tables live on the stack, and libgcc's unwinder keeps a context
/// of about a kilobyte per frame. A thread with a 32 KiB stack overflowed in a debug build
/// (16 KiB in a release build), bytes.
const MIN_ROOM: u64 = 64 << 10;

/// True if and only if a backtrace may be taken here: the stack pointer lies on the calling
/// thread's own stack with at least [`MIN_ROOM`] below it. On another stack (a coroutine's, a
/// green thread's, `sigaltstack`), nothing tells how much room is left, nor which memory
/// between the stack pointer and the thread's stack is mapped: no backtrace is taken there, by
/// either unwinder (the event is recorded without native frames).
pub fn safe_to_unwind() -> bool {
    let here = std::hint::black_box(0u8);
    let sp = &here as *const u8 as u64;
    let (low, top) = stack_bounds();
    top != 0 && sp >= low && sp < top && sp - low >= MIN_ROOM
}

/// `[low, high)` of the calling thread's stack (`pthread_getattr_np`), or `(0, 0)`.
fn stack_bounds() -> (u64, u64) {
    STACK
        .try_with(|t| {
            if t.get().1 == 0 {
                // SAFETY: attr is initialised by pthread_getattr_np before use and destroyed after.
                unsafe {
                    let mut attr: libc::pthread_attr_t = std::mem::zeroed();
                    if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) == 0 {
                        let mut addr: *mut libc::c_void = std::ptr::null_mut();
                        let mut size: usize = 0;
                        if libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0 {
                            t.set((addr as u64, addr as u64 + size as u64));
                        }
                        libc::pthread_attr_destroy(&mut attr);
                    }
                }
            }
            t.get()
        })
        .unwrap_or((0, 0))
}

/// Fills `out` with the return addresses of the calling thread's stack, innermost first,
/// starting with this function's caller's caller chain (frames inside this library included;
/// the caller strips them). Returns how many were written (`out[..n]` is initialized; 0 if
/// unwinding could not start) and the walk's generation. `memo`: use this thread's memo (see
/// the module doc). Must not be called again on the same thread while a call is running (the
/// hooks' guard).
#[cfg(target_arch = "x86_64")]
#[inline(never)]
pub fn capture(out: &mut [MaybeUninit<u64>], memo: bool) -> Walk {
    let (ip, mut sp, mut bp): (u64, u64, u64);
    // SAFETY: reads the instruction pointer, stack pointer and frame pointer; changes nothing.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    let (low, top) = stack_bounds();
    // Every read below lies in [sp, top), which is mapped only when sp is on this thread's own
    // stack. On any other stack (a coroutine's, a green thread's, sigaltstack's) nothing is
    // known to be readable between sp and top: no fast walk (the caller falls back to libgcc's
    // unwinder, which follows unwind information only and stops at a frame without it).
    if top == 0 || sp < low || sp >= top {
        return Walk { n: 0, gen: None };
    }
    let mut n = 0;
    let mut lookup = ip; // exact for the first frame, return address - 1 after
                         // SAFETY: the memo is this thread's; no other reference to it lives while this runs (one
                         // capture at a time per thread, inside the guard). `None` while the thread is being torn
                         // down, or when the caches are off.
    let memo = if memo { MEMO.try_with(|m| unsafe { m.get(new_memo) as *mut Memo }).ok() } else { None };
    // SAFETY: as above.
    let Some(memo) = memo.map(|p| unsafe { &mut *p }) else {
        return Walk { n: walk(out, &mut n, lookup, sp, bp, top, None), gen: None };
    };
    // Replay the previous walk while each frame's instruction and stack pointers are the ones
    // remembered (by induction: the return address read is), its return address slot holds the
    // value it held then, and, where its rule uses the incoming frame pointer, that is too. The
    // frame pointer is followed as the walk follows it (read again from the same slot): in code
    // without frame pointers rbp holds any value, different from one call to the next, which
    // matters only to a frame whose rule uses it.
    // The walk's starting stack pointer: the base of the offsets remembered (`Seen`).
    let start = sp;
    let replayed = memo.valid && memo.sp == sp && memo.limit == out.len();
    if replayed {
        // Every slot remembered was read by a walk that started at this same stack pointer on
        // this thread's stack, and passed `read`'s checks then: 8-aligned, at or above that
        // stack pointer and below the top. Those bounds hold now (the same start, the same
        // stack), so the replay reads them without checking again.
        // One pass over equal-length slices: no bounds check per frame (a 49-frame replay is
        // most of the shim's instructions on the pool-hit loop).
        let len = memo.n.min(out.len());
        let frames = memo.seen[..len].iter().zip(&memo.in_bp[..len]).zip(&mut out[..len]);
        for ((s, &in_bp), o) in frames {
            if s.bp & USES_BP != 0 && bp != in_bp {
                break;
            }
            // SAFETY: the slot is 8-aligned and within [sp, top) of this thread's stack, as
            // checked when it was remembered from a walk with the same start (above).
            if unsafe { ((start + u64::from(s.ra_off)) as *const u64).read() } != s.ra {
                break;
            }
            let b = s.bp & !USES_BP;
            if b != 0 {
                // SAFETY: as for the return address's slot.
                bp = unsafe { ((start + u64::from(b - 1) * 8) as *const u64).read() };
            }
            *o = MaybeUninit::new(s.ra);
            n += 1;
        }
        if n > 0 {
            sp = memo.cfa[n - 1];
            lookup = memo.seen[n - 1].ra - 1;
        }
    } else {
        memo.valid = true;
        memo.sp = sp;
        memo.limit = out.len();
    }
    // The previous walk's frames again only if the whole of it replayed and the walk from its
    // last frame stops where it stopped then (it adds no frame).
    let before = memo.n;
    let full = replayed && n == before;
    // From the first frame that differs (or where the previous walk stopped), a full walk,
    // remembered.
    let got = walk(out, &mut n, lookup, sp, bp, top, Some((memo, start)));
    if !(full && got == before) {
        memo.gen = memo.gen.wrapping_add(1);
    }
    Walk { n: got, gen: Some(memo.gen) }
}

/// The value of the stack slot at `a` if it lies in `[lo, top)`, 8-aligned (the live part of
/// this thread's stack when `lo` is at or above the stack pointer); else `None`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn read(a: u64, lo: u64, top: u64) -> Option<u64> {
    // `a` comes from registers and stack slots of frames that may have no frame pointer: any
    // value, up to u64::MAX, so the end is computed without overflow (an overflow panics in
    // debug builds and, wrapped, would pass the check in release builds).
    let inside = a.is_multiple_of(8) && a >= lo && a.checked_add(8).is_some_and(|end| end <= top);
    // SAFETY: `a` is 8-aligned and within [lo, top), the live part of this thread's stack.
    inside.then(|| unsafe { (a as *const u64).read() })
}

/// The walk from the state (`lookup`, `sp`, `bp`) of frame `*n`, writing `out[*n..]`, each
/// frame remembered in `memo` if given. Returns the number of frames in `out`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn walk(
    out: &mut [MaybeUninit<u64>],
    n: &mut usize,
    mut lookup: u64,
    mut sp: u64,
    mut bp: u64,
    top: u64,
    memo: Option<(&mut Memo, u64)>,
) -> usize {
    // The memo and the walk's starting stack pointer (the base of the offsets remembered).
    let (mut memo, start) = match memo {
        Some((m, start)) => (Some(m), start),
        None => (None, 0),
    };
    // Frames remembered from the start: a frame whose slots are too far from the start for
    // `Seen`'s offsets ends the memo there (the walk goes on).
    let mut kept = *n;
    while *n < out.len() {
        let i = *n;
        let rule = match memo.as_deref_mut() {
            Some(m) if i < MEMO_FRAMES => {
                let slot = &mut m.rules[i];
                if slot.0 == lookup && slot.1 != 0 {
                    slot.1
                } else {
                    let r = rule_for(lookup);
                    *slot = (lookup, r);
                    r
                }
            }
            _ => rule_for(lookup),
        };
        let (cfa, ra_slot, next_bp, bp_slot) = match base(rule) {
            BASE_RSP | BASE_RBP => {
                let b = if base(rule) == BASE_RSP { sp } else { bp };
                let cfa = b.wrapping_add(cfa_off(rule) as u64);
                if rbp_rule(rule) == RBP_SAVED {
                    let slot = cfa.wrapping_add(rbp_off(rule) as u64);
                    match read(slot, sp, top) {
                        Some(v) => (cfa, cfa.wrapping_sub(8), v, slot),
                        None => break,
                    }
                } else {
                    (cfa, cfa.wrapping_sub(8), bp, 0)
                }
            }
            BASE_FP => {
                // No CFI: the frame pointer chain, if rbp points into the stack above us.
                let Some(saved_bp) = read(bp, sp, top) else { break };
                (bp.wrapping_add(16), bp.wrapping_add(8), saved_bp, bp)
            }
            _ => break,
        };
        if cfa <= sp || cfa > top {
            break;
        }
        let Some(ra) = read(ra_slot, sp, top) else { break };
        if ra == 0 {
            break;
        }
        out[i] = MaybeUninit::new(ra);
        if let Some(m) = memo.as_deref_mut() {
            if i < MEMO_FRAMES && kept == i {
                // Both slots passed `read`, so they lie at or above `sp`, itself at or above
                // `start`; `bp_slot` is 0 when no frame pointer was read.
                let ra_off = u32::try_from(ra_slot - start).ok();
                let bp_words = if bp_slot == 0 { Some(0) } else { u32::try_from((bp_slot - start) / 8 + 1).ok() };
                if let (Some(ra_off), Some(b)) = (ra_off, bp_words.filter(|&b| b < USES_BP)) {
                    let uses_bp = if matches!(base(rule), BASE_RBP | BASE_FP) { USES_BP } else { 0 };
                    m.seen[i] = Seen { ra, ra_off, bp: b | uses_bp };
                    m.cfa[i] = cfa;
                    m.in_bp[i] = bp;
                    kept = i + 1;
                }
            }
        }
        *n = i + 1;
        sp = cfa;
        bp = next_bp;
        lookup = ra - 1;
    }
    if let Some(m) = memo {
        m.n = kept.min(MEMO_FRAMES);
    }
    *n
}

/// Other architectures: no fast unwinder; the caller falls back to the backtrace crate.
#[cfg(not(target_arch = "x86_64"))]
pub fn capture(_out: &mut [MaybeUninit<u64>], _memo: bool) -> Walk {
    Walk { n: 0, gen: None }
}
