//! The event stream between `libgpushim.so` (the writer) and the `gpushim` collector (the reader).
//!
//! A stream is a 12-byte [header](write_header) followed by frames. Every frame is
//! `len: u32 LE` (the number of bytes that follow, tag included), `tag: u8`, then the body.
//! All integers are little-endian; strings are `u32 LE` length + UTF-8 bytes; lists are
//! `u32 LE` count + items. A reader that meets a tag it does not know skips the frame, so a
//! newer writer can add event types without breaking an older collector of the same version.
//!
//! Invariants the collector relies on:
//! - Every [`Alloc`], [`Free`] and [`Failed`] carries a sequence number (`seq`) drawn from one
//!   process-wide counter; together they are dense from 0, so the reader can put events from
//!   many threads back in order. A free takes its number *before* the real free call and an
//!   allocation *after* the real allocation call, so a reused address is always freed first.
//! - A [`Stack`] with a given id is sent before the first event that names it; so are its
//!   [`PyStack`] (if the stack has Python frames) and every [`PyCode`] that the `PyStack` names.
//! - A stack id stands for the native frames *and* the Python frames together: two allocations
//!   with the same native frames but different Python frames have different stack ids (the
//!   [`Stack`] is then sent once per id, with equal frames).
//! - A [`Snapshot`] asks for the live set made of exactly the events with `seq < boundary`.
//! - A [`FreePending`] takes its free's place in sequence order when that free's call has not
//!   returned by the time of a snapshot; the [`Free`] with the same `seq` comes later.
//!
//! ```
//! use gpushim_wire::{Decoder, Event, Exit, write_header, encode};
//! let mut buf = Vec::new();
//! write_header(&mut buf);
//! encode(&Event::Exit(Exit { ts_ns: 7 }), &mut buf);
//! let mut dec = Decoder::new(&buf[..]).unwrap();
//! assert_eq!(dec.next_event().unwrap(), Some(Event::Exit(Exit { ts_ns: 7 })));
//! assert_eq!(dec.next_event().unwrap(), None);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;
use std::io::{self, Read};

/// The first eight bytes of every stream.
pub const MAGIC: [u8; 8] = *b"GPUSHIM\0";
/// The version of this format; a reader refuses any other.
pub const VERSION: u16 = 1;
/// Length of the stream header in bytes: magic, version (u16), reserved (u16).
pub const HEADER_LEN: usize = 12;
/// Largest frame a reader accepts, in bytes. Frames are small (a stack of 256 frames is about
/// 2 KiB); anything larger is corruption.
pub const MAX_FRAME: u32 = 16 << 20;
/// Frames up to this length (all that the shim writes in practice) are read into a buffer
/// sized in advance; longer ones as their bytes arrive.
const SMALL_FRAME: u32 = 64 << 10;
/// The stack id that means "no backtrace was recorded" (backtraces switched off).
pub const NO_STACK: u32 = u32::MAX;

/// What kind of memory an allocation is, as the report groups it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Device memory: `cudaMalloc*`, `cuMemAlloc*`, stream-ordered and pool allocations,
    /// `cuMemCreate` on a device location, CUDA arrays (`cudaMallocArray`, `cuArrayCreate`, …;
    /// their address is the array's handle, which no pointer can equal).
    Device = 0,
    /// Managed (unified) memory: `cudaMallocManaged`, `cuMemAllocManaged`.
    Managed = 1,
    /// Pinned (page-locked) host memory: `cudaMallocHost`, `cudaHostAlloc`, `cuMemHostAlloc`,
    /// `cuMemAllocHost`, `cuMemCreate` on a host location.
    PinnedHost = 2,
}

impl Kind {
    /// All kinds, in report order.
    pub const ALL: [Kind; 3] = [Kind::Device, Kind::Managed, Kind::PinnedHost];

    /// The name used in reports: `device`, `managed` or `pinned_host`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Device => "device",
            Kind::Managed => "managed",
            Kind::PinnedHost => "pinned_host",
        }
    }

    fn from_u8(v: u8) -> Result<Kind, WireError> {
        Ok(match v {
            0 => Kind::Device,
            1 => Kind::Managed,
            2 => Kind::PinnedHost,
            _ => return Err(WireError::BadValue("kind", u64::from(v))),
        })
    }
}

