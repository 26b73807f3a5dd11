// Tuned-config cache of the daemon (see config_cache.h).
#include "server/config_cache.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/log.h"
#include "tuner/backend.h"

namespace kt::server {
namespace {

// Why a store that exists may not open for reading: a WAL-mode store on a
// read-only filesystem, whose -shm file SQLite cannot create. Empty when
// that is not it.
std::string ReadOnlyHint(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  struct statvfs fs {};
  struct stat shm {};
  if (statvfs(dir.c_str(), &fs) != 0 || (fs.f_flag & ST_RDONLY) == 0 ||
      stat((path + "-shm").c_str(), &shm) == 0) {
    return "";
  }
  return " (its filesystem is read-only, and SQLite cannot create the -shm file it needs to read "
         "a WAL-mode store there)";
}

// Every table installed in the process gets the next serial: 0 is none.
std::atomic<uint64_t> next_table_serial{0};

// Served by the entry of exactly this problem.
bool ServedByExactEntry(tuner::ConfigSource source) {
  return source == tuner::ConfigSource::kTuned || source == tuner::ConfigSource::kShipped;
}

}  // namespace

ConfigCache::ConfigCache(std::string db_path, kernels::DeviceInfo device,
                         std::vector<tuner::TunedEntry> shipped)
    : db_path_(std::move(db_path)),
      device_(std::move(device)),
      sku_(tuner::SkuOf(device_)),
      shipped_(std::move(shipped)) {}

ConfigCache::~ConfigCache() { StopPolling(); }

absl::StatusOr<std::unique_ptr<ConfigCache>> ConfigCache::Create(
    const std::string& db_path, kernels::DeviceInfo device,
    std::vector<tuner::TunedEntry> shipped) {
  std::unique_ptr<ConfigCache> cache(
      new ConfigCache(db_path, std::move(device), std::move(shipped)));
  // No store, or none that can be read yet: the shipped entries alone. An
  // unreadable store is store_problem()'s to report and the poller's to
  // retry; it is no reason not to serve the device.
  absl::StatusOr<bool> loaded = cache->ReloadIfChanged();
  if (!loaded.ok() || !*loaded) cache->Install({}, 0);
  return cache;
}

absl::StatusOr<ConfigCache::StoreFile> ConfigCache::EnsureOpen() {
  if (db_path_.empty()) return StoreFile::kMissing;  // no database configured
  struct stat info {};
  if (stat(db_path_.c_str(), &info) != 0) {
    const int error = errno;
    store_.reset();
    if (error == ENOENT) return StoreFile::kMissing;
    return absl::ErrnoToStatus(error, absl::StrCat("stat ", db_path_));
  }
  const std::pair<uint64_t, uint64_t> file{info.st_dev, info.st_ino};
  if (store_ != nullptr && file == store_file_) return StoreFile::kOpen;
  // Not open yet, or another file took the path (a store replaced by a
  // rename, or deleted and made again).
  store_.reset();
  db::OpenOptions options;
  options.read_only = true;
  absl::StatusOr<std::unique_ptr<db::TuningStore>> store = db::TuningStore::Open(db_path_, options);
  if (!store.ok()) {
    // NotFound is also SQLite failing to open a file that is there
    // (SQLITE_CANTOPEN), which must not pass for no store at all.
    if (absl::IsNotFound(store.status()) && stat(db_path_.c_str(), &info) != 0 &&
        errno == ENOENT) {
      return StoreFile::kMissing;
    }
    return store.status();
  }
  store_ = *std::move(store);
  store_file_ = file;
  return StoreFile::kOpenedNow;
}

absl::StatusOr<bool> ConfigCache::ReloadIfChanged() {
  absl::MutexLock store_lock(&store_mu_);
  return Reload();
}

absl::StatusOr<bool> ConfigCache::Reload() {
  absl::StatusOr<StoreFile> open = EnsureOpen();
  absl::Status error = open.status();
  if (open.ok() && *open == StoreFile::kMissing) {
    if (data_version() == 0) {  // never loaded: nothing to say
      SetProblem("");
      return false;
    }
    error = absl::NotFoundError(absl::StrCat("the tuning store ", db_path_, " is gone"));
    SetProblem(absl::StrCat("the tuning store ", db_path_,
                            " is gone (deleted or moved): still serving the ", local_entries(),
                            " tuned configs loaded from it until a store is there again"));
    return error;
  }
  if (open.ok()) {
    absl::StatusOr<int64_t> version = store_->DataVersion();
    error = version.status();
    if (version.ok() && *open == StoreFile::kOpen && *version == data_version()) {
      SetProblem("");
      return false;
    }
    if (version.ok()) error = Load();
    if (error.ok()) {
      SetProblem("");
      return true;
    }
  }
  // Opened again next time: a failed read may have left the connection
  // unusable.
  store_.reset();
  const std::string serving =
      data_version() == 0
          ? "serving no tuned configs from it until it can be read"
          : absl::StrCat("still serving the ", local_entries(),
                         " tuned configs loaded from it before");
  SetProblem(absl::StrCat("cannot read the tuning store ", db_path_, ": ", error.message(),
                          ReadOnlyHint(db_path_), "; ", serving));
  return error;
}

absl::Status ConfigCache::Load() {
  // Read the version first: a write landing during the read bumps it again,
  // so the next poll reloads rather than missing it.
  absl::StatusOr<int64_t> version = store_->DataVersion();
  if (!version.ok()) return version.status();
  absl::StatusOr<std::vector<db::BestConfig>> rows = store_->BestConfigsForSku(sku_);
  if (!rows.ok()) return rows.status();
  Install(*rows, *version);
  return absl::OkStatus();
}

void ConfigCache::Install(const std::vector<db::BestConfig>& rows, int64_t data_version) {
  auto table = std::make_shared<const tuner::ConfigTable>(tuner::MakeConfigTable(rows, shipped_));
  // The daemon's log, once per load: a stale entry silently becoming a
  // heuristic launch would look like a slow GPU.
  if (const std::string stale = tuner::DescribeStale(table->stale()); !stale.empty()) {
    LogWarning(stale);
  }
  int64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    table_ = table;
    data_version_ = data_version;
    generation = ++generation_;
    table_serial_.store(next_table_serial.fetch_add(1, std::memory_order_relaxed) + 1,
                        std::memory_order_release);
  }
  served_.Prune(
      [&](const ServedKey& key) {
        absl::StatusOr<tuner::ConfigChoice> choice =
            table->Lookup(key.op, key.dtype, key.shape, device_);
        return choice.ok() && ServedByExactEntry(choice->source);
      },
      generation);
}

