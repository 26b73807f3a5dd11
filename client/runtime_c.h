/* The in-process runtime (client/runtime.h) behind a C interface, for
 * languages that call C: the Python package kerntune.torch loads
 * libkerntune_runtime.so with ctypes. One process-wide runtime per handle;
 * every function is thread-safe. Strings are NUL-terminated; a message that
 * does not fit its buffer is cut. */
#ifndef KERNTUNE_CLIENT_RUNTIME_C_H_
#define KERNTUNE_CLIENT_RUNTIME_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kt_runtime kt_runtime;

/* One op on one set of tensors: kernels::Op / DType / RowOpArgs / OpParams
 * field for field (kernels/op_args.h says what each means). Enums are the
 * values kt_runtime_enum returns; unset pointers are NULL, unset strides 0. */
typedef struct kt_run {
  int32_t op;
  int32_t dtype;
  int64_t rows;
  int64_t cols;
  int64_t inner; /* 1: the last axis */
  /* The CUDA ordinal the operands are on, which must be the calling
   * thread's current device; -1: host memory (the fp64 reference runs). */
  int32_t device;
  void* stream; /* cudaStream_t on a device; NULL = the legacy default */
  const void* x;
  void* y;
  const void* gamma;
  const void* beta;
  const void* mask;
  float* mean;
  float* inv_std;
  float* row_scale;
  void* residual;
  const float* quant_scale;
  /* Scratch for the configs that need it: see KT_RUNTIME_NEEDS_WORKSPACE. */
  void* workspace;
  int64_t workspace_bytes;
  double epsilon;
  double scale;
  int64_t mask_rows;
  int32_t causal;
  int32_t quant_dtype;
  double weight_offset;
  int32_t scale_mode;
  /* Nonzero: batch-invariant mode (Runtime::Launch), each row's bits the
   * same at any number of rows. */
  int32_t batch_invariant;
  int64_t group_size;
  double scale_ub;
  int64_t x_row_stride;
  int64_t y_row_stride;
  int64_t residual_row_stride;
  int64_t group_rows;
  int64_t x_group_stride;
  int64_t y_group_stride;
} kt_run;

/* Return codes are absl status codes: 0 OK, 3 INVALID_ARGUMENT, 5 NOT_FOUND,
 * 9 FAILED_PRECONDITION, 13 INTERNAL, ... One more is this interface's own:
 * the chosen config needs a workspace and the run gave none; nothing was
 * launched, *workspace_bytes (kt_runtime_run) says how many bytes. */
#define KT_RUNTIME_NEEDS_WORKSPACE 8 /* absl RESOURCE_EXHAUSTED */

/* sizeof(kt_run): bindings check that they lay it out alike. */
size_t kt_runtime_run_size(void);

/* The value of an enum name: kind "op" ("rms_norm"), "dtype" ("bfloat16"),
 * "quant_dtype" ("fp8_e4m3") or "scale_mode" ("per_group"); -1 when the
 * name (or kind) is unknown. */
int32_t kt_runtime_enum(const char* kind, const char* name);

/* A runtime (RuntimeOptions): daemon_target NULL or "" = the default socket,
 * "none" = ask no daemon; db_path and configs_dir NULL or "" = the defaults;
 * refresh_seconds 0 = fetch each SKU's configs once. */
int kt_runtime_create(const char* daemon_target, const char* db_path, const char* configs_dir,
                      double refresh_seconds, kt_runtime** runtime, char* error,
                      size_t error_size);
void kt_runtime_destroy(kt_runtime* runtime);

/* Runs `run`: a launch on its stream (returning before the kernel ends), or
 * on host memory the reference. config_key (may be NULL) gets the config
 * launched ("" on the host). */
int kt_runtime_run(kt_runtime* runtime, const kt_run* run, int64_t* workspace_bytes,
                   char* config_key, size_t config_key_size, char* error, size_t error_size);

/* The config a problem (contiguous rows) gets on CUDA device `device`, in
 * batch-invariant mode when batch_invariant is nonzero, and its source
 * ("tuned", "shipped", "nearest_tuned", "heuristic"). */
int kt_runtime_choose(kt_runtime* runtime, int32_t op, int32_t dtype, int64_t rows,
                      int64_t cols, int64_t inner, int32_t batch_invariant, int32_t device,
                      char* config_key,
                      size_t config_key_size, char* source, size_t source_size, char* error,
                      size_t error_size);

/* Where device `device`'s configs come from, and any problem:
 * "daemon unix:/run/kerntune/kerntune.sock (3 tuned + 40 shipped entries)". */
int kt_runtime_describe(kt_runtime* runtime, int32_t device, char* text, size_t text_size,
                        char* error, size_t error_size);

/* Fetches every SKU's configs again now. */
void kt_runtime_refresh(kt_runtime* runtime);

#ifdef __cplusplus
}
#endif

#endif /* KERNTUNE_CLIENT_RUNTIME_C_H_ */
