//! CUDA arrays (textures and surfaces): their descriptors as the runtime and the driver take
//! them, and the bytes an array takes. The driver tells an array's real footprint where it can
//! (`real::array_footprint`); otherwise it is computed from the descriptor: texels × bytes per
//! texel, summed over the levels of a mipmapped array (each level halves every extent, down to
//! 1), which can be below the padded layout the GPU uses.

use std::ffi::{c_int, c_uint};

use crate::real;

/// `struct cudaChannelFormatDesc` (cuda_runtime_api.h's driver_types.h): bits per component.
#[repr(C)]
pub struct ChannelDesc {
    x: c_int,
    y: c_int,
    z: c_int,
    w: c_int,
    f: c_int,
}

/// `struct cudaExtent`: width (elements for arrays), height, depth; passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Extent {
    width: usize,
    height: usize,
    depth: usize,
}

impl Extent {
    /// The width: bytes for linear memory (`cudaMalloc3D`), elements for arrays.
    pub fn width(self) -> usize {
        self.width
    }

    /// Rows of linear 3D memory (`cudaMalloc3D`): height × depth, saturating (the caller may
    /// pass any extent; the real function rejects those that overflow).
    pub fn rows(self) -> usize {
        self.height.saturating_mul(self.depth)
    }
}

/// `CUDA_ARRAY_DESCRIPTOR` (cuda.h).
#[repr(C)]
pub struct ArrayDesc {
    width: usize,
    height: usize,
    format: c_int,
    channels: c_uint,
}

/// `CUDA_ARRAY3D_DESCRIPTOR` (cuda.h).
#[repr(C)]
pub struct Array3dDesc {
    width: usize,
    height: usize,
    depth: usize,
    format: c_int,
    channels: c_uint,
    flags: c_uint,
}

/// Bytes of one component of a `CUarray_format` (cuda.h): 8-, 16- and 32-bit integers, half and
/// float; 1 for the packed and block-compressed formats, which this count does not model.
fn format_bytes(format: c_int) -> u64 {
    match format {
        0x02 | 0x09 | 0x10 => 2,
        0x03 | 0x0a | 0x20 => 4,
        _ => 1,
    }
}

/// Texels of `levels` levels of a `w × h × d` array (0 extents count as 1).
fn texels(w: usize, h: usize, d: usize, levels: u32) -> u64 {
    let (mut w, mut h, mut d) = (w.max(1) as u64, h.max(1) as u64, d.max(1) as u64);
    let mut total = 0u64;
    for _ in 0..levels.max(1) {
        total = total.saturating_add(w.saturating_mul(h).saturating_mul(d));
        (w, h, d) = ((w / 2).max(1), (h / 2).max(1), (d / 2).max(1));
    }
    total
}

/// Bytes by the runtime's descriptor (`levels` 1 for a plain array).
///
/// # Safety
/// `desc`, if not NULL, must point to a `cudaChannelFormatDesc`.
pub unsafe fn runtime_bytes(desc: *const ChannelDesc, e: Extent, levels: u32) -> u64 {
    // SAFETY: the caller's promise.
    let Some(c) = (unsafe { desc.as_ref() }) else { return 0 };
    let bits = [c.x, c.y, c.z, c.w].iter().map(|&b| b.max(0) as u64).sum::<u64>();
    texels(e.width, e.height, e.depth, levels).saturating_mul(bits.div_ceil(8))
}

/// A 2D (or 1D, height 0) runtime array's extent.
pub fn extent_2d(width: usize, height: usize) -> Extent {
    Extent { width, height, depth: 0 }
}

/// Bytes by the driver's 2D descriptor.
///
/// # Safety
/// `desc`, if not NULL, must point to a `CUDA_ARRAY_DESCRIPTOR`.
pub unsafe fn driver_2d_bytes(desc: *const ArrayDesc) -> u64 {
    // SAFETY: the caller's promise.
    let Some(d) = (unsafe { desc.as_ref() }) else { return 0 };
    texels(d.width, d.height, 0, 1).saturating_mul(format_bytes(d.format) * u64::from(d.channels.max(1)))
}

/// Bytes by the driver's 3D descriptor, over `levels` levels.
///
/// # Safety
/// `desc`, if not NULL, must point to a `CUDA_ARRAY3D_DESCRIPTOR`.
pub unsafe fn driver_3d_bytes(desc: *const Array3dDesc, levels: u32) -> u64 {
    // SAFETY: the caller's promise.
    let Some(d) = (unsafe { desc.as_ref() }) else { return 0 };
    texels(d.width, d.height, d.depth, levels).saturating_mul(format_bytes(d.format) * u64::from(d.channels.max(1)))
}

/// The footprint of the array `handle`: the driver's figure, else `by_descriptor`.
pub fn footprint(handle: u64, mipmapped: bool, by_descriptor: u64) -> u64 {
    real::array_footprint(handle, mipmapped).unwrap_or(by_descriptor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_bytes() {
        let rgba8 = ChannelDesc { x: 8, y: 8, z: 8, w: 8, f: 1 };
        // SAFETY: pointers to live locals.
        unsafe {
            assert_eq!(runtime_bytes(&rgba8, extent_2d(1024, 512), 1), 1024 * 512 * 4);
            assert_eq!(runtime_bytes(&rgba8, extent_2d(1000, 0), 1), 4000);
            // 8x8x1 mipmapped, 4 levels: 64 + 16 + 4 + 1 texels.
            assert_eq!(runtime_bytes(&rgba8, Extent { width: 8, height: 8, depth: 0 }, 4), 85 * 4);
            assert_eq!(runtime_bytes(std::ptr::null(), extent_2d(8, 8), 1), 0);
            let f32x2 = ArrayDesc { width: 100, height: 10, format: 0x20, channels: 2 };
            assert_eq!(driver_2d_bytes(&f32x2), 100 * 10 * 8);
            let h3d = Array3dDesc { width: 16, height: 16, depth: 16, format: 0x10, channels: 1, flags: 0 };
            assert_eq!(driver_3d_bytes(&h3d, 1), 16 * 16 * 16 * 2);
            assert_eq!(driver_3d_bytes(&h3d, 2), (16 * 16 * 16 + 8 * 8 * 8) * 2);
        }
        assert_eq!(texels(usize::MAX, usize::MAX, 2, 3), u64::MAX, "saturates");
    }
}
