// The row kernels with one row per thread group or per block (warp, block +
// shared memory, block uncached, block registers), each serving every op
// through its OpMath (op_math.cuh): the kernels only place a row's values
// and combine threads. I/O goes through Load/Store functors (row_common.cuh,
// op_functors.cuh), which each kernel binds to a row once (BindRow).
#ifndef KERNTUNE_KERNELS_ROW_KERNELS_CUH_
#define KERNTUNE_KERNELS_ROW_KERNELS_CUH_

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/fused_functors.cuh"
#include "kernels/op_math.cuh"
#include "kernels/row_common.cuh"

namespace kt::kernels::internal {

// kWarp: a thread group of `tgw` lanes owns `rpa` rows at a time and keeps
// them in registers: lane l holds packs l, l + tgw, ... of each row
// (`cpt` elements, cpt / pack packs), so a group reads whole contiguous
// segments. Preconditions: cols <= cpt * tgw, cols % pack == 0, x/y/gamma/beta
// aligned to pack * sizeof(T), blockDim = (tgw, block_size / tgw) with
// block_size % 32 == 0. The row loop runs per warp, not per group, so every
// lane of a warp reaches the shuffles even when rows run out mid-warp.
// `exact`: the launch covers the rows in one step with none left over (rows
// a multiple of the block's, one block per block of rows) and cols == cpt *
// tgw, so no bounds checks and no row loop. That was 1.02-1.07x faster at
// 49152 x 32 to 128 (H100, bench/results/2026-11-22-h100-exact-warp/).
template <Op op, class Load, class Store, int pack, int cpt, int tgw, int rpa, bool exact>
__global__ void WarpRowKernel(Load load, Store store, RowParams p) {
  static_assert(cpt % pack == 0, "cols_per_thread must be a multiple of pack");
  static_assert(tgw <= kWarpSize && kWarpSize % tgw == 0, "bad group width");
  using Math = OpMath<op, kFastMathFor<Load>>;
  constexpr int kPacks = cpt / pack;
  constexpr int kGroupsPerWarp = kWarpSize / tgw;
  const int lane = threadIdx.x;
  const int group_in_warp = threadIdx.y % kGroupsPerWarp;
  const int64_t group = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const int64_t warp_first_row = (group - group_in_warp) * rpa;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.y * rpa;
  const auto all_reduce = [](float value, auto combine) {
    return GroupAllReduce<tgw>(value, combine);
  };

  for (int64_t base = warp_first_row; exact || base < p.rows; base += step) {
    const int64_t first_row = base + group_in_warp * rpa;
    float buf[rpa][cpt];
    // The lane's packs inside the row: a prefix of its kPacks.
    int valid_packs[rpa];
#pragma unroll
    for (int r = 0; r < rpa; ++r) {
      const int64_t row = first_row + r;
      const auto row_load = BindRow(load, row);
      valid_packs[r] = 0;
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        const int64_t col = (static_cast<int64_t>(k) * tgw + lane) * pack;
        if (exact || (row < p.rows && col < p.cols)) {
          row_load.template load<pack>(&buf[r][k * pack], col);
          valid_packs[r] = k + 1;
        } else {
#pragma unroll
          for (int i = 0; i < pack; ++i) buf[r][k * pack + i] = 0.f;
        }
      }
    }

#pragma unroll
    for (int r = 0; r < rpa; ++r) {
      const int64_t row = first_row + r;
      const auto for_each = [&](auto&& f) {
#pragma unroll
        for (int k = 0; k < kPacks; ++k) {
          if (exact || k < valid_packs[r]) {
#pragma unroll
            for (int i = 0; i < pack; ++i) f(buf[r][k * pack + i]);
          }
        }
      };
      const typename Math::Row stat = ResidentRow<Math>(for_each, all_reduce, p);
      stat.template ApplyKept<cpt>(buf[r]);
      if (lane == 0 && (exact || row < p.rows)) stat.WriteStats(p, row);
      const auto col_of = [&](int k) { return (static_cast<int64_t>(k) * tgw + lane) * pack; };
      const auto valid = [&](int k) { return exact || (row < p.rows && col_of(k) < p.cols); };
      if constexpr (kQuantizes<Store>) {
        // The quantizing ops' warp instances are whole warps (tgw 32).
        store.template StoreRow<kPacks, pack>(
            buf[r], row, col_of, valid, [&](float v) { return all_reduce(v, MaxOp()); },
            lane == 0 && (exact || row < p.rows));
      } else {
#pragma unroll
        for (int k = 0; k < kPacks; ++k) {
          if (valid(k)) store.template store<pack>(&buf[r][k * pack], row, col_of(k));
        }
      }
    }
    if constexpr (exact) break;
  }
}

