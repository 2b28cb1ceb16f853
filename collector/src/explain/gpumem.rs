//! Where the GPU memory is: per device, live bytes per owner (collector/src/explain/owners.rs), then the
//! driver's view of the process's device memory ([`crate::explain::nvml`]) and the untraced remainder,
//! and the finding when the untraced part grew over the run.
//!
//! Untraced memory is device memory the driver counts for the process that no allocation call
//! made: the context itself (hundreds of MiB: docs/gpu-matrix.md), the code and data of loaded modules (kernels loaded
//! lazily at first use, or compiled at run time, as JAX does per static argument), local memory
//! for kernel stacks, and memory of calls the shim does not see. A caching allocator's cached
//! but free memory is traced (it was allocated by a call the shim saw), never untraced.

use std::collections::BTreeMap;

use crate::explain::nvml::DriverView;
use crate::report::words::fmt_bytes;
use crate::report::{GpuMemory, OwnerBytes, Timeline};

/// Untraced growth over the run below this many bytes is not a finding (lazily loaded kernels
/// at start-up add tens of MiB).
pub const GROWTH_FINDING_MIN: u64 = 64 << 20;

/// The live device and managed bytes traced on device `ordinal` at `t_s` seconds after the
/// report's first event, from the timeline (its last point at or before then).
fn traced_at(tl: &Timeline, ordinal: i32, t_s: f64) -> u64 {
    let Some(col) = tl.devices.iter().position(|&d| d == ordinal) else { return 0 };
    let i = tl.points.partition_point(|p| p.t_s <= t_s);
    if i == 0 {
        return 0;
    }
    tl.points[i - 1].devices.get(col).copied().unwrap_or(0)
}

