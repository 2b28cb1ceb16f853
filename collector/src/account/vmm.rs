//! The CUDA driver's virtual memory management (VMM) API as the live set sees it: physical
//! allocations by handle, their references and the virtual address ranges that map them.
//!
//! CUDA's rule (CUDA Driver API, "Virtual Memory Management", `cuMemRelease` and `cuMemUnmap`;
//! CUDA 13.0's driver does so, docs/gpu-matrix.md): the physical memory of a handle
//! lives until every reference to it is released *and* every mapping of it is unmapped. A
//! reference is the `cuMemCreate` (or import) that made the handle, plus one per successful
//! `cuMemRetainAllocationHandle`, which returns the same handle value; each `cuMemRelease`
//! gives one back. So `create, map, release` leaves the memory in use, and NCCL's `retain,
//! release, unmap, release` frees it at the last release.
//!
//! [`Vmm`] keeps that count; [`State`](crate::account::live::State) asks it what a release or an unmap
//! means, and frees the `cuMemCreate` allocation (its live entry, site and stack unchanged) at
//! whichever of the two comes last.
//!
//! Imported handles (`cuMemImportFromShareableHandle`) name memory that another process made
//! (or this one, under the handle it exported): they never count in live bytes, so nothing
//! is counted twice; their mappings count in mapped bytes; their releases and unmaps are
//! known (not "unknown frees"). An import that returns a handle value this process created
//! and still holds is one more reference to that handle.

use std::collections::BTreeMap;

/// One physical allocation, by handle value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Phys {
    /// References not yet released: 1 for the `cuMemCreate` or import, plus retains and
    /// further imports, minus releases.
    refs: u64,
    /// Mappings of it not yet unmapped.
    mappings: u64,
    /// Device ordinal, -1 for the host or an unknown device.
    device: i32,
    /// Made here by `cuMemCreate`: it has a live entry in the live set. `false` for an
    /// imported handle (and a retained handle never seen before), which counts in no live
    /// bytes.
    created: bool,
    /// Bytes (of a created handle; 0 for an imported one, whose size no call tells).
    size: u64,
    /// Created, every reference released, and live only through its mappings.
    kept_by_maps: bool,
}

/// One mapping: a virtual address range and the handle it maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mapping {
    /// Length of the range, bytes.
    size: u64,
    /// The handle mapped.
    handle: u64,
    /// The handle's device when it was mapped (-1: host or unknown).
    device: i32,
}

/// VMM use on one device, as the report shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmmGauge {
    /// Physical allocations made by `cuMemCreate` still live (not yet both released and
    /// unmapped).
    pub handles: u64,
    /// Their bytes (also counted in the device's live bytes).
    pub created_bytes: u64,
    /// Of those, the allocations every reference has released, live only through mappings.
    pub released_mapped: u64,
    /// Their bytes.
    pub released_mapped_bytes: u64,
    /// Imported handles not yet released and unmapped (memory counted by its exporter).
    pub imported_handles: u64,
    /// Mappings not yet unmapped.
    pub mappings: u64,
    /// Bytes of virtual address space mapped, of created and imported handles alike.
    pub mapped_bytes: u64,
    /// Highest `mapped_bytes` ever reached, bytes.
    pub peak_mapped_bytes: u64,
}

/// What a `cuMemRelease` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// The handle is not one the VMM accounting knows: the caller treats it as before (an
    /// unknown free, unless the live set holds it).
    Unknown,
    /// The call failed; nothing changed.
    Failed,
    /// A release with no reference left to give back (the driver said success): unknown.
    Extra,
    /// One reference given back; the memory lives on (other references, or mappings).
    Kept,
    /// The last reference of an unmapped allocation: it is gone. `true` if it was created
    /// here (its live entry must be freed).
    Gone(bool),
}

/// The VMM accounting; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct Vmm {
    /// Handles by value (few: one per VMM chunk, 2 MiB or more each).
    handles: BTreeMap<u64, Phys>,
    /// Mappings by start address.
    maps: BTreeMap<u64, Mapping>,
    /// Per device ordinal (-1: host or unknown), for every device the VMM API was used on.
    pub devices: BTreeMap<i32, VmmGauge>,
    /// Successful `cuMemUnmap` calls of a range holding no known mapping.
    pub unknown_unmap_count: u64,
}

impl Vmm {
    /// A `cuMemCreate` of `size` bytes on `device` returned `handle`. A handle value still
    /// known (reused by the driver, so the old allocation is gone) is forgotten first; the
    /// caller's live set handles the old entry.
    pub fn create(&mut self, handle: u64, size: u64, device: i32) {
        self.forget(handle);
        self.handles.insert(handle, Phys { refs: 1, mappings: 0, device, created: true, size, kept_by_maps: false });
        let g = self.devices.entry(device).or_default();
        g.handles += 1;
        g.created_bytes = g.created_bytes.saturating_add(size);
    }

    /// One more reference to `handle`, from a retain (`addr`: the mapped address asked
    /// about) or, with `imported`, an import of memory on `device`.
    pub fn add_ref(&mut self, handle: u64, addr: u64, imported: bool, device: i32) {
        if let Some(p) = self.handles.get_mut(&handle) {
            p.refs = p.refs.saturating_add(1);
            if p.kept_by_maps {
                // Released, kept by its mappings, and now referenced again.
                p.kept_by_maps = false;
                let g = self.devices.entry(p.device).or_default();
                g.released_mapped = g.released_mapped.saturating_sub(1);
                g.released_mapped_bytes = g.released_mapped_bytes.saturating_sub(p.size);
            }
            return;
        }
        // A handle never seen: imported memory, or a retain whose handle value differs from
        // the one mapped (then the device is the mapping's).
        let device = if imported { device } else { self.mapping_at(addr).map_or(device, |m| m.device) };
        self.handles
            .insert(handle, Phys { refs: 1, mappings: 0, device, created: false, size: 0, kept_by_maps: false });
        self.devices.entry(device).or_default().imported_handles += 1;
    }

