//! The writer thread: started at the first event together with the collector process, it turns
//! hot-path [`Msg`]s into wire events, sends each distinct stack once, keeps the collector's
//! module map up to date, emits snapshot requests, and streams frames over a Unix socket.
//!
//! A socket rather than a pipe: writes use `MSG_NOSIGNAL`, so a collector that dies never
//! raises SIGPIPE in the target. When the collector goes away, recording stops and one line on
//! stderr says how many events were sent before.

mod answers;
mod rings;
mod send;

use answers::Scan;

use std::collections::{HashMap, HashSet};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use gpushim_wire::{self as wire, Event};

use crate::clock::{self, StampClock};
use crate::config::{self, Config};
use crate::event::{Msg, PyFrames, SnapshotReply};
use crate::hash::FastHash;
use crate::ring::{self, Ring};
use crate::state::{EXIT_DONE, EXIT_SCANS_DONE, FINISHED, QUICK_EXIT_DONE, STATE, TRACED_PID};
use crate::{alloc_watch, launch, loader, python, reach, socket, sys};

/// `cudaErrorMemoryAllocation` and `CUDA_ERROR_OUT_OF_MEMORY` are both 2 (CUDA Runtime API,
/// cudaError; CUDA Driver API, CUresult).
const OUT_OF_MEMORY: i32 = 2;
/// The longest the first event waits for the writer thread to queue the exit walk's
/// registration (python/heap.rs).
const ARM_WAIT: Duration = Duration::from_millis(100);
/// Events the channel holds before hooks wait (backpressure), about 1.3 MiB of slots.
const CHANNEL_CAPACITY: usize = 16 * 1024;
/// Bytes buffered before a write to the socket.
const FLUSH_BYTES: usize = 64 * 1024;
/// The writer's sleep when the channel and the rings are empty: doubling from IDLE_MIN to
/// IDLE_MAX while nothing arrives. It bounds the delay of an event, a snapshot request and the
/// exit handshake. A thread whose ring is half full wakes it earlier (`ring`).
const IDLE_MIN: Duration = Duration::from_micros(500);
const IDLE_MAX: Duration = Duration::from_millis(5);
/// How often, while idle, the writer checks whether it is the process's last thread, ns.
const ALONE_CHECK_NS: u64 = 100_000_000;
/// How often the writer reads what the collector wrote back when no API caller waits, ns.
const ANSWERS_CHECK_NS: u64 = 20_000_000;

/// Starts the collector and the writer thread. `None` (with one line on stderr) if the
/// collector cannot be started: the program then runs on unrecorded.
pub fn start() -> Option<Sender<Msg>> {
    let cfg = Config::from_env();
    loader::own_range();
    python::init(config::python_frames());
    // Under the fork lock: a fork now would give the child both ends of the socket before the
    // shim knows them (the child's fork handler closes only a socket it knows).
    loader::fork_lock();
    let sock = launch::collector(&cfg);
    // From here the socket is handled by number only, checked against its identity before
    // each use, and closed only while it is still ours.
    if let Some(fd) = sock {
        socket::adopt(fd);
    }
    loader::fork_unlock();
    let sock = sock?;
    // Before the writer's clock is made and before the first stamp (`clock`).
    clock::choose();
    // On this thread, before the program goes on: the writer's checks read it (`sys::alone`).
    sys::open_stat();
    // The header, Hello and module map go out before the first event is queued, so that the
    // collector knows who and where even if the program is killed a moment later.
    let mut w = Writer::new(sock);
    if !w.begin(&cfg) {
        return None;
    }
    // The channel's buffer, one block of about 1.7 MiB, holds copies of allocations' addresses:
    // the reachability scans leave it out.
    let ((tx, rx), channel) = alloc_watch::watch(|| crossbeam_channel::bounded(CHANNEL_CAPACITY));
    w.reach_own.channel = channel;
    // Set by the writer thread once the exit walk's registration is queued. Atomics and
    // `sys::spawn`, not a channel's blocking receive nor `std::thread`: either would register a
    // thread-local destructor on this program thread, which its `exit()` would run (per_thread).
    static ARMED: AtomicBool = AtomicBool::new(false);
    ARMED.store(false, Release);
    let spawned = sys::with_async_signals_blocked(|| {
        sys::spawn(
            c"gpushim-writer",
            Box::new(move || {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    // The pending call that registers the exit walk (CPython only), asked for
                    // from this thread, never from a hook.
                    python::heap::arm();
                    crate::state::WRITER_TID.store(sys::gettid(), Release);
                    ARMED.store(true, Release);
                    w.run(rx)
                }));
                // Whatever ended it: a thread waiting for room in its ring stops waiting.
                ring::writer_gone();
            }),
        )
    });
    if let Err(e) = spawned {
        eprintln!("gpushim: cannot start the writer thread: {e}; recording is off");
        return None;
    }
    // Wait (bounded) until the exit walk's registration is queued: a short program could
    // otherwise reach Python's finalization, which runs pending calls once before its atexit
    // handlers, before the writer thread asked for it.
    let _ = sys::poll_until(sys::deadline_after(ARM_WAIT), || ARMED.load(Acquire).then_some(()));
    cfg.warn_after_start();
    // SAFETY: getpid cannot fail.
    TRACED_PID.store(unsafe { libc::getpid() }, Release);
    Some(tx)
}

