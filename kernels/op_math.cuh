// The per-op math, written once: for each op, the statistic a row reduces
// to, how it is gathered, and what the row's statistic makes of every value
// and of the per-row outputs. Every kernel family (row_kernels.cuh,
// split_row_kernels.cuh, axis_kernels.cuh) is written over OpMath<op, fast>
// and decides only where a row's values live and how its threads combine.
//
// A statistic is gathered one of two ways:
//  - Resident rows (held in registers or shared memory, so they can be read
//    again): exact statistics in at most two passes. `First` folds every
//    value; `Second(first, params)`, when kSecondPass, folds them again
//    knowing the first pass's row total. ResidentRow drives the passes.
//  - Streamed rows (each value read once, or the row split over blocks):
//    per-thread Accumulators whose Partials merge (Merge, MergeOp for
//    reducers, WarpMerge for all 32 lanes at once), then Finish.
// Either way the result is a Row: Apply<N>(v) turns N values into outputs in
// place, WriteStats writes the per-row outputs the caller asked for.
#ifndef KERNTUNE_KERNELS_OP_MATH_CUH_
#define KERNTUNE_KERNELS_OP_MATH_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/types.h"

namespace kt::kernels::internal {

constexpr int kWarpSize = 32;

// Per-launch scalars of the row ops (every kernel family).
struct RowParams {
  int64_t rows;
  int64_t cols;
  // 1 / cols, rounded once on the host: a mean is a multiply, where a
  // division per row took 11 more instructions per thread (at most 1 ulp
  // apart; ATen's mean multiplies too).
  float inv_cols;
  float epsilon;     // LayerNorm, RMSNorm
  float* mean;       // LayerNorm, may be null: rows floats
  float* inv_std;    // LayerNorm (1 / std), RMSNorm (1 / rms); may be null
  float* row_scale;  // ReduceScale (max |x|), may be null
};

// exp/log in the compute type. With 16-bit storage the hardware
// approximations (a few float ulps) vanish in the output rounding and halve
// the instruction count of the softmax kernels; float32 storage keeps the
// accurate versions.
template <bool fast>
__device__ __forceinline__ float Exp(float x) {
  if constexpr (fast) {
    return __expf(x);
  } else {
    return expf(x);
  }
}
template <bool fast>
__device__ __forceinline__ float Log(float x) {
  if constexpr (fast) {
    return __logf(x);
  } else {
    return logf(x);
  }
}

struct MaxOp {
  static constexpr float kIdentity = -INFINITY;
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  static constexpr float kIdentity = 0.f;
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// Shuffle all-reduce inside groups of `width` consecutive lanes. Every lane
// of the warp must call it. fmaxf and float + commute exactly, so every lane
// ends with the same bits.
template <int width, typename T, typename Combine>
__device__ __forceinline__ T GroupAllReduce(T value, Combine combine) {
#pragma unroll
  for (int mask = width / 2; mask > 0; mask /= 2) {
    value = combine(value, __shfl_xor_sync(0xffffffffu, value, mask, width));
  }
  return value;
}

// One pass over a resident row's values: Add folds a value into a thread's
// accumulator, starting from kIdentity (which also leaves the statistic
// unchanged for a lane that holds no values); Combine joins threads.
// A second pass also says what to keep of each value it reads (Keep, with
// Add(acc, v) == AddKept(acc, Keep(v))): a kernel that holds the row in
// registers stores the kept value back and later applies the Row with
// ApplyKept, so softmax computes each exp once and LayerNorm each x - mean.
struct MaxPass {
  using Combine = MaxOp;
  static constexpr float kIdentity = -INFINITY;
  __device__ __forceinline__ float Add(float acc, float v) const { return fmaxf(acc, v); }
};
struct SumPass {
  using Combine = SumOp;
  static constexpr float kIdentity = 0.f;
  __device__ __forceinline__ float Add(float acc, float v) const { return acc + v; }
};
// fmaxf skips a NaN |x| like the reference's fmax; the NaN itself stays NaN
// in the output (NaN * factor).
struct AbsMaxPass {
  using Combine = MaxOp;
  static constexpr float kIdentity = 0.f;
  __device__ __forceinline__ float Add(float acc, float v) const { return fmaxf(acc, fabsf(v)); }
};
struct SquareSumPass {
  using Combine = SumOp;
  static constexpr float kIdentity = 0.f;
  __device__ __forceinline__ float Add(float acc, float v) const { return fmaf(v, v, acc); }
};
// A second pass from its Keep and AddKept.
template <class Derived>
struct KeepingPass {
  using Combine = SumOp;
  static constexpr float kIdentity = 0.f;
  __device__ __forceinline__ float Add(float acc, float v) const {
    const Derived& self = static_cast<const Derived&>(*this);
    return self.AddKept(acc, self.Keep(v));
  }
};
// Sum of (v - mean)^2: LayerNorm's second pass; keeps v - mean.
struct SquaredDeviationPass : KeepingPass<SquaredDeviationPass> {
  float mean;
  __device__ __forceinline__ float Keep(float v) const { return v - mean; }
  __device__ __forceinline__ float AddKept(float acc, float d) const { return fmaf(d, d, acc); }
};
// Sum of exp(v - max): the softmax's second pass; keeps the exp (softmax)
// or v - max (log-softmax, whose outputs are (v - max) - log(sum)). An all
// -inf row has max -inf and sum NaN (exp(-inf - -inf)), so its outputs are
// NaN, like the reference's; a NaN anywhere makes the sum NaN.
template <bool fast>
struct ExpSumPass : KeepingPass<ExpSumPass<fast>> {
  float max;
  __device__ __forceinline__ float Keep(float v) const { return Exp<fast>(v - max); }
  __device__ __forceinline__ float AddKept(float acc, float e) const { return acc + e; }
};
template <bool fast>
struct ShiftedExpSumPass : KeepingPass<ShiftedExpSumPass<fast>> {
  float max;
  __device__ __forceinline__ float Keep(float v) const { return v - max; }
  __device__ __forceinline__ float AddKept(float acc, float d) const {
    return acc + Exp<fast>(d);
  }
};

// Online softmax partial: running max and the sum of exp(x - max). Merging
// rescales the smaller side. A partial that has seen nothing but -inf has
// sum 0 and contributes nothing (an all -inf row ends as max -inf, sum 0,
// and its outputs NaN, like the reference); a NaN seen anywhere stays in
// the sum.
struct MaxSum {
  float max;
  float sum;
};

// sum * exp(max - new_max), with empty partials (sum 0) kept at 0 even when
// both maxima are -inf, where exp(-inf - -inf) would make a NaN.
__device__ __forceinline__ float RescaledSum(const MaxSum& s, float new_max) {
  return s.sum == 0.f ? 0.f : s.sum * expf(s.max - new_max);
}

__device__ __forceinline__ MaxSum MaxSumMerge(const MaxSum& a, const MaxSum& b) {
  const float m = fmaxf(a.max, b.max);
  return {m, RescaledSum(a, m) + RescaledSum(b, m)};
}

struct MaxSumMergeOp {
  __device__ __forceinline__ MaxSum operator()(const MaxSum& a, const MaxSum& b) const {
    return MaxSumMerge(a, b);
  }
};

// Partial LayerNorm statistics (count, mean, sum of squared deviations),
// merged with Chan et al.'s parallel form of Welford's update, which stays
// accurate where sum-of-squares formulas cancel catastrophically.
struct WelfordStats {
  float mean;
  float m2;
  float count;
};

__device__ __forceinline__ WelfordStats WelfordMerge(const WelfordStats& a,
                                                     const WelfordStats& b) {
  const float count = a.count + b.count;
  if (count == 0.f) return a;
  const float b_share = __fdividef(b.count, count);
  const float delta = b.mean - a.mean;
  return {a.mean + delta * b_share, a.m2 + b.m2 + delta * delta * a.count * b_share, count};
}

struct WelfordMergeOp {
  __device__ __forceinline__ WelfordStats operator()(const WelfordStats& a,
                                                     const WelfordStats& b) const {
    return WelfordMerge(a, b);
  }
};

// Per-thread streamed LayerNorm accumulation: sums of x - shift and
// (x - shift)^2, with the shift the thread's first value, so a large common
// offset does not eat the float mantissa (Chan, Golub & LeVeque's
// shifted-data method). Three instructions an element instead of a Welford
// update's division; threads and blocks then merge their WelfordStats.
struct ShiftedSums {
  float shift = 0.f;
  float sum = 0.f;
  float sum_squares = 0.f;
  int count = 0;

