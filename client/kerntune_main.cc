// kerntune: the command-line tool. The flags are defined and read here and
// handed to each verb as its Options struct; the verbs live in their own
// files (demo.h, gpus_cli.h, configs_cli.h, tune_cli.h, run_cli.h,
// status_cli.h) and never read flags.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli_args.h"
#include "client/cli_common.h"
#include "client/configs_cli.h"
#include "client/demo.h"
#include "client/gpus_cli.h"
#include "client/output_format.h"
#include "client/run_cli.h"
#include "client/status_cli.h"
#include "client/tune_cli.h"
#include "absl/strings/numbers.h"
#include "kernels/types.h"
#include "proto/command_line.h"
#include "proto/shipped_configs.h"

ABSL_FLAG(std::string, db, "",
          "the tuning store; default $KERNTUNE_DB, else $XDG_DATA_HOME/kerntune/tuning.db, else "
          "~/.local/share/kerntune/tuning.db");
ABSL_FLAG(std::string, configs, "",
          "the directory of shipped tuned-config files (*.json, one per GPU "
          "SKU) the daemon serves after the store's entries; default <kerntune's "
          "directory>/../share/kerntune/configs, else the source tree's deploy/configs");
ABSL_FLAG(std::string, format, "table",
          "table (for people), json (one document) or csv (header row)");
ABSL_FLAG(std::optional<std::string>, gpu, std::nullopt,
          "GPU id (`kerntune gpus`) or a case-insensitive substring of its name");
ABSL_FLAG(std::optional<std::string>, op, std::nullopt,
          "softmax, log_softmax, layer_norm, rms_norm, reduce_scale or scaled_masked_softmax");
ABSL_FLAG(std::optional<std::string>, dtype, std::nullopt,
          "float32, float16 or bfloat16 (also fp32, fp16, bf16)");
// Strings so that `tune` can take lists; every other verb takes one integer
// (checked in Dispatch).
ABSL_FLAG(std::optional<std::string>, rows, std::nullopt,
          "rows of the (rows, cols) input, >= 1");
ABSL_FLAG(std::optional<std::string>, cols, std::nullopt,
          "cols of the (rows, cols) input, the reduced axis, >= 1");
ABSL_FLAG(std::optional<std::string>, inner, std::nullopt,
          "the trailing extent of a (rows, cols, inner) input reduced along its middle axis "
          "cols: softmax and log_softmax along any axis of a contiguous tensor (rows = the "
          "product of the sizes before the axis, cols = its size, inner = the product after "
          "it); 1 is the last axis");
ABSL_FLAG(std::string, ops,
          "softmax,log_softmax,layer_norm,rms_norm,reduce_scale,scaled_masked_softmax",
          "tune: ops to tune (each in the groups of its kind: see --groups)");
ABSL_FLAG(std::string, dtypes, "float32,float16,bfloat16", "tune: dtypes to tune");
ABSL_FLAG(std::string, groups, "main,few_rows,attention,axis,llm",
          "tune: groups of the standard grid: main (rows 49152, cols 32..32768) and few_rows "
          "(rows 1, 8, 64; cols 4096..131072) for the row ops; attention ((32*64*s, s), s in "
          "16..512) for softmax and scaled_masked_softmax (an (s, s) mask); axis (seed 001's "
          "middle-axis shapes (1, 128, 32768) and (512, 896, 48)) for softmax and log_softmax; "
          "llm: softmax and log_softmax over logits (rows 1, 16, 2048; vocab 32000, 50257, "
          "128256, 151936) and layer_norm and rms_norm over hidden states (rows 1, 64, 8192; "
          "hidden 4096, 5120, 8192, 12288)");
ABSL_FLAG(bool, force, false,
          "tune: re-measure points the store already has for this GPU and kernel version");
ABSL_FLAG(std::string, devices, "all",
          "tune: the GPUs to tune on, all at once: all (every visible GPU) or a comma list of "
          "CUDA ordinals and GPU UUIDs (GPU-..., or a unique prefix of 8+ hex digits). GPUs of "
          "one model share its grid, each point measured on one of them; each model gets the "
          "whole grid");