// The block kernels' loads from global memory: each thread's packs k =
// threadIdx.x, + block_size, ..., loaded a batch at a time (every load of a
// batch in flight before any is used), then f(v, k) on each. A plain
// strided loop waits a full memory round trip per pack: 1 x 4096 float32
// LayerNorm at 256 threads paid four in a row (3.6 us against PyTorch's
// 2.2 us on the H100). Batches of kLoadBatch for packs of up to 4 elements;
// 8-element (16-bit) packs load one at a time, as before: batched, their
// float copies took LayerNorm's shared-memory kernel from 34 to 52-84
// registers (49152 x 32768 float16 at 512 threads 0.76-0.89x of before)
// and cost the 16-bit softmax, RMSNorm and ReduceScale 5-8% at few rows
// (bench/results/2026-11-22-h100-narrow-and-few-rows/).
inline constexpr int kLoadBatch = 4;
constexpr int BlockLoadBatch(int pack) { return pack >= 8 ? 1 : kLoadBatch; }

// The column of pack k of a row whose packs start at column `head`, as a
// 64-bit product: computed in 32 bits and then widened, nvcc no longer
// proved the column a multiple of the pack and split the 16-bit kernels'
// pack stores into one st.global.u16 per element (LayerNorm float16 8192 x
// 8192 in block_smem ran 2.3x slower).
template <int pack>
__device__ __forceinline__ int64_t PackColumn(int64_t head, int64_t k) {
  return head + k * pack;
}

// This thread's packs k = threadIdx.x + j * block_size, `batch` at a time:
// fetch(v, k) for every pack of a batch before f(v, k) for any, so their
// reads are in flight together. `Fetched` is what fetch fills: a pack's
// floats, or its raw storage (block_smem's cache).
//
// `Index` int (launch_config.h, kMaxBlockRowPacks) where the loop only
// loads: 64-bit trip counts, compares and index arithmetic, two SASS
// instructions each, were ~100 of the 435 instructions per thread per row
// of block_uncached (RMSNorm float16 x 12288). Loops that store keep 64-bit
// indices: with 32-bit ones nvcc split the 16-bit pack stores into one
// st.global.u16 per element (LayerNorm float16 8192 x 8192 in block_smem
// ran 2.3x slower), as it did off the pack grid (BlockRowStore).
template <int pack, int block_size, int batch, class Index, class Fetched = float[pack],
          class Fetch, class F>
__device__ __forceinline__ void ForEachFetchedPack(Index num_packs, Fetch&& fetch, F&& f) {
  for (Index first = threadIdx.x; first < num_packs; first += Index{batch} * block_size) {
    Fetched v[batch];
#pragma unroll
    for (int b = 0; b < batch; ++b) {
      const Index k = first + Index{b} * block_size;
      if (k < num_packs) fetch(v[b], k);
    }
#pragma unroll
    for (int b = 0; b < batch; ++b) {
      const Index k = first + Index{b} * block_size;
      if (k < num_packs) f(v[b], k);
    }
  }
}

// The row's whole packs from global memory (pack k at column edges.head +
// k * pack), BlockLoadBatch(pack) in flight.
template <int pack, int block_size, class RowLoad, class F>
__device__ __forceinline__ void ForEachLoadedPack(const RowLoad& row_load, const RowEdges& edges,
                                                  F&& f) {
  ForEachFetchedPack<pack, block_size, BlockLoadBatch(pack), int>(
      static_cast<int>(edges.packs),
      [&](float* v, int k) { row_load.template load<pack>(v, PackColumn<pack>(edges.head, k)); },
      f);
}

// The head or tail element (RowEdges) a thread of a one-block-per-row
// kernel moves, at most one: threads 0..head-1 take the head, the next
// ones the tail, at column t + packs * pack (fewer than 2 * pack <= 16
// elements together, never more than a block's threads). -1 when none.
template <int pack>
__device__ __forceinline__ int64_t BlockEdgeColumn(const RowEdges& e, int64_t cols) {
  const int64_t t = threadIdx.x;
  const int64_t body = e.packs * pack;
  if (t >= cols - body) return -1;
  return t < e.head ? t : t + body;
}

