/*
 * CUDA arrays in the driver stand-in: cuArrayCreate_v2, cuArray3DCreate_v2,
 * cuMipmappedArrayCreate and their destroy functions, backed by host memory in the live
 * table.  An array's footprint is its texels' bytes rounded up to 64 KiB per array (per level
 * for a mipmapped array), so that it differs from what the descriptor alone gives, as on a
 * GPU, where the layout pads; cuArrayGetMemoryRequirements and
 * cuMipmappedArrayGetMemoryRequirements report it.
 */
#define _GNU_SOURCE
#include "cuda_table.h"

#define API __attribute__((visibility("default")))
#define ALIGN ((size_t)64 << 10)

static size_t format_bytes(int format)
{
    switch (format) {
    case 0x02: case 0x09: case 0x10:
        return 2;
    case 0x03: case 0x0a: case 0x20:
        return 4;
    default:
        return 1;
    }
}

static size_t dim(size_t d) { return d == 0 ? 1 : d; }

static size_t padded(size_t w, size_t h, size_t d, int format, unsigned channels)
{
    size_t bytes = dim(w) * dim(h) * dim(d) * format_bytes(format) * (channels == 0 ? 1 : channels);
    return (bytes + ALIGN - 1) / ALIGN * ALIGN;
}

static CUresult create(CUarray *out, size_t footprint)
{
    if (out == NULL || footprint == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t key = 0;
    CUresult r = alloc_backed(&key, footprint, CLASS_ARRAY, 1, 0);
    if (r == CUDA_SUCCESS)
        *out = (CUarray)key;
    return r;
}

CUresult impl_cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (d == NULL || d->Width == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return create(pHandle, padded(d->Width, d->Height, 0, d->Format, d->NumChannels));
}

CUresult impl_cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    if (d == NULL || d->Width == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return create(pHandle, padded(d->Width, d->Height, d->Depth, d->Format, d->NumChannels));
}

CUresult impl_cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                     unsigned int levels)
{
    if (d == NULL || d->Width == 0 || levels == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t total = 0, w = d->Width, h = d->Height, z = d->Depth;
    for (unsigned i = 0; i < levels; i++) {
        total += padded(w, h, z, d->Format, d->NumChannels);
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        z = z > 1 ? z / 2 : z;
    }
    return create((CUarray *)pHandle, total);
}

CUresult impl_cuArrayDestroy(CUarray a) { return free_backed((uintptr_t)a, CLASS_ARRAY); }

CUresult impl_cuMipmappedArrayDestroy(CUmipmappedArray m) { return free_backed((uintptr_t)m, CLASS_ARRAY); }

CUresult impl_cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *req, CUarray a, int device)
{
    size_t size = entry_size((uintptr_t)a, CLASS_ARRAY);
    if (req == NULL || size == 0 || device != 0)
        return CUDA_ERROR_INVALID_VALUE;
    req->size = size;
    req->alignment = ALIGN;
    return CUDA_SUCCESS;
}

API CUresult cuArrayCreate_v2(CUarray *p, const CUDA_ARRAY_DESCRIPTOR *d) { return impl_cuArrayCreate_v2(p, d); }
API CUresult cuArray3DCreate_v2(CUarray *p, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    return impl_cuArray3DCreate_v2(p, d);
}
API CUresult cuArrayDestroy(CUarray a) { return impl_cuArrayDestroy(a); }
API CUresult cuMipmappedArrayCreate(CUmipmappedArray *p, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels)
{
    return impl_cuMipmappedArrayCreate(p, d, levels);
}
API CUresult cuMipmappedArrayDestroy(CUmipmappedArray m) { return impl_cuMipmappedArrayDestroy(m); }
API CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *req, CUarray a, int device)
{
    return impl_cuArrayGetMemoryRequirements(req, a, device);
}
API CUresult cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *req, CUmipmappedArray m,
                                                   int device)
{
    return impl_cuArrayGetMemoryRequirements(req, (CUarray)m, device);
}
