/*
 * The reachability scan's speed (scripts/bench-reach.sh): GiB gibibytes of host heap in blocks
 * of 64 KiB - 64 bytes (glibc's main heap, below its mmap threshold), every block reachable
 * from a global array, then ALLOCS device allocations (the stand-in driver's), half of them
 * dropped so that the scan makes both of its passes.  FILL: "random" (xorshift words: what a
 * heap of numbers looks like), "pointers" (every word the address of a block: the scan's worst
 * case, a binary search per word) or "zero".
 *
 * Usage: reach GiB FILL ALLOCS
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int cudaError_t;
extern cudaError_t cudaMalloc(void **p, size_t size);

#define BLOCK (64u * 1024 - 64)

void **volatile blocks;
void **volatile kept;

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: reach GiB FILL ALLOCS\n");
        return 2;
    }
    double gib = atof(argv[1]);
    const char *fill = argv[2];
    int allocs = atoi(argv[3]);
    size_t n = (size_t)(gib * 1024 * 1024 * 1024 / BLOCK);
    blocks = malloc(n * sizeof *blocks);
    kept = malloc((size_t)allocs * sizeof *kept);
    if (blocks == NULL || kept == NULL)
        return 1;
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        uint64_t *b = malloc(BLOCK);
        if (b == NULL)
            return 1;
        blocks[i] = b;
        for (size_t w = 0; w < BLOCK / 8; w++) {
            if (strcmp(fill, "random") == 0) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b[w] = x;
            } else if (strcmp(fill, "pointers") == 0) {
                b[w] = (uint64_t)(uintptr_t)blocks[(i * 7 + w) % (i + 1)];
            } else {
                b[w] = 0;
            }
        }
    }
    for (int i = 0; i < allocs; i++) {
        void *p;
        if (cudaMalloc(&p, 4096) != 0)
            return 1;
        kept[i] = (i % 2 == 0) ? p : NULL;
    }
    printf("%zu blocks of %u bytes, %s, %d device allocations\n", n, BLOCK, fill, allocs);
    return 0;
}
