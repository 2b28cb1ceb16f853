//! Snapshots: those asked for by signal (the boundary the handler recorded), those asked for
//! through the C API (answered when the collector says the file is written), and the heap walk
//! and reachability scan that follow each.

use std::sync::atomic::Ordering::*;

use gpushim_wire::{self as wire, Event};

use super::Writer;

use crate::event::ApiRequest;
use crate::state::{SNAP_BOUNDARY, SNAP_REQUESTS, SNAP_TS};
use crate::{inflight, python, reach, socket};

impl Writer {
    /// A snapshot asked for through the C API: sent like a signal's, with its label; the
    /// collector answers it with the file's path (read by [`Writer::read_answers`]).
    pub(super) fn api_snapshot(&mut self, req: ApiRequest) {
        let ApiRequest { boundary, ts_ns, label, dir, reply } = req;
        self.drain_below(boundary);
        self.push(&Event::ApiSnapshot(wire::ApiSnapshot { boundary, ts_ns, label, dir }));
        let mut pending = Vec::new();
        inflight::each_below(boundary, ts_ns, |p| pending.push(p));
        for p in pending {
            self.push(&Event::FreePending(p));
        }
        self.snapshots_sent = self.snapshots_sent.saturating_add(1);
        // Its heap walk is asked for when the answer comes (take_answers): a caller on the main
        // thread is blocked until then, and a walk queued now could wait past its cap
        // (GPUSHIM_HEAP_WALK_MS) while the collector writes a large snapshot.
        self.answers.push((self.snapshots_sent, reply));
        // Sent now: the caller waits for the answer.
        self.flush();
    }

    /// Reads what the collector wrote back without waiting, and answers each API snapshot
    /// whose line is complete. At the end of the collector's stream every waiting caller is
    /// answered (the reply channel is dropped).
    pub(super) fn read_answers(&mut self) {
        if !socket::still_ours(self.sock) {
            self.answers.clear();
            return;
        }
        let mut b = [0u8; 4096];
        loop {
            // SAFETY: reading into a valid buffer from our socket, without blocking.
            let n = unsafe { libc::recv(self.sock, b.as_mut_ptr().cast(), b.len(), libc::MSG_DONTWAIT) };
            if n > 0 {
                self.answer_buf.extend_from_slice(&b[..n as usize]);
                continue;
            }
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if n == 0 {
                self.take_answers(true);
                self.answers.clear();
                return;
            }
            break;
        }
        self.take_answers(true);
    }

    /// Handles the complete lines of `answer_buf`, asking for the heap walk of each snapshot
    /// written if `walks` (not once the stream is closed); true if one line was the
    /// end-of-stream confirmation (an empty line).
    pub(super) fn take_answers(&mut self, walks: bool) -> bool {
        let mut confirmed = false;
        let mut scans = Vec::new();
        while let Some(end) = self.answer_buf.iter().position(|&c| c == b'\n') {
            let line: Vec<u8> = self.answer_buf.drain(..=end).take(end).collect();
            if line.is_empty() {
                confirmed = true;
            } else if line == wire::ASK_SNAPSHOT {
                // A client of the collector (`gpushim snapshot`) asked: taken as a signal's is,
                // without signalling the program, whose own handler may have replaced ours.
                if walks {
                    crate::state::ask_snapshot();
                }
            } else if let Some((n, reply)) = wire::parse_answer(&line) {
                if let Some(i) = self.answers.iter().position(|(m, _)| *m == n) {
                    let (_, tx) = self.answers.swap_remove(i);
                    if walks && reply.is_ok() {
                        if let Some(h) = python::heap::request(wire::WalkReason::Snapshot, n) {
                            self.activity_now();
                            self.push(&Event::HeapWalk(h));
                        }
                        scans.push(n);
                    }
                    let _ = tx.send(reply);
                }
            }
        }
        // The scans run once the callers are answered: a caller waits on its snapshot's file,
        // not on its scan.
        for n in scans {
            self.reachability(Scan::Report(wire::WalkReason::Snapshot, n));
        }
        confirmed
    }

    pub(super) fn snapshots(&mut self) {
        let req = SNAP_REQUESTS.load(Acquire);
        if req != self.snapshots_handled {
            self.snapshots_handled = req;
            let boundary = SNAP_BOUNDARY.load(Acquire);
            let ts_ns = SNAP_TS.load(Acquire);
            self.drain_below(boundary);
            self.activity_now();
            self.push(&Event::Snapshot(wire::Snapshot { boundary, ts_ns }));
            // Frees still inside their real call would hold the snapshot back until they
            // return (a free waits for the device): send them as in progress.
            let mut pending = Vec::new();
            inflight::each_below(boundary, ts_ns, |p| pending.push(p));
            for p in pending {
                self.push(&Event::FreePending(p));
            }
            self.snapshots_sent = self.snapshots_sent.saturating_add(1);
            if let Some(h) = python::heap::request(wire::WalkReason::Snapshot, self.snapshots_sent) {
                self.activity_now();
                self.push(&Event::HeapWalk(h));
            }
            self.reachability(Scan::Report(wire::WalkReason::Snapshot, self.snapshots_sent));
        }
    }

    /// Runs a reachability scan (`reach`) for `scan` and sends its result, if scans are on. The
    /// wire buffer is sent and zeroed first: it holds copies of addresses. The scan's bytes
    /// read, if it ran.
    pub(super) fn reachability(&mut self, scan: Scan) -> Option<u64> {
        if self.reach.is_none() || !self.flush() {
            return None;
        }
        let cap = self.buf.capacity();
        self.buf.resize(cap, 0);
        self.buf.clear();
        let table = self.reach.as_ref()?;
        let (reason, number) = match scan {
            Scan::Report(reason, number) => (reason, number),
            Scan::ExitBeforeHandlers { .. } | Scan::ExitAfterHandlers => (wire::WalkReason::Exit, 0),
        };
        let mut r = reach::scan(table, self.reach_own, reason, number, matches!(scan, Scan::ExitAfterHandlers));
        // An exit's scan asked for at the end of the program's work is stamped then, not when
        // this thread got to it: the collector takes it as the end of the program's work.
        if let Scan::ExitBeforeHandlers { asked_ns } = scan {
            r.ts_ns = r.ts_ns.min(asked_ns);
        }
        let read = r.scanned_bytes;
        self.activity_now();
        self.push(&Event::Reach(r));
        Some(read)
    }
}

/// Which reachability scan [`Writer::reachability`] makes.
#[derive(Clone, Copy)]
pub(super) enum Scan {
    /// The scan of snapshot or out-of-memory report `number`.
    Report(wire::WalkReason, u32),
    /// The exit's, asked for at `asked_ns` (monotonic ns) when the program's own work ended,
    /// before its exit handlers (`exit_scan.rs`).
    ExitBeforeHandlers { asked_ns: u64 },
    /// The exit's, made by the exit path after the program's exit handlers: it reads the freed
    /// blocks of the main heap without trust.
    ExitAfterHandlers,
}
