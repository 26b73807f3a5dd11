// The in-process runtime (runtime.h).
#include "client/runtime.h"

#include <sys/stat.h>

#include <cerrno>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/daemon_client.h"
#include "db/tuning_store.h"
#include "kernels/device_identity.h"
#include "kernels/launch.h"
#include "kernels/reference.h"
#include "proto/convert.h"

namespace kt::client {
namespace {

namespace pb = ::kerntune::v1;

// The daemon's configs through a DaemonClient. A daemon that starts after
// the runtime is found by the next fetch.
class GrpcDaemonSource final : public DaemonConfigSource {
 public:
  explicit GrpcDaemonSource(DaemonClient client) : client_(std::move(client)) {}
  absl::StatusOr<pb::ListConfigsResponse> ListConfigs(absl::string_view device) override {
    // No socket file, no daemon: a stat instead of a failing call.
    const std::string& target = client_.target();
    struct stat info {};
    if (IsUnixTarget(target) && stat(target.c_str() + 5, &info) != 0) {  // past "unix:"
      return absl::UnavailableError(absl::StrCat("no socket at ", target.substr(5)));
    }
    return client_.ListConfigs(device);
  }
  std::string target() const override { return client_.target(); }

 private:
  DaemonClient client_;
};

// The local store's rows for `sku`: none when there is no store; the
// problem when it cannot be read.
std::vector<db::BestConfig> StoreRows(const std::string& path, const db::GpuSku& sku,
                                      std::string& problem) {
  if (path.empty()) return {};
  struct stat info {};
  if (stat(path.c_str(), &info) != 0 && errno == ENOENT) return {};
  db::OpenOptions options;
  options.read_only = true;
  absl::StatusOr<std::unique_ptr<db::TuningStore>> store = db::TuningStore::Open(path, options);
  absl::StatusOr<std::vector<db::BestConfig>> rows =
      store.ok() ? (*store)->BestConfigsForSku(sku) : store.status();
  if (!rows.ok()) {
    problem = absl::StrCat("cannot read the tuning store ", path, ": ", rows.status().message());
    return {};
  }
  return *std::move(rows);
}

// The daemon's name for a device: its UUID ("" for a described one).
std::string UuidOf(const kernels::DeviceInfo& device) {
  if (!device.has_gpu()) return "";
  absl::StatusOr<kernels::DeviceIdentity> identity = kernels::GetDeviceIdentity(device.ordinal);
  return identity.ok() ? identity->uuid : "";
}

}  // namespace

// One GPU SKU: the configs fetched last, and the choices made in them.
struct Runtime::SkuState {
  // The first device of the SKU seen: its limits are the SKU's.
  kernels::DeviceInfo device;
  std::string uuid;

  absl::Mutex mu;
  std::shared_ptr<const FetchedConfigs> configs ABSL_GUARDED_BY(mu);
  // A program sends the same few problems again and again; the table's
  // search (and its config checks) runs once for each in these configs.
  // Bounded: a program with endless shapes starts over.
  // (op, dtype, rows, cols, inner, batch-invariant placement or -1).
  using Key = std::tuple<kernels::Op, kernels::DType, int64_t, int64_t, int64_t, int>;
  absl::flat_hash_map<Key, absl::StatusOr<tuner::ConfigChoice>> chosen ABSL_GUARDED_BY(mu);

