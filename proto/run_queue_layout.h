// The shared-memory layout of a submission queue (kerntune.v1 OpenQueue):
// the contract between kerntuned and its clients (C++ here, Python in
// client/python/kerntune/_queue.py), little-endian, fixed offsets.
//
//   offset 0      RegionHeader: written by the daemon at creation, never
//                 read back by it (it keeps its own copy of the geometry).
//   offset 4096   submission ring: entries slots of kSubmissionSlotBytes
//   then          completion ring: entries slots of kCompletionSlotBytes
//
// Indices are free-running uint32 counters; slot = index & (entries - 1).
// Who writes what (the other side only reads):
//   client: submission slots, sq_tail, cq_head, doorbell, client_waiting
//   daemon: the header, completion slots, sq_head, cq_tail, need_wakeup,
//           closed
// The daemon treats everything the client writes as hostile: it reads
// sq_tail, cq_head and a slot once, checks them against its own copy of
// the geometry, and copies a descriptor out before parsing it.
//
// Submitting: write descriptors in slots [sq_tail, sq_tail + n), then store
// sq_tail + n (release; then a full fence); if need_wakeup != 0, add 1 to
// doorbell and FUTEX_WAKE it (a shared futex). Several descriptors, one
// wake-up. Completions: [cq_head, cq_tail) are ready (acquire cq_tail);
// consume them, then store the new cq_head. To sleep, set client_waiting
// to 1, re-check cq_tail, and FUTEX_WAIT on cq_tail; the daemon wakes it
// after posting completions while client_waiting != 0.
#ifndef KERNTUNE_PROTO_RUN_QUEUE_LAYOUT_H_
#define KERNTUNE_PROTO_RUN_QUEUE_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace kt::proto::queue {

inline constexpr uint32_t kQueueMagic = 0x3151544b;  // "KTQ1"
inline constexpr uint32_t kQueueLayoutVersion = 1;

inline constexpr uint32_t kMinEntries = 8;
inline constexpr uint32_t kMaxEntries = 1024;
inline constexpr uint32_t kDefaultEntries = 64;

// A descriptor: a serialized kerntune.v1.RunRequest whose tensors are all
// in client memory (registered buffers or CUDA IPC handles), after a small
// header. 1 KiB holds a LayerNorm with six IPC tensors and both events
// (about 800 bytes); a larger request goes over gRPC.
inline constexpr size_t kSubmissionSlotBytes = 1024;
// A completion: on OK a serialized kerntune.v1.RunResponse (config and its
// source, kernel time, backend, device, server timing); otherwise the
// error's message, UTF-8, cut to fit.
inline constexpr size_t kCompletionSlotBytes = 512;
inline constexpr size_t kRingsOffset = 4096;

struct SubmissionHeader {
  uint64_t tag;     // the client's, returned in the completion
  uint32_t length;  // bytes of the RunRequest after this header
  uint32_t flags;   // must be 0
};
inline constexpr size_t kMaxRequestBytes = kSubmissionSlotBytes - sizeof(SubmissionHeader);

struct CompletionHeader {
  uint64_t tag;
  int32_t code;     // absl::StatusCode / grpc::StatusCode (the same numbers)
  uint32_t length;  // bytes after this header
};
inline constexpr size_t kMaxCompletionPayload = kCompletionSlotBytes - sizeof(CompletionHeader);

// Why the daemon closed a queue (RegionHeader::closed).
enum class CloseReason : uint32_t {
  kOpen = 0,
  kClosedByOwner = 1,  // CloseQueue
  kOwnerExited = 2,
  kBadIndex = 3,       // sq_tail or cq_head out of range
  kRegionShrank = 4,   // the object was truncated under the daemon
  kShutdown = 5,
};

// Each index on its own cache line: the two sides write different lines.
struct alignas(64) RegionHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t entries;
  uint32_t submission_slot_bytes;
  uint32_t completion_slot_bytes;
  uint32_t reserved0;
  uint64_t submission_offset;
  uint64_t completion_offset;
  uint64_t region_bytes;
  alignas(64) uint32_t sq_tail;
  alignas(64) uint32_t sq_head;
  alignas(64) uint32_t cq_tail;
  alignas(64) uint32_t cq_head;
  alignas(64) uint32_t doorbell;
  uint32_t need_wakeup;
  alignas(64) uint32_t client_waiting;
  alignas(64) uint32_t closed;  // a CloseReason
};
static_assert(sizeof(RegionHeader) <= kRingsOffset, "the header fits before the rings");
static_assert(offsetof(RegionHeader, sq_tail) == 64 && offsetof(RegionHeader, sq_head) == 128 &&
                  offsetof(RegionHeader, cq_tail) == 192 &&
                  offsetof(RegionHeader, cq_head) == 256 &&
                  offsetof(RegionHeader, doorbell) == 320 &&
                  offsetof(RegionHeader, need_wakeup) == 324 &&
                  offsetof(RegionHeader, client_waiting) == 384 &&
                  offsetof(RegionHeader, closed) == 448,
              "offsets are part of the contract (Python reads them too)");

inline constexpr bool ValidEntries(uint32_t entries) {
  return entries >= kMinEntries && entries <= kMaxEntries && (entries & (entries - 1)) == 0;
}
inline constexpr uint64_t SubmissionOffset() { return kRingsOffset; }
inline constexpr uint64_t CompletionOffset(uint32_t entries) {
  return kRingsOffset + uint64_t{entries} * kSubmissionSlotBytes;
}
inline constexpr uint64_t RegionBytes(uint32_t entries) {
  return CompletionOffset(entries) + uint64_t{entries} * kCompletionSlotBytes;
}

// One step of a spin on the region's words (both sides spin on them): a
// hint that lets the other hardware thread of the core, which may be the
// other side's, run meanwhile.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace kt::proto::queue

#endif  // KERNTUNE_PROTO_RUN_QUEUE_LAYOUT_H_
