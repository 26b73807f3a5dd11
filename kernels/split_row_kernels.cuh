// The split-row kernels, for few very long rows where one block per row
// would leave most SMs idle: each block caches its slice of a row in shared
// memory, the blocks of a row exchange one partial statistic each, and each
// writes its own slice, so global memory is read once.
// kSplitRow: the blocks of a row form a thread-block cluster (Hopper, sm_90+,
// at most 16 blocks) and exchange through distributed shared memory, at
// full pack width for any cols where the functors allow (RowEdges).
// kSplitGrid: any number of blocks per row, exchanging through global
// memory across grid barriers (a cooperative launch).
// kSplitRegs: a cluster per row like kSplitRow, each block's slice held in
// registers (refilled through a bulk copy into shared memory), and the row's
// statistics merged once, warp to warp, through distributed shared memory.
// kSplitTwoPass: any number of blocks per row and no barrier: one kernel
// writes each block's partial to a workspace, a second one (a programmatic
// dependent launch on Hopper, which loads its slice while the first one
// finishes) merges them and writes the outputs.
#ifndef KERNTUNE_KERNELS_SPLIT_ROW_KERNELS_CUH_
#define KERNTUNE_KERNELS_SPLIT_ROW_KERNELS_CUH_

#include <cooperative_groups.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/launch_config.h"  // the kSplitTwoPass limits
#include "kernels/op_math.cuh"
#include "kernels/row_common.cuh"

namespace kt::kernels::internal {
// Own namespace: the row kernels' helpers (row_kernels.cuh) may grow the
// same names.
namespace split_row {

// Block `rank`'s part of a row of num_packs packs, in a cluster of split
// blocks: contiguous, whole packs, the first num_packs % split blocks one
// pack more than the others. The host sizes shared memory for the larger
// share (SplitRowSharedMemoryBytes).
struct Slicing {
  int64_t base;   // num_packs / split
  int64_t extra;  // num_packs % split
  static Slicing Of(int64_t num_packs, int split) { return {num_packs / split, num_packs % split}; }
};
struct Slice {
  int64_t first;  // in packs
  int64_t count;  // in packs
};
// No division here: the host divides once (Slicing::Of), so the kernel makes
// no 64-bit division call.
__device__ __forceinline__ Slice SliceOf(const Slicing& s, int rank) {
  return {rank * s.base + (rank < s.extra ? rank : s.extra), s.base + (rank < s.extra ? 1 : 0)};
}

// Per-launch scalars: the row ops' own, and how cols / pack packs are
// sliced over the blocks of a row.
struct Params : RowParams {
  Slicing slicing;
  // SplitRowKernel's bulk copy: slices cached per block (SplitRowCache), 2
  // to copy the block's next row in while it finishes this one.
  int cache_buffers = 1;
};

// In a cluster, a row's whole packs (RowEdges) are cols / pack, what
// Slicing divides, or one fewer: missing from the end of the last block's
// slice, whose tail grows by it. EdgeColumn: the head or tail element this
// thread moves, at most one: rank 0's first threads take the head, the last
// rank's the tail (split >= 2, so never both). -1 when none.
__device__ __forceinline__ int64_t EdgeColumn(const RowEdges& e, int64_t cols, int rank,
                                              int split) {
  const int64_t t = threadIdx.x;
  if (rank == 0) return t < e.head ? t : -1;
  if (rank == split - 1) return e.tail_col + t < cols ? e.tail_col + t : -1;
  return -1;
}

// A block's slice of one row: where its packs start (edges.head, the row's
// first whole pack) and which of them it owns. Without kAnyCols the row has
// no edges and every slice is the full one.
struct RowPart {
  RowEdges edges;
  Slice slice;
};
template <int pack, bool kAnyCols>
__device__ __forceinline__ RowPart RowPartOf(int64_t row, int64_t cols, const Slice& full_slice,
                                             int rank, int split) {
  RowPart part{EdgesOf<pack, kAnyCols>(row, cols), full_slice};
  if (rank == split - 1) part.slice.count -= part.edges.missing_packs;
  return part;
}

// --- SplitRowKernel's bulk-copy load (Hopper's cp.async.bulk, non-tensor) ---
// One thread copies the block's whole slice of a row into shared memory in
// the storage dtype, so the slice is in flight at once instead of the few
// packs per thread that ordinary loads keep outstanding. The copy lands in
// kBulkChunks chunks, each completing its own mbarrier, so that the block
// reduces chunk k while later ones still arrive.

// Whether SplitRowKernel copies through the bulk copy: a load that reads x
// unchanged (kLoadsRowUnchanged) in 16-byte packs, so that every slice
// starts 16-byte aligned and is whole 16-byte units (the copy's rules).
// The host's SplitRowBulkCopies (config_rules.h) must agree.
template <class Load, int pack>
inline constexpr bool kBulkCopies =
    kLoadsRowUnchanged<Load> && pack * sizeof(typename Load::storage_type) == 16;

constexpr int kBulkChunks = 8;

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One arrival (the copying thread's) completes each phase.
__device__ __forceinline__ void InitChunkBarrier(uint64_t* barrier) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(SharedAddress(barrier)) : "memory");
}

// Makes the barriers' initialisation (generic-proxy writes) visible to the
// async proxy that the copies complete them through.
__device__ __forceinline__ void FenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Arrives on the barrier and adds `bytes` to the transaction count its
// current phase waits for (0: the arrival alone completes the phase).
__device__ __forceinline__ void ArriveExpectingBytes(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                   SharedAddress(barrier)),
               "r"(bytes)
               : "memory");
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to
// this block's shared memory; completes `bytes` of the barrier's phase.
__device__ __forceinline__ void BulkCopyToShared(void* dst, const void* src, uint32_t bytes,
                                                 uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(SharedAddress(dst)),
      "l"(src), "r"(bytes), "r"(SharedAddress(barrier))
      : "memory");
}

