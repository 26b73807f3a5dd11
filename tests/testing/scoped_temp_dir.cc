// ScopedTempDir (scoped_temp_dir.h).
#include "tests/testing/scoped_temp_dir.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "gtest/gtest.h"

namespace kt::testing {

ScopedTempDir::ScopedTempDir() {
  std::string pattern = ::testing::TempDir() + "kerntune_test_XXXXXX";
  const char* made = mkdtemp(pattern.data());
  if (made == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  path_ = made;
}

ScopedTempDir::~ScopedTempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace kt::testing
