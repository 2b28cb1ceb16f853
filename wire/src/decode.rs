//! Reading the stream: [`Decoder`] checks the header and splits the stream into frames,
//! [`decode_body`] turns one frame body into an [`Event`], and [`WireError`] says why a stream
//! could not be read. Lengths and counts are checked before they size a buffer, so damaged input
//! is an error, not a panic or a huge allocation.

use std::fmt;
use std::io::{self, Read};

use crate::{
    Activity, Alloc, Api, ApiSnapshot, ContextCreated, DeviceInfo, Event, Exit, Failed, Free, FreePending, GraphAlloc,
    GraphExec, GraphExecDestroy, GraphLaunch, GraphMemTrim, GraphNode, HandleRef, HeapWalk, Hello, Identity, Kind,
    LineTableFormat, Map, MemInfo, Module, PyCode, PyFrame, PyRuntime, PyStack, Reach, ReachClass, ReachEntry,
    ReachRegion, ReachStatus, Reset, Snapshot, Stack, ThreadName, Unmap, WalkReason, WalkStatus, HEADER_LEN, MAGIC,
    MAX_FRAME, OLDEST_VERSION, VERSION,
};

/// Frames up to this length (all that the shim writes in practice) are read into a buffer
/// sized in advance; longer ones as their bytes arrive.
const SMALL_FRAME: u32 = 64 << 10;

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
                write!(f, "event stream version {v}, this collector reads {OLDEST_VERSION} to {VERSION}")
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
            ctx: r.u64()?,
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
        60 => {
            Event::ApiSnapshot(ApiSnapshot { boundary: r.u64()?, ts_ns: r.u64()?, label: r.str()?, dir: String::new() })
        }
        61 => Event::ApiSnapshot(ApiSnapshot { boundary: r.u64()?, ts_ns: r.u64()?, label: r.str()?, dir: r.str()? }),
        9 => Event::MemInfo(MemInfo { ts_ns: r.u64()?, device: r.i32()?, free: r.u64()?, total: r.u64()? }),
        10 => Event::Note(r.str()?),
        12 => Event::Reset(Reset {
            seq: r.u64()?,
            ts_ns: r.u64()?,
            device: r.i32()?,
            api: Api::from_u8(r.u8()?)?,
            tid: r.u32()?,
            ctx: r.u64()?,
        }),
        34 => Event::ContextCreated(ContextCreated {
            seq: r.u64()?,
            ts_ns: r.u64()?,
            ctx: r.u64()?,
            device: r.i32()?,
            api: Api::from_u8(r.u8()?)?,
            tid: r.u32()?,
        }),
        13 => Event::Map(Map {
            seq: r.u64()?,
            ts_ns: r.u64()?,
            addr: r.u64()?,
            size: r.u64()?,
            handle: r.u64()?,
            tid: r.u32()?,
        }),
        14 => Event::Unmap(Unmap {
            seq: r.u64()?,
            ts_ns: r.u64()?,
            addr: r.u64()?,
            size: r.u64()?,
            tid: r.u32()?,
            result: r.i32()?,
        }),
        15 => Event::HandleRef(HandleRef {
            seq: r.u64()?,
            ts_ns: r.u64()?,
            handle: r.u64()?,
            addr: r.u64()?,
            api: Api::from_u8(r.u8()?)?,
            device: r.i32()?,
            tid: r.u32()?,
        }),
        11 => Event::FreePending(FreePending {
            seq: r.u64()?,
            ts_ns: r.u64()?,
            addr: r.u64()?,
            api: Api::from_u8(r.u8()?)?,
            stream: r.u64()?,
            tid: r.u32()?,
        }),
        16 => Event::GraphNode(GraphNode {
            seq: r.u64()?,
            ts_ns: r.u64()?,
            addr: r.u64()?,
            size: r.u64()?,
            kind: Kind::from_u8(r.u8()?)?,
            api: Api::from_u8(r.u8()?)?,
            device: r.i32()?,
            graph: r.u64()?,
            stream: r.u64()?,
            tid: r.u32()?,
            stack: r.u32()?,
        }),
        17 => {
            let seq = r.u64()?;
            let ts_ns = r.u64()?;
            let exec = r.u64()?;
            let graph = r.u64()?;
            let api = Api::from_u8(r.u8()?)?;
            let auto_free = match r.u8()? {
                0 => false,
                1 => true,
                v => return Err(WireError::BadValue("auto-free flag", u64::from(v))),
            };
            let tid = r.u32()?;
            let stack = r.u32()?;
            let n = r.count(21)?;
            let mut allocs = Vec::with_capacity(n);
            for _ in 0..n {
                allocs.push(GraphAlloc {
                    addr: r.u64()?,
                    size: r.u64()?,
                    kind: Kind::from_u8(r.u8()?)?,
                    device: r.i32()?,
                });
            }
            let n = r.count(8)?;
            let mut frees = Vec::with_capacity(n);
            for _ in 0..n {
                frees.push(r.u64()?);
            }
            Event::GraphExec(GraphExec { seq, ts_ns, exec, graph, api, auto_free, tid, stack, allocs, frees })
        }
        18 => Event::GraphLaunch(GraphLaunch {
            seq: r.u64()?,
            ts_ns: r.u64()?,
            exec: r.u64()?,
            api: Api::from_u8(r.u8()?)?,
            stream: r.u64()?,
            tid: r.u32()?,
        }),
        19 => Event::GraphExecDestroy(GraphExecDestroy {
            seq: r.u64()?,
            ts_ns: r.u64()?,
            exec: r.u64()?,
            api: Api::from_u8(r.u8()?)?,
            tid: r.u32()?,
        }),
        30 => Event::GraphMemTrim(GraphMemTrim {
            seq: r.u64()?,
            ts_ns: r.u64()?,
            device: r.i32()?,
            api: Api::from_u8(r.u8()?)?,
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
        40 => Event::HeapWalk(HeapWalk {
            reason: WalkReason::from_u8(r.u8()?)?,
            number: r.u32()?,
            status: WalkStatus::from_u8(r.u8()?)?,
            ts_ns: r.u64()?,
            elapsed_ns: r.u64()?,
            visited: r.u64()?,
            result: r.str()?,
        }),
        50 => Event::ThreadName(ThreadName { tid: r.u32()?, name: r.str()? }),
        70 => Event::Activity(Activity { ts_ns: r.u64()?, count: r.u64()? }),
        56 => {
            let ordinal = r.i32()?;
            let pci_bus_id = r.str()?;
            let mut uuid = [0u8; 16];
            for b in &mut uuid {
                *b = r.u8()?;
            }
            Event::DeviceInfo(DeviceInfo { ordinal, pci_bus_id, uuid })
        }
        55 => {
            let n = r.count(8)?;
            let mut vars = Vec::with_capacity(n);
            for _ in 0..n {
                vars.push((r.str()?, r.str()?));
            }
            Event::Identity(Identity { vars })
        }
        65 => {
            let reason = WalkReason::from_u8(r.u8()?)?;
            let number = r.u32()?;
            let status = ReachStatus::from_u8(r.u8()?)?;
            let ts_ns = r.u64()?;
            let elapsed_ns = r.u64()?;
            let cpu_ns = r.u64()?;
            let scanned_bytes = r.u64()?;
            let unreadable_bytes = r.u64()?;
            let note = r.str()?;
            let n = r.count(27)?;
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                let addr = r.u64()?;
                let class = ReachClass::from_u8(r.u8()?)?;
                let refs = r.u32()?;
                let interior = match r.u8()? {
                    0 => false,
                    1 => true,
                    v => return Err(WireError::BadValue("reach interior flag", u64::from(v))),
                };
                let region = ReachRegion::from_u8(r.u8()?)?;
                let tid = r.u32()?;
                let from = r.u64()?;
                entries.push(ReachEntry { addr, class, refs, interior, region, tid, from });
            }
            Event::Reach(Reach {
                reason,
                number,
                status,
                ts_ns,
                elapsed_ns,
                cpu_ns,
                scanned_bytes,
                unreadable_bytes,
                note,
                entries,
            })
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
        if !(OLDEST_VERSION..=VERSION).contains(&v) {
            return Err(WireError::BadVersion(v));
        }
        Ok(Decoder { inner, buf: Vec::new() })
    }

    /// The reader events are decoded from (the collector looks at a `BufReader`'s buffer to
    /// tell whether it has read everything received so far).
    pub fn get_ref(&self) -> &Rd {
        &self.inner
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
    use crate::{encode, write_header};

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
    fn bad_heap_walk_values_are_errors() {
        let mut b = vec![40, 9];
        b.extend_from_slice(&[0; 4 + 1 + 24 + 4]);
        assert!(matches!(decode_body(&b), Err(WireError::BadValue("walk reason", 9))));
        b[1] = 1;
        b[6] = 7;
        assert!(matches!(decode_body(&b), Err(WireError::BadValue("walk status", 7))));
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
        // A graph executable claiming 2^32 - 1 allocation nodes in a tiny frame.
        let mut b = vec![17];
        b.extend_from_slice(&[0; 8 * 4]);
        b.extend_from_slice(&[Api::CudaGraphInstantiate as u8, 0]);
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&[255; 4]);
        assert!(matches!(decode_body(&b), Err(WireError::BadFrame(17))));
    }
}
