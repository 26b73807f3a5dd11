// The real `kerntune` binary as a subprocess: usage, exit codes, and one
// verb end to end (the verbs themselves are tested as functions).
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/types.h"
#include "kernels/version.h"
#include "tests/client/fixture.h"

namespace kt::client {
namespace {

using ::testing::HasSubstr;

struct ProcessResult {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `kerntune <args>` through the shell, merging stderr into stdout.
ProcessResult Kerntune(const std::string& args, const std::string& env = "") {
  // Braces: a redirection inside `args` applies to kerntune's stdout only.
  const std::string command =
      "{ " + env + " '" KT_KERNTUNE_BINARY "' " + args + "; } 2>&1";
  ProcessResult run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t read = 0;
  while ((read = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    run.output.append(buffer, read);
  }
  const int status = pclose(pipe);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// The README's first command runs `kerntune demo` with no arguments; on a
// machine without a GPU every op runs on the CPU reference backend.
TEST(KerntuneBinaryTest, DemoRunsEveryOpAndDTypeOnTheCpu) {
  const ProcessResult defaults = Kerntune("demo --cpu");
  EXPECT_EQ(defaults.code, 0) << defaults.output;
  EXPECT_THAT(defaults.output, HasSubstr("softmax float16 rows=4096 cols=1024"));
  for (const kernels::Op op : kernels::kAllOps) {
    for (const kernels::DType dtype : kernels::kAllDTypes) {
      const std::string args = absl::StrCat("demo --cpu --op=", kernels::OpName(op),
                                            " --dtype=", kernels::DTypeName(dtype),
                                            " --rows=96 --cols=1000");
      const ProcessResult run = Kerntune(args);
      EXPECT_EQ(run.code, 0) << args << "\n" << run.output;
      EXPECT_THAT(run.output, HasSubstr("matches the fp64 reference")) << args;
    }
  }
}

TEST(KerntuneBinaryTest, HelpListsTheVerbsAndExitsZero) {
  for (const char* args : {"--help", "help", "-h"}) {
    const ProcessResult run = Kerntune(args);
    EXPECT_EQ(run.code, 0) << args;
    EXPECT_THAT(run.output, HasSubstr("usage: kerntune <verb> [flags]"));
    for (const char* verb : {"demo", "gpus", "configs list", "configs show",
                             "configs export", "configs import FILE", "run OP",
                             "status"}) {
      EXPECT_THAT(run.output, HasSubstr(std::string("kerntune ") + verb)) << verb;
    }
  }
  const ProcessResult verb_help = Kerntune("configs show --help");
  EXPECT_EQ(verb_help.code, 0);
  EXPECT_THAT(verb_help.output, HasSubstr("--candidates\n"));
  EXPECT_THAT(verb_help.output, ::testing::Not(HasSubstr("kerntune demo")));
  EXPECT_THAT(verb_help.output,
              HasSubstr("kerntune configs show --op --dtype --rows --cols [--db]"));
  EXPECT_THAT(verb_help.output, HasSubstr("--op (required)\n"));
}

// issue 27: `run --help` did not say which flags are required and showed
// other verbs' defaults (demo's, tune's).
// `text` with every run of white space as one space: help text is wrapped.
std::string Unwrapped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const bool space = c == ' ' || c == '\n';
    if (space && !out.empty() && out.back() == ' ') continue;
    out.push_back(space ? ' ' : c);
  }
  return out;
}

TEST(KerntuneBinaryTest, RunHelpNamesTheRequiredFlagsAndOnlyItsOwnDefaults) {
  ProcessResult run = Kerntune("run --help");
  run.output = Unwrapped(run.output);
  EXPECT_EQ(run.code, 0);
  EXPECT_THAT(run.output, HasSubstr("kerntune run OP --dtype --rows --cols [--server] [--inner]"));
  for (const char* flag : {"--dtype", "--rows", "--cols"}) {
    EXPECT_THAT(run.output, HasSubstr(std::string(flag) + " (required) ")) << flag;
  }
  EXPECT_THAT(run.output, HasSubstr("--iterations (default 10) "));
  EXPECT_THAT(run.output, HasSubstr("--via (default auto) "));
  EXPECT_THAT(run.output, HasSubstr("the epsilon of the norms (layer_norm, rms_norm and their "
                                    "add / quant forms; default 1e-5)"));
  EXPECT_THAT(run.output, HasSubstr("run: default 1; > 1 for softmax and log_softmax only"));
  for (const char* other : {"demo:", "tune:", "4096", "comma list"}) {
    EXPECT_THAT(run.output, ::testing::Not(HasSubstr(other))) << other;
  }
  // demo's defaults are in demo's help.
  EXPECT_THAT(Unwrapped(Kerntune("demo --help").output), HasSubstr("demo: default 4096"));
}

TEST(KerntuneBinaryTest, UsageErrorsExitTwo) {
  const struct {
    const char* args;
    const char* message;
  } cases[] = {
      {"", "no verb given"},
      {"frobnicate", "unknown verb \"frobnicate\""},
      {"configs", "unknown verb \"configs\""},
      {"configs import", "`kerntune configs import` needs FILE"},
      {"gpus extra", "unexpected argument \"extra\" for `kerntune gpus`"},
      {"run", "`kerntune run` needs OP"},
      // issue 27: this said "takes OP".
      {"run softmax softmax", "unexpected argument \"softmax\" for `kerntune run OP`"},
  };
  for (const auto& c : cases) {
    const ProcessResult run = Kerntune(c.args);
    EXPECT_EQ(run.code, 2) << c.args << "\n" << run.output;
    EXPECT_THAT(run.output, HasSubstr(c.message)) << c.args;
    EXPECT_THAT(run.output, HasSubstr("usage: kerntune")) << c.args;
  }
}

// issue 43: a mistyped flag printed 48 lines of every verb's usage and no
// suggestion. A flag error is one line: what is wrong, the flag meant when
// it is a typo, and where the verb's flags are listed; exit 2.
TEST(KerntuneBinaryTest, AFlagErrorIsOneLineWithASuggestion) {
  const struct {
    const char* args;
    const char* line;
  } cases[] = {
      {"run softmax --rowz=5",
       "kerntune: unknown flag --rowz; did you mean --rows? (kerntune help run)"},
      {"run softmax --dtype=fp32 --rows 4 --cols=8 --iteration=3",
       "kerntune: unknown flag --iteration; did you mean --iterations? (kerntune help run)"},
      {"configs list --nonsense=1", "kerntune: unknown flag --nonsense (kerntune help configs list)"},
      {"--sever=x status", "kerntune: unknown flag --sever; did you mean --server? (kerntune help "
                           "status)"},
      {"--formt=json", "kerntune: unknown flag --formt; did you mean --format? (kerntune help)"},
      {"gpus --op=softmax",
       "kerntune: --op is not a flag of `kerntune gpus` (it takes --db, --format) (kerntune help "
       "gpus)"},
      {"configs list --rows=lots", "kerntune: --rows=lots: "},
      {"configs list --rows=1,2",
       "kerntune: --rows=1,2 must be one integer for this verb (kerntune help configs list)"},
      {"tune --cols=8,x", "kerntune: --cols=8,x: \"x\" is not an integer (kerntune help tune)"},
      {"tune --format=json", "--format is not a flag of `kerntune tune`"},
      {"tune --device=1", "--device is not a flag of `kerntune tune`"},
      {"configs list --format=xml", "--format=xml must be table, json or csv"},
  };
  for (const auto& c : cases) {
    const ProcessResult run = Kerntune(c.args);
    EXPECT_EQ(run.code, 2) << c.args << "\n" << run.output;
    EXPECT_THAT(run.output, HasSubstr(c.line)) << c.args;
    EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  }
}

// issue 43: `kerntune --version` did not exist.
TEST(KerntuneBinaryTest, VersionPrintsTheProjectAndKernelVersions) {
  for (const char* args : {"--version", "run --version"}) {
    const ProcessResult run = Kerntune(args);
    EXPECT_EQ(run.code, 0) << args;
    EXPECT_EQ(run.output, absl::StrCat("kerntune ", KT_PROJECT_VERSION, " (kernels ",
                                       kernels::kKernelLibraryVersion, ")\n"));
  }
}

// Checked before any GPU is looked for, so these hold on any machine.
TEST(KerntuneBinaryTest, TuneRefusesBadGridsBeforeTouchingAGpu) {
  const struct {
    const char* args;
    const char* message;
  } cases[] = {
      {"tune --rows=1,8", "give both --rows and --cols"},
      {"tune --ops=gelu", "op=\"gelu\" is not one of"},
      {"tune --dtypes=int8", "dtype=\"int8\" is not one of"},
      {"tune --groups=tiny", "group=\"tiny\" is not one of main, few_rows, attention"},
      {"tune --rows=0 --cols=8", "rows=0 must be >= 1"},
      {"tune --reps=0", "--reps=0 must be >= 1"},
  };
  for (const auto& c : cases) {
    const ProcessResult run = Kerntune(c.args);
    EXPECT_EQ(run.code, 2) << c.args << "\n" << run.output;
    EXPECT_THAT(run.output, HasSubstr(c.message)) << c.args;
  }
}

// With no GPU visible, whatever --devices names: exit 1 before the store is
// touched (CUDA_VISIBLE_DEVICES hides a GPU the host may have).
TEST(KerntuneBinaryTest, TuneWithoutAGpuExitsOne) {
  testing::ScopedTempDir dir;
  const std::string db = dir.File("tuning.db");
  for (const char* devices : {"", " --devices=all", " --devices=0,GPU-5b7f21c4"}) {
    const ProcessResult run =
        Kerntune(std::string("tune --db=") + db + devices, "CUDA_VISIBLE_DEVICES=");
    EXPECT_EQ(run.code, 1) << devices << "\n" << run.output;
    EXPECT_THAT(run.output, HasSubstr("kerntune tune: no CUDA device found: tuning needs a GPU"))
        << devices;
  }
  struct stat st;
  EXPECT_NE(stat(db.c_str(), &st), 0) << "the store was created";
  const ProcessResult help = Kerntune("tune --help");
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.output, HasSubstr("--devices"));
  EXPECT_THAT(help.output, ::testing::Not(HasSubstr("--device\n")));
}

// issue 27: `configs list --db=/typo/x.db` created /typo and an empty store
// and reported "no tuned configs".
TEST(KerntuneBinaryTest, AMistypedDbIsAnErrorAndCreatesNothing) {
  testing::ScopedTempDir dir;
  const std::string typo = dir.File("typo/x.db");
  const ProcessResult run = Kerntune("configs list --db=" + typo);
  EXPECT_EQ(run.code, 1) << run.output;
  EXPECT_EQ(run.output, "kerntune configs list: no tuning store at " + typo +
                            ": the directory " + dir.File("typo") +
                            " does not exist (check --db; `kerntune tune` or `kerntune "
                            "configs import FILE` creates one)\n");
  struct stat info {};
  EXPECT_NE(stat(dir.File("typo").c_str(), &info), 0);
}

TEST(KerntuneBinaryTest, ListsTheFixtureAndHonoursKerntuneDb) {
  testing::ScopedTempDir dir;
  const std::string db = dir.File("tuning.db");
  ASSERT_TRUE(testing::BuildFixtureStore(db).ok());

  ProcessResult run = Kerntune("configs list --db " + db + " --gpu=a100 --format=csv");
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("gpu_id,gpu_name,op,"));
  EXPECT_THAT(run.output, HasSubstr("2,NVIDIA A100-SXM4-80GB,layer_norm,float32,"));

