//! The heap walk's breadth-first core in native code: `holders.py`'s `Walk` hands its queue to
//! one builtin function, `_gpushim_bfs`, which follows the referents of the objects that need
//! nothing else (a list, a dict, an instance with no GPU memory of its own) and keeps the set of
//! objects reached and each one's parent here, outside the interpreter's heap.
//!
//! Why: in Python, each object reached costs an `id()` (a new int object), a lookup in a set of
//! a million ints (nearly always a cache miss) and three appends (docs/performance.md,
//! "Heap walk", has the times). Here the same step is a call of the type's
//! `tp_traverse`, a type-pointer check and one insert in a hash set of addresses.
//!
//! What it does is what the Python loop did, in the same order, so the result is the same byte
//! for byte (`tests/holders.rs` compares both walkers' files):
//! - The referents of an object are what `gc.get_referents` returns: nothing unless the object
//!   is tracked by the GC (`PyObject_IS_GC`), else what its type's `tp_traverse` visits
//!   (CPython's `Modules/gcmodule.c`, `gc_get_referents`, 3.10 to 3.13).
//! - Objects of the exact types the walker calls atoms (strings, numbers, `None`, code) are never
//!   queued; every other object is queued once, at its first sighting, with the queue position
//!   of the object it was reached from.
//! - An object whose type the walker has not decided, or decided to look at itself (it may own
//!   GPU memory, or it is a frame), ends a run: the walker takes it, and hands its referents back
//!   with `LINK`.
//!
//! Safety: it runs only inside the walker, on the thread that holds the GIL. It reads an
//! object's type pointer at the offset the interpreter's `None` was checked against
//! ([`super::layout::OB_TYPE`]), and calls only the C API functions listed in [`Api`]. The
//! interpreter's objects are not changed: the queue (the walker's own list) gets appends, and
//! references are only borrowed. Any failure returns `NULL` with a `RuntimeError` set, which
//! the walker catches (a walk never raises into the program). Off by `GPUSHIM_HEAP_WALK_NATIVE=0`
//! (the walker then runs its own Python loop), and off for any interpreter but CPython 3.10 to
//! 3.13 with the standard object header.

use crate::race_once::RaceOnce;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::hash::{BuildHasherDefault, Hasher};

use super::detect;
use super::layout::{rd, OB_TYPE};

type Obj = *mut c_void;
/// `int (*visitproc)(PyObject *, void *)` (Include/object.h).
type VisitProc = extern "C" fn(Obj, *mut c_void) -> c_int;
/// `int (*traverseproc)(PyObject *, visitproc, void *)` (Include/object.h).
type TraverseProc = unsafe extern "C" fn(Obj, VisitProc, *mut c_void) -> c_int;

/// The operations of `_gpushim_bfs(op, ...)`; holders.py names the same numbers.
const OP_RESET: i64 = 0;
const OP_ADD: i64 = 1;
const OP_RUN: i64 = 2;
const OP_LINK: i64 = 3;
const OP_PARENT: i64 = 4;
const OP_CONTAINS: i64 = 5;
const OP_FREE: i64 = 6;

/// `Py_tp_traverse` (Include/typeslots.h); `PyType_GetSlot` answers it for static types from
/// CPython 3.10 ("Changed in version 3.10: PyType_GetSlot() can now accept all types").
const PY_TP_TRAVERSE: c_int = 71;

