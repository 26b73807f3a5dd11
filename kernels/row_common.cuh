// Device building blocks shared by every kernel family: storage types and
// packs, load/store functors (I/O separated from compute, so fusions are new
// functors, not new kernels) and the block all-reduce. The per-op math is
// in op_math.cuh.
#ifndef KERNTUNE_KERNELS_ROW_COMMON_CUH_
#define KERNTUNE_KERNELS_ROW_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/op_math.cuh"
#include "kernels/types.h"

namespace kt::kernels::internal {

template <DType dtype>
struct StorageOf;
template <>
struct StorageOf<DType::kFloat32> {
  using type = float;
};
template <>
struct StorageOf<DType::kFloat16> {
  using type = __half;
};
template <>
struct StorageOf<DType::kBFloat16> {
  using type = __nv_bfloat16;
};

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <class Load>
constexpr bool kFastMathFor = sizeof(typename Load::storage_type) < 4;

// N elements moved as one vector access (N * sizeof(T) <= 16 bytes).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T elem[N];
};

// A pack to float and back, two elements at a time for 16-bit packs
// (__half22float2, __floats2half2_rn): narrowing a pair is one F2FP
// instruction, where narrowing each element and packing the halves takes a
// PRMT more. Both round to nearest even, so results are bit-identical. The
// functors below use them when `paired` (block_regs does): LayerNorm
// float16 at 1-64 rows x 4096 ran 1.08-1.09x faster. In block_smem the same
// change was 1.03x faster at 4096 columns but 0.93x at 32768 (the store
// loop's code generation changed), so the other kernels keep per-element
// conversions (bench/results/2026-11-22-h100-paired-conversions/).
template <typename T, int N>
__device__ __forceinline__ void Widen(const Pack<T, N>& pack, float* dst) {
  if constexpr (std::is_same_v<T, __half> && N % 2 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      const float2 pair = __half22float2(*reinterpret_cast<const __half2*>(&pack.elem[i]));
      dst[i] = pair.x;
      dst[i + 1] = pair.y;
    }
  } else if constexpr (std::is_same_v<T, __nv_bfloat16> && N % 2 == 0) {
    // A bfloat16 is a float's upper half: shift and mask the pair's word.
    // __bfloat1622float2 gives the same bits, but ptxas held block_reread's
    // LayerNorm at 38-48 registers with it where float16 took 32-34 (this:
    // 32-34), a block fewer per SM.
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      unsigned word;
      memcpy(&word, &pack.elem[i], sizeof(word));
      dst[i] = __uint_as_float(word << 16);
      dst[i + 1] = __uint_as_float(word & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = ToFloat(pack.elem[i]);
  }
}
template <typename T, int N>
__device__ __forceinline__ Pack<T, N> Narrow(const float* src) {
  Pack<T, N> pack;
  if constexpr (std::is_same_v<T, __half> && N % 2 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      *reinterpret_cast<__half2*>(&pack.elem[i]) = __floats2half2_rn(src[i], src[i + 1]);
    }
  } else if constexpr (std::is_same_v<T, __nv_bfloat16> && N % 2 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      *reinterpret_cast<__nv_bfloat162*>(&pack.elem[i]) =
          __floats2bfloat162_rn(src[i], src[i + 1]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) pack.elem[i] = FromFloat<T>(src[i]);
  }
  return pack;
}

// Where row `row` of a grouped tensor starts, in elements (op_args.h's
// RowLayout with group_rows > 0, a per-head view: group_rows heads per
// token): (row / group_rows) * group_stride + (row % group_rows) * stride.
// A 32-bit division when both fit (always, in practice). Only the functors
// instantiated `grouped` pay for it: in the others, rows start at row *
// row_stride as before, since the division's registers made LayerNorm's
// block_regs instances spill (up to 48 bytes at float32 x 1024 threads).
__device__ __forceinline__ int64_t GroupedRowOffset(int64_t row, int64_t stride,
                                                    int64_t group_rows, int64_t group_stride) {
  if (((static_cast<uint64_t>(row) | static_cast<uint64_t>(group_rows)) >> 32) == 0) {
    const uint32_t r = static_cast<uint32_t>(row);
    const uint32_t g = static_cast<uint32_t>(group_rows);
    return static_cast<int64_t>(r / g) * group_stride + static_cast<int64_t>(r % g) * stride;
  }
  return (row / group_rows) * group_stride + (row % group_rows) * stride;
}

