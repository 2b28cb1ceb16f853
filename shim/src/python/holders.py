"""gpushim's heap walker: which Python objects own GPU memory, and what keeps each alive.

This file is embedded in libgpushim.so and compiled at its first use, inside the traced
program, into a private namespace (no module object, nothing added to sys.modules). The shim
calls walk() holding the GIL on the main thread: from a pending call (Py_AddPendingCall) for a
snapshot or an out-of-memory report, or from an atexit callback for the final report. walk()
hands its result to the shim through emit, a builtin function the shim made (METH_O, bytes).

Rules, because this runs in someone else's program:
- Never raise: every failure is caught and reported as a failed walk.
- No gc.collect(); automatic collection is off during the walk and put back exactly as it was.
- No user-level __getattr__, __getattribute__, __eq__, __hash__, __repr__ or __del__ runs: types
  are checked through their __mro__ (identity), attributes are read from class and instance
  dictionaries found through C-level descriptors, identity maps are keyed by id(), and objects
  are followed with gc.get_referents (each type's C-level tp_traverse). The one exception: an
  `__cuda_array_interface__` that is a property (Numba's) is called, since that is where the
  interface lives; it runs inside try/except.
- Autograd graphs are followed from each tensor's grad_fn along next_functions (C-level
  descriptors); saved tensors are never unpacked, so no saved-tensor hook runs and nothing is
  allocated on the GPU. When the program initialized CUDA in PyTorch, the caching allocator's
  own state is read with torch.cuda.memory._snapshot() (PyTorch's code, not the program's; in a
  short-lived copy of the process unless the program imported torch._inductor: see
  `_torch_snapshot`);
  CUDA is never initialized here (torch.cuda.is_initialized() first).
- Nothing is imported that the program did not import: gc is imported and at once removed
  from sys.modules again if it was not there; frameworks are only looked at through
  sys.modules.
- None of the program's replacements of the modules' functions runs: modules come from
  sys.modules or the import machinery, never through builtins.__import__, and gc, sys, time,
  marshal and _operator functions are the ones the module defined (made afresh from its method
  table by the shim, `_original`), whatever the program assigned to the module's attributes.
- Bounded: the walk stops at its deadline and says after how many objects.
"""

#: `_gpushim_module(name)`: the module sys.modules[name], read by the shim with the C API, or,
#: when the program has not imported it, imported by the import machinery (never through
#: builtins.__import__, which the program may have replaced) and at once removed from
#: sys.modules again. `_gpushim_original(module, name)`: the module's function `name` made
#: afresh from the module's own method table (never its attribute, which the program may have
#: replaced). Both put here by the shim (shim/src/python/heap/originals.rs); absent when this
#: file runs on its own (its unit tests), where plain imports and attributes stand in.
_module = globals().get("_gpushim_module")
_original = globals().get("_gpushim_original")
if _module is None or _original is None:

    def _module(name):
        """The module `name`, leaving sys.modules as it was."""
        modules = __import__("sys").modules
        had = name in modules
        mod = __import__(name)
        if not had:
            modules.pop(name, None)
        return mod

    def _original(mod, name):
        return getattr(mod, name)


_sys = _module("sys")
_gc = _module("gc")
_gc_isenabled = _original(_gc, "isenabled")
_gc_disable = _original(_gc, "disable")
_gc_enable = _original(_gc, "enable")
_gc_get_objects = _original(_gc, "get_objects")
_get_referents = _original(_gc, "get_referents")
_marshal = _module("marshal")
_marshal_dumps = _original(_marshal, "dumps")
_marshal_loads = _original(_marshal, "loads")
_not = _original(_module("_operator"), "not_")
_clock = _original(_module("time"), "perf_counter_ns")
_getrefcount = _original(_sys, "getrefcount")
_getframe = _original(_sys, "_getframe")
_current_frames = _original(_sys, "_current_frames")


def _where(hits):
    """The positions of the true items of the list `hits`, in order, found by C-level loops:
    filter over the list's own __getitem__ (itertools.compress would do, but it is a type, which
    the shim cannot take from the module's method table as it does the functions above)."""
    return filter(hits.__getitem__, range(len(hits)))


_ModuleType = type(_sys)
_module_dict = _ModuleType.__dict__["__dict__"].__get__
_FrameType = type(_getframe())
_FunctionType = type(_where)
_BuiltinType = type(len)
_GetSetType = type(type.__dict__["__dict__"])
_MemberType = type(_ModuleType.__dict__["__dict__"])
_PropertyType = property
_MappingProxy = type(type.__dict__)
_TYPE_DICT = type.__dict__["__dict__"]
#: CPython 3.12.0 to 3.12.5: the `_asyncio` module's tp_traverse also visits its free list of
#: future iterators, freed objects; a reference taken to one (gc.get_referents, the native core)
#: frees it a second time when dropped, and the free list becomes a cycle: the next traversal of
#: the module never ends (python/cpython#122695, fixed in 3.12.6). There, module objects are
#: never "plain" (the native core does not traverse them) and the `_asyncio` module's referents
#: are its dictionary only.
_UNSAFE_MODULES = (3, 12) <= _sys.version_info[:3] < (3, 12, 6)
_MODULE_NOT_PLAIN = _ModuleType if _UNSAFE_MODULES else None
if _UNSAFE_MODULES:

    def _get_referents(o, _all=_get_referents):
        if type(o) is _ModuleType:
            d = _module_dict(o)
            if type(d) is dict and d.get("__name__") == "_asyncio":
                return [d]
        return _all(o)


#: The file name of this code: its frames are never roots.
WALKER_FILE = "<gpushim-heap-walk>"
#: Result status values (the wire's WalkStatus).
COMPLETE, CUT, FAILED = 0, 1, 3
#: Objects listed one by one in a result; past that they are counted only.
MAX_OBJECTS = 20000
#: Longest path rendered, in steps.
MAX_STEPS = 24
#: How often the deadline is looked at, in objects visited (a power of two, minus one); the
#: breadth-first walk takes its queue in chunks that end there. The first chunk is always
#: walked (a cap already spent on the roots still gives a walk that says something).
CHECK_EVERY = 1023

_CAI = "__cuda_array_interface__"
#: Ids of the exact types whose objects own no GPU memory and lead to none: never queued, and
#: left out of the analysis of unreached objects (by id: hashing a type could run a metaclass's
#: __hash__). Strings, numbers and None refer to nothing; a code object refers only to its
#: compile-time constants and names.
_ATOM_TYPES = (str, int, float, bool, bytes, complex, type(None), type(_where.__code__))
_ATOMS = frozenset(id(t) for t in _ATOM_TYPES)
#: The walk's breadth-first core in native code (shim/src/python/bfs.rs), put in this namespace
#: by the shim where the interpreter allows it; absent when this file runs on its own (its unit
#: tests) or with GPUSHIM_HEAP_WALK_NATIVE=0. Its operations, by number:
_BFS = globals().get("_gpushim_bfs")
_OP_RESET, _OP_ADD, _OP_RUN, _OP_LINK, _OP_PARENT, _OP_CONTAINS, _OP_FREE = range(7)
#: `_gpushim_fork_call(fn, args, dumps, module_dict)`: `dumps(fn(*args))` made in a short-lived
#: copy of the process with `module_dict["_inductor"]` set to None there
#: (shim/src/python/heap/fork_call.rs), or None; put here by the shim, absent when this file
#: runs on its own (its unit tests).
_FORK = globals().get("_gpushim_fork_call")
#: `_gpushim_interrupted()`: tells the shim that the walker caught a KeyboardInterrupt, which it
#: makes again (PyErr_SetInterrupt) once the walker has returned; absent when this file runs on
#: its own.
_INTERRUPTED = globals().get("_gpushim_interrupted")


