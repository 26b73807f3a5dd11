// Failed requests on the daemon's log without flooding it. Per caller (a
// process by pid and uid, a TCP client by address) and status code, the
// first failures of a window are logged one by one; the rest are counted
// and summed up in one line when the window ends ("1,240 more
// INVALID_ARGUMENT from pid 4242 (uid 1000) in the last 10 s; the last:
// Run: shape.rows=0 must be >= 1"). A total budget of full lines per window
// bounds the log when many callers fail at once.
#ifndef KERNTUNE_SERVER_REQUEST_LOG_H_
#define KERNTUNE_SERVER_REQUEST_LOG_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/log.h"
#include "server/peer_credentials.h"

namespace kt::server {

struct RequestLogOptions {
  // Full lines per caller and status code in a window. A client that gets
  // a request wrong usually repeats it; five show the pattern.
  int lines_per_caller = 5;
  // Full lines of all callers together in a window.
  int lines_in_total = 50;
  absl::Duration window = absl::Seconds(10);
  // Callers x codes counted at once; failures of further ones are counted
  // under "other callers".
  int max_keys = 256;
};

class RequestLog {
 public:
  using Sink = std::function<void(LogLevel, absl::string_view)>;

  // `sink` receives every line (kerntuned: Log).
  explicit RequestLog(Sink sink, RequestLogOptions options = {});
  // Sums up what is still counted.
  ~RequestLog();

  RequestLog(const RequestLog&) = delete;
  RequestLog& operator=(const RequestLog&) = delete;

  // One failed call: `rpc` ("Run"), who made it (`caller`: "pid 4242 (uid
  // 1000)", or a TCP peer) and why. Logged in full, or counted.
  void Failed(absl::string_view rpc, absl::string_view caller, const absl::Status& status,
              absl::Time now);

  // Sums up every count whose window has ended by `now` (call it every
  // second or so), and forgets idle callers.
  void Flush(absl::Time now);
  // Sums up every count now, ended or not (shutdown).
  void FlushAll(absl::Time now);

 private:
  struct Counts {
    absl::Time window_start;
    int64_t logged = 0;      // full lines in the window
    int64_t suppressed = 0;  // counted only
    std::string last;        // the last counted failure: "Run: <message>"
  };
  using Key = std::pair<std::string, absl::StatusCode>;  // caller, code

  void Summarize(const Key& key, Counts& counts, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Sink sink_;
  const RequestLogOptions options_;
  absl::Mutex mu_;
  absl::flat_hash_map<Key, Counts> counts_ ABSL_GUARDED_BY(mu_);
  // The total budget's window.
  absl::Time total_window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t total_logged_ ABSL_GUARDED_BY(mu_) = 0;
};

// The caller of a request as the log names it: "pid 4242 (uid 1000)" for
// a Unix-socket peer (`process` set), else gRPC's peer string without its
// port ("ipv4:10.0.0.7"), so one TCP client's connections count together.
std::string DescribeCaller(absl::string_view grpc_peer, const std::optional<PeerProcess>& process);

// 1240 -> "1,240".
std::string WithThousands(int64_t value);

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_REQUEST_LOG_H_