  void Install(std::shared_ptr<const FetchedConfigs> fetched) {
    absl::MutexLock lock(&mu);
    configs = std::move(fetched);
    chosen.clear();
  }
};

namespace {
constexpr size_t kMaxRememberedChoices = 4096;
}  // namespace

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(RuntimeOptions options) {
  std::unique_ptr<DaemonConfigSource> daemon;
  if (options.daemon_target != "none") {
    absl::StatusOr<std::string> target = ResolveTarget(options.daemon_target);
    if (!target.ok()) return target.status();
    DaemonClientOptions client_options;
    client_options.target = *target;
    client_options.deadline = options.daemon_deadline;
    client_options.use_queue = false;
    absl::StatusOr<DaemonClient> client = DaemonClient::Connect(client_options);
    if (!client.ok()) return client.status();
    daemon = std::make_unique<GrpcDaemonSource>(*std::move(client));
  }
  return CreateWithDaemon(std::move(options), std::move(daemon));
}

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::CreateWithDaemon(
    RuntimeOptions options, std::unique_ptr<DaemonConfigSource> daemon) {
  if (options.db_path.empty()) options.db_path = db::DefaultDatabasePath().value_or("");
  if (options.shipped_config_dir.empty()) {
    options.shipped_config_dir = proto::DefaultShippedConfigDir();
  }
  if (options.refresh_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the refresh interval must be >= 0");
  }
  std::unique_ptr<Runtime> runtime(new Runtime(std::move(options), std::move(daemon)));
  if (runtime->options_.refresh_interval > absl::ZeroDuration()) {
    runtime->refresher_ = std::thread([r = runtime.get()] { r->RefreshLoop(); });
  }
  return runtime;
}

Runtime::Runtime(RuntimeOptions options, std::unique_ptr<DaemonConfigSource> daemon)
    : options_(std::move(options)),
      daemon_(std::move(daemon)),
      shipped_files_(proto::ReadShippedConfigs(options_.shipped_config_dir)) {}

Runtime::~Runtime() {
  {
    absl::MutexLock lock(&stop_mu_);
    stop_ = true;
  }
  if (refresher_.joinable()) refresher_.join();
}

std::shared_ptr<const FetchedConfigs> Runtime::Fetch(const kernels::DeviceInfo& device,
                                                 const std::string& uuid) {
  auto fetched = std::make_shared<FetchedConfigs>();
  fetched->sku = tuner::SkuOf(device);
  std::string daemon_problem;
  if (daemon_ != nullptr) {
    absl::StatusOr<pb::ListConfigsResponse> response = daemon_->ListConfigs(uuid);
    const std::string daemon = absl::StrCat("the daemon at ", daemon_->target());
    if (!response.ok()) {
      daemon_problem = absl::StrCat(daemon, " did not answer (", response.status().message(),
                                    "): using the store and the shipped files");
    } else if (!response->has_sku()) {
      daemon_problem = absl::StrCat(daemon, " runs the CPU backend and serves no GPU configs");
    } else if (!(proto::SkuFromProto(response->sku()) == fetched->sku)) {
      daemon_problem = absl::StrCat(daemon, " serves another GPU model (",
                                    response->sku().name(), ") for this device");
    } else {
      std::vector<tuner::TunedEntry> entries;
      int64_t unreadable = 0;
      for (const pb::TunedEntry& entry : response->entries()) {
        absl::StatusOr<tuner::TunedEntry> read = proto::TunedEntryFromProto(entry);
        if (read.ok()) {
          entries.push_back(*std::move(read));
        } else {
          ++unreadable;  // a newer daemon's op or config
        }
      }
      fetched->table = tuner::MakeConfigTable({}, entries);
      fetched->origin = absl::StrCat("daemon ", daemon_->target(), " (",
                                     fetched->table.size(tuner::EntryOrigin::kLocal), " tuned + ",
                                     fetched->table.size(tuner::EntryOrigin::kShipped),
                                     " shipped entries)");
      if (unreadable > 0) {
        fetched->problem = absl::StrCat(unreadable, " of the daemon's entries are of ops or "
                                        "configs this kerntune cannot read");
      }
      return fetched;
    }
  }
  std::string store_problem;
  const std::vector<db::BestConfig> rows =
      StoreRows(options_.db_path, fetched->sku, store_problem);
  const proto::ShippedEntries shipped = proto::ShippedEntriesFor(shipped_files_, fetched->sku);
  fetched->table = tuner::MakeConfigTable(rows, shipped.entries);
  fetched->origin = absl::StrCat(
      "store ", options_.db_path.empty() ? "(none)" : options_.db_path, " (",
      fetched->table.size(tuner::EntryOrigin::kLocal), " entries) + shipped files in ",
      options_.shipped_config_dir, " (", fetched->table.size(tuner::EntryOrigin::kShipped),
      " entries)");
  std::vector<std::string> problems;
  for (std::string* problem : {&daemon_problem, &store_problem}) {
    if (!problem->empty()) problems.push_back(std::move(*problem));
  }
  if (const std::string stale = tuner::DescribeStale(fetched->table.stale()); !stale.empty()) {
    problems.push_back(stale);
  }
  fetched->problem = absl::StrJoin(problems, "; ");
  return fetched;
}

std::shared_ptr<Runtime::SkuState> Runtime::StateFor(const kernels::DeviceInfo& device,
                                                     const std::string& uuid) {
  const db::GpuSku sku = tuner::SkuOf(device);
  {
    absl::MutexLock lock(&mu_);
    for (const std::shared_ptr<SkuState>& state : states_) {
      if (tuner::SkuOf(state->device) == sku) return state;
    }
  }
  // Fetched outside the lock (a daemon call); a second thread racing here
  // fetches too, and the first state in wins.
  auto state = std::make_shared<SkuState>();
  state->device = device;
  state->uuid = uuid;
  state->Install(Fetch(device, uuid));
  absl::MutexLock lock(&mu_);
  for (const std::shared_ptr<SkuState>& existing : states_) {
    if (tuner::SkuOf(existing->device) == sku) return existing;
  }
  states_.push_back(state);
  return state;
}

absl::StatusOr<const Runtime::DeviceSlot*> Runtime::Slot(int ordinal) {
  {
    absl::MutexLock lock(&mu_);
    if (ordinal >= 0 && static_cast<size_t>(ordinal) < slots_.size() &&
        slots_[ordinal] != nullptr) {
      return slots_[ordinal].get();
    }
  }
  absl::StatusOr<kernels::DeviceInfo> info = kernels::GetDeviceInfo(ordinal);
  if (!info.ok()) return info.status();
  auto slot = std::make_unique<DeviceSlot>();
  slot->info = *std::move(info);
  slot->uuid = UuidOf(slot->info);
  slot->state = StateFor(slot->info, slot->uuid);
  absl::MutexLock lock(&mu_);
  if (slots_.size() <= static_cast<size_t>(ordinal)) slots_.resize(ordinal + 1);
  if (slots_[ordinal] == nullptr) slots_[ordinal] = std::move(slot);
  return slots_[ordinal].get();
}

absl::StatusOr<tuner::ConfigChoice> Runtime::ChooseIn(SkuState& state, kernels::Op op,
                                                      kernels::DType dtype, kernels::Shape shape,
                                                      bool batch_invariant,
                                                      kernels::RowPlacement placement) {
  const SkuState::Key key{op,          dtype,
                          shape.rows,  shape.cols,
                          shape.inner, batch_invariant ? static_cast<int>(placement) : -1};
  absl::MutexLock lock(&state.mu);
  if (auto it = state.chosen.find(key); it != state.chosen.end()) return it->second;
  absl::StatusOr<tuner::ConfigChoice> choice =
      batch_invariant
          ? state.configs->table.LookupBatchInvariant(op, dtype, shape, state.device, placement)
          : state.configs->table.Lookup(op, dtype, shape, state.device);
  if (state.chosen.size() >= kMaxRememberedChoices) state.chosen.clear();
  state.chosen.emplace(key, choice);
  return choice;
}

absl::StatusOr<tuner::ConfigChoice> Runtime::Choose(kernels::Op op, kernels::DType dtype,
                                                    kernels::Shape shape,
                                                    const kernels::DeviceInfo& device,
                                                    bool batch_invariant,
                                                    kernels::RowPlacement placement) {
  return ChooseIn(*StateFor(device, UuidOf(device)), op, dtype, shape, batch_invariant,
                  placement);
}

absl::StatusOr<const Runtime::DeviceSlot*> Runtime::CurrentSlot() {
  int ordinal = 0;
  if (cudaError_t error = cudaGetDevice(&ordinal); error != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("no current CUDA device: ", cudaGetErrorString(error)));
  }
  return Slot(ordinal);
}