// Orders this thread's (and, through the barrier before it, the block's)
// generic-proxy shared-memory accesses before later async-proxy ones.
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Until the barrier's phase of `parity` completes; its data is then visible.
// kClusterScope: acquire at cluster scope, so that what other blocks of the
// cluster stored through the barrier (st.async) is visible too.
template <bool kClusterScope = false>
__device__ __forceinline__ void WaitChunkBarrier(uint64_t* barrier, uint32_t parity) {
  const uint32_t address = SharedAddress(barrier);
  uint32_t done = 0;
  do {
    if constexpr (kClusterScope) {
      asm volatile(
          "{\n"
          " .reg .pred complete;\n"
          " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 complete, [%1], %2;\n"
          " selp.u32 %0, 1, 0, complete;\n"
          "}\n"
          : "=r"(done)
          : "r"(address), "r"(parity)
          : "memory");
    } else {
      asm volatile(
          "{\n"
          " .reg .pred complete;\n"
          " mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n"
          " selp.u32 %0, 1, 0, complete;\n"
          "}\n"
          : "=r"(done)
          : "r"(address), "r"(parity)
          : "memory");
    }
  } while (done == 0);
}

// Packs [begin, end) of a slice of `count` packs: chunk c of kBulkChunks
// near-equal ones (empty when the slice has fewer packs than chunks).
struct ChunkRange {
  int64_t begin;
  int64_t end;
};
__device__ __forceinline__ ChunkRange ChunkOf(int64_t count, int c) {
  const int64_t per_chunk = (count + kBulkChunks - 1) / kBulkChunks;
  const int64_t begin = c * per_chunk < count ? c * per_chunk : count;
  return {begin, begin + per_chunk < count ? begin + per_chunk : count};
}

// Issued by one thread: the copy of the block's slice of `row` (pack k at
// column first_col + (slice.first + k) * pack) into `cache`, chunk c
// completing barriers[c]. Every barrier gets exactly one arrival, empty
// chunks included, so each completes one phase per copy and the waiting
// threads can track phases by parity alone. The caller must have ordered
// every thread's reads of `cache` from its last use before this (a block
// barrier). Not inlined: one thread runs it once per row, and inlined at
// its two call sites it made float32 LayerNorm at 1024 threads spill 112
// bytes (64 registers a thread).
template <int pack, class Load, class CachePack>
__device__ __noinline__ void CopySliceAsync(const Load& load, int64_t row, int64_t first_col,
                                               const Slice& slice, CachePack* cache,
                                               uint64_t* barriers) {
  static_assert(sizeof(CachePack) == 16, "the bulk copy moves 16-byte packs");
  const auto* src = load.src + row * load.row_stride + first_col + slice.first * pack;
  // The buffer was last read by generic loads; the copy writes it through
  // the async proxy.
  FenceProxyAsync();
#pragma unroll
  for (int c = 0; c < kBulkChunks; ++c) {
    const ChunkRange chunk = ChunkOf(slice.count, c);
    const auto bytes = static_cast<uint32_t>((chunk.end - chunk.begin) * sizeof(CachePack));
    ArriveExpectingBytes(&barriers[c], bytes);
    if (bytes > 0) {
      BulkCopyToShared(cache + chunk.begin, src + chunk.begin * pack, bytes, &barriers[c]);
    }
  }
}

// Pass 1 of the bulk path: this thread's share of the statistic over the
// copied slice of `count` packs, chunk by chunk as each arrives (the phase
// of `parity` of barriers[c]), widened to float from the cached storage
// dtype.
template <class Math, int pack, int block_size, class CachePack>
__device__ __forceinline__ typename Math::Accumulator ReduceCopiedSlice(const CachePack* cache,
                                                                        int64_t count,
                                                                        uint64_t* barriers,
                                                                        uint32_t parity) {
  typename Math::Accumulator stat;
#pragma unroll 1
  for (int c = 0; c < kBulkChunks; ++c) {
    const ChunkRange chunk = ChunkOf(count, c);
    WaitChunkBarrier(&barriers[c], parity);
#pragma unroll 4
    for (int64_t k = chunk.begin + threadIdx.x; k < chunk.end; k += block_size) {
      const CachePack packed = cache[k];
      float v[pack];
#pragma unroll
      for (int i = 0; i < pack; ++i) v[i] = ToFloat(packed.elem[i]);
      stat.template Add<pack>(v);
    }
  }
  return stat;
}

// Packs each thread keeps in flight in the loading pass. Few rows make this
// kernel latency-bound, so what matters is how many bytes an SM has
// outstanding before the first load returns: about 16 KiB per block, between
// 2 packs and 64 bytes (16 packs) per thread, so that 1024-thread blocks stay
// within their 64 registers.
constexpr int LoadBatch(int pack_bytes, int block_size) {
  const int wanted = 16384 / (block_size * pack_bytes);
  const int most = 64 / pack_bytes < 16 ? 64 / pack_bytes : 16;
  return wanted < 2 ? 2 : (wanted > most ? most : wanted);
}

// Pass 1 over a block's slice of `row`, whose pack k starts at column
// first_col + k * pack: loads it through `load` (kBatch packs in flight per
// thread), caches it in shared memory in Load::cache_type and returns this
// thread's share of the statistic.
template <class Math, int pack, int block_size, class Load, class CachePack>
__device__ __forceinline__ typename Math::Accumulator LoadSlice(const Load& load, int64_t row,
                                                                int64_t first_col,
                                                                const Slice& slice,
                                                                CachePack* cache) {
  using CacheT = typename Load::cache_type;
  constexpr int kBatch =
      LoadBatch(pack * static_cast<int>(sizeof(typename Load::storage_type)), block_size);
  typename Math::Accumulator stat;
  for (int64_t base = threadIdx.x; base < slice.count;
       base += static_cast<int64_t>(kBatch) * block_size) {
    float v[kBatch][pack];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t k = base + static_cast<int64_t>(b) * block_size;
      if (k < slice.count) {
        load.template load<pack>(v[b], row, first_col + (slice.first + k) * pack);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t k = base + static_cast<int64_t>(b) * block_size;
      if (k < slice.count) {
        CachePack c;
#pragma unroll
        for (int i = 0; i < pack; ++i) c.elem[i] = FromFloat<CacheT>(v[b][i]);
        cache[k] = c;
        stat.template Add<pack>(v[b]);
      }
    }
  }
  return stat;
}