macro_rules! apis {
    ($($variant:ident = $n:literal, $name:literal, $free:literal;)*) => {
        /// The CUDA entry point that made an allocation or free. The outermost intercepted call
        /// is the one recorded: a `cudaMalloc` that calls `cuMemAlloc_v2` inside is `CudaMalloc`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Api { $(#[doc = concat!("`", $name, "`")] $variant = $n,)* }

        impl Api {
            /// Every API, in wire order.
            pub const ALL: &'static [Api] = &[$(Api::$variant,)*];

            /// The function's name as a user knows it (no `_v2`/`_ptsz` suffix).
            pub fn name(self) -> &'static str {
                match self { $(Api::$variant => $name,)* }
            }

            /// True if and only if this API releases memory.
            pub fn is_free(self) -> bool {
                match self { $(Api::$variant => $free,)* }
            }

            fn from_u8(v: u8) -> Result<Api, WireError> {
                match v {
                    $($n => Ok(Api::$variant),)*
                    _ => Err(WireError::BadValue("api", u64::from(v))),
                }
            }
        }
    };
}

apis! {
    CudaMalloc = 1, "cudaMalloc", false;
    CudaFree = 2, "cudaFree", true;
    CudaMallocAsync = 3, "cudaMallocAsync", false;
    CudaFreeAsync = 4, "cudaFreeAsync", true;
    CudaMallocFromPoolAsync = 5, "cudaMallocFromPoolAsync", false;
    CudaMallocManaged = 6, "cudaMallocManaged", false;
    CudaMallocPitch = 7, "cudaMallocPitch", false;
    CudaMallocHost = 8, "cudaMallocHost", false;
    CudaHostAlloc = 9, "cudaHostAlloc", false;
    CudaFreeHost = 10, "cudaFreeHost", true;
    CuMemAlloc = 11, "cuMemAlloc", false;
    CuMemFree = 12, "cuMemFree", true;
    CuMemAllocPitch = 13, "cuMemAllocPitch", false;
    CuMemAllocManaged = 14, "cuMemAllocManaged", false;
    CuMemAllocAsync = 15, "cuMemAllocAsync", false;
    CuMemFreeAsync = 16, "cuMemFreeAsync", true;
    CuMemAllocFromPoolAsync = 17, "cuMemAllocFromPoolAsync", false;
    CuMemHostAlloc = 18, "cuMemHostAlloc", false;
    CuMemAllocHost = 19, "cuMemAllocHost", false;
    CuMemFreeHost = 20, "cuMemFreeHost", true;
    CuMemCreate = 21, "cuMemCreate", false;
    CuMemRelease = 22, "cuMemRelease", true;
    CudaMallocArray = 23, "cudaMallocArray", false;
    CudaMalloc3DArray = 24, "cudaMalloc3DArray", false;
    CudaMallocMipmappedArray = 25, "cudaMallocMipmappedArray", false;
    CudaFreeArray = 26, "cudaFreeArray", true;
    CudaFreeMipmappedArray = 27, "cudaFreeMipmappedArray", true;
    CuArrayCreate = 28, "cuArrayCreate", false;
    CuArray3DCreate = 29, "cuArray3DCreate", false;
    CuMipmappedArrayCreate = 30, "cuMipmappedArrayCreate", false;
    CuArrayDestroy = 31, "cuArrayDestroy", true;
    CuMipmappedArrayDestroy = 32, "cuMipmappedArrayDestroy", true;
}

impl Api {
    /// True if and only if the address this API returns or takes is a `cuMemCreate` handle
    /// (`CUmemGenericAllocationHandle`) rather than a pointer. Handles and pointers live in
    /// separate key spaces of the live set.
    pub fn is_handle(self) -> bool {
        matches!(self, Api::CuMemCreate | Api::CuMemRelease)
    }
}

/// First frame of every stream: who is being traced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Process id of the target.
    pub pid: u32,
    /// Its parent's process id.
    pub ppid: u32,
    /// Wall-clock time at which tracing started, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// The target's command line (`/proc/self/cmdline`).
    pub command: Vec<String>,
    /// The target's working directory when tracing started.
    pub cwd: String,
    /// Where reports go (`$GPUSHIM_OUTPUT`, else `cwd`).
    pub output_dir: String,
    /// Version of the shim that wrote the stream.
    pub shim_version: String,
}

/// One loaded ELF module, from `dl_iterate_phdr`. An address `a` belongs to the module if some
/// range holds it; its address in the file's own virtual address space is `a - bias`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// Path of the file as the loader knows it (the main program's is resolved through
    /// `/proc/self/exe`).
    pub path: String,
    /// Load bias (`dlpi_addr`), bytes.
    pub bias: u64,
    /// Absolute `[start, end)` address ranges of its `PT_LOAD` segments.
    pub ranges: Vec<(u64, u64)>,
}

/// A distinct native backtrace, sent once, before the first event that uses its id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// Identifier, dense from 0 within one stream.
    pub id: u32,
    /// Return addresses, innermost first, with the shim's own frames already removed.
    pub frames: Vec<u64>,
}