struct Writer {
    sock: RawFd,
    buf: Vec<u8>,
    /// Stack ids by native and Python frames together (see the wire crate's docs).
    /// (Hashed with a fast hasher: a Python stack adds up to 64 frames to every key.)
    stacks: HashMap<(Box<[u64]>, PyFrames), u32, FastHash>,
    /// Turns the stamps of `Alloc` and `Free` into monotonic ns (`clock`).
    clock: StampClock,
    /// Per thread id, the stack id of its previous `Alloc` that carried frames (`last_stack`),
    /// for allocations that came through the channel.
    last_stack: HashMap<u32, u32, FastHash>,
    /// The same per ring (by ring id): a ring has one thread at a time, and a thread that takes
    /// over a drained ring sends frames with its first allocation (its `last_stack` is new).
    ring_last_stack: Vec<u32>,
    /// The collector was lost while events were handled: the writer stops.
    gone: bool,
    /// The rings with events in this round and their heads (kept to reuse its allocation).
    active: Vec<(&'static Ring, u32)>,
    /// Per Python code id: whether its `PyCode` was sent.
    py_codes_sent: Vec<bool>,
    /// Whether `PyRuntime` (or the note that Python's layout is not supported) was sent.
    py_announced: bool,
    modules: HashSet<(String, u64)>,
    covered: Vec<(u64, u64)>,
    /// The address ranges of PyTorch's CUDA caching allocator's library (`libc10_cuda.so`),
    /// once loaded: an allocation from there asks for its blocks' stacks
    /// (`python::heap::torch_stacks_wanted`).
    torch_ranges: Vec<(u64, u64)>,
    snapshots_handled: u64,
    /// Snapshots and out-of-memory failures sent, which number their heap walks.
    snapshots_sent: u32,
    ooms_sent: u32,
    events: u64,
    /// API snapshots sent and not answered yet: their number and who waits for the answer.
    answers: Vec<(u32, Sender<SnapshotReply>)>,
    /// Bytes read from the collector that do not yet end a line.
    answer_buf: Vec<u8>,
    /// Device ordinals whose `DeviceInfo` was sent (or asked for and not known): below 64 as
    /// bits of `devices_mask`, others in `devices_described`.
    devices_mask: u64,
    devices_described: HashSet<i32>,
    /// Every device the driver shows was described (at the first allocation).
    devices_listed: bool,
    /// The writer's own live set for reachability scans (`reach`); `None` when they are off.
    reach: Option<reach::Table>,
    /// What of the shim's own memory the scans leave out.
    reach_own: reach::Own,
    /// The exit's scan was made, after the Python exit walk (`Msg::ExitScan`).
    exit_scanned: bool,
    /// That scan's bytes read and time taken (ns), for the exit's line when it was slow.
    exit_scan_took: Option<(u64, u64)>,
    /// The program's activity last sent (`Event::Activity`).
    activity_sent: u64,
}

impl Writer {
    fn new(sock: RawFd) -> Writer {
        Writer {
            sock,
            buf: Vec::with_capacity(FLUSH_BYTES * 2),
            stacks: HashMap::default(),
            last_stack: HashMap::default(),
            ring_last_stack: Vec::new(),
            // None sent yet: the first allocation sends its count, 0 or not, so that the
            // collector knows the count from the start of the growth on.
            activity_sent: u64::MAX,
            gone: false,
            active: Vec::new(),
            clock: StampClock::new(),
            py_codes_sent: Vec::new(),
            py_announced: false,
            modules: HashSet::new(),
            covered: Vec::new(),
            torch_ranges: Vec::new(),
            snapshots_handled: 0,
            snapshots_sent: 0,
            ooms_sent: 0,
            events: 0,
            answers: Vec::new(),
            answer_buf: Vec::new(),
            devices_mask: 0,
            devices_described: HashSet::new(),
            devices_listed: false,
            reach: config::reachability().then(reach::Table::default),
            reach_own: reach::Own::default(),
            exit_scanned: false,
            exit_scan_took: None,
        }
    }

