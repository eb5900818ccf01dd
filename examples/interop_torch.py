#!/usr/bin/env python3
"""PyTorch and cubec exchange tensors through DLPack 1.x with no copy (docs/interop.md).

A PyTorch tensor is imported into cubec through DLPack (tensor.__dlpack__ with
cubec's stream named as the consumer's, the stream rule), a cubec kernel
doubles it into a buffer of cubec's own, and that buffer is handed back to
PyTorch as a DLPack tensor ordered on PyTorch's current stream. Pointer
equality proves no copy was made either way; the values are checked by PyTorch
on its stream; the zero-copy exchange is timed against a round trip through
the host. Drives libcubec.so through ctypes on the H200:

    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j
    python3 examples/interop_torch.py [path/to/libcubec.so]

Exits 0 when every check passed, 77 when CUDA or PyTorch is missing.
"""
import ctypes as C
import os
import statistics
import sys
import time

try:
    import torch
except ImportError:
    print("interop_torch: PyTorch missing (skipped)")
    sys.exit(77)

#===--- cubec's ABI, as declared in include/cube/*.h ---===#


class DLPackVersion(C.Structure):
    _fields_ = [("major", C.c_uint32), ("minor", C.c_uint32)]


class DLDevice(C.Structure):
    _fields_ = [("device_type", C.c_int32), ("device_id", C.c_int32)]


