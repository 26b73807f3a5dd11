// Verb-aware command-line parsing over Abseil's flag registry.
#include "client/cli_args.h"

#include <algorithm>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kt::client {

absl::StatusOr<SplitCommandLine> SplitArgs(absl::Span<char* const> args) {
  SplitCommandLine split;
  bool only_words = false;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (only_words || arg.size() < 2 || arg[0] != '-') {
      if (arg == "help" && split.words.empty()) {
        split.help = true;
      } else {
        split.words.push_back(arg);
      }
      continue;
    }
    if (arg == "--") {
      only_words = true;
      continue;
    }
    absl::string_view body = arg;
    body.remove_prefix(absl::StartsWith(body, "--") ? 2 : 1);
    if (body == "help" || body == "h") {
      split.help = true;
      continue;
    }
    if (body == "version") {
      split.version = true;
      continue;
    }
    RawFlag flag;
    flag.text = arg;
    const size_t equals = body.find('=');
    const bool has_value = equals != absl::string_view::npos;
    flag.name = std::string(body.substr(0, equals));
    // --mask-rows is --mask_rows: flag names are identifiers.
    std::replace(flag.name.begin(), flag.name.end(), '-', '_');
    absl::CommandLineFlag* defined = absl::FindCommandLineFlag(flag.name);
    if (has_value) {
      flag.value = std::string(body.substr(equals + 1));
    } else if (defined != nullptr && defined->IsOfType<bool>()) {
      flag.value = "true";
    } else if (defined == nullptr && absl::StartsWith(flag.name, "no") &&
               absl::FindCommandLineFlag(flag.name.substr(2)) != nullptr &&
               absl::FindCommandLineFlag(flag.name.substr(2))->IsOfType<bool>()) {
      flag.name = flag.name.substr(2);
      flag.value = "false";
      defined = absl::FindCommandLineFlag(flag.name);
    } else if (defined != nullptr) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(arg, " needs a value (", arg, "=VALUE)"));
      }
      flag.value = args[++i];
      flag.text = absl::StrCat(arg, " ", flag.value);
    }
    if (defined == nullptr) {
      split.unknown.push_back(flag.name);
      continue;
    }
    split.flags.push_back(std::move(flag));
  }
  return split;
}

absl::Status ApplyFlags(const std::vector<RawFlag>& flags,
                        const std::vector<std::string>& allowed,
                        const std::string& verb) {
  for (const RawFlag& flag : flags) {
    if (std::find(allowed.begin(), allowed.end(), flag.name) == allowed.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag.name, " is not a flag of `kerntune ", verb, "`",
          allowed.empty() ? std::string(" (it takes none)")
                          : absl::StrCat(" (it takes --",
                                         absl::StrJoin(allowed, ", --"), ")")));
    }
    absl::CommandLineFlag* defined = absl::FindCommandLineFlag(flag.name);
    std::string error;
    if (defined == nullptr || !defined->ParseFrom(flag.value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag.text, ": ", error.empty() ? "bad value" : error));
    }
  }
  return absl::OkStatus();
}

}  // namespace kt::client
