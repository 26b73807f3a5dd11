// Scratch: does a config's graph-replay time depend on where its buffers land?
#include <cuda_runtime_api.h>
#include <cstdio>
#include <string>
#include <vector>
#include "kernels/launch_config.h"
#include "tuner/gpu_backend.h"
#include "tuner/grid.h"
using namespace kt;
int main(int argc, char** argv) {
  int trials = argc > 1 ? atoi(argv[1]) : 6;
  auto backend = tuner::GpuBackend::Create(0);
  if (!backend.ok()) { std::printf("%s\n", backend.status().ToString().c_str()); return 1; }
  auto grid = tuner::StandardGrid({"llm"}, {kernels::Op::kLayerNorm, kernels::Op::kRmsNorm},
                                  {kernels::DType::kFloat16, kernels::DType::kBFloat16});
  struct Case { kernels::Op op; int64_t cols; std::vector<std::string> keys; };
  std::vector<Case> cases = {
      {kernels::Op::kLayerNorm, 8192, {"block_smem/b256/p8/g32/r1/w0", "block_reread/b512/p8/g32/r1/w0", "block_reread/b256/p8/g32/r1/w0"}},
      {kernels::Op::kRmsNorm, 5120, {"block_smem/b128/p8/g32/r1/w0", "block_reread/b512/p8/g32/r1/w0", "block_reread/b256/p8/g32/r1/w0"}}};
  for (const tuner::GridPoint& p : *grid) {
    if (p.shape.rows != 8192) continue;
    const Case* c = nullptr;
    for (const Case& k : cases) if (k.op == p.op && k.cols == p.shape.cols) c = &k;
    if (!c) continue;
    for (int t = 0; t < trials; ++t) {
      void* pad = nullptr;
      size_t pad_bytes = (size_t(t) * 6 + size_t(t) * t) << 20;
      if (pad_bytes) cudaMalloc(&pad, pad_bytes);
      auto m = backend.value()->Prepare(p);
      if (!m.ok()) { std::printf("%s\n", m.status().ToString().c_str()); return 1; }
      std::printf("%s %s %ld pad %zuMB:", kernels::OpName(p.op).data(), kernels::DTypeName(p.dtype).data(), long(p.shape.cols), pad_bytes >> 20);
      for (int r = 0; r < 2; ++r)
        for (const std::string& key : c->keys) {
          tuner::MeasureOptions o; o.repetitions = tuner::GraphRepetitions(30, 90); o.graph_replay = true;
          auto cm = (*m)->Measure(*kernels::ParseLaunchConfig(key), o);
          if (!cm.ok() || !cm->timing) { std::printf(" ERR"); continue; }
          std::printf(" %s=%.2f", key.substr(6, 9).c_str(), cm->timing->median_us);
        }
      std::printf("\n"); std::fflush(stdout);
      m->reset();
      if (pad) cudaFree(pad);
    }
  }
  return 0;
}