// The last pass of the block kernels: writes this thread's whole packs of
// a row (RowEdges), pack k (k = threadIdx.x + j * block_size, at column
// edges.head + k * pack) read by fetch(v, k) and turned into outputs by
// finish(v). Without prefetched weights it takes kPlainBatch
// packs at a time, their reads in flight together, and the store loads any
// weights itself, one pack at a time.
//
// Float32 LayerNorm and RMSNorm prefetch their weights instead (gamma,
// beta): those of this thread's first kWeightBatch packs are loaded by
// Prefetch, called before the block reduction, whose barrier hides them,
// and each later batch's are loaded before its values. At few rows nothing
// else hides a load's latency, and the store's own loads came one round
// trip per pack after the reduction: prefetched, LayerNorm float32 at 1-64
// rows x 4096 took 2.7-3.9 us instead of 3.1-4.7. 16-bit weights stay with
// the store: prefetched, their kernels took 40-95 registers instead of
// 32-40, and the fastest config got slower at 8 of the 9 float16 shapes
// measured (LayerNorm 4096 x 32768: 196 -> 212 us;
// bench/results/2026-11-22-h100-block-reduction/). With prefetched weights,
// kFetchAhead reads a batch's values before using any (global memory);
// otherwise one pack at a time (shared memory), to spare registers.
// `kEdges`: the row's packs start at a runtime column (RowEdges::head).
template <class Store, int pack, int block_size, int kPlainBatch, bool kFetchAhead, bool kEdges>
class BlockRowStore {
  using Weights = WeightsOf<std::remove_cv_t<Store>>;
  static constexpr int kPackWeightBytes =
      static_cast<int>(sizeof(typename Weights::template type<1, pack>));
  static constexpr bool kWeights = Weights::kLoads && Weights::kValueBytes == 4;
  // 64 bytes of weights per thread in flight: 2 packs of 4 floats.
  static constexpr int kWeightBatch =
      64 / kPackWeightBytes < 1 ? 1 : (64 / kPackWeightBytes > 4 ? 4 : 64 / kPackWeightBytes);
  static constexpr int kBatch = kWeights ? kWeightBatch : kPlainBatch;
  static constexpr int64_t kStep = static_cast<int64_t>(kBatch) * block_size;
  // Off the pack grid, one pack per step, nvcc unrolls the store loop
  // itself, and with the head in every column the unrolled body's plain
  // pack stores compiled to one store per element (8 st.global.u16 per
  // 16-bit pack of 8, 4 st.global.f32 per float pack; only the remainder
  // copies kept vector stores), as SplitRowKernel's did: with them
  // block_smem at the full pack ran 722 GB/s against 1862 at pack 1 (2048
  // x 50257 float16, H100). Loops on the grid, or batched by hand
  // (kPlainBatch > 1), kept vector stores and keep plain ones (store_as_one
  // says what its asm costs).
  static constexpr bool kStoresAsOne = kEdges && kPlainBatch == 1;

 public:
  __device__ __forceinline__ BlockRowStore(const Store& store, const RowEdges& edges)
      : store_(store), first_col_(edges.head), num_packs_(edges.packs) {}

  // Starts loading the weights of this thread's first batch of packs.
  __device__ __forceinline__ void Prefetch() {
    if constexpr (kWeights) LoadWeights(threadIdx.x);
  }

  template <class Fetch, class Finish>
  __device__ __forceinline__ void StoreRow(int64_t row, Fetch&& fetch, Finish&& finish) {
    if constexpr (kWeights) {
      StoreWithWeights(row, fetch, finish);
    } else if constexpr (kStoresAsOne) {
      StoreAsOne(row, fetch, finish);
    } else {
      ForEachFetchedPack<pack, block_size, kBatch>(num_packs_, fetch, [&](float* v, int64_t k) {
        finish(v);
        store_.template store<pack>(v, row, PackColumn<pack>(first_col_, k));
      });
    }
  }

 private:
  // One-instruction stores, one pack a step. Their asm orders every memory
  // access after them, so each step reads the next pack before it stores
  // this one: read after the store, the read's latency and the finish's
  // (an exp for softmax) came once per pack, and block_smem ran float16
  // softmax at 2048 x 50257 at 78% of copy against 89% at 50256 (H100).
  template <class Fetch, class Finish>
  __device__ __forceinline__ void StoreAsOne(int64_t row, Fetch&& fetch, Finish&& finish) {
    int64_t k = threadIdx.x;
    if (k >= num_packs_) return;
    float v[pack];
    fetch(v, k);
    for (; k < num_packs_; k += block_size) {
      float next[pack];
      if (k + block_size < num_packs_) fetch(next, k + block_size);
      finish(v);
      store_.template store_as_one<pack>(v, row, PackColumn<pack>(first_col_, k));
#pragma unroll
      for (int i = 0; i < pack; ++i) v[i] = next[i];
    }
  }