def _cell_type():
    x = 0

    def f():
        return x

    return type(f.__closure__[0])


_CellType = _cell_type()


def _mro_lookup(t, name):
    """`name` in the __dict__ of a class on type `t`'s MRO, without running any code: (found,
    value)."""
    mro = type.__dict__["__mro__"].__get__(t)
    for k in mro:
        d = type.__dict__["__dict__"].__get__(k)
        if name in d:
            return True, d[name]
    return False, None


def _instance_dict(o, t):
    """The instance dictionary of `o` through its type's C-level `__dict__` descriptor, or
    None (no dictionary, or a `__dict__` the class defines itself)."""
    found, desc = _mro_lookup(t, "__dict__")
    if not found or type(desc) is not _GetSetType:
        return None
    try:
        d = desc.__get__(o, t)
    except Exception:
        return None
    return d if type(d) is dict else None


def _cai_extent(cai):
    """(pointer, bytes) of a `__cuda_array_interface__` dictionary, or None. Only builtin types
    are read (no user __index__ or __eq__)."""
    if type(cai) is not dict or not all(type(k) is str for k in cai):
        return None
    data, shape, typestr = cai.get("data"), cai.get("shape"), cai.get("typestr")
    if type(data) is not tuple or len(data) < 1 or type(data[0]) is not int:
        return None
    if type(shape) is not tuple or not all(type(n) is int and n >= 0 for n in shape):
        return None
    if type(typestr) is not str or len(typestr) < 3 or not typestr[2:].isdigit():
        return None
    item = int(typestr[2:])
    strides = cai.get("strides")
    count = 1
    for n in shape:
        count *= n
    if count == 0:
        return data[0], 0
    if strides is None:
        return data[0], count * item
    if type(strides) is not tuple or len(strides) != len(shape) or not all(type(s) is int for s in strides):
        return None
    # The extent of a strided view: from its lowest to its highest element.
    lo = sum(s * (n - 1) for s, n in zip(strides, shape, strict=False) if s < 0)
    hi = sum(s * (n - 1) for s, n in zip(strides, shape, strict=False) if s > 0)
    return data[0] + lo, hi - lo + item


def _short_type(t):
    try:
        n = type.__dict__["__name__"].__get__(t)
    except Exception:
        return "?"
    return n if type(n) is str else "?"


class _Finder:
    """Recognizes the objects that own GPU memory, with one decision cached per type."""

    def __init__(self, modules):
        self.by_type = {}
        #: C-level descriptors by (id(type), name) (_getset), for the types in by_type and the
        #: autograd nodes' types (kept alive by Graphs.nodes).
        self.descs = {}
        torch = modules.get("torch")
        self.tensor_base = None
        if type(torch) is _ModuleType:
            c = _module_dict(torch).get("_C")
            if type(c) is _ModuleType:
                cd = _module_dict(c)
                self.tensor_base = cd.get("TensorBase") or cd.get("_TensorBase")
                self.no_tf = cd.get("DisableTorchFunctionSubclass") or cd.get("_DisableTorchFunctionSubclass")
        #: torch.nn.Parameter and torch.optim.Optimizer, when the program imported them: a
        #: tensor's role is told by these classes (identity on its type's MRO), never by names.
        self.param_cls = _class_in(modules, ("torch.nn.parameter", "torch.nn"), "Parameter")
        self.optim_cls = _class_in(modules, ("torch.optim.optimizer", "torch.optim"), "Optimizer")

    def kind(self, t):
        k = id(t)
        hit = self.by_type.get(k)
        if hit is not None:
            return hit[1]
        mro = type.__dict__["__mro__"].__get__(t)
        if self.tensor_base is not None and any(c is self.tensor_base for c in mro):
            kind = "torch"
        else:
            found, v = _mro_lookup(t, _CAI)
            if found:
                kind = ("cai-class", v)
            else:
                found, desc = _mro_lookup(t, "__dict__")
                # Only a C-level getset descriptor is read (_instance_dict), and type's own
                # returns a mappingproxy, never a dict: objects of such types are not looked at.
                readable = found and type(desc) is _GetSetType and desc is not _TYPE_DICT
                kind = ("cai-instance", desc) if readable else ""
        self.by_type[k] = (t, kind)
        return kind

    def info(self, o):
        """The GPU memory `o` owns: a dict with ptr, nbytes, device, type, desc; or None."""
        t = type(o)
        kind = self.kind(t)
        if not kind:
            return None
        try:
            if kind == "torch":
                return self._torch(o, t)
            if kind[0] == "cai-instance":
                d = kind[1].__get__(o, t)
                if type(d) is not dict or _CAI not in d:
                    return None
                cai = d[_CAI]
            else:
                v = kind[1]
                if type(v) is dict:
                    cai = v
                elif type(v) is _PropertyType or type(v) is _GetSetType:
                    cai = v.__get__(o, t)
                else:
                    return None
            ext = _cai_extent(cai)
            if ext is None:
                return None
            shape = cai["shape"]
            desc = "{}{} {}".format(_short_type(t), _shape(shape), cai["typestr"])
            return {"ptr": ext[0], "nbytes": ext[1], "device": -1, "type": _short_type(t), "desc": desc}
        except Exception:
            return None

    def autograd_of(self, o):
        """(grad_fn node or None, output number) of tensor `o`, read through TensorBase's
        C-level descriptors with torch functions of subclasses disabled."""
        if self.tensor_base is None or self.kind(type(o)) != "torch":
            return None, 0
        try:
            with self.no_tf():
                found, gf = _getset(o, "grad_fn", self.descs)
                got_nr, nr = _getset(o, "output_nr", self.descs)
        except Exception:
            return None, 0
        return (gf if found else None), (nr if got_nr and type(nr) is int else 0)

    def grad_of(self, o):
        """The `.grad` tensor of tensor `o`, or None (read like autograd_of)."""
        if self.tensor_base is None or self.kind(type(o)) != "torch":
            return None
        try:
            with self.no_tf():
                # Only a leaf's: PyTorch warns into the program when a non-leaf's `.grad` is
                # read (a UserWarning on its stderr), and keeps none there unless asked to.
                found, gf = _getset(o, "grad_fn", self.descs)
                if not found or gf is not None:
                    return None
                found, g = _getset(o, "grad", self.descs)
        except Exception:
            return None
        return g if found else None

    def _torch(self, o, t):
        with self.no_tf():
            dev = o.device
            if dev.type != "cuda":
                return None
            st = o.untyped_storage()
            ptr, nbytes = st.data_ptr(), st.nbytes()
            shape = tuple(o.shape)
            dtype = str(o.dtype).replace("torch.", "")
            gf = o.grad_fn
            req = bool(o.requires_grad)
        desc = f"{_short_type(t)}{_shape(shape)} {dtype}"
        if gf is not None:
            desc += " grad_fn=" + _short_type(type(gf))
        elif req:
            desc += " requires_grad"
        return {
            "ptr": ptr,
            "nbytes": nbytes,
            "device": dev.index if type(dev.index) is int else -1,
            "type": _short_type(t),
            "desc": desc,
        }