/// A successful allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alloc {
    /// Global sequence number (see the crate docs).
    pub seq: u64,
    /// Monotonic clock (`CLOCK_MONOTONIC`), ns.
    pub ts_ns: u64,
    /// The pointer returned, or the `cuMemCreate` handle.
    pub addr: u64,
    /// Size in bytes as requested (for pitched allocations: pitch × height).
    pub size: u64,
    /// What kind of memory.
    pub kind: Kind,
    /// The outermost intercepted entry point.
    pub api: Api,
    /// Device ordinal, or -1 where it is not known or is the host.
    pub device: i32,
    /// The stream handle for stream-ordered calls, else 0.
    pub stream: u64,
    /// Kernel thread id of the allocating thread.
    pub tid: u32,
    /// Stack id, or [`NO_STACK`].
    pub stack: u32,
}

/// A call to a free function, successful or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Free {
    /// Global sequence number, taken before the real call.
    pub seq: u64,
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// The pointer or handle passed in.
    pub addr: u64,
    /// The entry point.
    pub api: Api,
    /// The stream for stream-ordered frees, else 0.
    pub stream: u64,
    /// Kernel thread id.
    pub tid: u32,
    /// The CUDA result code the real call returned (0 is success).
    pub result: i32,
}

/// A free call in progress: its sequence number was taken and the real call has not returned
/// (`cudaFree` waits for the device). The writer sends it only for a snapshot whose boundary
/// lies past `seq`, so that the snapshot need not wait for the call; the [`Free`] with the same
/// `seq` follows when the call returns (unless the process dies first). Until then the memory
/// counts as live: the program has not been told it is freed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreePending {
    /// The free's global sequence number.
    pub seq: u64,
    /// Monotonic clock when the call began, ns.
    pub ts_ns: u64,
    /// The pointer or handle passed in.
    pub addr: u64,
    /// The entry point.
    pub api: Api,
    /// The stream for stream-ordered frees, else 0.
    pub stream: u64,
    /// Kernel thread id.
    pub tid: u32,
}

/// An allocation call that failed; never part of the live set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failed {
    /// Global sequence number.
    pub seq: u64,
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// Size in bytes requested.
    pub size: u64,
    /// The kind it would have been.
    pub kind: Kind,
    /// The entry point.
    pub api: Api,
    /// Device ordinal, or -1.
    pub device: i32,
    /// Kernel thread id.
    pub tid: u32,
    /// Stack id, or [`NO_STACK`].
    pub stack: u32,
    /// The CUDA result code (2 is out of memory in both the runtime and the driver API).
    pub result: i32,
}

/// A request for a snapshot (SIGUSR1 or `gpushim snapshot`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The snapshot holds exactly the events with `seq < boundary`.
    pub boundary: u64,
    /// Monotonic clock when the request was seen, ns.
    pub ts_ns: u64,
}

/// The target ran its exit path (`exit()` or a return from `main`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    /// Monotonic clock, ns.
    pub ts_ns: u64,
}

/// Device memory as the driver saw it (`cuMemGetInfo`), sent with out-of-memory failures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemInfo {
    /// Monotonic clock, ns.
    pub ts_ns: u64,
    /// Device ordinal.
    pub device: i32,
    /// Free device memory, bytes.
    pub free: u64,
    /// Total device memory, bytes.
    pub total: u64,
}

/// The target runs CPython and its Python frames are recorded (sent once, before the first
/// [`PyStack`]). Stacks sent without a [`PyStack`] then had no Python frames on their thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyRuntime {
    /// The interpreter's `PY_VERSION_HEX` (`0x030C03F0` is 3.12.3 final).
    pub version: u32,
}

/// How a [`PyCode`]'s line table is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LineTableFormat {
    /// CPython 3.10's `co_linetable` (PEP 626): pairs of (unsigned byte-offset delta, signed
    /// line delta), line delta -128 meaning "no line".
    Pep626 = 1,
    /// CPython 3.11+'s location table `co_linetable` (PEP 657; `Objects/locations.md`).
    Pep657 = 2,
}

impl LineTableFormat {
    fn from_u8(v: u8) -> Result<LineTableFormat, WireError> {
        match v {
            1 => Ok(LineTableFormat::Pep626),
            2 => Ok(LineTableFormat::Pep657),
            _ => Err(WireError::BadValue("line table format", u64::from(v))),
        }
    }
}

/// A Python code object (one function body, class body or module), sent once per id before the
/// first [`PyStack`] that names it. Copied by the shim while the code object was alive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyCode {
    /// Identifier, dense from 0 within one stream.
    pub id: u32,
    /// `co_filename`.
    pub filename: String,
    /// `co_qualname` (3.11+) or `co_name` (3.10).
    pub name: String,
    /// `co_firstlineno`.
    pub firstlineno: i32,
    /// Encoding of `linetable`.
    pub linetable_format: LineTableFormat,
    /// `co_linetable`'s bytes (possibly cut short: offsets past its end have no line).
    pub linetable: Vec<u8>,
}