ABSL_FLAG(int, device, 0, "run --via=ipc: this process's device to allocate on");
ABSL_FLAG(std::string, daemon_device, "",
          "run: the daemon's GPU to run on, by its ordinal, UUID or UUID prefix (kerntune "
          "status lists them); default: the least-loaded one for inline and shm, and for ipc "
          "the daemon's device with --device's UUID, whatever each CUDA_VISIBLE_DEVICES");
ABSL_FLAG(int, reps, 30, "tune: timed repetitions per candidate (median kept)");
ABSL_FLAG(bool, served, false,
          "tune: instead of a grid, the problems the running kerntuned (--server) served "
          "without a tuned entry for exactly them, on this machine's GPU models, into the store "
          "the daemon reads (--ops and --dtypes filter them)");
ABSL_FLAG(bool, dry_run, false,
          "tune --served: list the problems it would tune, with their Runs, when last served "
          "and the config source they got, and tune nothing (on a machine without a GPU: those "
          "of every GPU model the daemon serves)");
ABSL_FLAG(bool, cpu, false, "use the CPU reference backend even if a GPU is present");
ABSL_FLAG(bool, wide, false,
          "configs list: every column (GPU id, rows, cols, inner, split, GB/s, the heuristic, "
          "graph replay, kernel version, what is served), over 200 characters wide; the "
          "default table fits 120");
ABSL_FLAG(bool, candidates, false,
          "also list every candidate measured for the point");
ABSL_FLAG(std::string, server, "",
          "the kerntuned to talk to: unix:PATH (or a path), or host:port; default "
          "$XDG_RUNTIME_DIR/kerntune.sock, else /run/kerntune/kerntune.sock");
ABSL_FLAG(std::string, tls_ca, "",
          "a --server=host:port that speaks TLS: PEM file of the CAs that sign its certificate "
          "(which must name the host: IP or DNS subject alternative name)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate (chain), for a kerntuned with --tls_client_ca; with --tls_key");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, token_file, "",
          "a file holding the bearer token of a kerntuned with --token_file, sent with every "
          "call (over TLS only: with --tls_ca)");
ABSL_FLAG(std::string, via, "auto",
          "how tensors reach the daemon: auto (ipc with a GPU here and a GPU daemon, else "
          "inline), ipc (registered cudaMalloc memory), shm (registered POSIX shared "
          "memory) or inline (bytes in the messages)");
ABSL_FLAG(int, iterations, 10, "run: Runs to time (medians reported; the last is checked)");
ABSL_FLAG(std::optional<double>, epsilon, std::nullopt,
          "the epsilon of the norms (layer_norm, rms_norm and their add / quant forms; default "
          "1e-5); the other ops take none");
ABSL_FLAG(bool, mask, false,
          "run scaled_masked_softmax: send an additive random (mask_rows, cols) mask, 1 in 8 "
          "entries -inf");
ABSL_FLAG(bool, causal, false,
          "run scaled_masked_softmax: the causal mask (column c of query q masked when c > q)");
ABSL_FLAG(std::optional<double>, scale, std::nullopt,
          "run scaled_masked_softmax: x is multiplied by it before the mask (default "
          "1/sqrt(cols))");
ABSL_FLAG(std::optional<int64_t>, mask_rows, std::nullopt,
          "run scaled_masked_softmax: the query length q (rows = batch x heads x q); default "
          "the largest divisor of --rows that is <= --cols");
ABSL_FLAG(std::optional<double>, weight_offset, std::nullopt,
          "run the rms_norm family: y = x_hat * (weight_offset + weight) (Gemma: 1)");
ABSL_FLAG(std::optional<std::string>, quant_dtype, std::nullopt,
          "run a *_quant op: the codes, fp8_e4m3 (default), fp8_e5m2 or int8");
ABSL_FLAG(std::optional<std::string>, scale_mode, std::nullopt,
          "run a *_quant op: per_row (default: each row's max |y| / qmax), per_group (one scale "
          "per --group_size elements of a row) or static (--quant_scale)");