/// The C API functions used (signatures of the CPython 3.10–3.13 headers named).
struct Api {
    /// `int PyList_Append(PyObject *, PyObject *)` (Include/listobject.h).
    list_append: unsafe extern "C" fn(Obj, Obj) -> c_int,
    /// `PyObject *PyList_GetItem(PyObject *, Py_ssize_t)` (borrowed).
    list_get_item: unsafe extern "C" fn(Obj, isize) -> Obj,
    /// `Py_ssize_t PyList_Size(PyObject *)`.
    list_size: unsafe extern "C" fn(Obj) -> isize,
    /// `PyObject *PyTuple_GetItem(PyObject *, Py_ssize_t)` (borrowed; Include/tupleobject.h).
    tuple_get_item: unsafe extern "C" fn(Obj, isize) -> Obj,
    /// `Py_ssize_t PyTuple_Size(PyObject *)`.
    tuple_size: unsafe extern "C" fn(Obj) -> isize,
    /// `long long PyLong_AsLongLong(PyObject *)` and `PyLong_FromLongLong` (Include/longobject.h).
    long_as_long_long: unsafe extern "C" fn(Obj) -> i64,
    long_from_long_long: unsafe extern "C" fn(i64) -> Obj,
    /// `int PySet_Contains(PyObject *, PyObject *)` (Include/setobject.h).
    set_contains: unsafe extern "C" fn(Obj, Obj) -> c_int,
    /// `int PyObject_IS_GC(PyObject *)` (Include/objimpl.h, a function since 3.9).
    object_is_gc: unsafe extern "C" fn(Obj) -> c_int,
    /// `void *PyType_GetSlot(PyTypeObject *, int)` (Include/object.h).
    type_get_slot: unsafe extern "C" fn(Obj, c_int) -> *mut c_void,
    /// `void PyErr_SetString(PyObject *, const char *)` and `PyObject *PyErr_Occurred(void)`
    /// (Include/pyerrors.h).
    err_set_string: unsafe extern "C" fn(Obj, *const c_char),
    err_occurred: unsafe extern "C" fn() -> Obj,
    /// `Py_DecRef` and `Py_IncRef` (Include/object.h).
    decref: unsafe extern "C" fn(Obj),
    incref: unsafe extern "C" fn(Obj),
    /// The value of `PyExc_RuntimeError`; `_Py_TrueStruct` and `_Py_FalseStruct`.
    runtime_error: Obj,
    true_: Obj,
    false_: Obj,
}

// SAFETY: function pointers and addresses of static objects, used with the GIL held.
unsafe impl Send for Api {}
// SAFETY: as above.
unsafe impl Sync for Api {}

static API: RaceOnce<Option<Api>> = RaceOnce::new();

fn api() -> Option<&'static Api> {
    API.get_or_init(|| {
        let sym = detect::python_symbols()?;
        let version = detect::python_version(&sym)?;
        let minor = (version >> 16) & 0xff;
        if version >> 24 != 3 || !(10..=13).contains(&minor) {
            return None;
        }
        let f = |n: &CStr| -> Option<usize> { Some(sym.get(n)).filter(|&a| a != 0) };
        let (none, none_type) = (f(c"_Py_NoneStruct")?, f(c"_PyNone_Type")?);
        // The standard object header: None's type pointer where type pointers are read here (a
        // free-threaded or Py_TRACE_REFS build fails this).
        // SAFETY: `_Py_NoneStruct` is the interpreter's static `None` object.
        if unsafe { rd::<usize>(none + OB_TYPE) } != none_type {
            return None;
        }
        let exc = f(c"PyExc_RuntimeError")?;
        // SAFETY: each address is the interpreter's exported function of that name, whose C
        // signature is the field's; `PyExc_RuntimeError` is a `PyObject *` variable.
        #[allow(clippy::missing_transmute_annotations)]
        unsafe {
            use std::mem::transmute as t;
            Some(Api {
                list_append: t(f(c"PyList_Append")?),
                list_get_item: t(f(c"PyList_GetItem")?),
                list_size: t(f(c"PyList_Size")?),
                tuple_get_item: t(f(c"PyTuple_GetItem")?),
                tuple_size: t(f(c"PyTuple_Size")?),
                long_as_long_long: t(f(c"PyLong_AsLongLong")?),
                long_from_long_long: t(f(c"PyLong_FromLongLong")?),
                set_contains: t(f(c"PySet_Contains")?),
                object_is_gc: t(f(c"PyObject_IS_GC")?),
                type_get_slot: t(f(c"PyType_GetSlot")?),
                err_set_string: t(f(c"PyErr_SetString")?),
                err_occurred: t(f(c"PyErr_Occurred")?),
                decref: t(f(c"Py_DecRef")?),
                incref: t(f(c"Py_IncRef")?),
                runtime_error: rd::<usize>(exc) as Obj,
                true_: f(c"_Py_TrueStruct")? as Obj,
                false_: f(c"_Py_FalseStruct")? as Obj,
            })
        }
    })
    .as_ref()
}

