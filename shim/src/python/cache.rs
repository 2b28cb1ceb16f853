//! The code-object cache: each code object met in a stack is copied once (file name, qualified
//! name, first line, line table) into memory this library owns, under an id that the writer
//! sends to the collector; later stacks carry only the id.

use std::collections::HashMap;
use std::sync::atomic::{AtomicPtr, Ordering::*};
use std::sync::{Arc, Mutex};

use gpushim_wire::PyFrame;

use super::layout::{has_type, rd, Layout};
use super::walk::{Raw, MAX_PY_FRAMES};
use crate::hash::FastHash;

/// Most code objects remembered; past that, events whose stacks meet a new code object get no
/// Python frames (the copies are never freed, so this bounds memory to a few tens of MiB).
const MAX_CODES: usize = 1 << 16;
/// Longest file or function name copied, in characters; longer ones are cut.
const MAX_STR: usize = 4096;
/// Longest line table copied, bytes; offsets past a cut table have no line.
const MAX_LINETABLE: usize = 256 * 1024;

/// What the report needs of one code object, copied while it was alive.
#[derive(Debug)]
pub struct CodeInfo {
    /// `co_filename`.
    pub filename: String,
    /// `co_qualname` (3.11+) or `co_name`.
    pub name: String,
    /// `co_firstlineno`.
    pub firstlineno: i32,
    /// `co_linetable`'s bytes (cut at [`MAX_LINETABLE`]).
    pub linetable: Vec<u8>,
}

/// A code object seen before: its id and the fields that tell whether the object now at that
/// address is still the same one.
struct Slot {
    id: u32,
    check: [usize; 4],
}

/// Code objects by address, and their copies by id. Owned by this library: the application never
/// takes this lock.
#[derive(Default)]
struct Cache {
    by_addr: HashMap<usize, Slot, FastHash>,
    infos: Vec<Arc<CodeInfo>>,
}

/// The cache; replaced by a fresh one in a forked child (a thread of the parent may have held
/// the lock at the fork). Leaked on purpose.
static CACHE: AtomicPtr<Mutex<Cache>> = AtomicPtr::new(std::ptr::null_mut());

fn cache() -> &'static Mutex<Cache> {
    let p = CACHE.load(Acquire);
    if !p.is_null() {
        // SAFETY: set below from a leaked Box, never freed.
        return unsafe { &*p };
    }
    let fresh = Box::into_raw(Box::new(Mutex::new(Cache::default())));
    match CACHE.compare_exchange(std::ptr::null_mut(), fresh, AcqRel, Acquire) {
        // SAFETY: `fresh` was just leaked and is now the cache.
        Ok(_) => unsafe { &*fresh },
        Err(other) => {
            // SAFETY: `fresh` never escaped; `other` is a leaked cache.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: `other` is the cache another thread leaked; it is never freed.
            unsafe { &*other }
        }
    }
}

/// The check fields of the code object at `code`: first line, name, file name and line table
/// pointers.
///
/// # Safety
/// `code` must be a live code object of the interpreter `l` describes.
pub(crate) unsafe fn check_of(l: &Layout, code: usize) -> [usize; 4] {
    // SAFETY: fields of a live code object.
    unsafe {
        [
            rd::<i32>(code + l.off.co_firstlineno) as u32 as usize,
            rd::<usize>(code + l.off.co_name),
            rd::<usize>(code + l.off.co_filename),
            rd::<usize>(code + l.off.co_linetable),
        ]
    }
}

/// One frame of a thread's previous capture: the code object's address, its check fields and
/// its id (`check[0] == usize::MAX`: empty).
#[derive(Clone, Copy)]
struct Memo {
    code: usize,
    check: [usize; 4],
    id: u32,
}

const NO_MEMO: Memo = Memo { code: 0, check: [usize::MAX; 4], id: 0 };

