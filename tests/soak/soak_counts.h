// What a kt_soak client process tells the soak driver: cumulative counters,
// one "stats name=value ..." line at a time on its stdout (the driver keeps
// the last complete line of each client, so a client killed at any moment
// loses at most the Runs since its last line), and "problem TEXT" lines for
// the first few things that went wrong.
#ifndef KERNTUNE_TESTS_SOAK_SOAK_COUNTS_H_
#define KERNTUNE_TESTS_SOAK_SOAK_COUNTS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace kt::soak {

enum Counter {
  // Valid Runs answered OK and matching the fp64 reference, by path.
  kInline,       // inline tensors over gRPC
  kShmGrpc,      // a registered shared-memory buffer over gRPC
  kShmQueue,     // the same through the submission queue
  kIpcGrpc,      // a registered CUDA IPC allocation over gRPC (--cuda)
  kIpcQueue,     // the same through the queue
  kOneOffGrpc,   // a one-off CUDA IPC handle over gRPC (--cuda)
  kOneOffQueue,  // the same through the queue
  // Valid Runs answered OK whose outputs did not match the reference.
  kWrong,
  // Valid requests (Runs, registrations) that failed.
  kValidFailed,
  // Malformed requests answered with the code they must get, and with
  // another (a malformed request that succeeded counts here too).
  kMalformed,
  kMalformedWrongCode,
  kRegistered,
  kUnregistered,
  kCounterCount,
};

inline constexpr std::array<const char*, kCounterCount> kCounterNames = {"inline",
                                                                         "shm_grpc",
                                                                         "shm_queue",
                                                                         "ipc_grpc",
                                                                         "ipc_queue",
                                                                         "oneoff_grpc",
                                                                         "oneoff_queue",
                                                                         "wrong",
                                                                         "valid_failed",
                                                                         "malformed",
                                                                         "malformed_wrong_code",
                                                                         "registered",
                                                                         "unregistered"};

struct Counts {
  std::array<int64_t, kCounterCount> value{};

  int64_t& operator[](Counter counter) { return value[counter]; }
  int64_t operator[](Counter counter) const { return value[counter]; }
  // Valid Runs answered and checked, every path.
  int64_t valid_runs() const;
  Counts& operator+=(const Counts& other);

  // "stats inline=3 shm_grpc=0 ..."
  std::string Line() const;
  // The counts of a Line(); nullopt for any other line.
  static std::optional<Counts> Parse(absl::string_view line);
};

}  // namespace kt::soak

#endif  // KERNTUNE_TESTS_SOAK_SOAK_COUNTS_H_
