// Where does an IPC mapping of GPU 0's allocation, opened on GPU 1, say it lives?
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <sys/wait.h>

typedef CUresult (*GetAttr)(void*, CUpointer_attribute, CUdeviceptr);
int main() {
  int fds[2]; pipe(fds);
  pid_t child = fork();
  if (child == 0) {
    close(fds[1]);
    cudaIpcMemHandle_t h; read(fds[0], &h, sizeof h);
    void* fn = nullptr; cudaDriverEntryPointQueryResult q;
    cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &fn, 12000, cudaEnableDefault, &q);
    GetAttr get = (GetAttr)fn;
    for (int dev : {1, 0}) for (unsigned flags : {(unsigned)cudaIpcMemLazyEnablePeerAccess, (unsigned)cudaIpcMemLazyEnablePeerAccess}) {
      cudaSetDevice(dev);
      void* p = nullptr;
      cudaError_t e = cudaIpcOpenMemHandle(&p, h, flags);
      printf("open on dev %d flags %u: %s\n", dev, flags, cudaGetErrorName(e));
      if (e != cudaSuccess) { cudaGetLastError(); continue; }
      cudaPointerAttributes a{}; cudaPointerGetAttributes(&a, p);
      int ord = -7; CUresult r = get(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)p);
      CUcontext ctx = nullptr; get(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)p);
      unsigned long long bufid = 0; get(&bufid, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)p);
      printf("   runtime attr device %d type %d; driver DEVICE_ORDINAL %d (r=%d); ctx %p\n", a.device, (int)a.type, ord, (int)r, (void*)ctx);
      cudaError_t d = cudaDeviceDisablePeerAccess(1 - dev);
      printf("   disable peer access to %d after open: %s\n", 1 - dev, cudaGetErrorName(d));
      cudaGetLastError();
      cudaError_t c = cudaIpcCloseMemHandle(p);
      printf("   close: %s\n", cudaGetErrorName(c));
      cudaGetLastError();
    }
    return 0;
  }
  close(fds[0]);
  cudaSetDevice(0);
  void* d; cudaMalloc(&d, 1 << 20);
  cudaIpcMemHandle_t h; cudaIpcGetMemHandle(&h, d);
  write(fds[1], &h, sizeof h);
  int status; waitpid(child, &status, 0);
  int can = 0; cudaDeviceCanAccessPeer(&can, 1, 0);
  printf("canAccessPeer(1,0)=%d\n", can);
  return 0;
}
