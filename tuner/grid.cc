// Tuning grids (grid.h).
#include "tuner/grid.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/op_args.h"

namespace kt::tuner {
namespace {

using kernels::Op;

template <typename T>
void AddUnique(std::vector<T>& values, const T& value) {
  if (std::find(values.begin(), values.end(), value) == values.end()) values.push_back(value);
}

// The query length a custom scaled-masked softmax point gets: the largest
// divisor of rows that is at most cols (kernels::AttentionOptions' default).
int64_t DefaultQueryLength(int64_t rows, int64_t cols) {
  for (int64_t q = std::min(rows, cols); q > 1; --q) {
    if (rows % q == 0) return q;
  }
  return 1;
}

// The llm group's two kinds of problem: softmax over a vocabulary of logits,
// and the norms over a hidden state.
bool IsLogitsOp(Op op) { return op == Op::kSoftmax || op == Op::kLogSoftmax; }
bool IsHiddenNormOp(Op op) { return op == Op::kLayerNorm || op == Op::kRmsNorm; }

bool IsBasicOp(Op op) {
  return std::find(std::begin(kernels::kBasicOps), std::end(kernels::kBasicOps), op) !=
         std::end(kernels::kBasicOps);
}

bool InGroup(const std::string& group, Op op) {
  // llm_norm: the fused norms over hidden states, and rms_norm per head.
  if (group == "llm_norm") return kernels::IsFusedNorm(op) || op == Op::kRmsNorm;
  // The other groups hold the basic ops only, as before the fused norms.
  if (!IsBasicOp(op)) return false;
  if (group == "attention") return op == Op::kSoftmax || op == Op::kScaledMaskedSoftmax;
  if (group == "axis") return kernels::SupportsInnerAxis(op);
  if (group == "llm") return IsLogitsOp(op) || IsHiddenNormOp(op);
  return op != Op::kScaledMaskedSoftmax;  // main, few_rows: the row ops
}

// The llm_norm group's per-head QK-norm: q of a fused [tokens, 3, heads,
// head_dim] qkv tensor, normalized per head into a contiguous output.
constexpr int64_t kQkNormHeads = 32;
GridPoint PerHeadPoint(Op op, kernels::DType dtype, int64_t tokens, int64_t head_dim) {
  GridPoint p{"llm_norm", op, dtype, {tokens * kQkNormHeads, head_dim}};
  p.x_row_stride = head_dim;
  p.group_rows = kQkNormHeads;
  p.x_group_stride = 3 * kQkNormHeads * head_dim;
  return p;
}

}  // namespace

absl::StatusOr<std::vector<GridPoint>> StandardGrid(const std::vector<std::string>& groups,
                                                    const std::vector<kernels::Op>& ops,
                                                    const std::vector<kernels::DType>& dtypes) {
  for (const std::string& g : groups) {
    if (std::find(std::begin(kStandardGroups), std::end(kStandardGroups), g) ==
        std::end(kStandardGroups)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group=\"", g, "\" is not one of main, few_rows, attention, axis, llm, llm_norm"));
    }
  }
  const auto wants = [&](const char* g, Op op) {
    return std::find(groups.begin(), groups.end(), g) != groups.end() && InGroup(g, op);
  };
  std::vector<GridPoint> points;
  for (kernels::Op op : ops) {
    for (kernels::DType dtype : dtypes) {
      if (wants("main", op)) {
        for (int64_t cols : {32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768}) {
          points.push_back({"main", op, dtype, {49152, cols}});
        }
      }
      if (wants("few_rows", op)) {
        for (int64_t rows : {1, 8, 64}) {
          for (int64_t cols : {4096, 32768, 131072}) {
            points.push_back({"few_rows", op, dtype, {rows, cols}});
          }
        }
      }
      if (wants("attention", op)) {
        for (int64_t s : {16, 32, 64, 128, 512}) {
          GridPoint p{"attention", op, dtype, {32 * 64 * s, s}};
          if (op == Op::kScaledMaskedSoftmax) {
            p.with_mask = true;
            p.mask_rows = s;
          }
          points.push_back(p);
        }
      }
      if (wants("axis", op)) {
        // Seed 001: softmax over dim 0 of [128, 128, 16, 16] (1, 128, 32768)
        // and over dim 1 of [512, 896, 4, 12] (512, 896, 48).
        points.push_back({"axis", op, dtype, {1, 128, 32768}});
        points.push_back({"axis", op, dtype, {512, 896, 48}});
      }
      if (wants("llm", op) && IsLogitsOp(op)) {
        // Decoding (1, 16 sequences) and prefill or training (2048 tokens)
        // over the vocabularies of Llama 2 and Mistral (32000), GPT-2
        // (50257, odd), Llama 3 (128256) and Qwen2 (151936).
        for (int64_t rows : {1, 16, 2048}) {
          for (int64_t vocab : {32000, 50257, 128256, 151936}) {
            points.push_back({"llm", op, dtype, {rows, vocab}});
          }
        }
      }
      if (wants("llm", op) && IsHiddenNormOp(op)) {
        // One token, a decoding batch (64) and a prefill (8192 tokens) over
        // the hidden sizes of 7B (4096), 13B (5120), 70B (8192) and 175B-class
        // (12288) models.
        for (int64_t rows : {1, 64, 8192}) {
          for (int64_t hidden : {4096, 5120, 8192, 12288}) {
            points.push_back({"llm", op, dtype, {rows, hidden}});
          }
        }
      }
      if (wants("llm_norm", op) && kernels::IsFusedNorm(op)) {
        // One token, decoding batches (16, 64), a chunk and a prefill (8192
        // tokens) over hidden sizes 2048 (1-2B) to 16384 (405B): 7168 is
        // DeepSeek-V3's. The quantizing ops keep GridPoint's fp8 e4m3
        // per-row defaults.
        for (int64_t rows : {1, 16, 64, 512, 8192}) {
          for (int64_t hidden : {2048, 4096, 5120, 7168, 8192, 12288, 16384}) {
            points.push_back({"llm_norm", op, dtype, {rows, hidden}});
          }
        }
      }
      if (wants("llm_norm", op) && op == Op::kRmsNorm) {
        for (int64_t tokens : {1, 16, 64, 512, 8192}) {
          for (int64_t head_dim : {64, 128, 256}) {
            points.push_back(PerHeadPoint(op, dtype, tokens, head_dim));
          }
        }
      }
    }
  }
  if (points.empty() && !ops.empty() && !dtypes.empty() && !groups.empty()) {
    std::vector<std::string> op_names;
    for (Op op : ops) op_names.push_back(std::string(kernels::OpName(op)));
    return absl::InvalidArgumentError(absl::StrCat(
        "groups=", absl::StrJoin(groups, ","),
        " hold no point of ops=", absl::StrJoin(op_names, ","),
        " (main and few_rows: the basic row ops; attention: softmax and "
        "scaled_masked_softmax; axis: softmax and log_softmax; llm: those and layer_norm, "
        "rms_norm; llm_norm: the add and quant norms and rms_norm per head)"));
  }
  return points;
}

