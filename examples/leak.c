/*
 * A small "renderer" with a device-memory leak, for trying gpushim.
 *
 *   render()      allocates a 1 MiB scratch struct every frame and never frees it (the leak)
 *   load_model()  allocates 32 MiB once and keeps it (intended, long-lived)
 *   per frame     a 256 KiB temporary buffer is allocated and freed (no leak)
 *
 * Build against the real CUDA runtime:
 *   nvcc -o leak examples/leak.c
 *   gcc -o leak examples/leak.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart
 * gpushim's build defines GPUSHIM_STANDIN and links it against the stand-in runtime.
 *
 * Usage: leak [frames]   (default 200)
 */
#include <stdio.h>
#include <stdlib.h>

#ifdef GPUSHIM_STANDIN
/* The few runtime declarations this example needs (same ABI as the real ones). */
typedef int cudaError_t;
#define cudaSuccess 0
cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaDeviceSynchronize(void);
#else
#include <cuda_runtime_api.h>
#endif

#define NOINLINE __attribute__((noinline))

struct scratch {
    float samples[256 * 1024]; /* 1 MiB */
};

/* The model, kept for the whole run: its pointer stays in the program's memory to the end. */
void *model;

static void check(const char *what, cudaError_t err)
{
    if (err != cudaSuccess) {
        fprintf(stderr, "leak: %s failed with error %d\n", what, (int)err);
        exit(1);
    }
}

NOINLINE void *load_model(void)
{
    void *weights = NULL;
    check("cudaMalloc(model)", cudaMalloc(&weights, (size_t)32 << 20));
    return weights;
}

NOINLINE void render(int frame)
{
    struct scratch *s = NULL;
    /* Bug: the scratch buffer is never released. */
    check("cudaMalloc(scratch)", cudaMalloc((void **)&s, sizeof *s));
    (void)frame;
}

/* The frame's own work (here plain arithmetic, on a GPU the kernels): it spreads the frames,
 * and so the leak, over the run, as in a real renderer, instead of a burst of allocations just
 * before a slow exit that timing alone could not tell from a warm-up. */
static volatile unsigned shade_sink;
NOINLINE void shade(int frame)
{
    unsigned h = (unsigned)frame;
    for (int i = 0; i < 100000; i++)
        h = h * 1664525u + 1013904223u;
    shade_sink = h;
}

NOINLINE void frame_temp(void)
{
    void *temp = NULL;
    check("cudaMalloc(temp)", cudaMalloc(&temp, (size_t)256 << 10));
    check("cudaFree(temp)", cudaFree(temp));
}

int main(int argc, char **argv)
{
    int frames = 200;
    if (argc > 1) {
        frames = atoi(argv[1]);
        if (frames < 0) {
            fprintf(stderr, "usage: leak [frames]\n");
            return 2;
        }
    }
    model = load_model();
    for (int f = 0; f < frames; f++) {
        render(f);
        frame_temp();
        shade(f);
    }
    check("cudaDeviceSynchronize", cudaDeviceSynchronize());
    printf("rendered %d frames (model %p kept, %d MiB of scratch buffers never freed)\n", frames,
           model, frames);
    return 0;
}
