//! The report as a pickle in the format of PyTorch's `torch.cuda.memory._snapshot()`, so that
//! `pytorch.org/memory_viz` and `torch.cuda._memory_viz` show any program's allocations, not
//! only PyTorch's. The format is the `Snapshot` dictionary documented in the docstring of
//! `_snapshot` in PyTorch's `torch/cuda/memory.py` (plus the keys its C++ side adds:
//! `device`, `requested_size`, `is_expandable` and `frames` per segment, `time_us` per trace
//! entry); docs/torch-snapshot.md gives the mapping field by field and what cannot be mapped.
//!
//! Each live allocation of device or managed memory ([`Report::allocations`]) is one segment
//! (what a `cudaMalloc` returned, in PyTorch's words). Its blocks are the objects the heap
//! walk found inside it (`active_allocated`) with the rest in blocks whose state is
//! `unknown`; without a walk one `unknown` block covers the segment. The device traces hold a
//! `segment_alloc` per segment at the time it was made and an `oom` per out-of-memory failure:
//! the report keeps no history of freed allocations, so there is no `segment_free` and no
//! block-level `alloc`/`free_completed`.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use super::Render;
use crate::report::{Frame, LiveAllocation, Report};

/// The torch-snapshot format.
pub struct TorchSnapshot;

/// Segments of at most this many bytes are `small`. PyTorch's caching allocator
/// (`c10/cuda/CUDACachingAllocator.cpp`) makes its small pool's segments of `kSmallBuffer`
/// (2 MiB) and its large pool's of `kLargeBuffer` (20 MiB) or of requests of at least
/// `kMinLargeAlloc` (10 MiB) rounded up to 2 MiB, so this matches its `segment_type`.
pub const SMALL_SEGMENT_BYTES: u64 = 2 << 20;

/// The snapshot dictionary.
#[derive(Serialize)]
struct Snapshot {
    segments: Vec<Segment>,
    /// One list per device ordinal, 0 to the highest seen.
    device_traces: Vec<Vec<TraceEntry>>,
    /// PyTorch's allocator settings; none apply.
    allocator_settings: BTreeMap<String, String>,
}

#[derive(Serialize)]
struct Segment {
    device: i32,
    address: u64,
    total_size: u64,
    allocated_size: u64,
    active_size: u64,
    requested_size: u64,
    stream: u64,
    segment_type: &'static str,
    segment_pool_id: (u64, u64),
    is_expandable: bool,
    frames: Vec<TorchFrame>,
    blocks: Vec<Block>,
}

#[derive(Serialize)]
struct Block {
    address: u64,
    size: u64,
    requested_size: u64,
    state: &'static str,
    frames: Vec<TorchFrame>,
}

#[derive(Clone, Serialize)]
struct TorchFrame {
    filename: String,
    line: u64,
    name: String,
}

#[derive(Serialize)]
struct TraceEntry {
    action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    addr: Option<u64>,
    size: u64,
    stream: u64,
    time_us: u64,
    frames: Vec<TorchFrame>,
    #[serde(skip_serializing_if = "Option::is_none")]
    device_free: Option<u64>,
}

/// `0x…` as a number (0 if it is not one).
fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or(0)
}

/// A frame as PyTorch writes one: `name`, `filename` (the module's path when the source file
/// is unknown), `line` (0 when unknown).
fn frame(f: &Frame) -> TorchFrame {
    let filename = f.file.clone().unwrap_or_else(|| f.module.clone());
    TorchFrame { filename, line: f.line.map_or(0, u64::from), name: f.function.clone() }
}

/// The frames PyTorch's viewer shows of a stack (innermost first): the user's and the
/// frameworks' and libraries' (PyTorch's own snapshot has its C++ frames, and they tell
/// PyTorch's segments from others), leaving out the runtime's (the CUDA runtime and driver,
/// libc, CPython's C frames, `libffi.so.8 ??`); all of them when nothing else is left.
fn frames(stack: &[Frame]) -> Vec<TorchFrame> {
    let user: Vec<TorchFrame> = stack.iter().filter(|f| f.class != crate::report::Class::Runtime).map(frame).collect();
    if user.is_empty() {
        stack.iter().map(frame).collect()
    } else {
        user
    }
}

/// The blocks of segment `a`: the heap walk's objects that start inside it, in address order
/// (an object overlapping the previous one is left out), with the gaps as `unknown` blocks.
fn blocks(a: &LiveAllocation, start: u64, objects: &[(u64, u64)], frames: &[TorchFrame]) -> Vec<Block> {
    let end = start.saturating_add(a.size);
    let mut out = Vec::new();
    let mut at = start;
    let unknown = |from: u64, to: u64| Block {
        address: from,
        size: to - from,
        requested_size: to - from,
        state: "unknown",
        frames: frames.to_vec(),
    };
    for &(addr, bytes) in objects {
        if addr < at || addr >= end || bytes == 0 {
            continue;
        }
        let stop = addr.saturating_add(bytes).min(end);
        if addr > at {
            out.push(unknown(at, addr));
        }
        out.push(Block {
            address: addr,
            size: stop - addr,
            requested_size: stop - addr,
            state: "active_allocated",
            frames: frames.to_vec(),
        });
        at = stop;
    }
    if at < end || out.is_empty() {
        out.push(unknown(at, end));
    }
    out
}

