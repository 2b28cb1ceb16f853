//! The event stream between `libgpushim.so` (the writer) and the `gpushim` collector (the reader).
//!
//! A stream is a 12-byte [header](write_header) followed by frames. Every frame is
//! `len: u32 LE` (the number of bytes that follow, tag included), `tag: u8`, then the body.
//! All integers are little-endian; strings are `u32 LE` length + UTF-8 bytes; lists are
//! `u32 LE` count + items. A reader that meets a tag it does not know skips the frame, so a
//! newer writer can add event types without breaking an older collector of the same version.
//!
//! Invariants the collector relies on:
//! - Every [`Alloc`], [`Free`], [`Failed`], [`Reset`], [`Map`], [`Unmap`] and [`HandleRef`] carries a sequence number (`seq`) drawn from one
//!   process-wide counter; together they are dense from 0, so the reader can put events from
//!   many threads back in order. A free takes its number *before* the real free call and an
//!   allocation *after* the real allocation call, so a reused address is always freed first.
//! - A [`Stack`] with a given id is sent before the first event that names it; so are its
//!   [`PyStack`] (if the stack has Python frames) and every [`PyCode`] that the `PyStack` names.
//! - A stack id stands for the native frames *and* the Python frames together: two allocations
//!   with the same native frames but different Python frames have different stack ids (the
//!   [`Stack`] is then sent once per id, with equal frames).
//! - A [`Snapshot`] asks for the live set made of exactly the events with `seq < boundary`; an
//!   [`ApiSnapshot`] does the same with a label, and the collector answers it on the socket.
//! - A [`Reset`] (a context torn down), a [`ContextCreated`], a [`Map`] and a [`HandleRef`]
//!   carry a sequence number like an allocation (taken after the call), and so do the graph
//!   events [`GraphNode`], [`GraphExec`], [`GraphLaunch`], [`GraphExecDestroy`] and
//!   [`GraphMemTrim`]; an [`Unmap`] is numbered like a free (before the call).
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

mod answer; // the collector's answers on the socket
mod decode; // Decoder, decode_body, WireError
mod encode; // write_header, encode
mod event; // Event, its structs, Kind, Api, LineTableFormat
pub mod naming; // report file names: the rank rule and the stem
pub mod setting; // the settings' grammar: switches, the known names

pub use answer::{answer_line, parse_answer, ASK_SNAPSHOT, END_OF_STREAM};
pub use decode::{decode_body, Decoder, WireError};
pub use encode::{encode, write_header};
pub use event::{
    Activity, Alloc, Api, ApiSnapshot, ContextCreated, DeviceInfo, Event, Exit, Failed, Free, FreePending, GraphAlloc,
    GraphExec, GraphExecDestroy, GraphLaunch, GraphMemTrim, GraphNode, HandleRef, HeapWalk, Hello, Identity, Kind,
    LineTableFormat, Map, MemInfo, Module, PyCode, PyFrame, PyRuntime, PyStack, Reach, ReachClass, ReachEntry,
    ReachRegion, ReachStatus, Reset, Snapshot, Stack, ThreadName, Unmap, WalkReason, WalkStatus, PY_NO_OFFSET,
};

