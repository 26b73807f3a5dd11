// The GPU SKUs the proto tests write config files for, as their drivers
// report them.
#ifndef KERNTUNE_TESTS_PROTO_TEST_SKUS_H_
#define KERNTUNE_TESTS_PROTO_TEST_SKUS_H_

#include "db/records.h"

namespace kt::proto::testing {

inline db::GpuSku H100Sku() { return {"NVIDIA H100 80GB HBM3", 9, 0, 132, 85520809984}; }
inline db::GpuSku A100Sku() { return {"NVIDIA A100-SXM4-80GB", 8, 0, 108, 85899345920}; }

}  // namespace kt::proto::testing

#endif  // KERNTUNE_TESTS_PROTO_TEST_SKUS_H_