/// One Python frame of a [`PyStack`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PyFrame {
    /// The [`PyCode`] id.
    pub code: u32,
    /// Byte offset of the executing instruction in the code's bytecode; [`PY_NO_OFFSET`] before
    /// the first instruction (the line is then `firstlineno`).
    pub offset: u32,
    /// True if and only if this frame is the outermost one run by its native call of the
    /// interpreter loop (`_PyEval_EvalFrameDefault`): frames from the previous entry frame (or
    /// the innermost) up to this one stand where that native frame stands.
    pub entry: bool,
}

/// [`PyFrame::offset`] of a frame that has not started its first instruction.
pub const PY_NO_OFFSET: u32 = u32::MAX;

/// The Python frames of the thread that made the allocations of stack `id`, innermost first,
/// sent right after that [`Stack`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyStack {
    /// The stack id (of a [`Stack`] already sent).
    pub id: u32,
    /// Innermost first.
    pub frames: Vec<PyFrame>,
}

/// One frame of the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Tag 1.
    Hello(Hello),
    /// Tag 2.
    Module(Module),
    /// Tag 3.
    Stack(Stack),
    /// Tag 4.
    Alloc(Alloc),
    /// Tag 5.
    Free(Free),
    /// Tag 6.
    Failed(Failed),
    /// Tag 7.
    Snapshot(Snapshot),
    /// Tag 8.
    Exit(Exit),
    /// Tag 9.
    MemInfo(MemInfo),
    /// Tag 10: a line the shim wants the user to see in the report (e.g. events it lost).
    Note(String),
    /// Tag 11: a free still in progress (it takes the free's place in sequence order).
    FreePending(FreePending),
    /// Tag 20 (tags 20 to 29 are kept for Python frames).
    PyRuntime(PyRuntime),
    /// Tag 21.
    PyCode(PyCode),
    /// Tag 22.
    PyStack(PyStack),
}

/// Why a stream could not be read.
#[derive(Debug)]
pub enum WireError {
    /// The stream does not start with [`MAGIC`].
    BadMagic,
    /// The stream's version is not [`VERSION`].
    BadVersion(u16),
    /// The stream ended inside the header or a frame.
    Truncated,
    /// A frame's length is 0 or over [`MAX_FRAME`].
    BadLength(u32),
    /// A field holds a value with no meaning (field name, value).
    BadValue(&'static str, u64),
    /// A frame's body is shorter or longer than its fields.
    BadFrame(u8),
    /// A string is not UTF-8.
    BadUtf8,
    /// Reading failed.
    Io(io::Error),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::BadMagic => write!(f, "not a gpushim event stream (bad magic)"),
            WireError::BadVersion(v) => {
                write!(f, "event stream version {v}, this collector reads {VERSION}")
            }
            WireError::Truncated => write!(f, "event stream ends in the middle of a frame"),
            WireError::BadLength(n) => write!(f, "frame length {n} is out of range"),
            WireError::BadValue(field, v) => write!(f, "bad {field} value {v}"),
            WireError::BadFrame(tag) => write!(f, "frame with tag {tag} has the wrong size"),
            WireError::BadUtf8 => write!(f, "string in event stream is not UTF-8"),
            WireError::Io(e) => write!(f, "reading event stream: {e}"),
        }
    }
}

impl std::error::Error for WireError {}

/// Appends the stream header to `out`.
pub fn write_header(out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
}