// Pass 2 over packs [begin, end) of the block's cached slice (pack k of the
// row at column first_col + k * pack, as LoadSlice): outputs through
// `finish` and `store`.
template <int pack, int block_size, class Store, class Finish, class CachePack>
__device__ __forceinline__ void StoreSlice(const Store& store, const Finish& finish, int64_t row,
                                           int64_t first_col, const Slice& slice,
                                           const CachePack* cache, int64_t begin, int64_t end) {
  const auto apply = [&](int64_t k, float (&v)[pack]) {
    const CachePack c = cache[k];
#pragma unroll
    for (int i = 0; i < pack; ++i) v[i] = ToFloat(c.elem[i]);
    finish.template Apply<pack>(v);
  };
  if constexpr (kStoreLoadsWeights<std::remove_cv_t<Store>>) {
    // The norms' stores load gamma (and beta), and with few rows nothing
    // else hides that latency: each thread takes a batch of packs and the
    // store functor loads all their weights before the first store, one
    // round trip per batch instead of per pack. (Stores without weights
    // measured slower batched, so they keep the plain loop.)
    constexpr int kBatch = WeightBatch(pack, block_size);
    for (int64_t base = begin + threadIdx.x; base < end;
         base += static_cast<int64_t>(kBatch) * block_size) {
      float v[kBatch][pack];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int64_t k = base + static_cast<int64_t>(b) * block_size;
        if (k < end) apply(k, v[b]);
      }
      store.template StoreBatch<kBatch, pack>(v, row, first_col + (slice.first + base) * pack,
                                              static_cast<int64_t>(block_size) * pack,
                                              (end - base + block_size - 1) / block_size);
    }
  } else {
    // store_as_one: this loop's plain pack stores compiled to one store
    // per element.
    for (int64_t k = begin + threadIdx.x; k < end; k += block_size) {
      float v[pack];
      apply(k, v);
      store.template store_as_one<pack>(v, row, first_col + (slice.first + k) * pack);
    }
  }
}

// kSplitGrid's exchange: block rank r of a row publishes its partial in the
// first bytes of its own slice of y (the row's output, which nobody reads
// before the kernel ends), as `Unit`s of the output dtype's width so that
// any y the dtype allows is aligned for them. The host guarantees every
// slice spans at least 16 bytes, more than any Partial.
struct GridSlots {
  void* y;    // the output, rows x cols of the op's dtype
  int split;  // blocks per row
};

template <class Unit, class Partial>
__device__ __forceinline__ void WriteSlot(Unit* slot, const Partial& partial) {
  static_assert(sizeof(Partial) % sizeof(Unit) == 0, "a partial is whole units");
  Unit units[sizeof(Partial) / sizeof(Unit)];
  memcpy(units, &partial, sizeof(Partial));
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(Partial) / sizeof(Unit)); ++i) slot[i] = units[i];
}

// Read through L2 (ld.global.cg): the slot was written by another SM in
// this kernel, after which this SM's L1 must not serve it.
template <class Unit, class Partial>
__device__ __forceinline__ Partial ReadSlot(const Unit* slot) {
  Unit units[sizeof(Partial) / sizeof(Unit)];
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(Partial) / sizeof(Unit)); ++i) {
    units[i] = __ldcg(slot + i);
  }
  Partial partial;
  memcpy(&partial, units, sizeof(Partial));
  return partial;
}

// The row statistic from the `split` partials of a row, read by read(r):
// lane l merges ranks l, l + 32, ... in order, then Math::WarpMerge
// combines the lanes. Every block of the row runs the same operations on the
// same partials, so all compute bit-identical statistics. Every lane of the
// warp must call it.
template <class Math, class Read>
__device__ __forceinline__ typename Math::Partial MergeRowPartials(int split, const Read& read) {
  using Partial = typename Math::Partial;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  Partial mine = Math::Identity();
  for (int r = lane; r < split; r += kWarpSize) {
    const Partial q = read(r);
    mine = r == lane ? q : Math::Merge(mine, q);
  }
  return Math::WarpMerge(mine);
}

// The block's statistic from every thread's partial, two ways, each the
// faster one where it is used (H100, 2026-11-26): WarpMerge in each warp,
// then
//  - BlockMergeInOrder: thread 0 merges the warps' results in order (CUB's
//    warp-reductions algorithm); valid on thread 0 only. The fewest
//    registers, for the cluster and grid kernels, whose loads in flight
//    need them: merging in every warp raised the cluster kernel's registers
//    (float32 LayerNorm at 256 threads: 80 -> 92) and cost it 1.08-1.29x at
//    64 rows x 32768.
//  - BlockMergeAllWarps: every warp merges the warps' results at once
//    (WarpMerge); valid on every thread. The shortest latency, for the
//    two-pass kernels at 1-8 rows: in order, a softmax block's seven
//    rescaling merges cost them 1.05-1.13x.
// `warp_partials` holds block_size / 32; reusing it needs a barrier first.
template <class Math, int block_size>
__device__ __forceinline__ typename Math::Partial BlockMergeInOrder(
    const typename Math::Partial& mine, typename Math::Partial* warp_partials) {
  constexpr int kWarps = block_size / kWarpSize;
  const typename Math::Partial warp = Math::WarpMerge(mine);
  if (threadIdx.x % kWarpSize == 0) warp_partials[threadIdx.x / kWarpSize] = warp;
  __syncthreads();
  typename Math::Partial total = warp;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int w = 1; w < kWarps; ++w) total = Math::Merge(total, warp_partials[w]);
  }
  return total;
}

template <class Math, int block_size>
__device__ __forceinline__ typename Math::Partial BlockMergeAllWarps(
    const typename Math::Partial& mine, typename Math::Partial* warp_partials) {
  constexpr int kWarps = block_size / kWarpSize;
  static_assert(kWarps <= kWarpSize, "one warp merges the warps' partials");
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const typename Math::Partial warp = Math::WarpMerge(mine);
  if (lane == 0) warp_partials[threadIdx.x / kWarpSize] = warp;
  __syncthreads();
  return Math::WarpMerge(lane < kWarps ? warp_partials[lane] : Math::Identity());
}

// --- SplitRegsKernel's pieces ---

