// Table / JSON / CSV rendering.
#include "client/output_format.h"

#include <sstream>

#include "gtest/gtest.h"

namespace kt::client {
namespace {

Table SampleTable() {
  Table table({{"name", "NAME"},
               {"time_us", "TIME US"},
               {"note", "NOTE", Visibility::kScriptsOnly},
               {"flag", "FLAG", Visibility::kTableOnly}});
  table.AddRow({Cell::Text("a,b \"quoted\""), Cell::Real(1.5), Cell::Null(),
                Cell::Bool(true)});
  table.AddRow({Cell::Text("µs"), Cell::Real(12.25, 1), Cell::Int(7),
                Cell::Bool(false)});
  return table;
}

std::string RenderToString(const Table& table, OutputFormat format) {
  std::ostringstream out;
  Render(table, format, out);
  return out.str();
}

TEST(OutputFormatTest, ParsesFormatNames) {
  EXPECT_EQ(*ParseOutputFormat("table"), OutputFormat::kTable);
  EXPECT_EQ(*ParseOutputFormat("json"), OutputFormat::kJson);
  EXPECT_EQ(*ParseOutputFormat("csv"), OutputFormat::kCsv);
  const absl::StatusOr<OutputFormat> bad = ParseOutputFormat("yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--format=yaml"), std::string::npos);
}

TEST(OutputFormatTest, TableAlignsColumnsAndHidesScriptColumns) {
  EXPECT_EQ(RenderToString(SampleTable(), OutputFormat::kTable),
            "NAME          TIME US  FLAG\n"
            "a,b \"quoted\"     1.50  yes\n"
            "µs               12.2  no\n");
}

TEST(OutputFormatTest, JsonIsOneArrayOfTypedObjects) {
  EXPECT_EQ(RenderToString(SampleTable(), OutputFormat::kJson),
            "[\n"
            "  {\"name\": \"a,b \\\"quoted\\\"\", \"time_us\": 1.5, \"note\": null},\n"
            "  {\"name\": \"µs\", \"time_us\": 12.25, \"note\": 7}\n"
            "]\n");
  EXPECT_EQ(RenderToString(Table({Column{"a", "A"}}), OutputFormat::kJson), "[]\n");
}

TEST(OutputFormatTest, CsvHasHeaderAndQuotes) {
  EXPECT_EQ(RenderToString(SampleTable(), OutputFormat::kCsv),
            "name,time_us,note\n"
            "\"a,b \"\"quoted\"\"\",1.5,\n"
            "µs,12.25,7\n");
}

TEST(OutputFormatTest, JsonNumbersRoundTrip) {
  EXPECT_EQ(JsonNumber(0.1), "0.1");
  EXPECT_EQ(JsonNumber(1.0 / 3.0), "0.3333333333333333");
  EXPECT_EQ(JsonNumber(49152), "49152");
  EXPECT_EQ(JsonNumber(1e300 * 1e300), "null");
  EXPECT_EQ(JsonQuote("a\nb\x01"), "\"a\\nb\\u0001\"");
}

}  // namespace
}  // namespace kt::client
