//! What frees memory besides a free: a context torn down (its device and managed allocations
//! go), and the virtual memory management calls that unmap or release a `cuMemCreate` handle.

use gpushim_wire::{Api, Kind, Reset, Unmap};

use super::State;

/// A context torn down, as the report tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextReset {
    /// `cudaDeviceReset`, `cuDevicePrimaryCtxReset` or `cuCtxDestroy`.
    pub api: Api,
    /// Device ordinal.
    pub device: i32,
    /// Live allocations freed by it.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Whether it was a context the program created (`cuCtxCreate`), not a primary one.
    pub created: bool,
}

impl State {
    /// A `cuMemUnmap`: on success its mappings go, and with them the memory of every handle
    /// already released.
    pub(super) fn unmap(&mut self, u: &Unmap) {
        if u.result != 0 {
            return;
        }
        for (handle, created) in self.vmm.unmap(u.addr, u.size) {
            if created {
                self.free_handle(handle, u.ts_ns);
            }
        }
    }

    /// The live entry of `cuMemCreate` handle `handle`, freed (its last reference and mapping
    /// went).
    pub(super) fn free_handle(&mut self, handle: u64, ts_ns: u64) {
        if let Some(e) = self.live.remove(&(true, handle)) {
            if self.kept_for_teardown((true, handle), e, ts_ns) {
                return;
            }
            self.count_free(&e);
            self.release(&e, ts_ns);
        }
    }

    /// Frees every device and managed allocation of the context torn down (pinned host memory
    /// carries no device and stays), counted as frees. A context the program created
    /// (`cuCtxDestroy` of one seen in [`Op::ContextCreated`]) takes its own allocations; any
    /// other reset is of a device's primary context, which takes that device's allocations
    /// outside the contexts the program created. (CUDA Driver API, "Primary Context
    /// Management" and "Context Management": destroying a context frees its resources.)
    pub(super) fn reset(&mut self, r: &Reset) {
        let created = (r.ctx != 0).then(|| self.created.remove(&r.ctx)).flatten();
        let device = created.unwrap_or(r.device);
        let keys: Vec<(bool, u64)> = self
            .live
            .iter()
            .filter(|(_, e)| {
                e.kind != Kind::PinnedHost
                    && match created {
                        // VMM memory is the device's, not a context's (and carries ctx 0).
                        Some(_) => e.ctx == r.ctx && !e.api.is_handle(),
                        None => e.device == r.device && r.device >= 0 && !self.created.contains_key(&e.ctx),
                    }
            })
            .map(|(k, _)| *k)
            .collect();
        let mut gone = ContextReset { api: r.api, device, count: 0, bytes: 0, created: created.is_some() };
        for k in keys {
            if let Some(e) = self.live.remove(&k) {
                gone.count += 1;
                gone.bytes = gone.bytes.saturating_add(e.size);
                self.count_free(&e);
                self.release(&e, r.ts_ns);
                if let Some(site) = self.sites.get_mut(&e.site) {
                    site.swept_count += 1;
                    site.swept_bytes = site.swept_bytes.saturating_add(e.size);
                }
                self.swept.push(e);
            }
        }
        // A primary context's teardown takes the device's VMM memory; a context the program
        // created does not (its device may not even be known here).
        if created.is_none() && r.device >= 0 {
            self.vmm.reset_device(r.device);
        }
        self.resets.push(gone);
    }

    /// The [`Unmap`] of an unmap applied earlier as in progress: applied now.
    pub fn complete_pending_unmap(&mut self, u: &Unmap) {
        if self.pending_unmaps.remove(&u.seq).is_none() {
            return;
        }
        self.last_ts_ns = self.last_ts_ns.max(u.ts_ns);
        self.unmap(u);
    }
}