// Issued by one thread: the bulk copy of the block's slice of `row` (pack k
// at column first_col + (slice.first + k) * pack) into `cache`, in chunks of
// block_size packs: chunk b holds pack b of every thread (packs
// b * block_size + t) and completes barriers[b], so each thread waits for
// exactly the chunks it reads. Chunks up to `chunks` (those of the block's
// largest slice, the same for every row) get one arrival each, an empty one
// (the last block's slice a pack short on this row) completing its phase
// alone, so each barrier completes one phase per row. Not inlined: inlined,
// the float32 instance of 1024 threads spilled 80 bytes instead of 56.
template <int pack, int block_size, int kPacks, class Load, class CachePack>
__device__ __noinline__ void CopyThreadPacksAsync(const Load& load, int64_t row,
                                                     int64_t first_col, Slice slice, int chunks,
                                                     CachePack* cache, uint64_t* barriers) {
  static_assert(sizeof(CachePack) == 16, "the bulk copy moves 16-byte packs");
  const auto* src = load.src + row * load.row_stride + first_col + slice.first * pack;
  // The buffer was last read by generic loads; the copy writes it through
  // the async proxy.
  FenceProxyAsync();
#pragma unroll
  for (int b = 0; b < kPacks; ++b) {
    if (b >= chunks) break;
    const int64_t begin = static_cast<int64_t>(b) * block_size;
    const int64_t left = slice.count - begin;
    const int64_t packs = left <= 0 ? 0 : left < block_size ? left : block_size;
    const auto bytes = static_cast<uint32_t>(packs * sizeof(CachePack));
    ArriveExpectingBytes(&barriers[b], bytes);
    if (bytes > 0) BulkCopyToShared(cache + begin, src + begin * pack, bytes, &barriers[b]);
  }
}

// The most blocks a cluster holds (Hopper's non-portable maximum).
constexpr int kMaxClusterBlocks = 16;

// SplitRegsKernel's one exchange per row: every warp sends its merged
// partial to every block of the cluster (st.async into slot rank * warps +
// warp of that block, completing that block's mbarrier), then each block
// waits on its own mbarrier for all split * warps partials, and each warp
// merges them in slot order (the same order in every block, so every warp of
// the cluster computes bit-identical statistics). No block-wide or
// cluster-wide barrier: a block-wide all-reduce and a cluster barrier per
// exchange, twice per row, cost 2048 x 128256 float16 softmax a fifth of
// its bandwidth (H100 prototype, 2251 against 2757 GB/s).
// Two slot sets alternate. A block writes set s for exchange k + 2 only
// after it has every block's partials of exchange k + 1, which each warp
// sends after reading its own set-s slots of exchange k: no slot is
// overwritten while it is read. The block's thread 0 arms the set's barrier
// (the expected bytes) once per exchange; partials that arrive first only
// make its transaction count wait.
template <class Partial, int block_size>
struct ClusterExchange {
  static constexpr int kWarps = block_size / kWarpSize;
  static_assert(sizeof(Partial) == 8, "a partial travels as one 8-byte st.async");
  Partial slots[2][kMaxClusterBlocks * kWarps];
  uint64_t arrived[2];

  // Thread 0, once, before the cluster barrier that precedes any exchange.
  __device__ __forceinline__ void Init() {
    InitChunkBarrier(&arrived[0]);
    InitChunkBarrier(&arrived[1]);
  }

  // Exchange number `k` (0, 1, ... over the kernel): this thread's partial
  // in, the row's statistic out, on every thread. Every thread of every
  // block of the cluster must call it equally often.
  template <class Math>
  __device__ __forceinline__ Partial AllMerge(const Partial& mine, int64_t k, int rank,
                                              int split) {
    const int set = static_cast<int>(k & 1);
    const auto parity = static_cast<uint32_t>((k >> 1) & 1);
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
    const Partial warp_partial = Math::WarpMerge(mine);
    if (threadIdx.x == 0) {
      ArriveExpectingBytes(&arrived[set], static_cast<uint32_t>(split * kWarps * sizeof(Partial)));
    }
    if (lane < split) {
      uint2 words;
      memcpy(&words, &warp_partial, sizeof(words));
      const uint32_t slot = PeerAddress(SharedAddress(&slots[set][rank * kWarps + warp]), lane);
      const uint32_t barrier = PeerAddress(SharedAddress(&arrived[set]), lane);
      asm volatile(
          "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::
              "r"(slot),
          "r"(words.x), "r"(words.y), "r"(barrier)
          : "memory");
    }
    WaitChunkBarrier</*kClusterScope=*/true>(&arrived[set], parity);
    Partial merged = Math::Identity();
    for (int i = lane; i < split * kWarps; i += kWarpSize) {
      merged = i == lane ? slots[set][i] : Math::Merge(merged, slots[set][i]);
    }
    return Math::WarpMerge(merged);
  }

 private:
  // The same shared-memory variable's address in cluster block `rank`.
  static __device__ __forceinline__ uint32_t PeerAddress(uint32_t local, int rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    return remote;
  }
};

// kSplitTwoPass's scratch: the rows x split partials, row-major, each in a
// kTwoPassSlotBytes slot (launch_config.h).
struct TwoPassWorkspace {
  void* partials;
  int split;  // blocks per row
};

template <class Partial>
struct alignas(kTwoPassSlotBytes) TwoPassSlot {
  static_assert(sizeof(Partial) <= kTwoPassSlotBytes, "a partial fits its slot");
  Partial partial;
};

// A kSplitTwoPass block's place: block b = row * split + rank owns slice
// SliceOf(p.slicing, rank) of `row`; its thread t holds packs t,
// t + block_size, ... of the slice in registers (at most
// kMaxTwoPassPacksPerThread, which the rules guarantee).
struct TwoPassBlock {
  int64_t row;
  int rank;
  Slice slice;
};
__device__ __forceinline__ TwoPassBlock TwoPassBlockOf(const Params& p, int split) {
  const int rank = static_cast<int>(blockIdx.x % static_cast<unsigned>(split));
  return {blockIdx.x / static_cast<unsigned>(split), rank, SliceOf(p.slicing, rank)};
}

// Whether pack b of this thread lies inside the block's slice.
template <int block_size>
__device__ __forceinline__ bool HoldsPack(const TwoPassBlock& block, int b) {
  return threadIdx.x + static_cast<int64_t>(b) * block_size < block.slice.count;
}

// Loads this thread's packs of its slice, all in flight at once.
template <int pack, int block_size, class Load>
__device__ __forceinline__ void LoadThreadPacks(const Load& load, const TwoPassBlock& block,
                                                float (&v)[kMaxTwoPassPacksPerThread][pack]) {
#pragma unroll
  for (int b = 0; b < kMaxTwoPassPacksPerThread; ++b) {
    if (HoldsPack<block_size>(block, b)) {
      const int64_t k = threadIdx.x + static_cast<int64_t>(b) * block_size;
      load.template load<pack>(v[b], block.row, (block.slice.first + k) * pack);
    }
  }
}

}  // namespace split_row