ABSL_FLAG(std::optional<int64_t>, group_size, std::nullopt,
          "run a *_quant op with --scale_mode=per_group: 64 or 128 (default), dividing --cols");
ABSL_FLAG(std::optional<double>, scale_ub, std::nullopt,
          "run a *_quant op with a dynamic scale: the bound on max |y| (default none)");
ABSL_FLAG(std::optional<double>, quant_scale, std::nullopt,
          "run a *_quant op with --scale_mode=static: the scale, y ~= code * scale (default "
          "the problem's largest per-row max |y| / the code type's max)");
ABSL_FLAG(std::optional<int64_t>, row_stride, std::nullopt,
          "run a last-axis op on strided rows: row r of the input and output starts r * "
          "row_stride elements in (>= --cols; the residual's too when there are no groups)");
ABSL_FLAG(std::optional<int64_t>, group_rows, std::nullopt,
          "run rms_norm on rows in groups (QK-norm: the heads of a token): rows per group, "
          "dividing --rows; with --group_stride");
ABSL_FLAG(std::optional<int64_t>, group_stride, std::nullopt,
          "run on rows in groups: elements between the first rows of two groups (QK-norm of "
          "[tokens, 3, heads, head_dim]: 3 * heads * head_dim)");

namespace {

using kt::client::kExitOk;
using kt::client::kExitUsage;

// A verb: its words, what it does, the flags it takes (those it requires
// among them), what a flag means for this verb beyond its own help (a
// default, a list), and how many positional arguments follow its words.
struct Verb {
  std::vector<std::string> words;
  std::string args;  // positional arguments, for the usage line
  std::string summary;
  std::vector<std::string> flags;
  size_t positional = 0;
  int (*run)(const std::vector<std::string>& positional);
  std::vector<std::string> required = {};
  std::map<std::string, std::string> notes = {};
};

// --format, already checked by Dispatch.
kt::client::OutputFormat FormatFlag() {
  return kt::client::ParseOutputFormat(absl::GetFlag(FLAGS_format))
      .value_or(kt::client::OutputFormat::kTable);
}

// The command line, recorded with tuning runs.
std::string g_command_line;

// Comma-separated integers (one, for verbs other than tune).
absl::StatusOr<std::vector<int64_t>> ParseIntList(absl::string_view name,
                                                  absl::string_view text) {
  std::vector<int64_t> values;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(item, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "=", text, ": \"", item, "\" is not an integer"));
    }
    values.push_back(value);
  }
  return values;
}

// --rows / --cols as one integer (checked by CheckShapeFlags first).
std::optional<int64_t> SingleIntFlag(const std::optional<std::string>& flag) {
  if (!flag) return std::nullopt;
  int64_t value = 0;
  return absl::SimpleAtoi(*flag, &value) ? std::optional<int64_t>(value) : std::nullopt;
}

absl::Status CheckShapeFlags(bool lists_allowed) {
  for (const auto& [name, flag] :
       {std::pair<const char*, std::optional<std::string>>{"rows", absl::GetFlag(FLAGS_rows)},
        {"cols", absl::GetFlag(FLAGS_cols)},
        {"inner", absl::GetFlag(FLAGS_inner)}}) {
    if (!flag) continue;
    absl::StatusOr<std::vector<int64_t>> values = ParseIntList(name, *flag);
    if (!values.ok()) return values.status();
    if (!lists_allowed && values->size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "=", *flag, " must be one integer for this verb"));
    }
  }
  return absl::OkStatus();
}

kt::client::PointFlags PointFlags() {
  return {absl::GetFlag(FLAGS_gpu),
          absl::GetFlag(FLAGS_op),
          absl::GetFlag(FLAGS_dtype),
          SingleIntFlag(absl::GetFlag(FLAGS_rows)),
          SingleIntFlag(absl::GetFlag(FLAGS_cols)),
          SingleIntFlag(absl::GetFlag(FLAGS_inner))};
}

