// kt_soak: a soak test of kerntuned. Starts a daemon, runs --clients client
// processes (soak_client.h) against it for --seconds while killing one at
// random every --kill_every_s on average (SIGKILL, then a fresh one takes
// its place), and checks:
//  - every valid Run matched the fp64 reference and none failed; every
//    malformed request got its code;
//  - the registrations and queues of killed clients are reaped: at each
//    second's look the daemon's buffer owners and queues are at most the
//    live clients plus those killed in the last kReapWithin, and none is
//    left once every client is gone;
//  - the daemon's file descriptors are back to their idle count at the end,
//    and its RSS (the median of 10 s of samples) grew less than
//    --rss_growth from just after the warm-up to the end;
//  - the daemon stayed up and stops cleanly on SIGTERM.
// Prints a JSON summary (and writes it to --json); exit 0 when it passed.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/daemon_client.h"
#include "client/output_format.h"
#include "tests/soak/soak_client.h"
#include "tests/soak/soak_counts.h"

ABSL_FLAG(int, clients, 16, "client processes running at once");
ABSL_FLAG(int, seconds, 60, "how long the clients run");
ABSL_FLAG(bool, cuda, false,
          "a GPU daemon (no --cpu), and CUDA IPC tensors (registered and one-off) beside "
          "shared memory and inline ones");
ABSL_FLAG(int, cuda_device, 0, "--cuda: the clients' CUDA device");
ABSL_FLAG(std::string, kerntuned, "",
          "the daemon to start; default: kerntuned beside kt_soak, else the build tree's");
ABSL_FLAG(double, kill_every_s, 1.0,
          "mean seconds between two clients killed (SIGKILL; a new one replaces it); 0 = none");
ABSL_FLAG(double, warmup_s, -1,
          "seconds after which the daemon's RSS is the baseline; default a fifth of --seconds");
ABSL_FLAG(double, rss_growth, 0.10, "the largest RSS growth after the warm-up that passes");
ABSL_FLAG(std::string, json, "", "also write the JSON summary to this file");
ABSL_FLAG(uint64_t, seed, 0, "random seed; 0 = from the clock");
ABSL_FLAG(bool, keep, false, "keep the working directory (the logs) even when the soak passes");
ABSL_FLAG(std::string, client_of, "", "(internal) run as one client of this target");
ABSL_FLAG(uint64_t, client_seed, 1, "(internal) the client's seed");

namespace kt::soak {
namespace {

namespace pb = ::kerntune::v1;

// Housekeeping ends a dead client's registrations and queues within about
// a second (server.cc); this is the longest wait tolerated for it.
constexpr absl::Duration kReapWithin = absl::Seconds(3);
constexpr absl::Duration kSampleEvery = absl::Seconds(1);
// How long clients get to stop after SIGTERM (they finish their Run).
constexpr absl::Duration kClientStop = absl::Seconds(20);
// Descriptors the idle daemon may hold beyond its idle count before the
// soak: none. (Raise with a reason if gRPC is found to keep one lazily.)
constexpr int kFdSlack = 0;
// How long the idle daemon's fds may take to come back to their number
// before the soak, once every client is reaped.
constexpr absl::Duration kFdsSettleWithin = absl::Seconds(3);
// Seconds of RSS samples whose median stands for the RSS after the warm-up
// and at the end.
constexpr size_t kRssWindow = 10;

std::string SelfPath() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string();
}

std::string DefaultKerntuned() {
  const std::string self = SelfPath();
  const std::string beside = self.substr(0, self.rfind('/') + 1) + "kerntuned";
  return access(beside.c_str(), X_OK) == 0 ? beside : KT_KERNTUNED_BINARY;
}

// What /proc says of the daemon.
struct Sample {
  double t = 0;  // seconds since the clients started
  int fds = 0;
  std::vector<std::string> fd_targets;  // what each descriptor is (readlink)
  int64_t rss_kb = 0;
  int threads = 0;
};

std::optional<Sample> SampleProcess(pid_t pid, double t) {
  Sample sample;
  sample.t = t;
  DIR* dir = opendir(absl::StrCat("/proc/", pid, "/fd").c_str());
  if (dir == nullptr) return std::nullopt;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    ++sample.fds;
    char target[512];
    const ssize_t n = readlink(absl::StrCat("/proc/", pid, "/fd/", entry->d_name).c_str(), target,
                               sizeof(target) - 1);
    sample.fd_targets.push_back(n > 0 ? std::string(target, static_cast<size_t>(n)) : "?");
  }
  closedir(dir);
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "VmRSS:")) {
      absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(rest), " kB"), &sample.rss_kb);
    } else if (absl::ConsumePrefix(&rest, "Threads:")) {
      absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &sample.threads);
    }
  }
  return sample;
}