// Thread mapping: a cluster of split = cluster size blocks per row (blocks
// of cluster c: row c, then c + clusters, ...); block rank r owns the
// contiguous packs SliceOf(p.slicing, r) of the row's cols / pack, thread t
// packs t, t + block_size, ... of that slice. Pass 1 caches the slice in
// shared memory in Load::cache_type and accumulates the op's statistic; the
// block reduces it (BlockMergeInOrder) to one partial, published in shared
// memory. After a cluster barrier every warp reads the `split` partials
// (lane r from rank r, through distributed shared memory) and merges them in
// rank order, so every block of the cluster computes bit-identical row
// statistics. Pass 2 turns the cached slice into outputs through `store`;
// block rank 0 writes the per-row outputs. The partials are read between a
// cluster arrive and the matching wait at the end of the row, so no block
// leaves (or overwrites its partial) while another may still read it.
// Pass 1 loads one of two ways:
//  - the bulk copy (kBulkCopies: a load that reads x unchanged, 16-byte
//    packs): thread 0 copies the whole slice with cp.async.bulk in
//    kBulkChunks chunks and the threads reduce each chunk as its mbarrier
//    completes. With p.cache_buffers == 2 the grid is persistent and the
//    block's next row is copied into the other buffer while this one is
//    reduced, exchanged and stored, so the SM always has bytes in flight.
//    Buffer b's barriers complete one phase per row copied into it, so the
//    n-th row in a buffer waits for parity n & 1. A block barrier after
//    pass 2 orders every thread's reads of a buffer before the next copy
//    into it (the cluster barrier does not: its arrival precedes pass 2).
//  - ordinary loads through `load` (every other case): LoadBatch packs in
//    flight per thread, widened to float and cached in Load::cache_type.
// When Load and Store follow x's layout (kFollowsRowLayout), cols need not
// be a multiple of pack: each row's packs start at its RowEdges::head, and
// the head (rank 0) and tail (last rank) elements move one per thread
// through ordinary loads, in flight with the slice, and are stored after it.
// Preconditions: sm_90+; cluster dims (split, 1, 1), gridDim.x a multiple of
// split; blockDim.x = block_size; cols % pack == 0 unless Load and Store
// follow x's layout; pointers aligned to the pack; cols / pack >= split;
// p.slicing = Slicing::Of(cols / pack, split); dynamic shared memory >=
// p.cache_buffers * ceil(cols / pack / split) * pack * sizeof(cache_type)
// (SplitRowCache); p.cache_buffers 1 unless kBulkCopies. y may equal x:
// every thread reads its share of the row (a copy completes before its
// chunk is read) before the first cluster barrier and writes only that
// share, and a row's copy is issued before any block writes that row.
template <Op op, class Load, class Store, int pack, int block_size>
__global__ void __launch_bounds__(block_size)
    SplitRowKernel(Load load, Store store, split_row::Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // clusters need sm_90; the host refuses older devices
#else
  namespace cg = cooperative_groups;
  using Math = OpMath<op, kFastMathFor<Load>>;
  using Partial = typename Math::Partial;
  using CachePack = Pack<typename Load::cache_type, pack>;
  static_assert(block_size % kWarpSize == 0, "whole warps: every lane shuffles");
  constexpr bool kAnyCols = kTakesAnyCols<Load, Store>;
  constexpr bool kBulk = split_row::kBulkCopies<Load, pack>;
  constexpr int kChunks = split_row::kBulkChunks;

  extern __shared__ __align__(32) unsigned char split_row_smem[];
  __shared__ Partial warp_partials[block_size / kWarpSize];
  __shared__ Partial published;
  // The bulk copy's barriers: kChunks per buffer.
  __shared__ uint64_t chunk_barriers[kBulk ? 2 * kChunks : 1];

  const cg::cluster_group cluster = cg::this_cluster();
  const int split = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const split_row::Slice full_slice = split_row::SliceOf(p.slicing, rank);
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int64_t clusters = gridDim.x / split;
  const int64_t first_row = blockIdx.x / split;
  // Buffers lie one largest slice apart (a multiple of the pack).
  const int64_t buffer_packs = p.slicing.base + (p.slicing.extra > 0 ? 1 : 0);
  const auto cache_of = [&](int buffer) {
    return reinterpret_cast<CachePack*>(split_row_smem) + buffer * buffer_packs;
  };
  const auto part_of = [&](int64_t row) {
    return split_row::RowPartOf<pack, kAnyCols>(row, p.cols, full_slice, rank, split);
  };
  // The bulk copy of `row` into `buffer`, by thread 0 alone.
  [[maybe_unused]] const auto copy_row = [&](int64_t row, int buffer) {
    if constexpr (kBulk) {
      const split_row::RowPart part = part_of(row);
      split_row::CopySliceAsync<pack>(load, row, part.edges.head, part.slice, cache_of(buffer),
                                      &chunk_barriers[buffer * kChunks]);
    }
  };

  if constexpr (kBulk) {
    if (threadIdx.x == 0) {
      for (int i = 0; i < 2 * kChunks; ++i) split_row::InitChunkBarrier(&chunk_barriers[i]);
      split_row::FenceBarrierInit();
    }
    __syncthreads();  // the barriers initialised before anyone waits on them
    if (threadIdx.x == 0 && p.cache_buffers == 2 && first_row < p.rows) copy_row(first_row, 0);
  }

  int64_t iteration = 0;  // rows this block has served
  for (int64_t row = first_row; row < p.rows; row += clusters, ++iteration) {
    const split_row::RowPart part = part_of(row);
    const int buffer = p.cache_buffers == 2 ? static_cast<int>(iteration & 1) : 0;
    CachePack* const cache = cache_of(buffer);
    if constexpr (kBulk) {
      // One buffer: this row now (the last row's pass 2 is over). Two: this
      // row is on its way already; the next one goes into the other buffer,
      // whose last row's pass 2 is over.
      if (threadIdx.x == 0) {
        if (p.cache_buffers == 1) {
          copy_row(row, 0);
        } else if (row + clusters < p.rows) {
          copy_row(row + clusters, buffer ^ 1);
        }
      }
    }
    int64_t edge_col = -1;
    float edge = 0.f;
    if constexpr (kAnyCols) {
      edge_col = split_row::EdgeColumn(part.edges, p.cols, rank, split);
      // In flight with the slice's first loads.
      if (edge_col >= 0) load.template load<1>(&edge, row, edge_col);
    }
    typename Math::Accumulator stat;
    if constexpr (kBulk) {
      // The n-th row in this buffer (n = iteration / buffers) waits for the
      // barriers' phase of parity n & 1.
      const auto parity = static_cast<uint32_t>(
          (p.cache_buffers == 2 ? iteration >> 1 : iteration) & 1);
      stat = split_row::ReduceCopiedSlice<Math, pack, block_size>(
          cache, part.slice.count, &chunk_barriers[buffer * kChunks], parity);
    } else {
      stat = split_row::LoadSlice<Math, pack, block_size>(load, row, part.edges.head, part.slice,
                                                          cache);
    }
    if (kAnyCols && edge_col >= 0) stat.template Add<1>(&edge);
    // (The last row's cluster barrier let every thread past its reads of
    // warp_partials.)
    const Partial block_partial =
        split_row::BlockMergeInOrder<Math, block_size>(stat.Get(), warp_partials);
    if (threadIdx.x == 0) published = block_partial;
    cluster.sync();  // every partial published (release / acquire)

    Partial mine = Math::Identity();
    if (lane < split) mine = *cluster.map_shared_rank(&published, lane);
    Partial total = ShuffleFromWords(mine, 0);
    for (int r = 1; r < split; ++r) {
      total = Math::Merge(total, ShuffleFromWords(mine, r));
    }
    // This block has read every partial; the matching wait comes after the
    // outputs, so the barrier's latency hides behind pass 2.
    cluster.barrier_arrive();

    const typename Math::Row finish = Math::Finish(total, p);
    if (rank == 0 && threadIdx.x == 0) finish.WriteStats(p, row);
    split_row::StoreSlice<pack, block_size>(store, finish, row, part.edges.head, part.slice,
                                            cache, 0, part.slice.count);
    if (kAnyCols && edge_col >= 0) {
      finish.template Apply<1>(&edge);
      store.template store<1>(&edge, row, edge_col);
    }
    // Every thread's pass-2 reads of this buffer are done before thread 0
    // copies a later row into it.
    if constexpr (kBulk) __syncthreads();
    // Nobody reads a partial any more: `published` (and the block's shared
    // memory, when it exits) may go.
    cluster.barrier_wait();
  }
#endif
}