int Demo(const std::vector<std::string>&) {
  kt::client::DemoOptions o;
  absl::StatusOr<kt::kernels::Op> op =
      kt::kernels::ParseOp(absl::GetFlag(FLAGS_op).value_or("softmax"));
  absl::StatusOr<kt::kernels::DType> dtype =
      kt::kernels::ParseDType(absl::GetFlag(FLAGS_dtype).value_or("float16"));
  if (!op.ok() || !dtype.ok()) {
    std::cerr << "kerntune: "
              << (!op.ok() ? op.status() : dtype.status()).ToString() << "\n";
    return kExitUsage;
  }
  o.op = *op;
  o.dtype = *dtype;
  o.shape = {SingleIntFlag(absl::GetFlag(FLAGS_rows)).value_or(4096),
             SingleIntFlag(absl::GetFlag(FLAGS_cols)).value_or(1024)};
  if (o.shape.rows < 1 || o.shape.cols < 1) {
    std::cerr << "kerntune: --rows and --cols must be >= 1\n";
    return kExitUsage;
  }
  o.force_cpu = absl::GetFlag(FLAGS_cpu);
  const absl::Status status = kt::client::RunDemo(o);
  if (!status.ok()) {
    std::cerr << "kerntune demo: " << status.ToString() << "\n";
    return kt::client::kExitFailure;
  }
  return kExitOk;
}

int Gpus(const std::vector<std::string>&) {
  return kt::client::RunGpus({absl::GetFlag(FLAGS_db), FormatFlag()}, std::cout,
                             std::cerr);
}

// --configs, or where kerntuned looks by default.
std::string ShippedConfigDir() {
  const std::string dir = absl::GetFlag(FLAGS_configs);
  return dir.empty() ? kt::proto::DefaultShippedConfigDir() : dir;
}

int ConfigsList(const std::vector<std::string>&) {
  return kt::client::RunConfigsList({absl::GetFlag(FLAGS_db), FormatFlag(), PointFlags(),
                                     ShippedConfigDir(), absl::GetFlag(FLAGS_wide)},
                                    std::cout, std::cerr);
}

int ConfigsShow(const std::vector<std::string>&) {
  return kt::client::RunConfigsShow({absl::GetFlag(FLAGS_db), FormatFlag(), PointFlags(),
                                     absl::GetFlag(FLAGS_candidates), ShippedConfigDir()},
                                    std::cout, std::cerr);
}

int ConfigsExport(const std::vector<std::string>&) {
  kt::client::ConfigsExportOptions options;
  options.db_path = absl::GetFlag(FLAGS_db);
  options.filter = PointFlags();
  options.configs_dir = ShippedConfigDir();
  return kt::client::RunConfigsExport(options, std::cout, std::cerr);
}

int ConfigsImport(const std::vector<std::string>& positional) {
  return kt::client::RunConfigsImport(
      {absl::GetFlag(FLAGS_db), FormatFlag(), positional.front()}, std::cout, std::cerr);
}

// --tls_ca, --tls_cert, --tls_key, --token_file.
kt::client::TcpCredentialFiles TcpCredentialFlags() {
  return {absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert),
          absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_token_file)};
}

