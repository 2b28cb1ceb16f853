/*
 * Prints the CPython struct offsets that shim/src/python.rs reads, for the
 * interpreter whose headers it is compiled against (internal headers needed):
 *
 *   scripts/python-layouts/probe.sh /path/to/python3.X
 *
 * The output is compared by hand (or with `diff`) with the per-version tables
 * in shim/src/python.rs; each table row names the header and struct it comes
 * from.  Only offsetof/sizeof are used: nothing runs inside the interpreter.
 */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX >= 0x030B0000
#include <internal/pycore_frame.h>
#endif
#if PY_VERSION_HEX >= 0x030D0000
#include <internal/pycore_runtime.h>
#endif

#define P(name, value) printf("%-34s %zu\n", name, (size_t)(value))

int main(void)
{
    printf("version %s (0x%08x)\n", PY_VERSION, (unsigned)PY_VERSION_HEX);
    P("PyObject.ob_type", offsetof(PyObject, ob_type));
    P("PyVarObject.ob_size", offsetof(PyVarObject, ob_size));
    P("PyBytesObject.ob_sval", offsetof(PyBytesObject, ob_sval));
    P("sizeof(PyASCIIObject)", sizeof(PyASCIIObject));
    P("sizeof(PyCompactUnicodeObject)", sizeof(PyCompactUnicodeObject));
    P("PyASCIIObject.length", offsetof(PyASCIIObject, length));
    P("PyASCIIObject.state", offsetof(PyASCIIObject, state));
    {
        /* Bit positions of the state bit-field, found by setting each field. */
        PyASCIIObject o;
        memset(&o, 0, sizeof o);
        o.state.kind = 7;
        unsigned int w;
        memcpy(&w, &o.state, sizeof w);
        printf("%-34s 0x%x\n", "state.kind mask", w);
        memset(&o, 0, sizeof o);
        o.state.compact = 1;
        memcpy(&w, &o.state, sizeof w);
        printf("%-34s 0x%x\n", "state.compact mask", w);
        memset(&o, 0, sizeof o);
        o.state.ascii = 1;
        memcpy(&w, &o.state, sizeof w);
        printf("%-34s 0x%x\n", "state.ascii mask", w);
    }
    P("PyCodeObject.co_firstlineno", offsetof(PyCodeObject, co_firstlineno));
    P("PyCodeObject.co_filename", offsetof(PyCodeObject, co_filename));
    P("PyCodeObject.co_name", offsetof(PyCodeObject, co_name));
    P("PyCodeObject.co_linetable", offsetof(PyCodeObject, co_linetable));
#if PY_VERSION_HEX >= 0x030B0000
    P("PyCodeObject.co_qualname", offsetof(PyCodeObject, co_qualname));
    P("PyCodeObject.co_code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
#else
    P("PyCodeObject.co_code", offsetof(PyCodeObject, co_code));
#endif

#if PY_VERSION_HEX < 0x030B0000
    P("PyThreadState.frame", offsetof(PyThreadState, frame));
    P("PyFrameObject.f_back", offsetof(PyFrameObject, f_back));
    P("PyFrameObject.f_code", offsetof(PyFrameObject, f_code));
    P("PyFrameObject.f_lasti", offsetof(PyFrameObject, f_lasti));
#elif PY_VERSION_HEX < 0x030D0000
    P("PyThreadState.cframe", offsetof(PyThreadState, cframe));
    P("_PyCFrame.current_frame", offsetof(_PyCFrame, current_frame));
    P("_PyInterpreterFrame.f_code", offsetof(_PyInterpreterFrame, f_code));
    P("_PyInterpreterFrame.previous", offsetof(_PyInterpreterFrame, previous));
    P("_PyInterpreterFrame.prev_instr", offsetof(_PyInterpreterFrame, prev_instr));
    P("_PyInterpreterFrame.owner", offsetof(_PyInterpreterFrame, owner));
#if PY_VERSION_HEX < 0x030C0000
    P("_PyInterpreterFrame.is_entry", offsetof(_PyInterpreterFrame, is_entry));
#else
    P("FRAME_OWNED_BY_CSTACK", FRAME_OWNED_BY_CSTACK);
#endif
#else
    P("PyThreadState.current_frame", offsetof(PyThreadState, current_frame));
    P("_PyInterpreterFrame.f_executable", offsetof(_PyInterpreterFrame, f_executable));
    P("_PyInterpreterFrame.previous", offsetof(_PyInterpreterFrame, previous));
    P("_PyInterpreterFrame.instr_ptr", offsetof(_PyInterpreterFrame, instr_ptr));
    P("_PyInterpreterFrame.owner", offsetof(_PyInterpreterFrame, owner));
    P("FRAME_OWNED_BY_CSTACK", FRAME_OWNED_BY_CSTACK);
    P("_PyRuntimeState.debug_offsets", offsetof(_PyRuntimeState, debug_offsets));
    P("_Py_DebugOffsets.thread_state.current_frame", offsetof(_Py_DebugOffsets, thread_state.current_frame));
    P("_Py_DebugOffsets.interpreter_frame.previous", offsetof(_Py_DebugOffsets, interpreter_frame.previous));
    P("_Py_DebugOffsets.interpreter_frame.executable", offsetof(_Py_DebugOffsets, interpreter_frame.executable));
    P("_Py_DebugOffsets.interpreter_frame.instr_ptr", offsetof(_Py_DebugOffsets, interpreter_frame.instr_ptr));
    P("_Py_DebugOffsets.interpreter_frame.owner", offsetof(_Py_DebugOffsets, interpreter_frame.owner));
    P("_Py_DebugOffsets.code_object.filename", offsetof(_Py_DebugOffsets, code_object.filename));
    P("_Py_DebugOffsets.code_object.name", offsetof(_Py_DebugOffsets, code_object.name));
    P("_Py_DebugOffsets.code_object.qualname", offsetof(_Py_DebugOffsets, code_object.qualname));
    P("_Py_DebugOffsets.code_object.linetable", offsetof(_Py_DebugOffsets, code_object.linetable));
    P("_Py_DebugOffsets.code_object.firstlineno", offsetof(_Py_DebugOffsets, code_object.firstlineno));
    P("_Py_DebugOffsets.code_object.co_code_adaptive", offsetof(_Py_DebugOffsets, code_object.co_code_adaptive));
    P("_Py_DebugOffsets.pyobject.ob_type", offsetof(_Py_DebugOffsets, pyobject.ob_type));
    P("_Py_DebugOffsets.free_threaded", offsetof(_Py_DebugOffsets, free_threaded));
    P("_Py_DebugOffsets.bytes_object.ob_size", offsetof(_Py_DebugOffsets, bytes_object.ob_size));
    P("_Py_DebugOffsets.bytes_object.ob_sval", offsetof(_Py_DebugOffsets, bytes_object.ob_sval));
    P("_Py_DebugOffsets.unicode_object.state", offsetof(_Py_DebugOffsets, unicode_object.state));
    P("_Py_DebugOffsets.unicode_object.length", offsetof(_Py_DebugOffsets, unicode_object.length));
    P("_Py_DebugOffsets.unicode_object.asciiobject_size", offsetof(_Py_DebugOffsets, unicode_object.asciiobject_size));
#endif
    return 0;
}