// kSplitGrid: the same slices, passes and statistics as SplitRowKernel, but
// a row may span any number of blocks (all SMs for a single row), since the
// partials travel through global memory instead of a cluster's shared
// memory. Block b serves row b / split as rank b % split; the grid is
// exactly rows * split blocks, launched cooperatively so that all are
// resident and grid barriers are safe.
// Each block publishes its partial in its slot (GridSlots), a grid barrier
// makes every slot visible, and every warp reads its row's `split` slots
// (lane l merging ranks l, l + 32, ... in order, then the lanes in order), so
// all blocks of a row compute bit-identical statistics. Pass 2 writes every
// output except the slot's packs, which wait for a second grid barrier (by
// then every block has read its partials); its arrival is posted before
// pass 2, so its latency hides behind the stores.
// Preconditions: as SplitRowKernel's, minus clusters: gridDim.x = rows *
// slots.split, cooperative launch; every slice >= 16 bytes of y; y may
// equal x (a block has read its whole slice before writing its slot).
template <Op op, class Load, class Store, int pack, int block_size>
__global__ void __launch_bounds__(block_size)
    SplitGridKernel(Load load, Store store, split_row::Params p, split_row::GridSlots slots) {
  namespace cg = cooperative_groups;
  using Math = OpMath<op, kFastMathFor<Load>>;
  using Partial = typename Math::Partial;
  using CachePack = Pack<typename Load::cache_type, pack>;
  using T = typename Load::storage_type;
  // The slot's unit: the width of one output element, so y's alignment suffices.
  using Unit = std::conditional_t<sizeof(T) == 2, unsigned short, unsigned int>;
  static_assert(sizeof(Unit) == sizeof(T), "16- or 32-bit outputs");
  static_assert(block_size % kWarpSize == 0, "whole warps: every lane shuffles");

  extern __shared__ __align__(32) unsigned char split_row_smem[];
  __shared__ Partial warp_partials[block_size / kWarpSize];
  CachePack* cache = reinterpret_cast<CachePack*>(split_row_smem);

  const cg::grid_group grid = cg::this_grid();
  const int split = slots.split;
  const int64_t row = blockIdx.x / static_cast<unsigned>(split);
  const int rank = static_cast<int>(blockIdx.x % static_cast<unsigned>(split));
  const split_row::Slice slice = split_row::SliceOf(p.slicing, rank);
  Unit* const row_units = static_cast<Unit*>(slots.y) + row * p.cols;
  const auto slot_of = [&](int r) {
    return row_units + split_row::SliceOf(p.slicing, r).first * pack;
  };
  // Packs of this slice that hold (part of) the slot.
  constexpr int64_t kSlotPacks =
      (sizeof(Partial) + pack * sizeof(T) - 1) / (pack * sizeof(T));

  const auto stat = split_row::LoadSlice<Math, pack, block_size>(load, row, 0, slice, cache);
  // The reduction's barriers also order every thread's loads of x before
  // the slot's store (y may be x).
  const Partial block_partial =
      split_row::BlockMergeInOrder<Math, block_size>(stat.Get(), warp_partials);
  if (threadIdx.x == 0) split_row::WriteSlot(slot_of(rank), block_partial);
  grid.sync();  // every slot written (release / acquire at GPU scope)

  const Partial total = split_row::MergeRowPartials<Math>(
      split, [&](int r) { return split_row::ReadSlot<Unit, Partial>(slot_of(r)); });
  cg::grid_group::arrival_token read_all = grid.barrier_arrive();

  const typename Math::Row finish = Math::Finish(total, p);
  if (rank == 0 && threadIdx.x == 0) finish.WriteStats(p, row);
  const int64_t slot_packs = kSlotPacks < slice.count ? kSlotPacks : slice.count;
  split_row::StoreSlice<pack, block_size>(store, finish, row, 0, slice, cache, slot_packs,
                                          slice.count);
  grid.barrier_wait(std::move(read_all));  // no block reads a slot any more
  split_row::StoreSlice<pack, block_size>(store, finish, row, 0, slice, cache, 0, slot_packs);
}