// Reads packs of a (rows, cols) row-major tensor and widens them to float.
// `cache_type` is what the shared-memory kernel may cache instead of float:
// the storage type, exactly, since float(T) -> T round trips are exact.
// `paired`: widen 16-bit pairs at once (Widen).
// `grouped`: rows placed by GroupedRowOffset (group_rows, group_stride);
// else row r at r * row_stride (the split-row kernels, which index src
// themselves, serve contiguous rows only: row_stride cols).
template <typename T, bool paired = false, bool grouped = false>
struct DirectLoad {
  using storage_type = T;
  using cache_type = T;
  const T* __restrict__ src;
  int64_t row_stride;
  int64_t group_rows = 0;
  int64_t group_stride = 0;
  __device__ __forceinline__ int64_t RowStart(int64_t row) const {
    if constexpr (grouped) {
      return GroupedRowOffset(row, row_stride, group_rows, group_stride);
    } else {
      return row * row_stride;
    }
  }
  template <int N>
  __device__ __forceinline__ void load(float* dst, int64_t row,
                                       int64_t col) const {
    WidenPack<N>(LoadPack<N>(row, col), dst);
  }
  // The pack as stored, and its widening: what load does in two steps, for
  // a kernel that keeps the raw pack too (block_smem's cache).
  template <int N>
  __device__ __forceinline__ Pack<T, N> LoadPack(int64_t row, int64_t col) const {
    return *reinterpret_cast<const Pack<T, N>*>(src + RowStart(row) + col);
  }
  template <int N>
  static __device__ __forceinline__ void WidenPack(const Pack<T, N>& pack, float* dst) {
    if constexpr (paired) {
      Widen<T, N>(pack, dst);
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) dst[i] = ToFloat(pack.elem[i]);
    }
  }
};

// A load functor bound to one row: load<N>(dst, col). Functors with work to
// do once per row (MaskedScaleLoad's query index) provide Row(row) returning
// such a view; for the others the view just remembers the row, and compiles
// to exactly the load(dst, row, col) calls it forwards to. Kernels bind a row
// once, then load its packs through the view.
template <class Load>
struct RowBoundLoad {
  Load functor;
  int64_t row;
  template <int N>
  __device__ __forceinline__ void load(float* dst, int64_t col) const {
    functor.template load<N>(dst, row, col);
  }
};

template <class Load, class = void>
struct HasRowView : std::false_type {};
template <class Load>
struct HasRowView<Load, std::void_t<decltype(std::declval<const Load&>().Row(int64_t{0}))>>
    : std::true_type {};

template <class Load>
__device__ __forceinline__ auto BindRow(const Load& load, int64_t row) {
  if constexpr (HasRowView<Load>::value) {
    return load.Row(row);
  } else {
    return RowBoundLoad<Load>{load, row};
  }
}

// The built-in unsigned vector type of `bytes` bytes, which the
// cache-hinted load and store intrinsics (__ldcs, __stcs, __stwb) take.
template <int bytes>
struct RawVector;
template <>
struct RawVector<2> {
  using type = unsigned short;
};
template <>
struct RawVector<4> {
  using type = unsigned int;
};
template <>
struct RawVector<8> {
  using type = uint2;
};
template <>
struct RawVector<16> {
  using type = uint4;
};

