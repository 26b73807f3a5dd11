// Why a client's message did not parse, in the words of the field at fault.
// Protobuf 3.21 fails the whole parse of a proto3 message when a `string`
// field holds bytes that are not UTF-8, and says which field only in a log
// line; this walks the same bytes again so the refusal can name it.
#ifndef KERNTUNE_PROTO_PARSE_FAILURE_H_
#define KERNTUNE_PROTO_PARSE_FAILURE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/zero_copy_stream.h"

namespace kt::proto {

// InvalidArgument for `bytes` that failed to parse as `type`: the path of a
// string field that is not UTF-8 ("input.buffer.buffer_id is not UTF-8
// (12 bytes): string fields must be"), else that the bytes are not a
// `type` in protobuf's wire format. Call it only after a failed parse: it
// does not check what the parser checks beyond those two.
absl::Status DescribeParseFailure(const google::protobuf::Descriptor& type,
                                  google::protobuf::io::ZeroCopyInputStream& bytes);
absl::Status DescribeParseFailure(const google::protobuf::Descriptor& type,
                                  absl::string_view bytes);

}  // namespace kt::proto

#endif  // KERNTUNE_PROTO_PARSE_FAILURE_H_