  template <int N>
  __device__ __forceinline__ void Add(const float* v) {
    if (count == 0) shift = v[0];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float d = v[i] - shift;
      sum += d;
      sum_squares = fmaf(d, d, sum_squares);
    }
    count += N;
  }

  __device__ __forceinline__ WelfordStats Get() const {
    if (count == 0) return {0.f, 0.f, 0.f};
    const float n = static_cast<float>(count);
    const float mean_shifted = __fdividef(sum, n);
    return {shift + mean_shifted, fmaxf(sum_squares - sum * mean_shifted, 0.f), n};
  }
};

// A streamed statistic that is one resident pass (RMSNorm, ReduceScale):
// the pass folds each value, partials combine with the pass's Combine.
template <class Pass>
struct PassAccumulator {
  float value = Pass::kIdentity;
  template <int N>
  __device__ __forceinline__ void Add(const float* v) {
#pragma unroll
    for (int i = 0; i < N; ++i) value = Pass{}.Add(value, v[i]);
  }
  __device__ __forceinline__ float Get() const { return value; }
};

// ---------------------------------------------------------------------------
// The ops.

template <Op op, bool fast>
struct OpMath;

// Softmax, log-softmax and the scaled-masked softmax (plain softmax on the
// logits its load functor produces).
template <Op op, bool fast>
struct SoftmaxMath {
  struct Row {
    float max;
    float factor;  // softmax: 1 / sum; log-softmax: log(sum)
    template <int N>
    __device__ __forceinline__ void Apply(float* v) const {
      if constexpr (op == Op::kLogSoftmax) {
        // (x - max) - log(sum), in that order: folding max + log(sum) into
        // one shift loses log(sum) entirely when |max| is huge (1e30 + 0.69
        // == 1e30).
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] = (v[i] - max) - factor;
      } else {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] = Exp<fast>(v[i] - max) * factor;
      }
    }
    // On what the second pass kept: exp(x - max), or x - max.
    template <int N>
    __device__ __forceinline__ void ApplyKept(float* kept) const {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        kept[i] = op == Op::kLogSoftmax ? kept[i] - factor : kept[i] * factor;
      }
    }
    __device__ __forceinline__ void WriteStats(const RowParams&, int64_t) const {}
    // For values a thread kept relative to its own max (KeepShift of it,
    // through Second) rather than the row's: the Row whose ApplyKept turns
    // them into outputs (split_regs, which merges the row's statistics only
    // once). Softmax scales by exp(shift - max) too; a thread that saw only
    // -inf (or nothing) scales by 0, so that its outputs stay 0, or NaN when
    // the whole row is -inf (factor inf). Log-softmax subtracts max - shift
    // as well, folded into one shift: it is 0 on the thread holding the max
    // and large only where the output is dominated by it anyway.
    __device__ __forceinline__ Row RebasedTo(float own_max) const {
      if constexpr (op == Op::kLogSoftmax) {
        return {max, (max - KeepShift(own_max)) + factor};
      } else {
        return {max, own_max == -INFINITY ? factor * 0.f : factor * Exp<fast>(own_max - max)};
      }
    }
  };
  // The shift a thread keeps its values relative to when it has seen
  // `own_max` (its largest): own_max itself, or 0 when that is -inf, where
  // v - own_max would turn -inf values into NaN.
  static __device__ __forceinline__ float KeepShift(float own_max) {
    return own_max == -INFINITY ? 0.f : own_max;
  }
  static __device__ __forceinline__ Row FromSums(float max, float sum) {
    if constexpr (op == Op::kLogSoftmax) {
      return {max, Log<fast>(sum)};
    } else {
      return {max, 1.f / sum};
    }
  }

  // Resident: the exact max, then the sum of exp(x - max).
  using First = MaxPass;
  static constexpr bool kSecondPass = true;
  static constexpr bool kStreamsWhileCaching = false;
  static __device__ __forceinline__ auto Second(float max, const RowParams&) {
    if constexpr (op == Op::kLogSoftmax) {
      ShiftedExpSumPass<fast> pass;
      pass.max = max;
      return pass;
    } else {
      ExpSumPass<fast> pass;
      pass.max = max;
      return pass;
    }
  }
  static __device__ __forceinline__ Row FromPasses(float max, float sum, const RowParams&) {
    return FromSums(max, sum);
  }

  // Streamed: an online (max, sum of exp), one rescale per pack, not per
  // element, and only when the max moved.
  using Partial = MaxSum;
  using MergeOp = MaxSumMergeOp;
  struct Accumulator {
    MaxSum state{-INFINITY, 0.f};
    template <int N>
    __device__ __forceinline__ void Add(const float* v) {
      float pack_max = -INFINITY;
#pragma unroll
      for (int i = 0; i < N; ++i) pack_max = fmaxf(pack_max, v[i]);
      const float new_max = fmaxf(state.max, pack_max);
      if (new_max == -INFINITY) {
        // Only -inf and NaN so far (fmaxf skips NaN): -inf adds nothing,
        // but a NaN must still poison the row.
#pragma unroll
        for (int i = 0; i < N; ++i) {
          if (isnan(v[i])) state.sum = NAN;
        }
        return;
      }
      float pack_sum = 0.f;
#pragma unroll
      for (int i = 0; i < N; ++i) pack_sum += Exp<fast>(v[i] - new_max);
      const float carried = new_max == state.max ? state.sum : RescaledSum(state, new_max);
      state = {new_max, carried + pack_sum};
    }
    __device__ __forceinline__ Partial Get() const { return state; }
  };
  static __device__ __forceinline__ Partial Identity() { return {-INFINITY, 0.f}; }
  static __device__ __forceinline__ Partial Merge(const Partial& a, const Partial& b) {
    return MaxSumMerge(a, b);
  }
  // N partials each merged over a group of threads, the same on each of
  // them, by `all_reduce(float (&)[N], combine)`: the maxima first, then
  // each sum rescaled to its max once (one expf per thread instead of two
  // per pairwise merge) and summed.
  template <int N, class AllReduce>
  static __device__ __forceinline__ void AllMerge(Partial (&mine)[N], const AllReduce& all_reduce) {
    float max[N];
    float sum[N];
#pragma unroll
    for (int i = 0; i < N; ++i) max[i] = mine[i].max;
    all_reduce(max, MaxOp());
#pragma unroll
    for (int i = 0; i < N; ++i) sum[i] = RescaledSum(mine[i], max[i]);
    all_reduce(sum, SumOp());
#pragma unroll
    for (int i = 0; i < N; ++i) mine[i] = {max[i], sum[i]};
  }
  // The 32 lanes' partials merged, the same on every lane.
  static __device__ __forceinline__ Partial WarpMerge(const Partial& mine) {
    Partial merged[1] = {mine};
    AllMerge(merged, [](float (&v)[1], auto combine) {
      v[0] = GroupAllReduce<kWarpSize>(v[0], combine);
    });
    return merged[0];
  }
  static __device__ __forceinline__ Row Finish(const Partial& total, const RowParams&) {
    return FromSums(total.max, total.sum);
  }
};

