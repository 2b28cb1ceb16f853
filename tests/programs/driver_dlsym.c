/*
 * Reaches the driver the way XLA/JAX, cudarc and libloading users do: never
 * links cudart or libcuda, but dlopen()s libcuda.so.1 with RTLD_LOCAL and
 * dlsym()s the entry points from that handle (which LD_PRELOAD does not
 * affect).  Also uses cuGetProcAddress_v2 obtained the same way.
 *
 * Expected live at exit: device 8+2+1+2 MiB, pinned_host 4+1 MiB, managed 3 MiB.
 */
#define _GNU_SOURCE
#include "cuda_standin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))
#define MiB ((size_t)1 << 20)

static void *lib;

static void *need(const char *name)
{
    void *f = dlsym(lib, name);
    if (f == NULL) {
        fprintf(stderr, "driver_dlsym: dlsym(%s): %s\n", name, dlerror());
        exit(1);
    }
    return f;
}

static void check(const char *what, CUresult r)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "driver_dlsym: %s returned %d\n", what, r);
        exit(1);
    }
}

static PFN_cuMemAlloc_v2 p_cuMemAlloc_v2;
static PFN_cuMemFree_v2 p_cuMemFree_v2;
static PFN_cuMemCreate p_cuMemCreate;
static PFN_cuMemRelease p_cuMemRelease;
static PFN_cuMemHostAlloc p_cuMemHostAlloc;
static PFN_cuMemFreeHost p_cuMemFreeHost;
static PFN_cuMemAllocManaged p_cuMemAllocManaged;
static PFN_cuGetProcAddress_v2 p_cuGetProcAddress_v2;

NOINLINE CUdeviceptr dlsym_device_kept(void)
{
    CUdeviceptr d = 0;
    check("cuMemAlloc_v2(8 MiB)", p_cuMemAlloc_v2(&d, 8 * MiB));
    return d;
}

NOINLINE CUdeviceptr dlsym_device_freed(void)
{
    CUdeviceptr d = 0;
    check("cuMemAlloc_v2(1 MiB)", p_cuMemAlloc_v2(&d, 1 * MiB));
    return d;
}

NOINLINE CUmemGenericAllocationHandle vmm_create(size_t size, int location_type)
{
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = location_type;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h = 0;
    check("cuMemCreate", p_cuMemCreate(&h, size, &prop, 0));
    return h;
}

NOINLINE void *dlsym_pinned_kept(void)
{
    void *p = NULL;
    check("cuMemHostAlloc", p_cuMemHostAlloc(&p, 1 * MiB, 0));
    return p;
}

NOINLINE CUdeviceptr dlsym_managed_kept(void)
{
    CUdeviceptr d = 0;
    check("cuMemAllocManaged", p_cuMemAllocManaged(&d, 3 * MiB, CU_MEM_ATTACH_GLOBAL));
    return d;
}

NOINLINE CUdeviceptr procaddr_async_ptsz_kept(void)
{
    void *fn = NULL;
    int status = -1;
    check("cuGetProcAddress_v2(cuMemAllocAsync, 12000, 2)",
          p_cuGetProcAddress_v2("cuMemAllocAsync", &fn, 12000,
                                CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
    if (fn == NULL || status != CU_GET_PROC_ADDRESS_SUCCESS) {
        fprintf(stderr, "driver_dlsym: cuMemAllocAsync not resolved (status %d)\n", status);
        exit(1);
    }
    CUdeviceptr d = 0;
    check("cuMemAllocAsync(ptsz)", ((PFN_cuMemAllocAsync)fn)(&d, 1 * MiB, (CUstream)0x30));
    return d;
}

NOINLINE CUdeviceptr procaddr_alloc_kept(void)
{
    void *fn = NULL;
    int status = -1;
    check("cuGetProcAddress_v2(cuMemAlloc, 3020, 0)",
          p_cuGetProcAddress_v2("cuMemAlloc", &fn, 3020, 0, &status));
    if (fn == NULL || status != CU_GET_PROC_ADDRESS_SUCCESS) {
        fprintf(stderr, "driver_dlsym: cuMemAlloc not resolved (status %d)\n", status);
        exit(1);
    }
    CUdeviceptr d = 0;
    check("cuMemAlloc@3020", ((PFN_cuMemAlloc_v2)fn)(&d, 2 * MiB));
    return d;
}

int main(void)
{
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "driver_dlsym: dlopen(libcuda.so.1): %s\n", dlerror());
        return 1;
    }
    p_cuMemAlloc_v2 = (PFN_cuMemAlloc_v2)need("cuMemAlloc_v2");
    p_cuMemFree_v2 = (PFN_cuMemFree_v2)need("cuMemFree_v2");
    p_cuMemCreate = (PFN_cuMemCreate)need("cuMemCreate");
    p_cuMemRelease = (PFN_cuMemRelease)need("cuMemRelease");
    p_cuMemHostAlloc = (PFN_cuMemHostAlloc)need("cuMemHostAlloc");
    p_cuMemFreeHost = (PFN_cuMemFreeHost)need("cuMemFreeHost");
    p_cuMemAllocManaged = (PFN_cuMemAllocManaged)need("cuMemAllocManaged");
    p_cuGetProcAddress_v2 = (PFN_cuGetProcAddress_v2)need("cuGetProcAddress_v2");

    (void)dlsym_device_kept();
    check("cuMemFree_v2", p_cuMemFree_v2(dlsym_device_freed()));

    (void)vmm_create(2 * MiB, CU_MEM_LOCATION_TYPE_DEVICE);
    (void)vmm_create(4 * MiB, CU_MEM_LOCATION_TYPE_HOST);
    check("cuMemRelease", p_cuMemRelease(vmm_create(2 * MiB, CU_MEM_LOCATION_TYPE_DEVICE)));

    (void)dlsym_pinned_kept();
    (void)dlsym_managed_kept();
    (void)procaddr_async_ptsz_kept();
    (void)procaddr_alloc_kept();

    void *def = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
    printf("rtld-default %s\n", def != NULL ? "nonnull" : "null");
    void *next = dlsym(RTLD_NEXT, "strlen");
    printf("rtld-next-strlen %s\n", next != NULL ? "nonnull" : "null");

    PFN_standin_calls calls = (PFN_standin_calls)need("standin_calls");
    printf("standin cuMemAllocAsync_ptsz=%lu cuMemAlloc_v2=%lu cuMemAlloc=%lu\n",
           calls("cuMemAllocAsync_ptsz"), calls("cuMemAlloc_v2"), calls("cuMemAlloc"));
    printf("ok\n");
    return 0;
}
