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

mod decode; // Decoder, decode_body, WireError
mod encode; // write_header, encode
mod event; // Event, its structs, Kind, Api, LineTableFormat

pub use decode::{decode_body, Decoder, WireError};
pub use encode::{encode, write_header};
pub use event::{
    Alloc, Api, Event, Exit, Failed, Free, Hello, Kind, LineTableFormat, MemInfo, Module, PyCode, PyFrame, PyRuntime,
    PyStack, Snapshot, Stack, PY_NO_OFFSET,
};

/// The first eight bytes of every stream.
pub const MAGIC: [u8; 8] = *b"GPUSHIM\0";
/// The version of this format; a reader refuses any other.
pub const VERSION: u16 = 1;
/// Length of the stream header in bytes: magic, version (u16), reserved (u16).
pub const HEADER_LEN: usize = 12;
/// Largest frame a reader accepts, in bytes. Frames are small (a stack of 256 frames is about
/// 2 KiB); anything larger is corruption.
pub const MAX_FRAME: u32 = 16 << 20;
/// The stack id that means "no backtrace was recorded" (backtraces switched off).
pub const NO_STACK: u32 = u32::MAX;

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