template <bool fast>
struct OpMath<Op::kSoftmax, fast> : SoftmaxMath<Op::kSoftmax, fast> {};
template <bool fast>
struct OpMath<Op::kLogSoftmax, fast> : SoftmaxMath<Op::kLogSoftmax, fast> {};
template <bool fast>
struct OpMath<Op::kScaledMaskedSoftmax, fast> : SoftmaxMath<Op::kScaledMaskedSoftmax, fast> {};

// LayerNorm: y = (x - mean) * inv_std (times gamma plus beta, in the store
// functor).
template <bool fast>
struct OpMath<Op::kLayerNorm, fast> {
  struct Row {
    float mean;
    float inv_std;
    template <int N>
    __device__ __forceinline__ void Apply(float* v) const {
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = (v[i] - mean) * inv_std;
    }
    // On what the second pass kept: x - mean.
    template <int N>
    __device__ __forceinline__ void ApplyKept(float* kept) const {
#pragma unroll
      for (int i = 0; i < N; ++i) kept[i] *= inv_std;
    }
    __device__ __forceinline__ void WriteStats(const RowParams& p, int64_t row) const {
      if (p.mean != nullptr) p.mean[row] = mean;
      if (p.inv_std != nullptr) p.inv_std[row] = inv_std;
    }
  };

