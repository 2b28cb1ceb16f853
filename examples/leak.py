"""The bundled example in Python: a renderer that keeps every frame's 1 MiB scratch buffer in a
global list by mistake, besides a 32 MiB model it means to keep.

    gpushim run -- python examples/leak.py 200

The report names `render (examples/leak.py:N)` as the suspect, and the heap walk's companion
file says who holds the buffers: `examples/leak.py global 'history' → list[*]`.

It uses no framework: the buffers come from the CUDA runtime's `cudaMalloc` through ctypes
and are Python objects with `__cuda_array_interface__`, as a CuPy or Numba array would be. Without
a GPU, `gpushim demo` runs it with the stand-in runtime; by hand, from a checkout's build:
`LD_LIBRARY_PATH=target/release/standins gpushim run -- python3 examples/leak.py 200`.
`GPUSHIM_EXAMPLE_CUDART` names another library.
"""

import ctypes
import os
import sys

MIB = 1 << 20


def runtime():
    """The CUDA runtime: GPUSHIM_EXAMPLE_CUDART, else the first libcudart the loader finds."""
    names = [os.environ.get("GPUSHIM_EXAMPLE_CUDART", ""), "libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    for name in filter(None, names):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    sys.exit("leak.py: no CUDA runtime found (set LD_LIBRARY_PATH or GPUSHIM_EXAMPLE_CUDART)")


rt = runtime()
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]


def check(status, what):
    if status != 0:
        raise MemoryError(f"{what} failed with CUDA error {status}")


class DeviceBuffer:
    """Device memory with the CUDA Array Interface (version 3), freed when the object goes."""

    def __init__(self, ptr, nbytes):
        self.ptr = ptr
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (nbytes,), "typestr": "|u1", "version": 3}

    def __del__(self):
        rt.cudaFree(self.ptr)


history = []


def load_model():
    p = ctypes.c_void_p()
    check(rt.cudaMalloc(ctypes.byref(p), 32 * MIB), "cudaMalloc(model)")
    return DeviceBuffer(p.value, 32 * MIB)


def render(frame):
    p = ctypes.c_void_p()
    check(rt.cudaMalloc(ctypes.byref(p), MIB), "cudaMalloc(scratch)")
    # Bug: the scratch buffer is kept "for debugging" and never dropped.
    history.append(DeviceBuffer(p.value, MIB))


def shade(frame):
    """The frame's own work (on a GPU, the kernels): it spreads the frames over the run."""
    h = frame
    for _ in range(20000):
        h = (h * 1664525 + 1013904223) & 0xFFFFFFFF
    return h


def main():
    frames = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    model = load_model()
    for frame in range(frames):
        render(frame)
        shade(frame)
    print(f"rendered {frames} frames with a {model.__cuda_array_interface__['shape'][0] // MIB} MiB model")


if __name__ == "__main__":
    main()
