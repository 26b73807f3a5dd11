// Table / JSON / CSV rendering of the CLI's results.
#include "client/output_format.h"

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kt::client {

void WriteLabelledLines(const LabelledLines& lines, std::ostream& out) {
  size_t width = 0;
  for (const auto& line : lines) width = std::max(width, line.first.size());
  for (const auto& [label, value] : lines) {
    out << label << std::string(width - label.size() + 2, ' ') << value << "\n";
  }
}

absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view name) {
  if (name == "table") return OutputFormat::kTable;
  if (name == "json") return OutputFormat::kJson;
  if (name == "csv") return OutputFormat::kCsv;
  return absl::InvalidArgumentError(
      absl::StrCat("--format=", name, " must be table, json or csv"));
}

Cell Cell::Null() { return Cell(std::monostate{}, "-"); }

Cell Cell::Text(std::string value) {
  std::string display = value.empty() ? "-" : value;
  return Cell(std::move(value), std::move(display));
}

Cell Cell::Int(int64_t value) { return Cell(value, absl::StrCat(value)); }

Cell Cell::Real(double value, int precision) {
  if (!std::isfinite(value)) return Cell(value, absl::StrCat(value));
  return Cell(value, absl::StrFormat("%.*f", precision, value));
}

Cell Cell::Bool(bool value) { return Cell(value, value ? "yes" : "no"); }

Cell Cell::OptionalReal(const std::optional<double>& value, int precision) {
  return value.has_value() ? Real(*value, precision) : Null();
}

Cell& Cell::ShowAs(std::string display) {
  display_ = std::move(display);
  return *this;
}

bool Cell::is_number() const {
  return std::holds_alternative<int64_t>(value_) ||
         std::holds_alternative<double>(value_);
}

std::string Cell::ToJson() const {
  if (const auto* text = std::get_if<std::string>(&value_)) {
    return JsonQuote(*text);
  }
  if (const auto* integer = std::get_if<int64_t>(&value_)) {
    return absl::StrCat(*integer);
  }
  if (const auto* real = std::get_if<double>(&value_)) return JsonNumber(*real);
  if (const auto* boolean = std::get_if<bool>(&value_)) {
    return *boolean ? "true" : "false";
  }
  return "null";
}

std::string Cell::ToCsv() const {
  if (const auto* text = std::get_if<std::string>(&value_)) {
    if (text->find_first_of(",\"\r\n") == std::string::npos) return *text;
    std::string quoted = "\"";
    for (char c : *text) {
      if (c == '"') quoted += '"';
      quoted += c;
    }
    return quoted + "\"";
  }
  if (std::holds_alternative<std::monostate>(value_)) return "";
  if (const auto* real = std::get_if<double>(&value_)) {
    return std::isfinite(*real) ? JsonNumber(*real) : "";
  }
  return ToJson();  // integers and booleans read the same in both
}

void Table::AddRow(std::vector<Cell> cells) {
  cells.resize(columns_.size(), Cell::Null());
  rows_.push_back(std::move(cells));
}

namespace {

bool ForTable(const Column& column) {
  return column.visibility != Visibility::kScriptsOnly;
}
bool ForScripts(const Column& column) {
  return column.visibility != Visibility::kTableOnly;
}

void RenderText(const Table& table, std::ostream& out) {
  const std::vector<Column>& columns = table.columns();
  std::vector<size_t> widths(columns.size(), 0);
  std::vector<bool> numeric(columns.size(), true);
  for (size_t c = 0; c < columns.size(); ++c) {
    widths[c] = DisplayWidth(columns[c].title);
    for (const std::vector<Cell>& row : table.rows()) {
      widths[c] = std::max(widths[c], DisplayWidth(row[c].display()));
      if (!row[c].is_number() && row[c].display() != "-") numeric[c] = false;
    }
  }
  const auto write_line = [&](const std::vector<std::string>& texts) {
    std::string line;
    bool first = true;
    for (size_t c = 0; c < columns.size(); ++c) {
      if (!ForTable(columns[c])) continue;
      if (!first) line += "  ";
      first = false;
      const std::string padding(widths[c] - DisplayWidth(texts[c]), ' ');
      line += numeric[c] ? padding + texts[c] : texts[c] + padding;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  std::vector<std::string> texts;
  for (const Column& column : columns) texts.push_back(column.title);
  write_line(texts);
  for (const std::vector<Cell>& row : table.rows()) {
    texts.clear();
    for (const Cell& cell : row) texts.push_back(cell.display());
    write_line(texts);
  }
}

void RenderCsv(const Table& table, std::ostream& out) {
  const std::vector<Column>& columns = table.columns();
  std::string line;
  for (size_t c = 0; c < columns.size(); ++c) {
    if (!ForScripts(columns[c])) continue;
    if (!line.empty()) line += ",";
    line += columns[c].key;
  }
  out << line << "\n";
  for (const std::vector<Cell>& row : table.rows()) {
    line.clear();
    bool first = true;
    for (size_t c = 0; c < columns.size(); ++c) {
      if (!ForScripts(columns[c])) continue;
      if (!first) line += ",";
      first = false;
      line += row[c].ToCsv();
    }
    out << line << "\n";
  }
}

}  // namespace

std::string RowToJson(const Table& table, size_t row) {
  std::string json = "{";
  bool first = true;
  for (size_t c = 0; c < table.columns().size(); ++c) {
    const Column& column = table.columns()[c];
    if (!ForScripts(column)) continue;
    absl::StrAppend(&json, first ? "" : ", ", JsonQuote(column.key), ": ",
                    table.rows()[row][c].ToJson());
    first = false;
  }
  return json + "}";
}

std::string TableToJson(const Table& table) {
  if (table.empty()) return "[]";
  std::string json = "[\n";
  for (size_t r = 0; r < table.rows().size(); ++r) {
    absl::StrAppend(&json, "  ", RowToJson(table, r),
                    r + 1 < table.rows().size() ? ",\n" : "\n");
  }
  return json + "]";
}

void Render(const Table& table, OutputFormat format, std::ostream& out) {
  switch (format) {
    case OutputFormat::kTable:
      RenderText(table, out);
      return;
    case OutputFormat::kJson:
      out << TableToJson(table) << "\n";
      return;
    case OutputFormat::kCsv:
      RenderCsv(table, out);
      return;
  }
}

std::string JsonQuote(absl::string_view text) {
  std::string quoted = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        quoted += "\\\"";
        break;
      case '\\':
        quoted += "\\\\";
        break;
      case '\n':
        quoted += "\\n";
        break;
      case '\r':
        quoted += "\\r";
        break;
      case '\t':
        quoted += "\\t";
        break;
      default:
        if (c < 0x20) {
          quoted += absl::StrFormat("\\u%04x", c);
        } else {
          quoted += static_cast<char>(c);
        }
    }
  }
  return quoted + "\"";
}

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  for (int precision = 15; precision <= 17; ++precision) {
    const std::string text = absl::StrFormat("%.*g", precision, value);
    if (std::strtod(text.c_str(), nullptr) == value) return text;
  }
  return absl::StrFormat("%.17g", value);
}

size_t DisplayWidth(absl::string_view text) {
  size_t width = 0;
  for (unsigned char c : text) {
    if ((c & 0xC0) != 0x80) ++width;  // not a UTF-8 continuation byte
  }
  return width;
}

}  // namespace kt::client