std::shared_ptr<const tuner::ConfigTable> ConfigCache::table() const {
  absl::MutexLock lock(&mu_);
  return table_;
}

// The last answer of each thread, for the table it came from: a client
// sending the same Run again (the common case) skips the table's search
// (~1 us on an H100 host, a tenth of a small Run's daemon time), and the
// lock: a repeated lookup took 75 ns with it and 22-44 without, on one
// thread of a 2-core development machine; 150-650 ns against 43-135 with
// two threads at once. A reloaded table is another table, with another
// serial.
struct ConfigCache::Memo {
  uint64_t table_serial = 0;  // 0: none yet
  int64_t generation = 0;
  kernels::Op op;
  kernels::DType dtype;
  kernels::Shape shape;
  absl::StatusOr<tuner::ConfigChoice> choice;
  // Where LookupForRun counts the problem when served untuned; null until
  // it first does.
  std::shared_ptr<ServedShapes::Slot> served;
};

ConfigCache::Memo& ConfigCache::Remember(kernels::Op op, kernels::DType dtype,
                                         kernels::Shape shape) const {
  thread_local Memo memo;
  if (memo.table_serial == table_serial_.load(std::memory_order_acquire) && memo.op == op &&
      memo.dtype == dtype && memo.shape == shape) {
    return memo;
  }
  std::shared_ptr<const tuner::ConfigTable> current;
  int64_t generation = 0;
  uint64_t serial = 0;
  {
    absl::MutexLock lock(&mu_);
    current = table_;
    generation = generation_;
    serial = table_serial_.load(std::memory_order_relaxed);
  }
  memo.choice = current->Lookup(op, dtype, shape, device_);
  memo.table_serial = serial;
  memo.generation = generation;
  memo.op = op;
  memo.dtype = dtype;
  memo.shape = shape;
  memo.served.reset();
  return memo;
}