// kSplitTwoPass, first kernel: each block (TwoPassBlock) loads its slice
// (every pack of a thread in flight at once), reduces the op's statistic
// over the block (BlockMergeAllWarps) and writes it to its row's slot `rank` of the
// workspace.
// Preconditions: gridDim.x = rows * ws.split; blockDim.x = block_size;
// cols % pack == 0; p.slicing = Slicing::Of(cols / pack, ws.split); every
// slice at most kMaxTwoPassPacksPerThread * block_size packs.
template <Op op, class Load, int pack, int block_size>
__global__ void __launch_bounds__(block_size)
    SplitPartialKernel(Load load, split_row::Params p, split_row::TwoPassWorkspace ws) {
  using Math = OpMath<op, kFastMathFor<Load>>;
  using Partial = typename Math::Partial;
  __shared__ Partial warp_partials[block_size / kWarpSize];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The finishing kernel may start now: its blocks load their slices while
  // this grid still runs, and wait for its partials in
  // cudaGridDependencySynchronize (which waits for this whole grid).
  cudaTriggerProgrammaticLaunchCompletion();
#endif
  const split_row::TwoPassBlock block = split_row::TwoPassBlockOf(p, ws.split);
  float v[kMaxTwoPassPacksPerThread][pack];
  split_row::LoadThreadPacks<pack, block_size>(load, block, v);
  typename Math::Accumulator stat;
#pragma unroll
  for (int b = 0; b < kMaxTwoPassPacksPerThread; ++b) {
    if (split_row::HoldsPack<block_size>(block, b)) stat.template Add<pack>(v[b]);
  }
  const Partial partial =
      split_row::BlockMergeAllWarps<Math, block_size>(stat.Get(), warp_partials);
  if (threadIdx.x == 0) {
    static_cast<split_row::TwoPassSlot<Partial>*>(ws.partials)[block.row * ws.split + block.rank]
        .partial = partial;
  }
}

// kSplitTwoPass, second kernel: the same blocks and slices. Each block
// loads its slice (and the norms' weights for it) into registers first
// (neither is written by the first kernel), then waits for the first kernel
// (cudaGridDependencySynchronize: with a programmatic dependent launch this
// block may have started before it finished; otherwise stream order already
// waited), merges its row's partials (MergeRowPartials: bit-identical in
// every block of the row) and writes its slice through `store`; rank 0
// writes the per-row outputs.
// y may equal x: each thread writes only the packs it loaded itself, after
// the first kernel (the only other reader of x) has finished.
template <Op op, class Load, class Store, int pack, int block_size>
__global__ void __launch_bounds__(block_size)
    SplitFinishKernel(Load load, Store store, split_row::Params p,
                      split_row::TwoPassWorkspace ws) {
  using Math = OpMath<op, kFastMathFor<Load>>;
  using Partial = typename Math::Partial;
  static_assert(block_size % kWarpSize == 0, "whole warps: every lane shuffles");
  constexpr int kPacks = kMaxTwoPassPacksPerThread;
  const split_row::TwoPassBlock block = split_row::TwoPassBlockOf(p, ws.split);
  const int64_t row = block.row;
  float v[kPacks][pack];
  split_row::LoadThreadPacks<pack, block_size>(load, block, v);
  // Packs of the slice this thread holds (HoldsPack of b < held).
  const int64_t held = (block.slice.count - threadIdx.x + block_size - 1) / block_size;
  const int64_t first_col = (block.slice.first + threadIdx.x) * pack;
  constexpr int64_t kStride = static_cast<int64_t>(block_size) * pack;
  // The norms' weights are inputs too: in flight before the wait as well.
  using StoreWeights = WeightsOf<std::remove_cv_t<Store>>;
  [[maybe_unused]] typename StoreWeights::template type<kPacks, pack> weights;
  if constexpr (StoreWeights::kLoads) store.LoadWeights(weights, first_col, kStride, held);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
#endif
  const auto* slots =
      static_cast<const split_row::TwoPassSlot<Partial>*>(ws.partials) + row * ws.split;
  const Partial total = split_row::MergeRowPartials<Math>(
      ws.split, [&](int r) { return slots[r].partial; });
  const typename Math::Row finish = Math::Finish(total, p);
  if (block.rank == 0 && threadIdx.x == 0) finish.WriteStats(p, row);
#pragma unroll
  for (int b = 0; b < kPacks; ++b) {
    if (b < held) finish.template Apply<pack>(v[b]);
  }
  if constexpr (StoreWeights::kLoads) {
    store.StoreLoaded(v, weights, row, first_col, kStride, held);
  } else {
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      if (b < held) store.template store<pack>(v[b], row, first_col + b * kStride);
    }
  }
}

