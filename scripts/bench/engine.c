/* A stand-in for PyTorch's autograd engine thread (scripts/bench-engine.sh).
 *
 * `run_backward(n, out)` starts a thread named `pt_autograd_0`, as PyTorch's engine names its
 * device threads, which first makes itself a Python thread state and releases the GIL (as
 * `PythonEngine::thread_init` does), then makes `n` stream-ordered pairs (cudaMallocAsync +
 * cudaFreeAsync of 4 KiB on stream 0x5000, the stand-ins' stream of device 0), each timed alone,
 * into `out` (ns). The Python caller waits in `pthread_join` with the GIL released (ctypes), as
 * `_engine_run_backward` waits in `Engine::execute`. The runtime is found with dlsym, so the
 * pairs go through whatever `cudaMallocAsync` the process binds (the shim's under LD_PRELOAD). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef int (*malloc_async_t)(void **, size_t, void *);
typedef int (*free_async_t)(void *, void *);
int PyGILState_Ensure(void);
void PyGILState_Release(int);
void *PyEval_SaveThread(void);
void PyEval_RestoreThread(void *);

static malloc_async_t malloc_async;
static free_async_t free_async;
static size_t pairs;
static uint64_t *times;

static uint64_t now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

__attribute__((noinline)) static void *engine_thread_main(void *arg) {
    (void)arg;
    void *stream = (void *)0x5000, *p = NULL;
    size_t failed = 0;
    pthread_setname_np(pthread_self(), "pt_autograd_0");
    int g = PyGILState_Ensure();
    void *saved = PyEval_SaveThread();
    for (size_t i = 0; i < pairs; i++) {
        uint64_t t0 = now();
        failed |= malloc_async(&p, 4096, stream) != 0;
        failed |= free_async(p, stream) != 0;
        times[i] = now() - t0;
    }
    PyEval_RestoreThread(saved);
    PyGILState_Release(g);
    return (void *)failed;
}

/* 0 when every pair succeeded. */
int run_backward(size_t n, uint64_t *out) {
    pthread_t t;
    void *failed = (void *)1;
    malloc_async = (malloc_async_t)dlsym(RTLD_DEFAULT, "cudaMallocAsync");
    free_async = (free_async_t)dlsym(RTLD_DEFAULT, "cudaFreeAsync");
    if (!malloc_async || !free_async) return 2;
    pairs = n;
    times = out;
    if (pthread_create(&t, NULL, engine_thread_main, NULL) != 0) return 1;
    pthread_join(t, &failed);
    return failed != NULL;
}
