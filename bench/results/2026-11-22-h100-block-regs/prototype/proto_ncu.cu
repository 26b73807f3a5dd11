// Prototype: block_regs (row in registers) beside block_smem and block_uncached.
// under graph replay (steady, like kt_kernel_bench; and L2-flushed, like
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <type_traits>
#include <vector>
#include "kernels/op_functors.cuh"
#include "kernels/row_kernels.cuh"
using namespace kt::kernels;
using namespace kt::kernels::internal;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

template <Op op, typename T, int pack, int bs, int impl>
void One(int64_t R, int64_t C) {
  using L = DirectLoad<T>;
  using S = std::conditional_t<op == Op::kSoftmax || op == Op::kReduceScale, DirectStore<T>, AffineStore<T>>;
  T *x, *y, *w, *b; float* stat;
  CK(cudaMalloc(&x, R * C * sizeof(T))); CK(cudaMalloc(&y, R * C * sizeof(T)));
  CK(cudaMalloc(&w, C * sizeof(T))); CK(cudaMalloc(&b, C * sizeof(T))); CK(cudaMalloc(&stat, R * 4));
  CK(cudaMemset(x, 0x3c, R * C * sizeof(T))); CK(cudaMemset(w, 0x3c, C * sizeof(T))); CK(cudaMemset(b, 0x1c, C * sizeof(T)));
  auto kernel = impl == 0 ? &BlockSmemRowKernel<op, const L, const S, pack, bs>
                          : &BlockRegsRowKernel<op, const L, const S, pack, bs, 16 / pack>;
  const size_t smem = impl == 0 ? C * sizeof(T) : 0;
  const RowParams prm{R, C, 1e-5f, nullptr, op == Op::kRmsNorm ? stat : nullptr, op == Op::kReduceScale ? stat : nullptr};
  for (int i = 0; i < 3; ++i) {
    if constexpr (op == Op::kSoftmax || op == Op::kReduceScale) {
      kernel<<<unsigned(R), bs, smem>>>(L{x, C}, S{y, C}, prm);
    } else {
      kernel<<<unsigned(R), bs, smem>>>(L{x, C}, S{y, C, w, op == Op::kRmsNorm ? nullptr : b}, prm);
    }
  }
  CK(cudaDeviceSynchronize());
}

int main() {
  One<Op::kLayerNorm, __half, 8, 256, 1>(1, 4096);
  One<Op::kRmsNorm, __half, 8, 256, 1>(1, 4096);
  One<Op::kReduceScale, __half, 8, 256, 1>(1, 4096);
  One<Op::kLayerNorm, __half, 8, 512, 0>(1, 4096);
  One<Op::kLayerNorm, float, 4, 256, 1>(1, 4096);
  return 0;
}