def _class_in(modules, names, attr):
    """Class `attr` of the first of the modules `names` the program imported that has it (read
    from the module's dictionary: no module is imported), or None."""
    for name in names:
        m = modules.get(name)
        if type(m) is not _ModuleType:
            continue
        v = _module_dict(m).get(attr)
        if v is not None and _is_subclass(type(v), type):
            return v
    return None


def _is_subclass(t, cls):
    """Whether `cls` is on type `t`'s MRO (identity: no metaclass code runs)."""
    return cls is not None and any(k is cls for k in type.__dict__["__mro__"].__get__(t))


#: The roles of an object the walker can tell (the collector's kinds of memory,
#: collector/src/explain/kinds.rs): a torch.nn.Parameter; the `.grad` of a tensor the walk met;
#: reached through an optimizer's `state`. Anything else has no role.
ROLE_PARAMETER, ROLE_GRAD, ROLE_OPTIMIZER_STATE = "parameter", "grad", "optimizer_state"


def role_of(w, i, o, memo=None):
    """The role of object `o` (walk index i, or None for an object the walk did not reach), or
    None: its type is a Parameter; else it is some tensor's `.grad`; else its path from the
    root passes through an optimizer's instance attribute `state`. `memo`: whether each type met
    on the paths is an optimizer's, by id (the types stay alive with the walk's objects)."""
    finder = w.finder
    if _is_subclass(type(o), finder.param_cls):
        return ROLE_PARAMETER
    if id(o) in w.grads:
        return ROLE_GRAD
    if i is None or finder.optim_cls is None:
        return None
    objs, _ = w.chain(i)
    if memo is None:
        memo = {}
    for k in range(len(objs) - 2):
        t = type(objs[k])
        is_optim = memo.get(id(t))
        if is_optim is None:
            is_optim = memo[id(t)] = _is_subclass(t, finder.optim_cls)
        if not is_optim:
            continue
        d = _instance_dict(objs[k], type(objs[k]))
        st = d.get("state") if d is not None else None
        # The attribute is one step on (an instance whose values the GC visits directly) or
        # two (through its dictionary).
        if st is not None and (objs[k + 1] is st or (objs[k + 1] is d and objs[k + 2] is st)):
            return ROLE_OPTIMIZER_STATE
    return None


def _getset(o, name, descs=None):
    """Attribute `name` of `o` through a C-level descriptor (getset or member) found on its
    type's MRO, so that no Python code runs: (found, value). `descs`: a cache of the
    descriptors by (id(type), name), for types kept alive while it is used."""
    t = type(o)
    key = (id(t), name)
    desc = descs.get(key, _getset) if descs is not None else _getset
    if desc is _getset:
        found, desc = _mro_lookup(t, name)
        if not found or (type(desc) is not _GetSetType and type(desc) is not _MemberType):
            desc = None
        if descs is not None:
            descs[key] = desc
    if desc is None:
        return False, None
    try:
        return True, desc.__get__(o, t)
    except Exception:
        return False, None


class Graphs:
    """The autograd graphs of the tensors the walk found, each counted once: from a tensor's
    `grad_fn` along `next_functions` (C-level attributes of the nodes). Saved tensors are never
    unpacked (an unpack runs saved-tensor hooks: checkpointing's recomputation, save_on_cpu's
    copy back to the GPU); a tensor the GC finds held from native code is linked to a graph
    through its own `grad_fn` edge, and named by the node that takes it as an input."""

    def __init__(self, finder, deadline_ns=None):
        self.finder = finder
        self.deadline = deadline_ns
        #: id(node) -> graph number.
        self.of_node = {}
        #: Every node met, kept so that the ids above stay valid during the walk.
        self.nodes = []
        #: (id(node), output number) -> type name of the first node met that takes it as input.
        self.consumer = {}
        #: id(leaf tensor) -> (graph number, the name of the node that takes its gradient), from
        #: the graph's AccumulateGrad nodes (their C-level `variable`).
        self.leaf = {}
        #: Per graph: [walk index of the tensor it was reached from, node count].
        self.graphs = []
        self.cut = False

    def add(self, i, o):
        """Follows the graph of tensor `o` (walk index i), unless a graph met before has it."""
        gf, _ = self.finder.autograd_of(o)
        if gf is None or id(gf) in self.of_node or self.cut:
            return
        g = len(self.graphs)
        self.graphs.append([i, 0])
        self.of_node[id(gf)] = g
        self.nodes.append(gf)
        todo, count, descs = [gf], 0, self.finder.descs
        while todo:
            if count & CHECK_EVERY == 0 and self.deadline is not None and _clock() > self.deadline:
                self.cut = True
                break
            n = todo.pop()
            count += 1
            found, nf = _getset(n, "next_functions", descs)
            if not found or type(nf) is not tuple:
                continue
            name = _short_type(type(n))
            if name == "AccumulateGrad":
                got_var, var = _getset(n, "variable", descs)
                if got_var and var is not None and id(var) not in self.leaf:
                    self.leaf[id(var)] = (g, name)
                    self.nodes.append(var)
            for e in nf:
                if type(e) is not tuple or len(e) != 2 or e[0] is None:
                    continue
                c = e[0]
                k = (id(c), e[1])
                if k not in self.consumer:
                    self.consumer[k] = name
                if id(c) not in self.of_node:
                    self.of_node[id(c)] = g
                    self.nodes.append(c)
                    todo.append(c)
        self.graphs[g][1] = count

    def link(self, o):
        """(graph number, the name of the node it is saved for) of tensor `o` when its grad_fn
        lies in a graph met, else None."""
        gf, nr = self.finder.autograd_of(o)
        if gf is None:
            return self.leaf.get(id(o))
        g = self.of_node.get(id(gf))
        if g is None:
            return None
        return g, self.consumer.get((id(gf), nr)) or _short_type(type(gf))

    def clear(self):
        self.finder.descs.clear()
        self.of_node.clear()
        self.leaf.clear()
        self.nodes.clear()
        self.consumer.clear()


#: Most distinct stacks of PyTorch's live blocks listed, most (segment, stack) groups, most
#: frames kept per stack (innermost first), and most characters kept of a file or function name:
#: the result must fit the wire's largest frame.
MAX_BLOCK_STACKS = 2000
MAX_BLOCK_GROUPS = 20000
MAX_BLOCK_FRAMES = 48
MAX_NAME = 300
_U64, _I63 = 1 << 64, 1 << 63