// `argv` with stdout and stderr in `log` (appended); stdout to `stdout_fd`
// instead when >= 0. With `hold_sigterm` the child starts with SIGTERM
// blocked (the mask survives exec): a client told to stop as it starts
// stops once it has its handler, instead of dying of the default action.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log, int stdout_fd,
            bool hold_sigterm) {
  std::vector<std::string> copy = argv;
  std::vector<char*> raw;
  for (std::string& arg : copy) raw.push_back(arg.data());
  raw.push_back(nullptr);
  // Blocked across the fork, so the child has it blocked from its first
  // instruction: blocking it in the child left a moment in which a SIGTERM
  // killed it (kt_soak_cpu once failed so).
  sigset_t term, before;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  if (hold_sigterm) pthread_sigmask(SIG_BLOCK, &term, &before);
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(stdout_fd >= 0 ? stdout_fd : fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    execv(raw[0], raw.data());
    _exit(127);
  }
  if (hold_sigterm) pthread_sigmask(SIG_SETMASK, &before, nullptr);
  return pid;
}

std::string DescribeWait(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", strsignal(WTERMSIG(status)));
  return absl::StrCat("wait status ", status);
}

// One client process and what it said so far.
struct ClientProcess {
  int id = 0;
  pid_t pid = -1;
  int fd = -1;  // the read end of its stdout
  std::string partial;
  Counts last;
};

class Soak {
 public:
  Soak(const std::string& dir, uint64_t seed) : dir_(dir), rng_(seed) {}

  int Run();

 private:
  std::string socket() const { return dir_ + "/kerntune.sock"; }
  std::string target() const { return "unix:" + socket(); }
  double Elapsed() const { return absl::ToDoubleSeconds(absl::Now() - started_); }
  void Fail(std::string what) {
    std::fprintf(stderr, "kt_soak: FAIL: %s\n", what.c_str());
    failures_.push_back(std::move(what));
  }

  bool StartDaemon();
  std::optional<pb::GetStatusResponse> Status();
  void StartClient();
  // Reads what the client wrote; to EOF when `to_eof` (it has exited).
  void Drain(ClientProcess& client, bool to_eof);
  void Line(ClientProcess& client, absl::string_view line);
  // Its counts join the retired ones; its pipe and leftovers go.
  void Retire(ClientProcess& client);
  void KillOne();
  // Each second: the daemon's /proc sample, and the reaping bound.
  void Look();
  bool DaemonAlive();
  void StopClients();
  void WaitReaped();
  std::string Summary(const Counts& counts) const;

  const std::string dir_;
  std::mt19937_64 rng_;
  std::string kerntuned_;
  pid_t daemon_ = -1;
  std::optional<client::DaemonClient> status_client_;
  absl::Time started_;
  std::vector<ClientProcess> clients_;
  int next_id_ = 0;
  Counts retired_;
  std::vector<std::string> problems_;
  std::vector<std::string> failures_;
  int killed_ = 0;
  std::vector<absl::Time> kill_times_;
  int reap_bound_violations_ = 0;
  int64_t max_owners_ = 0, max_queues_ = 0;
  std::optional<Sample> idle_before_, idle_after_;
  std::vector<Sample> samples_;
  double reaped_after_s_ = -1;
  std::string daemon_exit_;
  std::string backend_;
};