/// The snapshot of `r`.
fn snapshot(r: &Report) -> Snapshot {
    // The heap walk's objects by address (the largest of each site), when there was a walk.
    let mut objects: Vec<(u64, u64)> = r
        .holders
        .iter()
        .flat_map(|h| h.sites.iter().chain(std::iter::once(&h.unattributed)))
        .flat_map(|s| s.top_objects.iter().map(|o| (hex(&o.address), o.bytes)))
        .collect();
    objects.sort_unstable();
    let frames_of: BTreeMap<u32, Vec<TorchFrame>> = r.sites.iter().map(|s| (s.id, frames(&s.frames))).collect();
    let time_us = |t_s: f64| r.start_unix_ns / 1000 + (t_s * 1e6).max(0.0) as u64;
    let mut segments = Vec::new();
    let mut traces: Vec<Vec<TraceEntry>> = vec![Vec::new()];
    let mut trace_of = |device: i32| -> usize {
        let d = usize::try_from(device).unwrap_or(0);
        if traces.len() <= d {
            traces.resize_with(d + 1, Vec::new);
        }
        d
    };
    let mut order: Vec<&LiveAllocation> =
        r.allocations.iter().filter(|a| a.kind != "pinned_host" && a.device >= 0).collect();
    order.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    let mut events: Vec<(f64, usize, TraceEntry)> = Vec::new();
    for a in &order {
        let start = hex(&a.address);
        let frames = frames_of.get(&a.site).cloned().unwrap_or_default();
        let first = objects.partition_point(|&(addr, _)| addr < start);
        let inside: Vec<(u64, u64)> =
            objects[first..].iter().take_while(|&&(addr, _)| addr < start.saturating_add(a.size)).copied().collect();
        let blocks = blocks(a, start, &inside, &frames);
        let allocated: u64 = blocks.iter().filter(|b| b.state == "active_allocated").map(|b| b.size).sum();
        events.push((
            a.t_s,
            trace_of(a.device),
            TraceEntry {
                action: "segment_alloc",
                addr: Some(start),
                size: a.size,
                stream: 0,
                time_us: time_us(a.t_s),
                frames: frames.clone(),
                device_free: None,
            },
        ));
        segments.push(Segment {
            device: a.device,
            address: start,
            total_size: a.size,
            allocated_size: allocated,
            active_size: allocated,
            requested_size: allocated,
            stream: 0,
            segment_type: if a.size <= SMALL_SEGMENT_BYTES { "small" } else { "large" },
            segment_pool_id: (0, 0),
            is_expandable: false,
            frames,
            blocks,
        });
    }
    for f in r.failures.iter().filter(|f| f.result == 2 && f.kind != "pinned_host") {
        let free = r.mem_info.iter().find(|m| m.device == f.device).map_or(0, |m| m.free_bytes);
        events.push((
            f.ts_s,
            trace_of(f.device),
            TraceEntry {
                action: "oom",
                addr: None,
                size: f.size,
                stream: 0,
                time_us: time_us(f.ts_s),
                frames: frames(&f.frames),
                device_free: Some(free),
            },
        ));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (_, d, e) in events {
        traces[d].push(e);
    }
    segments.sort_by_key(|s| (s.device, s.address));
    Snapshot { segments, device_traces: traces, allocator_settings: BTreeMap::new() }
}

impl Render for TorchSnapshot {
    fn render(&self, r: &Report, out: &mut dyn Write) -> io::Result<()> {
        let bytes = serde_pickle::to_vec(&snapshot(r), serde_pickle::SerOptions::new())
            .map_err(|e| io::Error::other(format!("cannot write the pickle: {e}")))?;
        out.write_all(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::tests::{render_bytes, sample};
    use crate::report::{HeldObject, Holders, SiteHolders, Walk};
    use serde_pickle::{DeOptions, HashableValue, Value};

    fn key<'a>(v: &'a Value, k: &str) -> &'a Value {
        match v {
            Value::Dict(d) => d.get(&HashableValue::String(k.into())).unwrap_or_else(|| panic!("no key {k}")),
            _ => panic!("not a dict: {v:?}"),
        }
    }

    fn list(v: &Value) -> &Vec<Value> {
        match v {
            Value::List(l) => l,
            _ => panic!("not a list: {v:?}"),
        }
    }

    fn int(v: &Value) -> i128 {
        match v {
            Value::I64(n) => i128::from(*n),
            Value::Int(n) => n.to_string().parse().unwrap(),
            _ => panic!("not an int: {v:?}"),
        }
    }

    /// Two live allocations become two segments with their address, size, device and the
    /// allocating frames; pinned host memory is left out; each has a `segment_alloc` in its
    /// device's trace, and the out-of-memory failure an `oom`.
    #[test]
    fn segments_and_traces_from_live_allocations() {
        let mut r = sample();
        r.start_unix_ns = 1_000_000_000;
        r.allocations = vec![
            LiveAllocation {
                address: "0x7f0000200000".into(),
                size: 20 << 20,
                kind: "device".into(),
                api: "cudaMalloc".into(),
                device: 1,
                site: 1,
                t_s: 0.5,
            },
            LiveAllocation {
                address: "0x7f0000000000".into(),
                size: 4096,
                kind: "device".into(),
                api: "cudaMalloc".into(),
                device: 0,
                site: 1,
                t_s: 0.25,
            },
            LiveAllocation { address: "0x1000".into(), size: 64, kind: "pinned_host".into(), ..Default::default() },
        ];
        let v: Value = serde_pickle::from_slice(&render_bytes(&TorchSnapshot, &r), DeOptions::new()).unwrap();
        let segs = list(key(&v, "segments"));
        assert_eq!(segs.len(), 2);
        assert_eq!(int(key(&segs[0], "address")), 0x7f00_0000_0000);
        assert_eq!(int(key(&segs[0], "total_size")), 4096);
        assert_eq!(key(&segs[0], "segment_type"), &Value::String("small".into()));
        assert_eq!(int(key(&segs[1], "device")), 1);
        assert_eq!(int(key(&segs[1], "total_size")), 20 << 20);
        assert_eq!(key(&segs[1], "segment_type"), &Value::String("large".into()));
        let blocks = list(key(&segs[1], "blocks"));
        assert_eq!(blocks.len(), 1);
        assert_eq!(key(&blocks[0], "state"), &Value::String("unknown".into()));
        assert_eq!(int(key(&blocks[0], "size")), 20 << 20);
        // The runtime's `cudaMalloc` frame is left out.
        let frames = list(key(&segs[1], "frames"));
        let names: Vec<&Value> = frames.iter().map(|f| key(f, "name")).collect();
        assert_eq!(names, [&Value::String("render_frame".into()), &Value::String("main".into())]);
        assert_eq!(key(&frames[0], "filename"), &Value::String("/w/app".into()));
        let traces = list(key(&v, "device_traces"));
        assert_eq!(traces.len(), 2);
        let t0 = list(&traces[0]);
        assert_eq!(t0.len(), 1);
        assert_eq!(key(&t0[0], "action"), &Value::String("segment_alloc".into()));
        assert_eq!(int(key(&t0[0], "time_us")), 1_000_000 + 250_000);
        let t1 = list(&traces[1]);
        let actions: Vec<&Value> = t1.iter().map(|e| key(e, "action")).collect();
        assert_eq!(actions, [&Value::String("segment_alloc".into()), &Value::String("oom".into())]);
        assert_eq!(int(key(&t1[1], "size")), 1 << 40);
    }

    /// Objects the heap walk found become `active_allocated` blocks, the rest `unknown`.
    #[test]
    fn blocks_from_the_heap_walk() {
        let mut r = sample();
        r.allocations = vec![LiveAllocation {
            address: "0x10000".into(),
            size: 0x1000,
            kind: "device".into(),
            device: 0,
            site: 1,
            ..Default::default()
        }];
        let obj = |address: &str, bytes| HeldObject { address: address.into(), bytes, ..HeldObject::default() };
        r.holders = Some(Holders {
            schema: crate::report::HOLDERS_SCHEMA.into(),
            pid: 1,
            reason: "exit".into(),
            number: None,
            walk: Walk::default(),
            sites: vec![SiteHolders {
                site: Some(1),
                top_objects: vec![obj("0x10400", 0x100), obj("0x10000", 0x200), obj("0x20000", 8)],
                ..SiteHolders::default()
            }],
            unattributed: SiteHolders::default(),
            kinds: vec![],
        });
        let v: Value = serde_pickle::from_slice(&render_bytes(&TorchSnapshot, &r), DeOptions::new()).unwrap();
        let seg = &list(key(&v, "segments"))[0];
        let got: Vec<(i128, i128, Value)> = list(key(seg, "blocks"))
            .iter()
            .map(|b| (int(key(b, "address")), int(key(b, "size")), key(b, "state").clone()))
            .collect();
        let s = |x: &str| Value::String(x.into());
        assert_eq!(
            got,
            [
                (0x10000, 0x200, s("active_allocated")),
                (0x10200, 0x200, s("unknown")),
                (0x10400, 0x100, s("active_allocated")),
                (0x10500, 0xb00, s("unknown")),
            ]
        );
        assert_eq!(int(key(seg, "allocated_size")), 0x300);
    }
}
