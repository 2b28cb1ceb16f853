"""Stand-in program for the heap walk tests (tests/holders.rs): objects with
__cuda_array_interface__ over stand-in cudaMalloc memory, held in every way the walker must
name. Usage: holders.py LIBCUDART MODE, MODE one of main, big, blocked, unreached, asyncio, traced,
replaced."""

import ctypes
import gc
import os
import signal
import sys
import threading
import time

cudart = ctypes.CDLL(sys.argv[1])
MODE = sys.argv[2]
BEFORE = set(sys.modules)
CALLS = []


def malloc(n):
    p = ctypes.c_void_p()
    rc = cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))
    if rc != 0:
        raise SystemExit(f"cudaMalloc returned {rc}")
    return p.value


class DevBuf:
    """A device array the way Numba and CuPy expose one; its __getattr__ must never run."""

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (n // 4,), "typestr": "<f4", "version": 3}

    def __getattr__(self, name):
        CALLS.append(name)
        raise RuntimeError("user __getattr__ ran for " + name)


class Net:
    pass


def wait_for(path, what):
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit("no " + what)
        time.sleep(0.005)


def snapshot_and_wait(number=1):
    os.kill(os.getpid(), signal.SIGUSR1)
    wait_for(
        os.path.join(os.environ["GPUSHIM_OUTPUT"], f"gpushim-{os.getpid()}-snapshot-{number}.holders.json"), "walk"
    )


def make(buf):
    def get():
        return buf

    return get


if MODE == "main":
    gc.disable()
    keep = [DevBuf(malloc(64 << 10), 64 << 10) for _ in range(4)]
    model = DevBuf(malloc(1 << 20), 512 << 10)
    fn = make(DevBuf(malloc(32 << 10), 32 << 10))
    n = Net()
    n.me = n
    n.buf = DevBuf(malloc(128 << 10), 128 << 10)
    del n
    d = {"a": DevBuf(malloc(8 << 10), 8 << 10)}
    del d
    # Held from native code: a reference no Python object accounts for, as a C extension's.
    native = DevBuf(malloc(48 << 10), 48 << 10)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(native))
    del native
    started = threading.Event()

    def worker():
        local_buf = DevBuf(malloc(16 << 10), 16 << 10)
        started.set()
        threading.Event().wait()
        return local_buf

    threading.Thread(target=worker, name="loader", daemon=True).start()
    started.wait()
    snapshot_and_wait()
    late = [DevBuf(malloc(24 << 10), 24 << 10)]  # only the exit walk sees it
    print("gc enabled:", gc.isenabled())
    print("new modules:", sorted(set(sys.modules) - BEFORE))
    print("getattr calls:", len(CALLS))
elif MODE == "big":
    keep = [DevBuf(malloc(4096), 4096)]
    junk = [[i] for i in range(300000)]
elif MODE == "blocked":
    keep = [DevBuf(malloc(4096), 4096)]
    r, w = os.pipe()
    libc = ctypes.CDLL(None)
    out = os.environ["GPUSHIM_OUTPUT"]
    pid = os.getpid()

    main_tid = threading.main_thread().native_id
    read_nr = {"x86_64": "0", "aarch64": "63"}.get(os.uname().machine, "0")

    def main_is_in_read():
        # /proc/PID/task/TID/syscall: the number of the system call the thread waits in.
        try:
            with open(f"/proc/self/task/{main_tid}/syscall") as f:
                return f.read().split()[0] == read_nr
        except (OSError, IndexError):
            return False

    def helper():
        # Only once the main thread waits in read(2): a signal while it still ran bytecode let
        # the walk run at once (seen under load in CI).
        deadline = time.monotonic() + 60
        while not main_is_in_read():
            if time.monotonic() > deadline:
                raise SystemExit("the main thread never reached read(2)")
            time.sleep(0.001)
        os.kill(pid, signal.SIGUSR1)
        wait_for(os.path.join(out, f"gpushim-{pid}-snapshot-1.holders.json"), "blocked walk")
        os.write(w, b"x")

    threading.Thread(target=helper).start()
    buf = ctypes.create_string_buffer(1)
    # The main thread waits in native code: the pending call cannot run.
    libc.read(r, buf, 1)