  template <class Fetch, class Finish>
  __device__ __forceinline__ void StoreWithWeights(int64_t row, Fetch&& fetch, Finish&& finish) {
    for (int64_t first = threadIdx.x; first < num_packs_; first += kStep) {
      if (first != threadIdx.x) LoadWeights(first);
      if constexpr (kFetchAhead) {
        float v[kBatch][pack];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int64_t k = first + static_cast<int64_t>(b) * block_size;
          if (k < num_packs_) fetch(v[b], k);
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          if (first + static_cast<int64_t>(b) * block_size < num_packs_) finish(v[b]);
        }
        store_.template StoreLoaded<kBatch, pack>(v, weights_, row,
                                                  PackColumn<pack>(first_col_, first),
                                                  static_cast<int64_t>(block_size) * pack,
                                                  Count(first));
      } else {
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int64_t k = first + static_cast<int64_t>(b) * block_size;
          if (k >= num_packs_) continue;
          float v[pack];
          fetch(v, k);
          finish(v);
          store_.template StoreWith<kBatch, pack>(v, weights_, b, row,
                                                  PackColumn<pack>(first_col_, k));
        }
      }
    }
  }

  // This thread's packs from `first` on (StoreLoaded and LoadWeights use
  // at most kBatch of them).
  __device__ __forceinline__ int64_t Count(int64_t first) const {
    return (num_packs_ - first + block_size - 1) / block_size;
  }
  __device__ __forceinline__ void LoadWeights(int64_t first) {
    store_.template LoadWeights<kBatch, pack>(weights_, PackColumn<pack>(first_col_, first),
                                              static_cast<int64_t>(block_size) * pack,
                                              Count(first));
  }

  const Store& store_;
  const int64_t first_col_;
  const int64_t num_packs_;
  typename Weights::template type<kBatch, pack> weights_;
};

