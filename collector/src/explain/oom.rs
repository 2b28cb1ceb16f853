//! Out-of-memory reports: when an allocation fails with out of memory, the collector writes
//! `gpushim-<pid>-oom-<n>.json` at once, holding the live set at the moment it applies that
//! failure (in sequence order) and the failed request on top.
//!
//! The shim asks the driver for the device's free and total memory (`cuMemGetInfo`) right
//! after the failure and sends it, as a MemInfo event with the failure's own timestamp and
//! device, just before the Failed event; [`MemInfoLog`] finds it again by those two.

use std::collections::VecDeque;

use gpushim_wire::{Failed, MemInfo};

use crate::report::{Frame, Oom};

/// At most this many out-of-memory reports are written per stream; later failures are only
/// counted (a note in the final report, one line on stderr).
pub const MAX_OOM_REPORTS: u32 = 5;

/// How many recent MemInfo events are kept to match failures with.
const MEM_INFO_KEEP: usize = 64;

/// The most recent MemInfo events, oldest first.
#[derive(Debug, Default)]
pub struct MemInfoLog(VecDeque<MemInfo>);

impl MemInfoLog {
    /// Remembers `m`, forgetting the oldest beyond [`MEM_INFO_KEEP`].
    pub fn push(&mut self, m: MemInfo) {
        if self.0.len() == MEM_INFO_KEEP {
            self.0.pop_front();
        }
        self.0.push_back(m);
    }

    /// The MemInfo sent with failure `f`: the latest with its device and timestamp, else the
    /// latest for its device at or before it.
    pub fn for_failure(&self, f: &Failed) -> Option<&MemInfo> {
        let mut same_device = self.0.iter().rev().filter(|m| m.device == f.device);
        let exact = same_device.clone().find(|m| m.ts_ns == f.ts_ns);
        exact.or_else(|| same_device.find(|m| m.ts_ns <= f.ts_ns))
    }
}

/// The report's `oom` object for failure `f`; `start_ns` is the time of the report's first
/// event (monotonic ns), `frames` the failed call's backtrace.
pub fn record(f: &Failed, mem: Option<&MemInfo>, start_ns: u64, frames: Vec<Frame>) -> Oom {
    Oom {
        size: f.size,
        api: f.api.name().to_string(),
        kind: f.kind.name().to_string(),
        device: f.device,
        result: f.result,
        site: f.stack,
        ts_s: f.ts_ns.saturating_sub(start_ns) as f64 / 1e9,
        device_free_bytes: mem.map(|m| m.free),
        device_total_bytes: mem.map(|m| m.total),
        frames,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpushim_wire::{Api, Kind};

    fn failed(device: i32, ts_ns: u64) -> Failed {
        Failed {
            seq: 0,
            ts_ns,
            size: 1 << 30,
            kind: Kind::Device,
            api: Api::CuMemAlloc,
            device,
            tid: 1,
            stack: 3,
            result: 2,
        }
    }

    fn mem(device: i32, ts_ns: u64, free: u64) -> MemInfo {
        MemInfo { ts_ns, device, free, total: 80 << 30 }
    }

    #[test]
    fn mem_info_is_matched_by_device_and_time() {
        let mut log = MemInfoLog::default();
        log.push(mem(0, 10, 1));
        log.push(mem(1, 20, 2));
        log.push(mem(0, 30, 3));
        log.push(mem(0, 40, 4));
        assert_eq!(log.for_failure(&failed(0, 30)).map(|m| m.free), Some(3));
        assert_eq!(log.for_failure(&failed(0, 35)).map(|m| m.free), Some(3));
        assert_eq!(log.for_failure(&failed(1, 99)).map(|m| m.free), Some(2));
        assert!(log.for_failure(&failed(2, 99)).is_none());
        assert!(log.for_failure(&failed(1, 5)).is_none());
        for i in 0..100 {
            log.push(mem(5, i, i));
        }
        assert_eq!(log.0.len(), MEM_INFO_KEEP);
        let r = record(&failed(5, 2_000_000_050), log.for_failure(&failed(5, 99)), 50, vec![]);
        assert_eq!(
            (r.size, r.api.as_str(), r.kind.as_str(), r.result, r.site),
            (1 << 30, "cuMemAlloc", "device", 2, 3)
        );
        assert_eq!((r.device_free_bytes, r.device_total_bytes), (Some(99), Some(80 << 30)));
        assert!((r.ts_s - 2.0).abs() < 1e-12);
    }
}
