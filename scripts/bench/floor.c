// The least a recorder of the pool-hit pair can cost (issue 18): an LD_PRELOAD library that
// interposes cuMemAllocAsync and cuMemFreeAsync like the shim and, by FLOOR_MODE, does
//   0: nothing but forward to the driver (the cost of being called through a hook);
//   1: also reads the time-stamp counter and takes a sequence number (one locked add);
//   2: also writes a 64-byte event into a per-thread ring that a consumer thread drains every
//      0.5 ms, as the shim's writer does (the cross-core traffic of handing events over);
//   3: as 2 with no consumer (the ring wraps over itself: the same stores, no other core).
// Measured with scripts/bench/paired.c, which calls the exported symbols (these hooks) and the
// driver's own functions in alternating chunks. No backtrace, no Python frames: what is left of
// the shim's cost above these is its own. Build:
//   cc -O2 -shared -fPIC -o libfloor.so scripts/bench/floor.c -ldl -lpthread
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t, void *);
typedef CUresult (*free_fn)(CUdeviceptr, void *);

#define SLOTS 4096u
struct event {
  uint64_t seq, stamp, addr, size, stream, kind, tid, pad;
};
struct ring {
  _Alignas(64) uint32_t head; // written by the producer
  _Alignas(64) uint32_t tail; // written by the consumer
  _Alignas(64) struct event slots[SLOTS];
};

static alloc_fn real_alloc;
static free_fn real_free;
static int mode;
static uint64_t seq;
static __thread struct ring *mine;
static volatile uint64_t sink;

static void *consume(void *arg) {
  struct ring *r = arg;
  struct timespec ts = {0, 500000};
  for (;;) {
    nanosleep(&ts, NULL);
    uint32_t h = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
    uint32_t t = r->tail;
    uint64_t s = 0;
    for (; t != h; t++) {
      struct event *e = &r->slots[t % SLOTS];
      s += e->seq + e->stamp + e->addr + e->size + e->stream + e->kind + e->tid;
    }
    sink = s;
    __atomic_store_n(&r->tail, t, __ATOMIC_RELEASE);
  }
  return NULL;
}

__attribute__((constructor)) static void init(void) {
  real_alloc = (alloc_fn)dlsym(RTLD_NEXT, "cuMemAllocAsync");
  real_free = (free_fn)dlsym(RTLD_NEXT, "cuMemFreeAsync");
  const char *m = getenv("FLOOR_MODE");
  mode = m ? atoi(m) : 0;
}

static struct ring *ring_of_thread(void) {
  if (!mine) {
    if (posix_memalign((void **)&mine, 64, sizeof *mine))
      abort();
    mine->head = mine->tail = 0;
    if (mode == 2) {
      pthread_t t;
      pthread_create(&t, NULL, consume, mine);
    }
  }
  return mine;
}

static void record(uint64_t addr, uint64_t size, void *stream, uint64_t kind) {
  if (mode < 1)
    return;
  uint64_t stamp = __rdtsc();
  uint64_t s = __atomic_fetch_add(&seq, 1, __ATOMIC_ACQ_REL);
  if (mode < 2) {
    sink = stamp + s;
    return;
  }
  struct ring *r = ring_of_thread();
  uint32_t h = r->head;
  if (mode == 2)
    while (h - __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE) >= SLOTS)
      ;
  struct event *e = &r->slots[h % SLOTS];
  *e = (struct event){s, stamp, addr, size, (uint64_t)stream, kind, 1, 0};
  __atomic_store_n(&r->head, h + 1, __ATOMIC_RELEASE);
}

CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, void *stream) {
  CUresult rc = real_alloc(p, n, stream);
  if (rc == 0)
    record(*p, n, stream, 1);
  return rc;
}

CUresult cuMemFreeAsync(CUdeviceptr p, void *stream) {
  CUresult rc = real_free(p, stream);
  record(p, 0, stream, 2);
  return rc;
}