/// Whether the native core can be offered to the walker in this interpreter.
pub(super) fn available() -> bool {
    api().is_some()
}

/// A hasher for object addresses: they are distinct and 16-byte aligned, so one multiply
/// (Fibonacci hashing) spreads them; SipHash would cost more than the lookup's cache miss.
/// The table takes a bucket from the hash's low bits, and the multiply's best bits are its high
/// ones: the low 4 bits (always 0) are dropped and the product rotated by 32, so that tables up
/// to 2^32 buckets take their index from the product's high half. (Rotated by 20, a table past
/// 2^20 buckets got its upper index bits from the product's zero low bits: 2,000,000 objects
/// had their home buckets in a quarter of the table, and the walk took twice the Python loop's
/// time.)
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = ((n as u64) >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(32);
    }
}

type AddrBuild = BuildHasherDefault<AddrHasher>;

/// What the walker decided about a type, and its traverse function.
#[derive(Clone, Copy)]
struct TypeInfo {
    /// Objects of this type need nothing but their referents.
    plain: bool,
    traverse: Option<TraverseProc>,
}

/// One walk's state: the objects reached (by address) and each queue position's parent.
#[derive(Default)]
struct Bfs {
    seen: HashSet<usize, AddrBuild>,
    /// Per queue position, the position it was reached from (-1: a root).
    parent: Vec<i64>,
    /// Type pointers of the atoms (never queued).
    atoms: Vec<usize>,
    types: HashMap<usize, TypeInfo, AddrBuild>,
}

thread_local! {
    /// The walk in progress on this thread (walks run on the main thread, one at a time).
    static BFS: RefCell<Option<Bfs>> = const { RefCell::new(None) };
}

/// What the visit function works on: the walk, the queue and the position being expanded.
struct Visit<'a> {
    api: &'static Api,
    bfs: &'a mut Bfs,
    queue: Obj,
    from: i64,
    failed: bool,
}

impl Visit<'_> {
    /// Queues `o` (reached from `self.from`) unless it is an atom or was reached before.
    fn offer(&mut self, o: Obj) -> bool {
        if o.is_null() {
            return true;
        }
        // SAFETY: `o` is a live object handed out by the interpreter (a referent being visited,
        // or an item of a list the walker holds); its header was checked at start-up.
        let t = unsafe { rd::<usize>(o as usize + OB_TYPE) };
        if self.bfs.atoms.contains(&t) || !self.bfs.seen.insert(o as usize) {
            return true;
        }
        // SAFETY: the GIL is held and `queue` is the walker's list.
        if unsafe { (self.api.list_append)(self.queue, o) } != 0 {
            self.failed = true;
            return false;
        }
        self.bfs.parent.push(self.from);
        true
    }
}