def _torch_cuda(modules):
    """torch.cuda's namespace, or None when torch is not imported (never imported here)."""
    torch = modules.get("torch")
    if type(torch) is not _ModuleType:
        return None
    cuda = _module_dict(torch).get("cuda")
    if type(cuda) is not _ModuleType:
        return None
    return _module_dict(cuda)


#: The arguments `torch._C._cuda_memorySnapshot` took in this process (PyTorch 2.1 and later
#: take a pool id or None; earlier ones nothing), once known.
_SNAP_ARGS = []


def _torch_snapshot(modules, d):
    """PyTorch's snapshot of its caching allocator (`torch.cuda.memory._snapshot()`: a dict of
    "segments" and "device_traces"), or None; `d` is torch.cuda's namespace. Imports nothing:
    PyTorch turns the Python frames it recorded into text with `hasattr(torch, "_inductor")`,
    whose lazy `__getattr__` imports torch._inductor and torch._dynamo (seconds) unless the
    program imported them. So, unless it did, the snapshot is taken in a short-lived copy of the
    process (`_FORK`), through PyTorch's builtin `torch._C._cuda_memorySnapshot` (no bytecode
    runs in the copy; a stand-in without it has its Python `_snapshot` called there), and its
    result comes back through `marshal`."""
    torch = modules.get("torch")
    mem = d.get("memory")
    if type(torch) is not _ModuleType or type(mem) is not _ModuleType:
        return None
    td = _module_dict(torch)
    snap = _module_dict(mem).get("_snapshot")
    if "_inductor" in td or _FORK is None:
        # The check finds the module without importing it (the import sets the attribute);
        # or this file runs on its own.
        return snap() if type(snap) is _FunctionType else None
    c = td.get("_C")
    fn = _module_dict(c).get("_cuda_memorySnapshot") if type(c) is _ModuleType else None
    if type(fn) is not _BuiltinType:
        if type(snap) is not _FunctionType:
            return None
        fn, tries = snap, [()]
    else:
        tries = _SNAP_ARGS[:1] or [(None,), ()]
    for args in tries:
        data = _FORK(fn, args, _marshal_dumps, td)
        if type(data) is bytes:
            if fn is not snap and not _SNAP_ARGS:
                _SNAP_ARGS.append(args)
            s = _marshal_loads(data)
            return s if type(s) is dict else None
    return None


def _block_stack(fr):
    """The frames PyTorch recorded for a block as ((file, line, function), ...), innermost
    first, or None: only well-formed frames, names cut to MAX_NAME characters."""
    key = []
    for f in fr[:MAX_BLOCK_FRAMES]:
        if type(f) is dict:
            fn, ln, nm = f.get("filename"), f.get("line"), f.get("name")
            if type(fn) is str and type(ln) is int and 0 <= ln < 1 << 31 and type(nm) is str:
                key.append((fn[:MAX_NAME], ln, nm[:MAX_NAME]))
    return tuple(key) or None


def _torch_segments(modules, blocks_out=None):
    """PyTorch's caching allocator as its snapshot shows it (`_torch_snapshot`), or None when torch
    is not imported or CUDA not initialized (never initialized here): [[address, total bytes,
    allocated bytes]] of every segment (`total_size`, `allocated_size`); and, for the live
    blocks whose allocation PyTorch recorded a Python stack for (`frames`, innermost first:
    see `torch_history`), the stacks, each once, as [[file, line, function], ...], and the
    blocks grouped by segment and stack as [[segment address, blocks, bytes, stack index]]
    (blocks beyond the caps are left out). With `blocks_out` (a list), each such block listed
    is also appended to it as (address, bytes, stack index)."""
    d = _torch_cuda(modules)
    if d is None:
        return None
    is_init = d.get("is_initialized")
    if type(is_init) is not _FunctionType:
        return None
    try:
        if is_init() is not True:
            return None
        s = _torch_snapshot(modules, d)
        segs = s.get("segments") if type(s) is dict else None
        if segs is None:
            return None
        out, stacks, index, groups = [], [], {}, {}
        for s in segs if type(segs) is list else ():
            if type(s) is not dict:
                continue
            a, t, u = s.get("address"), s.get("total_size"), s.get("allocated_size")
            if not (type(a) is int and type(t) is int and type(u) is int):
                continue
            if not (0 <= a < _U64 and 0 <= t < _I63 and 0 <= u < _I63):
                continue
            out.append([a, t, u])
            bs = s.get("blocks")
            for b in bs if type(bs) is list else ():
                if type(b) is not dict or b.get("state") != "active_allocated":
                    continue
                fr, bn = b.get("frames"), b.get("size")
                if type(fr) is not list or not fr or type(bn) is not int or not 0 <= bn < _I63:
                    continue
                key = _block_stack(fr)
                if key is None:
                    continue
                i = index.get(key)
                if i is None:
                    if len(stacks) >= MAX_BLOCK_STACKS:
                        continue
                    i = index[key] = len(stacks)
                    stacks.append([list(f) for f in key])
                g = groups.get((a, i))
                if g is None:
                    if len(groups) >= MAX_BLOCK_GROUPS:
                        continue
                    g = groups[(a, i)] = [a, 0, 0, i]
                g[1] += 1
                g[2] += bn
                ba = b.get("address")
                if blocks_out is not None and type(ba) is int:
                    blocks_out.append((ba, bn, i))
        return out, stacks, list(groups.values())
    except Exception:
        return None


#: What `torch_history` found: not yet (torch not imported, or CUDA not initialized in it, or
#: its memory module not ready), turned on, left to the program (which records its own), or
#: not possible (PyTorch refused: its cudaMallocAsync backend keeps no record).
TORCH_NOT_YET, TORCH_ON, TORCH_PROGRAMS, TORCH_UNAVAILABLE = 0, 1, 2, 3


def torch_history():
    """Turns on PyTorch's record of the Python stack of each live block of its CUDA caching
    allocator (`torch.cuda.memory._record_memory_history(enabled="state", context="alloc",
    stacks="python")`: no trace of past events is kept, only the live blocks' stacks, which
    torch.cuda.memory_snapshot() then shows as `frames`), unless the program records its own
    history (a trace entry other than a snapshot's, or a live block with frames): that is left
    as it is. Returns one of the TORCH_* values. Never raises (a KeyboardInterrupt that arrives
    meanwhile is handed back to the program, as the signal it was: `_interrupt_main`); imports
    nothing; Python's garbage collector is held off while it runs, as in a walk."""
    enabled = _gc_isenabled()
    try:
        _gc_disable()
        return _torch_history()
    except KeyboardInterrupt:
        _interrupt_main()
        return TORCH_NOT_YET
    except BaseException:
        return TORCH_NOT_YET
    finally:
        if enabled:
            _gc_enable()


