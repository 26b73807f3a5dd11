// Giving memory back after large requests. A Run with tensors inline
// passes through gRPC's receive slices, the parsed request, the output and
// the serialized answer: four copies of up to --max_request_bytes, in many
// pieces over the threads' malloc arenas. glibc keeps freed arena memory
// for reuse, so an idle daemon held 1.38 GB after a few 256 MiB inline Runs
// (issue 43). After such a call ends, the housekeeper calls malloc_trim,
// which returns every arena's free pages; calls of small messages never
// pay for it.
#ifndef KERNTUNE_SERVER_MEMORY_TRIM_H_
#define KERNTUNE_SERVER_MEMORY_TRIM_H_

#include <cstddef>

namespace kt::server {

// A call whose request or answer took `bytes` (at least
// kLargeRequestBytes, request_parsing.h) has ended; its memory is free.
void NoteLargeMessage(size_t bytes);

// Returns free heap memory to the system when a large call ended since the
// last time (the housekeeper, once a second). True when it trimmed.
bool TrimAfterLargeMessages();

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_MEMORY_TRIM_H_
