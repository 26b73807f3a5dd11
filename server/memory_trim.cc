// Giving memory back after large requests (see memory_trim.h).
#include "server/memory_trim.h"

#include <malloc.h>

#include <atomic>

namespace kt::server {
namespace {

std::atomic<size_t> large_bytes_ended{0};

}  // namespace

void NoteLargeMessage(size_t bytes) {
  large_bytes_ended.fetch_add(bytes, std::memory_order_relaxed);
}

bool TrimAfterLargeMessages() {
  if (large_bytes_ended.exchange(0, std::memory_order_relaxed) == 0) return false;
  malloc_trim(0);
  return true;
}

}  // namespace kt::server
