"""Generated protobuf and gRPC modules of kerntune/v1/*.proto (built by CMake).

The proto package kerntune.v1 is this Python package, so the generated
modules' own imports ("from kerntune.v1 import common_pb2") resolve here.
"""
