// Naming the field that failed a parse (see parse_failure.h).
#include "proto/parse_failure.h"

#include <climits>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/wire_format_lite.h"

namespace kt::proto {
namespace {

namespace gpb = ::google::protobuf;
using gpb::internal::WireFormatLite;

// Nested messages deeper than this are left to the parser's own limit.
constexpr int kMaxDepth = 32;

// The first string field under `type` whose bytes are not UTF-8, as an
// error naming its path below `prefix`; nullopt when every one is, or when
// the wire format breaks first (`*malformed` set).
std::optional<absl::Status> FindBadString(const gpb::Descriptor& type, const std::string& prefix,
                                          gpb::io::CodedInputStream& input, int depth,
                                          bool* malformed) {
  while (true) {
    const uint32_t tag = input.ReadTag();
    if (tag == 0) {
      // The end of the bytes (or of this nested message's limit).
      *malformed = !input.ConsumedEntireMessage();
      return std::nullopt;
    }
    const gpb::FieldDescriptor* field =
        type.FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    const bool delimited =
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    if (field == nullptr || !delimited ||
        (field->type() != gpb::FieldDescriptor::TYPE_STRING &&
         field->type() != gpb::FieldDescriptor::TYPE_MESSAGE) ||
        (field->type() == gpb::FieldDescriptor::TYPE_MESSAGE && depth >= kMaxDepth)) {
      if (!WireFormatLite::SkipField(&input, tag)) {
        *malformed = true;
        return std::nullopt;
      }
      continue;
    }
    uint32_t length = 0;
    if (!input.ReadVarint32(&length)) {
      *malformed = true;
      return std::nullopt;
    }
    const std::string path = absl::StrCat(prefix, field->name());
    if (field->type() == gpb::FieldDescriptor::TYPE_STRING) {
      std::string value;
      if (!input.ReadString(&value, static_cast<int>(length))) {
        *malformed = true;
        return std::nullopt;
      }
      if (!gpb::internal::IsStructurallyValidUTF8(value.data(), static_cast<int>(value.size()))) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, " is not UTF-8 (", value.size(),
                         " bytes): string fields must be; a proto3 string "
                         "field cannot carry "
                         "raw bytes"));
      }
      continue;
    }
    const gpb::io::CodedInputStream::Limit limit = input.PushLimit(static_cast<int>(length));
    std::optional<absl::Status> found =
        FindBadString(*field->message_type(), absl::StrCat(path, "."), input, depth + 1, malformed);
    if (found || *malformed) return found;
    input.PopLimit(limit);
  }
}

}  // namespace

absl::Status DescribeParseFailure(const gpb::Descriptor& type,
                                  gpb::io::ZeroCopyInputStream& bytes) {
  gpb::io::CodedInputStream input(&bytes);
  // Inline tensors make messages far larger than protobuf's default 64 MiB
  // guard; the bytes were already received whole.
  input.SetTotalBytesLimit(INT_MAX);
  bool malformed = false;
  if (std::optional<absl::Status> found = FindBadString(type, "", input, 0, &malformed)) {
    return *found;
  }
  return absl::InvalidArgumentError(absl::StrCat("the request is not a ", type.full_name(),
                                                 " in protobuf's wire format",
                                                 malformed ? "" : " (it did not parse)"));
}

absl::Status DescribeParseFailure(const gpb::Descriptor& type, absl::string_view bytes) {
  gpb::io::ArrayInputStream stream(bytes.data(), static_cast<int>(bytes.size()));
  return DescribeParseFailure(type, stream);
}

}  // namespace kt::proto