/// The first eight bytes of every stream.
pub const MAGIC: [u8; 8] = *b"GPUSHIM\0";
/// The version of this format. Version 4 added `Activity` (tag 70) and changed nothing else:
/// a reader takes the versions from [`OLDEST_VERSION`] to this one (a recorded stream of 3 is
/// read as one without activity) and refuses any other.
pub const VERSION: u16 = 4;
/// The oldest version a reader takes (see [`VERSION`]).
pub const OLDEST_VERSION: u16 = 3;
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
                ctx: 0x77,
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
            Event::ApiSnapshot(ApiSnapshot {
                boundary: 8,
                ts_ns: 14,
                label: "after-epoch_3".into(),
                dir: String::new(),
            }),
            Event::ApiSnapshot(ApiSnapshot {
                boundary: 9,
                ts_ns: 15,
                label: "cell4".into(),
                dir: "/tmp/gpushim-kernel-7-x".into(),
            }),
            Event::Exit(Exit { ts_ns: 14 }),
            Event::MemInfo(MemInfo { ts_ns: 15, device: 0, free: 1, total: 2 }),
            Event::Note("lost 3 events".into()),
            Event::Reset(Reset { seq: 21, ts_ns: 22, device: 1, api: Api::CudaDeviceReset, tid: 23, ctx: 0 }),
            Event::ContextCreated(ContextCreated {
                seq: 24,
                ts_ns: 25,
                ctx: 0x5555_0000,
                device: 1,
                api: Api::CuCtxCreate,
                tid: 26,
            }),
            Event::Map(Map { seq: 24, ts_ns: 25, addr: 0x7f00_0000_0000, size: 2 << 20, handle: 0x1001, tid: 26 }),
            Event::Unmap(Unmap { seq: 27, ts_ns: 28, addr: 0x7f00_0000_0000, size: 4 << 20, tid: 29, result: 1 }),
            Event::HandleRef(HandleRef {
                seq: 30,
                ts_ns: 31,
                handle: 0x1001,
                addr: 0x7f00_0000_1000,
                api: Api::CuMemRetainAllocationHandle,
                device: 0,
                tid: 32,
            }),
            Event::FreePending(FreePending { seq: 16, ts_ns: 17, addr: 18, api: Api::CuMemFree, stream: 19, tid: 20 }),
            Event::GraphNode(GraphNode {
                seq: 30,
                ts_ns: 31,
                addr: 0x7f00_0000,
                size: 64 << 20,
                kind: Kind::Device,
                api: Api::CudaGraphAddMemAllocNode,
                device: 0,
                graph: 0x55aa,
                stream: 0,
                tid: 7,
                stack: 3,
            }),
            Event::GraphExec(GraphExec {
                seq: 32,
                ts_ns: 33,
                exec: 0x66bb,
                graph: 0x55aa,
                api: Api::CuGraphInstantiateWithFlags,
                auto_free: true,
                tid: 7,
                stack: NO_STACK,
                allocs: vec![
                    GraphAlloc { addr: 0x7f00_0000, size: 64 << 20, kind: Kind::Device, device: 0 },
                    GraphAlloc { addr: 0x8f00_0000, size: 1, kind: Kind::PinnedHost, device: -1 },
                ],
                frees: vec![0x9f00_0000],
            }),
            Event::GraphLaunch(GraphLaunch {
                seq: 34,
                ts_ns: 35,
                exec: 0x66bb,
                api: Api::CudaGraphLaunch,
                stream: 9,
                tid: 7,
            }),
            Event::GraphExecDestroy(GraphExecDestroy {
                seq: 36,
                ts_ns: 37,
                exec: 0x66bb,
                api: Api::CuGraphExecDestroy,
                tid: 7,
            }),
            Event::GraphMemTrim(GraphMemTrim {
                seq: 38,
                ts_ns: 39,
                device: 1,
                api: Api::CudaDeviceGraphMemTrim,
                tid: 7,
            }),
            Event::Activity(crate::Activity { ts_ns: 40, count: 12_345 }),
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
            Event::HeapWalk(HeapWalk {
                reason: WalkReason::Snapshot,
                number: 2,
                status: WalkStatus::Cut,
                ts_ns: 30,
                elapsed_ns: 2_000_000_000,
                visited: 12_345,
                result: r#"{"objects":[],"holders":[]}"#.into(),
            }),
            Event::HeapWalk(HeapWalk {
                reason: WalkReason::Exit,
                number: 0,
                status: WalkStatus::Blocked,
                ts_ns: 31,
                elapsed_ns: 0,
                visited: 0,
                result: String::new(),
            }),
            Event::DeviceInfo(DeviceInfo { ordinal: 1, pci_bus_id: "0000:3b:00.0".into(), uuid: [7; 16] }),
            Event::Identity(Identity {
                vars: vec![("RANK".into(), "3".into()), ("CUDA_VISIBLE_DEVICES".into(), "2,3".into())],
            }),
            Event::Reach(Reach {
                reason: WalkReason::Exit,
                number: 0,
                status: ReachStatus::Complete,
                ts_ns: 32,
                elapsed_ns: 1_000,
                cpu_ns: 900,
                scanned_bytes: 1 << 30,
                unreadable_bytes: 4096,
                note: "a note".into(),
                entries: vec![
                    ReachEntry {
                        addr: 0x7000_0000,
                        class: ReachClass::Lost,
                        refs: 0,
                        interior: false,
                        region: ReachRegion::None,
                        tid: 0,
                        from: 0,
                    },
                    ReachEntry {
                        addr: 0x7100_0000,
                        class: ReachClass::Reachable,
                        refs: 3,
                        interior: true,
                        region: ReachRegion::Stack,
                        tid: 42,
                        from: 0x7ffd_0000_0010,
                    },
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
}
