import ctypes, sys, time
import torch
N = 3000
def t(name, fn, n=N):
    for _ in range(200): fn()
    ts = []
    for _ in range(n):
        a = time.perf_counter_ns(); fn(); ts.append(time.perf_counter_ns() - a)
    ts.sort()
    print("%-44s p50 %8.2f us  p99 %8.2f us" % (name, ts[len(ts)//2] / 1e3, ts[int(0.99*(len(ts)-1))] / 1e3), flush=True)
dev = torch.device("cuda", 0)
x = torch.empty(1024, device=dev)
torch.cuda.synchronize()
cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
cuda.cuPointerGetAttributes.argtypes = [ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
cuda.cuIpcGetMemHandle.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
cuda.cuCtxGetCurrent.argtypes = [ctypes.c_void_p]
t("current_stream(dev).synchronize", lambda: torch.cuda.current_stream(dev).synchronize())
t("current_stream(0).synchronize", lambda: torch.cuda.current_stream(0).synchronize())
t("current_stream()", lambda: torch.cuda.current_stream())
t("_C._cuda_getCurrentRawStream(0)", lambda: torch._C._cuda_getCurrentRawStream(0))
t("_C._cuda_getCurrentStream(0)", lambda: torch._C._cuda_getCurrentStream(0))
raw = torch._C._cuda_getCurrentRawStream(0)
print("raw current stream", raw)
t("cuStreamSynchronize(raw)", lambda: cuda.cuStreamSynchronize(raw))
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    r2 = torch._C._cuda_getCurrentRawStream(0)
t("cuStreamSynchronize(side stream)", lambda: cuda.cuStreamSynchronize(r2))
ctx = ctypes.c_void_p()
t("cuCtxGetCurrent", lambda: cuda.cuCtxGetCurrent(ctypes.byref(ctx)))
A = (ctypes.c_int * 4)(11, 7, 9, 10)
start = ctypes.c_uint64(); bid = ctypes.c_uint64(); ordn = ctypes.c_int(); legacy = ctypes.c_int()
D = (ctypes.c_void_p * 4)(ctypes.addressof(start), ctypes.addressof(bid), ctypes.addressof(ordn), ctypes.addressof(legacy))
t("cuPointerGetAttributes x4", lambda: cuda.cuPointerGetAttributes(4, A, D, x.data_ptr()))
print("attrs rc", cuda.cuPointerGetAttributes(4, A, D, x.data_ptr()), hex(start.value), x.data_ptr() - start.value, bid.value, ordn.value, legacy.value)
h = ctypes.create_string_buffer(64)
t("cuIpcGetMemHandle", lambda: cuda.cuIpcGetMemHandle(h, start.value))
h1 = h.raw; cuda.cuIpcGetMemHandle(h, start.value); print("same handle twice", h1 == h.raw)
t("torch.empty(1024)", lambda: torch.empty(1024, device=dev))
def share_new():
    y = torch.empty(1024, device=dev); y.untyped_storage()._share_cuda_()
t("torch.empty + _share_cuda_", share_new, n=500)
def drv_new():
    y = torch.empty(1024, device=dev); cuda.cuPointerGetAttributes(4, A, D, y.data_ptr())
t("torch.empty + cuPointerGetAttributes", drv_new)
y = torch.empty(1024, device=dev); st = y.untyped_storage()
info = st._share_cuda_()
print("share handle == driver handle", bytes(info[1])[-64:] == (cuda.cuPointerGetAttributes(4, A, D, y.data_ptr()), cuda.cuIpcGetMemHandle(h, start.value), h.raw)[2])
