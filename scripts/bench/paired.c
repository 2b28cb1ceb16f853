// Issue 18's pool-hit loop measured inside one process: chunks of cuMemAllocAsync +
// cuMemFreeAsync pairs through the exported symbols (the shim's hooks under LD_PRELOAD) alternate
// with chunks through the driver's own functions (found in the loaded libcuda's dynamic symbol
// table, so no hook runs: the bare cost), from the same 40-frame stack. Both kinds of chunk
// see the same host state, which on the GPU machine swings between a fast and a slow mode over
// seconds (docs/performance.md): the per-chunk-pair difference is the shim's cost with that
// noise taken out. Without LD_PRELOAD both kinds are bare (a check of the method: about 0 ns).
// Driver API only, declared here, so it builds with cc on the GPU machine (-lcuda) and against
// the stand-ins here. Usage: paired N [PIN=-1] [DEPTH=40] [CHUNKS=200]
// Prints the chunks' medians and, as its last line,
// "paired: bare B hooked H added A ratio R" (ns per pair; medians over chunk pairs).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
CUresult cuInit(unsigned flags);
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, void *stream);
CUresult cuMemFreeAsync(CUdeviceptr p, void *stream);
// Absent from the stand-ins: then the primary context is not made current and the stream is a
// made-up handle (the stand-ins do not look at it).
__attribute__((weak)) CUresult cuDeviceGet(int *dev, int ordinal);
__attribute__((weak)) CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev);
__attribute__((weak)) CUresult cuCtxSetCurrent(void *ctx);
__attribute__((weak)) CUresult cuStreamCreate(void **stream, unsigned flags);
__attribute__((weak)) CUresult cuStreamSynchronize(void *stream);

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t, void *);
typedef CUresult (*free_fn)(CUdeviceptr, void *);

static alloc_fn bare_alloc;
static free_fn bare_free;
static void *stream;
static long per_chunk;
static int chunks;
static double *hooked_ns, *bare_ns; // per chunk pair, ns per alloc+free pair
static int warmup = 1;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }

static void check(CUresult r) {
    if (r != 0) { fprintf(stderr, "cuda error %d\n", r); exit(1); }
}

// The address of `want` in the loaded libcuda's own dynamic symbol table.
struct find { const char *want; void *addr; };
static int each_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct find *f = data;
    if (!strstr(info->dlpi_name, "libcuda.so")) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
        ElfW(Dyn) *d = (ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        ElfW(Sym) *sym = NULL;
        const char *str = NULL;
        for (; d->d_tag != DT_NULL; d++) {
            // glibc relocates these to absolute addresses when it loads the object.
            if (d->d_tag == DT_SYMTAB) sym = (ElfW(Sym) *)d->d_un.d_ptr;
            if (d->d_tag == DT_STRTAB) str = (const char *)d->d_un.d_ptr;
        }
        if (!sym || !str) return 0;
        // The string table follows the symbol table in every linker's layout.
        for (ElfW(Sym) *s = sym + 1; (const char *)s < str; s++) {
            if (s->st_shndx != SHN_UNDEF && ELF64_ST_TYPE(s->st_info) == STT_FUNC && strcmp(str + s->st_name, f->want) == 0) {
                f->addr = (void *)(info->dlpi_addr + s->st_value);
                return 1;
            }
        }
    }
    return 0;
}

static void *driver_own(const char *name) {
    struct find f = { name, NULL };
    dl_iterate_phdr(each_object, &f);
    if (!f.addr) { fprintf(stderr, "%s not found in libcuda's symbol table\n", name); exit(1); }
    return f.addr;
}

static void hooked_chunk(void) {
    for (long i = 0; i < per_chunk; i++) {
        CUdeviceptr p;
        check(cuMemAllocAsync(&p, 4096, stream));
        check(cuMemFreeAsync(p, stream));
    }
}

static void bare_chunk(void) {
    for (long i = 0; i < per_chunk; i++) {
        CUdeviceptr p;
        check(bare_alloc(&p, 4096, stream));
        check(bare_free(p, stream));
    }
}

__attribute__((noinline)) static void leaf(void) {
    if (warmup) {
        hooked_chunk();
        bare_chunk();
        return;
    }
    for (int c = 0; c < chunks; c++) {
        // ABBA: neither kind always runs first.
        double t0 = now();
        if (c & 1) bare_chunk(); else hooked_chunk();
        double t1 = now();
        if (c & 1) hooked_chunk(); else bare_chunk();
        double t2 = now();
        double first = (t1 - t0) / per_chunk, second = (t2 - t1) / per_chunk;
        hooked_ns[c] = (c & 1) ? second : first;
        bare_ns[c] = (c & 1) ? first : second;
    }
}

__attribute__((noinline)) static void recurse(int depth) {
    if (depth <= 0) leaf(); else recurse(depth - 1);
    __asm__ volatile("" ::: "memory"); // not a tail call: each level is a real frame
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof v[0], by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 400000;
    int pin = argc > 2 ? atoi(argv[2]) : -1;
    int depth = argc > 3 ? atoi(argv[3]) : 40;
    chunks = argc > 4 ? atoi(argv[4]) : 200;
    if (chunks < 2) chunks = 2;
    check(cuInit(0));
    if (cuDeviceGet && cuDevicePrimaryCtxRetain && cuCtxSetCurrent && cuStreamCreate) {
        int dev;
        void *ctx;
        check(cuDeviceGet(&dev, 0));
        check(cuDevicePrimaryCtxRetain(&ctx, dev));
        check(cuCtxSetCurrent(ctx));
        check(cuStreamCreate(&stream, 1 /* CU_STREAM_NON_BLOCKING */));
    } else {
        stream = (void *)0x5000;
    }
    bare_alloc = (alloc_fn)driver_own("cuMemAllocAsync");
    bare_free = (free_fn)driver_own("cuMemFreeAsync");
    // Warm-up: the shim starts, the pool grows once, first-use costs are paid.
    per_chunk = 10000;
    recurse(depth);
    if (cuStreamSynchronize) check(cuStreamSynchronize(stream));
    if (pin >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(pin, &set);
        if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) { fprintf(stderr, "cannot pin to CPU %d\n", pin); return 1; }
    }
    per_chunk = n / (2L * chunks);
    if (per_chunk < 1) per_chunk = 1;
    hooked_ns = calloc(chunks, sizeof(double));
    bare_ns = calloc(chunks, sizeof(double));
    double *added = calloc(chunks, sizeof(double)), *ratio = calloc(chunks, sizeof(double));
    warmup = 0;
    recurse(depth);
    if (cuStreamSynchronize) check(cuStreamSynchronize(stream));
    for (int c = 0; c < chunks; c++) {
        added[c] = hooked_ns[c] - bare_ns[c];
        ratio[c] = hooked_ns[c] / bare_ns[c];
    }
    double a = median(added, chunks), r = median(ratio, chunks);
    double b = median(bare_ns, chunks), h = median(hooked_ns, chunks);
    printf("%d chunk pairs of %ld pairs each\n", chunks, per_chunk);
    printf("paired: bare %.1f hooked %.1f added %.1f ratio %.4f\n", b, h, a, r);
    return 0;
}
