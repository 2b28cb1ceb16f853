"""Negative: CuPy's cuFFT plan cache holds plan work areas, bounded by its size limit; the
memory pool keeps freed blocks. Memory grows while the cache fills, then stays flat.

Mechanism, from public reports: users call `cupy.fft` on many shapes and see used/total
bytes of the memory pool stay up after `del` and grow over the first calls; the CuPy
maintainers answer that since v8 cuFFT plans are cached (each with a GPU work area) and the
cache is bounded (16 plans by default), so this is not a leak. Sources: cupy/cupy issue
#4282 ("fft memory leakage" -> "this is not a bug; ... we cache cuFFT plans by default"),
#5134 (the plan cache can grow surprisingly large with many shapes; set_size/set_memsize),
#5199 ("Normal behaviour or memory leak in fourier_shift?").

Here a signal-processing loop transforms frames of 40 distinct lengths, cycling many times,
so the 16-plan cache evicts constantly and the pool reuses the freed work areas. Nothing is
kept across frames except a small host-side list of floats.

Truth: no leak (bounded cache plus pool reuse; flat after the first cycle).
"""

import sys

import cupy as cp

LENGTHS = [2**16 + 96 * k for k in range(40)]  # many non-power-of-two lengths


def main() -> int:
    cycles = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    cache = cp.fft.config.get_plan_cache()
    pool = cp.get_default_memory_pool()
    rng = cp.random.default_rng(0)
    window = {}
    peaks = []
    for c in range(cycles):
        for n in LENGTHS:
            frames = rng.standard_normal((32, n), dtype=cp.float32)
            if n not in window:
                window[n] = cp.hanning(n).astype(cp.float32)  # one per length, held all run
            spec = cp.fft.rfft(frames * window[n], axis=-1)
            power = cp.abs(spec) ** 2
            peaks.append(float(power.max()))
            del frames, spec, power
        print(
            f"cycle {c}: plans cached {cache.get_curr_size()}, pool used "
            f"{pool.used_bytes() / 2**20:.0f} MiB, pool total {pool.total_bytes() / 2**20:.0f} MiB"
        )
    cp.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