/// Appends one frame holding `ev` to `out`.
pub fn encode(ev: &Event, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    let mut w = W(out);
    match ev {
        Event::Hello(h) => {
            w.u8(1);
            w.u32(h.pid);
            w.u32(h.ppid);
            w.u64(h.start_unix_ns);
            w.u32(h.command.len() as u32);
            for a in &h.command {
                w.str(a);
            }
            w.str(&h.cwd);
            w.str(&h.output_dir);
            w.str(&h.shim_version);
        }
        Event::Module(m) => {
            w.u8(2);
            w.str(&m.path);
            w.u64(m.bias);
            w.u32(m.ranges.len() as u32);
            for &(s, e) in &m.ranges {
                w.u64(s);
                w.u64(e);
            }
        }
        Event::Stack(s) => {
            w.u8(3);
            w.u32(s.id);
            w.u32(s.frames.len() as u32);
            for &f in &s.frames {
                w.u64(f);
            }
        }
        Event::Alloc(a) => {
            w.u8(4);
            w.u64(a.seq);
            w.u64(a.ts_ns);
            w.u64(a.addr);
            w.u64(a.size);
            w.u8(a.kind as u8);
            w.u8(a.api as u8);
            w.i32(a.device);
            w.u64(a.stream);
            w.u32(a.tid);
            w.u32(a.stack);
        }
        Event::Free(x) => {
            w.u8(5);
            w.u64(x.seq);
            w.u64(x.ts_ns);
            w.u64(x.addr);
            w.u8(x.api as u8);
            w.u64(x.stream);
            w.u32(x.tid);
            w.i32(x.result);
        }
        Event::FreePending(x) => {
            w.u8(11);
            w.u64(x.seq);
            w.u64(x.ts_ns);
            w.u64(x.addr);
            w.u8(x.api as u8);
            w.u64(x.stream);
            w.u32(x.tid);
        }
        Event::Failed(x) => {
            w.u8(6);
            w.u64(x.seq);
            w.u64(x.ts_ns);
            w.u64(x.size);
            w.u8(x.kind as u8);
            w.u8(x.api as u8);
            w.i32(x.device);
            w.u32(x.tid);
            w.u32(x.stack);
            w.i32(x.result);
        }
        Event::Snapshot(s) => {
            w.u8(7);
            w.u64(s.boundary);
            w.u64(s.ts_ns);
        }
        Event::Exit(x) => {
            w.u8(8);
            w.u64(x.ts_ns);
        }
        Event::MemInfo(m) => {
            w.u8(9);
            w.u64(m.ts_ns);
            w.i32(m.device);
            w.u64(m.free);
            w.u64(m.total);
        }
        Event::Note(s) => {
            w.u8(10);
            w.str(s);
        }
        Event::PyRuntime(p) => {
            w.u8(20);
            w.u32(p.version);
        }
        Event::PyCode(c) => {
            w.u8(21);
            w.u32(c.id);
            w.str(&c.filename);
            w.str(&c.name);
            w.i32(c.firstlineno);
            w.u8(c.linetable_format as u8);
            w.u32(c.linetable.len() as u32);
            w.0.extend_from_slice(&c.linetable);
        }
        Event::PyStack(p) => {
            w.u8(22);
            w.u32(p.id);
            w.u32(p.frames.len() as u32);
            for f in &p.frames {
                w.u32(f.code);
                w.u32(f.offset);
                w.u8(u8::from(f.entry));
            }
        }
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

struct W<'a>(&'a mut Vec<u8>);

impl W<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
}

/// Reads fields from one frame body; every read checks the remaining length.
struct R<'a> {
    b: &'a [u8],
    tag: u8,
}

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.b.len() < n {
            return Err(WireError::BadFrame(self.tag));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn str(&mut self) -> Result<String, WireError> {
        let n = self.u32()? as usize;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| WireError::BadUtf8)
    }
    /// A count of items each at least `min` bytes long, checked against what is left, so a
    /// corrupt count cannot make the reader reserve gigabytes.
    fn count(&mut self, min: usize) -> Result<usize, WireError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min) > self.b.len() {
            return Err(WireError::BadFrame(self.tag));
        }
        Ok(n)
    }
    fn done(self) -> Result<(), WireError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(WireError::BadFrame(self.tag))
        }
    }
}

