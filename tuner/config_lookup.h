// Which launch config a problem gets on one GPU SKU, and why. A ConfigTable
// holds the SKU's tuned entries from the local tuning store and from the
// shipped config files (deploy/configs) and tries them in one order:
//   local tuned (exact point) -> shipped (exact point)
//   -> nearest tuned (same op, dtype and inner; local entries, then shipped)
//   -> kernels::HeuristicConfig.
// Only entries measured with the running kernel library are served; stale
// ones are counted and left out. The daemon (server/config_cache.h) and
// `kerntune configs show/list` both look up here, so they agree.
#ifndef KERNTUNE_TUNER_CONFIG_LOOKUP_H_
#define KERNTUNE_TUNER_CONFIG_LOOKUP_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "db/records.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "kernels/op_args.h"
#include "kernels/types.h"

namespace kt::tuner {

// The database key of a device: the SKU its configs are tuned for.
db::GpuSku SkuOf(const kernels::DeviceInfo& device);

// Where a served config came from.
enum class ConfigSource {
  kTuned,         // the local store's entry for exactly this point
  kShipped,       // a shipped file's entry for exactly this point
  kNearestTuned,  // the nearest entry of the same op, dtype and inner
  kHeuristic,     // kernels::HeuristicConfig: no entry applies
};
// "tuned", "shipped", "nearest_tuned", "heuristic" (the proto enum's names).
absl::string_view ConfigSourceName(ConfigSource source);

// Where a tuned entry was loaded from.
enum class EntryOrigin { kLocal, kShipped };
// "local store", "shipped file".
absl::string_view EntryOriginName(EntryOrigin origin);

// One tuned point of the SKU.
struct TunedEntry {
  kernels::Op op = kernels::Op::kSoftmax;
  kernels::DType dtype = kernels::DType::kFloat32;
  kernels::Shape shape;
  kernels::LaunchConfig config;
  double median_us = 0;
  // The kernel library it was measured with ("" when unknown).
  std::string kernel_version;
  EntryOrigin origin = EntryOrigin::kLocal;

  // Measured with the running library (kernels::kKernelLibraryVersion): the
  // only entries ever served.
  bool current() const;
};

// A tuning-store row (or a shipped file's entry read as one) as an entry.
// InvalidArgument when this code cannot read its op, dtype or config key:
// the store and the files may come from a newer kerntune.
absl::StatusOr<TunedEntry> EntryFromRow(const db::BestConfig& row, EntryOrigin origin);

struct ConfigChoice {
  kernels::LaunchConfig config;
  ConfigSource source = ConfigSource::kHeuristic;
  // The entry the config came from (every source but kHeuristic).
  std::optional<TunedEntry> tuned;
};

// Entries left out for their kernel library version.
struct StaleEntries {
  int64_t local = 0;
  int64_t shipped = 0;
  std::set<std::string> versions;  // "" = unknown

  int64_t total() const { return local + shipped; }
};
// "skipped 3 tuned entries (2 local, 1 shipped) measured with kernel library
// 0.1.0+k8 (current 0.1.0+k9); re-tune or import current configs"; empty
// when none was skipped.
std::string DescribeStale(const StaleEntries& stale);

class ConfigTable;
// A table of a SKU's local rows (the tuning store's) and its shipped
// entries. Rows this code cannot read (a newer op, a malformed key) are
// skipped: the store is shared with other versions of kerntune. The
// daemon's config cache and the in-process runtime build theirs here.
ConfigTable MakeConfigTable(const std::vector<db::BestConfig>& local_rows,
                            const std::vector<TunedEntry>& shipped);

class ConfigTable {
 public:
  // Keeps a current entry (replacing an earlier one of the same origin and
  // point); counts a stale one in stale() and drops it.
  void Add(TunedEntry entry);

  // The config for a problem on `device` (a device of the table's SKU).
  // Entries are checked with kernels::ValidateConfig before they are
  // trusted (a file may have been tuned on another device); an illegal one
  // is passed over. Errors only when even the heuristic has no config (a
  // shape no kernel runs).
  absl::StatusOr<ConfigChoice> Lookup(kernels::Op op, kernels::DType dtype,
                                      kernels::Shape shape,
                                      const kernels::DeviceInfo& device) const;

  // Batch-invariant mode: a config that depends on the op, dtype, cols,
  // inner and the rows' placement only, never on rows, of a family that
  // reduces each row inside one thread group or block (no split impl), so
  // a row reduces in the same order, and gives the same bits, at any
  // number of rows. The tuned entry of the same op, dtype, cols and inner
  // tuned at the most rows (local before shipped) whose config qualifies
  // (legal at every rows of kInvariantProbeRows, serving `placement`); else
  // the heuristic at kInvariantRows rows when it qualifies; else the first
  // qualifying config enumerated there. Source: kTuned / kShipped when the
  // entry is of exactly these rows, kNearestTuned for other rows,
  // kHeuristic. NotFound when no config qualifies.
  absl::StatusOr<ConfigChoice> LookupBatchInvariant(
      kernels::Op op, kernels::DType dtype, kernels::Shape shape,
      const kernels::DeviceInfo& device,
      kernels::RowPlacement placement = kernels::RowPlacement::kContiguous) const;
  // The rows a batch-invariant config is chosen at when no entry has one,
  // and the rows it must be legal at.
  static constexpr int64_t kInvariantRows = 4096;
  static constexpr int64_t kInvariantProbeRows[] = {1, 3, 64, 4096, 65536};

  // The entries that may be served: local ones, then shipped ones, each in
  // (op, dtype, inner, rows, cols) order.
  std::vector<TunedEntry> Entries() const;
  // How many of them came from `origin`.
  int64_t size(EntryOrigin origin) const;
  const StaleEntries& stale() const { return stale_; }

 private:
  // (op, dtype, inner, rows, cols): the entries one nearest search chooses
  // among (same op, dtype, inner) are adjacent.
  using Key = std::tuple<kernels::Op, kernels::DType, int64_t, int64_t, int64_t>;
  using EntryMap = std::map<Key, TunedEntry>;

  const EntryMap& OfOrigin(EntryOrigin origin) const;
  // The entry at exactly `shape`, when its config is legal there.
  std::optional<TunedEntry> Exact(const EntryMap& entries, kernels::Op op, kernels::DType dtype,
                                  kernels::Shape shape, const kernels::DeviceInfo& device) const;
  // The nearest entry of the same op, dtype and inner in log space (a 2x
  // change of rows costs as much as a 2x change of cols; ties go to the
  // first in (rows, cols) order), when its config is legal for `shape`.
  std::optional<TunedEntry> Nearest(const EntryMap& entries, kernels::Op op,
                                    kernels::DType dtype, kernels::Shape shape,
                                    const kernels::DeviceInfo& device) const;

  EntryMap local_;
  EntryMap shipped_;
  StaleEntries stale_;
};

}  // namespace kt::tuner

#endif  // KERNTUNE_TUNER_CONFIG_LOOKUP_H_