  // Resident: the exact two-pass statistics, the mean and then the squared
  // deviations from it: two float reductions instead of one of Welford
  // states (three floats and a division per step). In block_regs that took
  // 1 to 64 rows x 4096 from 3.19-3.51 to 2.87-3.25 us in float16 (H100,
  // bench/results/2026-11-22-h100-block-regs/).
  using First = SumPass;
  static constexpr bool kSecondPass = true;
  // A kernel that caches the row in shared memory as it loads it gathers
  // Welford partials on the way instead of a second pass over the cache:
  // in block_smem at 49152 x 4096-32768 the two passes ran 0.94-1.13x the
  // time of the streamed statistic (H200, 2026-11-26, bench/results/
  // 2026-11-26-h100-one-op-concept/), no better on balance.
  static constexpr bool kStreamsWhileCaching = true;
  static __device__ __forceinline__ SquaredDeviationPass Second(float sum, const RowParams& p) {
    SquaredDeviationPass pass;
    pass.mean = sum * p.inv_cols;
    return pass;
  }
  static __device__ __forceinline__ Row FromPasses(float sum, float squares, const RowParams& p) {
    return {sum * p.inv_cols, rsqrtf(fmaf(squares, p.inv_cols, p.epsilon))};
  }

  // Streamed: shifted sums per thread, Welford statistics merged.
  using Partial = WelfordStats;
  using MergeOp = WelfordMergeOp;
  using Accumulator = ShiftedSums;
  static __device__ __forceinline__ Partial Identity() { return {0.f, 0.f, 0.f}; }
  static __device__ __forceinline__ Partial Merge(const Partial& a, const Partial& b) {
    return WelfordMerge(a, b);
  }
  // Chan's parallel formula in three sums instead of 31 pairwise merges
  // (each a division): the count, the mean from the sum of count * (mean_i
  // - shift), then m2 = sum of (m2_i + count_i * (mean_i - mean)^2). The
  // shift (lane 0's mean) keeps a large common offset from eating the
  // mantissa of the sum, as in ShiftedSums.
  static __device__ __forceinline__ Partial WarpMerge(const Partial& mine) {
    const float count = GroupAllReduce<kWarpSize>(mine.count, SumOp());
    if (count == 0.f) return Identity();  // the same branch on every lane
    const float shift = __shfl_sync(0xffffffffu, mine.mean, 0);
    const float shifted = mine.count == 0.f ? 0.f : mine.count * (mine.mean - shift);
    const float mean = shift + __fdividef(GroupAllReduce<kWarpSize>(shifted, SumOp()), count);
    const float delta = mine.mean - mean;
    const float m2 = mine.count == 0.f ? 0.f : fmaf(mine.count * delta, delta, mine.m2);
    return {mean, GroupAllReduce<kWarpSize>(m2, SumOp()), count};
  }
  static __device__ __forceinline__ Row Finish(const Partial& total, const RowParams& p) {
    const float variance = fmaxf(__fdividef(total.m2, total.count), 0.f);
    return {total.mean, rsqrtf(variance + p.epsilon)};
  }
};