// Narrows float results to the storage type and writes them as one pack;
// `paired`: 16-bit pairs at once (Narrow).
template <typename T, bool paired = false, bool grouped = false>
struct DirectStore {
  T* __restrict__ dst;
  int64_t row_stride;
  int64_t group_rows = 0;  // as DirectLoad's
  int64_t group_stride = 0;
  __device__ __forceinline__ int64_t RowStart(int64_t row) const {
    if constexpr (grouped) {
      return GroupedRowOffset(row, row_stride, group_rows, group_stride);
    } else {
      return row * row_stride;
    }
  }
  template <int N>
  __device__ __forceinline__ void store(const float* src, int64_t row,
                                        int64_t col) const {
    *reinterpret_cast<Pack<T, N>*>(dst + RowStart(row) + col) = Narrowed<N>(src);
  }
  // The same pack as one vector store instruction (__stwb: st.global.wb,
  // the default policy). A kernel whose plain pack stores compile to one
  // store per element uses it: SplitRowKernel's were 8 st.global.u16 per
  // 16-byte half pack, 4 st.global.f32 per float pack, and a raw vector
  // word or __builtin_assume_aligned was split the same way; the vector
  // stores made it 11-16% faster at 2048 rows x vocab. The block kernels'
  // one-pack-per-step stores off the pack grid split too (BlockRowStore).
  // The other kernels' plain stores are vector stores already, and there
  // the asm's memory clobber cost up to 9% (warp kernel, RMSNorm float16 x
  // 64; bench/results/2026-11-26-h100-split-row-vector-stores/).
  template <int N>
  __device__ __forceinline__ void store_as_one(const float* src, int64_t row,
                                               int64_t col) const {
    const Pack<T, N> pack = Narrowed<N>(src);
    typename RawVector<sizeof(pack)>::type raw;
    memcpy(&raw, &pack, sizeof(raw));
    __stwb(reinterpret_cast<decltype(raw)*>(dst + RowStart(row) + col), raw);
  }

 private:
  template <int N>
  __device__ __forceinline__ Pack<T, N> Narrowed(const float* src) const {
    if constexpr (paired) {
      return Narrow<T, N>(src);
    } else {
      Pack<T, N> pack;
#pragma unroll
      for (int i = 0; i < N; ++i) pack.elem[i] = FromFloat<T>(src[i]);
      return pack;
    }
  }
};

// Whether a load or store functor touches nothing but the (rows, cols)
// tensor itself, element (row, col) at row * cols + col: then a pack is
// aligned wherever x's element is, and a kernel may start a row's packs off
// the row's start (PackMustDivideLength). The functors with column-indexed
// weights (AffineStore) or a mask (MaskedScaleLoad) do not.
template <class Functor>
inline constexpr bool kFollowsRowLayout = false;
template <typename T, bool paired>
inline constexpr bool kFollowsRowLayout<DirectLoad<T, paired, false>> = true;
template <typename T, bool paired>
inline constexpr bool kFollowsRowLayout<DirectStore<T, paired, false>> = true;

// Whether a kernel may start each row's packs where x's pack grid does,
// whatever cols (RowEdges): its load and store both follow x's layout.
// OperandsFollowRowLayout (launch_config.h) must agree for each op.
template <class Load, class Store>
inline constexpr bool kTakesAnyCols =
    kFollowsRowLayout<std::remove_cv_t<Load>> && kFollowsRowLayout<std::remove_cv_t<Store>>;

// Where a row's whole packs lie when rows need not start on a pack
// boundary (cols % pack != 0, kTakesAnyCols): element (row, c) is
// pack-aligned when row * cols + c is a multiple of pack (x and y aligned
// to the pack, which Launch ensures by narrowing it), so the row's packs
// start at c = head, and the head before them and the tail after the last
// whole one are each shorter than a pack, moved one element at a time. The
// row holds cols / pack whole packs, or one fewer (missing_packs) when head
// and tail together reach a pack.
struct RowEdges {
  int64_t head = 0;           // elements before the first whole pack
  int64_t tail_col = 0;       // the tail's first column (cols: no tail)
  int64_t packs = 0;          // whole packs, the first at column head
  int64_t missing_packs = 0;  // cols / pack - packs: 0 or 1
};
// The edges of `row`; without kAnyCols (cols % pack == 0) the whole row is
// packs, known at compile time to start at column 0.
template <int pack, bool kAnyCols>
__device__ __forceinline__ RowEdges EdgesOf(int64_t row, int64_t cols) {
  static_assert((pack & (pack - 1)) == 0, "a power-of-two pack");
  RowEdges e;
  if constexpr (kAnyCols) {
    e.head = -(row * cols) & (pack - 1);
    // A row shorter than a pack may end before the grid's next pack.
    if (e.head > cols) e.head = cols;
    e.packs = (cols - e.head) / pack;
    e.tail_col = e.head + e.packs * pack;
    e.missing_packs = cols / pack - e.packs;
  } else {
    e.packs = cols / pack;
    e.tail_col = cols;
  }
  return e;
}