/// Decodes one frame body (the bytes after the length: tag, then fields).
///
/// Returns `Ok(None)` for a tag this version does not know (the caller skips it).
///
/// # Errors
/// [`WireError::BadFrame`] if the body is shorter or longer than the tag's fields,
/// [`WireError::BadValue`] for an unknown kind or API, [`WireError::BadUtf8`].
pub fn decode_body(body: &[u8]) -> Result<Option<Event>, WireError> {
    let Some((&tag, rest)) = body.split_first() else {
        return Err(WireError::BadLength(0));
    };
    let mut r = R { b: rest, tag };
    let ev = match tag {
        1 => {
            let pid = r.u32()?;
            let ppid = r.u32()?;
            let start_unix_ns = r.u64()?;
            let n = r.count(4)?;
            let mut command = Vec::with_capacity(n);
            for _ in 0..n {
                command.push(r.str()?);
            }
            Event::Hello(Hello {
                pid,
                ppid,
                start_unix_ns,
                command,
                cwd: r.str()?,
                output_dir: r.str()?,
                shim_version: r.str()?,
            })
        }
        2 => {
            let path = r.str()?;
            let bias = r.u64()?;
            let n = r.count(16)?;
            let mut ranges = Vec::with_capacity(n);
            for _ in 0..n {
                ranges.push((r.u64()?, r.u64()?));
            }
            Event::Module(Module { path, bias, ranges })
        }
        3 => {
            let id = r.u32()?;
            let n = r.count(8)?;
            let mut frames = Vec::with_capacity(n);
            for _ in 0..n {
                frames.push(r.u64()?);
            }
            Event::Stack(Stack { id, frames })
        }
        4 => Event::Alloc(Alloc {
            seq: r.u64()?,
            ts_ns: r.u64()?,
            addr: r.u64()?,
            size: r.u64()?,
            kind: Kind::from_u8(r.u8()?)?,
            api: Api::from_u8(r.u8()?)?,
            device: r.i32()?,
            stream: r.u64()?,
            tid: r.u32()?,
            stack: r.u32()?,
        }),
        5 => Event::Free(Free {
            seq: r.u64()?,
            ts_ns: r.u64()?,
            addr: r.u64()?,
            api: Api::from_u8(r.u8()?)?,
            stream: r.u64()?,
            tid: r.u32()?,
            result: r.i32()?,
        }),
        6 => Event::Failed(Failed {
            seq: r.u64()?,
            ts_ns: r.u64()?,
            size: r.u64()?,
            kind: Kind::from_u8(r.u8()?)?,
            api: Api::from_u8(r.u8()?)?,
            device: r.i32()?,
            tid: r.u32()?,
            stack: r.u32()?,
            result: r.i32()?,
        }),
        7 => Event::Snapshot(Snapshot { boundary: r.u64()?, ts_ns: r.u64()? }),
        8 => Event::Exit(Exit { ts_ns: r.u64()? }),
        9 => Event::MemInfo(MemInfo { ts_ns: r.u64()?, device: r.i32()?, free: r.u64()?, total: r.u64()? }),
        10 => Event::Note(r.str()?),
        11 => Event::FreePending(FreePending {
            seq: r.u64()?,
            ts_ns: r.u64()?,
            addr: r.u64()?,
            api: Api::from_u8(r.u8()?)?,
            stream: r.u64()?,
            tid: r.u32()?,
        }),
        20 => Event::PyRuntime(PyRuntime { version: r.u32()? }),
        21 => {
            let id = r.u32()?;
            let filename = r.str()?;
            let name = r.str()?;
            let firstlineno = r.i32()?;
            let linetable_format = LineTableFormat::from_u8(r.u8()?)?;
            let n = r.count(1)?;
            let linetable = r.take(n)?.to_vec();
            Event::PyCode(PyCode { id, filename, name, firstlineno, linetable_format, linetable })
        }
        22 => {
            let id = r.u32()?;
            let n = r.count(9)?;
            let mut frames = Vec::with_capacity(n);
            for _ in 0..n {
                let code = r.u32()?;
                let offset = r.u32()?;
                let entry = match r.u8()? {
                    0 => false,
                    1 => true,
                    v => return Err(WireError::BadValue("python frame entry flag", u64::from(v))),
                };
                frames.push(PyFrame { code, offset, entry });
            }
            Event::PyStack(PyStack { id, frames })
        }
        _ => return Ok(None),
    };
    r.done()?;
    Ok(Some(ev))
}

/// Reads a stream: the header once, then one event per call.
pub struct Decoder<Rd> {
    inner: Rd,
    buf: Vec<u8>,
}

impl<Rd: Read> Decoder<Rd> {
    /// Reads and checks the header.
    ///
    /// # Errors
    /// [`WireError::Truncated`] for a stream shorter than the header, [`WireError::BadMagic`],
    /// [`WireError::BadVersion`], [`WireError::Io`].
    pub fn new(mut inner: Rd) -> Result<Self, WireError> {
        let mut h = [0u8; HEADER_LEN];
        read_full(&mut inner, &mut h)?.then_some(()).ok_or(WireError::Truncated)?;
        if h[..8] != MAGIC {
            return Err(WireError::BadMagic);
        }
        let v = u16::from_le_bytes([h[8], h[9]]);
        if v != VERSION {
            return Err(WireError::BadVersion(v));
        }
        Ok(Decoder { inner, buf: Vec::new() })
    }

    /// The next event, `Ok(None)` at a clean end of stream (between frames). Frames with
    /// unknown tags are skipped.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if the stream ends inside a frame; any error of
    /// [`decode_body`]; [`WireError::BadLength`]. After an error the stream cannot be resumed.
    pub fn next_event(&mut self) -> Result<Option<Event>, WireError> {
        loop {
            let mut len = [0u8; 4];
            if !read_full(&mut self.inner, &mut len)? {
                return Ok(None);
            }
            let len = u32::from_le_bytes(len);
            if len == 0 || len > MAX_FRAME {
                return Err(WireError::BadLength(len));
            }
            if len <= SMALL_FRAME {
                self.buf.resize(len as usize, 0);
                if !read_full(&mut self.inner, &mut self.buf)? {
                    return Err(WireError::Truncated);
                }
            } else {
                // Read as it arrives: a corrupt length in a short stream then costs only the
                // bytes that are there, not a buffer of up to MAX_FRAME zeroed in advance.
                self.buf.clear();
                let got = (&mut self.inner).take(u64::from(len)).read_to_end(&mut self.buf).map_err(WireError::Io)?;
                if got < len as usize {
                    return Err(WireError::Truncated);
                }
            }
            if let Some(ev) = decode_body(&self.buf)? {
                return Ok(Some(ev));
            }
        }
    }
}