int Tune(const std::vector<std::string>&) {
  kt::client::TuneCliOptions o;
  o.db_path = absl::GetFlag(FLAGS_db);
  absl::StatusOr<std::vector<kt::kernels::Op>> ops =
      kt::kernels::ParseOpList(absl::GetFlag(FLAGS_ops));
  absl::StatusOr<std::vector<kt::kernels::DType>> dtypes =
      kt::kernels::ParseDTypeList(absl::GetFlag(FLAGS_dtypes));
  for (const absl::Status& s : {ops.status(), dtypes.status()}) {
    if (!s.ok()) {
      std::cerr << "kerntune tune: " << s.message() << "\n";
      return kExitUsage;
    }
  }
  o.ops = *ops;
  o.dtypes = *dtypes;
  o.groups = absl::StrSplit(absl::GetFlag(FLAGS_groups), ',', absl::SkipEmpty());
  // CheckShapeFlags has already parsed these.
  if (absl::GetFlag(FLAGS_rows)) o.rows = *ParseIntList("rows", *absl::GetFlag(FLAGS_rows));
  if (absl::GetFlag(FLAGS_cols)) o.cols = *ParseIntList("cols", *absl::GetFlag(FLAGS_cols));
  if (absl::GetFlag(FLAGS_inner)) {
    o.inner = *ParseIntList("inner", *absl::GetFlag(FLAGS_inner));
  }
  o.force = absl::GetFlag(FLAGS_force);
  o.devices = absl::GetFlag(FLAGS_devices);
  o.repetitions = absl::GetFlag(FLAGS_reps);
  if (o.repetitions < 1) {
    std::cerr << "kerntune tune: --reps=" << o.repetitions << " must be >= 1\n";
    return kExitUsage;
  }
  o.command_line = g_command_line;
  o.served = absl::GetFlag(FLAGS_served);
  o.dry_run = absl::GetFlag(FLAGS_dry_run);
  o.server = absl::GetFlag(FLAGS_server);
  o.tcp = TcpCredentialFlags();
  if (const absl::CommandLineFlag* groups = absl::FindCommandLineFlag("groups");
      o.served && groups->CurrentValue() != groups->DefaultValue()) {
    std::cerr << "kerntune tune: --served tunes the problems the daemon served; it takes no "
                 "--groups\n";
    return kExitUsage;
  }
  return kt::client::RunTuneCommand(o, std::cout, std::cerr);
}

int RunVerb(const std::vector<std::string>& positional) {
  kt::client::RunCliOptions o;
  o.server = absl::GetFlag(FLAGS_server);
  o.tcp = TcpCredentialFlags();
  o.op = positional.front();
  o.dtype = absl::GetFlag(FLAGS_dtype);
  o.rows = SingleIntFlag(absl::GetFlag(FLAGS_rows));
  o.cols = SingleIntFlag(absl::GetFlag(FLAGS_cols));
  o.inner = SingleIntFlag(absl::GetFlag(FLAGS_inner));
  o.via = absl::GetFlag(FLAGS_via);
  o.iterations = absl::GetFlag(FLAGS_iterations);
  o.epsilon = absl::GetFlag(FLAGS_epsilon);
  o.mask = absl::GetFlag(FLAGS_mask);
  o.causal = absl::GetFlag(FLAGS_causal);
  o.scale = absl::GetFlag(FLAGS_scale);
  o.mask_rows = absl::GetFlag(FLAGS_mask_rows);
  o.weight_offset = absl::GetFlag(FLAGS_weight_offset);
  o.quant_dtype = absl::GetFlag(FLAGS_quant_dtype);
  o.scale_mode = absl::GetFlag(FLAGS_scale_mode);
  o.group_size = absl::GetFlag(FLAGS_group_size);
  o.scale_ub = absl::GetFlag(FLAGS_scale_ub);
  o.quant_scale = absl::GetFlag(FLAGS_quant_scale);
  o.row_stride = absl::GetFlag(FLAGS_row_stride);
  o.group_rows = absl::GetFlag(FLAGS_group_rows);
  o.group_stride = absl::GetFlag(FLAGS_group_stride);
  o.device = absl::GetFlag(FLAGS_device);
  o.daemon_device = absl::GetFlag(FLAGS_daemon_device);
  o.format = FormatFlag();
  return kt::client::RunRunCommand(o, std::cout, std::cerr);
}

int Status(const std::vector<std::string>&) {
  kt::client::StatusCliOptions o;
  o.server = absl::GetFlag(FLAGS_server);
  o.tcp = TcpCredentialFlags();
  o.format = FormatFlag();
  return kt::client::RunStatusCommand(o, std::cout, std::cerr);
}

// --db of the verbs that only read the store.
constexpr char kReadOnlyDb[] =
    "never created: a store named here or by $KERNTUNE_DB must exist; a missing default one "
    "reads as empty";