thread_local! {
    /// Per frame number (innermost first), the code object the thread's previous capture met
    /// there and its id: a frame whose code address and check fields are the ones
    /// remembered takes the id without the shared cache's lock and hash lookup. Sound for the
    /// same reason as the shared cache: a code object is immutable, and one freed with another
    /// allocated at its address is told apart by the same check fields (first line, and the
    /// name, file name and line table objects' addresses, which the old object held alive, so
    /// a new object has them equal only if it shares those very objects and first line, and then
    /// what the report shows of it is equal too). Used only inside the hooks' guard (one capture
    /// at a time per thread); cleared in a forked child with the shared cache.
    /// On the heap (`per_thread`).
    static MEMO: crate::per_thread::PerThread<[Memo; MAX_PY_FRAMES]> = const { crate::per_thread::PerThread::new() };
}

fn new_memo() -> Box<[Memo; MAX_PY_FRAMES]> {
    Box::new([NO_MEMO; MAX_PY_FRAMES])
}

/// Turns code addresses into ids, one frame at a time, for one capture: this thread's memo of
/// the previous capture's code ids by frame number first, then the shared cache (locked once per
/// capture, on the first frame the memo does not know).
pub(crate) struct Interner<'a> {
    l: &'a Layout,
    memo: *mut [Memo; MAX_PY_FRAMES],
    shared: Option<std::sync::MutexGuard<'static, Cache>>,
}

