/* The command processor's two calls of every eager op as a CPython extension module (plugin_cpu._native imported as a module,
   the same loaded library that ctypes uses): an eager op's submit-and-wait and the synchronize after it are two native calls,
   and ctypes' argument conversion and libffi call were ~1.5k instructions each (a fast-call C function: ~0.1k). Built only
   when setup.py builds the library with CPU_NATIVE_PYTHON (Python's headers at hand); the library native.py builds at run
   time with the system compiler has no such entry, and the ctypes calls are used then. */
#ifdef CPU_NATIVE_PYTHON
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

int cmdproc_submit_wait(const void *s, uint64_t faults);
int cmdproc_idle_clean(uint64_t faults);

/* submit_wait(address of a cmdproc_submit, fault count) -> cmdproc_submit_wait's result; the GIL is released during the call
   (the host may run the submitted kernel on this thread), as ctypes does */
static PyObject *py_submit_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 2) return PyErr_Format(PyExc_TypeError, "submit_wait takes (submit address, fault count), got %zd arguments", nargs);
  void *s = PyLong_AsVoidPtr(args[0]);
  if (s == NULL) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "submit_wait: the submit address is 0");
  unsigned long long faults = PyLong_AsUnsignedLongLong(args[1]);
  if (faults == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
  int r;
  Py_BEGIN_ALLOW_THREADS
  r = cmdproc_submit_wait(s, (uint64_t)faults);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(r);
}

/* idle_clean(fault count) -> cmdproc_idle_clean's result as a bool (no wait: the GIL is kept) */
static PyObject *py_idle_clean(PyObject *self, PyObject *arg) {
  (void)self;
  unsigned long long faults = PyLong_AsUnsignedLongLong(arg);
  if (faults == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
  return PyBool_FromLong(cmdproc_idle_clean((uint64_t)faults));
}

static PyMethodDef methods[] = {
  {"submit_wait", (PyCFunction)(void (*)(void))py_submit_wait, METH_FASTCALL, "cmdproc_submit_wait(submit address, fault count)"},
  {"idle_clean", py_idle_clean, METH_O, "cmdproc_idle_clean(fault count)"},
  {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "The CPU plugin's native entries of every eager op.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
#endif