const std::vector<Verb>& Verbs() {
  static const std::vector<Verb> verbs = {
      {{"demo"}, "",
       "run one op on random data on this machine (GPU with the heuristic "
       "config, else the CPU reference backend) and check it",
       {"op", "dtype", "rows", "cols", "cpu"}, 0, Demo, {},
       {{"op", "default softmax"},
        {"dtype", "default float16"},
        {"rows", "default 4096"},
        {"cols", "default 1024"}}},
      {{"tune"}, "",
       "tune on this machine's GPUs (every visible one at once, or --devices): every "
       "config of every point of the standard grid (or --rows x --cols [x --inner]), "
       "checked against the fp64 reference and timed; results go to the tuning store. "
       "Interrupted runs resume where they stopped. With --served, the problems the running "
       "kerntuned served untuned instead (--dry_run lists them). Exit 130 when interrupted by "
       "Ctrl-C",
       {"db", "ops", "dtypes", "groups", "rows", "cols", "inner", "force", "devices", "reps",
        "served", "dry_run", "server", "tls_ca", "tls_cert", "tls_key", "token_file"},
       0, Tune, {},
       {{"db", "created when missing; with --served, default the store the daemon reads"},
        {"server", "--served only"},
        {"rows", "a comma list; with --cols (and --inner), instead of the standard grid"},
        {"cols", "a comma list"},
        {"inner", "a comma list"},
        {"devices", "default all"}}},
      {{"gpus"}, "", "GPU SKUs in the tuning store, with counts of runs, "
       "best configs and candidates",
       {"db", "format"}, 0, Gpus, {}, {{"db", kReadOnlyDb}}},
      {{"configs", "list"}, "",
       "the chosen config of every tuned point, local and shipped: time, GB/s, % of copy, "
       "the heuristic and the speedup over it, kernel version (stale marked), and what the "
       "daemon serves at the point (tuned, shipped, nearest_tuned, heuristic)",
       {"db", "configs", "format", "gpu", "op", "dtype", "rows", "cols", "inner", "wide"}, 0,
       ConfigsList, {},
       {{"db", kReadOnlyDb},
        {"gpu", "a filter"},
        {"op", "a filter"},
        {"dtype", "a filter"},
        {"rows", "a filter"},
        {"cols", "a filter"},
        {"inner", "a filter"}}},
      {{"configs", "show"}, "",
       "the config the daemon would launch for one point and its source (tuned, shipped, "
       "nearest tuned, heuristic), with the store's entry there; with --candidates every "
       "config measured for it, fastest first (why this config)",
       {"db", "configs", "format", "gpu", "op", "dtype", "rows", "cols", "inner", "candidates"},
       0, ConfigsShow, {"op", "dtype", "rows", "cols"},
       {{"db", kReadOnlyDb},
        {"gpu", "needed when several GPUs have the point"},
        {"inner", "default 1"}}},
      {{"configs", "export"}, "",
       "write one GPU SKU's tuned configs to standard output as a versioned "
       "JSON file (client/README.md): at each point the entry the daemon serves, the store's, "
       "else the shipped file's; stderr says how many came from each",
       {"db", "configs", "gpu", "op", "dtype", "rows", "cols", "inner"}, 0, ConfigsExport, {},
       {{"db", kReadOnlyDb},
        {"gpu", "the one SKU to export; may be left out when the store holds one GPU, or "
                "nothing but one SKU is known"},
        {"op", "a filter"},
        {"dtype", "a filter"},
        {"rows", "a filter"},
        {"cols", "a filter"},
        {"inner", "a filter"}}},
      {{"configs", "import"}, "FILE",
       "import a file written by `configs export` (FILE - = standard input); "
       "every entry is checked, bad ones are skipped and reported. Exit 0: "
       "all imported, 1: some skipped, 2: unreadable file",
       {"db", "format"}, 1, ConfigsImport, {}, {{"db", "created when missing"}}},
      {{"run"}, "OP",
       "send one random OP (softmax, log_softmax, layer_norm, rms_norm, reduce_scale, "
       "scaled_masked_softmax, add_rms_norm, add_layer_norm, rms_norm_quant, layer_norm_quant, "
       "add_rms_norm_quant, add_layer_norm_quant) problem to a running kerntuned, check every "
       "output (the residual written back, quantized codes and scales too) against the fp64 "
       "reference, and print the config it used with its source (tuned, shipped, "
       "nearest_tuned, heuristic, cpu), the kernel time and the round-trip time. Exit 1 on a "
       "mismatch or a failed call",
       {"server", "dtype", "rows", "cols", "inner", "via", "iterations", "epsilon", "mask",
        "causal", "scale", "mask_rows", "weight_offset", "quant_dtype", "scale_mode",
        "group_size", "scale_ub", "quant_scale", "row_stride", "group_rows", "group_stride",
        "device", "daemon_device", "format", "tls_ca", "tls_cert", "tls_key", "token_file"},
       1, RunVerb, {"dtype", "rows", "cols"},
       {{"inner", "default 1; > 1 for softmax and log_softmax only"},
        {"device", "--via=ipc: the device to allocate on"}}},
      {{"status"}, "",
       "what a running kerntuned reports: version, backend and why, every device with its "
       "health, tuned entries, buffers and Runs, store, registered buffers and owners, CUDA "
       "IPC mappings, uptime",
       {"server", "format", "tls_ca", "tls_cert", "tls_key", "token_file"}, 0, Status},
  };
  return verbs;
}