elif MODE == "unreached":
    gc.disable()

    def make_cache():
        # A class that no root reaches (a cycle through its own descriptors) whose attribute
        # holds the buffer; an instance, so that the walker decides its type.
        class Cache:
            pass

        Cache.items = [DevBuf(malloc(40 << 10), 40 << 10)]
        Cache.inst = Cache()

    make_cache()

    class Holder:
        pass

    # Held from native code through an attribute; the buffer made before its holder (so that
    # the GC lists it first).
    b = DevBuf(malloc(20 << 10), 20 << 10)
    h = Holder()
    h.buf = b
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(h))
    del b, h
    snapshot_and_wait()
elif MODE == "asyncio":
    import asyncio
    import faulthandler

    # A walk that never ends holds the GIL: only faulthandler's own thread can end the run.
    faulthandler.dump_traceback_later(120, exit=True)

    keep = [DevBuf(malloc(4096), 4096)]

    async def inner(n):
        # Awaiting futures fills the _asyncio module's free list of future iterators.
        await asyncio.sleep(0.001)
        if n == 0:
            return None
        return await inner(n - 1)

    async def main():
        for k in (1, 2, 3):
            await asyncio.gather(*[asyncio.create_task(inner(3)) for _ in range(3)])
            snapshot_and_wait(k)

    asyncio.run(main())
elif MODE == "traced":
    # A trace function (a debugger's, coverage's) does not run for the walker's code (3.11 and
    # later: PyThreadState_EnterTracing).
    keep = [DevBuf(malloc(4096), 4096)]
    junk = [[i] for i in range(20000)]
    events = []

    def tracer(frame, event, arg):
        if frame.f_code.co_filename == "<gpushim-heap-walk>":
            events.append(event)
        return tracer

    sys.settrace(tracer)
    snapshot_and_wait()
    sys.settrace(None)
    print("walker trace events:", len(events) if sys.version_info >= (3, 11) else "n/a")
elif MODE == "replaced":
    # A program that replaced builtins.__import__ and the functions of the modules the walker
    # uses: none of its replacements may run for a walk (the snapshot's or the exit's), nor for
    # the exit walk's registration with atexit.
    import _operator
    import atexit
    import builtins
    import itertools
    import marshal
    import operator

    RECORDED = []

    def report():
        # Registered before the first allocation (so before the shim registers the exit walk):
        # atexit runs it after the exit walk.
        print("replacements called at exit:", sorted(set(RECORDED)), flush=True)

    atexit.register(report)

    def wrap(owner, name, label):
        orig = getattr(owner, name)

        def wrapper(*args, **kwargs):
            RECORDED.append(label)
            return orig(*args, **kwargs)

        setattr(owner, name, wrapper)

    real_import = builtins.__import__

    def recording_import(name, *args, **kwargs):
        RECORDED.append("__import__ " + name)
        return real_import(name, *args, **kwargs)

    builtins.__import__ = recording_import
    for fn in ("disable", "enable", "isenabled", "get_referents", "get_objects"):
        wrap(gc, fn, "gc." + fn)
    for fn in ("compress", "repeat"):
        wrap(itertools, fn, "itertools." + fn)
    for mod in (_operator, operator):
        for fn in ("not_", "contains"):
            wrap(mod, fn, mod.__name__ + "." + fn)
    wrap(time, "perf_counter_ns", "time.perf_counter_ns")
    for fn in ("dumps", "loads"):
        wrap(marshal, fn, "marshal." + fn)
    for fn in ("_getframe", "_current_frames", "getrefcount"):
        wrap(sys, fn, "sys." + fn)
    wrap(atexit, "register", "atexit.register")
    keep = [DevBuf(malloc(4096), 4096)]
    snapshot_and_wait()
    print("replacements called by the snapshot:", sorted(set(RECORDED)))
print("done")
