// The in-process runtime: kerntune's kernels launched in the calling process,
// on the caller's CUDA stream, with the config the node's daemon would choose
// for the same problem. This is the path CUDA graphs and torch.compile can
// see (a call into another process can be captured by neither); the daemon
// stays the service for other processes and the node's authority on configs.
//
// Configs are those of the device's GPU SKU, chosen by the daemon's own
// lookup (tuner::ConfigTable: local tuned -> shipped -> nearest tuned ->
// heuristic). They come from the node's daemon when one answers (one
// ListConfigs per SKU), else from the tuning store (read-only) and the
// shipped config files, and are fetched again every refresh interval on a
// background thread, so a store that the daemon reloads is seen here too.
// Launches never wait on that: they use the configs fetched last. Nothing is
// compiled at run time: the kernels are the library's, built ahead of time.
#ifndef KERNTUNE_CLIENT_RUNTIME_H_
#define KERNTUNE_CLIENT_RUNTIME_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "db/records.h"
#include "kerntune/v1/kerntune.pb.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "kernels/op_args.h"
#include "kernels/types.h"
#include "proto/shipped_configs.h"
#include "tuner/config_lookup.h"

namespace kt::client {

struct RuntimeOptions {
  // The daemon whose configs are used, as ResolveTarget reads it ("" = the
  // default socket); "none": never ask a daemon.
  std::string daemon_target;
  // When no daemon answers: the tuning store, opened read-only ("" =
  // db::DefaultDatabasePath(); a missing store is no entries), and the
  // shipped config files ("" = proto::DefaultShippedConfigDir()).
  std::string db_path;
  std::string shipped_config_dir;
  // How often every SKU's configs are fetched again; 0 = never (the first
  // fetch is kept).
  absl::Duration refresh_interval = absl::Seconds(5);
  // Deadline of one ListConfigs.
  absl::Duration daemon_deadline = absl::Seconds(2);
};

// What the runtime asks a daemon: a DaemonClient in a program, a fake in
// tests.
class DaemonConfigSource {
 public:
  virtual ~DaemonConfigSource() = default;
  // The configs the daemon serves for `device` (a UUID; "" = its first).
  virtual absl::StatusOr<::kerntune::v1::ListConfigsResponse> ListConfigs(
      absl::string_view device) = 0;
  // Names the daemon in FetchedConfigs::origin ("unix:/run/kerntune/kerntune.sock").
  virtual std::string target() const = 0;
};

// The configs a SKU is served from, as fetched last.
struct FetchedConfigs {
  db::GpuSku sku;
  tuner::ConfigTable table;
  // "daemon unix:/run/kerntune/kerntune.sock", or "store /path/kerntune.db
  // (12 entries) + shipped files (40 entries)".
  std::string origin;
  // Why the preferred source was not used or is partial ("the daemon at ...
  // did not answer (...)"; "cannot read the tuning store ...: ..."; stale
  // entries skipped); empty when nothing needs saying.
  std::string problem;
};

class Runtime {
 public:
  static absl::StatusOr<std::unique_ptr<Runtime>> Create(RuntimeOptions options);
  // With `daemon` asked instead of the one options.daemon_target names
  // (null: none).
  static absl::StatusOr<std::unique_ptr<Runtime>> CreateWithDaemon(
      RuntimeOptions options, std::unique_ptr<DaemonConfigSource> daemon);
  ~Runtime();  // stops the refresher
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The config a problem gets on `device` (a CUDA device of this process,
  // or a described one), and where it came from. The first call for a SKU
  // fetches its configs. Errors only when even the heuristic has none.
  // batch_invariant: ConfigTable::LookupBatchInvariant's choice, one config
  // for the cols at any rows (rows placed as `placement`).
  absl::StatusOr<tuner::ConfigChoice> Choose(
      kernels::Op op, kernels::DType dtype, kernels::Shape shape,
      const kernels::DeviceInfo& device, bool batch_invariant = false,
      kernels::RowPlacement placement = kernels::RowPlacement::kContiguous);

  // Launches `op` with its chosen config on `stream`, which must belong to
  // the calling thread's current CUDA device, where the operands are.
  // Returns the config launched (kernels::Launch may narrow its pack to the
  // operands' alignment). The operands are checked by kernels::Launch. A
  // config that needs a workspace when args has none is refused with
  // ResourceExhausted naming the bytes, which also go to
  // *workspace_needed when given: the caller retries with one; nothing was
  // launched. batch_invariant: the config Choose gives in that mode, so
  // each row's bits do not depend on how many rows there are.
  absl::StatusOr<kernels::LaunchConfig> Launch(kernels::Op op, kernels::DType dtype,
                                               kernels::Shape shape,
                                               const kernels::RowOpArgs& args,
                                               cudaStream_t stream,
                                               bool batch_invariant = false,
                                               int64_t* workspace_needed = nullptr);

  // On host memory: the fp64 reference, y written in the storage dtype (the
  // quantizing ops: codes and their scales), as the daemon's CPU backend
  // does. For CPU tensors and machines without a GPU.
  absl::Status RunOnHost(kernels::Op op, kernels::DType dtype, kernels::Shape shape,
                         const kernels::RowOpArgs& args);

  // The configs `device`'s SKU is served from (fetched now if never yet).
  std::shared_ptr<const FetchedConfigs> ConfigsFor(const kernels::DeviceInfo& device);
  // Fetches every known SKU's configs again now.
  void Refresh();

 private:
  struct SkuState;
  // A CUDA device of this process, once known.
  struct DeviceSlot {
    kernels::DeviceInfo info;
    std::string uuid;  // the daemon's name for it; "" when unknown
    std::shared_ptr<SkuState> state;
  };

  Runtime(RuntimeOptions options, std::unique_ptr<DaemonConfigSource> daemon);
  // The state of `device`'s SKU, made (and fetched) on first use.
  std::shared_ptr<SkuState> StateFor(const kernels::DeviceInfo& device, const std::string& uuid);
  // The slot of CUDA device `ordinal`, made on first use; of the calling
  // thread's current device.
  absl::StatusOr<const DeviceSlot*> Slot(int ordinal);
  absl::StatusOr<const DeviceSlot*> CurrentSlot();
  // The daemon's configs when it answers for the SKU, else the store's and
  // the shipped files'.
  std::shared_ptr<const FetchedConfigs> Fetch(const kernels::DeviceInfo& device,
                                          const std::string& uuid);
  absl::StatusOr<tuner::ConfigChoice> ChooseIn(SkuState& state, kernels::Op op,
                                               kernels::DType dtype, kernels::Shape shape,
                                               bool batch_invariant,
                                               kernels::RowPlacement placement);
  void RefreshLoop();

  const RuntimeOptions options_;
  const std::unique_ptr<DaemonConfigSource> daemon_;
  // Read once: the daemon reads them once at start too.
  const std::vector<proto::ShippedConfigFile> shipped_files_;

  absl::Mutex mu_;
  std::vector<std::shared_ptr<SkuState>> states_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<DeviceSlot>> slots_ ABSL_GUARDED_BY(mu_);  // by ordinal

  absl::Mutex stop_mu_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread refresher_;
};

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_RUNTIME_H_