bool Soak::StartDaemon() {
  kerntuned_ =
      absl::GetFlag(FLAGS_kerntuned).empty() ? DefaultKerntuned() : absl::GetFlag(FLAGS_kerntuned);
  // 1 MiB inline: what the malformed-request table assumes.
  std::vector<std::string> argv = {kerntuned_, "--socket=" + socket(),
                                   "--metrics_address=", "--max_request_bytes=1048576"};
  if (!absl::GetFlag(FLAGS_cuda)) argv.push_back("--cpu");
  daemon_ = Spawn(argv, dir_ + "/kerntuned.log", -1, /*hold_sigterm=*/false);
  client::DaemonClientOptions options;
  options.target = target();
  options.deadline = absl::Seconds(20);
  options.wait_for_ready = true;
  options.use_queue = false;
  status_client_ = *client::DaemonClient::Connect(options);
  std::optional<pb::GetStatusResponse> status = Status();
  if (!status) return false;
  backend_ = status->backend();
  if (absl::GetFlag(FLAGS_cuda) && !status->cuda_ipc_supported()) {
    Fail(absl::StrCat("--cuda: the daemon runs the ", backend_, " backend (",
                      status->backend_reason(), ") and takes no CUDA IPC"));
    return false;
  }
  *status_client_ = status_client_->WithDeadline(absl::Seconds(10));
  return true;
}

std::optional<pb::GetStatusResponse> Soak::Status() {
  absl::StatusOr<pb::GetStatusResponse> status = status_client_->GetStatus();
  if (!status.ok()) {
    Fail(absl::StrCat("GetStatus: ", status.status().ToString()));
    return std::nullopt;
  }
  return *std::move(status);
}

void Soak::StartClient() {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    Fail(absl::StrCat("pipe2: ", std::strerror(errno)));
    return;
  }
  ClientProcess client;
  client.id = next_id_++;
  std::vector<std::string> argv = {SelfPath(), "--client_of=" + target(),
                                   absl::StrCat("--client_seed=", rng_())};
  if (absl::GetFlag(FLAGS_cuda)) {
    argv.push_back("--cuda");
    argv.push_back(absl::StrCat("--cuda_device=", absl::GetFlag(FLAGS_cuda_device)));
  }
  client.pid = Spawn(argv, dir_ + "/clients.log", pipe_fds[1], /*hold_sigterm=*/true);
  close(pipe_fds[1]);
  client.fd = pipe_fds[0];
  fcntl(client.fd, F_SETFL, O_NONBLOCK);
  clients_.push_back(std::move(client));
}

void Soak::Line(ClientProcess& client, absl::string_view line) {
  if (std::optional<Counts> counts = Counts::Parse(line)) {
    client.last = *counts;
  } else if (absl::ConsumePrefix(&line, "problem ")) {
    problems_.push_back(absl::StrCat("client ", client.id, " (pid ", client.pid, "): ", line));
  } else {
    problems_.push_back(absl::StrCat("client ", client.id, " said: ", line));
  }
}

void Soak::Drain(ClientProcess& client, bool to_eof) {
  char chunk[4096];
  while (true) {
    const ssize_t got = read(client.fd, chunk, sizeof(chunk));
    if (got > 0) {
      client.partial.append(chunk, static_cast<size_t>(got));
      size_t end;
      while ((end = client.partial.find('\n')) != std::string::npos) {
        Line(client, absl::string_view(client.partial).substr(0, end));
        client.partial.erase(0, end + 1);
      }
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EAGAIN && to_eof) {
      pollfd wait{client.fd, POLLIN, 0};
      poll(&wait, 1, 1000);
      continue;
    }
    return;  // EOF, or nothing more for now
  }
}

void Soak::Retire(ClientProcess& client) {
  Drain(client, /*to_eof=*/true);
  close(client.fd);
  retired_ += client.last;
  // A killed client cannot unlink its shared-memory objects
  // (client/shared_memory.cc names them /kerntune-<pid>-...).
  const std::string prefix = absl::StrCat("kerntune-", client.pid, "-");
  if (DIR* dir = opendir("/dev/shm")) {
    while (const dirent* entry = readdir(dir)) {
      if (absl::StartsWith(entry->d_name, prefix)) {
        unlink(absl::StrCat("/dev/shm/", entry->d_name).c_str());
      }
    }
    closedir(dir);
  }
}