// kBlockSmem: one block per row (grid-stride over rows). Pass 1 reads the
// row once from global memory into shared memory, in the load functor's
// cache type (the storage dtype for plain loads: half the bytes of float for
// 16-bit data, so more blocks fit per SM). Each thread stores and re-reads
// only its own packs as whole vectors, so consecutive lanes touch
// consecutive 4..16-byte words: bank-conflict free without a transposed
// layout, and no barrier is needed between one row's last pass and the
// next row's first. The statistic is gathered while loading, streamed for
// the ops that prefer it (OpMath::kStreamsWhileCaching), else as the first
// of the exact resident passes, the second running over the cache.
// `edges`: rows off the pack grid (cols % pack != 0, where the functors
// allow: kTakesAnyCols). Each row's packs start at its RowEdges::head, and
// its head and tail elements (BlockEdgeColumn) stay in registers, in the
// statistic and written with the packs. A separate instance, so that rows
// on the grid keep their code: the per-row edge state took the float16
// softmax at 16-byte packs and 128-256 threads from 32 to 37-38 registers,
// 12 instead of 16 blocks per SM where registers bound them.
// Preconditions: cols % pack == 0 unless `edges`, pointers aligned to the
// pack, dynamic shared memory = cols * sizeof(cache_type) (the whole packs
// take at most that).
template <Op op, class Load, class Store, int pack, int block_size, bool edges>
__global__ void __launch_bounds__(block_size)
    BlockSmemRowKernel(Load load, Store store, RowParams p) {
  static_assert(!edges || kTakesAnyCols<Load, Store>, "rows off the pack grid need x's layout");
  using Math = OpMath<op, kFastMathFor<Load>>;
  using First = typename Math::First;
  using CacheT = typename Load::cache_type;
  using CachePack = Pack<CacheT, pack>;
  constexpr bool kCachesRawPacks = kLoadsRowUnchanged<Load> &&
                                   std::is_same_v<CacheT, typename Load::storage_type>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  CachePack* cache = reinterpret_cast<CachePack*>(smem_raw);

  const auto read_cached = [&](float* v, auto k) {
    const CachePack c = cache[k];
#pragma unroll
    for (int i = 0; i < pack; ++i) v[i] = ToFloat(c.elem[i]);
  };
  // Outside the row loop: the reducer alternates its slots across rows.
  using Reducer = BlockAllReducer<
      block_size,
      std::conditional_t<Math::kStreamsWhileCaching, typename Math::Partial, float>>;
  __shared__ typename Reducer::Storage storage;
  Reducer reducer(storage);
  const auto all_reduce = [&](float value, auto combine) { return reducer.Run(value, combine); };

  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const RowEdges row_edges = EdgesOf<pack, edges>(row, p.cols);
    const auto row_load = BindRow(load, row);
    // The edge element, in flight with the row's first packs.
    const int64_t edge_col = edges ? BlockEdgeColumn<pack>(row_edges, p.cols) : -1;
    float edge = 0.f;
    if (edge_col >= 0) row_load.template load<1>(&edge, edge_col);
    // Pass 1 caches the row, gathering on the way the streamed statistic or
    // the first of the resident passes.
    typename Math::Accumulator accumulator;
    float first = First::kIdentity;
    const auto gather = [&](const float* v) {
      if constexpr (Math::kStreamsWhileCaching) {
        accumulator.template Add<pack>(v);
      } else {
#pragma unroll
        for (int i = 0; i < pack; ++i) first = First{}.Add(first, v[i]);
      }
    };
    if constexpr (kCachesRawPacks) {
      // The pack goes to the cache as loaded; widening it and narrowing it
      // back cost 13 instructions per thread per row (RMSNorm float16 x
      // 12288 at 512 threads). Measured, same configs: 1.00x at 49152 rows,
      // 1.01x on the norms at 8192 rows, 1.02x on softmax at 2048 x 32000
      // (bench/results/2026-11-26-h100-norm-instructions/).
      ForEachFetchedPack<pack, block_size, BlockLoadBatch(pack), int, CachePack>(
          static_cast<int>(row_edges.packs),
          [&](CachePack& c, int k) {
            c = load.template LoadPack<pack>(row, PackColumn<pack>(row_edges.head, k));
          },
          [&](const CachePack& c, int k) {
            cache[k] = c;
            float v[pack];
            Load::template WidenPack<pack>(c, v);
            gather(v);
          });
    } else {
      ForEachLoadedPack<pack, block_size>(row_load, row_edges, [&](float* v, int k) {
        CachePack c;
#pragma unroll
        for (int i = 0; i < pack; ++i) c.elem[i] = FromFloat<CacheT>(v[i]);
        cache[k] = c;
        gather(v);
      });
    }
    if (edge_col >= 0) {
      if constexpr (Math::kStreamsWhileCaching) {
        accumulator.template Add<1>(&edge);
      } else {
        first = First{}.Add(first, edge);
      }
    }
    BlockRowStore<Store, pack, block_size, 1, false, edges> out(store, row_edges);
    out.Prefetch();
    // A copy of each of this thread's values of the row, its cached packs
    // and its edge element (neither is changed).
    const auto for_each = [&](auto&& f) {
      for (int k = threadIdx.x; k < static_cast<int>(row_edges.packs); k += block_size) {
        float v[pack];
        read_cached(v, k);
#pragma unroll
        for (int i = 0; i < pack; ++i) f(v[i]);
      }
      if (edge_col >= 0) {
        float v = edge;
        f(v);
      }
    };
    typename Math::Row stat;
    if constexpr (Math::kStreamsWhileCaching) {
      stat = Math::Finish(reducer.Run(accumulator.Get(), typename Math::MergeOp()), p);
    } else {
      stat = ResidentRowFrom<Math>(first, for_each, all_reduce, p);
    }
    if (threadIdx.x == 0) stat.WriteStats(p, row);
    out.StoreRow(row, read_cached, [&](float* v) { stat.template Apply<pack>(v); });
    if (edge_col >= 0) {
      stat.template Apply<1>(&edge);
      store.template store<1>(&edge, row, edge_col);
    }
  }
}