absl::StatusOr<std::vector<GridPoint>> CustomGrid(const std::vector<kernels::Op>& ops,
                                                  const std::vector<kernels::DType>& dtypes,
                                                  const std::vector<int64_t>& rows,
                                                  const std::vector<int64_t>& cols,
                                                  const std::vector<int64_t>& inner) {
  for (int64_t r : rows) {
    if (r < 1) return absl::InvalidArgumentError(absl::StrCat("rows=", r, " must be >= 1"));
  }
  for (int64_t c : cols) {
    if (c < 1) return absl::InvalidArgumentError(absl::StrCat("cols=", c, " must be >= 1"));
  }
  for (int64_t i : inner) {
    if (i < 1) return absl::InvalidArgumentError(absl::StrCat("inner=", i, " must be >= 1"));
  }
  std::vector<GridPoint> points;
  for (kernels::Op op : ops) {
    for (kernels::DType dtype : dtypes) {
      for (int64_t r : rows) {
        for (int64_t c : cols) {
          for (int64_t i : inner) {
            if (i > 1 && !kernels::SupportsInnerAxis(op)) continue;
            GridPoint p{"custom", op, dtype, {r, c, i}};
            if (op == Op::kScaledMaskedSoftmax) {
              p.with_mask = true;
              p.mask_rows = DefaultQueryLength(r, c);
            }
            points.push_back(p);
          }
        }
      }
    }
  }
  return points;
}

