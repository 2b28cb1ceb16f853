/*
 * Scenarios of the test target (see target.c) about the process around the
 * allocations: SIGKILL, fork, fork+exec, exits with threads still running or
 * on SIGINT, reaping children, the driver unloaded and reloaded, fork while
 * starting up, thread cancellation, closed descriptors, quick exits.
 */
#include "target.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* ----------------------------------------------------------------- kill */

NOINLINE void *killed_alloc(void) { return device_alloc_named(7 * MiB); }

int scenario_kill(void)
{
    void *p = killed_alloc();
    print_alloc("cudaMalloc", 7 * MiB, p);
    fflush(stdout);
    raise(SIGKILL);
    fprintf(stderr, "target: still alive after SIGKILL\n");
    return 1;
}

/* ----------------------------------------------------------------- fork */

NOINLINE void *fork_parent_before(void) { return device_alloc_named(1 * MiB); }
NOINLINE void *fork_child_first(void) { return device_alloc_named(2 * MiB); }
NOINLINE void *fork_child_second(void) { return device_alloc_named(3 * MiB); }
NOINLINE void *fork_parent_after(void) { return device_alloc_named(4 * MiB); }

static int wait_child(pid_t pid, const char *what)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            perror("target: waitpid");
            return 1;
        }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "target: %s child ended with status 0x%x\n", what, status);
        return 1;
    }
    return 0;
}

int scenario_fork(void)
{
    (void)fork_parent_before();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("target: fork");
        return 1;
    }
    if (pid == 0) {
        (void)fork_child_first();
        (void)fork_child_second();
        printf("child ok\n");
        fflush(stdout);
        exit(0);
    }
    if (wait_child(pid, "fork") != 0)
        return 1;
    (void)fork_parent_after();
    return 0;
}

/* ------------------------------------------------------------- forkexec */

NOINLINE void *forkexec_parent_alloc(void) { return device_alloc_named(1 * MiB); }

int scenario_forkexec(void)
{
    (void)forkexec_parent_alloc();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("target: fork");
        return 1;
    }
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", "echo child-sh", (char *)NULL);
        perror("target: execl /bin/sh");
        _exit(127);
    }
    return wait_child(pid, "forkexec");
}

/* ------------------------------------------------------------- faults
 * Scenarios for the fault suite (tests/faults/): the program must behave the same whatever
 * happens to gpushim's side.
 */

/* stuck-exit: 1 MiB kept, a thread that allocates and frees without end,
 * "ready", stdin to its end, then main returns (the exit path runs while the
 * other thread is still allocating). */
static void *alloc_forever(void *arg)
{
    (void)arg;
    for (;;)
        thread_alloc_free();
    return NULL;
}

int scenario_stuck_exit(void)
{
    (void)pause_before();
    pthread_t t;
    int e = pthread_create(&t, NULL, alloc_forever, NULL);
    if (e != 0) {
        fprintf(stderr, "target: pthread_create: %s\n", strerror(e));
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    return read_to_eof(NULL);
}

/* sigint-exit: like pause 0 up to "ready", but a SIGINT handler ends the
 * wait and main returns 130 (the exit path runs). */
static volatile sig_atomic_t got_sigint;

static void on_sigint(int sig)
{
    (void)sig;
    got_sigint = 1;
}

int scenario_sigint_exit(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: read() returns EINTR */
    if (sigaction(SIGINT, &sa, NULL) != 0) {
        perror("target: sigaction");
        return 1;
    }
    (void)pause_before();
    printf("ready\n");
    fflush(stdout);
    if (read_to_eof(&got_sigint) != 0)
        return 1;
    printf("interrupted %d\n", (int)got_sigint);
    return got_sigint ? 130 : 1;
}

/* forkexec-tools: with tracing on, fork+exec a shell and this program's
 * `query` (both inherit LD_PRELOAD); they must run as without the shim. */
NOINLINE void *tools_parent_alloc(void) { return device_alloc_named(1 * MiB); }

static int spawn_and_wait(const char *path, char *const argv[])
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("target: fork");
        return 1;
    }
    if (pid == 0) {
        execv(path, argv);
        perror("target: execv");
        _exit(127);
    }
    return wait_child(pid, path);
}

