// A submission queue's streams (see run_stream.h).
#include "server/run_stream.h"

#include <utility>

#include "server/backend.h"

namespace kt::server {

bool QueueStreams::Submit(int device_index, RunPriority priority, const RunRequest& request,
                          RunStream::Done& done) {
  const size_t index = 2 * static_cast<size_t>(device_index) + static_cast<size_t>(priority);
  if (index >= slots_.size()) slots_.resize(index + 1);
  Slot& slot = slots_[index];
  if (!slot.opened) {
    slot.opened = true;
    slot.stream = backend_.OpenRunStream(device_index, priority);
  }
  if (slot.stream == nullptr) return false;
  slot.stream->Submit(request, std::move(done));
  slot.unflushed = true;
  ++in_flight_;
  return true;
}

void QueueStreams::Flush() {
  for (Slot& slot : slots_) {
    if (!slot.unflushed) continue;
    slot.stream->Flush();
    slot.unflushed = false;
  }
}

int QueueStreams::Poll() {
  in_flight_ = 0;
  for (Slot& slot : slots_) {
    if (slot.stream != nullptr) in_flight_ += slot.stream->Poll();
  }
  return in_flight_;
}

}  // namespace kt::server
