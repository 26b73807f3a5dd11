"""Probe: a Python grpcio echo (generic handler, raw bytes) over a Unix socket.
  echo_py.py serve unix:/tmp/x.sock
  echo_py.py call unix:/tmp/x.sock 3000
"""
import sys, time
from concurrent import futures
import grpc

ident = lambda b: b
if sys.argv[1] == "serve":
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handler = grpc.method_handlers_generic_handler(
        "echo.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(
            lambda req, ctx: req, request_deserializer=ident, response_serializer=ident)})
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(sys.argv[2])
    server.start()
    print("serving", sys.argv[2], flush=True)
    server.wait_for_termination()
else:
    n = int(sys.argv[3])
    ch = grpc.insecure_channel(sys.argv[2])
    echo = ch.unary_unary("/echo.Echo/Echo", request_serializer=ident, response_deserializer=ident)
    us = []
    for i in range(n + 200):
        t = time.perf_counter()
        echo(b"x" * 16)
        if i >= 200:
            us.append((time.perf_counter() - t) * 1e6)
    us.sort()
    print("python echo %s: p50 %.1f us  p90 %.1f us  p99 %.1f us (n=%d)" % (
        sys.argv[2], us[len(us) // 2], us[len(us) * 9 // 10], us[len(us) * 99 // 100], n))