def _interrupt_main():
    """Hands a KeyboardInterrupt the walker caught back to the program. Through the shim, which
    makes the SIGINT again once the walker has returned: `_thread.interrupt_main()` called here
    makes Python's handler run at once, in the walker, whose caller then swallows it."""
    if _INTERRUPTED is not None:
        try:  # noqa: SIM105
            _INTERRUPTED()
        except BaseException:
            pass
        return
    th = _sys.modules.get("_thread")
    f = _module_dict(th).get("interrupt_main") if type(th) is _ModuleType else None
    if f is not None:
        # No contextlib: the walker imports nothing the program could see.
        try:  # noqa: SIM105
            f()
        except BaseException:
            pass


def _torch_history():
    d = _torch_cuda(_sys.modules)
    if d is None:
        return TORCH_NOT_YET
    is_init, mem = d.get("is_initialized"), d.get("memory")
    if type(is_init) is not _FunctionType or type(mem) is not _ModuleType:
        return TORCH_NOT_YET
    md = _module_dict(mem)
    record = md.get("_record_memory_history")
    if type(record) is not _FunctionType:
        return TORCH_NOT_YET
    try:
        if is_init() is not True:
            return TORCH_NOT_YET
        s = _torch_snapshot(_sys.modules, d)
    except Exception:
        return TORCH_NOT_YET
    if s is None:
        return TORCH_NOT_YET
    traces = s.get("device_traces") if type(s) is dict else None
    for t in traces if type(traces) is list else ():
        for e in t if type(t) is list else ():
            if type(e) is dict and e.get("action") != "snapshot":
                return TORCH_PROGRAMS
    segs = s.get("segments") if type(s) is dict else None
    for seg in segs if type(segs) is list else ():
        bs = seg.get("blocks") if type(seg) is dict else None
        for b in bs if type(bs) is list else ():
            if type(b) is dict and b.get("frames"):
                return TORCH_PROGRAMS
    try:
        record(enabled="state", context="alloc", stacks="python")
    except Exception:
        return TORCH_UNAVAILABLE
    return TORCH_ON


def _shape(shape):
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


#: JSON escapes: the quote, the backslash and the control characters.
_JSON_ESCAPES = {**{c: f"\\u{c:04x}" for c in range(0x20)}, ord('"'): '\\"', ord("\\"): "\\\\"}


def _jstr(s):
    return '"' + s.translate(_JSON_ESCAPES) + '"'


def to_json(x):
    """JSON text of nested dicts, lists, str, int, bool and None."""
    t = type(x)
    if x is None:
        return "null"
    if t is bool:
        return "true" if x else "false"
    if t is int:
        return str(x)
    if t is str:
        return _jstr(x)
    if t is list or t is tuple:
        return "[" + ",".join(to_json(v) for v in x) + "]"
    if t is dict:
        return "{" + ",".join(_jstr(k) + ":" + to_json(v) for k, v in x.items()) + "}"
    return _jstr(str(x))


def _is_module(m):
    """Whether `m` is a module, from its type's MRO (isinstance would read `m.__class__`: a
    proxy's `__getattribute__` or a mock's `__class__` property in sys.modules)."""
    return any(k is _ModuleType for k in type.__dict__["__mro__"].__get__(type(m)))


def roots_of(modules, frames, skip_ids=()):
    """The roots: every module's globals (`__main__` first), then every thread's frames along
    f_back (the walker's own frames left out). Each is (label, object)."""
    roots = []
    items = [(n, m) for n, m in list(modules.items()) if type(n) is str and _is_module(m)]
    items.sort(key=lambda nm: nm[0] != "__main__")
    for name, mod in items:
        try:
            d = _module_dict(mod)
        except Exception:
            continue
        if type(d) is dict:
            roots.append((("global", name), d))
    for tid, f in list(frames.items()):
        while f is not None:
            if f.f_code.co_filename != WALKER_FILE and id(f) not in skip_ids:
                roots.append((("frame", tid), f))
            f = f.f_back
    return roots


class _NativeIndex:
    """The ids a native walk reached (kept by the native core), for `in`."""

    __slots__ = ("_nat",)

    def __init__(self, nat):
        self._nat = nat

    def __contains__(self, k):
        return self._nat(_OP_CONTAINS, k)

    def clear(self):
        self._nat(_OP_FREE)


class _NativeParents:
    """Each queue position's parent in a native walk (kept by the native core), for `[i]`."""

    __slots__ = ("_nat",)

    def __init__(self, nat):
        self._nat = nat

    def __getitem__(self, i):
        return self._nat(_OP_PARENT, i)

    def clear(self):
        pass


