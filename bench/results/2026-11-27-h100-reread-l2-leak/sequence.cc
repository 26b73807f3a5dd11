// Scratch: time configs of one point in a given order in one process: does a config's time depend on what ran before it?
// sequence OP DTYPE ROWS COLS [g:|e:]CONFIG...   (g: graph replay, e: events)
#include <cuda_runtime_api.h>
#include <cstdio>
#include <cstring>
#include <string>
#include "kernels/launch_config.h"
#include "tuner/gpu_backend.h"
#include "tuner/grid.h"
using namespace kt;
int main(int argc, char** argv) {
  auto backend = tuner::GpuBackend::Create(0);
  if (!backend.ok()) { std::printf("%s\n", backend.status().ToString().c_str()); return 1; }
  if (std::strcmp(argv[1], "copy") == 0) { (void)backend.value()->MeasureCopyGbps(); argv += 1; argc -= 1; }
  tuner::GridPoint p; p.group = "custom";
  p.op = std::string(argv[1]) == "layer_norm" ? kernels::Op::kLayerNorm : kernels::Op::kRmsNorm;
  p.dtype = std::string(argv[2]) == "float16" ? kernels::DType::kFloat16 : kernels::DType::kBFloat16;
  p.shape.rows = atol(argv[3]); p.shape.cols = atol(argv[4]); p.shape.inner = 1;
  auto m = backend.value()->Prepare(p);
  if (!m.ok()) { std::printf("%s\n", m.status().ToString().c_str()); return 1; }
  std::printf("%s %s %s %s:", argv[1], argv[2], argv[3], argv[4]);
  for (int i = 5; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "reset") { std::printf(" [reset %d]", (int)cudaCtxResetPersistingL2Cache()); cudaDeviceSynchronize(); continue; }
    if (a == "flush") { void* f; cudaMalloc(&f, 512 << 20); cudaMemset(f, 1, 512 << 20); cudaDeviceSynchronize(); cudaFree(f); std::printf(" [flush]"); continue; }
    tuner::MeasureOptions o; o.repetitions = 30; o.graph_replay = a[0] == 'g';
    if (o.graph_replay) o.repetitions = tuner::GraphRepetitions(30, 90);
    auto cm = (*m)->Measure(*kernels::ParseLaunchConfig(a.substr(2)), o);
    if (!cm.ok() || !cm->timing) { std::printf(" ERR"); continue; }
    std::printf(" %c:%s=%.2f", a[0], a.substr(2 + 6, 9).c_str(), cm->timing->median_us);
  }
  std::printf("\n");
  return 0;
}