absl::StatusOr<tuner::ConfigChoice> ConfigCache::Lookup(kernels::Op op, kernels::DType dtype,
                                                        kernels::Shape shape) const {
  return Remember(op, dtype, shape).choice;
}

absl::StatusOr<tuner::ConfigChoice> ConfigCache::LookupForRun(kernels::Op op,
                                                              kernels::DType dtype,
                                                              kernels::Shape shape) {
  Memo& memo = Remember(op, dtype, shape);
  // A problem no kernel runs cannot be tuned either.
  if (!memo.choice.ok() || ServedByExactEntry(memo.choice->source)) return memo.choice;
  // The table's lock only when the problem is new to this thread, or left
  // the table (evicted) while the thread still served it.
  if (memo.served == nullptr || memo.served->dropped()) {
    memo.served = served_.Find({op, dtype, shape}, memo.generation);
  }
  if (memo.served != nullptr) memo.served->Count(memo.choice->source, absl::Now());
  return memo.choice;
}

std::vector<tuner::TunedEntry> ConfigCache::Entries() const { return table()->Entries(); }

int64_t ConfigCache::local_entries() const {
  return table()->size(tuner::EntryOrigin::kLocal);
}

int64_t ConfigCache::shipped_entries() const {
  return table()->size(tuner::EntryOrigin::kShipped);
}

tuner::StaleEntries ConfigCache::stale() const { return table()->stale(); }

int64_t ConfigCache::data_version() const {
  absl::MutexLock lock(&mu_);
  return data_version_;
}

std::string ConfigCache::store_problem() const {
  absl::MutexLock lock(&mu_);
  return store_problem_;
}

void ConfigCache::SetProblem(std::string problem) {
  absl::MutexLock lock(&mu_);
  store_problem_ = std::move(problem);
}

void ConfigCache::StartPolling(absl::Duration interval) {
  if (poller_.joinable()) return;
  {
    absl::MutexLock lock(&poll_mu_);
    stop_ = false;
  }
  poller_ = std::thread([this, interval] { PollLoop(interval); });
}

void ConfigCache::StopPolling() {
  {
    absl::MutexLock lock(&poll_mu_);
    stop_ = true;
  }
  if (poller_.joinable()) poller_.join();
}

void ConfigCache::PollLoop(absl::Duration interval) {
  // The daemon's log: the poller is the edge of this background work. A
  // store problem is logged when it starts (or changes) and when it ends,
  // not at every poll.
  std::string logged = store_problem();
  if (!logged.empty()) LogWarning(logged);
  absl::MutexLock lock(&poll_mu_);
  while (!poll_mu_.AwaitWithTimeout(absl::Condition(&stop_), interval)) {
    poll_mu_.Unlock();
    absl::StatusOr<bool> reloaded = ReloadIfChanged();
    if (const std::string problem = store_problem(); problem != logged) {
      if (!problem.empty()) {
        LogWarning(problem);
      } else {
        LogInfo(absl::StrCat("the tuning store ", db_path_, " can be read again"));
      }
      logged = problem;
    }
    if (reloaded.ok() && *reloaded) {
      LogInfo(absl::StrCat("reloaded ", local_entries(), " tuned configs from ", db_path_,
                           " (data version ", data_version(), ")"));
    }
    poll_mu_.Lock();
  }
}

}  // namespace kt::server
