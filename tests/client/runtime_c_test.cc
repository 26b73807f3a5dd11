// libkerntune_runtime.so through its C interface only (runtime_c.h), as a
// program or a binding that links it does: enum names, a host run of the
// reference, and the errors a bad call gets (codes and messages), without a
// GPU and without a daemon.
#include "client/runtime_c.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::testing::HasSubstr;

constexpr int kInvalidArgument = 3;

class RuntimeCTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(kt_runtime_create("none", "/nonexistent/kerntune.db", "/nonexistent", 0,
                                &runtime_, error_, sizeof(error_)),
              0)
        << error_;
  }
  void TearDown() override { kt_runtime_destroy(runtime_); }

  kt_run HostRun(const char* op, std::vector<float>& x, std::vector<float>& y, int64_t rows) {
    kt_run run;
    std::memset(&run, 0, sizeof(run));
    run.op = kt_runtime_enum("op", op);
    run.dtype = kt_runtime_enum("dtype", "float32");
    run.rows = rows;
    run.cols = static_cast<int64_t>(x.size()) / rows;
    run.inner = 1;
    run.device = -1;
    run.x = x.data();
    run.y = y.data();
    run.epsilon = 1e-6;
    return run;
  }

  kt_runtime* runtime_ = nullptr;
  char error_[512] = {};
};

TEST_F(RuntimeCTest, EnumsAreTheLibrarysNames) {
  EXPECT_GE(kt_runtime_enum("op", "softmax"), 0);
  EXPECT_NE(kt_runtime_enum("op", "rms_norm"), kt_runtime_enum("op", "layer_norm"));
  EXPECT_GE(kt_runtime_enum("dtype", "bf16"), 0);
  EXPECT_GE(kt_runtime_enum("quant_dtype", "fp8_e4m3"), 0);
  EXPECT_GE(kt_runtime_enum("scale_mode", "per_group"), 0);
  EXPECT_EQ(kt_runtime_enum("op", "softermax"), -1);
  EXPECT_EQ(kt_runtime_enum("color", "red"), -1);
  EXPECT_EQ(kt_runtime_enum(nullptr, "softmax"), -1);
  EXPECT_EQ(kt_runtime_run_size(), sizeof(kt_run));
}

TEST_F(RuntimeCTest, HostRunIsTheReference) {
  std::vector<float> x = {1, 2, 3, 4, -4, 0, 2, 2}, y(8);
  kt_run run = HostRun("rms_norm", x, y, 2);
  char key[64] = "unchanged";
  ASSERT_EQ(kt_runtime_run(runtime_, &run, nullptr, key, sizeof(key), error_, sizeof(error_)),
            0)
      << error_;
  EXPECT_STREQ(key, "");  // no config on the host
  const double inv_rms = 1 / std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-6);
  EXPECT_NEAR(y[3], 4 * inv_rms, 1e-6);
  run = HostRun("softmax", x, y, 2);
  ASSERT_EQ(kt_runtime_run(runtime_, &run, nullptr, nullptr, 0, error_, sizeof(error_)), 0);
  EXPECT_NEAR(y[4] + y[5] + y[6] + y[7], 1.0, 1e-6);
}

TEST_F(RuntimeCTest, BadCallsGetTheirCodeAndAMessage) {
  std::vector<float> x(8), y(8);
  kt_run run = HostRun("softmax", x, y, 2);
  run.op = 999;
  EXPECT_EQ(kt_runtime_run(runtime_, &run, nullptr, nullptr, 0, error_, sizeof(error_)),
            kInvalidArgument);
  EXPECT_THAT(error_, HasSubstr("op=999"));
  run = HostRun("softmax", x, y, 2);
  run.rows = 0;
  EXPECT_EQ(kt_runtime_run(runtime_, &run, nullptr, nullptr, 0, error_, sizeof(error_)),
            kInvalidArgument);
  EXPECT_THAT(error_, HasSubstr("rows=0"));
  run = HostRun("rms_norm", x, y, 2);
  run.epsilon = 0;
  EXPECT_EQ(kt_runtime_run(runtime_, &run, nullptr, nullptr, 0, error_, sizeof(error_)),
            kInvalidArgument);
  EXPECT_THAT(error_, HasSubstr("epsilon"));
  run = HostRun("softmax", x, y, 2);
  run.y = nullptr;
  EXPECT_NE(kt_runtime_run(runtime_, &run, nullptr, nullptr, 0, error_, sizeof(error_)), 0);
  EXPECT_NE(kt_runtime_run(nullptr, &run, nullptr, nullptr, 0, error_, sizeof(error_)), 0);
  EXPECT_NE(kt_runtime_run(runtime_, nullptr, nullptr, nullptr, 0, error_, sizeof(error_)), 0);
  // A message longer than its buffer is cut, still terminated.
  char tiny[4];
  run = HostRun("softmax", x, y, 2);
  run.op = -1;
  EXPECT_EQ(kt_runtime_run(runtime_, &run, nullptr, nullptr, 0, tiny, sizeof(tiny)),
            kInvalidArgument);
  EXPECT_EQ(std::strlen(tiny), 3u);
}

TEST(RuntimeCCreateTest, BadOptionsAreRefused) {
  kt_runtime* runtime = nullptr;
  char error[256] = {};
  EXPECT_EQ(kt_runtime_create("none", nullptr, nullptr, -1, &runtime, error, sizeof(error)),
            kInvalidArgument);
  EXPECT_EQ(runtime, nullptr);
  EXPECT_EQ(kt_runtime_create("--server=foo", nullptr, nullptr, 0, &runtime, error,
                              sizeof(error)),
            kInvalidArgument);
  EXPECT_THAT(error, HasSubstr("expected unix:PATH"));
  EXPECT_NE(kt_runtime_create("none", nullptr, nullptr, 0, nullptr, error, sizeof(error)), 0);
  kt_runtime_destroy(nullptr);  // a no-op
}

}  // namespace
