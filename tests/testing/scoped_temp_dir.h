// A fresh directory for one test, removed with its contents on destruction.
// Shared by every test that needs real files (SQLite stores, CLI fixtures).
#ifndef KERNTUNE_TESTS_TESTING_SCOPED_TEMP_DIR_H_
#define KERNTUNE_TESTS_TESTING_SCOPED_TEMP_DIR_H_

#include <string>

namespace kt::testing {

class ScopedTempDir {
 public:
  // Under GoogleTest's temp dir ($TEST_TMPDIR, else /tmp); aborts the test
  // binary if no directory can be made, since no test could run anyway.
  ScopedTempDir();
  ~ScopedTempDir();
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace kt::testing

#endif  // KERNTUNE_TESTS_TESTING_SCOPED_TEMP_DIR_H_
