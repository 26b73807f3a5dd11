#!/usr/bin/env python3
"""PyTorch CUDA tensors through a GPU kerntuned, by CUDA IPC (label gpu).

Starts its own kerntuned (GPU backend) on a temp socket and checks, against
torch's float64 result of the same input:
  - softmax, log-softmax, LayerNorm (affine, stats to device memory) for
    float32, float16 and bfloat16 over shapes that reach every kernel;
  - the newer ops, one case each per dtype: RMSNorm (weight, 1/rms to device
    memory), ReduceScale (y and the scales), the scaled-masked softmax of
    (batch, heads, q, k) scores (an additive mask, causal, a scale) and
    softmax / log-softmax along a middle axis (seed 001's shapes);
  - an input at a non-zero storage offset (a slice of a bigger tensor) and
    out= a slice of another tensor, whose other rows must stay untouched;
  - stream mode (IPC wait/done events): the call returns before the GPU
    work, and the caller's stream orders the result;
  - a registered CUDA allocation used by buffer id;
  - freed tensors go back to torch's allocator (no IPC "limbo" leak);
  - client processes at once;
  - runs through the submission queue (the default): no gRPC Run, the bytes
    a use_queue=False client gets, stream mode, stats and scales to device
    memory, four threads on one queue;
  - every run says it ran on the tensor's own GPU (RunResult.device_uuid);
  - the fused LLM norms (llm_reference.py's float64): add + norm with the
    residual written back, weight_offset, quantized codes (torch.float8_e4m3fn,
    float8_e5m2 and int8; uint8 on a torch without float8) with static,
    per-row and per-group scales, and QK-norm of a qkv tensor's per-head
    strided views in place.
With two GPUs or more (skipped with one): tensors on cuda:0 and cuda:1 from
one process (sync, stream mode and registered, each run where its memory
is), client processes on GPU 0, GPU 1 and both at once, a run with tensors
on two GPUs refused with INVALID_ARGUMENT, NumPy runs naming a device run
there, a tensor claimed on the other GPU refused or run right over peer access.
Exits 1 on any wrong result, 77 (CTest: skipped) without torch or CUDA.

  python3 gpu_client_test.py            (CTest sets PYTHONPATH and KERNTUNED_BINARY)
  python3 <bundle>/python/tests/torch_gpu_test.py
                                        (finds <bundle>/python and <bundle>/bin/kerntuned)
"""

import argparse
import importlib
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def _import_or_skip():
    # A bundle keeps the package in <prefix>/python and this file in
    # <prefix>/python/tests.
    bundled = os.path.dirname(HERE)
    if os.path.isdir(os.path.join(bundled, "kerntune")) and bundled not in sys.path:
        sys.path.append(bundled)
    try:
        torch = importlib.import_module("torch")
    except ImportError as e:
        print("SKIP: torch is not installed: %s" % e)
        sys.exit(SKIP)
    try:
        importlib.import_module("kerntune")
    except ImportError as e:
        print("SKIP: the kerntune package or its grpc/protobuf/numpy dependencies are "
              "missing: %s" % e)
        sys.exit(SKIP)
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        sys.exit(SKIP)


# kernels/verify.cc OutputTolerance (rtol, atol) and StatsTolerance.
TOLERANCE = {
    "float32": {"softmax": (1e-4, 1e-12), "log_softmax": (1e-4, 1e-4), "layer_norm": (1e-4, 1e-4)},
    "float16": {"softmax": (2e-3, 1e-7), "log_softmax": (2e-3, 2e-3), "layer_norm": (2e-3, 2e-3)},
    "bfloat16": {"softmax": (1.6e-2, 1e-12), "log_softmax": (1.6e-2, 1.6e-2),
                 "layer_norm": (1.6e-2, 1.6e-2)},
}
for _name, _t in TOLERANCE.items():
    # RMSNorm and ReduceScale outputs are O(1) like LayerNorm's; the masked
    # softmax's are probabilities like softmax's.
    _t["rms_norm"] = _t["reduce_scale"] = _t["layer_norm"]
    _t["scaled_masked_softmax"] = _t["softmax"]
STATS_TOLERANCE = (1e-4, 1e-4)
OPS = ("softmax", "log_softmax", "layer_norm")
DTYPE_NAMES = ("float32", "float16", "bfloat16")
# One row per warp, a block with the row in shared memory, a block re-reading
# global memory, and the edges.
SHAPES = ((1, 1), (7, 33), (300, 1000), (64, 4096), (3, 40000))


class Failure(AssertionError):
    pass


