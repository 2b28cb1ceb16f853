/*
 * Programs that end in ways the shim's exit path must survive (tests/faults/exits.rs).
 * Linked to the stand-in libcudart.so.13.  Each allocates 1 MiB of device memory first, so
 * that tracing has started, and keeps it.
 *
 * Usage: exits <scenario>
 *   signal-exit  a timer's SIGALRM handler calls exit(7) while the main thread loops
 *                malloc/free: the signal often lands inside malloc, with the arena's lock held.
 *                Exits 7.
 *   vfork-exit   a vfork child whose exec fails calls exit(127) (not _exit); the parent then
 *                allocates 1 MiB more and returns 0.  Prints "child status 127", "ok".
 *   two-exits    a second thread calls exit(4) while the main thread is inside its exit(3)
 *                (blocked in a system call there: only the shim's exit path blocks).  Exits 3.
 */
#define _GNU_SOURCE
#include "cudart_standin.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static void keep_one_mib(const char *what)
{
    void *d = NULL;
    if (cudaMalloc(&d, MiB) != cudaSuccess) {
        fprintf(stderr, "exits: cudaMalloc (%s) failed\n", what);
        exit(1);
    }
}

static void on_alarm(int sig)
{
    (void)sig;
    exit(7);
}

static int scenario_signal_exit(void)
{
    keep_one_mib("signal_exit");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    /* A different moment in each run: 1 to 5 ms from now. */
    struct itimerval it;
    memset(&it, 0, sizeof it);
    it.it_value.tv_usec = 1000 + (getpid() % 41) * 100;
    setitimer(ITIMER_REAL, &it, NULL);
    void *keep[64] = {0};
    for (unsigned i = 0;; i++) {
        unsigned k = i % 64;
        free(keep[k]);
        keep[k] = malloc(16 + (i * 7919u) % 8192);
    }
    return 0; /* not reached: the handler exits */
}

static int scenario_vfork_exit(void)
{
    keep_one_mib("vfork_parent_before");
    pid_t c = vfork();
    if (c == 0) {
        char *argv[] = {"/nonexistent/gpushim-no-such-program", NULL};
        execv(argv[0], argv);
        exit(127); /* not _exit: what some programs do */
    }
    int st = 0;
    if (c < 0 || waitpid(c, &st, 0) != c)
        return 1;
    printf("child status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    keep_one_mib("vfork_parent_after");
    printf("ok\n");
    fflush(stdout);
    return 0;
}

static volatile int second_ready;
static pid_t main_tid;

/* Waits until the main thread is blocked in a system call, which after `second_ready` it only
 * is inside exit(): then calls exit(4).  Without a shim exit() makes none but exit_group. */
static void *second_exit(void *arg)
{
    (void)arg;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)main_tid);
    __atomic_store_n(&second_ready, 1, __ATOMIC_RELEASE);
    for (;;) {
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        char line[256] = "";
        if (!fgets(line, sizeof line, f))
            line[0] = 0;
        fclose(f);
        /* "running" while in user space; a number while in a system call. */
        if (line[0] >= '0' && line[0] <= '9' && atoi(line) != SYS_exit_group)
            exit(4);
    }
    return NULL;
}

static int scenario_two_exits(void)
{
    keep_one_mib("two_exits");
    main_tid = (pid_t)syscall(SYS_gettid);
    pthread_t t;
    if (pthread_create(&t, NULL, second_exit, NULL) != 0)
        return 1;
    while (!__atomic_load_n(&second_ready, __ATOMIC_ACQUIRE)) {
    }
    exit(3);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: exits <scenario>\n");
        return 2;
    }
    const char *s = argv[1];
    if (strcmp(s, "signal-exit") == 0)
        return scenario_signal_exit();
    if (strcmp(s, "vfork-exit") == 0)
        return scenario_vfork_exit();
    if (strcmp(s, "two-exits") == 0)
        return scenario_two_exits();
    fprintf(stderr, "exits: unknown scenario %s\n", s);
    return 2;
}
