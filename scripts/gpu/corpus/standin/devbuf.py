"""A tiny array library over the stand-in CUDA runtime, for the stand-in corpus's Python
programs: it plays the part a framework plays (CuPy, Numba), so the corpus runs it as internal
code (GPUSHIM_INTERNAL_MODULES=devbuf.py) and the user's line is the program's.

`load(path)` loads the runtime; `DevBuf(n)` is n bytes of device memory with
`__cuda_array_interface__`, filled when made (as a framework's new array is, by a kernel) and
freed when the object is; `malloc(n)`/`free(ptr)` are the raw calls (pointers as ints, as
cuda-python hands them out) and `work(ptr, n)` a step of the program's work on the GPU (a
`cudaMemset`)."""

import ctypes

_rt = None


def load(path):
    global _rt
    _rt = ctypes.CDLL(path)
    _rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    _rt.cudaFree.argtypes = [ctypes.c_void_p]
    _rt.cudaMemset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]


def malloc(n):
    p = ctypes.c_void_p()
    rc = _rt.cudaMalloc(ctypes.byref(p), n)
    if rc != 0:
        raise MemoryError(f"cudaMalloc returned {rc}")
    return p.value


def free(ptr):
    _rt.cudaFree(ptr)


def work(ptr, n):
    rc = _rt.cudaMemset(ptr, 0, n)
    if rc != 0:
        raise RuntimeError(f"cudaMemset returned {rc}")


class DevBuf:
    def __init__(self, nbytes):
        self.ptr = malloc(nbytes)
        self.nbytes = nbytes
        work(self.ptr, nbytes)
        self.__cuda_array_interface__ = {
            "data": (self.ptr, False),
            "shape": (nbytes // 4,),
            "typestr": "<f4",
            "version": 3,
        }

    def __del__(self):
        if _rt is not None and self.ptr:
            free(self.ptr)
            self.ptr = 0