class Walk:
    """One breadth-first walk from the roots: every reachable object once, with the object it
    was first reached from, so the path found to each is a shortest one."""

    def __init__(self, roots, finder, deadline_ns=None):
        self.roots = roots
        self.finder = finder
        self.deadline = deadline_ns
        self.queue = []
        self.parent = []
        self.label = {}
        #: Ids of the objects queued.
        self.index = set()
        self.found = []
        #: Ids of the `.grad` tensors of the tensors found (alive: each is queued).
        self.grads = set()
        self.cut = False

    def run(self):
        if _BFS is not None and _BFS(_OP_RESET, _ATOM_TYPES):
            self.core = "native"
            try:
                return self._run_native(_BFS)
            except Exception:
                # The native core failed (it sets RuntimeError, never crashes): walk again in
                # Python, from the start, within the same deadline.
                for c in (self.queue, self.label, self.found, self.grads):
                    c.clear()
                self.index, self.parent, self.cut = set(), [], False
                _BFS(_OP_FREE)
        self.core = "python"
        return self._run_python()

    def _run_native(self, nat):
        """The same walk as _run_python, in the same order, with the objects that need nothing
        but their referents expanded by the native core, which also keeps the ids reached and
        the parents."""
        queue, found, label = self.queue, self.found, self.label
        self.index, self.parent = _NativeIndex(nat), _NativeParents(nat)
        for lab, r in self.roots:
            if nat(_OP_ADD, r, -1):
                label[len(queue)] = lab
                queue.append(r)
        finder = self.finder
        info, grad_of, kind = finder.info, finder.grad_of, finder.kind
        plain, known = set(), set()
        frame, deadline, module = _FrameType, self.deadline, _MODULE_NOT_PLAIN
        i, n = 0, len(queue)
        while i < n:
            # The deadline is looked at where the Python loop looks at it.
            if i and i & CHECK_EVERY == 0 and deadline is not None and _clock() > deadline:
                self.cut = True
                break
            j = min((i | CHECK_EVERY) + 1, n)
            p = nat(_OP_RUN, queue, i, j, plain, known)
            if p < j:
                # An object the native core leaves to the walker: of a type not decided yet, or
                # one that may own GPU memory, or a frame.
                o = queue[p]
                t = type(o)
                if id(t) not in known:
                    known.add(id(t))
                    if not kind(t) and t is not frame and t is not module:
                        plain.add(id(t))
                        i, n = p, len(queue)
                        continue
                got = info(o)
                refs = _get_referents(o)
                if got is not None:
                    found.append((p, got))
                    g = grad_of(o)
                    if g is not None:
                        refs = [*refs, g]
                        self.grads.add(id(g))
                if t is frame:
                    refs = _frame_values(o) + refs
                nat(_OP_LINK, queue, refs, p)
                p += 1
            i, n = p, len(queue)
        self.visited = i
        return self

    def _run_python(self):
        queue, parent, index, found = self.queue, self.parent, self.index, self.found
        for label, r in self.roots:
            k = id(r)
            if k not in index:
                index.add(k)
                self.label[len(queue)] = label
                queue.append(r)
                parent.append(-1)
        finder = self.finder
        info, grad_of, kind = finder.info, finder.grad_of, finder.kind
        # Ids of the types whose objects need nothing but their referents (no GPU memory of their
        # own to look at, not frames): most of a heap, their referents fetched a chunk at a time.
        plain, known = set(), set()
        i, n = 0, len(queue)
        atoms, frame, _id, _type, module = _ATOMS, _FrameType, id, type, _MODULE_NOT_PLAIN
        add, push, push_parent = index.add, queue.append, parent.append
        while i < n:
            if i and i & CHECK_EVERY == 0 and self.deadline is not None and _clock() > self.deadline:
                self.cut = True
                break
            # A chunk ends where the deadline is next looked at.
            j = min((i | CHECK_EVERY) + 1, n)
            chunk = queue[i:j]
            tids = list(map(_id, map(type, chunk)))
            if not known.issuperset(tids):
                for o in chunk:
                    t = type(o)
                    if _id(t) not in known:
                        known.add(_id(t))
                        if not kind(t) and t is not frame and t is not module:
                            plain.add(_id(t))
            if plain.issuperset(tids):
                lists = list(map(_get_referents, chunk))
            else:
                # Objects in chunk order: plain runs in one go, the others one by one (info
                # before referents, as a per-object walk would).
                lists, a = [], 0
                for p in _where(list(map(_not, map(plain.__contains__, tids)))):
                    lists.extend(map(_get_referents, chunk[a:p]))
                    a = p + 1
                    o = chunk[p]
                    got = info(o)
                    refs = _get_referents(o)
                    if got is not None:
                        found.append((i + p, got))
                        # A tensor's .grad lives in C++ (no Python referent): followed by name.
                        g = grad_of(o)
                        if g is not None:
                            refs = [*refs, g]
                            self.grads.add(id(g))
                    if type(o) is frame:
                        # A running frame (3.11+) traverses nothing: the GC finds its locals
                        # through the thread's stack. Its locals are read by name instead.
                        refs = _frame_values(o) + refs
                    lists.append(refs)
                lists.extend(map(_get_referents, chunk[a:]))
            del chunk
            for p, refs in enumerate(lists, i):
                for r in refs:
                    # Leaves that own no GPU memory and lead to none (_ATOMS): not queued.
                    if _id(_type(r)) in atoms:
                        continue
                    k = _id(r)
                    if k in index:
                        continue
                    add(k)
                    push(r)
                    push_parent(p)
            n = len(queue)
            del lists
            i = j
        self.visited = i
        return self

    def chain(self, i):
        """The objects from the root to object i, root first."""
        out = []
        while i >= 0 and len(out) <= MAX_STEPS:
            out.append(i)
            i = self.parent[i]
        out.reverse()
        return [self.queue[j] for j in out], out[0]


def _frame_values(f):
    """The values of frame f's local variables (a dict up to 3.12; 3.13's f_locals is a proxy
    onto the frame)."""
    try:
        loc = f.f_locals
        if type(loc) is dict:
            return list(loc.values())
        return [loc[k] for k in list(loc.keys())]
    except Exception:
        return []


def _key_of(p, c, memo=None):
    """The first key of dict `p`, or index of list or tuple `p`, whose value is `c` (identity),
    or None. With `memo` (one dict for the paths of a walk), a container looked in a second
    time is indexed once: the paths of n objects through one container of n cost O(n), not
    O(n^2) (20,000 buffers in one dict took 15 s)."""
    seen = memo.get(id(p)) if memo is not None else None
    if type(seen) is dict:
        return seen.get(id(c))
    pairs = p.items() if type(p) is dict else enumerate(p)
    if seen is None:
        if memo is not None:
            memo[id(p)] = True
        for k, x in pairs:
            if x is c:
                return k
        return None
    first = memo[id(p)] = {}
    for k, x in pairs:
        if id(x) not in first:
            first[id(x)] = k
    return first.get(id(c))


def _fmt_key(k):
    if type(k) is str:
        return "'" + k + "'"
    if type(k) is int:
        return str(k)
    return "<" + _short_type(type(k)) + ">"


def _frame_desc(f):
    """A frame by its function, its file and its line: the file's whole `co_filename`, which the
    collector names as it names a frame's file (`words::short_path`), so that a local holder,
    a global holder and a location name one file alike."""
    co = f.f_code
    return f"function '{co.co_name}' ({co.co_filename}:{f.f_lineno})"


def _thread_name(tid, modules):
    th = modules.get("threading")
    if type(th) is not _ModuleType:
        return None
    active = _module_dict(th).get("_active")
    t = active.get(tid) if type(active) is dict else None
    d = _instance_dict(t, type(t)) if t is not None else None
    n = d.get("_name") if d is not None else None
    return n if type(n) is str else None


def _module_label(name, d):
    """A module as a person knows it: by its file's path (from `__file__`; for `__main__`, from
    which CPython removes it once the script has run, else from its loader's `path`), which the
    collector shortens as it shortens a frame's file (`words::short_path`), so that a holder and
    a location name one file alike, the script's or a module it imported; by its name when it
    has no file (a built-in or namespace module)."""
    f = d.get("__file__")
    if type(f) is not str and name == "__main__":
        loader = d.get("__loader__")
        ld = _instance_dict(loader, type(loader)) if loader is not None else None
        f = ld.get("path") if ld is not None else None
    if type(f) is str:
        return f
    return name


def step(objs, j, generic, finder=None, memo=None):
    """How objs[j] holds objs[j + 1], as a person reads it, or None when the next step says it;
    with `generic`, indexes and keys become `*` so that siblings share one line. `memo`: see
    _key_of."""
    p, c = objs[j], objs[j + 1]
    prev = objs[j - 1] if j > 0 else None
    tp = type(p)
    if tp is tuple and type(prev) is _FunctionType and prev.__closure__ is p:
        return None  # the cell's step names the closure
    if tp is list or tp is tuple:
        if generic:
            return _short_type(tp) + "[*]"
        i = _key_of(p, c, memo)
        return _short_type(tp) if i is None else f"{_short_type(tp)}[{i}]"
    if tp is dict:
        inst = prev is not None and type(prev) is not type and type(prev) is not _FrameType
        inst = inst and _instance_dict(prev, type(prev)) is p
        if generic and not inst and type(prev) is not type and type(prev) is not _FrameType:
            return "dict[*]"  # no key needed
        k = _key_of(p, c, memo)
        if type(prev) is type:
            return "{}.{}".format(_short_type(prev), k if type(k) is str else "?")
        if type(prev) is _FrameType:
            return f"{_frame_desc(prev)} local {_fmt_key(k)}"
        if inst:
            return "{}.{}".format(_short_type(type(prev)), k if type(k) is str else "?")
        return "dict[*]" if generic else f"dict[{_fmt_key(k)}]"
    if tp is set or tp is frozenset:
        return _short_type(tp) + "{*}"
    if tp is _FunctionType:
        if c is p.__closure__:
            return None
        return f"function {p.__qualname__}"
    if tp is _CellType:
        fn = objs[j - 2] if j > 1 else None
        if type(fn) is _FunctionType and fn.__closure__ is prev and prev is not None:
            for name, cell in zip(fn.__code__.co_freevars, prev, strict=False):
                if cell is p:
                    return f"function {fn.__qualname__} closure '{name}'"
        return "closure cell"
    if tp is _FrameType:
        try:
            loc = p.f_locals
            if loc is c:
                return None
            for k in list(loc.keys()):
                if loc[k] is c:
                    return f"{_frame_desc(p)} local {_fmt_key(k)}"
        except Exception:
            pass
        return _frame_desc(p)
    if tp is type:
        return None  # the dict step that follows names the attribute
    if finder is not None and finder.grad_of(p) is c:
        return _short_type(tp) + ".grad"
    d = _instance_dict(p, tp)
    if d is not None:
        if d is c:
            return None  # the dict step names the attribute
        k = _key_of(d, c, memo)
        if type(k) is str:
            return f"{_short_type(tp)}.{k}"
    return _short_type(tp)


