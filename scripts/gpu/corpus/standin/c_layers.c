/* Negative: a model's 8 layers (64 KiB each) allocated at start into a static growable array in
 * the heap (std::vector's layout and lifetime: freed among the exit handlers) and used for 300
 * steps; held for the run.
 * Usage: c_layers */
#include "rt.h"

static void **g_layers;
static size_t g_count;

static void destroy_layers(void) { free(g_layers); g_layers = NULL; }

__attribute__((constructor)) static void init_layers(void) { atexit(destroy_layers); }

NOINLINE void load_layers(void)
{
    g_layers = calloc(8, sizeof *g_layers);
    for (int i = 0; i < 8; i++)
        check(cudaMalloc(&g_layers[g_count++], 64 << 10), "cudaMalloc");
}

int main(void)
{
    load_layers();
    for (int i = 0; i < 300; i++)
        check(cudaMemset(g_layers[i % g_count], i & 0xFF, 64), "cudaMemset");
    printf("%zu layers\n", g_count);
    return 0;
}