std::string VerbName(const Verb& verb) { return absl::StrJoin(verb.words, " "); }

// `text` wrapped at 78 columns, every line indented by `indent` spaces.
std::string Wrap(absl::string_view text, size_t indent) {
  std::string wrapped;
  std::string line(indent, ' ');
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line.size() > indent && line.size() + 1 + word.size() > 78) {
      absl::StrAppend(&wrapped, line, "\n");
      line.assign(indent, ' ');
    }
    absl::StrAppend(&line, line.size() > indent ? " " : "", word);
  }
  return absl::StrCat(wrapped, line, "\n");
}

bool IsRequired(const Verb& verb, const std::string& flag) {
  return std::find(verb.required.begin(), verb.required.end(), flag) != verb.required.end();
}

// One flag of `verb` for its --help: required or its default, its help,
// and what it means for this verb.
std::string FlagHelp(const Verb& verb, const std::string& name) {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr) return "";
  std::string help = flag->Help();
  if (const auto note = verb.notes.find(name); note != verb.notes.end()) {
    absl::StrAppend(&help, "; ", VerbName(verb), ": ", note->second);
  }
  const std::string default_value = flag->DefaultValue();
  std::string heading = absl::StrCat("  --", name);
  if (IsRequired(verb, name)) {
    absl::StrAppend(&heading, " (required)");
  } else if (!default_value.empty() && default_value != "false") {
    absl::StrAppend(&heading, " (default ", default_value, ")");
  }
  return absl::StrCat(heading, "\n", Wrap(help, 6));
}

// The verbs whose words start with `prefix`, with their flags when only one.
std::string Usage(const std::vector<std::string>& prefix) {
  std::string usage = "usage: kerntune <verb> [flags]\n\nverbs:\n";
  std::vector<const Verb*> shown;
  for (const Verb& verb : Verbs()) {
    if (verb.words.size() >= prefix.size() &&
        std::equal(prefix.begin(), prefix.end(), verb.words.begin())) {
      shown.push_back(&verb);
    }
  }
  if (shown.empty()) {
    for (const Verb& verb : Verbs()) shown.push_back(&verb);
  }
  for (const Verb* verb : shown) {
    absl::StrAppend(&usage, "  kerntune ", VerbName(*verb),
                    verb->args.empty() ? "" : " ", verb->args);
    for (const std::string& flag : verb->required) absl::StrAppend(&usage, " --", flag);
    for (const std::string& flag : verb->flags) {
      if (!IsRequired(*verb, flag)) absl::StrAppend(&usage, " [--", flag, "]");
    }
    absl::StrAppend(&usage, "\n", Wrap(verb->summary, 6));
  }
  if (shown.size() == 1) {
    absl::StrAppend(&usage, "\nflags:\n");
    for (const std::string& name : shown.front()->flags) {
      absl::StrAppend(&usage, FlagHelp(*shown.front(), name));
    }
  }
  absl::StrAppend(&usage,
                  "\nexit codes: 0 ok, 1 failure, 2 usage error. "
                  "`kerntune <verb> --help` shows a verb's flags, `kerntune --version` the "
                  "version.\n");
  return usage;
}

