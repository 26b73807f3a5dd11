// Prototype: one block per row, the row held in registers (at most kPacks
// packs per thread), weights loaded once before the row loop.
namespace kt::kernels::internal {
template <Op op, class Load, class Store, int pack, int block_size, int kPacks>
__global__ void __launch_bounds__(block_size)
    BlockRegsRowKernel(Load load, Store store, RowParams p) {
  const int64_t num_packs = p.cols / pack;
  const int count = threadIdx.x < num_packs
                        ? static_cast<int>((num_packs - threadIdx.x + block_size - 1) / block_size)
                        : 0;
  constexpr bool kFast = kFastMathFor<Load>;
  using Weights = WeightsOf<std::remove_cv_t<Store>>;
  typename Weights::template type<kPacks, pack> weights;
  const int64_t first_col = static_cast<int64_t>(threadIdx.x) * pack;
  constexpr int64_t kStride = static_cast<int64_t>(block_size) * pack;
  if constexpr (Weights::kLoads) {
    store.template LoadWeights<kPacks, pack>(weights, first_col, kStride, count);
  }
  using Reducer = BlockAllReducer<
      block_size, std::conditional_t<op == Op::kLayerNorm, WelfordStats, float>>;
  __shared__ typename Reducer::Storage storage;
  Reducer reducer(storage);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const auto row_load = BindRow(load, row);
    float v[kPacks][pack];
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      if (b < count) row_load.template load<pack>(v[b], first_col + b * kStride);
    }
    if constexpr (op == Op::kLayerNorm) {
      ShiftedSums sums;
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
        if (b < count) sums.Add<pack>(v[b]);
      }
      const WelfordStats stats = reducer.Run(sums.Stats(), WelfordMergeOp());
      const float inv_std = InvStd(stats, p.epsilon);
      if (threadIdx.x == 0) {
        if (p.mean != nullptr) p.mean[row] = stats.mean;
        if (p.inv_std != nullptr) p.inv_std[row] = inv_std;
      }
#pragma unroll
      for (int b = 0; b < kPacks; ++b) Normalize<pack>(v[b], stats.mean, inv_std);
    } else if constexpr (kScalesByStat<op>) {
      using Stat = ScaleByStat<op>;
      float stat = 0.f;
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
#pragma unroll
        for (int i = 0; i < pack; ++i) {
          if (b < count) stat = Stat::Accumulate(stat, v[b][i]);
        }
      }
      stat = reducer.Run(stat, typename Stat::Combine());
      const RowFactor factor = Stat::Factor(stat, p.cols, p.epsilon);
      if (threadIdx.x == 0) StoreRowStat<op>(p, row, stat, factor);
#pragma unroll
      for (int b = 0; b < kPacks; ++b) Stat::template Apply<pack>(v[b], factor);
    } else {
      float thread_max = -INFINITY;
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
#pragma unroll
        for (int i = 0; i < pack; ++i) {
          if (b < count) thread_max = fmaxf(thread_max, v[b][i]);
        }
      }
      const float row_max = reducer.Run(thread_max, MaxOp());
      float thread_sum = 0.f;
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
#pragma unroll
        for (int i = 0; i < pack; ++i) {
          if (b < count) thread_sum += Exp<kFast>(v[b][i] - row_max);
        }
      }
      const float row_sum = reducer.Run(thread_sum, SumOp());
#pragma unroll
      for (int b = 0; b < kPacks; ++b) FinishSoftmax<op, kFast, pack>(v[b], row_max, row_sum);
    }
    if constexpr (Weights::kLoads) {
      store.template StoreLoaded<kPacks, pack>(v, weights, row, first_col, kStride, count);
    } else {
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
        if (b < count) store.template store<pack>(v[b], row, first_col + b * kStride);
      }
    }
  }
}
}  // namespace kt::kernels::internal