impl<'a> Interner<'a> {
    /// `memo`: use this thread's memo of the previous capture's code ids (only inside the hooks'
    /// guard).
    pub(crate) fn new(l: &'a Layout, memo: bool) -> Interner<'a> {
        let memo: *mut [Memo; MAX_PY_FRAMES] = if memo {
            // SAFETY: this thread's memo, one use at a time (see MEMO).
            MEMO.try_with(|m| unsafe { m.get(new_memo) as *mut _ }).unwrap_or(std::ptr::null_mut())
        } else {
            std::ptr::null_mut()
        };
        Interner { l, memo, shared: None }
    }

    /// The id of the code object at `code`, the `i`-th frame of the capture (innermost first),
    /// and its check fields; `None` when the cache is full or the object could not be copied.
    ///
    /// # Safety
    /// `code` must be a live code object of the interpreter (type-checked, held by its frame).
    pub(crate) unsafe fn id(&mut self, i: usize, code: usize) -> Option<(u32, [usize; 4])> {
        let l = self.l;
        // SAFETY: the caller's promise.
        let check = unsafe { check_of(l, code) };
        // SAFETY: this thread's memo, one use at a time (see MEMO); `i` is checked.
        let slot = (!self.memo.is_null() && i < MAX_PY_FRAMES).then(|| unsafe { &mut (*self.memo)[i] });
        if let Some(m) = &slot {
            if m.code == code && m.check == check {
                return Some((m.id, check));
            }
        }
        let c = self.shared.get_or_insert_with(|| cache().lock().unwrap_or_else(|e| e.into_inner()));
        let id = match c.by_addr.get(&code) {
            Some(s) if s.check == check => s.id,
            _ => {
                if c.infos.len() >= MAX_CODES {
                    return None;
                }
                // SAFETY: as above.
                let info = unsafe { copy_code(l, code) }?;
                let id = c.infos.len() as u32;
                c.infos.push(Arc::new(info));
                c.by_addr.insert(code, Slot { id, check });
                id
            }
        };
        if let Some(m) = slot {
            *m = Memo { code, check, id };
        }
        Some((id, check))
    }
}

/// Turns code addresses into ids in `out` (the first `raw.len()` entries), copying each code
/// object not seen before; the number of frames written.
/// `memo`: use this thread's memo of the previous capture's code ids.
pub(crate) fn intern_into(l: &Layout, raw: &[Raw], out: &mut [PyFrame; MAX_PY_FRAMES], memo: bool) -> Option<usize> {
    let mut ids = Interner::new(l, memo);
    for (i, r) in raw.iter().enumerate().take(MAX_PY_FRAMES) {
        // SAFETY: `r.code` passed the code type check in `walk` and is held alive by its frame.
        let (id, _) = unsafe { ids.id(i, r.code) }?;
        out[i] = PyFrame { code: id, offset: r.offset, entry: r.entry };
    }
    Some(raw.len().min(MAX_PY_FRAMES))
}

/// Copies what the report needs of the code object at `code`.
///
/// # Safety
/// `code` must be a live code object of the interpreter `l` describes.
unsafe fn copy_code(l: &Layout, code: usize) -> Option<CodeInfo> {
    // SAFETY: fields of a live code object; the strings and bytes it points to are immutable and
    // kept alive by it; each is type-checked before it is read.
    unsafe {
        let filename = read_str(l, rd(code + l.off.co_filename))?;
        let name = read_str(l, rd(code + l.off.co_name))?;
        let firstlineno: i32 = rd(code + l.off.co_firstlineno);
        let linetable = read_bytes(l, rd(code + l.off.co_linetable))?;
        Some(CodeInfo { filename, name, firstlineno, linetable })
    }
}

/// The text of a compact `str` object (every code object's names are compact).
///
/// # Safety
/// `s` must be readable if plausible (a field of a live object).
unsafe fn read_str(l: &Layout, s: usize) -> Option<String> {
    // SAFETY: checked to be a str object, whose header and (compact) data follow it in memory.
    unsafe {
        if !has_type(s, l.unicode_type) {
            return None;
        }
        let len: isize = rd(s + l.str_length);
        let state: u32 = rd(s + l.str_state);
        let (kind, compact, ascii) = ((state >> 2) & 7, state & 0x20 != 0, state & 0x40 != 0);
        if len < 0 || !compact {
            return None;
        }
        let n = (len as usize).min(MAX_STR);
        let data = s + if ascii { l.off.ascii_data } else { l.off.compact_data };
        let text = match kind {
            1 => {
                let b = std::slice::from_raw_parts(data as *const u8, n);
                // Latin-1 (ASCII included): each byte is the code point.
                b.iter().map(|&c| char::from(c)).collect()
            }
            2 => {
                let b = std::slice::from_raw_parts(data as *const u8, n * 2);
                let u: Vec<u16> = b.chunks_exact(2).map(|c| u16::from_ne_bytes([c[0], c[1]])).collect();
                String::from_utf16_lossy(&u)
            }
            4 => {
                let b = std::slice::from_raw_parts(data as *const u8, n * 4);
                b.chunks_exact(4)
                    .map(|c| char::from_u32(u32::from_ne_bytes([c[0], c[1], c[2], c[3]])).unwrap_or('\u{fffd}'))
                    .collect()
            }
            _ => return None,
        };
        Some(text)
    }
}

/// The contents of a `bytes` object.
///
/// # Safety
/// `b` must be readable if plausible (a field of a live object).
unsafe fn read_bytes(l: &Layout, b: usize) -> Option<Vec<u8>> {
    // SAFETY: checked to be a bytes object, whose ob_size bytes follow its header.
    unsafe {
        if !has_type(b, l.bytes_type) {
            return None;
        }
        let len: isize = rd(b + l.ob_size);
        if len < 0 {
            return None;
        }
        let n = (len as usize).min(MAX_LINETABLE);
        Some(std::slice::from_raw_parts((b + l.bytes_sval) as *const u8, n).to_vec())
    }
}

/// The copy of code `id`, for the writer.
pub fn code_info(id: u32) -> Option<Arc<CodeInfo>> {
    let c = cache().lock().unwrap_or_else(|e| e.into_inner());
    c.infos.get(id as usize).cloned()
}

/// In a forked child: a fresh cache (a thread of the parent may have held its lock).
pub(crate) fn reset() {
    CACHE.store(std::ptr::null_mut(), Release);
    // The ids restart from 0: the forking thread (the child's only one) forgets its memo.
    let _ = MEMO.try_with(|m| {
        // SAFETY: the child's only thread, outside any capture.
        if let Some(m) = unsafe { m.existing() } {
            *m = [NO_MEMO; MAX_PY_FRAMES];
        }
    });
}
