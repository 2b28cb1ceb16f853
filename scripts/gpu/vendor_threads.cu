// GPU case of issue 13 (docs/gpu-matrix.md, scripts/gpu-matrix.sh, case fault_cublas_threads):
// `vendor_threads cublas-per-thread [N]`, run under the shim in its own directory. N threads (100
// by default), one after another, each named gemm-<i> with pthread_setname_np, each create a
// cuBLAS handle in worker_gemm and never destroy it (about 64 MiB each with cuBLAS 13 on the
// H200, as measured in issue 13). The report must show one suspect, headed
// `worker_gemm (vendor_threads.cu:LINE) via cublasCreate_v2`, from N threads. truth.json holds
// N, LINE, and the device memory used before and after (cudaMemGetInfo, CUDA Runtime API
// "Memory Management").
// `vendor_threads nccl-per-cycle [N]` (case fault_nccl_cycles): N communicators (20 by default)
// made one per cycle in make_comm and never destroyed; one suspect headed
// `make_comm (vendor_threads.cu:LINE) via ncclCommInitAll` is expected.
// Build: nvcc -g -O1 -o vendor_threads vendor_threads.cu -lcublas -lpthread -ldl
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static int handle_line;

__attribute__((noinline)) static void worker_gemm(void) {
    cublasHandle_t handle;
    handle_line = __LINE__ + 1;
    cublasStatus_t s = cublasCreate(&handle);
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasCreate: status %d\n", (int)s);
        exit(1);
    }
    // Never cublasDestroy(handle): the leak.
}

static void *worker(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "gemm-%d", (int)(long)arg);
    pthread_setname_np(pthread_self(), name);
    CHECK(cudaSetDevice(0));
    worker_gemm();
    return NULL;
}

static size_t used_bytes(void) {
    size_t free_b = 0, total_b = 0;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b;
}

// ---- nccl-per-cycle: a communicator made per cycle and never destroyed (issue 13, gap 1).
// NCCL is opened with dlopen (NCCL_LIB: the path of libnccl.so.2, from PyTorch's nvidia-nccl
// wheel on the GPU machine; no nccl.h needed): ncclResult_t ncclCommInitAll(ncclComm_t *comm,
// int ndev, const int *devlist) (NCCL API, "Communicator Creation and Management"); 0 is
// ncclSuccess.
typedef int (*comm_init_all_fn)(void **comm, int ndev, const int *devlist);
static comm_init_all_fn comm_init_all;
static int comm_line;
static void *comms[1024];

__attribute__((noinline)) static void make_comm(int i) {
    int dev = 0;
    comm_line = __LINE__ + 1;
    int rc = comm_init_all(&comms[i], 1, &dev);
    if (rc != 0) {
        fprintf(stderr, "ncclCommInitAll: result %d\n", rc);
        exit(1);
    }
    // Never ncclCommDestroy(comms[i]): the leak.
}

static int nccl_per_cycle(int n) {
    const char *lib = getenv("NCCL_LIB");
    void *h = dlopen(lib ? lib : "libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (!h || !(comm_init_all = (comm_init_all_fn)dlsym(h, "ncclCommInitAll"))) {
        fprintf(stderr, "no NCCL: %s\n", dlerror());
        return 3;
    }
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
    if (n > 1024) {
        n = 1024;
    }
    size_t before = used_bytes();
    for (int i = 0; i < n; i++) {
        make_comm(i);
        CHECK(cudaDeviceSynchronize());
    }
    size_t after = used_bytes();
    FILE *f = fopen("truth.json", "w");
    if (!f) {
        return 1;
    }
    fprintf(f, "{\"cycles\": %d, \"file\": \"vendor_threads.cu\", \"comm_line\": %d, \"used_before\": %zu, \"used_after\": %zu}\n",
            n, comm_line, before, after);
    fclose(f);
    printf("ok\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "nccl-per-cycle") == 0) {
        return nccl_per_cycle(argc > 2 ? atoi(argv[2]) : 20);
    }
    if (argc < 2 || strcmp(argv[1], "cublas-per-thread") != 0) {
        fprintf(stderr, "usage: vendor_threads cublas-per-thread [N] | nccl-per-cycle [N]\n");
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 100;
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
    size_t before = used_bytes();
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, (void *)(long)i) != 0 || pthread_join(t, NULL) != 0) {
            return 1;
        }
    }
    size_t after = used_bytes();
    FILE *f = fopen("truth.json", "w");
    if (!f) {
        return 1;
    }
    fprintf(f, "{\"threads\": %d, \"file\": \"vendor_threads.cu\", \"handle_line\": %d, \"used_before\": %zu, \"used_after\": %zu}\n",
            n, handle_line, before, after);
    fclose(f);
    printf("ok\n");
    return 0;
}