// RMSNorm and ReduceScale reduce one float statistic (one pass, resident or
// streamed alike), then scale every element by a per-row factor.
template <class Pass, class Derived>
struct ScaleByStatMath {
  using First = Pass;
  static constexpr bool kSecondPass = false;
  static constexpr bool kStreamsWhileCaching = false;
  using Partial = float;
  using MergeOp = typename Pass::Combine;
  using Accumulator = PassAccumulator<Pass>;
  static __device__ __forceinline__ Partial Identity() { return Pass::kIdentity; }
  static __device__ __forceinline__ Partial Merge(Partial a, Partial b) {
    return MergeOp()(a, b);
  }
  static __device__ __forceinline__ Partial WarpMerge(Partial mine) {
    return GroupAllReduce<kWarpSize>(mine, MergeOp());
  }
  static __device__ __forceinline__ auto FromPasses(float stat, float, const RowParams& p) {
    return Derived::FromStat(stat, p);
  }
  static __device__ __forceinline__ auto Finish(Partial total, const RowParams& p) {
    return Derived::FromStat(total, p);
  }
};

// RMSNorm: y = x / sqrt(mean(x^2) + eps) (times its weight, gamma, in the
// store functor); 1 / rms is its per-row output (inv_std).
template <bool fast>
struct OpMath<Op::kRmsNorm, fast>
    : ScaleByStatMath<SquareSumPass, OpMath<Op::kRmsNorm, fast>> {
  struct Row {
    float factor;  // 1 / rms
    template <int N>
    __device__ __forceinline__ void Apply(float* v) const {
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] *= factor;
    }
    // No second pass: the values were kept as they are.
    template <int N>
    __device__ __forceinline__ void ApplyKept(float* v) const {
      Apply<N>(v);
    }
    __device__ __forceinline__ void WriteStats(const RowParams& p, int64_t row) const {
      if (p.inv_std != nullptr) p.inv_std[row] = factor;
    }
  };
  static __device__ __forceinline__ Row FromStat(float sum_squares, const RowParams& p) {
    return {rsqrtf(fmaf(sum_squares, p.inv_cols, p.epsilon))};
  }
};

