/*
 * The driver stand-in's live allocation table; see cuda_table.h.
 */
#define _GNU_SOURCE
#include "cuda_table.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Live allocation table                                                     */

#define NBUCKETS 4096u

static struct entry *buckets[NBUCKETS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
size_t live_device_bytes;      /* device + managed + device VMM, all devices */
static size_t live_by_device[16]; /* the same per device ordinal */
size_t device_limit;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
atomic_ullong next_handle = 0x1000;

void lock_table(void) { pthread_mutex_lock(&table_lock); }
void unlock_table(void) { pthread_mutex_unlock(&table_lock); }

static void setup(void)
{
    device_limit = 80ull << 30;
    const char *s = getenv("STANDIN_DEVICE_BYTES");
    if (s != NULL && *s != '\0') {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 0);
        if (errno == 0 && end != NULL && *end == '\0')
            device_limit = (size_t)v;
    }
}

/* Keeps the table usable in a forked child: registered when the library loads, before any
 * thread of this process can take the lock (some paths take it without `ensure_setup`). A fork
 * that is already running its prepare handlers when the library is dlopen'ed still skips this
 * handler (glibc 2.36): a program that forks while its threads first load the library loads it
 * first (target_processes.c, fork-start). */
__attribute__((constructor)) static void fork_safe_table(void)
{
    pthread_atfork(lock_table, unlock_table, unlock_table);
}

void ensure_setup(void) { pthread_once(&setup_once, setup); }

static unsigned bucket_of(uintptr_t key)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return (unsigned)(h >> 52) & (NBUCKETS - 1);
}

/* Reserve `size` bytes against the limit of the device of the allocation in progress (each
 * device has STANDIN_DEVICE_BYTES).  Call with the lock held. */
int reserve_locked(size_t size)
{
    void *ctx;
    int d;
    standin_owner(&ctx, &d);
    return reserve_locked_on(d, size);
}

/* The same on a given device. */
int reserve_locked_on(int device, size_t size)
{
    int d = device & 15;
    if (size > device_limit || live_by_device[d] > device_limit - size)
        return 0;
    live_by_device[d] += size;
    live_device_bytes += size;
    return 1;
}

/* Gives back bytes reserved on `device`.  Lock held. */
void unreserve_locked_on(int device, size_t size)
{
    live_by_device[device & 15] -= size;
    live_device_bytes -= size;
}

static void unreserve_locked(const struct entry *e) { unreserve_locked_on(e->device, e->size); }

/* Live bytes counted on `device`. */
size_t live_bytes_of(int device)
{
    lock_table();
    size_t n = live_by_device[device & 15];
    unlock_table();
    return n;
}

/* Records `e`, owned by the context of the allocation in progress (see standin_owner). */
void insert_locked(struct entry *e)
{
    standin_owner(&e->ctx, &e->device);
    unsigned b = bucket_of(e->key);
    e->next = buckets[b];
    buckets[b] = e;
}

/* Unlink and return the entry for (key, cls), or NULL.  Lock held. */
struct entry *remove_locked(uintptr_t key, int cls)
{
    struct entry **pp = &buckets[bucket_of(key)];
    for (; *pp != NULL; pp = &(*pp)->next) {
        struct entry *e = *pp;
        if (e->key == key && e->cls == cls) {
            *pp = e->next;
            if (e->counts)
                unreserve_locked(e);
            return e;
        }
    }
    return NULL;
}

/*
 * Allocate `size` bytes of backing memory and record it.  Returns a CUresult;
 * on success *out receives the address.
 */