  run = Kerntune("gpus --format=json", "KERNTUNE_DB='" + db + "'");
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("\"name\": \"NVIDIA H100 80GB HBM3\""));

  run = Kerntune("configs show --db=" + db +
                 " --op=softmax --dtype=float16 --rows=49152 --cols=4096");
  EXPECT_EQ(run.code, 2) << run.output;  // on two GPUs: --gpu needed

  // A runtime failure: an export for a GPU the store does not have.
  run = Kerntune("configs export --db=" + db + " --gpu=v100");
  EXPECT_EQ(run.code, 1) << run.output;

  // export | import through files, and the import's exit code.
  const std::string file = dir.File("h100.json");
  run = Kerntune("configs export --db=" + db + " --gpu=h100 > " + file);
  EXPECT_EQ(run.code, 0) << run.output;
  run = Kerntune("configs import " + file + " --db=" + dir.File("fresh.db"));
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("imported 4 of 4"));
  testing::WriteFile(dir.File("bad.json"), "{not json");
  run = Kerntune("configs import " + dir.File("bad.json") + " --db=" + dir.File("fresh.db"));
  EXPECT_EQ(run.code, 2) << run.output;
}

TEST(KerntuneBinaryTest, ShowNamesTheSourceOfAShippedConfig) {
  testing::ScopedTempDir dir;
  const std::string db = dir.File("tuning.db");
  ASSERT_TRUE(testing::BuildFixtureStore(db).ok());
  const std::string configs = dir.File("configs");
  ASSERT_EQ(mkdir(configs.c_str(), 0755), 0);
  ASSERT_EQ(Kerntune("configs export --db=" + db + " --gpu=h100 > " + configs + "/h100.json")
                .code,
            0);
  // No store yet at the default path: the point's config comes from the
  // shipped file, and no store is created.
  const ProcessResult run =
      Kerntune("configs show --configs=" + configs +
                   " --op=softmax --dtype=float16 --rows=49152 --cols=4096",
               "env -u KERNTUNE_DB -u XDG_DATA_HOME HOME='" + dir.File("home") + "'");
  EXPECT_EQ(run.code, 0) << run.output;
  struct stat info {};
  EXPECT_NE(stat(dir.File("home").c_str(), &info), 0) << "a store was created";
  EXPECT_THAT(run.output, HasSubstr("shipped configs only"));
  EXPECT_THAT(run.output, HasSubstr("shipped (the shipped file's entry for this point)"));
}

}  // namespace
}  // namespace kt::client