absl::StatusOr<kernels::LaunchConfig> Runtime::Launch(kernels::Op op, kernels::DType dtype,
                                                      kernels::Shape shape,
                                                      const kernels::RowOpArgs& args,
                                                      cudaStream_t stream,
                                                      bool batch_invariant,
                                                      int64_t* workspace_needed) {
  absl::StatusOr<const DeviceSlot*> slot = CurrentSlot();
  if (!slot.ok()) return slot.status();
  absl::StatusOr<tuner::ConfigChoice> choice =
      ChooseIn(*(*slot)->state, op, dtype, shape, batch_invariant,
               kernels::PlacementOf(args.params, shape));
  if (!choice.ok()) return choice.status();
  // The one error a caller answers by retrying (with a workspace of this
  // size), told apart from a bad workspace by its code.
  if (const int64_t needed = kernels::WorkspaceBytes(shape, choice->config);
      needed > 0 && args.workspace == nullptr) {
    if (workspace_needed != nullptr) *workspace_needed = needed;
    return absl::ResourceExhaustedError(
        absl::StrCat(kernels::ConfigKey(choice->config), " needs a workspace of ", needed,
                     " bytes"));
  }
  return kernels::Launch(op, dtype, shape, args, choice->config, (*slot)->info, stream);
}

absl::Status Runtime::RunOnHost(kernels::Op op, kernels::DType dtype, kernels::Shape shape,
                                const kernels::RowOpArgs& args) {
  return kernels::RunReference(op, dtype, shape, args, 0, shape.rows, dtype);
}

std::shared_ptr<const FetchedConfigs> Runtime::ConfigsFor(const kernels::DeviceInfo& device) {
  std::shared_ptr<SkuState> state = StateFor(device, UuidOf(device));
  absl::MutexLock lock(&state->mu);
  return state->configs;
}

void Runtime::Refresh() {
  std::vector<std::shared_ptr<SkuState>> states;
  {
    absl::MutexLock lock(&mu_);
    states = states_;
  }
  for (const std::shared_ptr<SkuState>& state : states) {
    state->Install(Fetch(state->device, state->uuid));
  }
}

void Runtime::RefreshLoop() {
  absl::MutexLock lock(&stop_mu_);
  while (!stop_mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.refresh_interval)) {
    stop_mu_.Unlock();
    Refresh();
    stop_mu_.Lock();
  }
}

}  // namespace kt::client