class DLDataType(C.Structure):
    _fields_ = [("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16)]


class DLTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("device", DLDevice), ("ndim", C.c_int32),
                ("dtype", DLDataType), ("shape", C.POINTER(C.c_int64)),
                ("strides", C.POINTER(C.c_int64)), ("byte_offset", C.c_uint64)]


class DLManagedTensorVersioned(C.Structure):
    pass


VERSIONED_DELETER = C.CFUNCTYPE(None, C.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [("version", DLPackVersion), ("manager_ctx", C.c_void_p),
                                     ("deleter", VERSIONED_DELETER), ("flags", C.c_uint64),
                                     ("dl_tensor", DLTensor)]


class DLManagedTensor(C.Structure):
    pass


LEGACY_DELETER = C.CFUNCTYPE(None, C.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", C.c_void_p),
                            ("deleter", LEGACY_DELETER)]

# The layouts are the standard's: check them before trusting any pointer.
assert C.sizeof(DLTensor) == 48 and C.sizeof(DLManagedTensorVersioned) == 80
assert C.sizeof(DLManagedTensor) == 64


class Handle(C.Structure):
    _fields_ = [("bits", C.c_uint64)]


class Binding(C.Structure):
    _fields_ = [("handle", Handle), ("offset", C.c_uint64), ("size", C.c_uint64)]


class Dim3(C.Structure):
    _fields_ = [("x", C.c_uint32), ("y", C.c_uint32), ("z", C.c_uint32)]


class KernelDesc(C.Structure):
    _fields_ = [("name", C.c_char_p), ("source", C.c_char_p), ("language", C.c_int),
                ("cube_dim", Dim3), ("dynamic_shared_memory", C.c_uint32),
                ("options", C.c_char_p), ("execution", C.c_int)]


class KernelBuffer(C.Structure):
    _fields_ = [("binding", Binding), ("io", C.c_int), ("rank", C.c_uint32),
                ("shape", C.c_void_p), ("strides", C.c_void_p), ("tensor_map", C.c_void_p)]


class KernelArgs(C.Structure):
    _fields_ = [("buffers", C.POINTER(KernelBuffer)), ("buffer_count", C.c_size_t),
                ("scalars", C.c_void_p), ("scalar_count", C.c_size_t)]


class CubeCount(C.Structure):
    _fields_ = [("dynamic", C.c_bool), ("count", Dim3), ("binding", Binding)]


class ClientOptions(C.Structure):
    _fields_ = [("backend", C.c_int), ("device_index", C.c_uint32), ("fault_plan", C.c_char_p),
                ("log_level", C.c_int), ("log", C.c_void_p), ("log_user_data", C.c_void_p)]


class DLPackLayout(C.Structure):
    _fields_ = [("dtype", DLDataType), ("rank", C.c_uint32), ("shape", C.c_int64 * 8),
                ("strides", C.c_int64 * 8), ("strides_given", C.c_bool),
                ("read_only", C.c_bool)]


class ExportInfo(C.Structure):
    _fields_ = [("address", C.c_uint64), ("size", C.c_uint64), ("backend", C.c_int),
                ("device_index", C.c_uint32), ("kind", C.c_int)]


# cubec's structs as a C compiler lays them out on x86-64 and aarch64 Linux.
assert (C.sizeof(KernelBuffer), C.sizeof(KernelDesc), C.sizeof(CubeCount)) == (56, 56, 40)
assert (C.sizeof(DLPackLayout), C.sizeof(ExportInfo), C.sizeof(ClientOptions)) == (144, 32, 40)

CUBE_BACKEND_CUDA, CUBE_IO_READ, CUBE_IO_WRITE, kDLCUDA, kDLFloat = 2, 1, 2, 2, 2
S = C.c_uint32(0)  # CUBE_STREAM_CURRENT: the calling thread's cubec stream

KERNEL = b"""
CUBE_KERNEL(torch_double, IN(float, x), OUT(float, y)) {
  uint64_t i = ABSOLUTE_POS;
  if (i < LEN(y)) y[i] = 2.0f * x[i];
}
"""

lib = None
pyapi = C.pythonapi
pyapi.PyCapsule_IsValid.argtypes = [C.py_object, C.c_char_p]
pyapi.PyCapsule_GetPointer.argtypes = [C.py_object, C.c_char_p]
pyapi.PyCapsule_GetPointer.restype = C.c_void_p
pyapi.PyCapsule_SetName.argtypes = [C.py_object, C.c_char_p]
pyapi.PyCapsule_New.argtypes = [C.c_void_p, C.c_char_p, C.c_void_p]
pyapi.PyCapsule_New.restype = C.py_object
# A capsule destructor gets the raw PyObject *: no reference games.
CAPSULE_DESTRUCTOR = C.CFUNCTYPE(None, C.c_void_p)
raw_is_valid = C.PYFUNCTYPE(C.c_int, C.c_void_p, C.c_char_p)(("PyCapsule_IsValid", pyapi))
raw_get_pointer = C.PYFUNCTYPE(C.c_void_p, C.c_void_p, C.c_char_p)(("PyCapsule_GetPointer", pyapi))


def check(status, what):
    if status:
        message = lib.cube_status_message(status).decode()
        lib.cube_status_release(status)
        raise RuntimeError(f"{what}: {message}")


def load(path):
    global lib
    lib = C.CDLL(path)
    for name in ("cube_client_create", "cube_kernel_create", "cube_launch", "cube_stream_native",
                 "cube_handle_create", "cube_handle_release", "cube_sync",
                 "cube_dlpack_import", "cube_dlpack_import_legacy", "cube_dlpack_export",
                 "cube_handle_export"):
        getattr(lib, name).restype = C.c_void_p
    lib.cube_status_message.argtypes = [C.c_void_p]
    lib.cube_status_message.restype = C.c_char_p
    lib.cube_status_release.argtypes = [C.c_void_p]
    lib.cube_client_options_initialize.argtypes = [C.POINTER(ClientOptions)]
    lib.cube_client_create.argtypes = [C.POINTER(ClientOptions), C.POINTER(C.c_void_p)]
    lib.cube_client_release.argtypes = [C.c_void_p]
    lib.cube_kernel_create.argtypes = [C.POINTER(KernelDesc), C.POINTER(C.c_void_p)]
    lib.cube_kernel_release.argtypes = [C.c_void_p]
    lib.cube_handle_binding.argtypes = [Handle]
    lib.cube_handle_binding.restype = Binding
    lib.cube_count_static.argtypes = [C.c_uint32] * 3
    lib.cube_count_static.restype = CubeCount
    lib.cube_launch.argtypes = [C.c_void_p, C.c_uint32, C.c_void_p, CubeCount,
                                C.POINTER(KernelArgs), C.c_int]
    lib.cube_stream_native.argtypes = [C.c_void_p, C.c_uint32, C.POINTER(C.c_void_p)]
    lib.cube_handle_create.argtypes = [C.c_void_p, C.c_uint32, C.c_uint64, C.POINTER(Handle)]
    lib.cube_handle_release.argtypes = [C.c_void_p, Handle]
    lib.cube_sync.argtypes = [C.c_void_p, C.c_uint32, C.c_void_p, C.c_size_t]
    lib.cube_dlpack_import.argtypes = [C.c_void_p, C.c_uint32, C.c_void_p, C.POINTER(Handle)]
    lib.cube_dlpack_import_legacy.argtypes = lib.cube_dlpack_import.argtypes
    lib.cube_dlpack_export.argtypes = [C.c_void_p, C.c_uint32, Binding, C.POINTER(DLPackLayout),
                                       C.c_void_p, C.POINTER(C.POINTER(DLManagedTensorVersioned))]
    lib.cube_handle_export.argtypes = [C.c_void_p, C.c_uint32, Binding, C.POINTER(C.c_void_p),
                                       C.POINTER(ExportInfo)]
    lib.cube_export_release.argtypes = [C.c_void_p]


def import_torch(client, tensor, native_stream):
    """A torch tensor as a cubec handle, zero copy; torch readies it on cubec's stream."""
    try:
        capsule = tensor.__dlpack__(stream=native_stream, max_version=(1, 0))
    except TypeError:  # a PyTorch without DLPack 1.x: the legacy struct
        capsule = tensor.__dlpack__(stream=native_stream)
    handle = Handle()
    if pyapi.PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        pointer = pyapi.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        pyapi.PyCapsule_SetName(capsule, b"used_dltensor_versioned")  # cubec owns it now
        check(lib.cube_dlpack_import(client, S, pointer, C.byref(handle)), "cube_dlpack_import")
    else:
        pointer = pyapi.PyCapsule_GetPointer(capsule, b"dltensor")
        pyapi.PyCapsule_SetName(capsule, b"used_dltensor")
        check(lib.cube_dlpack_import_legacy(client, S, pointer, C.byref(handle)),
              "cube_dlpack_import_legacy")
    return handle


@CAPSULE_DESTRUCTOR
def _versioned_capsule_destructor(capsule):
    # Never consumed: the producer (cubec) lets its tensor go.
    if raw_is_valid(capsule, b"dltensor_versioned"):
        t = C.cast(raw_get_pointer(capsule, b"dltensor_versioned"),
                   C.POINTER(DLManagedTensorVersioned))
        t.contents.deleter(t)


# Legacy wrappers live until the consumer calls their deleter, whatever
# happens to the CubeArray that made them.
_LEGACY_ALIVE = {}


class CubeArray:
    """A cubec buffer that PyTorch (torch.from_dlpack) takes as a tensor."""

    def __init__(self, client, handle, shape):
        self.client, self.handle, self.shape = client, handle, shape
        self.address = None

    def __dlpack_device__(self):
        return (kDLCUDA, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        layout = DLPackLayout(dtype=DLDataType(kDLFloat, 32, 1), rank=len(self.shape))
        for i, extent in enumerate(self.shape):
            layout.shape[i] = extent
        # The stream rule: cubec's work so far is ordered before the
        # consumer's later work on |stream| (None and -1: no ordering).
        consumer = None if stream in (None, -1) else C.c_void_p(stream)
        tensor = C.POINTER(DLManagedTensorVersioned)()
        check(lib.cube_dlpack_export(self.client, S, lib.cube_handle_binding(self.handle),
                                     C.byref(layout), consumer, C.byref(tensor)),
              "cube_dlpack_export")
        self.address = tensor.contents.dl_tensor.data
        if max_version is not None and max_version[0] >= 1:
            return pyapi.PyCapsule_New(C.cast(tensor, C.c_void_p), b"dltensor_versioned",
                                       C.cast(_versioned_capsule_destructor, C.c_void_p))
        # A consumer of the legacy struct: a wrapper whose deleter lets the
        # versioned tensor go.
        legacy = DLManagedTensor()
        legacy.dl_tensor = tensor.contents.dl_tensor

        @LEGACY_DELETER
        def deleter(_self, tensor=tensor, key=C.addressof(legacy)):
            tensor.contents.deleter(tensor)
            _LEGACY_ALIVE.pop(key, None)

        legacy.deleter = deleter
        _LEGACY_ALIVE[C.addressof(legacy)] = (legacy, deleter)
        return pyapi.PyCapsule_New(C.addressof(legacy), b"dltensor", None)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build", "libcubec.so")
    if not torch.cuda.is_available():
        print("interop_torch: CUDA unavailable (skipped)")
        return 77
    load(path)
    options = ClientOptions()
    lib.cube_client_options_initialize(C.byref(options))
    options.backend = CUBE_BACKEND_CUDA
    client = C.c_void_p()
    check(lib.cube_client_create(C.byref(options), C.byref(client)), "cube_client_create")
    kernel = C.c_void_p()
    desc = KernelDesc(name=b"torch_double", source=KERNEL, cube_dim=Dim3(256, 1, 1))
    check(lib.cube_kernel_create(C.byref(desc), C.byref(kernel)), "cube_kernel_create")
    native = C.c_void_p()
    check(lib.cube_stream_native(client, S, C.byref(native)), "cube_stream_native")

    n = 1 << 24
    torch.cuda.set_device(0)
    side = torch.cuda.Stream()  # the program's current stream, not the default one
    failures = 0
    with torch.cuda.stream(side):
        x = torch.arange(n, dtype=torch.float32, device="cuda")
        hx = import_torch(client, x, native.value)
        hy = Handle()
        check(lib.cube_handle_create(client, S, n * 4, C.byref(hy)), "cube_handle_create")
        buffers = (KernelBuffer * 2)(KernelBuffer(lib.cube_handle_binding(hx), CUBE_IO_READ),
                                     KernelBuffer(lib.cube_handle_binding(hy), CUBE_IO_WRITE))
        args = KernelArgs(buffers, 2, None, 0)
        check(lib.cube_launch(client, S, kernel, lib.cube_count_static(n // 256, 1, 1),
                              C.byref(args), 0), "cube_launch")
        # The imported tensor's memory is cubec's input: the same pointer.
        info = ExportInfo()
        ex = C.c_void_p()
        check(lib.cube_handle_export(client, S, lib.cube_handle_binding(hx), C.byref(ex),
                                     C.byref(info)), "cube_handle_export")
        lib.cube_export_release(ex)
        same_in = info.address == x.data_ptr()
        # Back to PyTorch, on its current stream (torch passes it to __dlpack__).
        array = CubeArray(client, hy, (n,))
        y = torch.from_dlpack(array)
        same_out = y.data_ptr() == array.address
        right = bool(torch.equal(y, x * 2))
        print(f"interop_torch: import zero-copy (pointer equality): {same_in}; export zero-copy: "
              f"{same_out}; values right on PyTorch's stream: {right}")
        failures += (not same_in) + (not same_out) + (not right)

        # The cost of the exchange against a round trip through the host.
        def zero_copy():
            h = import_torch(client, x, native.value)
            t = torch.from_dlpack(CubeArray(client, hy, (n,)))
            check(lib.cube_handle_release(client, h), "cube_handle_release")
            return t

        def host_round_trip():
            return x.cpu().cuda()

        for name, fn in (("DLPack both ways", zero_copy), ("host round trip", host_round_trip)):
            times = []
            for _ in range(20):
                torch.cuda.synchronize()
                start = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            print(f"interop_torch: {name} of {n * 4 >> 20} MiB: median "
                  f"{statistics.median(times) * 1e6:.1f} us")
        del y
    check(lib.cube_handle_release(client, hx), "cube_handle_release")
    check(lib.cube_handle_release(client, hy), "cube_handle_release")
    check(lib.cube_sync(client, S, None, 0), "cube_sync")  # x's deleter has run by here
    torch.cuda.synchronize()
    lib.cube_kernel_release(kernel)
    lib.cube_client_release(client)
    print("interop_torch:", "ok" if failures == 0 else f"{failures} check(s) FAILED")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