int scenario_forkexec_tools(void)
{
    (void)tools_parent_alloc();
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        perror("target: readlink /proc/self/exe");
        return 1;
    }
    self[n] = '\0';
    char *sh[] = {"sh", "-c", "echo child-sh; grep '^Threads:' /proc/$$/status", NULL};
    char *query[] = {self, "query", NULL};
    if (spawn_and_wait("/bin/sh", sh) != 0 || spawn_and_wait(self, query) != 0)
        return 1;
    return 0;
}

/* reap: forks a child that exits at once, then reaps children with wait()
 * until there are none (as shells and process supervisors do). */
NOINLINE void *reap_parent_alloc(void) { return device_alloc_named(1 * MiB); }

int scenario_reap(void)
{
    (void)reap_parent_alloc();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("target: fork");
        return 1;
    }
    if (pid == 0)
        _exit(0);
    int reaped = 0, others = 0;
    for (;;) {
        int status = 0;
        pid_t w = wait(&status);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno != ECHILD) {
                perror("target: wait");
                return 1;
            }
            break;
        }
        if (w == pid)
            reaped++;
        else
            others++;
    }
    printf("reaped %d others %d\n", reaped, others);
    return reaped == 1 && others == 0 ? 0 : 1;
}

/* dlreload: the driver loaded, used, unloaded and loaded again at run time,
 * then wrapped names looked up with RTLD_DEFAULT and RTLD_NEXT.
 * Live at exit: 2 + 4 + 8 + 16 MiB; two unknown frees. */
struct extent {
    uintptr_t lo, hi;
};

static int find_libcuda(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct extent *x = data;
    const char *slash = strrchr(info->dlpi_name, '/');
    const char *base = slash != NULL ? slash + 1 : info->dlpi_name;
    if (strcmp(base, "libcuda.so.1") != 0)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        uintptr_t hi = lo + ph->p_memsz;
        if (x->lo == 0 || lo < x->lo)
            x->lo = lo;
        if (hi > x->hi)
            x->hi = hi;
    }
    return 1;
}

static void *need_sym(void *handle, const char *name)
{
    void *f = dlsym(handle, name);
    if (f == NULL) {
        fprintf(stderr, "target: dlsym(%s): %s\n", name, dlerror());
        exit(1);
    }
    return f;
}

NOINLINE CUdeviceptr dl_second_alloc(PFN_cuMemAlloc_v2 f)
{
    CUdeviceptr d = 0;
    check("cuMemAlloc_v2", f(&d, 2 * MiB));
    return d;
}

NOINLINE void *dl_default_alloc(cudaError_t (*f)(void **, size_t))
{
    void *p = NULL;
    check("dlsym(RTLD_DEFAULT) cudaMalloc", f(&p, 4 * MiB));
    return p;
}

NOINLINE void *dl_next_alloc(cudaError_t (*f)(void **, size_t))
{
    void *p = NULL;
    check("dlsym(RTLD_NEXT) cudaMalloc", f(&p, 8 * MiB));
    return p;
}

NOINLINE CUdeviceptr dl_default_driver_alloc(PFN_cuMemAlloc_v2 f)
{
    CUdeviceptr d = 0;
    check("dlsym(RTLD_DEFAULT) cuMemAlloc_v2", f(&d, 16 * MiB));
    return d;
}

