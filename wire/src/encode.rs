//! Writing the stream: [`write_header`] once, then [`encode`] for each event. A frame is built
//! in place at the end of the caller's buffer, its length filled in once the body is written.

use crate::{Event, MAGIC, VERSION};

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
            w.u64(a.ctx);
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
        Event::ApiSnapshot(s) => {
            w.u8(if s.dir.is_empty() { 60 } else { 61 });
            w.u64(s.boundary);
            w.u64(s.ts_ns);
            w.str(&s.label);
            if !s.dir.is_empty() {
                w.str(&s.dir);
            }
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
        Event::Reset(x) => {
            w.u8(12);
            w.u64(x.seq);
            w.u64(x.ts_ns);
            w.i32(x.device);
            w.u8(x.api as u8);
            w.u32(x.tid);
            w.u64(x.ctx);
        }
        Event::ContextCreated(x) => {
            w.u8(34);
            w.u64(x.seq);
            w.u64(x.ts_ns);
            w.u64(x.ctx);
            w.i32(x.device);
            w.u8(x.api as u8);
            w.u32(x.tid);
        }
        Event::Map(x) => {
            w.u8(13);
            w.u64(x.seq);
            w.u64(x.ts_ns);
            w.u64(x.addr);
            w.u64(x.size);
            w.u64(x.handle);
            w.u32(x.tid);
        }
        Event::Unmap(x) => {
            w.u8(14);
            w.u64(x.seq);
            w.u64(x.ts_ns);
            w.u64(x.addr);
            w.u64(x.size);
            w.u32(x.tid);
            w.i32(x.result);
        }
        Event::HandleRef(x) => {
            w.u8(15);
            w.u64(x.seq);
            w.u64(x.ts_ns);
            w.u64(x.handle);
            w.u64(x.addr);
            w.u8(x.api as u8);
            w.i32(x.device);
            w.u32(x.tid);
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
        Event::GraphNode(x) => {
            w.u8(16);
            w.u64(x.seq);
            w.u64(x.ts_ns);
            w.u64(x.addr);
            w.u64(x.size);
            w.u8(x.kind as u8);
            w.u8(x.api as u8);
            w.i32(x.device);
            w.u64(x.graph);
            w.u64(x.stream);
            w.u32(x.tid);
            w.u32(x.stack);
        }
        Event::GraphExec(x) => {
            w.u8(17);
            w.u64(x.seq);
            w.u64(x.ts_ns);
            w.u64(x.exec);
            w.u64(x.graph);
            w.u8(x.api as u8);
            w.u8(u8::from(x.auto_free));
            w.u32(x.tid);
            w.u32(x.stack);
            w.u32(x.allocs.len() as u32);
            for a in &x.allocs {
                w.u64(a.addr);
                w.u64(a.size);
                w.u8(a.kind as u8);
                w.i32(a.device);
            }
            w.u32(x.frees.len() as u32);
            for &f in &x.frees {
                w.u64(f);
            }
        }
        Event::GraphLaunch(x) => {
            w.u8(18);
            w.u64(x.seq);
            w.u64(x.ts_ns);
            w.u64(x.exec);
            w.u8(x.api as u8);
            w.u64(x.stream);
            w.u32(x.tid);
        }
        Event::GraphExecDestroy(x) => {
            w.u8(19);
            w.u64(x.seq);
            w.u64(x.ts_ns);
            w.u64(x.exec);
            w.u8(x.api as u8);
            w.u32(x.tid);
        }
        Event::GraphMemTrim(x) => {
            w.u8(30);
            w.u64(x.seq);
            w.u64(x.ts_ns);
            w.i32(x.device);
            w.u8(x.api as u8);
            w.u32(x.tid);
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
        Event::HeapWalk(h) => {
            w.u8(40);
            w.u8(h.reason as u8);
            w.u32(h.number);
            w.u8(h.status as u8);
            w.u64(h.ts_ns);
            w.u64(h.elapsed_ns);
            w.u64(h.visited);
            w.str(&h.result);
        }
        Event::ThreadName(t) => {
            w.u8(50);
            w.u32(t.tid);
            w.str(&t.name);
        }
        Event::DeviceInfo(d) => {
            w.u8(56);
            w.i32(d.ordinal);
            w.str(&d.pci_bus_id);
            for &b in &d.uuid {
                w.u8(b);
            }
        }
        Event::Identity(id) => {
            w.u8(55);
            w.u32(id.vars.len() as u32);
            for (k, v) in &id.vars {
                w.str(k);
                w.str(v);
            }
        }
        Event::Activity(a) => {
            w.u8(70);
            w.u64(a.ts_ns);
            w.u64(a.count);
        }
        Event::Reach(x) => {
            w.u8(65);
            w.u8(x.reason as u8);
            w.u32(x.number);
            w.u8(x.status as u8);
            w.u64(x.ts_ns);
            w.u64(x.elapsed_ns);
            w.u64(x.cpu_ns);
            w.u64(x.scanned_bytes);
            w.u64(x.unreadable_bytes);
            w.str(&x.note);
            w.u32(x.entries.len() as u32);
            for e in &x.entries {
                w.u64(e.addr);
                w.u8(e.class as u8);
                w.u32(e.refs);
                w.u8(u8::from(e.interior));
                w.u8(e.region as u8);
                w.u32(e.tid);
                w.u64(e.from);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Api, Free, LineTableFormat, PyCode, PyFrame, PyRuntime, PyStack, Stack};

    #[test]
    fn golden_bytes() {
        let mut buf = Vec::new();
        write_header(&mut buf);
        assert_eq!(buf, b"GPUSHIM\0\x04\x00\x00\x00");
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
    fn golden_bytes_of_a_graph_launch() {
        let mut buf = Vec::new();
        encode(
            &Event::GraphLaunch(crate::GraphLaunch {
                seq: 1,
                ts_ns: 2,
                exec: 3,
                api: Api::CudaGraphLaunch,
                stream: 4,
                tid: 5,
            }),
            &mut buf,
        );
        let want: Vec<u8> = [
            &38u32.to_le_bytes()[..],
            &[18],
            &1u64.to_le_bytes(),
            &2u64.to_le_bytes(),
            &3u64.to_le_bytes(),
            &[54],
            &4u64.to_le_bytes(),
            &5u32.to_le_bytes(),
        ]
        .concat();
        assert_eq!(buf, want);
    }

    #[test]
    fn golden_bytes_of_a_thread_name() {
        let mut buf = Vec::new();
        let ev = Event::ThreadName(crate::ThreadName { tid: 0x0102, name: "gemm".into() });
        encode(&ev, &mut buf);
        assert_eq!(buf, [13, 0, 0, 0, 50, 2, 1, 0, 0, 4, 0, 0, 0, b'g', b'e', b'm', b'm']);
        assert_eq!(crate::decode_body(&buf[4..]).unwrap(), Some(ev));
        assert!(crate::decode_body(&buf[4..buf.len() - 1]).is_err(), "a truncated name is an error");
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
    /// A scan's entry of each class: the class is the byte after the address; "possibly lost"
    /// (4) came with version 3.
    #[test]
    fn golden_bytes_of_a_reach_entry_of_each_class() {
        use crate::{Reach, ReachClass, ReachEntry, ReachRegion, ReachStatus, WalkReason};
        for (class, byte) in [
            (ReachClass::Lost, 0u8),
            (ReachClass::IndirectlyLost, 1),
            (ReachClass::Reachable, 2),
            (ReachClass::Unknown, 3),
            (ReachClass::PossiblyLost, 4),
        ] {
            let entry =
                ReachEntry { addr: 9, class, refs: 0, interior: false, region: ReachRegion::None, tid: 0, from: 0 };
            let r = Reach {
                reason: WalkReason::Exit,
                number: 0,
                status: ReachStatus::Complete,
                ts_ns: 0,
                elapsed_ns: 0,
                cpu_ns: 0,
                scanned_bytes: 0,
                unreadable_bytes: 0,
                note: String::new(),
                entries: vec![entry],
            };
            let mut buf = Vec::new();
            encode(&Event::Reach(r.clone()), &mut buf);
            #[rustfmt::skip]
            let want: Vec<u8> = [
                &[82u8, 0, 0, 0, 65, 3], &[0; 4][..], &[0], &[0; 40], &[0; 4], &1u32.to_le_bytes(),
                &9u64.to_le_bytes(), &[byte], &[0; 4], &[0], &[0], &[0; 4], &[0; 8],
            ]
            .concat();
            assert_eq!(buf, want, "{class:?}");
            assert_eq!(crate::decode_body(&buf[4..]).unwrap(), Some(Event::Reach(r)));
        }
    }
}