extern "C" fn visit(o: Obj, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Visit` that `expand` passed to tp_traverse, alive for the call.
    let v = unsafe { &mut *(arg as *mut Visit) };
    if v.offer(o) {
        0
    } else {
        -1
    }
}

/// Why a call failed: the message of the `RuntimeError` it sets.
struct Failed(&'static CStr);

/// `_gpushim_bfs(op, *args)`, `METH_VARARGS`: see the module documentation and holders.py's
/// `_NativeWalk`. Never unwinds into the interpreter.
pub(super) extern "C" fn entry(_self: Obj, args: Obj) -> Obj {
    let Some(a) = api() else { return std::ptr::null_mut() };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        BFS.with(|cell| match cell.try_borrow_mut() {
            // SAFETY: called by the interpreter with the GIL held and `args` a tuple.
            Ok(mut st) => unsafe { call(a, &mut st, args) },
            Err(_) => Err(Failed(c"gpushim: the heap walk's native core was re-entered")),
        })
    }));
    match r {
        Ok(Ok(o)) => o,
        Ok(Err(Failed(msg))) => fail(a, msg),
        Err(_) => fail(a, c"gpushim: the heap walk's native core failed"),
    }
}

fn fail(a: &Api, msg: &CStr) -> Obj {
    // SAFETY: the GIL is held; an error already set (by a failed C API call) is kept.
    unsafe {
        if (a.err_occurred)().is_null() {
            (a.err_set_string)(a.runtime_error, msg.as_ptr());
        }
    }
    std::ptr::null_mut()
}

/// # Safety
/// The GIL is held; `args` is a tuple.
unsafe fn call(a: &'static Api, st: &mut Option<Bfs>, args: Obj) -> Result<Obj, Failed> {
    let bad = Failed(c"gpushim: bad arguments to the heap walk's native core");
    // SAFETY: the caller's promise; every item is borrowed from `args`, alive for the call.
    unsafe {
        let n = (a.tuple_size)(args);
        let arg = |i: isize| -> Result<Obj, Failed> {
            if i >= n {
                return Err(Failed(c"gpushim: too few arguments to the heap walk's native core"));
            }
            Ok((a.tuple_get_item)(args, i))
        };
        let int = |o: Obj| -> Result<i64, Failed> {
            let v = (a.long_as_long_long)(o);
            if v == -1 && !(a.err_occurred)().is_null() {
                return Err(Failed(c"gpushim: not an int"));
            }
            Ok(v)
        };
        let op = int(arg(0)?)?;
        if op == OP_RESET {
            let atoms = arg(1)?;
            let mut b = Bfs::default();
            for i in 0..(a.tuple_size)(atoms).max(0) {
                b.atoms.push((a.tuple_get_item)(atoms, i) as usize);
            }
            *st = Some(b);
            return Ok(boolean(a, true));
        }
        if op == OP_FREE {
            *st = None;
            return Ok(boolean(a, true));
        }
        let Some(b) = st.as_mut() else { return Err(Failed(c"gpushim: no heap walk in progress")) };
        match op {
            OP_ADD => {
                let (o, from) = (arg(1)?, int(arg(2)?)?);
                let added = b.seen.insert(o as usize);
                if added {
                    b.parent.push(from);
                }
                Ok(boolean(a, added))
            }
            OP_RUN => {
                let (queue, start, end, plain, known) = (arg(1)?, int(arg(2)?)?, int(arg(3)?)?, arg(4)?, arg(5)?);
                let p = run(a, b, queue, start, end, plain, known)?;
                Ok(new_int(a, p)?)
            }
            OP_LINK => {
                let (queue, refs, from) = (arg(1)?, arg(2)?, int(arg(3)?)?);
                let mut v = Visit { api: a, bfs: b, queue, from, failed: false };
                for i in 0..(a.list_size)(refs).max(0) {
                    if !v.offer((a.list_get_item)(refs, i)) {
                        return Err(Failed(c"gpushim: the walk's queue could not grow"));
                    }
                }
                Ok(boolean(a, true))
            }
            OP_PARENT => {
                let i = int(arg(1)?)?;
                let p = usize::try_from(i).ok().and_then(|i| b.parent.get(i)).ok_or(bad)?;
                Ok(new_int(a, *p)?)
            }
            OP_CONTAINS => {
                let k = int(arg(1)?)?;
                Ok(boolean(a, b.seen.contains(&(k as usize))))
            }
            _ => Err(bad),
        }
    }
}

fn boolean(a: &Api, v: bool) -> Obj {
    let o = if v { a.true_ } else { a.false_ };
    // SAFETY: the GIL is held; True and False are static objects.
    unsafe { (a.incref)(o) };
    o
}

fn new_int(a: &Api, v: i64) -> Result<Obj, Failed> {
    // SAFETY: the GIL is held.
    let o = unsafe { (a.long_from_long_long)(v) };
    if o.is_null() {
        Err(Failed(c"gpushim: out of memory"))
    } else {
        Ok(o)
    }
}

/// Whether `set` (a Python set of ints) holds the int `k`.
///
/// # Safety
/// The GIL is held; `set` is a set.
unsafe fn set_has(a: &Api, set: Obj, k: usize) -> Result<bool, Failed> {
    let key = new_int(a, k as i64)?;
    // SAFETY: the caller's promise; `key` is released on every path.
    let r = unsafe {
        let r = (a.set_contains)(set, key);
        (a.decref)(key);
        r
    };
    if r < 0 {
        return Err(Failed(c"gpushim: set lookup failed"));
    }
    Ok(r == 1)
}

/// Expands queue positions `start..end` whose types are plain; returns the first position not
/// expanded (`end`, or an object the walker must look at itself).
///
/// # Safety
/// The GIL is held; `queue` is the walker's list; `plain` and `known` are its sets of type ids.
unsafe fn run(
    a: &'static Api,
    b: &mut Bfs,
    queue: Obj,
    start: i64,
    end: i64,
    plain: Obj,
    known: Obj,
) -> Result<i64, Failed> {
    // SAFETY: the caller's promise.
    let len = unsafe { (a.list_size)(queue) } as i64;
    let end = end.min(len);
    let mut p = start.max(0);
    while p < end {
        // SAFETY: 0 <= p < len(queue); the item is borrowed from the walker's list, which only
        // grows while this runs.
        let o = unsafe { (a.list_get_item)(queue, p as isize) };
        if o.is_null() {
            return Err(Failed(c"gpushim: the walk's queue changed"));
        }
        // SAFETY: a live object; header checked at start-up.
        let t = unsafe { rd::<usize>(o as usize + OB_TYPE) };
        let info = match b.types.get(&t) {
            Some(i) => *i,
            None => {
                // SAFETY: as above; the sets are the walker's.
                let is_plain = unsafe { set_has(a, plain, t)? };
                // SAFETY: as above.
                let is_known = is_plain || unsafe { set_has(a, known, t)? };
                if !is_known {
                    // Not decided yet: the walker decides it.
                    return Ok(p);
                }
                // SAFETY: `t` is a type object (an object's type pointer).
                let slot = unsafe { (a.type_get_slot)(t as Obj, PY_TP_TRAVERSE) };
                if slot.is_null() {
                    // SAFETY: the GIL is held; a failed lookup's error is not the walk's.
                    unsafe {
                        if !(a.err_occurred)().is_null() {
                            return Err(Failed(c"gpushim: PyType_GetSlot failed"));
                        }
                    }
                }
                // SAFETY: Py_tp_traverse's slot holds a traverseproc (or NULL).
                let traverse =
                    (!slot.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, TraverseProc>(slot) });
                let i = TypeInfo { plain: is_plain, traverse };
                b.types.insert(t, i);
                i
            }
        };
        if !info.plain {
            return Ok(p);
        }
        // What gc.get_referents does: only objects the GC tracks, through tp_traverse.
        if let Some(trav) = info.traverse {
            // SAFETY: the GIL is held; `o` is alive (the queue holds it).
            if unsafe { (a.object_is_gc)(o) } != 0 {
                let mut v = Visit { api: a, bfs: b, queue, from: p, failed: false };
                // SAFETY: the type's own traverse function on one of its objects, with a visit
                // function that only reads the referents' headers and appends to the queue.
                let r = unsafe { trav(o, visit, &mut v as *mut Visit as *mut c_void) };
                if v.failed {
                    return Err(Failed(c"gpushim: the walk's queue could not grow"));
                }
                if r != 0 {
                    return Err(Failed(c"gpushim: an object's traverse failed"));
                }
            }
        }
        p += 1;
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bucket a table of 2^22 buckets (2,000,000 entries) takes for each of 2,000,000 object
    /// addresses 48 bytes apart: spread over the whole table, not clustered in a part of it.
    #[test]
    fn addresses_spread_over_a_large_table() {
        let mask = (1u64 << 22) - 1;
        let mut used = vec![false; 1 << 22];
        let mut distinct = 0usize;
        for i in 0..2_000_000u64 {
            let mut h = AddrHasher::default();
            h.write_usize((0x7f00_0000_0000 + i * 48) as usize);
            let b = (h.finish() & mask) as usize;
            if !used[b] {
                used[b] = true;
                distinct += 1;
            }
        }
        // Rotated by 20, every home bucket lay below 2^20 (364,099 distinct).
        assert!(distinct > 1_500_000, "{distinct} distinct buckets");
        assert!(used[3 << 20..].iter().filter(|&&u| u).count() > 300_000);
    }
}
