/*
 * NVML stand-in (libnvidia-ml.so.1) for the collector's tests: one GPU, whose compute
 * processes are read, at each query, from the file named by GPUSHIM_STANDIN_NVML: one line
 * "<pid> <used bytes>" per process (without that variable, nvmlInit_v2 fails as with no
 * driver).  Each query appends one line to "<file>.queries", so a
 * test program can wait until the collector has sampled.  Only the four entry points the
 * collector uses (collector/src/explain/nvml.rs), with NVML's signatures (nvml.h).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_INSUFFICIENT_SIZE 7

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef void *nvmlDevice_t;
static int the_device;

#define NVML_ERROR_DRIVER_NOT_LOADED 9

/* Without GPUSHIM_STANDIN_NVML the stand-in is a machine with the library but no NVIDIA
 * driver (the demo on the stand-ins): nvmlInit_v2 fails as NVML's does then. */
EXPORT int nvmlInit_v2(void)
{
    return getenv("GPUSHIM_STANDIN_NVML") ? NVML_SUCCESS : NVML_ERROR_DRIVER_NOT_LOADED;
}

EXPORT int nvmlDeviceGetCount_v2(unsigned int *count)
{
    *count = 1;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (index != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &the_device;
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                   nvmlProcessInfo_t *infos)
{
    (void)device;
    const char *path = getenv("GPUSHIM_STANDIN_NVML");
    nvmlProcessInfo_t found[16];
    unsigned int n = 0;
    if (path) {
        FILE *f = fopen(path, "r");
        if (f) {
            unsigned int pid;
            unsigned long long used;
            while (n < 16 && fscanf(f, "%u %llu", &pid, &used) == 2) {
                found[n].pid = pid;
                found[n].usedGpuMemory = used;
                found[n].gpuInstanceId = found[n].computeInstanceId = 0xffffffffu;
                n++;
            }
            fclose(f);
        }
        char q[4096];
        snprintf(q, sizeof q, "%s.queries", path);
        FILE *log = fopen(q, "a");
        if (log) {
            fputs("q\n", log);
            fclose(log);
        }
    }
    if (*count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(infos, found, n * sizeof *found);
    *count = n;
    return NVML_SUCCESS;
}