    /// A `cuMemMap` of `[addr, addr + size)` to `handle`. A mapping already recorded at
    /// `addr` (one whose unmap was missed) is dropped first.
    pub fn map(&mut self, addr: u64, size: u64, handle: u64) -> Option<(u64, bool)> {
        let dropped = self.maps.get(&addr).copied().and_then(|_| self.unmap_one(addr));
        let device = match self.handles.get_mut(&handle) {
            Some(p) => {
                p.mappings += 1;
                p.device
            }
            None => -1,
        };
        self.maps.insert(addr, Mapping { size, handle, device });
        let g = self.devices.entry(device).or_default();
        g.mappings += 1;
        g.mapped_bytes = g.mapped_bytes.saturating_add(size);
        g.peak_mapped_bytes = g.peak_mapped_bytes.max(g.mapped_bytes);
        dropped
    }

    /// A successful `cuMemUnmap(addr, size)`: removes every mapping that starts inside the
    /// range. Returns the handles whose memory went with it, with whether each was created
    /// here; counts an unmap of no known mapping.
    pub fn unmap(&mut self, addr: u64, size: u64) -> Vec<(u64, bool)> {
        let end = addr.saturating_add(size.max(1));
        let starts: Vec<u64> = self.maps.range(addr..end).map(|(&a, _)| a).collect();
        if starts.is_empty() {
            self.unknown_unmap_count += 1;
        }
        starts.into_iter().filter_map(|a| self.unmap_one(a)).collect()
    }

    /// Removes the mapping at `addr`; `Some((handle, created))` if its memory went with it.
    fn unmap_one(&mut self, addr: u64) -> Option<(u64, bool)> {
        let m = self.maps.remove(&addr)?;
        let g = self.devices.entry(m.device).or_default();
        g.mappings = g.mappings.saturating_sub(1);
        g.mapped_bytes = g.mapped_bytes.saturating_sub(m.size);
        let p = self.handles.get_mut(&m.handle)?;
        p.mappings = p.mappings.saturating_sub(1);
        if p.refs == 0 && p.mappings == 0 {
            return Some((m.handle, self.drop_handle(m.handle)));
        }
        None
    }

    /// A `cuMemRelease(handle)` that returned `result`.
    pub fn release(&mut self, handle: u64, result: i32) -> Released {
        let Some(p) = self.handles.get_mut(&handle) else { return Released::Unknown };
        if result != 0 {
            return Released::Failed;
        }
        if p.refs == 0 {
            return Released::Extra;
        }
        p.refs -= 1;
        if p.refs > 0 {
            return Released::Kept;
        }
        if p.mappings > 0 {
            if p.created {
                p.kept_by_maps = true;
                let (device, size) = (p.device, p.size);
                let g = self.devices.entry(device).or_default();
                g.released_mapped += 1;
                g.released_mapped_bytes = g.released_mapped_bytes.saturating_add(size);
            }
            return Released::Kept;
        }
        Released::Gone(self.drop_handle(handle))
    }

    /// Every handle of `device` and every mapping of them goes (its context was torn down).
    pub fn reset_device(&mut self, device: i32) {
        let gone: Vec<u64> = self.handles.iter().filter(|(_, p)| p.device == device).map(|(&h, _)| h).collect();
        for h in gone {
            self.forget(h);
        }
    }

    /// Forgets `handle` and its mappings, without telling the live set.
    fn forget(&mut self, handle: u64) {
        if !self.handles.contains_key(&handle) {
            return;
        }
        let starts: Vec<u64> = self.maps.iter().filter(|(_, m)| m.handle == handle).map(|(&a, _)| a).collect();
        for a in starts {
            if let Some(m) = self.maps.remove(&a) {
                let g = self.devices.entry(m.device).or_default();
                g.mappings = g.mappings.saturating_sub(1);
                g.mapped_bytes = g.mapped_bytes.saturating_sub(m.size);
            }
        }
        self.drop_handle(handle);
    }

    /// Removes `handle` from the gauges; returns whether it was created here.
    fn drop_handle(&mut self, handle: u64) -> bool {
        let Some(p) = self.handles.remove(&handle) else { return false };
        let g = self.devices.entry(p.device).or_default();
        if p.created {
            g.handles = g.handles.saturating_sub(1);
            g.created_bytes = g.created_bytes.saturating_sub(p.size);
            if p.kept_by_maps {
                g.released_mapped = g.released_mapped.saturating_sub(1);
                g.released_mapped_bytes = g.released_mapped_bytes.saturating_sub(p.size);
            }
        } else {
            g.imported_handles = g.imported_handles.saturating_sub(1);
        }
        p.created
    }

    /// Every mapping as `(start, length, handle)`, by start address.
    pub fn mappings(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.maps.iter().map(|(&addr, m)| (addr, m.size, m.handle))
    }

    /// The mapping whose range holds `addr`.
    fn mapping_at(&self, addr: u64) -> Option<&Mapping> {
        let (&start, m) = self.maps.range(..=addr).next_back()?;
        (addr - start < m.size).then_some(m)
    }
}
