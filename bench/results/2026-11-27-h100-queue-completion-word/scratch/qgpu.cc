// scratch: (1) back-to-back small Runs through the queue on CUDA IPC buffers;
// (2) launch/query micro-costs: runtime vs driver entry points.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include "client/daemon_client.h"
using namespace kt::client;
namespace pb = kerntune::v1;
cudaError_t LaunchEmptyKernel(cudaStream_t stream);
const void* EmptyKernelSymbol();
cudaError_t LaunchBigKernel(cudaStream_t stream);
const void* BigKernelSymbol();
struct Big { float v[56]; };
using Clock = std::chrono::steady_clock;
static double us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}
static double P(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1))];
}
template <class T> T Entry(const char* name) {
  void* f = nullptr; cudaDriverEntryPointQueryResult r{};
  cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &r);
  return reinterpret_cast<T>(f);
}
int Launch() {
  cudaSetDevice(0);
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  auto cuLaunch = Entry<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, unsigned, CUstream, void**, void**)>("cuLaunchKernel");
  auto cuQuery = Entry<CUresult (*)(CUstream)>("cuStreamQuery");
  cudaFunction_t fn; cudaGetFuncBySymbol(&fn, EmptyKernelSymbol());
  const int n = 20000;
  auto cuWrite = Entry<CUresult (*)(CUstream, CUdeviceptr, uint32_t, unsigned)>("cuStreamWriteValue32");
  if (cuWrite == nullptr) { printf("no cuStreamWriteValue32\n"); return 1; }
  uint32_t* flag = nullptr;
  cudaHostAlloc(reinterpret_cast<void**>(&flag), 64, cudaHostAllocMapped);
  *flag = 0;
  void* flag_dev_ptr = nullptr; cudaHostGetDevicePointer(&flag_dev_ptr, flag, 0);
  const CUdeviceptr flag_dev = reinterpret_cast<CUdeviceptr>(flag_dev_ptr);
  uint32_t flag_seq = 0;
  cudaEvent_t ev; cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  for (int round = 0; round < 3; ++round) {
    std::vector<double> a, b, c, d, e, f, g;
    for (int i = 0; i < n; ++i) {
      auto t0 = Clock::now(); LaunchEmptyKernel(s); auto t1 = Clock::now();
      while (cudaStreamQuery(s) == cudaErrorNotReady) {}
      auto t2 = Clock::now();
      a.push_back(us(t0, t1)); b.push_back(us(t0, t2));
    }
    for (int i = 0; i < n; ++i) {
      auto t0 = Clock::now();
      cuLaunch(reinterpret_cast<CUfunction>(fn), 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr);
      auto t1 = Clock::now();
      while (cuQuery(s) == CUDA_ERROR_NOT_READY) {}
      auto t2 = Clock::now();
      c.push_back(us(t0, t1)); d.push_back(us(t0, t2));
    }
    for (int i = 0; i < n; ++i) {
      auto t0 = Clock::now(); cudaStreamQuery(s); auto t1 = Clock::now();
      cuQuery(s); auto t2 = Clock::now();
      int dev; cudaGetDevice(&dev); auto t3 = Clock::now();
      cudaSetDevice(0); auto t4 = Clock::now();
      e.push_back(us(t0, t1)); f.push_back(us(t1, t2)); g.push_back(us(t3, t4));
    }
    // Host-memory flag written by the GPU after the kernel (stream memory op).
    std::vector<double> h, k, m, o;
    for (int i = 0; i < n; ++i) {
      const uint32_t want = ++flag_seq;
      auto t0 = Clock::now(); LaunchEmptyKernel(s); auto t1 = Clock::now();
      CUresult wr = cuWrite(reinterpret_cast<CUstream>(s), flag_dev, want, 0);
      auto t2 = Clock::now();
      if (wr != CUDA_SUCCESS) { printf("cuStreamWriteValue32 failed %d\n", wr); return 1; }
      while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != want) {}
      auto t3 = Clock::now();
      h.push_back(us(t0, t3)); k.push_back(us(t1, t2));
    }
    for (int i = 0; i < n; ++i) {
      const uint32_t want = ++flag_seq;
      auto t0 = Clock::now();
      cuLaunch(reinterpret_cast<CUfunction>(fn), 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr);
      cuWrite(reinterpret_cast<CUstream>(s), flag_dev, want, 0);
      while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != want) {}
      auto t3 = Clock::now();
      m.push_back(us(t0, t3));
    }
    for (int i = 0; i < n; ++i) {
      auto t0 = Clock::now(); LaunchEmptyKernel(s); auto t1 = Clock::now();
      cudaEventRecord(ev, s); auto t2 = Clock::now();
      while (cudaEventQuery(ev) == cudaErrorNotReady) {}
      auto t3 = Clock::now();
      o.push_back(us(t0, t3));
    }
    printf("round %d: flag: rt launch+write+spin p50 %.2f (write call %.2f) drv launch+write+spin p50 %.2f | event record+query p50 %.2f\n",
           round, P(h, .5), P(k, .5), P(m, .5), P(o, .5));
    {
      cudaFunction_t bigfn; cudaGetFuncBySymbol(&bigfn, BigKernelSymbol());
      cudaKernel_t bigk; cudaGetKernel(&bigk, BigKernelSymbol());
      Big x{}, y{}; void* params[] = {&x, &y};
      std::vector<double> r1, r2, r3;
      for (int i = 0; i < n; ++i) {
        auto t0 = Clock::now(); LaunchBigKernel(s); auto t1 = Clock::now();
        cuLaunch(reinterpret_cast<CUfunction>(bigfn), 1, 1, 1, 32, 1, 1, 0, s, params, nullptr); auto t2 = Clock::now();
        cuLaunch(reinterpret_cast<CUfunction>(bigk), 1, 1, 1, 32, 1, 1, 0, s, params, nullptr); auto t3 = Clock::now();
        r1.push_back(us(t0, t1)); r2.push_back(us(t1, t2)); r3.push_back(us(t2, t3));
        if (i % 64 == 0) cudaStreamSynchronize(s);
      }
      cudaStreamSynchronize(s);
      printf("round %d: 224+224-byte params: rt <<<>>> %.2f  cuLaunchKernel(CUfunction) %.2f  cuLaunchKernel(CUkernel) %.2f\n", round, P(r1, .5), P(r2, .5), P(r3, .5));
    }
    printf("round %d: rt launch p50 %.2f  launch+query p50 %.2f | drv launch p50 %.2f  launch+query p50 %.2f | "
           "idle cudaStreamQuery %.3f cuStreamQuery %.3f cudaSetDevice %.3f\n", round,
           P(a, .5), P(b, .5), P(c, .5), P(d, .5), P(e, .5), P(f, .5), P(g, .5));
  }
  return 0;
}
int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "launch") return Launch();
  DaemonClientOptions options;
  options.target = argv[1];
  const int n = atoi(argv[2]);
  const double gap_us = argc > 3 ? atof(argv[3]) : 0;
  auto client = DaemonClient::Connect(options);
  if (!client.ok()) { fprintf(stderr, "%s\n", client.status().ToString().c_str()); return 1; }
  void* dev = nullptr; cudaMalloc(&dev, 8192); cudaMemset(dev, 0, 8192);
  cudaIpcMemHandle_t h; cudaIpcGetMemHandle(&h, dev);
  auto buffer = client->RegisterCudaIpc(std::string(reinterpret_cast<char*>(&h), sizeof(h)), 0, 8192, 0, "q");
  if (!buffer.ok()) { fprintf(stderr, "%s\n", buffer.status().ToString().c_str()); return 1; }
  RunArgs args;
  args.op = pb::OP_SOFTMAX; args.dtype = pb::DTYPE_FLOAT16; args.rows = 1; args.cols = 1024;
  args.input = buffer->Tensor(0); args.output = buffer->Output(4096);
  const pb::RunRequest request = MakeRunRequest(args);
  std::vector<double> t, handler, launch, kl, wait, exec, val, res;
  t.reserve(n);
  for (int i = 0; i < n; ++i) {
    { auto g = Clock::now(); while (us(g, Clock::now()) < gap_us) {} }
    auto s = Clock::now();
    auto r = client->Run(request);
    auto e = Clock::now();
    if (!r.ok()) { fprintf(stderr, "%s\n", r.status().ToString().c_str()); return 1; }
    const auto& st = r->server_timing();
    t.push_back(us(s, e)); handler.push_back(st.handler_us()); launch.push_back(st.launch_us());
    kl.push_back(st.kernel_launch_us()); wait.push_back(st.gpu_wait_us()); exec.push_back(st.execute_us());
    val.push_back(st.validate_us()); res.push_back(st.resolve_us());
  }
  std::vector<double> outside(n), extra(n), rest(n);
  for (int i = 0; i < n; ++i) {
    outside[i] = t[i] - handler[i]; extra[i] = exec[i] - launch[i] - wait[i];
    rest[i] = handler[i] - exec[i] - val[i] - res[i];
  }
  printf("n %d p50 %.2f p99 %.2f | handler %.2f validate %.2f resolve %.2f execute %.2f launch %.2f kernel_launch %.2f "
         "gpu_wait %.2f | exec-extra %.2f handler-rest %.2f outside %.2f\n", n, P(t, .5), P(t, .99), P(handler, .5),
         P(val, .5), P(res, .5), P(exec, .5), P(launch, .5), P(kl, .5), P(wait, .5), P(extra, .5), P(rest, .5), P(outside, .5));
  return 0;
}