void Soak::KillOne() {
  if (clients_.empty()) return;
  const size_t index = std::uniform_int_distribution<size_t>(0, clients_.size() - 1)(rng_);
  ClientProcess client = std::move(clients_[index]);
  clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(index));
  kill(client.pid, SIGKILL);
  waitpid(client.pid, nullptr, 0);
  kill_times_.push_back(absl::Now());
  ++killed_;
  Retire(client);
  StartClient();
}

bool Soak::DaemonAlive() {
  int status = 0;
  if (waitpid(daemon_, &status, WNOHANG) != daemon_) return true;
  daemon_exit_ = DescribeWait(status);
  Fail(absl::StrCat("kerntuned died (", daemon_exit_, ") at ", Elapsed(), " s"));
  daemon_ = -1;
  return false;
}

void Soak::Look() {
  if (std::optional<Sample> sample = SampleProcess(daemon_, Elapsed())) {
    samples_.push_back(*sample);
  }
  const std::optional<pb::GetStatusResponse> status = Status();
  if (!status) return;
  const absl::Time now = absl::Now();
  const int64_t recently_killed = std::count_if(
      kill_times_.begin(), kill_times_.end(), [&](absl::Time t) { return now - t < kReapWithin; });
  const int64_t bound = static_cast<int64_t>(clients_.size()) + recently_killed;
  max_owners_ = std::max(max_owners_, status->buffer_owners());
  max_queues_ = std::max(max_queues_, status->open_queues());
  if (status->buffer_owners() > bound || status->open_queues() > bound) {
    if (reap_bound_violations_++ < 5) {
      Fail(absl::StrCat("at ", absl::StrFormat("%.1f", Elapsed()), " s the daemon held ",
                        status->buffer_owners(), " buffer owners and ", status->open_queues(),
                        " queues for ", clients_.size(), " live clients and ", recently_killed,
                        " killed in the last ", absl::FormatDuration(kReapWithin),
                        ": a killed client was not reaped"));
    }
  }
}

void Soak::StopClients() {
  for (ClientProcess& client : clients_) kill(client.pid, SIGTERM);
  const absl::Time until = absl::Now() + kClientStop;
  for (ClientProcess& client : clients_) {
    int status = 0;
    pid_t got = 0;
    while ((got = waitpid(client.pid, &status, WNOHANG)) == 0 && absl::Now() < until) {
      Drain(client, /*to_eof=*/false);
      absl::SleepFor(absl::Milliseconds(10));
    }
    if (got == 0) {
      Fail(absl::StrCat("client ", client.id, " (pid ", client.pid, ") did not stop within ",
                        absl::FormatDuration(kClientStop), " of SIGTERM: it hangs"));
      kill(client.pid, SIGKILL);
      waitpid(client.pid, &status, 0);
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      Fail(absl::StrCat("client ", client.id, " (pid ", client.pid, ") ended with ",
                        DescribeWait(status)));
    }
    Retire(client);
  }
  clients_.clear();
}

void Soak::WaitReaped() {
  const absl::Time gone = absl::Now();
  std::optional<pb::GetStatusResponse> status;
  do {
    status = Status();
    if (!status) return;
    if (status->registered_buffers() == 0 && status->buffer_owners() == 0 &&
        status->open_queues() == 0) {
      reaped_after_s_ = absl::ToDoubleSeconds(absl::Now() - gone);
      return;
    }
    absl::SleepFor(absl::Milliseconds(100));
  } while (absl::Now() - gone < kReapWithin);
  Fail(absl::StrCat(absl::FormatDuration(kReapWithin), " after the last client ended the daemon ",
                    "still holds ", status->registered_buffers(), " registrations of ",
                    status->buffer_owners(), " owners and ", status->open_queues(), " queues"));
}

