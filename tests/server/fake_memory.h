// Client memory for tests: a heap block standing in for a mapped allocation.
#ifndef KERNTUNE_TESTS_SERVER_FAKE_MEMORY_H_
#define KERNTUNE_TESTS_SERVER_FAKE_MEMORY_H_

#include <memory>
#include <vector>

#include "server/client_memory.h"

namespace kt::server::testing {

class FakeMemory final : public ClientMemory {
 public:
  // Device memory is on CUDA ordinal `device`; host memory has none.
  static std::shared_ptr<const ClientMemory> Make(int64_t size,
                                                  MemorySpace space = MemorySpace::kHost,
                                                  int device = 0) {
    auto storage = std::make_shared<std::vector<char>>(static_cast<size_t>(size));
    return std::shared_ptr<const ClientMemory>(new FakeMemory(
        std::move(storage), space, space == MemorySpace::kDevice ? device : -1));
  }
  // A mapping of all of the shared-memory file `object`: two made with the
  // same object stand for two mappings of one file, at two addresses.
  static std::shared_ptr<const ClientMemory> MakeFile(int64_t size, MemoryObject object) {
    auto storage = std::make_shared<std::vector<char>>(static_cast<size_t>(size));
    return std::shared_ptr<const ClientMemory>(new FakeMemory(std::move(storage), object));
  }

 private:
  FakeMemory(std::shared_ptr<std::vector<char>> storage, MemorySpace space, int device)
      : ClientMemory(storage->data(), static_cast<int64_t>(storage->size()), space, device),
        storage_(std::move(storage)) {}
  FakeMemory(std::shared_ptr<std::vector<char>> storage, MemoryObject object)
      : ClientMemory(storage->data(), static_cast<int64_t>(storage->size()), object.space, -1,
                     object),
        storage_(std::move(storage)) {}
  std::shared_ptr<std::vector<char>> storage_;
};

}  // namespace kt::server::testing

#endif  // KERNTUNE_TESTS_SERVER_FAKE_MEMORY_H_