def torch_dtype(name):
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def check_close(got, want, tolerance, what):
    rtol, atol = tolerance
    got = got.double()
    want = want.to(got.device).double()  # references built on the CPU (from NumPy) too
    if tuple(got.shape) != tuple(want.shape):
        raise Failure("%s: shape %s, want %s" % (what, tuple(got.shape), tuple(want.shape)))
    ok = (got - want).abs() <= atol + rtol * want.abs()
    if not bool(ok.all()):
        bad = (~ok).nonzero()
        first = tuple(int(i) for i in bad[0])
        raise Failure("%s: %d bad elements; first at %s: got %r, want %r (rtol %g, atol %g)"
                      % (what, bad.shape[0], first, float(got[first]), float(want[first]),
                         rtol, atol))


def check_ran_on(result, index, what):
    """The run ran on the daemon's device with the UUID of torch's cuda:index."""
    import kerntune

    uuid = kerntune._torch.device_uuid(index)
    if result.device_ordinal < 0 or (uuid and result.device_uuid.lower() != uuid.lower()):
        raise Failure("%s: ran on the daemon's device %d (%r), want the GPU of cuda:%d (%r)"
                      % (what, result.device_ordinal, result.device_uuid, index, uuid))


def reference(op, x, weight=None, bias=None, eps=1e-5):
    """torch's float64 result, and for layer_norm the mean and inv_std."""
    import torch
    import torch.nn.functional as F

    x64 = x.double()
    if op == "softmax":
        return torch.softmax(x64, -1), None, None
    if op == "log_softmax":
        return torch.log_softmax(x64, -1), None, None
    cols = x.shape[-1]
    y = F.layer_norm(x64, (cols,), None if weight is None else weight.double(),
                     None if bias is None else bias.double(), eps)
    mean = x64.mean(-1)
    inv_std = torch.rsqrt(x64.var(-1, unbiased=False) + eps)
    return y, mean, inv_std


def random_input(op, shape, dtype, generator, device):
    import torch

    mean = 3.0 if op == "layer_norm" else 0.5
    x = torch.randn(shape, generator=generator, device=device, dtype=torch.float32) * 2 + mean
    return x.to(dtype)


def run_and_check(client, op, x, dtype_name, out=None, stream=None, what=""):
    """One op through the daemon vs torch's float64; returns the output."""
    import torch

    rows, cols = x.shape
    weight = bias = None
    # Every other shape asks the daemon to time the kernel.
    time_kernel = cols % 2 == 0
    if op == "layer_norm":
        g = torch.Generator(device=x.device).manual_seed(rows * 7919 + cols)
        weight = (torch.randn(cols, generator=g, device=x.device) * 0.5 + 1).to(x.dtype)
        bias = (torch.randn(cols, generator=g, device=x.device) * 0.5).to(x.dtype)
        result = client.run(op, x, out, weight=weight, bias=bias, return_stats=True,
                            stream=stream, time_kernel=time_kernel)
    else:
        result = client.run(op, x, out, stream=stream, time_kernel=time_kernel)
    if stream is not None:
        torch.cuda.current_stream(x.device).synchronize()
    # Stream mode answers before the kernel ends: no time even when asked.
    if (result.kernel_time_us > 0) != (time_kernel and stream is None):
        raise Failure("%s: kernel_time_us=%r with time_kernel=%s, stream=%s"
                      % (what, result.kernel_time_us, time_kernel, stream))
    y = result.output
    if out is not None and y is not out:
        raise Failure("%s: run did not return out" % what)
    if result.backend != "gpu":
        raise Failure("%s: ran on backend %r" % (what, result.backend))
    check_ran_on(result, x.device.index, what)
    want, mean, inv_std = reference(op, x, weight, bias)
    check_close(y, want, TOLERANCE[dtype_name][op], what)
    if op == "layer_norm":
        check_close(result.mean, mean, STATS_TOLERANCE, what + " mean")
        check_close(result.inv_std, inv_std, STATS_TOLERANCE, what + " inv_std")
    return y


# -- the checks -----------------------------------------------------------------

def check_every_op_dtype_shape(client, device):
    import torch

    g = torch.Generator(device=device).manual_seed(20261121)
    for op in OPS:
        for name in DTYPE_NAMES:
            for shape in SHAPES:
                x = random_input(op, shape, torch_dtype(name), g, device)
                run_and_check(client, op, x, name, what="%s %s %s" % (op, name, shape))