int Soak::Run() {
  const int clients = absl::GetFlag(FLAGS_clients);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const double kill_every_s = absl::GetFlag(FLAGS_kill_every_s);
  const double warmup_s =
      absl::GetFlag(FLAGS_warmup_s) >= 0 ? absl::GetFlag(FLAGS_warmup_s) : seconds / 5;
  if (!StartDaemon()) {
    std::fprintf(stderr, "kt_soak: kerntuned (%s) did not come up; its log: %s/kerntuned.log\n",
                 kerntuned_.c_str(), dir_.c_str());
    return 1;
  }
  idle_before_ = SampleProcess(daemon_, 0);
  started_ = absl::Now();
  for (int i = 0; i < clients; ++i) StartClient();
  std::exponential_distribution<double> kill_gap(kill_every_s > 0 ? 1 / kill_every_s : 1);
  const auto next_kill_after = [&] {
    return kill_every_s > 0 ? absl::Now() + absl::Seconds(kill_gap(rng_)) : absl::InfiniteFuture();
  };
  absl::Time next_kill = next_kill_after();
  absl::Time next_look = absl::Now();
  const absl::Time end = started_ + absl::Seconds(seconds);
  while (absl::Now() < end && DaemonAlive()) {
    std::vector<pollfd> fds;
    for (const ClientProcess& client : clients_) fds.push_back({client.fd, POLLIN, 0});
    poll(fds.data(), fds.size(), 50);
    for (ClientProcess& client : clients_) Drain(client, /*to_eof=*/false);
    // A client that ended by itself failed (it runs until SIGTERM).
    for (size_t i = 0; i < clients_.size();) {
      int status = 0;
      if (waitpid(clients_[i].pid, &status, WNOHANG) != clients_[i].pid) {
        ++i;
        continue;
      }
      Fail(absl::StrCat("client ", clients_[i].id, " (pid ", clients_[i].pid,
                        ") ended by itself: ", DescribeWait(status)));
      ClientProcess gone = std::move(clients_[i]);
      clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(i));
      Retire(gone);
      StartClient();
    }
    if (absl::Now() >= next_kill) {
      KillOne();
      next_kill = next_kill_after();
    }
    if (absl::Now() >= next_look) {
      Look();
      next_look += kSampleEvery;
    }
  }
  const double client_seconds = Elapsed();
  StopClients();
  if (daemon_ > 0 && DaemonAlive()) {
    WaitReaped();
    // A queue leaves the count when it is closed and its last fd when its
    // poller next looks (a poller woken on a loaded machine may take a few
    // milliseconds more): a leak is an fd that stays.
    const absl::Time reaped = absl::Now();
    do {
      idle_after_ = SampleProcess(daemon_, Elapsed());
      if (idle_before_ && idle_after_ && idle_after_->fds <= idle_before_->fds + kFdSlack) break;
      absl::SleepFor(absl::Milliseconds(100));
    } while (absl::Now() - reaped < kFdsSettleWithin);
    kill(daemon_, SIGTERM);
    int status = 0;
    waitpid(daemon_, &status, 0);
    daemon_exit_ = DescribeWait(status);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      Fail(absl::StrCat("kerntuned did not stop cleanly on SIGTERM: ", daemon_exit_));
    }
  }

  const Counts& counts = retired_;
  if (counts[kWrong] > 0) Fail(absl::StrCat(counts[kWrong], " wrong results"));
  if (counts[kValidFailed] > 0) {
    Fail(absl::StrCat(counts[kValidFailed], " valid requests failed"));
  }
  if (counts[kMalformedWrongCode] > 0) {
    Fail(absl::StrCat(counts[kMalformedWrongCode], " malformed requests got the wrong code"));
  }
  std::vector<Counter> paths = {kInline, kShmGrpc, kShmQueue};
  if (absl::GetFlag(FLAGS_cuda)) {
    paths.insert(paths.end(), {kIpcGrpc, kIpcQueue, kOneOffGrpc, kOneOffQueue});
  }
  for (Counter path : paths) {
    if (counts[path] == 0) Fail(absl::StrCat("no valid Run went ", kCounterNames[path]));
  }
  if (kill_every_s > 0 && killed_ == 0) Fail("no client was killed");
  if (idle_before_ && idle_after_ && idle_after_->fds > idle_before_->fds + kFdSlack) {
    // Which: the targets after that were not there before.
    std::multiset<std::string> extra(idle_after_->fd_targets.begin(),
                                     idle_after_->fd_targets.end());
    for (const std::string& target : idle_before_->fd_targets) {
      if (auto it = extra.find(target); it != extra.end()) extra.erase(it);
    }
    Fail(absl::StrCat("the idle daemon holds ", idle_after_->fds,
                      " file descriptors after the soak, ", idle_before_->fds,
                      " before; new: ", absl::StrJoin(extra, ", ")));
  }
  // RSS moves by a few MB from one second to the next (allocator arenas
  // fill and empty); a leak moves its median. So the median of the first
  // samples after the warm-up is the baseline, and the median of the last
  // ones is held against it.
  std::vector<int64_t> after_warmup;
  for (const Sample& s : samples_) {
    if (s.t >= warmup_s) after_warmup.push_back(s.rss_kb);
  }
  const size_t window = std::clamp<size_t>(after_warmup.size() / 3, 1, kRssWindow);
  const auto median = [](std::vector<int64_t> values) {
    std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
    return values[values.size() / 2];
  };
  int64_t rss_warm = 0, rss_end = 0, rss_max = 0;
  double growth = 0;
  if (after_warmup.empty()) {
    Fail("no sample after the warm-up");
  } else {
    rss_warm = median({after_warmup.begin(), after_warmup.begin() + window});
    rss_end = median({after_warmup.end() - window, after_warmup.end()});
    rss_max = *std::max_element(after_warmup.begin(), after_warmup.end());
    growth = static_cast<double>(rss_end) / rss_warm - 1;
    if (growth >= absl::GetFlag(FLAGS_rss_growth)) {
      Fail(absl::StrFormat(
          "the daemon's RSS grew %.1f%% after the warm-up (median %d kB over %d s from %.0f s, "
          "%d kB over the last %d s), over %.0f%%",
          growth * 100, rss_warm, window, warmup_s, rss_end, window,
          absl::GetFlag(FLAGS_rss_growth) * 100));
    }
  }

  int fds_max = 0, threads_max = 0;
  for (const Sample& s : samples_) {
    fds_max = std::max(fds_max, s.fds);
    threads_max = std::max(threads_max, s.threads);
  }
  const auto kb = [](const std::optional<Sample>& s) {
    return s ? absl::StrCat(s->rss_kb) : "null";
  };
  const auto fd = [](const std::optional<Sample>& s) { return s ? absl::StrCat(s->fds) : "null"; };
  std::string json = absl::StrCat(
      "{\n  \"passed\": ", failures_.empty() ? "true" : "false", ",\n  \"failures\": [",
      absl::StrJoin(
          failures_, ", ",
          [](std::string* out, const std::string& f) { out->append(client::JsonQuote(f)); }),
      "],\n  \"backend\": ", client::JsonQuote(backend_),
      ",\n  \"cuda\": ", absl::GetFlag(FLAGS_cuda) ? "true" : "false",
      ",\n  \"clients\": ", clients, ",\n  \"seconds\": ", client::JsonNumber(client_seconds),
      ",\n  \"client_processes\": ", next_id_, ",\n  \"killed\": ", killed_,
      ",\n  \"valid_runs\": ", counts.valid_runs(), ",\n  \"by_path\": {");
  std::vector<std::string> by_path;
  for (Counter path :
       {kInline, kShmGrpc, kShmQueue, kIpcGrpc, kIpcQueue, kOneOffGrpc, kOneOffQueue}) {
    by_path.push_back(absl::StrCat("\"", kCounterNames[path], "\": ", counts[path]));
  }
  absl::StrAppend(
      &json, absl::StrJoin(by_path, ", "), "},\n  \"wrong\": ", counts[kWrong],
      ",\n  \"valid_failed\": ", counts[kValidFailed], ",\n  \"malformed\": ", counts[kMalformed],
      ",\n  \"malformed_wrong_code\": ", counts[kMalformedWrongCode],
      ",\n  \"registered\": ", counts[kRegistered],
      ",\n  \"unregistered\": ", counts[kUnregistered],
      ",\n  \"reaping\": {\"bound_violations\": ", reap_bound_violations_,
      ", \"max_buffer_owners\": ", max_owners_, ", \"max_open_queues\": ", max_queues_,
      ", \"all_reaped_after_last_client_s\": ",
      reaped_after_s_ >= 0 ? client::JsonNumber(reaped_after_s_) : "null",
      "},\n  \"daemon\": {\"fds_idle_before\": ", fd(idle_before_), ", \"fds_max\": ", fds_max,
      ", \"fds_idle_after\": ", fd(idle_after_), ", \"threads_max\": ", threads_max,
      ", \"rss_kb_idle_before\": ", kb(idle_before_),
      ", \"warmup_s\": ", client::JsonNumber(warmup_s), ", \"rss_kb_after_warmup\": ", rss_warm,
      ", \"rss_kb_at_end\": ", rss_end, ", \"rss_kb_max_after_warmup\": ", rss_max,
      ", \"rss_growth_after_warmup\": ", client::JsonNumber(growth),
      ", \"rss_kb_idle_after\": ", kb(idle_after_), ", \"exit\": ", client::JsonQuote(daemon_exit_),
      ",\n    \"rss_kb_each_second\": [",
      absl::StrJoin(samples_, ", ",
                    [](std::string* out, const Sample& s) { absl::StrAppend(out, s.rss_kb); }),
      "]},\n  \"problems\": [",
      absl::StrJoin(
          problems_, ",\n    ",
          [](std::string* out, const std::string& p) { out->append(client::JsonQuote(p)); }),
      "],\n  \"workdir\": ", client::JsonQuote(dir_), "\n}\n");
  std::fputs(json.c_str(), stdout);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream(path) << json;
  }
  return failures_.empty() ? 0 : 1;
}

}  // namespace
}  // namespace kt::soak

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "a soak test of kerntuned: many client processes, valid and malformed requests, clients "
      "killed at random; checks results, reaping, descriptors and memory.\n"
      "  CI (CPU backend):  kt_soak --clients=16 --seconds=60\n"
      "  GPU host (a bundle's bin/, beside kerntuned):\n"
      "    kt_soak --cuda --clients=16 --seconds=300 --json=soak_gpu.json\n"
      "Exit 0 when every check passed; the JSON summary goes to stdout.");
  absl::ParseCommandLine(argc, argv);
  if (const std::string target = absl::GetFlag(FLAGS_client_of); !target.empty()) {
    kt::soak::ClientOptions options;
    options.target = target;
    options.seed = absl::GetFlag(FLAGS_client_seed);
    options.cuda = absl::GetFlag(FLAGS_cuda);
    options.cuda_device = absl::GetFlag(FLAGS_cuda_device);
    return kt::soak::RunClient(options);
  }
  if (absl::GetFlag(FLAGS_clients) < 1 || absl::GetFlag(FLAGS_seconds) < 1) {
    std::fprintf(stderr, "kt_soak: --clients and --seconds must be >= 1\n");
    return 2;
  }
  // Clients write to pipes this process may close first.
  signal(SIGPIPE, SIG_IGN);
  char dir[] = "/tmp/kt_soak_XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    std::fprintf(stderr, "kt_soak: mkdtemp: %s\n", std::strerror(errno));
    return 1;
  }
  uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (seed == 0) seed = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  std::fprintf(stderr, "kt_soak: seed %llu, working directory %s\n",
               static_cast<unsigned long long>(seed), dir);
  const int code = kt::soak::Soak(dir, seed).Run();
  if (code == 0 && !absl::GetFlag(FLAGS_keep)) {
    std::filesystem::remove_all(dir);
  }
  return code;
}