def render(walk, i, generic, modules, memo=None):
    """The path from a root to object i, as a list of steps (the object itself not included).
    `memo`: see _key_of."""
    objs, root = walk.chain(i)
    label = walk.label.get(root, ("?", None))
    steps = []
    if label[0] == "global" and len(objs) > 1:
        k = _key_of(objs[0], objs[1], memo)
        steps.append(f"{_module_label(label[1], objs[0])} global {_fmt_key(k)}")
        start = 1
    else:
        start = 0
    for j in range(start, len(objs) - 1):
        s = step(objs, j, generic and j == len(objs) - 2, walk.finder, memo)
        if s is not None and (not steps or s != steps[-1]):
            steps.append(s)
    if label[0] == "frame":
        tname = _thread_name(label[1], modules)
        if tname and steps:
            steps[0] += f" in thread '{tname}'"
    return steps


def external_refs(objs):
    """For each of `objs` (a list), the references to it from outside the list's objects, as
    the cyclic GC counts them: its reference count, less the references from members of the
    list (gc.get_referents), less the walker's own (measured on a probe object held the same
    way). Positive: something outside the tracked objects holds it (native code, an
    extension's cache). Also, per object, the position of one member that refers to it (-1)."""
    ids = _ids(objs)
    internal, referrer = _count_internal(objs, ids)
    probe = []
    objs.append(probe)
    del probe
    counts = _refcounts(objs)
    objs.pop()
    base = counts.pop()
    return [rc - base - internal[n] for n, rc in enumerate(counts)], referrer


def _ids(objs):
    return {id(o): n for n, o in enumerate(objs)}


def _count_internal(objs, ids):
    internal = [0] * len(objs)
    referrer = [-1] * len(objs)
    for n, o in enumerate(objs):
        for r in _get_referents(o):
            m = ids.get(id(r))
            if m is not None:
                internal[m] += 1
                if referrer[m] < 0:
                    referrer[m] = n
    return internal, referrer


def _refcounts(objs):
    return [_getrefcount(o) for o in objs]


def _decide_types(finder, objs, tids):
    """Has the finder decide the type of each of `objs` (`tids`: their types' ids) it has not
    met yet. Holds none of them on return (a reference left here would count as a native
    holder's)."""
    new = set(tids).difference(finder.by_type)
    if new:
        for o in map(objs.__getitem__, _where(list(map(new.__contains__, tids)))):
            t = type(o)
            if id(t) in new:
                new.discard(id(t))
                finder.kind(t)
                if not new:
                    break


def _unreached(index, extra, finder):
    """The objects the GC tracks that the walk did not reach (nor the walker's own, `extra`),
    or [] when none of them owns GPU memory: then nothing is left to analyse, and the costly
    part (an id lookup in `index` per object, most of them cache misses) is skipped."""
    objs = _gc_get_objects()
    try:
        # Only objects of the types that may own GPU memory are looked up first; those types
        # are found by id (no type is hashed), each decided once by the finder.
        tids = list(map(id, map(type, objs)))
        by_type = finder.by_type
        _decide_types(finder, objs, tids)
        gpu = {k for k, v in by_type.items() if v[1]}
        cands = [
            o
            for o in map(objs.__getitem__, _where(list(map(gpu.__contains__, tids))))
            if id(o) not in index and id(o) not in extra
        ]
        del tids, gpu
        # Every candidate is looked at, not only up to the first that owns GPU memory: reading
        # an instance's __dict__ may make its dictionary (3.11, 3.12), and from then on the
        # instance's attributes are reached only through that dictionary, which must be among
        # the objects listed below.
        if sum(finder.info(o) is not None for o in cands) == 0:
            return []
        del cands
        # Looked at again: reading an instance's __dict__ above may have made its dictionary.
        objs.clear()
        objs = _gc_get_objects()
        return [o for o in objs if id(o) not in index and id(o) not in extra and id(type(o)) not in _ATOMS]
    finally:
        objs.clear()


def _find_in(finder, objs):
    out = []
    for n in range(len(objs)):
        got = finder.info(objs[n])
        if got is not None:
            out.append((n, got))
    return out


def analyse_unreached(walk, extra, graphs=None):
    """The GPU objects the walk did not reach from a root: held from native code (with the
    holder's type), or only by unreachable reference cycles. `extra`: ids of the walker's own
    objects. A tensor held from native code whose grad_fn lies in one of `graphs` is saved by
    autograd: (info, "autograd", (graph number, node name)). Returns [(info, how, steps,
    object)]."""
    rest = _unreached(walk.index, extra, walk.finder)
    try:
        return _analyse(walk, rest, graphs)
    finally:
        # The list may be part of a cycle (through a frame of this walk); emptied, it keeps
        # nothing alive, even with the program's GC disabled.
        rest.clear()


def _analyse(walk, rest, graphs=None):
    ext, referrer = external_refs(rest)
    finder = walk.finder
    for n in range(len(rest)):
        # The finder's per-type cache holds one more reference to each type it saw.
        if type(rest[n]) is type and id(rest[n]) in finder.by_type:
            ext[n] -= 1
    targets = _find_in(finder, rest)
    if not targets:
        return []
    pos = _ids(rest)
    parent = [-2] * len(rest)
    # The walker's own objects (this walk, its finder and their containers) are held by its
    # frames' locals, and its finder holds every type it decided: never a root, never a step of
    # a path (-3), else an unreached class's attribute would read as held by the walker.
    for k in _own_ids(walk, graphs):
        m = pos.get(k)
        if m is not None:
            parent[m] = -3
    queue = [n for n in range(len(rest)) if ext[n] > 0 and parent[n] == -2]
    for n in queue:
        parent[n] = -1
    i = 0
    while i < len(queue):
        for r in _get_referents(rest[queue[i]]):
            m = pos.get(id(r))
            if m is not None and parent[m] == -2:
                parent[m] = queue[i]
                queue.append(m)
        i += 1
    out = []
    for n, got in targets:
        if parent[n] == -2:
            out.append((got, "cycle", [_cycle_name(rest, referrer, n)], rest[n]))
            continue
        link = graphs.link(rest[n]) if graphs is not None else None
        if link is not None:
            out.append((got, "autograd", link, rest[n]))
            continue
        chain = []
        m = n
        while m >= 0 and len(chain) <= MAX_STEPS:
            chain.append(m)
            m = parent[m]
        chain.reverse()
        objs = [rest[m] for m in chain]
        steps = [f"held from native code: {_short_type(type(objs[0]))}"]
        for j in range(len(objs) - 1):
            s = step(objs, j, j == len(objs) - 2, walk.finder)
            if s is not None and s != steps[-1]:
                steps.append(s)
        out.append((got, "native", steps, rest[n]))
    return out