/// Fills `buf`. Returns `Ok(false)` if the stream was already at its end, `Truncated` if it
/// ended part-way.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<bool, WireError> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(WireError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(WireError::Io(e)),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_events() -> Vec<Event> {
        vec![
            Event::Hello(Hello {
                pid: 42,
                ppid: 1,
                start_unix_ns: 1_700_000_000_000_000_000,
                command: vec!["python".into(), "train.py".into()],
                cwd: "/w".into(),
                output_dir: "/out".into(),
                shim_version: "0.1.0".into(),
            }),
            Event::Module(Module {
                path: "/lib/libx.so".into(),
                bias: 0x7f00_0000_0000,
                ranges: vec![(0x7f00_0000_0000, 0x7f00_0000_1000)],
            }),
            Event::Stack(Stack { id: 3, frames: vec![0x401000, 0x402000] }),
            Event::Alloc(Alloc {
                seq: 5,
                ts_ns: 10,
                addr: 0xdead_0000,
                size: 2 << 20,
                kind: Kind::Managed,
                api: Api::CuMemAllocAsync,
                device: 0,
                stream: 0x55,
                tid: 1234,
                stack: 3,
            }),
            Event::Free(Free {
                seq: 6,
                ts_ns: 11,
                addr: 0xdead_0000,
                api: Api::CudaFree,
                stream: 0,
                tid: 1234,
                result: 0,
            }),
            Event::Failed(Failed {
                seq: 7,
                ts_ns: 12,
                size: 1 << 40,
                kind: Kind::Device,
                api: Api::CudaMalloc,
                device: 1,
                tid: 9,
                stack: NO_STACK,
                result: 2,
            }),
            Event::Snapshot(Snapshot { boundary: 7, ts_ns: 13 }),
            Event::Exit(Exit { ts_ns: 14 }),
            Event::MemInfo(MemInfo { ts_ns: 15, device: 0, free: 1, total: 2 }),
            Event::Note("lost 3 events".into()),
            Event::FreePending(FreePending { seq: 16, ts_ns: 17, addr: 18, api: Api::CuMemFree, stream: 19, tid: 20 }),
            Event::PyRuntime(PyRuntime { version: 0x030C_03F0 }),
            Event::PyCode(PyCode {
                id: 0,
                filename: "/w/train.py".into(),
                name: "Model.forward".into(),
                firstlineno: 12,
                linetable_format: LineTableFormat::Pep657,
                linetable: vec![0x80, 0x00, 0xd8, 0x04],
            }),
            Event::PyCode(PyCode {
                id: 1,
                filename: "<stdin>".into(),
                name: "<module>".into(),
                firstlineno: -1,
                linetable_format: LineTableFormat::Pep626,
                linetable: vec![],
            }),
            Event::PyStack(PyStack {
                id: 3,
                frames: vec![
                    PyFrame { code: 0, offset: 40, entry: false },
                    PyFrame { code: 1, offset: PY_NO_OFFSET, entry: true },
                ],
            }),
        ]
    }

    #[test]
    fn round_trip_every_event() {
        let mut buf = Vec::new();
        write_header(&mut buf);
        for ev in all_events() {
            encode(&ev, &mut buf);
        }
        let mut dec = Decoder::new(&buf[..]).unwrap();
        for ev in all_events() {
            assert_eq!(dec.next_event().unwrap(), Some(ev));
        }
        assert_eq!(dec.next_event().unwrap(), None);
    }

    #[test]
    fn golden_bytes() {
        let mut buf = Vec::new();
        write_header(&mut buf);
        assert_eq!(buf, b"GPUSHIM\0\x01\x00\x00\x00");
        buf.clear();
        encode(
            &Event::Free(Free { seq: 1, ts_ns: 2, addr: 3, api: Api::CudaFree, stream: 4, tid: 5, result: -1 }),
            &mut buf,
        );
        let want: Vec<u8> = [
            &42u32.to_le_bytes()[..],
            &[5],
            &1u64.to_le_bytes(),
            &2u64.to_le_bytes(),
            &3u64.to_le_bytes(),
            &[2],
            &4u64.to_le_bytes(),
            &5u32.to_le_bytes(),
            &(-1i32).to_le_bytes(),
        ]
        .concat();
        assert_eq!(buf, want);
        buf.clear();
        encode(&Event::Stack(Stack { id: 1, frames: vec![0x10] }), &mut buf);
        assert_eq!(buf, [17, 0, 0, 0, 3, 1, 0, 0, 0, 1, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn golden_bytes_of_python_events() {
        let mut buf = Vec::new();
        encode(&Event::PyRuntime(PyRuntime { version: 0x030C_03F0 }), &mut buf);
        assert_eq!(buf, [5, 0, 0, 0, 20, 0xF0, 0x03, 0x0C, 0x03]);
        buf.clear();
        encode(
            &Event::PyCode(PyCode {
                id: 2,
                filename: "a.py".into(),
                name: "f".into(),
                firstlineno: 7,
                linetable_format: LineTableFormat::Pep657,
                linetable: vec![0x80, 0x01],
            }),
            &mut buf,
        );
        #[rustfmt::skip]
        let want = [
            29, 0, 0, 0, 21,
            2, 0, 0, 0,
            4, 0, 0, 0, b'a', b'.', b'p', b'y',
            1, 0, 0, 0, b'f',
            7, 0, 0, 0,
            2,
            2, 0, 0, 0, 0x80, 0x01,
        ];
        assert_eq!(buf, want);
        buf.clear();
        encode(
            &Event::PyStack(PyStack { id: 1, frames: vec![PyFrame { code: 3, offset: 0x10, entry: true }] }),
            &mut buf,
        );
        assert_eq!(buf, [18, 0, 0, 0, 22, 1, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 0x10, 0, 0, 0, 1]);
    }

    #[test]
    fn bad_python_events_are_errors() {
        // Unknown line table format.
        let mut b = vec![21];
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1i32.to_le_bytes());
        b.push(9);
        b.extend_from_slice(&0u32.to_le_bytes());
        assert!(matches!(decode_body(&b), Err(WireError::BadValue("line table format", 9))));
        // A line table longer than the frame.
        let n = b.len();
        b[n - 5] = 1;
        b[n - 4] = 200;
        assert!(matches!(decode_body(&b), Err(WireError::BadFrame(21))));
        // An entry flag that is neither 0 nor 1.
        let b = [22, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 7];
        assert!(matches!(decode_body(&b), Err(WireError::BadValue("python frame entry flag", 7))));
        // A huge frame count in a tiny frame must not allocate.
        assert!(matches!(decode_body(&[22, 0, 0, 0, 0, 255, 255, 255, 255]), Err(WireError::BadFrame(22))));
    }

    #[test]
    fn unknown_tag_is_skipped() {
        let mut buf = Vec::new();
        write_header(&mut buf);
        buf.extend_from_slice(&[3, 0, 0, 0, 200, 1, 2]);
        encode(&Event::Exit(Exit { ts_ns: 1 }), &mut buf);
        let mut dec = Decoder::new(&buf[..]).unwrap();
        assert_eq!(dec.next_event().unwrap(), Some(Event::Exit(Exit { ts_ns: 1 })));
    }

    #[test]
    fn truncation_and_garbage_are_errors() {
        let mut buf = Vec::new();
        write_header(&mut buf);
        encode(&Event::Exit(Exit { ts_ns: 1 }), &mut buf);
        for cut in 1..buf.len() {
            let r = Decoder::new(&buf[..cut]).and_then(|mut d| d.next_event().map(|_| ()));
            // Cut exactly after the header is a clean, empty stream; any other cut is truncated.
            if cut != HEADER_LEN {
                assert!(matches!(r, Err(WireError::Truncated)), "cut {cut}: {r:?}");
            }
        }
        assert!(matches!(Decoder::new(&b"NOTGPUSHIM\x01\x00"[..]), Err(WireError::BadMagic)));
        assert!(matches!(Decoder::new(&b"GPUSHIM\0\x09\x00\x00\x00"[..]), Err(WireError::BadVersion(9))));
        // A frame whose body is longer than its fields.
        assert!(matches!(decode_body(&[8, 0, 0, 0, 0, 0, 0, 0, 0, 1]), Err(WireError::BadFrame(8))));
        // A huge list count in a tiny frame must not allocate.
        assert!(matches!(decode_body(&[3, 0, 0, 0, 0, 255, 255, 255, 255]), Err(WireError::BadFrame(3))));
        assert!(matches!(decode_body(&[4; 47]), Err(WireError::BadValue("kind", 4))));
    }

    #[test]
    fn api_names_and_free_flags() {
        for &a in Api::ALL {
            assert_eq!(Api::from_u8(a as u8).unwrap(), a);
        }
        assert!(Api::CuMemRelease.is_free() && Api::CuMemRelease.is_handle());
        assert!(!Api::CudaMallocHost.is_free());
        assert_eq!(Api::CuMemAllocAsync.name(), "cuMemAllocAsync");
    }
}