int scenario_dlreload(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "target: dlopen libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    PFN_cuMemFree_v2 free1 = (PFN_cuMemFree_v2)need_sym(h, "cuMemFree_v2");
    /* An unknown free: the driver answers CUDA_ERROR_INVALID_VALUE. */
    printf("first unknown-free %d\n", free1(0x1234));
    struct extent old = {0, 0};
    dl_iterate_phdr(find_libcuda, &old);
    dlclose(h);
    void *still = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    int unloaded = still == NULL;
    if (still != NULL)
        dlclose(still);
    /* Keep the old addresses taken, so that a new load lands elsewhere and a
     * stale pointer into the old one faults. */
    if (unloaded && old.hi > old.lo) {
        size_t len = (old.hi - old.lo + 4095) & ~(size_t)4095;
        void *m = mmap((void *)(old.lo & ~(uintptr_t)4095), len, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (m == MAP_FAILED)
            fprintf(stderr, "target: cannot reserve the old libcuda range: %s\n", strerror(errno));
    }
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (h == NULL) {
        fprintf(stderr, "target: dlopen libcuda.so.1 again: %s\n", dlerror());
        return 1;
    }
    PFN_cuMemAlloc_v2 alloc2 = (PFN_cuMemAlloc_v2)need_sym(h, "cuMemAlloc_v2");
    (void)dl_second_alloc(alloc2);
    PFN_cuMemFree_v2 free_default = (PFN_cuMemFree_v2)need_sym(RTLD_DEFAULT, "cuMemFree_v2");
    printf("default unknown-free %d\n", free_default(0x1234));

    typedef cudaError_t (*malloc_fn)(void **, size_t);
    malloc_fn by_default = (malloc_fn)need_sym(RTLD_DEFAULT, "cudaMalloc");
    malloc_fn by_next = (malloc_fn)need_sym(RTLD_NEXT, "cudaMalloc");
    printf("default-is-linked %s\n", by_default == cudaMalloc ? "yes" : "no");
    (void)dl_default_alloc(by_default);
    (void)dl_next_alloc(by_next);
    PFN_cuMemAlloc_v2 drv_default = (PFN_cuMemAlloc_v2)need_sym(RTLD_DEFAULT, "cuMemAlloc_v2");
    (void)dl_default_driver_alloc(drv_default);
    return 0;
}

/* ---- Found by the adversarial review of 2026-11-30 ------------------------------------ */

static void *forkstart_worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 2000; i++) {
        void *p;
        check("cudaMalloc", cudaMalloc(&p, 4096));
        check("cudaFree", cudaFree(p));
    }
    return NULL;
}

/* fork-start: 8 threads start allocating (the shim starts up: module scans) while the main
 * thread forks 3 children at once; each child allocates and exit(5)s. A child that hangs is a
 * failure the test sees as a timeout. */
int scenario_fork_start(void)
{
    /* The driver stand-in is loaded first, as a program linked with libcuda has it: its fork
     * handler (which keeps its table's lock usable in a child) then applies to every fork.
     * Loaded by the first cudaMalloc instead, during a fork's prepare handlers (glibc 2.36 runs
     * them without its atfork lock), it was registered too late for that fork, and a child
     * forked while a worker held the stand-in's lock hung in the stand-in (1 in about 200
     * runs under load). This loads no allocation: the shim still starts in the workers. */
    if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) == NULL) {
        fprintf(stderr, "fork-start: %s\n", dlerror());
        return 1;
    }
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, forkstart_worker, NULL);
    int bad = 0;
    for (int k = 0; k < 3; k++) {
        pid_t c = fork();
        if (c == 0) {
            void *p;
            cudaMalloc(&p, 123);
            exit(5);
        }
        int st;
        waitpid(c, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 5)
            bad++;
    }
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    printf("bad children %d\n", bad);
    return bad ? 1 : 0;
}

static void *cancel_worker(void *arg)
{
    (void)arg;
    for (;;) {
        void *p;
        if (cudaMalloc(&p, 4096) != cudaSuccess)
            abort();
        cudaFree(p);
        pthread_testcancel();
    }
    return NULL;
}