// kBlockUncached: one block per row, nothing cached, so any cols works. The
// statistic is streamed (OpMath's Accumulator: an online max and sum of
// exp for softmax, one read of the row instead of OneFlow's two; Welford
// partials for LayerNorm) and merged over the block. The second read (to write outputs) often hits L2, since a
// resident block's row is recent; in place is safe because the block-wide
// reduction's barrier separates every thread's first read from any write.
// Rows off the pack grid (`edges`) as kBlockSmem: the edge elements are
// read once, into registers.
// Preconditions as kBlockSmem, without the shared memory.
template <Op op, class Load, class Store, int pack, int block_size, bool edges>
__global__ void __launch_bounds__(block_size)
    BlockUncachedRowKernel(Load load, Store store, RowParams p) {
  static_assert(!edges || kTakesAnyCols<Load, Store>, "rows off the pack grid need x's layout");
  using Math = OpMath<op, kFastMathFor<Load>>;
  // Outside the row loop: the reducer alternates its slots across rows.
  using Reducer = BlockAllReducer<block_size, typename Math::Partial>;
  __shared__ typename Reducer::Storage storage;
  Reducer reducer(storage);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const RowEdges row_edges = EdgesOf<pack, edges>(row, p.cols);
    const auto row_load = BindRow(load, row);
    // The edge element, in flight with the row's first packs.
    const int64_t edge_col = edges ? BlockEdgeColumn<pack>(row_edges, p.cols) : -1;
    float edge = 0.f;
    if (edge_col >= 0) row_load.template load<1>(&edge, edge_col);
    typename Math::Accumulator accumulator;
    ForEachLoadedPack<pack, block_size>(
        row_load, row_edges, [&](float* v, int) { accumulator.template Add<pack>(v); });
    if (edge_col >= 0) accumulator.template Add<1>(&edge);
    BlockRowStore<Store, pack, block_size, BlockLoadBatch(pack), true, edges> out(store, row_edges);
    out.Prefetch();
    const typename Math::Row stat =
        Math::Finish(reducer.Run(accumulator.Get(), typename Math::MergeOp()), p);
    if (threadIdx.x == 0) stat.WriteStats(p, row);
    // The second read of the row, for the last pass.
    out.StoreRow(
        row,
        [&](float* v, int64_t k) {
          row_load.template load<pack>(v, PackColumn<pack>(row_edges.head, k));
        },
        [&](float* v) { stat.template Apply<pack>(v); });
    if (edge_col >= 0) {
      stat.template Apply<1>(&edge);
      store.template store<1>(&edge, row, edge_col);
    }
  }
}

// kBlockRegs: one block per row (grid-stride over rows), the row in
// registers: thread t holds packs t, t + block_size, ... (at most kPacks),
// all loaded before the block reduction, and the norms' weights are loaded
// once, before the row loop. At few rows each block is alone on its SM and
// the time is a chain of latencies: here a row costs one load round trip,
// where kBlockSmem waits one per batch of packs plus its weights' after the
// reduction, and kBlockUncached re-reads the row. The row is resident, so
// its statistic is exact in two passes over the registers (OpMath).
// Preconditions: cols % pack == 0, cols / pack <= kPacks * block_size,
// pointers aligned to the pack.
template <Op op, class Load, class Store, int pack, int block_size, int kPacks>
__global__ void __launch_bounds__(block_size)
    BlockRegsRowKernel(Load load, Store store, RowParams p) {
  const int64_t num_packs = p.cols / pack;
  // This thread's packs; threads past the row's end hold none but still
  // take part in the reductions.
  const int count =
      threadIdx.x < num_packs
          ? static_cast<int>((num_packs - threadIdx.x + block_size - 1) / block_size)
          : 0;
  const int64_t first_col = static_cast<int64_t>(threadIdx.x) * pack;
  constexpr int64_t kStride = static_cast<int64_t>(block_size) * pack;
  using Math = OpMath<op, kFastMathFor<Load>>;
  using Weights = WeightsOf<std::remove_cv_t<Store>>;
  float v[kPacks][pack];
  const auto load_row = [&](int64_t row) {
    const auto row_load = BindRow(load, row);
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      if (b < count) row_load.template load<pack>(v[b], first_col + b * kStride);
    }
  };
  // Float weights go in flight after the first row's loads, 16-bit ones
  // before them: each order was the faster one for its width at 1 to 64
  // rows x 4096 (float32 LayerNorm and RMSNorm 1.00-1.04x with the row
  // first, 16-bit 1.01-1.03x with the weights first; same-run H100
  // prototype, bench/results/2026-11-22-h100-weight-hoisting/).
  constexpr bool kFirstRowBeforeWeights = Weights::kLoads && Weights::kValueBytes == 4;
  if constexpr (kFirstRowBeforeWeights) {
    if (blockIdx.x < p.rows) load_row(blockIdx.x);
  }
  typename Weights::template type<kPacks, pack> weights;
  if constexpr (Weights::kLoads) {
    store.template LoadWeights<kPacks, pack>(weights, first_col, kStride, count);
  }
  using Reducer = BlockAllReducer<block_size, float>;
  __shared__ typename Reducer::Storage storage;
  Reducer reducer(storage);
  const auto all_reduce = [&](float value, auto combine) { return reducer.Run(value, combine); };
  // This thread's values of the row, in its registers.
  const auto for_each = [&](auto&& f) {
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
#pragma unroll
      for (int i = 0; i < pack; ++i) {
        if (b < count) f(v[b][i]);
      }
    }
  };

  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    if (!kFirstRowBeforeWeights || row != blockIdx.x) load_row(row);
    // 16-bit weights widen in the loop, after the row's loads are issued
    // (float ones need no widening, and their code stays as it was).
    if constexpr (Weights::kLoads && Weights::kValueBytes < 4) HideFromHoisting(weights);
    const typename Math::Row stat = ResidentRow<Math>(for_each, all_reduce, p);
    if (threadIdx.x == 0) stat.WriteStats(p, row);
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      if (b < count) stat.template ApplyKept<pack>(v[b]);
    }
    if constexpr (kQuantizes<Store>) {
      store.template StoreRow<kPacks, pack>(
          &v[0][0], row, [&](int b) { return first_col + b * kStride; },
          [&](int b) { return b < count; }, [&](float m) { return reducer.Run(m, MaxOp()); },
          threadIdx.x == 0);
    } else if constexpr (Weights::kLoads) {
      store.template StoreLoaded<kPacks, pack>(v, weights, row, first_col, kStride, count);
    } else {
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
        if (b < count) store.template store<pack>(v[b], row, first_col + b * kStride);
      }
    }
  }
}