int UsageError(const std::string& message, const std::vector<std::string>& prefix) {
  std::cerr << "kerntune: " << message << "\n\n" << Usage(prefix);
  return kExitUsage;
}

// A flag that is unknown, not the verb's or of a bad value: one line and
// where the verb's flags are listed, not the whole usage around a typo.
int FlagError(const std::string& message, const Verb* verb) {
  std::cerr << "kerntune: " << message << " (kerntune help"
            << (verb != nullptr ? " " + VerbName(*verb) : "") << ")\n";
  return kExitUsage;
}

// The flags to suggest for a mistyped one: the verb's, else every verb's.
std::vector<std::string> SuggestableFlags(const Verb* verb) {
  if (verb != nullptr) return verb->flags;
  std::vector<std::string> all;
  for (const Verb& each : Verbs()) all.insert(all.end(), each.flags.begin(), each.flags.end());
  return all;
}

int Dispatch(int argc, char** argv) {
  absl::StatusOr<kt::client::SplitCommandLine> split =
      kt::client::SplitArgs(absl::MakeConstSpan(argv, argc));
  if (!split.ok()) return UsageError(std::string(split.status().message()), {});
  const std::vector<std::string>& words = split->words;

  // The verb whose words are the longest prefix of `words`.
  const Verb* verb = nullptr;
  for (const Verb& candidate : Verbs()) {
    if (candidate.words.size() <= words.size() &&
        std::equal(candidate.words.begin(), candidate.words.end(), words.begin()) &&
        (verb == nullptr || candidate.words.size() > verb->words.size())) {
      verb = &candidate;
    }
  }
  if (split->help) {
    std::cout << Usage(verb != nullptr ? verb->words : words);
    return kExitOk;
  }
  if (split->version) {
    std::cout << kt::proto::VersionLine("kerntune") << "\n";
    return kExitOk;
  }
  if (!split->unknown.empty()) {
    return FlagError(kt::proto::UnknownFlagMessage(split->unknown.front(), SuggestableFlags(verb)),
                     verb);
  }
  if (words.empty()) return UsageError("no verb given", {});
  if (verb == nullptr) {
    return UsageError(absl::StrCat("unknown verb \"", absl::StrJoin(words, " "), "\""),
                      {words.front()});
  }
  const std::vector<std::string> positional(words.begin() + verb->words.size(),
                                            words.end());
  if (positional.size() > verb->positional) {
    return UsageError(absl::StrCat("unexpected argument \"", positional[verb->positional],
                                   "\" for `kerntune ", VerbName(*verb),
                                   verb->args.empty() ? "" : " ", verb->args, "`"),
                      verb->words);
  }
  if (positional.size() < verb->positional) {
    return UsageError(absl::StrCat("`kerntune ", VerbName(*verb), "` needs ", verb->args),
                      verb->words);
  }
  if (absl::Status applied =
          kt::client::ApplyFlags(split->flags, verb->flags, VerbName(*verb));
      !applied.ok()) {
    return FlagError(std::string(applied.message()), verb);
  }
  if (absl::StatusOr<kt::client::OutputFormat> format =
          kt::client::ParseOutputFormat(absl::GetFlag(FLAGS_format));
      !format.ok()) {
    return FlagError(std::string(format.status().message()), verb);
  }
  if (absl::Status s = CheckShapeFlags(/*lists_allowed=*/verb->run == &Tune); !s.ok()) {
    return FlagError(std::string(s.message()), verb);
  }
  return verb->run(positional);
}

}  // namespace

int main(int argc, char** argv) {
  g_command_line = absl::StrJoin(argv, argv + argc, " ");
  return Dispatch(argc, argv);
}