    /// Sends the stream header, Hello and the module map. False if the collector is gone.
    fn begin(&mut self, cfg: &Config) -> bool {
        wire::write_header(&mut self.buf);
        self.push(&Event::Hello(hello(cfg)));
        if !cfg.identity.is_empty() {
            self.push(&Event::Identity(wire::Identity { vars: cfg.identity.clone() }));
        }
        for w in &cfg.warnings {
            self.push(&Event::Note(w.clone()));
        }
        self.scan_modules();
        self.announce_python();
        self.flush()
    }

    /// Sends `DeviceInfo` for `ordinal` the first time it is named (asked of the driver here,
    /// on the writer thread: off the program's path).
    fn describe_device(&mut self, ordinal: i32) {
        // Every device the driver shows, once, at the first allocation: an allocation's device
        // may be known only to the collector (from its context), as for memory made after
        // `cudaSetDevice(1)` on another thread.
        if !self.devices_listed {
            self.devices_listed = true;
            for o in 0..crate::real::device_count().min(64) {
                self.describe_one(o);
            }
        }
        self.describe_one(ordinal);
    }

    /// Sends the `DeviceInfo` of `ordinal` unless it was sent (or asked for) before.
    fn describe_one(&mut self, ordinal: i32) {
        // Ordinals below 64 in a bit mask: this runs for every allocation.
        let new = match u32::try_from(ordinal) {
            Ok(o) if o < 64 => {
                let bit = 1u64 << o;
                let new = self.devices_mask & bit == 0;
                self.devices_mask |= bit;
                new
            }
            Ok(_) => self.devices_described.insert(ordinal),
            Err(_) => false,
        };
        if !new {
            return;
        }
        if let Some((pci_bus_id, uuid)) = crate::real::device_identity(ordinal) {
            self.push(&Event::DeviceInfo(wire::DeviceInfo { ordinal, pci_bus_id, uuid }));
        }
    }

    /// Sends `PyRuntime` once Python frames are captured, or once the note that this Python's
    /// layout is not supported.
    fn announce_python(&mut self) {
        if self.py_announced {
            return;
        }
        if let Some(version) = python::version() {
            self.push(&Event::PyRuntime(wire::PyRuntime { version }));
            self.py_announced = true;
        } else if let Some(note) = python::unsupported_note() {
            self.push(&Event::Note(note.to_string()));
            self.py_announced = true;
        }
    }