// ReduceScale: y = x / max|x|, max|x| being the row's scale (x = y * scale);
// an all-zero row gives zeros and scale 0.
template <bool fast>
struct OpMath<Op::kReduceScale, fast>
    : ScaleByStatMath<AbsMaxPass, OpMath<Op::kReduceScale, fast>> {
  struct Row {
    float pre;      // 2^64 for a subnormal max |x|, else 1
    float factor;   // 1 / (max|x| * pre), or 0
    float abs_max;  // the per-row output
    template <int N>
    __device__ __forceinline__ void Apply(float* v) const {
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = (v[i] * pre) * factor;
    }
    // No second pass: the values were kept as they are.
    template <int N>
    __device__ __forceinline__ void ApplyKept(float* v) const {
      Apply<N>(v);
    }
    __device__ __forceinline__ void WriteStats(const RowParams& p, int64_t row) const {
      if (p.row_scale != nullptr) p.row_scale[row] = abs_max;
    }
  };
  // 1 / max|x| overflows to inf for a subnormal max (below 2^-126 it
  // exceeds FLT_MAX), which would turn the row into inf and NaN: such rows
  // are first scaled by 2^64 (exact, as every |x| <= max is tiny), so y =
  // (x * pre) * factor stays within an ulp of x / max. An all-zero row gets
  // factor 0 (zeros out); an infinite max gives factor 0, y = x * 0 (NaN for
  // the infinities), like the reference.
  static __device__ __forceinline__ Row FromStat(float abs_max, const RowParams&) {
    if (!(abs_max > 0.f)) return {1.f, 0.f, abs_max};
    constexpr float kPre = 18446744073709551616.f;              // 2^64
    const float pre = abs_max < 1.17549435e-38f ? kPre : 1.f;  // FLT_MIN
    return {pre, 1.f / (abs_max * pre), abs_max};
  }
};

// The fused norms normalize as their base norm does (types.h: BaseNormOp);
// their residual and quantization live in the functors (fused_functors.cuh).
template <bool fast>
struct OpMath<Op::kAddRmsNorm, fast> : OpMath<Op::kRmsNorm, fast> {};
template <bool fast>
struct OpMath<Op::kRmsNormQuant, fast> : OpMath<Op::kRmsNorm, fast> {};
template <bool fast>
struct OpMath<Op::kAddRmsNormQuant, fast> : OpMath<Op::kRmsNorm, fast> {};
template <bool fast>
struct OpMath<Op::kAddLayerNorm, fast> : OpMath<Op::kLayerNorm, fast> {};
template <bool fast>
struct OpMath<Op::kLayerNormQuant, fast> : OpMath<Op::kLayerNorm, fast> {};
template <bool fast>
struct OpMath<Op::kAddLayerNormQuant, fast> : OpMath<Op::kLayerNorm, fast> {};

// The statistics of a resident row, on every thread that holds part of it.
// `for_each(f)` calls f(float& value) on each value this thread holds of the
// row; `all_reduce(value, combine)` combines a float across the row's
// threads (every one of them must call it equally often). The second pass
// replaces each value it visits by what it keeps: a kernel whose for_each
// hands out its own registers then applies the Row with ApplyKept, one
// whose for_each hands out copies (shared memory) with Apply.
// ResidentRowFrom takes the first pass already folded (a kernel may fold it
// while it loads the row).
template <class Math, class ForEach, class AllReduce>
__device__ __forceinline__ typename Math::Row ResidentRowFrom(float first_partial,
                                                              const ForEach& for_each,
                                                              const AllReduce& all_reduce,
                                                              const RowParams& p) {
  const float first = all_reduce(first_partial, typename Math::First::Combine());
  float second = 0.f;
  if constexpr (Math::kSecondPass) {
    const auto pass = Math::Second(first, p);
    float acc = pass.kIdentity;
    for_each([&](float& v) {
      v = pass.Keep(v);
      acc = pass.AddKept(acc, v);
    });
    second = all_reduce(acc, typename decltype(pass)::Combine());
  }
  return Math::FromPasses(first, second, p);
}

template <class Math, class ForEach, class AllReduce>
__device__ __forceinline__ typename Math::Row ResidentRow(const ForEach& for_each,
                                                          const AllReduce& all_reduce,
                                                          const RowParams& p) {
  using First = typename Math::First;
  float first = First::kIdentity;
  for_each([&](float& v) { first = First{}.Add(first, v); });
  return ResidentRowFrom<Math>(first, for_each, all_reduce, p);
}

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_OP_MATH_CUH_
