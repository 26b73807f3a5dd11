// Rate-limited log of failed requests (see request_log.h).
#include "server/request_log.h"

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kt::server {
namespace {

constexpr absl::string_view kOtherCallers = "other callers";

// Failures of the daemon itself are errors; a client's mistakes warnings.
LogLevel LevelOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
      return LogLevel::kError;
    default:
      return LogLevel::kWarning;
  }
}

// One log line per event: control characters of a client-supplied text (a
// shared-memory name, a label) are escaped, never written raw.
std::string OneLine(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", byte);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// "10 s", "2.4 s".
std::string Seconds(absl::Duration elapsed) {
  const double s = absl::ToDoubleSeconds(elapsed);
  return s >= 9.95 ? absl::StrFormat("%.0f s", s) : absl::StrFormat("%.1f s", s);
}

}  // namespace

std::string WithThousands(int64_t value) {
  const std::string digits = absl::StrCat(value < 0 ? -value : value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return value < 0 ? absl::StrCat("-", out) : out;
}

std::string DescribeCaller(absl::string_view grpc_peer,
                           const std::optional<PeerProcess>& process) {
  if (process) return process->Describe();
  // "ipv4:10.0.0.7:51234", "ipv6:[::1]:51234": the port is the connection's.
  const size_t colon = grpc_peer.rfind(':');
  const size_t scheme = grpc_peer.find(':');
  if (colon != absl::string_view::npos && colon != scheme) {
    return absl::StrCat("TCP client ", grpc_peer.substr(0, colon));
  }
  return std::string(grpc_peer.empty() ? "an unknown caller" : grpc_peer);
}

RequestLog::RequestLog(Sink sink, RequestLogOptions options)
    : sink_(std::move(sink)), options_(options) {}

RequestLog::~RequestLog() { FlushAll(absl::Now()); }

void RequestLog::Summarize(const Key& key, Counts& counts, absl::Time now) {
  if (counts.suppressed == 0) return;
  sink_(LevelOf(key.second),
        absl::StrCat(WithThousands(counts.suppressed), " more ",
                     absl::StatusCodeToString(key.second), " from ", key.first, " in the last ",
                     Seconds(now - counts.window_start), "; the last: ", counts.last));
  counts.suppressed = 0;
}

void RequestLog::Failed(absl::string_view rpc, absl::string_view caller,
                        const absl::Status& status, absl::Time now) {
  absl::MutexLock lock(&mu_);
  Key key(std::string(caller), status.code());
  if (!counts_.contains(key) && counts_.size() >= static_cast<size_t>(options_.max_keys)) {
    key.first = std::string(kOtherCallers);
  }
  auto [it, inserted] = counts_.try_emplace(key);
  Counts& counts = it->second;
  if (inserted || now - counts.window_start >= options_.window) {
    Summarize(key, counts, now);
    counts = Counts{now};
  }
  if (now - total_window_start_ >= options_.window) {
    total_window_start_ = now;
    total_logged_ = 0;
  }
  const std::string message = OneLine(status.message());
  if (counts.logged >= options_.lines_per_caller || total_logged_ >= options_.lines_in_total) {
    ++counts.suppressed;
    counts.last = absl::StrCat(rpc, ": ", message);
    return;
  }
  ++counts.logged;
  ++total_logged_;
  std::string line = absl::StrCat(rpc, " from ", caller, " failed: ",
                                  absl::StatusCodeToString(status.code()), ": ", message);
  if (counts.logged == options_.lines_per_caller) {
    absl::StrAppend(&line, " [", options_.lines_per_caller, " of this in ",
                    Seconds(options_.window), ": more are counted and summed up]");
  } else if (total_logged_ == options_.lines_in_total) {
    absl::StrAppend(&line, " [", options_.lines_in_total, " failed-request lines in ",
                    Seconds(options_.window), ": more are counted and summed up]");
  }
  sink_(LevelOf(status.code()), line);
}

void RequestLog::Flush(absl::Time now) {
  absl::MutexLock lock(&mu_);
  std::vector<Key> ended;
  for (auto& [key, counts] : counts_) {
    if (now - counts.window_start < options_.window) continue;
    Summarize(key, counts, now);
    ended.push_back(key);
  }
  for (const Key& key : ended) counts_.erase(key);
}

void RequestLog::FlushAll(absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (auto& [key, counts] : counts_) Summarize(key, counts, now);
  counts_.clear();
}

}  // namespace kt::server
