// Rendering of the CLI's results: an aligned table for people, one JSON
// document or CSV with a header row for scripts. Verbs build a Table of typed
// cells once; the format only decides how it is written.
#ifndef KERNTUNE_CLIENT_OUTPUT_FORMAT_H_
#define KERNTUNE_CLIENT_OUTPUT_FORMAT_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kt::client {

enum class OutputFormat { kTable, kJson, kCsv };

// "label  value" lines with the values aligned: one record for people.
using LabelledLines = std::vector<std::pair<std::string, std::string>>;
void WriteLabelledLines(const LabelledLines& lines, std::ostream& out);

// "table", "json" or "csv"; InvalidArgument naming the value otherwise.
absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view name);

// One value: null (unknown / not measured), text, integer, real or boolean.
// `display` is what the table shows; scripts get the typed value.
class Cell {
 public:
  static Cell Null();
  static Cell Text(std::string value);
  static Cell Int(int64_t value);
  // Shown with `precision` decimals in tables; full precision for scripts.
  static Cell Real(double value, int precision = 2);
  static Cell Bool(bool value);
  static Cell OptionalReal(const std::optional<double>& value,
                           int precision = 2);

  // Replaces what the table shows (e.g. "79.6 GiB" for a byte count).
  Cell& ShowAs(std::string display);

  // Table text ("-" for null).
  const std::string& display() const { return display_; }
  // JSON literal: null, true, a number or a quoted string.
  std::string ToJson() const;
  // CSV field: empty for null, quoted when needed.
  std::string ToCsv() const;
  bool is_number() const;

 private:
  using Value = std::variant<std::monostate, std::string, int64_t, double, bool>;
  Cell(Value value, std::string display)
      : value_(std::move(value)), display_(std::move(display)) {}

  Value value_;
  std::string display_;
};

enum class Visibility { kAll, kTableOnly, kScriptsOnly };

struct Column {
  std::string key;    // JSON key and CSV header: snake_case
  std::string title;  // table header
  Visibility visibility = Visibility::kAll;
};

class Table {
 public:
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

  // `cells` has one entry per column, in column order.
  void AddRow(std::vector<Cell> cells);

  const std::vector<Column>& columns() const { return columns_; }
  const std::vector<std::vector<Cell>>& rows() const { return rows_; }
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<Cell>> rows_;
};

// Table: header and rows aligned (numbers right, text left), two spaces
// between columns. JSON: an array of objects, one per row. CSV: header row,
// then one line per row.
void Render(const Table& table, OutputFormat format, std::ostream& out);

// Row `row` of `table` as one JSON object (scripts' columns only).
std::string RowToJson(const Table& table, size_t row);
// Every row of `table` as a JSON array of objects.
std::string TableToJson(const Table& table);

// A JSON string literal with quotes and escapes.
std::string JsonQuote(absl::string_view text);
// Shortest decimal text that reads back as exactly `value`; "null" when not
// finite (JSON has no NaN or infinity).
std::string JsonNumber(double value);

// `text`'s width in terminal columns, counting UTF-8 code points.
size_t DisplayWidth(absl::string_view text);

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_OUTPUT_FORMAT_H_