/* cancel US: a thread allocating in a loop (its first allocation starts the shim) is
 * cancelled after US microseconds; then main allocates once more. */
int scenario_cancel(int argc, char **argv)
{
    int us = argc > 2 ? atoi(argv[2]) : 0;
    pthread_t t;
    pthread_create(&t, NULL, cancel_worker, NULL);
    if (us > 0)
        usleep(us);
    pthread_cancel(t);
    void *r;
    pthread_join(t, &r);
    void *p;
    check("cudaMalloc", cudaMalloc(&p, 77));
    printf("cancelled %d\n", r == PTHREAD_CANCELED);
    return 0;
}

/* close-fds PREFIX: allocate, close every descriptor from 3 up (as daemons do), open eight
 * files PREFIX.0 .. PREFIX.7 (they take the lowest free numbers, the shim's old socket's among
 * them), allocate 200 more times, then write one line to each file: every write must succeed. */
int scenario_close_fds(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    void *p;
    check("cudaMalloc", cudaMalloc(&p, MiB));
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    int f[8];
    for (int i = 0; i < 8; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s.%d", argv[2], i);
        f[i] = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    }
    for (int i = 0; i < 200; i++)
        check("cudaMalloc", cudaMalloc(&p, 4096));
    int bad = 0;
    for (int i = 0; i < 8; i++)
        if (write(f[i], "data\n", 5) != 5) {
            fprintf(stderr, "target: write to fd %d (file %d) failed: %s\n", f[i], i, strerror(errno));
            bad++;
        }
    printf("failed writes %d\n", bad);
    return bad ? 1 : 0;
}

/* quick-end HOW: 100 allocations of 1 MiB, then end with _exit(5), _Exit(5) or
 * quick_exit(5): no atexit handler runs. */
int scenario_quick_end(int argc, char **argv)
{
    const char *how = argc > 2 ? argv[2] : "_exit";
    void *p;
    for (int i = 0; i < 100; i++)
        check("cudaMalloc", cudaMalloc(&p, MiB));
    printf("ok\n");
    fflush(stdout);
    if (strcmp(how, "_Exit") == 0)
        _Exit(5);
    if (strcmp(how, "quick_exit") == 0)
        quick_exit(5);
    _exit(5);
}

/* graceful-term: a program that shuts down gracefully on SIGTERM, as a training job does
 * when its scheduler stops it: allocates 3 MiB (pause_before), prints "ready", waits for
 * SIGTERM, frees nothing and exits 0 through exit(). */
static volatile sig_atomic_t term_seen;

static void on_term(int sig)
{
    (void)sig;
    term_seen = 1;
}

int scenario_graceful_term(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &old);
    (void)pause_before();
    printf("ready\n");
    fflush(stdout);
    while (!term_seen)
        sigsuspend(&old);
    sigprocmask(SIG_SETMASK, &old, NULL);
    printf("stopping\n");
    return 0;
}

/* close-range: 4 allocations of 1 MiB, then close_range(3, ~0U, 0) (a daemon's or a
 * sandbox's way of closing every inherited descriptor), prints "closed", waits for stdin's
 * end, frees nothing and exits 0. */
int scenario_close_range(void)
{
    void *p;
    for (int i = 0; i < 4; i++)
        check("cudaMalloc", cudaMalloc(&p, MiB));
    if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0) {
        perror("target: close_range");
        return 1;
    }
    printf("closed\n");
    fflush(stdout);
    return read_to_eof(NULL);
}

/* subreaper-reap: reap as a child subreaper (PR_SET_CHILD_SUBREAPER, as supervisors and
 * systemd user services are), its wait() bounded by alarm(20) so that a wait for the
 * collector ends the program (SIGALRM) instead of hanging. */
int scenario_subreaper_reap(void)
{
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
        perror("target: prctl");
        return 1;
    }
    alarm(20);
    return scenario_reap();
}