def check_new_ops(client, device):
    """One case per newer op and dtype against torch in float64."""
    import torch

    g = torch.Generator(device=device).manual_seed(20261205)
    for name in DTYPE_NAMES:
        dtype = torch_dtype(name)
        tol = TOLERANCE[name]
        # RMSNorm with a weight, 1/rms to device memory, on a 3-d input.
        x = random_input("rms_norm", (6, 50, 1000), dtype, g, device)
        weight = (torch.randn(1000, generator=g, device=device) * 0.5 + 1).to(dtype)
        y, inv_rms = client.rms_norm(x, weight, eps=1e-5, return_stats=True)
        x64 = x.double()
        want_inv = torch.rsqrt(x64.pow(2).mean(-1) + 1e-5)
        check_close(y, x64 * want_inv[..., None] * weight.double(), tol["rms_norm"],
                    "rms_norm %s" % name)
        check_close(inv_rms, want_inv, STATS_TOLERANCE, "rms_norm %s inv_rms" % name)
        # ReduceScale: y = x / max|x| per row, the scales float32 (rows, 1).
        x = random_input("reduce_scale", (64, 4096), dtype, g, device)
        x[3] = 0  # an all-zero row: zeros and scale 0
        y, scale = client.reduce_scale(x)
        x64 = x.double()
        want_scale = x64.abs().amax(-1, keepdim=True)
        check_close(scale, want_scale, STATS_TOLERANCE, "reduce_scale %s scale" % name)
        if scale.dtype != torch.float32:
            raise Failure("reduce_scale %s: scale dtype %s" % (name, scale.dtype))
        check_close(y, (x64 / want_scale).nan_to_num(0.0), tol["reduce_scale"],
                    "reduce_scale %s" % name)
        # Scaled-masked softmax of (batch 2, heads 4, q 64, k 80) scores.
        scores = random_input("softmax", (2, 4, 64, 80), dtype, g, device)
        mask = torch.randn((64, 80), generator=g, device=device)
        mask[:, 70:] = float("-inf")  # padding keys
        mask = mask.to(dtype)
        for causal in (False, True):
            what = "scaled_masked_softmax %s causal=%s" % (name, causal)
            y = client.scaled_masked_softmax(scores, mask, scale=0.125, causal=causal)
            logits = scores.double() * 0.125 + mask.double()
            if causal:
                upper = torch.ones(64, 80, dtype=torch.bool, device=device).triu(1)
                logits = logits.masked_fill(upper, float("-inf"))
            check_close(y, torch.softmax(logits, -1), tol["scaled_masked_softmax"], what)
        # Causal only, no mask, default scale 1.
        y = client.scaled_masked_softmax(scores[:, :, :, :64], causal=True)
        upper = torch.ones(64, 64, dtype=torch.bool, device=device).triu(1)
        check_close(y, torch.softmax(scores[:, :, :, :64].double().masked_fill(
            upper, float("-inf")), -1), tol["scaled_masked_softmax"],
            "scaled_masked_softmax %s causal only" % name)
        # Softmax / log-softmax along a middle axis: seed 001's shapes.
        for shape, dim in (((128, 128, 16, 16), 0), ((512, 896, 4, 12), 1), ((8, 300, 5), 1)):
            x = random_input("softmax", shape, dtype, g, device)
            for op in ("softmax", "log_softmax"):
                result = client.run(op, x, dim=dim)
                want = getattr(torch, op)(x.double(), dim)
                check_close(result.output, want, tol[op], "%s %s %s dim=%d" % (op, name, shape,
                                                                               dim))
        # A stream-mode call of each op on the caller's stream.
        x = random_input("reduce_scale", (128, 1024), dtype, g, device)
        result = client.run("reduce_scale", x, stream=True)
        torch.cuda.current_stream(device).synchronize()
        check_close(result.row_scale, x.double().abs().amax(-1, keepdim=True), STATS_TOLERANCE,
                    "reduce_scale %s stream" % name)


def check_offsets_and_out_slices(client, device):
    import torch

    g = torch.Generator(device=device).manual_seed(2)
    for name in DTYPE_NAMES:
        dtype = torch_dtype(name)
        for op in OPS:
            rows, cols = 37, 513
            big = random_input(op, (rows + 11, cols), dtype, g, device)
            x = big[5:5 + rows]  # storage_offset = 5 * cols elements
            assert x.storage_offset() > 0
            target = torch.full((rows + 20, cols), float("nan"), dtype=dtype, device=device)
            out = target[9:9 + rows]
            what = "%s %s slice" % (op, name)
            run_and_check(client, op, x, name, out=out, what=what)
            if not (bool(target[:9].isnan().all()) and bool(target[9 + rows:].isnan().all())):
                raise Failure("%s: rows outside out= were written" % what)
        # A strided x is made contiguous by the client.
        wide = random_input("softmax", (16, 200), dtype, g, device)
        run_and_check(client, "softmax", wide[:, ::2], name, what="softmax %s strided" % name)