    fn run(mut self, rx: Receiver<Msg>) {
        // While idle the writer sleeps instead of blocking on the channel: a sender then never
        // has to wake it (a futex call of several microseconds on the program's thread for
        // every allocation, docs/performance.md), at the price of up
        // to IDLE_MAX of latency.
        let mut idle = IDLE_MIN;
        let mut last_alone_check = 0u64;
        let mut last_answers_check = 0u64;
        // Consecutive checks that found this thread alone: two are needed, 100 ms apart.
        let mut alone_seen = 0u32;
        loop {
            let msg = rx.try_recv();
            // Before the event is handled: an event whose sequence number is at or past a
            // snapshot's boundary was numbered after the signal, so the marker goes first.
            self.snapshots();
            if let Some(h) = python::heap::poll() {
                self.activity_now();
                self.push(&Event::HeapWalk(h));
            }
            // Waiting callers' answers at once; otherwise a request of the collector's own
            // (`wire::ASK_SNAPSHOT`) is looked for every ANSWERS_CHECK_NS.
            let now = sys::now_ns();
            if !self.answers.is_empty() || now.saturating_sub(last_answers_check) >= ANSWERS_CHECK_NS {
                last_answers_check = now;
                self.read_answers();
            }
            // The rings after the channel's message was taken: what a thread queued in its ring
            // before it sent that message (the exit) is handled first. (A thread's other events
            // all go through its ring, in order.)
            let from_rings = self.drain_rings();
            if self.gone {
                return;
            }
            match msg {
                Ok(Msg::ExitScan { ts_ns }) => {
                    if !self.exit_scanned {
                        self.exit_scanned = true;
                        let t0 = sys::now_ns();
                        let read = self.reachability(Scan::ExitBeforeHandlers { asked_ns: ts_ns });
                        self.exit_scan_took = read.map(|read| (read, sys::now_ns().saturating_sub(t0)));
                    }
                    EXIT_SCANS_DONE.fetch_add(1, AcqRel);
                }
                Ok(Msg::Exit { ts_ns }) => {
                    let got = sys::now_ns();
                    // Made already, if the end of `main`, `exit()` or the Python exit walk was
                    // seen; else now, after the program's exit handlers.
                    let scan = if self.exit_scanned { None } else { self.reachability(Scan::ExitAfterHandlers) };
                    let scanned = sys::now_ns();
                    self.activity_now();
                    self.push(&Event::Exit(wire::Exit { ts_ns }));
                    if self.flush() {
                        self.close_and_wait();
                    }
                    EXIT_DONE.store(true, Release);
                    crate::slow_exit::say(self.exit_scan_took, ts_ns, got, scan, scanned);
                    return;
                }
                Ok(Msg::QuickExit { ts_ns }) => {
                    self.activity_now();
                    self.push(&Event::Exit(wire::Exit { ts_ns }));
                    // Where the collector dies with the program (PID 1 of a namespace and its
                    // children), `_exit` too waits for the report, as the exit path does.
                    if self.flush() && launch::holds_exit() {
                        self.close_and_wait();
                    }
                    QUICK_EXIT_DONE.store(true, Release);
                    return;
                }
                Ok(msg) => {
                    idle = IDLE_MIN;
                    self.handle(msg, None);
                    if self.buf.len() >= FLUSH_BYTES && !self.flush() {
                        // Dropping `rx` makes every later send fail at once instead of blocking;
                        // a thread waiting for room in its ring stops waiting (`ring::writer_gone`).
                        return;
                    }
                }
                Err(TryRecvError::Empty) if from_rings > 0 => idle = IDLE_MIN,
                Err(TryRecvError::Empty) => {
                    self.clock.refresh();
                    if !self.flush() {
                        return;
                    }
                    let now = sys::now_ns();
                    if now.saturating_sub(last_alone_check) >= ALONE_CHECK_NS {
                        last_alone_check = now;
                        alone_seen = if sys::alone() { alone_seen + 1 } else { 0 };
                        if alone_seen >= 2 {
                            self.end_as_last_thread();
                        }
                    }
                    ring::writer_sleep(idle);
                    idle = (idle * 2).min(IDLE_MAX);
                }
                Err(TryRecvError::Disconnected) => return,
            }
        }
    }

    /// Every thread of the program has ended (`pthread_exit` in each, the main thread's
    /// included): glibc's last thread would call `exit(0)`, but this thread is the last one now.
    /// Ends the stream as the exit path does, then exits the same way.
    fn end_as_last_thread(&mut self) -> ! {
        // What the ended threads queued last (their rings stay until drained).
        self.drain_rings();
        self.activity_now();
        self.push(&Event::Exit(wire::Exit { ts_ns: sys::now_ns() }));
        if self.flush() {
            self.close_and_wait();
        }
        STATE.store(FINISHED, Release);
        // SAFETY: what glibc does when the process's last thread ends (nptl's start_thread and
        // __libc_start_call_main call exit(0)); atexit handlers and destructors run here.
        unsafe { libc::exit(0) }
    }

    fn push(&mut self, ev: &Event) {
        wire::encode(ev, &mut self.buf);
    }

    /// Sends the program's activity `count` at `ts_ns` if it changed since the last one sent
    /// (it never goes back: a record whose relaxed read came a little before another's is
    /// sent as the count already sent).
    fn activity_at(&mut self, ts_ns: u64, count: u64) {
        if self.activity_sent == u64::MAX || count > self.activity_sent {
            self.activity_sent = count;
            self.push(&Event::Activity(wire::Activity { ts_ns, count }));
        }
    }

    /// Sends the activity a record carried (its low 32 bits, `low`) at the record's time.
    fn activity_of_record(&mut self, ts_ns: u64, low: u32) {
        let last = if self.activity_sent == u64::MAX { 0 } else { self.activity_sent };
        self.activity_at(ts_ns, widen(last, low));
    }