// kSplitRegs (softmax, log-softmax): a cluster of split blocks per row,
// persistent (blocks of cluster c serve rows c, c + clusters, ...), block
// rank r owning slice SliceOf(p.slicing, r) of the row's cols / pack packs
// and thread t packs t, t + block_size, ... of it (at most kPacks), in
// registers. The row arrives by a bulk copy into shared memory
// (CopyThreadPacksAsync); as soon as every thread has moved its packs into
// registers, thread 0 copies the block's next row into the same buffer, so
// that row is in flight while this one is merged and stored. Each thread
// takes its own max and keeps its values relative to it (the exp for
// softmax, x - max for log-softmax: one exp per element), the row's
// (max, sum) is merged once over the cluster (ClusterExchange), and each
// thread rescales its kept values (Row::RebasedTo) and stores them, one
// vector store per pack. Against SplitRowKernel's shared-memory slices (an
// online softmax on the way in, the exp again on the way out, two block and
// cluster barriers per row) this runs each element's exp once and leaves
// the cluster's blocks unsynchronised but for the one exchange.
// `edges`: cols is not a multiple of pack. Each row's whole packs then
// start at its RowEdges::head (the copy's 16-byte alignment), the last
// block's slice is a pack short where the row has one fewer, and the head
// (rank 0) and tail (last rank) elements move one per thread through
// ordinary loads and stores, as SplitRowKernel's do.
// Preconditions: sm_90+; cluster dims (split, 1, 1), 2 <= split <=
// kMaxClusterBlocks, gridDim.x a multiple of split; blockDim.x = block_size;
// a 16-byte pack (kBulkCopies) that divides cols unless `edges`, x and y
// 16-byte aligned; p.slicing = Slicing::Of(cols / pack, split) with every
// slice at most kPacks * block_size packs; dynamic shared memory >= the
// largest slice (SplitRegsSharedMemoryBytes). y may equal x: a block's next
// row is copied before any block writes it only if it is another row, and
// each thread writes only the elements it holds, after the exchange that
// follows every block's reads of this row.
template <Op op, class Load, class Store, int pack, int block_size, int kPacks, bool edges>
__global__ void __launch_bounds__(block_size, 1)
    SplitRegsKernel(Load load, Store store, split_row::Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // clusters need sm_90; the host refuses older devices
#else
  namespace cg = cooperative_groups;
  static_assert(op == Op::kSoftmax || op == Op::kLogSoftmax,
                "one merge per row needs the softmax's rebasing (Row::RebasedTo)");
  static_assert(split_row::kBulkCopies<Load, pack>, "rows arrive by the bulk copy");
  static_assert(!edges || kTakesAnyCols<Load, Store>, "rows off the pack grid need x's layout");
  static_assert(block_size % kWarpSize == 0, "whole warps: every lane shuffles");
  using Math = OpMath<op, kFastMathFor<Load>>;
  using Partial = typename Math::Partial;
  using CachePack = Pack<typename Load::storage_type, pack>;

  extern __shared__ __align__(128) unsigned char split_row_smem[];
  __shared__ uint64_t chunk_barriers[kPacks];
  __shared__ split_row::ClusterExchange<Partial, block_size> exchange;
  CachePack* const cache = reinterpret_cast<CachePack*>(split_row_smem);

  const cg::cluster_group cluster = cg::this_cluster();
  const int split = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const split_row::Slice full_slice = split_row::SliceOf(p.slicing, rank);
  // The chunks of the largest slice this block copies (one per kPacks at
  // most), whose barriers complete once per row.
  const int chunks = static_cast<int>((full_slice.count + block_size - 1) / block_size);
  const int64_t clusters = gridDim.x / split;
  const int64_t first_row = blockIdx.x / split;
  const auto part_of = [&](int64_t row) {
    return split_row::RowPartOf<pack, edges>(row, p.cols, full_slice, rank, split);
  };
  constexpr int kStride = block_size * pack;
  const auto copy_row = [&](int64_t row) {
    const split_row::RowPart part = part_of(row);
    split_row::CopyThreadPacksAsync<pack, block_size, kPacks>(
        load, row, part.edges.head, part.slice, chunks, cache, chunk_barriers);
  };

  if (threadIdx.x == 0) {
    for (int b = 0; b < kPacks; ++b) split_row::InitChunkBarrier(&chunk_barriers[b]);
    exchange.Init();
    split_row::FenceBarrierInit();
  }
  // Every block's barriers initialised before any peer's partial arrives.
  cluster.sync();
  if (threadIdx.x == 0 && first_row < p.rows) copy_row(first_row);

  int64_t iteration = 0;  // rows this block has served: one exchange each
  for (int64_t row = first_row; row < p.rows; row += clusters, ++iteration) {
    const split_row::RowPart part = part_of(row);
    // 32-bit where it fits (a slice is at most kPacks * block_size packs):
    // with 64-bit pack indices the float32 instance spilled 48 bytes more.
    const int slice_packs = static_cast<int>(part.slice.count);
    const auto holds = [&](int b) {
      return b * block_size + static_cast<int>(threadIdx.x) < slice_packs;
    };
    // This thread's first column; pack b is kStride * b further.
    const int64_t first_col = part.edges.head + (full_slice.first + threadIdx.x) * pack;
    int64_t edge_col = -1;
    float edge = 0.f;
    if constexpr (edges) {
      edge_col = split_row::EdgeColumn(part.edges, p.cols, rank, split);
      // In flight while the slice's copy lands.
      if (edge_col >= 0) load.template load<1>(&edge, row, edge_col);
    }
    float v[kPacks][pack];
    float own_max = -INFINITY;
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      if (holds(b)) {
        split_row::WaitChunkBarrier(&chunk_barriers[b], static_cast<uint32_t>(iteration & 1));
        Load::template WidenPack<pack>(cache[b * block_size + threadIdx.x], v[b]);
#pragma unroll
        for (int i = 0; i < pack; ++i) own_max = typename Math::First{}.Add(own_max, v[b][i]);
      }
    }
    if (edge_col >= 0) own_max = typename Math::First{}.Add(own_max, edge);
    __syncthreads();  // every thread's packs are in registers: the buffer is free
    if (threadIdx.x == 0 && row + clusters < p.rows) copy_row(row + clusters);

    const auto pass = Math::Second(Math::KeepShift(own_max), p);
    float kept_sum = pass.kIdentity;
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
#pragma unroll
      for (int i = 0; i < pack; ++i) {
        if (holds(b)) {
          v[b][i] = pass.Keep(v[b][i]);
          kept_sum = pass.AddKept(kept_sum, v[b][i]);
        }
      }
    }
    if (edge_col >= 0) {
      edge = pass.Keep(edge);
      kept_sum = pass.AddKept(kept_sum, edge);
    }
    const Partial total = exchange.template AllMerge<Math>(Partial{own_max, kept_sum}, iteration,
                                                           rank, split);
    const typename Math::Row finish = Math::Finish(total, p);
    if (rank == 0 && threadIdx.x == 0) finish.WriteStats(p, row);
    const typename Math::Row mine = finish.RebasedTo(own_max);
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      if (holds(b)) {
        mine.template ApplyKept<pack>(v[b]);
        store.template store_as_one<pack>(v[b], row, first_col + b * kStride);
      }
    }
    if (edge_col >= 0) {
      mine.template ApplyKept<1>(&edge);
      store.template store<1>(&edge, row, edge_col);
    }
  }
#endif
}

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_SPLIT_ROW_KERNELS_CUH_
