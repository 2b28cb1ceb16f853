//! Test builders shared by every test of the workspace: wire events with plausible defaults,
//! whole streams as the shim writes them, and a small deterministic random generator.
//!
//! Used by the integration tests (`tests/`), the collector's unit tests and the collector's
//! `gen_stream` example; never by the shim or the collector themselves.
#![forbid(unsafe_code)]

use std::path::Path;

use gpushim_wire::{self as wire, Alloc, Api, Event, Failed, Free, Hello, Kind};

/// 1 MiB, bytes.
pub const MIB: u64 = 1 << 20;
/// 1 ms, ns.
pub const MS: u64 = 1_000_000;

/// A `Hello` from pid 4242 running `command`, whose reports go to `output_dir`.
pub fn hello(output_dir: &Path, command: &[&str]) -> Event {
    Event::Hello(Hello {
        pid: 4242,
        ppid: 1,
        start_unix_ns: 1_700_000_000_000_000_000,
        command: command.iter().map(|s| s.to_string()).collect(),
        cwd: "/nonexistent-cwd".into(),
        output_dir: output_dir.to_string_lossy().into_owned(),
        shim_version: "0.1.0".into(),
    })
}

/// A `cudaMalloc` of `size` bytes at `addr` on device 0, thread 7, at `ts` ns, with stack id
/// `stack` (`wire::NO_STACK` for none).
pub fn alloc(seq: u64, ts: u64, addr: u64, size: u64, stack: u32) -> Event {
    Event::Alloc(Alloc {
        seq,
        ts_ns: ts,
        addr,
        size,
        kind: Kind::Device,
        api: Api::CudaMalloc,
        device: 0,
        stream: 0,
        tid: 7,
        stack,
        ctx: 0,
    })
}

/// A successful `cudaFree` of `addr` on thread 7 at `ts` ns.
pub fn free(seq: u64, ts: u64, addr: u64) -> Event {
    Event::Free(Free { seq, ts_ns: ts, addr, api: Api::CudaFree, stream: 0, tid: 7, result: 0 })
}

/// An allocation of `size` bytes of `kind` memory at `addr` on device `device` (-1: none),
/// thread 7, at `ts` ns, with stack id `stack`, made by that kind's usual entry point
/// (`cudaMalloc`, `cudaMallocManaged`, `cudaMallocHost`).
pub fn alloc_on(seq: u64, ts: u64, addr: u64, size: u64, kind: Kind, device: i32, stack: u32) -> Event {
    let api = match kind {
        Kind::Device => Api::CudaMalloc,
        Kind::Managed => Api::CudaMallocManaged,
        Kind::PinnedHost => Api::CudaMallocHost,
    };
    Event::Alloc(Alloc { seq, ts_ns: ts, addr, size, kind, api, device, stream: 0, tid: 7, stack, ctx: 0 })
}

/// A `cudaFree` of `addr` on thread 7 at `ts` ns that returned the CUDA result code `result`
/// (0: success).
pub fn free_with_result(seq: u64, ts: u64, addr: u64, result: i32) -> Event {
    Event::Free(Free { seq, ts_ns: ts, addr, api: Api::CudaFree, stream: 0, tid: 7, result })
}

/// A `cudaMalloc` of `size` bytes on device 0, thread 7, at `ts` ns, with stack id `stack`,
/// that failed with the CUDA result code `result` (2: out of memory).
pub fn failed(seq: u64, ts: u64, size: u64, stack: u32, result: i32) -> Event {
    Event::Failed(Failed {
        seq,
        ts_ns: ts,
        size,
        kind: Kind::Device,
        api: Api::CudaMalloc,
        device: 0,
        tid: 7,
        stack,
        result,
    })
}

/// `events` as one stream: the header, then each event's frame.
pub fn stream_of(events: &[Event]) -> Vec<u8> {
    let mut b = Vec::new();
    wire::write_header(&mut b);
    for e in events {
        wire::encode(e, &mut b);
    }
    b
}

/// A small deterministic generator (xorshift64*), so that a failure can name its seed.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True one time in `one_in`, on average.
    pub fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }

    /// A number that is often an edge case: 0, near `u64::MAX`, a power of two, small.
    pub fn edgy(&mut self) -> u64 {
        match self.below(6) {
            0 => 0,
            1 => u64::MAX - self.below(3),
            2 => 1 << self.below(64),
            3 => self.below(1000),
            _ => self.next_u64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_of_built_events_decodes_to_the_same_events() {
        let dir = Path::new("/tmp/out");
        let events = vec![hello(dir, &["./train"]), alloc(0, MS, 0x1000, MIB, wire::NO_STACK), free(1, 2 * MS, 0x1000)];
        let bytes = stream_of(&events);
        let mut d = wire::Decoder::new(&bytes[..]).unwrap();
        let mut got = Vec::new();
        while let Some(e) = d.next_event().unwrap() {
            got.push(e);
        }
        assert_eq!(got, events);
    }

    #[test]
    fn rng_is_deterministic_and_below_stays_below() {
        let (mut a, mut b) = (Rng(7), Rng(7));
        for _ in 0..1000 {
            let x = a.below(10);
            assert_eq!(x, b.below(10));
            assert!(x < 10);
        }
    }
}