    /// Sends the program's activity now (before a heap walk's, a scan's or the exit's event:
    /// what the program did up to the end of its work).
    fn activity_now(&mut self) {
        let count = crate::state::ACTIVITY.load(std::sync::atomic::Ordering::Relaxed);
        self.activity_at(sys::now_ns(), count);
    }

    /// Turns `msg` into wire events; `ring` is the ring it came through (`None`: the channel).
    fn handle(&mut self, msg: Msg, ring: Option<u32>) {
        self.events += 1;
        match msg {
            Msg::Alloc { seq, stamp, addr, size, kind, api, device, stream, tid, frames, py, ctx, same, activity } => {
                self.describe_device(device);
                let ts_ns = self.clock.ns_of(stamp);
                self.activity_of_record(ts_ns, activity);
                // Through PyTorch's caching allocator (a frame in its library; without
                // backtraces none is known): its blocks' stacks are wanted, while they are still
                // to be asked for (the frames are searched only then).
                let torch_open = python::heap::torch_stacks_open();
                let torch_known = !self.torch_ranges.is_empty();
                if torch_open && frames.iter().any(|&a| self.torch_ranges.iter().any(|&(s, e)| (s..e).contains(&a))) {
                    python::heap::torch_stacks_wanted();
                }
                let stack = if same {
                    match ring {
                        Some(r) => self.ring_last_stack.get(r as usize).copied().unwrap_or(wire::NO_STACK),
                        None => self.last_stack.get(&tid).copied().unwrap_or(wire::NO_STACK),
                    }
                } else {
                    let id = self.stack_id(frames, py);
                    if id != wire::NO_STACK {
                        match ring {
                            Some(r) => {
                                let r = r as usize;
                                if self.ring_last_stack.len() <= r {
                                    self.ring_last_stack.resize(r + 1, wire::NO_STACK);
                                }
                                self.ring_last_stack[r] = id;
                            }
                            None => {
                                self.last_stack.insert(tid, id);
                            }
                        }
                    }
                    id
                };
                if torch_open && !torch_known && !self.torch_ranges.is_empty() {
                    // This allocation's frames made the module scan find PyTorch's library.
                    python::heap::torch_stacks_wanted();
                }
                if let Some(t) = &mut self.reach {
                    t.alloc(seq, addr, size, kind, api, device);
                }
                self.push(&Event::Alloc(wire::Alloc {
                    seq,
                    ts_ns,
                    addr,
                    size,
                    kind,
                    api,
                    device,
                    stream,
                    tid,
                    stack,
                    ctx,
                }));
            }
            Msg::Reset { seq, ts_ns, device, api, tid, ctx } => {
                if let Some(t) = &mut self.reach {
                    t.reset(device);
                }
                self.push(&Event::Reset(wire::Reset { seq, ts_ns, device, api, tid, ctx }));
            }
            Msg::ContextCreated { seq, ts_ns, ctx, device, api, tid } => {
                self.push(&Event::ContextCreated(wire::ContextCreated { seq, ts_ns, ctx, device, api, tid }));
            }
            Msg::Map { seq, ts_ns, addr, size, handle, tid } => {
                self.push(&Event::Map(wire::Map { seq, ts_ns, addr, size, handle, tid }));
            }
            Msg::Unmap { seq, ts_ns, addr, size, tid, result } => {
                self.push(&Event::Unmap(wire::Unmap { seq, ts_ns, addr, size, tid, result }));
            }
            Msg::HandleRef { seq, ts_ns, handle, addr, api, device, tid } => {
                self.push(&Event::HandleRef(wire::HandleRef { seq, ts_ns, handle, addr, api, device, tid }));
            }
            Msg::GraphNode { seq, ts_ns, addr, size, kind, api, device, graph, stream, tid, frames, py } => {
                let stack = self.stack_id(frames, py);
                let n = wire::GraphNode { seq, ts_ns, addr, size, kind, api, device, graph, stream, tid, stack };
                self.push(&Event::GraphNode(n));
            }
            Msg::GraphExec { seq, ts_ns, exec, graph, api, auto_free, tid, frames, py, nodes } => {
                let stack = self.stack_id(frames, py);
                let (allocs, frees) = *nodes;
                let x = wire::GraphExec { seq, ts_ns, exec, graph, api, auto_free, tid, stack, allocs, frees };
                self.push(&Event::GraphExec(x));
            }
            Msg::GraphLaunch { seq, ts_ns, exec, api, stream, tid, activity } => {
                self.activity_of_record(ts_ns, activity);
                self.push(&Event::GraphLaunch(wire::GraphLaunch { seq, ts_ns, exec, api, stream, tid }));
            }
            Msg::GraphExecDestroy { seq, ts_ns, exec, api, tid } => {
                self.push(&Event::GraphExecDestroy(wire::GraphExecDestroy { seq, ts_ns, exec, api, tid }));
            }
            Msg::GraphMemTrim { seq, ts_ns, device, api, tid } => {
                self.push(&Event::GraphMemTrim(wire::GraphMemTrim { seq, ts_ns, device, api, tid }));
            }
            Msg::Free { seq, stamp, addr, api, stream, tid, result } => {
                let ts_ns = self.clock.ns_of(stamp);
                if let (Some(t), 0) = (&mut self.reach, result) {
                    t.free(seq, addr);
                }
                self.push(&Event::Free(wire::Free { seq, ts_ns, addr, api, stream, tid, result }));
            }
            Msg::Failed { seq, ts_ns, size, kind, api, device, tid, frames, py, result, mem } => {
                if let Some((free, total)) = mem {
                    self.push(&Event::MemInfo(wire::MemInfo { ts_ns, device, free, total }));
                }
                let stack = self.stack_id(frames, py);
                self.push(&Event::Failed(wire::Failed { seq, ts_ns, size, kind, api, device, tid, stack, result }));
                if result == OUT_OF_MEMORY {
                    self.ooms_sent = self.ooms_sent.saturating_add(1);
                    if let Some(h) = python::heap::request(wire::WalkReason::Oom, self.ooms_sent) {
                        self.activity_now();
                        self.push(&Event::HeapWalk(h));
                    }
                    self.reachability(Scan::Report(wire::WalkReason::Oom, self.ooms_sent));
                }
            }
            Msg::HeapWalk(h) => {
                self.activity_now();
                self.activity_now();
                self.push(&Event::HeapWalk(h));
            }
            Msg::ApiSnapshot(req) => self.api_snapshot(*req),
            Msg::ThreadName { tid, name, len } => {
                let name = String::from_utf8_lossy(&name[..usize::from(len).min(name.len())]).into_owned();
                self.push(&Event::ThreadName(wire::ThreadName { tid, name }));
            }
            Msg::Exit { .. } | Msg::ExitScan { .. } | Msg::QuickExit { .. } => {} // handled in run
        }
    }
}

impl Drop for Writer {
    /// Closes the socket if, and only if, it is still ours.
    fn drop(&mut self) {
        socket::close_if_ours(self.sock);
    }
}

fn hello(cfg: &Config) -> wire::Hello {
    let command = std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
        })
        .unwrap_or_default();
    let start_unix_ns =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    wire::Hello {
        // SAFETY: getpid cannot fail.
        pid: unsafe { libc::getpid() } as u32,
        // SAFETY: getppid cannot fail.
        ppid: unsafe { libc::getppid() } as u32,
        start_unix_ns,
        command,
        cwd: cfg.cwd.to_string_lossy().into_owned(),
        output_dir: cfg.output_dir.to_string_lossy().into_owned(),
        shim_version: env!("CARGO_PKG_VERSION").into(),
    }
}

/// The full activity count of a record's low 32 bits `low`, given the count `last` sent before
/// it: the nearest value with those low bits (records of different threads read the counter
/// in any order, by little). Wrong only if more than 2^31 GPU calls came between two
/// allocations.
fn widen(last: u64, low: u32) -> u64 {
    last.wrapping_add(i64::from(low.wrapping_sub(last as u32) as i32) as u64)
}

#[cfg(test)]
mod tests {
    use super::widen;

    #[test]
    fn a_records_activity_is_widened_to_the_nearest_count() {
        assert_eq!(widen(0, 5), 5);
        assert_eq!(widen(41, 40), 40);
        assert_eq!(widen(u64::from(u32::MAX) - 2, 3), u64::from(u32::MAX) + 4);
        assert_eq!(widen((7 << 32) + 100, 90), (7 << 32) + 90);
        assert_eq!(widen((7 << 32) + 100, 200), (7 << 32) + 200);
    }
}