// Whether a load functor reads x's elements unchanged (it only widens them),
// through members `src` and `row_stride`, LoadPack and WidenPack (as
// DirectLoad): then a kernel may copy a row's raw bytes and widen them later
// (SplitRowKernel's bulk copy, BlockSmemRowKernel's cache). MaskedScaleLoad
// scales and masks, so it does not.
template <class Load>
inline constexpr bool kLoadsRowUnchanged = false;
template <typename T, bool paired, bool grouped>
inline constexpr bool kLoadsRowUnchanged<DirectLoad<T, paired, grouped>> = true;
// The kernels take their functors as const template arguments: the same
// answer for those (without it block_smem's raw-pack cache compiled out).
template <class Load>
inline constexpr bool kLoadsRowUnchanged<const Load> = kLoadsRowUnchanged<Load>;

// LayerNorm's output functor: y = normalized * gamma + beta, each optional
// (a null pointer is a uniform branch, cheaper than 4x the instances).
// `paired`: the output, and the batched weights (StoreWith), convert 16-bit
// pairs at once. `with_beta`: whether beta may be set at all. RMSNorm has
// none, and its instances say so at compile time: ptxas predicated the
// beta code behind the null check instead of branching over it, 19 issued
// instructions per 16-bit pack for nothing (57 of 435 per thread per row,
// block_uncached RMSNorm float16 x 12288).
template <typename T, bool paired = false, bool with_beta = true, bool grouped = false>
struct AffineStore {
  T* __restrict__ dst;
  int64_t row_stride;
  const T* __restrict__ gamma;
  const T* __restrict__ beta;  // null unless with_beta
  int64_t group_rows = 0;      // as DirectStore's
  int64_t group_stride = 0;
  // RMSNorm's y = x_hat * (weight_offset + gamma) (Gemma: 1). Added to the
  // widened weight, so 0 leaves every product as it was.
  float weight_offset = 0.f;
  __device__ __forceinline__ DirectStore<T, paired, grouped> Output() const {
    return {dst, row_stride, group_rows, group_stride};
  }
  template <int N>
  __device__ __forceinline__ void store(const float* normalized, int64_t row,
                                        int64_t col) const {
    float out[N];
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = normalized[i];
    if (gamma != nullptr) {
      const Pack<T, N> g = *reinterpret_cast<const Pack<T, N>*>(gamma + col);
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] *= Weight(ToFloat(g.elem[i]));
    }
    if (HasBeta()) {
      const Pack<T, N> b = *reinterpret_cast<const Pack<T, N>*>(beta + col);
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] += ToFloat(b.elem[i]);
    }
    Output().template store<N>(out, row, col);
  }
  // A widened weight as it multiplies: with RMSNorm's offset added (the
  // LayerNorm instances, with_beta, have none).
  __device__ __forceinline__ float Weight(float g) const {
    if constexpr (with_beta) {
      return g;
    } else {
      return g + weight_offset;
    }
  }
  __device__ __forceinline__ bool HasBeta() const { return with_beta && beta != nullptr; }
  // The weights of B packs of N columns (LoadWeights, StoreLoaded).
  template <int B, int N>
  struct Weights {
    Pack<T, N> gamma[B];
    Pack<T, N> beta[B];
  };
  // Loads the weights of `count` (<= B) packs, pack b at column
  // col + b * stride, all in flight together.
  template <int B, int N>
  __device__ __forceinline__ void LoadWeights(Weights<B, N>& w, int64_t col, int64_t stride,
                                              int64_t count) const {
#pragma unroll
    for (int b = 0; b < B; ++b) {
      if (b < count) {
        const int64_t at = col + b * stride;
        if (gamma != nullptr) w.gamma[b] = *reinterpret_cast<const Pack<T, N>*>(gamma + at);
        if (HasBeta()) w.beta[b] = *reinterpret_cast<const Pack<T, N>*>(beta + at);
      }
    }
  }
  // Stores pack b of a batch, at `col` of `row`, with the weights
  // LoadWeights read for it.
  template <int B, int N>
  __device__ __forceinline__ void StoreWith(const float* normalized, const Weights<B, N>& w,
                                            int b, int64_t row, int64_t col) const {
    float out[N];
    if constexpr (paired) {
      float weight[N];
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] = normalized[i];
      if (gamma != nullptr) {
        Widen<T, N>(w.gamma[b], weight);
#pragma unroll
        for (int i = 0; i < N; ++i) out[i] *= Weight(weight[i]);
      }
      if (HasBeta()) {
        Widen<T, N>(w.beta[b], weight);
#pragma unroll
        for (int i = 0; i < N; ++i) out[i] += weight[i];
      }
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        out[i] = normalized[i];
        if (gamma != nullptr) out[i] *= Weight(ToFloat(w.gamma[b].elem[i]));
        if (HasBeta()) out[i] += ToFloat(w.beta[b].elem[i]);
      }
    }
    Output().template store<N>(out, row, col);
  }
  // Stores those `count` packs of `row` with the weights LoadWeights read.
  template <int B, int N>
  __device__ __forceinline__ void StoreLoaded(const float (&normalized)[B][N],
                                              const Weights<B, N>& w, int64_t row, int64_t col,
                                              int64_t stride, int64_t count) const {
#pragma unroll
    for (int b = 0; b < B; ++b) {
      if (b < count) StoreWith<B, N>(normalized[b], w, b, row, col + b * stride);
    }
  }
  // `count` (<= B) packs of `row`, pack b at column col + b * stride, with
  // every weight of the batch loaded before the first store, so the loads
  // are in flight together (the split-row kernels' store pass).
  template <int B, int N>
  __device__ __forceinline__ void StoreBatch(const float (&normalized)[B][N], int64_t row,
                                             int64_t col, int64_t stride, int64_t count) const {
    Weights<B, N> w;
    LoadWeights(w, col, stride, count);
    StoreLoaded(normalized, w, row, col, stride, count);
  }
};