std::string DescribeGrid(const std::vector<GridPoint>& points) {
  std::vector<std::string> ops, dtypes, groups, quants;
  int strided = 0;
  for (const GridPoint& p : points) {
    AddUnique(ops, std::string(kernels::OpName(p.op)));
    AddUnique(dtypes, std::string(kernels::DTypeName(p.dtype)));
    AddUnique(groups, p.group);
    if (kernels::QuantizesOutput(p.op)) {
      std::string quant = absl::StrCat(kernels::QuantDTypeName(p.quant_dtype), "/",
                                       kernels::ScaleModeName(p.scale_mode));
      if (p.scale_mode == kernels::ScaleMode::kPerGroup) absl::StrAppend(&quant, p.group_size);
      AddUnique(quants, quant);
    }
    if (kernels::HasRowStrides(ParamsOf(p), p.shape)) ++strided;
  }
  std::string out =
      absl::StrCat("ops=", absl::StrJoin(ops, ","), " dtypes=", absl::StrJoin(dtypes, ","),
                   " groups=", absl::StrJoin(groups, ","), " points=", points.size());
  // Only where the grid has them, so the older grids read as they did.
  if (!quants.empty()) absl::StrAppend(&out, " quant=", absl::StrJoin(quants, ","));
  if (strided > 0) absl::StrAppend(&out, " strided_points=", strided);
  return out;
}

kernels::OpParams ParamsOf(const GridPoint& p) {
  kernels::OpParams params;
  params.causal = p.causal;
  params.mask_rows = p.with_mask || p.causal ? p.mask_rows : 0;
  if (kernels::QuantizesOutput(p.op)) {
    params.quant_dtype = p.quant_dtype;
    params.scale_mode = p.scale_mode;
    params.group_size = p.group_size;
  }
  params.x_row_stride = p.x_row_stride;
  params.y_row_stride = p.y_row_stride;
  params.group_rows = p.group_rows;
  params.x_group_stride = p.x_group_stride;
  params.y_group_stride = p.y_group_stride;
  return params;
}

std::string PointName(const GridPoint& p) {
  std::string name = absl::StrCat(kernels::OpName(p.op), " ", kernels::DTypeName(p.dtype), " ",
                                  p.shape.rows, "x", p.shape.cols);
  if (p.shape.inner != 1) absl::StrAppend(&name, "x", p.shape.inner);
  return name + PointVariant(p);
}

std::string PointVariant(const GridPoint& p) {
  std::string variant;
  if (kernels::QuantizesOutput(p.op)) {
    absl::StrAppend(&variant, " ", kernels::QuantDTypeName(p.quant_dtype), " ",
                    kernels::ScaleModeName(p.scale_mode));
    if (p.scale_mode == kernels::ScaleMode::kPerGroup) absl::StrAppend(&variant, " ", p.group_size);
  }
  for (const auto& [field, value] : {std::pair<const char*, int64_t>{"x_stride", p.x_row_stride},
                                     {"y_stride", p.y_row_stride},
                                     {"group_rows", p.group_rows},
                                     {"x_group_stride", p.x_group_stride},
                                     {"y_group_stride", p.y_group_stride}}) {
    if (value != 0) absl::StrAppend(&variant, " ", field, "=", value);
  }
  return variant;
}

bool TimedWithRowOutputs(kernels::Op op) { return op == Op::kReduceScale; }

int64_t PointBytes(const GridPoint& p) {
  // The norms read their weights (gamma, the LayerNorm family's beta): the
  // bytes PyTorch's forward moves too.
  kernels::OpParams params = ParamsOf(p);
  if (!p.with_mask) params.mask_rows = 0;  // the causal mask alone reads nothing
  return kernels::MinimumBytesMoved(p.op, p.dtype, p.shape, /*has_gamma=*/true,
                                    /*has_beta=*/true, TimedWithRowOutputs(p.op), params);
}

}  // namespace kt::tuner