def check_stream_mode(client, device):
    import torch

    g = torch.Generator(device=device).manual_seed(3)
    side = torch.cuda.Stream(device=device)
    for name in DTYPE_NAMES:
        dtype = torch_dtype(name)
        for op in OPS:
            what = "%s %s stream" % (op, name)
            # On the current stream: the input is produced by queued work.
            base = random_input(op, (512, 1024), dtype, g, device)
            x = base * 1  # queued on the current stream right before the call
            run_and_check(client, op, x, name, stream=True, what=what)
            # On a side stream, with the result consumed there before any sync.
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                x = base.clone()
                result = client.run(op, x, stream=side)
                consumed = result.output.double().sum()
            side.synchronize()
            want = reference(op, base)[0]
            check_close(result.output, want, TOLERANCE[name][op], what + " (side stream)")
            if not torch.isfinite(consumed):
                raise Failure("%s: consumed sum is %r" % (what, float(consumed)))
    # Many calls queued back to back, checked at the end.
    xs = [random_input("softmax", (64, 2048), torch.float16, g, device) for _ in range(20)]
    ys = [client.softmax(x, stream=True) for x in xs]
    client.synchronize()
    for i, (x, y) in enumerate(zip(xs, ys)):
        check_close(y, reference("softmax", x)[0], TOLERANCE["float16"]["softmax"],
                    "queued softmax %d" % i)


def check_registered_allocation(client, device):
    import torch

    g = torch.Generator(device=device).manual_seed(4)
    arena = torch.full((4096, 256), float("nan"), dtype=torch.float32, device=device)
    with client.register(arena, label="arena") as buffer:
        if buffer.kind != "cuda_ipc":
            raise Failure("registered a %r buffer" % buffer.kind)
        listed = {b.buffer_id: b for b in client.list_buffers()}
        if buffer.id not in listed or listed[buffer.id].label != "arena":
            raise Failure("list_buffers does not show the arena: %r" % listed)
        arena[:1000] = random_input("softmax", (1000, 256), torch.float32, g, device)
        x, out = arena[:1000], arena[2000:3000]
        for op in OPS:
            run_and_check(client, op, x, "float32", out=out, what="%s registered" % op)
        runs = [b.runs for b in client.list_buffers() if b.buffer_id == buffer.id]
        if not runs or runs[0] < len(OPS):
            raise Failure("the arena's buffer counted %r runs, want >= %d" % (runs, len(OPS)))
    if buffer.id in [b.buffer_id for b in client.list_buffers()]:
        raise Failure("the arena stayed registered after close")


def check_no_ipc_leak(client, device):
    """Tensors shared with the daemon and dropped go back to torch's allocator."""
    import torch

    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    g = torch.Generator(device=device).manual_seed(5)
    for i in range(200):
        x = random_input("softmax", (256, 4096), torch.float16, g, device)  # 2 MiB
        y = client.softmax(x, stream=(i % 2 == 0))
        del x, y
    client.synchronize()
    torch.cuda.synchronize(device)
    after = torch.cuda.memory_allocated(device)
    if after - before > 16 << 20:
        raise Failure("torch.cuda.memory_allocated grew by %d bytes over 200 calls: shared "
                      "blocks are not being freed" % (after - before))


def check_runs_take_the_queue(target, device):
    """Torch runs go through the submission queue by default: no gRPC Run,
    the bytes a use_queue=False client gets, threads sharing the queue."""
    import threading

    import torch

    import kerntune

    g = torch.Generator(device=device).manual_seed(23)
    with kerntune.Client(target, timeout=120) as queued, \
            kerntune.Client(target, timeout=120, use_queue=False) as plain:
        over_grpc = []
        grpc_run = queued._stub.Run

        def counting_run(request, **kwargs):
            over_grpc.append(request.op)
            return grpc_run(request, **kwargs)

        queued._stub.Run = counting_run
        for name in DTYPE_NAMES:
            for op in OPS:
                x = random_input(op, (300, 1000), torch_dtype(name), g, device)
                what = "%s %s through the queue" % (op, name)
                y = run_and_check(queued, op, x, name, what=what)
                if not torch.equal(y, run_and_check(plain, op, x, name, what=what + " (gRPC)")):
                    raise Failure("%s: not the bytes the same run gives over gRPC" % what)
                run_and_check(queued, op, x, name, stream=True, what=what + ", stream mode")
            x = random_input("softmax", (64, 512), torch_dtype(name), g, device)
            _, inv_rms = queued.rms_norm(x, torch.ones(512, dtype=x.dtype, device=device),
                                         return_stats=True)
            _, scale = queued.reduce_scale(x)
            if not (inv_rms.is_cuda and scale.is_cuda):
                raise Failure("rms_norm's inv_rms or reduce_scale's scale is not on the GPU")
        failures = []

        def work(seed):
            try:
                local = torch.Generator(device=device).manual_seed(seed)
                for i in range(25):
                    x = random_input("softmax", (128, 2048), torch.float16, local, device)
                    run_and_check(queued, "softmax", x, "float16",
                                  what="thread %d run %d" % (seed, i))
            except Exception as error:  # pylint: disable=broad-except
                failures.append(error)

        threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]
        if over_grpc or queued._queue_id() is None:
            raise Failure("%d runs went over gRPC (ops %s), queue %r"
                          % (len(over_grpc), sorted(set(over_grpc)), queued._queue_id()))


