// Variant: norms with DirectLoad load the row's raw packs, then the weights,
// and only then widen the packs to float, so no conversion waits between
// the two loads.
namespace kt::kernels::internal {
template <Op op, class Load, class Store, int pack, int block_size, int kPacks>
__global__ void __launch_bounds__(block_size)
    BlockRegs3(Load load, Store store, RowParams p) {
  using T = typename std::remove_cv_t<Load>::storage_type;
  const int64_t num_packs = p.cols / pack;
  const int count =
      threadIdx.x < num_packs
          ? static_cast<int>((num_packs - threadIdx.x + block_size - 1) / block_size)
          : 0;
  const int64_t first_col = static_cast<int64_t>(threadIdx.x) * pack;
  constexpr int64_t kStride = static_cast<int64_t>(block_size) * pack;
  using Weights = WeightsOf<std::remove_cv_t<Store>>;
  using Reducer = BlockAllReducer<block_size, float>;
  __shared__ typename Reducer::Storage storage;
  Reducer reducer(storage);
  int64_t row = blockIdx.x;
  if (row >= p.rows) return;
  Pack<T, pack> raw[kPacks];
  const auto load_raw = [&](int64_t r) {
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      if (b < count) raw[b] = *reinterpret_cast<const Pack<T, pack>*>(load.src + r * load.row_stride + first_col + b * kStride);
    }
  };
  load_raw(row);
  typename Weights::template type<kPacks, pack> weights;
  if constexpr (Weights::kLoads) {
    store.template LoadWeights<kPacks, pack>(weights, first_col, kStride, count);
  }
  while (true) {
    float v[kPacks][pack];
#pragma unroll
    for (int b = 0; b < kPacks; ++b)
#pragma unroll
      for (int i = 0; i < pack; ++i) v[b][i] = ToFloat(raw[b].elem[i]);
    if constexpr (op == Op::kLayerNorm) {
      const float n = static_cast<float>(p.cols);
      float sum = 0.f;
#pragma unroll
      for (int b = 0; b < kPacks; ++b)
#pragma unroll
        for (int i = 0; i < pack; ++i)
          if (b < count) sum += v[b][i];
      const float mean = reducer.Run(sum, SumOp()) / n;
      float squares = 0.f;
#pragma unroll
      for (int b = 0; b < kPacks; ++b)
#pragma unroll
        for (int i = 0; i < pack; ++i)
          if (b < count) { const float d = v[b][i] - mean; squares = fmaf(d, d, squares); }
      const float inv_std = rsqrtf(reducer.Run(squares, SumOp()) / n + p.epsilon);
#pragma unroll
      for (int b = 0; b < kPacks; ++b)
        if (b < count) Normalize<pack>(v[b], mean, inv_std);
    } else {
      using Stat = ScaleByStat<op>;
      float stat = 0.f;
#pragma unroll
      for (int b = 0; b < kPacks; ++b)
#pragma unroll
        for (int i = 0; i < pack; ++i)
          if (b < count) stat = Stat::Accumulate(stat, v[b][i]);
      stat = reducer.Run(stat, typename Stat::Combine());
      const RowFactor factor = Stat::Factor(stat, p.cols, p.epsilon);
      if (threadIdx.x == 0) StoreRowStat<op>(p, row, stat, factor);
#pragma unroll
      for (int b = 0; b < kPacks; ++b)
        if (b < count) Stat::template Apply<pack>(v[b], factor);
    }
    if constexpr (Weights::kLoads) {
      store.template StoreLoaded<kPacks, pack>(v, weights, row, first_col, kStride, count);
    } else {
#pragma unroll
      for (int b = 0; b < kPacks; ++b)
        if (b < count) store.template store<pack>(v[b], row, first_col + b * kStride);
    }
    row += gridDim.x;
    if (row >= p.rows) break;
    load_raw(row);
  }
}
}  // namespace kt::kernels::internal