// Eviction priorities for kBlockReread's two reads of a row: kept (in L1
// and L2) for the second, then dropped. A read with evict_first does not
// lower a line's evict_last priority in L2: DemoteL2Line does.
enum class Eviction { kLast, kFirst };

template <Eviction eviction>
__device__ __forceinline__ uint64_t L2EvictionPolicy() {
  uint64_t policy;
  if constexpr (eviction == Eviction::kLast) {
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  } else {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  }
  return policy;
}

// One pack read with L1 eviction priority `eviction` and the L2 `policy`
// (L2EvictionPolicy). Packs under 4 bytes (a pointer's alignment narrowed
// the config's) are read plainly. The qualifiers are part of the asm
// string, so each width names both priorities.
#define KT_LOAD_WITH_EVICTION(VEC, ...)                                                    \
  if constexpr (eviction == Eviction::kLast) {                                             \
    asm volatile("ld.global.L1::evict_last.L2::cache_hint" VEC : __VA_ARGS__);             \
  } else {                                                                                 \
    asm volatile("ld.global.L1::evict_first.L2::cache_hint" VEC : __VA_ARGS__);            \
  }
template <Eviction eviction, class P>
__device__ __forceinline__ P LoadWithEviction(const P* address, uint64_t policy) {
  P pack;
  if constexpr (sizeof(P) == 16) {
    uint4 r;
    KT_LOAD_WITH_EVICTION(".v4.u32 {%0,%1,%2,%3}, [%4], %5;", "=r"(r.x), "=r"(r.y), "=r"(r.z),
                          "=r"(r.w) : "l"(address), "l"(policy));
    memcpy(&pack, &r, sizeof(r));
  } else if constexpr (sizeof(P) == 8) {
    uint2 r;
    KT_LOAD_WITH_EVICTION(".v2.u32 {%0,%1}, [%2], %3;", "=r"(r.x), "=r"(r.y) : "l"(address),
                          "l"(policy));
    memcpy(&pack, &r, sizeof(r));
  } else if constexpr (sizeof(P) == 4) {
    unsigned r;
    KT_LOAD_WITH_EVICTION(".u32 %0, [%1], %2;", "=r"(r) : "l"(address), "l"(policy));
    memcpy(&pack, &r, sizeof(r));
  } else {
    pack = *address;
  }
  return pack;
}
#undef KT_LOAD_WITH_EVICTION

// Returns the 128-byte L2 line at `line_start` (128-byte aligned) to
// normal eviction priority. Lines read with evict_last keep it after the
// kernel, through any amount of normal traffic, until the context resets
// its persisting lines. On the H100, while they held part of L2, a later
// kernel rereading its rows through L2 (block_uncached) ran 15% slower,
// and one reading the same buffer once (block_smem) 3% faster
// (bench/results/2026-11-27-h100-reread-l2-leak/).
__device__ __forceinline__ void DemoteL2Line(const void* line_start) {
  asm volatile("applypriority.global.L2::evict_normal [%0], 128;" ::"l"(line_start) : "memory");
}