def _llm_reference():
    sys.path.insert(0, HERE)
    import llm_reference

    return llm_reference


def _codes_numpy(codes):
    """fp8 codes as uint8 bits, int8 as int8, on the host."""
    import torch

    if codes.dtype == torch.int8:
        return codes.cpu().numpy()
    return codes.view(torch.uint8).cpu().numpy()


def check_codes(got, want, dtype, what):
    ref = _llm_reference()
    apart = ref.codes_apart(_codes_numpy(got), want, dtype)
    if apart.max(initial=0) > 1:
        import numpy as np

        index = tuple(int(i) for i in np.argwhere(apart > 1)[0])
        raise Failure("%s: code at %s is %d codes from the reference's"
                      % (what, index, apart[index]))


def check_fused_norms(client, device):
    """add_rms_norm / add_layer_norm, weight_offset and quantized outputs
    (torch float8 dtypes when this torch has them) for every input dtype,
    code type and scale mode, against llm_reference's float64."""
    import numpy as np
    import torch

    import kerntune

    ref = _llm_reference()
    eps = 1e-6
    g = torch.Generator(device=device).manual_seed(44)
    rows, cols = 33, 1024
    float8 = {"fp8_e4m3": getattr(torch, "float8_e4m3fn", None),
              "fp8_e5m2": getattr(torch, "float8_e5m2", None), "int8": torch.int8}
    for name in DTYPE_NAMES:
        dtype = torch_dtype(name)
        tolerance = TOLERANCE[name]["layer_norm"]
        for method, adds in (("rms_norm", False), ("layer_norm", False),
                             ("add_rms_norm", True), ("add_layer_norm", True)):
            for qdtype, mode, group in [(None, None, 0)] + [
                    (q, m, gs) for q in ref.QUANT_DTYPES for m, gs in ref.SCALE_MODES]:
                what = "%s %s %s %s %d" % (method, name, qdtype, mode, group)
                x = (torch.randn((rows, cols), generator=g, device=device) * 2 + 0.5).to(dtype)
                before = (torch.randn((rows, cols), generator=g, device=device) * 2).to(dtype)
                residual = before.clone()
                weight = (torch.randn(cols, generator=g, device=device) * 0.5 + 1).to(dtype)
                bias = (torch.randn(cols, generator=g, device=device) * 0.5).to(dtype)
                quant = None
                if qdtype is not None:
                    quant = (kerntune.Quant(qdtype, "static", scale=2.5 / ref.QMAX[qdtype])
                             if mode == "static" else
                             kerntune.Quant(qdtype, mode, group_size=group))
                args = (x, residual) if adds else (x,)
                kwargs = {"quant": quant}
                if "rms" in method:
                    kwargs["weight_offset"] = 1.0 if qdtype is None else 0.0
                    got = getattr(client, method)(*args, weight, eps, **kwargs)
                else:
                    got = getattr(client, method)(*args, weight, bias, eps, **kwargs)
                r = (x.double() + before.double()).to(dtype) if adds else x
                if adds:
                    check_close(residual, r.double(), tolerance, what + " residual")
                r64 = r.double().cpu().numpy()
                w64, b64 = weight.double().cpu().numpy(), bias.double().cpu().numpy()
                if "rms" in method:
                    y64, _ = ref.rms_norm(r64, w64, eps, kwargs["weight_offset"])
                else:
                    y64, _, _ = ref.layer_norm(r64, w64, b64, eps)
                if quant is None:
                    check_close(got, torch.from_numpy(y64), tolerance, what)
                    continue
                codes, scales = got
                want_dtype = float8[qdtype] or torch.uint8
                if codes.dtype != want_dtype or tuple(codes.shape) != (rows, cols):
                    raise Failure("%s: codes %s %s, want %s" % (what, codes.dtype,
                                                                tuple(codes.shape), want_dtype))
                want, want_scales = ref.quantize(y64, qdtype, mode, group, scale=quant.scale)
                check_codes(codes, want, qdtype, what)
                if mode != "static":
                    check_close(scales.cpu(), torch.from_numpy(want_scales.astype(np.float64)),
                                (1e-5, 0.0), what + " scales")