// Packs per thread whose weights a store with weights loads at once: a
// batch holds up to 3 floats per element (value, gamma, beta) in registers,
// so keep pack * batch within 8192 / block_size elements (8 at 1024
// threads, whose budget is 64 registers), at most 4 packs.
constexpr int WeightBatch(int pack, int block_size) {
  const int fits = 8192 / block_size / pack;
  return fits < 1 ? 1 : (fits > 4 ? 4 : fits);
}

// The weights a store functor loads (AffineStore: LayerNorm, RMSNorm): its
// Weights for B packs of N and the bytes of one weight, or an empty struct
// for stores without weights.
template <class Store>
struct WeightsOf {
  static constexpr bool kLoads = false;
  static constexpr int kValueBytes = 0;
  template <int B, int N>
  struct type {};
};
template <typename T, bool paired, bool with_beta, bool grouped>
struct WeightsOf<AffineStore<T, paired, with_beta, grouped>> {
  static constexpr bool kLoads = true;
  static constexpr int kValueBytes = static_cast<int>(sizeof(T));
  template <int B, int N>
  using type = typename AffineStore<T, paired, with_beta, grouped>::template Weights<B, N>;
};
template <class Store>
inline constexpr bool kStoreLoadsWeights = WeightsOf<Store>::kLoads;

