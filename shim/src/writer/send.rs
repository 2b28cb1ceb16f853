//! What goes out on the socket: each stack once (then its id), its Python frames beside it,
//! the module map when a stack names an address in no known module, the buffered bytes, and
//! the end of the stream.

use std::os::fd::RawFd;
use std::sync::atomic::Ordering::*;

use gpushim_wire::{self as wire, Event};

use super::Writer;

use crate::config;
use crate::event::PyFrames;
use crate::state::{DISABLED, STATE};
use crate::{loader, python, socket};

impl Writer {
    /// The id of `frames` with Python frames `py`, sending the stack (with its Python frames,
    /// their code objects, and any module not yet described) the first time it is seen.
    pub(super) fn stack_id(&mut self, frames: Box<[u64]>, py: PyFrames) -> u32 {
        if frames.is_empty() && py.is_none() {
            return wire::NO_STACK;
        }
        let frames = if py.is_some() { python::canonical_native(frames) } else { frames };
        let key = (frames, py);
        if let Some(&id) = self.stacks.get(&key) {
            return id;
        }
        let (frames, py) = &key;
        if frames.iter().any(|&a| !self.covered.iter().any(|&(s, e)| a >= s && a < e)) {
            self.scan_modules();
        }
        let id = self.stacks.len() as u32;
        self.push(&Event::Stack(wire::Stack { id, frames: frames.to_vec() }));
        if let Some(py) = py {
            self.send_python_stack(id, py);
        }
        self.stacks.insert(key, id);
        id
    }

    /// Sends `PyStack` for stack `id`, after the `PyCode` of each code object not sent yet.
    pub(super) fn send_python_stack(&mut self, id: u32, py: &[wire::PyFrame]) {
        self.announce_python();
        let format = python::linetable_format();
        for f in py {
            let i = f.code as usize;
            if self.py_codes_sent.get(i).copied().unwrap_or(false) {
                continue;
            }
            let Some(c) = python::code_info(f.code) else { continue };
            if self.py_codes_sent.len() <= i {
                self.py_codes_sent.resize(i + 1, false);
            }
            self.py_codes_sent[i] = true;
            self.push(&Event::PyCode(wire::PyCode {
                id: f.code,
                filename: c.filename.clone(),
                name: c.name.clone(),
                firstlineno: c.firstlineno,
                linetable_format: format,
                linetable: c.linetable.clone(),
            }));
        }
        self.push(&Event::PyStack(wire::PyStack { id, frames: py.to_vec() }));
    }

    /// Sends every loaded module not sent before.
    pub(super) fn scan_modules(&mut self) {
        let mut new = Vec::new();
        let mut libpython = false;
        loader::for_each_module(|m| {
            if m.ranges.is_empty() || m.path.is_empty() {
                return;
            }
            if self.modules.insert((m.path.clone(), m.bias)) {
                libpython |= m.path.rsplit('/').next().is_some_and(|b| b.starts_with("libpython3"));
                let ranges: Vec<(u64, u64)> = m.ranges.iter().map(|&(s, e)| (s as u64, e as u64)).collect();
                self.covered.extend(&ranges);
                if m.path.rsplit('/').next().is_some_and(|b| b.starts_with("libc10_cuda")) {
                    self.torch_ranges.extend(&ranges);
                }
                new.push(wire::Module { path: m.path.clone(), bias: m.bias, ranges });
            }
        });
        for m in new {
            self.push(&Event::Module(m));
        }
        if libpython && python::absent() {
            // A libpython loaded after tracing started (a program that embeds Python).
            python::init(config::python_frames());
            self.announce_python();
            python::heap::arm();
        }
    }

    /// Writes the buffer out. False (after one line on stderr, and with recording switched
    /// off) if the collector has gone away; false again, with no other line, at each later call.
    pub(super) fn flush(&mut self) -> bool {
        if self.sock < 0 {
            self.buf.clear();
            return false;
        }
        if !self.buf.is_empty() && !socket::still_ours(self.sock) {
            STATE.store(DISABLED, Release);
            eprintln!(
                "gpushim: the program closed or reused the collector's socket (fd {}); recording stopped after {} events",
                self.sock, self.events
            );
            self.sock = -1;
            return false;
        }
        let mut off = 0;
        while off < self.buf.len() {
            let rest = &self.buf[off..];
            // SAFETY: writing from a valid buffer to our socket; MSG_NOSIGNAL turns a closed peer
            // into EPIPE instead of SIGPIPE.
            let n = unsafe { libc::send(self.sock, rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                STATE.store(DISABLED, Release);
                eprintln!(
                    "gpushim: lost the collector ({e}); recording stopped after {} events; the program goes on unrecorded",
                    self.events
                );
                socket::close_if_ours(self.sock);
                self.sock = -1;
                self.buf.clear();
                return false;
            }
            off += n as usize;
        }
        self.buf.clear();
        true
    }

    /// Ends the stream and waits until the collector has read it all and exited (it closes its
    /// end of the socket when done). The collector writes an empty line back once it has read
    /// the stream to its end (after any answers to API snapshots, each a line of its own); if
    /// the socket closes without it, the collector died or is not `gpushim` (one line on stderr
    /// says so).
    pub(super) fn close_and_wait(&mut self) {
        let fd: RawFd = self.sock;
        if !socket::still_ours(fd) {
            return;
        }
        // SAFETY: shutting down the write side of our own socket.
        unsafe { libc::shutdown(fd, libc::SHUT_WR) };
        let mut b = [0u8; 4096];
        let mut confirmed = false;
        loop {
            // SAFETY: reading into a valid buffer from our socket.
            let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
            if n > 0 {
                // The confirmation is an empty line; answers to API snapshots may come first.
                self.answer_buf.extend_from_slice(&b[..n as usize]);
                confirmed |= self.take_answers(false);
                continue;
            }
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        if !confirmed {
            eprintln!(
                "gpushim: the collector ended without confirming that it read the {} events; its report may be missing or incomplete",
                self.events
            );
        }
    }
}