def check_strided_views(client, device):
    """QK-norm of a fused qkv tensor's per-head views, in place and quantized;
    a static scale in a CUDA tensor, and codes and scales into given
    tensors (a prepared, queued call)."""
    import numpy as np
    import torch

    import kerntune

    ref = _llm_reference()
    eps = 1e-6
    T, H, D = 17, 8, 128
    g = torch.Generator(device=device).manual_seed(4402)
    for name in DTYPE_NAMES:
        dtype = torch_dtype(name)
        qkv = torch.randn((T, 3 * H * D), generator=g, device=device).to(dtype)
        before = qkv.clone()
        weight = (torch.randn(D, generator=g, device=device) * 0.5 + 1).to(dtype)
        q = qkv.view(T, 3, H, D)[:, 0]
        y = client.rms_norm(q, weight, eps, out=q)
        if y is not q:
            raise Failure("rms_norm(q, out=q) did not return q")
        q64 = before.view(T, 3, H, D)[:, 0].double().cpu().numpy()
        want, _ = ref.rms_norm(q64, weight.double().cpu().numpy(), eps)
        check_close(qkv.view(T, 3, H, D)[:, 0], torch.from_numpy(want),
                    TOLERANCE[name]["rms_norm"], "q of qkv %s" % name)
        if not torch.equal(qkv.view(T, 3, H, D)[:, 1:], before.view(T, 3, H, D)[:, 1:]):
            raise Failure("normalizing q changed k or v (%s)" % name)
        k = qkv.view(T, 3, H, D)[:, 1]
        k64 = before.view(T, 3, H, D)[:, 1].double().cpu().numpy()
        want_k, _ = ref.rms_norm(k64, weight.double().cpu().numpy(), eps)
        codes, scales = client.rms_norm(k, weight, eps, quant=kerntune.Quant("fp8_e4m3"))
        want_codes, want_scales = ref.quantize(want_k, "fp8_e4m3", "per_row")
        check_codes(codes, want_codes, "fp8_e4m3", "k's codes %s" % name)
        check_close(scales.cpu(), torch.from_numpy(want_scales.astype(np.float64)), (1e-5, 0.0),
                    "k's scales %s" % name)
    # A static scale in device memory, and codes and scales into given
    # tensors: the same call twice (the second prepared), through the queue.
    x = torch.randn((64, 4096), generator=g, device=device).half()
    scale = torch.tensor([2.0 / 127], device=device)
    codes = torch.empty((64, 4096), dtype=torch.int8, device=device)
    static = kerntune.Quant("int8", "static", scale=scale)
    for _ in range(2):
        got, got_scale = client.rms_norm(x, None, eps, out=codes, quant=static)
        if got is not codes or got_scale is not scale:
            raise Failure("rms_norm(out=codes, static scale) did not return them")
    want, _ = ref.quantize(ref.rms_norm(x.double().cpu().numpy(), None, eps)[0], "int8",
                           "static", scale=float(scale))
    check_codes(codes, want, "int8", "static scale in a CUDA tensor")
    group = kerntune.Quant("fp8_e5m2", "per_group", group_size=128)
    scales = torch.empty((64, 32), dtype=torch.float32, device=device)
    out = torch.empty((64, 4096), dtype=torch.uint8, device=device)  # fp8 bits
    for _ in range(2):
        client.rms_norm(x, None, eps, out=out, quant=group, scales=scales)
    want, want_scales = ref.quantize(ref.rms_norm(x.double().cpu().numpy(), None, eps)[0],
                                     "fp8_e5m2", "per_group", 128)
    check_codes(out, want, "fp8_e5m2", "per-group codes into a uint8 out")
    check_close(scales.cpu(), torch.from_numpy(want_scales.astype(np.float64)), (1e-5, 0.0),
                "per-group scales into a given tensor")
    # The residual must be a CUDA tensor of x's dtype.
    try:
        client.add_rms_norm(x, x.float(), None, eps)
    except kerntune.InvalidArgumentError as e:
        if "residual" not in str(e):
            raise Failure("a float32 residual for float16 x: %s" % e)
    else:
        raise Failure("a float32 residual for float16 x was taken")


def check_client_processes(target):
    """Clients at once: two on GPU 0, or with two GPUs one on each and one on both."""
    import torch

    devices = ("0", "1", "0,1") if torch.cuda.device_count() >= 2 else ("0", "0")
    children = [
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", target,
                          "--seed", str(seed), "--devices", device], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=os.environ.copy())
        for seed, device in zip((11, 12, 13), devices)
    ]
    outputs = [child.communicate(timeout=300)[0] for child in children]
    for child, output in zip(children, outputs):
        if child.returncode != 0:
            raise Failure("client process failed (exit %d):\n%s" % (child.returncode, output))