// Makes the compiler take a thread's raw weights as changed here, so their
// widening stays after this point. In block_regs' row loop nvcc otherwise
// hoists the loop-invariant widening of 16-bit weights above the loop, where
// it waits for the weight loads before the row's own loads are issued: two
// memory round trips instead of one. Keeping it in the loop made 16-bit
// LayerNorm and RMSNorm at 1 to 64 rows x 4096 1.05-1.08x faster in float16
// and 1.13-1.20x in bfloat16 (H100, bench/results/2026-11-22-h100-weight-hoisting/).
template <class Weights>
__device__ __forceinline__ void HideFromHoisting(Weights& weights) {
  static_assert(sizeof(Weights) % 4 == 0, "weights are whole 32-bit words");
  auto* words = reinterpret_cast<uint32_t*>(&weights);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(Weights) / 4); ++i) {
    asm volatile("" : "+r"(words[i]));
  }
}

// __shfl_xor_sync for any trivially copyable T, as 32-bit words.
template <typename T>
__device__ __forceinline__ T ShuffleXorWords(const T& value, int mask, int width) {
  static_assert(sizeof(T) % 4 == 0, "shuffled as whole 32-bit words");
  constexpr int kWords = sizeof(T) / 4;
  unsigned words[kWords];
  memcpy(words, &value, sizeof(T));
#pragma unroll
  for (int i = 0; i < kWords; ++i) words[i] = __shfl_xor_sync(0xffffffffu, words[i], mask, width);
  T result;
  memcpy(&result, words, sizeof(T));
  return result;
}

// Lane `src`'s value of any trivially copyable T, for every lane of the warp.
template <typename T>
__device__ __forceinline__ T ShuffleFromWords(const T& value, int src) {
  static_assert(sizeof(T) % 4 == 0, "shuffled as whole 32-bit words");
  constexpr int kWords = sizeof(T) / 4;
  unsigned words[kWords];
  memcpy(words, &value, sizeof(T));
#pragma unroll
  for (int i = 0; i < kWords; ++i) words[i] = __shfl_sync(0xffffffffu, words[i], src);
  T result;
  memcpy(&result, words, sizeof(T));
  return result;
}

// Block-wide all-reduce. Each warp reduces by butterfly, lane 0 of each
// writes the warp's result, and after one barrier every warp reads all of
// them and reduces them the same way: every thread has the total after
// log2(block_size) combines and one barrier. CUB's
// BLOCK_REDUCE_WARP_REDUCTIONS, used before, combined the warps' results one
// after another on thread 0 and then broadcast the total through two more
// barriers: at 512 threads 15 Welford merges in a row. At 1-64 rows x 4096
// this reducer made LayerNorm 9-13% and the 16-bit softmax 7-10% faster (it
// also cost LayerNorm 3-5% at 49152 x 32768, the default configs; see
// bench/results/2026-11-22-h100-block-reduction/). Combine must be
// commutative up to rounding: threads may differ in the last bit.
// Consecutive reductions alternate between two slots per warp, so that one
// reduction's reads never race the next one's writes without a trailing
// barrier; every thread of the block must therefore call Run equally often,
// and the reducer must outlive the row loop.
template <int block_size, typename T>
class BlockAllReducer {
 public:
  static constexpr int kWarps = block_size / 32;
  static_assert(block_size % 32 == 0 && (kWarps & (kWarps - 1)) == 0,
                "a power-of-two number of whole warps");
  struct Storage {
    T warp[2][kWarps];
  };

  __device__ __forceinline__ explicit BlockAllReducer(Storage& storage) : storage_(storage) {}

  template <typename Combine>
  __device__ __forceinline__ T Run(T value, Combine combine) {
#pragma unroll
    for (int mask = 16; mask > 0; mask /= 2) {
      value = combine(value, ShuffleXorWords(value, mask, 32));
    }
    if constexpr (kWarps > 1) {
      T* slots = storage_.warp[parity_];
      parity_ ^= 1;
      if (threadIdx.x % 32 == 0) slots[threadIdx.x / 32] = value;
      __syncthreads();
      value = slots[threadIdx.x % kWarps];
#pragma unroll
      for (int mask = kWarps / 2; mask > 0; mask /= 2) {
        value = combine(value, ShuffleXorWords(value, mask, kWarps));
      }
    }
    return value;
  }

 private:
  Storage& storage_;
  int parity_ = 0;
};

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_ROW_COMMON_CUH_