// kBlockReread: one block per row, no row loop, read twice as
// kBlockUncached, but all of a thread's packs of the row (t, t +
// block_size, ..., at most kPacks) are loaded before any is used, and held
// raw only until they are added to the statistic (OpMath's Accumulator,
// merged over the block). The second read comes after the block
// reduction, from L1 (the first read's evict_last), and each thread
// re-reads and writes only its own packs, so in place is safe. After the
// second read, the row's L2 lines are demoted (DemoteL2Line).
// Preconditions: a load that reads x unchanged (kLoadsRowUnchanged),
// cols % pack == 0, cols / pack <= kPacks * block_size, pointers aligned
// to the pack, a grid of at least one block per row.
template <Op op, class Load, class Store, int pack, int block_size, int kPacks>
__global__ void __launch_bounds__(block_size)
    BlockRereadRowKernel(Load load, Store store, RowParams p) {
  static_assert(kLoadsRowUnchanged<Load>, "block_reread reads x's packs as stored");
  using Math = OpMath<op, kFastMathFor<Load>>;
  using T = typename std::remove_cv_t<Load>::storage_type;
  using Raw = Pack<T, pack>;
  using Reducer = BlockAllReducer<block_size, typename Math::Partial>;
  __shared__ typename Reducer::Storage storage;
  Reducer reducer(storage);
  const int64_t num_packs = p.cols / pack;
  // This thread's packs; threads past the row's end hold none but still
  // take part in the reduction.
  const int count =
      threadIdx.x < num_packs
          ? static_cast<int>((num_packs - threadIdx.x + block_size - 1) / block_size)
          : 0;
  const uint64_t keep = L2EvictionPolicy<Eviction::kLast>();
  const uint64_t drop = L2EvictionPolicy<Eviction::kFirst>();
  // No grid-stride loop (CheckBlockRereadKnobs: grid_waves 0, rows within
  // one grid): in the loop ptxas kept bfloat16 instances at 41 registers
  // where this takes 32 (float16: 31 and 32), one block of 1024 per SM
  // instead of two.
  const int64_t row = blockIdx.x;
  if (row >= p.rows) return;
  const Raw* x = reinterpret_cast<const Raw*>(load.src + load.RowStart(row));
  Raw raw[kPacks];
#pragma unroll
  for (int b = 0; b < kPacks; ++b) {
    if (b < count) {
      raw[b] = LoadWithEviction<Eviction::kLast>(x + threadIdx.x + b * block_size, keep);
    }
  }
  typename Math::Accumulator accumulator;
#pragma unroll
  for (int b = 0; b < kPacks; ++b) {
    if (b < count) {
      float v[pack];
      Load::template WidenPack<pack>(raw[b], v);
      accumulator.template Add<pack>(v);
    }
  }
  const typename Math::Row stat =
      Math::Finish(reducer.Run(accumulator.Get(), typename Math::MergeOp()), p);
  if (threadIdx.x == 0) stat.WriteStats(p, row);
#pragma unroll
  for (int b = 0; b < kPacks; ++b) {
    if (b < count) {
      raw[b] = LoadWithEviction<Eviction::kFirst>(x + threadIdx.x + b * block_size, drop);
    }
  }
  // Each line by the thread whose pack starts it (packs are aligned to
  // their size), a row's partial first line by thread 0. Here, between the
  // second read and the stores: demoting after the stores took 0.4-1.3%
  // longer on the H100.
#pragma unroll
  for (int b = 0; b < kPacks; ++b) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(x + threadIdx.x + b * block_size);
    if (b < count && ((address & 127) < sizeof(Raw) || (threadIdx.x == 0 && b == 0))) {
      DemoteL2Line(reinterpret_cast<const void*>(address & ~uintptr_t{127}));
    }
  }
#pragma unroll
  for (int b = 0; b < kPacks; ++b) {
    if (b < count) {
      float v[pack];
      Load::template WidenPack<pack>(raw[b], v);
      stat.template Apply<pack>(v);
      store.template store<pack>(v, row,
                                 (static_cast<int64_t>(threadIdx.x) + b * block_size) * pack);
    }
  }
}

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_ROW_KERNELS_CUH_