def child_main(target, seed, devices):
    """One of the concurrent client processes: random ops, each checked, on
    `devices` (torch CUDA indices) in turn."""
    import torch

    import kerntune

    devices = [torch.device("cuda", int(d)) for d in devices.split(",")]
    generators = [torch.Generator(device=d).manual_seed(seed) for d in devices]
    with kerntune.Client(target) as client:
        for i in range(60):
            device, g = devices[i % len(devices)], generators[i % len(devices)]
            op = OPS[i % 3]
            name = DTYPE_NAMES[(i // 3) % 3]
            rows = int(torch.randint(1, 300, (1,), generator=g, device=device))
            cols = int(torch.randint(1, 5000, (1,), generator=g, device=device))
            x = random_input(op, (rows, cols), torch_dtype(name), g, device)
            run_and_check(client, op, x, name, stream=True if i % 2 else None,
                          what="child %d call %d %s %s %s (%d, %d)"
                          % (seed, i, device, op, name, rows, cols))
    print("child %d: 60 calls on %s checked" % (seed, ", ".join(map(str, devices))))


# -- two GPUs ---------------------------------------------------------------------

def check_gpus_in_one_process(client):
    """Tensors on cuda:0 and cuda:1 in turn: each run where its memory is."""
    import torch

    devices = [torch.device("cuda", 0), torch.device("cuda", 1)]
    generators = [torch.Generator(device=d).manual_seed(6 + d.index) for d in devices]
    for i in range(12):
        device, g = devices[i % 2], generators[i % 2]
        op = OPS[(i // 2) % 3]
        x = random_input(op, (300, 1000), torch.float16, g, device)
        run_and_check(client, op, x, "float16", stream=True if i % 4 >= 2 else None,
                      what="%s %s float16 (call %d)" % (device, op, i))
    # A registered arena on each GPU at once, each counted on its own.
    arenas = [torch.full((1024, 256), float("nan"), dtype=torch.float32, device=d)
              for d in devices]
    buffers = [client.register(arena, label="arena %d" % i) for i, arena in enumerate(arenas)]
    try:
        ordinals = [client._ordinal(d.index) for d in devices]
        if ordinals[0] == ordinals[1]:
            raise Failure("cuda:0 and cuda:1 map to the same daemon device %d" % ordinals[0])
        for buffer, ordinal in zip(buffers, ordinals):
            if buffer.info.device_ordinal != ordinal:
                raise Failure("a buffer registered on the daemon's device %d, want %d"
                              % (buffer.info.device_ordinal, ordinal))
        counts = {d.ordinal: d.registered_buffers for d in client.status().devices}
        if counts.get(ordinals[0]) != 1 or counts.get(ordinals[1]) != 1:
            raise Failure("per-device registered_buffers %r, want 1 on each of %r"
                          % (counts, ordinals))
        for arena, g in zip(arenas, generators):
            arena[:500] = random_input("softmax", (500, 256), torch.float32, g, arena.device)
            for op in OPS:
                run_and_check(client, op, arena[:500], "float32", out=arena[512:1012],
                              what="%s %s registered" % (arena.device, op))
    finally:
        for buffer in buffers:
            buffer.close()


def check_cross_device_refused(client):
    """x on cuda:0 and out on cuda:1: the client refuses, and so does the daemon."""
    import torch

    import kerntune
    from kerntune.v1 import kerntune_pb2 as pb

    x = torch.ones((4, 256), device="cuda:0")
    out = torch.full((4, 256), float("nan"), device="cuda:1")
    try:
        client.softmax(x, out)
        raise Failure("softmax with x on cuda:0 and out on cuda:1 was accepted")
    except kerntune.InvalidArgumentError:
        pass
    # The same request sent as is: the daemon must refuse it, naming both GPUs.
    request = pb.RunRequest(op=pb.OP_SOFTMAX, dtype=pb.DTYPE_FLOAT32,
                            shape=pb.Shape(rows=4, cols=256))
    client._cuda_ref(request.input, x)
    client._cuda_ref(request.output, out)
    torch.cuda.synchronize(0)
    try:
        client._call(client._stub.Run, request)
        raise Failure("the daemon ran a Run with tensors on two GPUs")
    except kerntune.InvalidArgumentError as e:
        uuids = [kerntune._torch.device_uuid(i) for i in (0, 1)]
        if "two devices" not in str(e) or not all(u.lower() in str(e).lower() for u in uuids if u):
            raise Failure("the refusal does not name both GPUs %r: %s" % (uuids, e))
    if not bool(out.isnan().all()):
        raise Failure("the refused Run wrote out")


def check_inline_runs_name_a_device(client):
    """NumPy arrays run on the device named: by ordinal and by UUID."""
    import numpy as np

    rng = np.random.default_rng(8)
    x = rng.standard_normal((64, 1000)).astype(np.float32)
    x64 = x.astype(np.float64)
    want = np.exp(x64 - x64.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    for device in client.status().devices:
        for selector in (device.ordinal, device.uuid, device.uuid[:12]):
            result = client.run("softmax", x, device=selector)
            if (result.device_ordinal, result.device_uuid) != (device.ordinal, device.uuid):
                raise Failure("device=%r ran on %d (%r), want %d (%r)"
                              % (selector, result.device_ordinal, result.device_uuid,
                                 device.ordinal, device.uuid))
            np.testing.assert_allclose(result.output, want, rtol=1e-4, atol=1e-12)


def check_wrong_device_registration(target):
    """A tensor on cuda:0 registered as the daemon's device of cuda:1.

    The daemon cannot see which GPU an IPC allocation lives on (the driver
    maps it into the device it is opened on, peer access included, and
    reports that device), so it trusts the client's ordinal, which clients
    find by UUID. Where the GPUs reach each other the mapping works and Runs
    on it run on the claimed device over peer access; elsewhere the driver
    refuses to open it. Either way the results stay right.
    """
    import torch

    import kerntune

    with kerntune.Client(target) as probe:
        other = probe._ordinal(1)
    with kerntune.Client(target, device_map={0: other}) as client:
        tensor = torch.rand((256, 256), device="cuda:0")
        out = torch.full_like(tensor, float("nan"))
        try:
            result = client.run("softmax", tensor, out)
        except kerntune.InvalidArgumentError as e:
            # The driver cannot map it here, or the daemon holds this
            # allocation open on its real device already (torch reuses
            # its blocks, and with them their handles).
            if ("cudaIpcOpenMemHandle refused" not in str(e)
                    and "the handle's allocation is on device" not in str(e)):
                raise Failure("unexpected refusal: %s" % e)
            return
        torch.cuda.synchronize()
        if result.device_ordinal != other:
            raise Failure("ran on the daemon's device %d, want the claimed %d"
                          % (result.device_ordinal, other))
        if not torch.allclose(out, torch.softmax(tensor, dim=-1), rtol=1e-5, atol=1e-6):
            raise Failure("a Run over peer access gave wrong results")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", metavar="TARGET", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--devices", default="0", help=argparse.SUPPRESS)
    args = parser.parse_args()
    _import_or_skip()
    if args.child:
        try:
            child_main(args.child, args.seed, args.devices)
        except Exception:
            traceback.print_exc()
            return 1
        return 0

    import torch

    import kerntune

    sys.path.insert(0, HERE)
    import kerntuned_child

    binary = kerntuned_child.kerntuned_binary()
    if binary is None:
        print("FAIL: no kerntuned: set KERNTUNED_BINARY (or run from a bundle's bin/)")
        return 1
    device = torch.device("cuda", 0)
    daemon = kerntuned_child.Daemon(binary, cpu=False)
    failed = []
    try:
        daemon.wait_serving(timeout=60)  # CUDA initialisation included
        with kerntune.Client(daemon.target, timeout=120) as client:
            status = client.status()
            print("kerntuned %s, backend %s (%s), cuda_ipc_supported=%s; torch %s"
                  % (status.version, status.backend, status.backend_reason,
                     status.cuda_ipc_supported, torch.__version__))
            if status.backend != "gpu" or not status.cuda_ipc_supported:
                raise Failure("kerntuned is not on the GPU backend with CUDA IPC: %r" % status)
            checks = [
                ("every op, dtype and shape", lambda: check_every_op_dtype_shape(client, device)),
                ("rms_norm, reduce_scale, scaled_masked_softmax, middle-axis softmax",
                 lambda: check_new_ops(client, device)),
                ("storage offsets and out= slices",
                 lambda: check_offsets_and_out_slices(client, device)),
                ("add + norm, weight offset, quantized outputs (torch float8)",
                 lambda: check_fused_norms(client, device)),
                ("strided per-head views, static and given scales",
                 lambda: check_strided_views(client, device)),
                ("stream mode", lambda: check_stream_mode(client, device)),
                ("a registered allocation", lambda: check_registered_allocation(client, device)),
                ("no IPC leak", lambda: check_no_ipc_leak(client, device)),
                ("client processes at once", lambda: check_client_processes(daemon.target)),
                ("torch runs through the submission queue",
                 lambda: check_runs_take_the_queue(daemon.target, device)),
            ]
            if torch.cuda.device_count() >= 2:
                checks += [
                    ("tensors on two GPUs in one process",
                     lambda: check_gpus_in_one_process(client)),
                    ("a run with tensors on two GPUs refused",
                     lambda: check_cross_device_refused(client)),
                    ("NumPy runs naming a device", lambda: check_inline_runs_name_a_device(client)),
                    ("a tensor claimed on the other GPU: refused or right",
                     lambda: check_wrong_device_registration(daemon.target)),
                ]
            else:
                print("SKIP the two-GPU checks: torch sees %d CUDA device"
                      % torch.cuda.device_count())
            for name, check in checks:
                start = time.monotonic()
                try:
                    check()
                    print("PASS %s (%.1f s)" % (name, time.monotonic() - start))
                except Exception:
                    failed.append(name)
                    print("FAIL %s:" % name)
                    traceback.print_exc(file=sys.stdout)
    except Exception:
        failed.append("setup")
        traceback.print_exc(file=sys.stdout)
    finally:
        daemon.stop()
        if failed:
            print("kerntuned log:\n%s" % daemon.log()[-20000:])
        daemon.cleanup()
    print("%s: %d failed %s" % ("FAILED" if failed else "PASSED", len(failed), failed or ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