/// Builds the per-device table. `owners` maps `(ordinal, owner)` to live `(bytes, count)`;
/// `driver` is what NVML said (None: not sampled, e.g. a stream read from a file); `start_ns`
/// is the report's first event (monotonic ns). Samples at or after `until_ns` (monotonic ns)
/// are left out: from the exit heap walk on, the interpreter's teardown frees what the report
/// still counts as live (collect.rs), so the driver's count and the traced bytes no longer
/// describe the same moment. Returns the table and the findings.
pub fn table(
    owners: &BTreeMap<(i32, String), (u64, u64)>,
    ordinals: &[i32],
    driver: Option<&DriverView>,
    timeline: &Timeline,
    start_ns: u64,
    until_ns: Option<u64>,
) -> (Vec<GpuMemory>, Vec<String>) {
    let before_end = |ts_ns: u64| until_ns.is_none_or(|u| ts_ns < u);
    let mut out: BTreeMap<i32, GpuMemory> = BTreeMap::new();
    for &o in ordinals.iter().filter(|&&o| o >= 0) {
        out.insert(o, GpuMemory { ordinal: o, ..GpuMemory::default() });
    }
    for ((o, name), &(bytes, count)) in owners.iter().filter(|((o, _), _)| *o >= 0) {
        let g = out.entry(*o).or_insert_with(|| GpuMemory { ordinal: *o, ..GpuMemory::default() });
        g.owners.push(OwnerBytes { owner: name.clone(), live_bytes: bytes, live_count: count });
        g.traced_bytes = g.traced_bytes.saturating_add(bytes);
    }
    for g in out.values_mut() {
        g.owners.sort_by(|a, b| b.live_bytes.cmp(&a.live_bytes).then(a.owner.cmp(&b.owner)));
    }
    let mut findings = Vec::new();
    // NVML devices that ever listed the process, ascending index, paired in order with the
    // traced device ordinals, ascending (see docs/report-schema.md for when that is right).
    let note = match driver {
        None => Some("unknown: the driver's view was not sampled (stream read from a file)".to_string()),
        Some(v) if v.unavailable.is_some() => Some(format!("unknown: {}", v.unavailable.as_deref().unwrap_or(""))),
        Some(v) => {
            let mut nv: Vec<u32> = v.samples.iter().flat_map(|s| s.gpus.iter().map(|&(i, _)| i)).collect();
            nv.sort_unstable();
            nv.dedup();
            let ords: Vec<i32> = out.keys().copied().collect();
            if nv.is_empty() {
                Some("unknown: NVML did not list the process on any GPU (another PID namespace?)".to_string())
            } else if nv.len() != ords.len() {
                Some(format!(
                    "unknown: NVML lists the process on {} GPU(s), its allocations are on {}; they cannot be paired",
                    nv.len(),
                    ords.len()
                ))
            } else {
                for (&idx, &o) in nv.iter().zip(&ords) {
                    let g = out.get_mut(&o).expect("ordinal from the table");
                    let series: Vec<(u64, u64)> = v
                        .samples
                        .iter()
                        .filter(|s| before_end(s.ts_ns))
                        .filter_map(|s| {
                            let b = s.gpus.iter().find(|&&(i, _)| i == idx)?.1;
                            let t_s = s.ts_ns.saturating_sub(start_ns) as f64 / 1e9;
                            Some((s.ts_ns, b.saturating_sub(traced_at(timeline, o, t_s))))
                        })
                        .collect();
                    let last = v
                        .samples
                        .iter()
                        .rev()
                        .filter(|s| before_end(s.ts_ns))
                        .find_map(|s| s.gpus.iter().find(|&&(i, _)| i == idx));
                    g.driver_samples = series.len() as u64;
                    g.driver_bytes = last.map(|&(_, b)| b);
                    g.untraced_bytes = series.last().map(|&(_, u)| u);
                    g.untraced_first_bytes = series.first().map(|&(_, u)| u);
                    if let (Some(&(t0, u0)), Some(&(t1, u1))) = (series.first(), series.last()) {
                        if u1 >= u0.saturating_add(GROWTH_FINDING_MIN) && t1 > t0 {
                            let secs = (t1 - t0) as f64 / 1e9;
                            findings.push(format!(
                                "GPU {o}: untraced device memory grew by {} over the run ({} to {}, about {} per second): no allocation call made it; loaded or compiled kernel modules are the usual cause",
                                fmt_bytes(u1 - u0),
                                fmt_bytes(u0),
                                fmt_bytes(u1),
                                fmt_bytes(((u1 - u0) as f64 / secs) as u64),
                            ));
                        }
                    }
                }
                None
            }
        }
    };
    if let Some(n) = note {
        for g in out.values_mut() {
            g.driver_note = n.clone();
        }
    }
    (out.into_values().collect(), findings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::nvml::Sample;
    use crate::report::TimelinePoint;

    const MIB: u64 = 1 << 20;

    #[test]
    fn owners_per_device_untraced_and_its_growth() {
        let mut owners = BTreeMap::new();
        owners.insert((0, "PyTorch caching allocator".to_string()), (100 * MIB, 3));
        owners.insert((0, "user code (direct calls)".to_string()), (4 * MIB, 1));
        owners.insert((-1, "PyTorch pinned host allocator".to_string()), (10 * MIB, 10));
        let tl = Timeline {
            devices: vec![0],
            points: vec![
                TimelinePoint { t_s: 0.0, kinds: [0; 3], devices: vec![4 * MIB] },
                TimelinePoint { t_s: 1.0, kinds: [0; 3], devices: vec![104 * MIB] },
            ],
        };
        let s = |t: u64, b: u64| Sample { ts_ns: 1_000_000_000 + t, gpus: vec![(3, b)] };
        let v = DriverView { samples: vec![s(500_000_000, 504 * MIB), s(2_000_000_000, 684 * MIB)], unavailable: None };
        let (t, f) = table(&owners, &[0], Some(&v), &tl, 1_000_000_000, None);
        assert_eq!(t.len(), 1);
        let g = &t[0];
        assert_eq!(g.owners[0].owner, "PyTorch caching allocator");
        assert_eq!(g.traced_bytes, 104 * MIB);
        assert_eq!(
            (g.driver_bytes, g.untraced_bytes, g.untraced_first_bytes),
            (Some(684 * MIB), Some(580 * MIB), Some(500 * MIB))
        );
        assert_eq!(g.driver_samples, 2);
        assert_eq!(f.len(), 1);
        assert!(f[0].starts_with("GPU 0: untraced device memory grew by 80.0 MiB over the run (500.0 MiB to 580.0 MiB, about 53.3 MiB per second)"), "{}", f[0]);

        // The JAX case: after the exit heap walk the interpreter's teardown
        // freed the pool (the driver's count fell to the context alone) while the report
        // still counts it live; that sample is left out.
        let late = DriverView {
            samples: vec![s(500_000_000, 504 * MIB), s(2_000_000_000, 684 * MIB), s(2_500_000_000, 500 * MIB)],
            unavailable: None,
        };
        let (t, f) = table(&owners, &[0], Some(&late), &tl, 1_000_000_000, Some(3_400_000_000));
        assert_eq!(
            (t[0].driver_bytes, t[0].untraced_bytes, t[0].driver_samples),
            (Some(684 * MIB), Some(580 * MIB), 2)
        );
        assert_eq!(f.len(), 1, "{f:?}");
        let (t, f) = table(&owners, &[0], Some(&late), &tl, 1_000_000_000, None);
        assert_eq!(t[0].untraced_bytes, Some(396 * MIB));
        assert!(f.is_empty(), "{f:?}");

        let none = DriverView { samples: vec![], unavailable: Some("NVML is not available: x".into()) };
        let (t, f) = table(&owners, &[0], Some(&none), &tl, 0, None);
        assert_eq!(t[0].driver_bytes, None);
        assert_eq!(t[0].driver_note, "unknown: NVML is not available: x");
        assert!(f.is_empty());
    }
}