CUresult alloc_backed(uintptr_t *out, size_t size, int cls, int counts, int low32)
{
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    ensure_setup();
    struct entry *e = malloc(sizeof *e);
    if (e == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;

    void *owner;
    int device;
    standin_owner(&owner, &device);
    lock_table();
    if (counts && !reserve_locked_on(device, size)) {
        unlock_table();
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *mem = NULL;
    if (low32) {
#ifdef MAP_32BIT
        mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT,
                   -1, 0);
        if (mem == MAP_FAILED || (uintptr_t)mem + size > 0xFFFFFFFFull) {
            if (mem != MAP_FAILED)
                munmap(mem, size);
            mem = NULL;
        }
#endif
    } else if (cls == CLASS_DEVICE && getenv("STANDIN_DEVICE_VA") != NULL) {
        /* Device memory in mappings of its own, away from the host heap, as a GPU's virtual
         * addresses are (the reachability tests: a stale heap address never looks like a
         * device pointer). */
        char *va = mmap(NULL, size + 2 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (va == MAP_FAILED) {
            mem = NULL;
        } else {
            /* A guard page on each side: no module's end address or neighbouring mapping
             * touches the allocation. */
            mem = va + 4096;
            mprotect(mem, size, PROT_READ | PROT_WRITE);
            low32 = 3;
        }
    } else {
        mem = malloc(size);
    }
    if (mem == NULL) {
        if (counts)
            unreserve_locked_on(device, size);
        unlock_table();
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->key = (uintptr_t)mem;
    e->size = size;
    e->cls = cls;
    e->counts = counts;
    e->mapped = low32;
    insert_locked(e);
    unlock_table();
    *out = (uintptr_t)mem;
    return CUDA_SUCCESS;
}

/* Releases what backs an entry that is out of the table, and the entry itself. */
static void release_entry(struct entry *e)
{
    if (e->cls != CLASS_HANDLE) {
        if (e->mapped == 1)
            munmap((void *)e->key, e->size);
        else if (e->mapped == 3)
            munmap((char *)e->key - 4096, e->size + 2 * 4096);
        else if (e->mapped == 0)
            free((void *)e->key);
    }
    free(e);
}

CUresult free_backed(uintptr_t key, int cls)
{
    if (key == 0)
        return CUDA_ERROR_INVALID_VALUE;
    ensure_setup();
    lock_table();
    struct entry *e = remove_locked(key, cls);
    unlock_table();
    if (e == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    release_entry(e);
    return CUDA_SUCCESS;
}

CUresult alloc_device(CUdeviceptr *dptr, size_t size)
{
    if (dptr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p;
    CUresult r = alloc_backed(&p, size, CLASS_DEVICE, 1, 0);
    if (r == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)p;
    return r;
}

CUresult alloc_host(void **pp, size_t size)
{
    if (pp == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p;
    CUresult r = alloc_backed(&p, size, CLASS_HOST, 0, 0);
    if (r == CUDA_SUCCESS)
        *pp = (void *)p;
    return r;
}

/* The size of the live allocation of class `cls` at `key`, or 0. */
size_t entry_size(uintptr_t key, int cls)
{
    size_t size = 0;
    ensure_setup();
    lock_table();
    for (struct entry *e = buckets[bucket_of(key)]; e != NULL; e = e->next)
        if (e->key == key && e->cls == cls)
            size = e->size;
    unlock_table();
    return size;
}

/* Waits for the device (see the header comment) when freeing `key` should. */
void slow_free_wait(uintptr_t key)
{
    const char *bytes = getenv("STANDIN_SLOW_FREE_BYTES");
    const char *fifo = getenv("STANDIN_SLOW_FREE_FIFO");
    if (bytes == NULL || fifo == NULL || entry_size(key, CLASS_DEVICE) != (size_t)strtoull(bytes, NULL, 10))
        return;
    int fd = open(fifo, O_RDONLY);
    if (fd >= 0) {
        char c;
        while (read(fd, &c, 1) < 0 && errno == EINTR)
            ;
        close(fd);
    }
}

/* A context torn down: every device allocation in it (memory, VMM handles, arrays) is freed;
 * pinned host memory stays. */
void reset_ctx_entries(const void *ctx)
{
    ensure_setup();
    lock_table();
    for (unsigned b = 0; b < NBUCKETS; b++) {
        struct entry **pp = &buckets[b];
        while (*pp != NULL) {
            struct entry *e = *pp;
            if (e->cls == CLASS_HOST || e->ctx != ctx) {
                pp = &e->next;
                continue;
            }
            *pp = e->next;
            if (e->counts)
                unreserve_locked(e);
            release_entry(e);
        }
    }
    unlock_table();
}

/* The device of the live allocation that starts at `key` (any class), or -1. */
int entry_device(uintptr_t key)
{
    int device = -1;
    ensure_setup();
    lock_table();
    for (struct entry *e = buckets[bucket_of(key)]; e != NULL; e = e->next)
        if (e->key == key)
            device = e->device;
    unlock_table();
    return device;
}