def _own_ids(walk, graphs):
    """Ids of the walker's own objects that may hold the program's: the walk, its finder (types
    and descriptors by type) and the graphs."""
    finder = walk.finder
    own = [walk, finder, finder.by_type, finder.descs]
    if graphs is not None:
        own += [graphs, graphs.leaf]
    return {id(o) for o in own}


def _cycle_name(rest, referrer, n):
    """`unreachable reference cycle (A <-> B)`: the types met going back from object n through
    the objects that refer to it, until one repeats."""
    seen = []
    cur = referrer[n]
    while cur >= 0 and cur not in seen and len(seen) < 64:
        seen.append(cur)
        cur = referrer[cur]
    if cur in seen:
        seen = seen[seen.index(cur) :]
    names = []
    for m in reversed(seen):
        t = type(rest[m])
        if t is dict or t is tuple or t is _CellType:
            continue
        nm = _short_type(t)
        if nm not in names:
            names.append(nm)
    return "unreachable reference cycle ({})".format(" \u2194 ".join(names or ["?"]))


def _mark_stacks(objects, blocks):
    """Gives each object (a result dict) whose memory starts inside one of PyTorch's live
    `blocks` ((address, bytes, stack index)) that block's stack index as `stack`: the line
    that allocated its memory."""
    if not blocks or not objects:
        return
    blocks.sort()
    order = sorted(range(len(objects)), key=lambda n: objects[n]["ptr"])
    b = 0
    for n in order:
        ptr = objects[n]["ptr"]
        while b < len(blocks) and blocks[b][0] + blocks[b][1] <= ptr:
            b += 1
        if b < len(blocks) and blocks[b][0] <= ptr:
            objects[n]["stack"] = blocks[b][2]


def walk(reason, number, cap_ms, emit):
    """Walks the heap and hands the result to `emit` as bytes: five u64 (reason, number,
    status, elapsed ns, objects visited) then the JSON result. Never raises."""
    t0 = _clock()
    status, visited, result = FAILED, 0, ""
    enabled = _gc_isenabled()
    try:
        _gc_disable()
        status, visited, result = _walk(t0 + cap_ms * 1000000 if cap_ms > 0 else None)
    except BaseException as e:
        if type(e) is KeyboardInterrupt:
            # A Ctrl-C that arrived during the walk: the program's.
            _interrupt_main()
        status, result = FAILED, to_json({"error": _short_type(type(e))})
    finally:
        if _BFS is not None:
            # The native core's set and parents of this walk, freed whatever happened (no
            # contextlib: the walker imports nothing the program could see).
            try:
                _BFS(_OP_FREE)
            except BaseException as e:
                if type(e) is KeyboardInterrupt:
                    _interrupt_main()
        if enabled:
            _gc_enable()
    try:
        head = b"".join(int(v).to_bytes(8, "little") for v in (reason, number, status, _clock() - t0, visited))
        emit(head + result.encode("utf-8", "replace"))
    except BaseException as e:
        if type(e) is KeyboardInterrupt:
            _interrupt_main()


def _walk(deadline):
    modules = _sys.modules
    frames = _current_frames()
    roots = roots_of(modules, frames)
    del frames
    w = Walk(roots, _Finder(modules), deadline).run()
    graphs = Graphs(w.finder, deadline)
    if not w.cut and w.finder.tensor_base is not None:
        for i, _got in w.found:
            graphs.add(i, w.queue[i])
    objects, holders, keys = [], [], {}
    found = [0]
    descs = {i: got["desc"] for i, got in w.found}
    graph_of_holder = {}
    optim_memo = {}

    def add(got, how, steps, i=None, o=None):
        found[0] += 1
        if o is not None and len(objects) < MAX_OBJECTS:
            role = role_of(w, i, o, optim_memo)
            if role is not None:
                got["role"] = role
        extra_fields = {}
        if how == "autograd":
            g, saved_for = steps
            root = graphs.graphs[g][0]
            steps = [*render(w, root, True, modules, memo), descs.get(root, "?")]
            key = (how, saved_for, *steps)
            extra_fields = {"saved_for": saved_for, "graphs": 0, "graph_nodes": 0}
        else:
            key = (how, *tuple(steps))
        h = keys.get(key)
        if h is None:
            h = keys[key] = len(holders)
            holders.append({"how": how, "path": list(steps), **extra_fields})
        if how == "autograd":
            seen = graph_of_holder.setdefault(h, set())
            if g not in seen:
                seen.add(g)
                holders[h]["graphs"] += 1
                holders[h]["graph_nodes"] += graphs.graphs[g][1]
        if len(objects) < MAX_OBJECTS:
            got["holder"] = h
            objects.append(got)

    memo = {}
    for i, got in w.found:
        add(got, "path", render(w, i, True, modules, memo), i, w.queue[i])
    # Emptied before the unreached objects are listed (it holds dictionary keys).
    memo.clear()
    if not w.cut and not graphs.cut:
        extra = {id(w.queue), id(w.parent), id(w.index), id(w.label), id(w.found), id(w.roots), id(objects)}
        extra.add(id(w.grads))
        extra.update((id(graphs.nodes), id(graphs.of_node), id(graphs.consumer), id(graphs.graphs)))
        extra.update(id(r) for r in roots)
        extra.add(id(roots))
        f = _getframe()
        while f is not None:
            if f.f_code.co_filename == WALKER_FILE:
                extra.add(id(f))
            f = f.f_back
        del f
        for got, how, steps, o in analyse_unreached(w, extra, graphs):
            add(got, how, steps, None, o)
    res = {"objects": objects, "holders": holders, "found": found[0], "core": w.core}
    blocks = []
    torch = _torch_segments(modules, blocks)
    _mark_stacks(objects, blocks)
    if torch is not None:
        res["torch_segments"], res["torch_stacks"], res["torch_blocks"] = torch
    cut = w.cut or graphs.cut
    graphs.clear()
    memo.clear()
    for c in (w.queue, w.parent, w.index, w.label, w.found, w.grads, roots):
        c.clear()
    if cut:
        res["cut_after"] = w.visited
    return (CUT if cut else COMPLETE), w.visited, to_json(res)
