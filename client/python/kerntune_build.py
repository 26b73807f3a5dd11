"""The Python package's own PEP 517 build backend (pyproject.toml names it).

`pip install client/python` (the source tree) or `pip install dist/python`
(a bundle) builds a pure-Python wheel of the `kerntune` package with this
file alone: it needs nothing from a package index (build-system.requires is
empty), so the one command works on hosts without one, such as the GPU hosts.

  - From the source tree (kerntune/_version.py.in is there): the protobuf and
    gRPC modules are generated from the repository's proto/ with `protoc`
    and `grpc_python_plugin` (Debian: protobuf-compiler, protobuf-compiler-
    grpc; $PROTOC and $GRPC_PYTHON_PLUGIN override), as CMake does for the
    build tree (CMakeLists.txt beside this file), and the version is the
    project's (the top CMakeLists.txt).
  - From a bundle: `cmake --install` already put the generated modules and
    _version.py in kerntune/; they are packed as they are.

Editable installs are not offered: the source tree has no generated modules
to point at (use PYTHONPATH=build/client/python for that).
"""

import base64
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import zipfile

NAME = "kerntune"
SUMMARY = "Python client of kerntuned, the kerntune daemon (tuned row-wise GPU kernels)"
REQUIRES_PYTHON = ">=3.8"
# Debian 12's python3-grpcio and python3-protobuf are the oldest tested.
REQUIRES = ["grpcio>=1.51", "protobuf>=3.20", "numpy"]
TAG = "py3-none-any"

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_DIR = os.path.join(HERE, NAME)
# Only in the source tree: client/python/../../{proto,CMakeLists.txt}.
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
PROTO_ROOT = os.path.join(REPO_ROOT, "proto")
PROTO_PACKAGE = "kerntune/v1"


class BuildError(Exception):
    pass


def _from_source_tree():
    return os.path.exists(os.path.join(PACKAGE_DIR, "_version.py.in"))


def _version():
    if _from_source_tree():
        path = os.path.join(REPO_ROOT, "CMakeLists.txt")
        pattern = r"project\(\s*kerntune\s+VERSION\s+([0-9][0-9.]*)"
    else:
        path = os.path.join(PACKAGE_DIR, "_version.py")
        pattern = r"^__version__ = \"([^\"]+)\""
    try:
        with open(path, encoding="utf-8") as f:
            match = re.search(pattern, f.read(), re.MULTILINE)
    except OSError as error:
        raise BuildError("cannot read the version from %s: %s" % (path, error)) from None
    if not match:
        raise BuildError("no version in %s (expected %s)" % (path, pattern))
    return match.group(1)


def _tool(variable, name):
    path = os.environ.get(variable) or shutil.which(name)
    if not path:
        raise BuildError(
            "building the kerntune package from the source tree needs %s on PATH (or $%s) "
            "to generate the protobuf modules: apt install protobuf-compiler "
            "protobuf-compiler-grpc, or install from a bundle's python/ directory, which "
            "carries them" % (name, variable))
    return path


def _generate_protos(out_dir):
    """protoc's Python and gRPC modules of proto/kerntune/v1/*.proto into out_dir."""
    proto_dir = os.path.join(PROTO_ROOT, PROTO_PACKAGE)
    if not os.path.isdir(proto_dir):
        raise BuildError("no %s: build from the repository's client/python or a bundle's "
                         "python/" % proto_dir)
    protos = sorted(PROTO_PACKAGE + "/" + f for f in os.listdir(proto_dir) if f.endswith(".proto"))
    protoc = _tool("PROTOC", "protoc")
    plugin = _tool("GRPC_PYTHON_PLUGIN", "grpc_python_plugin")
    command = [protoc, "--proto_path=" + PROTO_ROOT, "--python_out=" + out_dir,
               "--grpc_python_out=" + out_dir, "--plugin=protoc-gen-grpc_python=" + plugin]
    result = subprocess.run(command + protos, cwd=PROTO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, universal_newlines=True)
    if result.returncode != 0:
        raise BuildError("%s failed:\n%s" % (" ".join(command + protos), result.stdout))
    # grpc_python_out writes a *_pb2_grpc.py for every file; keep those of
    # the files that declare a service (as the CMake build does).
    for proto in protos:
        with open(os.path.join(PROTO_ROOT, proto), encoding="utf-8") as f:
            has_service = re.search(r"^service\s", f.read(), re.MULTILINE)
        if not has_service:
            os.remove(os.path.join(out_dir, proto[:-len(".proto")] + "_pb2_grpc.py"))


def _package_files(version):
    """{path in the wheel: bytes} of the kerntune package."""
    files = {}
    for root, dirs, names in os.walk(PACKAGE_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, HERE).replace(os.sep, "/")] = f.read()
    if _from_source_tree():
        with open(os.path.join(PACKAGE_DIR, "_version.py.in"), encoding="utf-8") as f:
            files[NAME + "/_version.py"] = f.read().replace("@PROJECT_VERSION@",
                                                            version).encode()
        with tempfile.TemporaryDirectory() as out_dir:
            _generate_protos(out_dir)
            generated = os.path.join(out_dir, PROTO_PACKAGE)
            for name in sorted(os.listdir(generated)):
                with open(os.path.join(generated, name), "rb") as f:
                    files[PROTO_PACKAGE + "/" + name] = f.read()
    needed = [PROTO_PACKAGE + "/kerntune_pb2.py", PROTO_PACKAGE + "/kerntune_pb2_grpc.py",
              NAME + "/_version.py"]
    missing = [path for path in needed if path not in files]
    if missing:
        raise BuildError("%s has no %s: install from the source tree's client/python or a "
                         "bundle's python/" % (HERE, ", ".join(missing)))
    return files


def _dist_info(version):
    return "%s-%s.dist-info" % (NAME, version)


def _metadata_files(version):
    metadata = ["Metadata-Version: 2.1", "Name: " + NAME, "Version: " + version,
                "Summary: " + SUMMARY, "Requires-Python: " + REQUIRES_PYTHON]
    metadata += ["Requires-Dist: " + requirement for requirement in REQUIRES]
    wheel = ["Wheel-Version: 1.0", "Generator: kerntune_build", "Root-Is-Purelib: true",
             "Tag: " + TAG]
    info = _dist_info(version)
    return {info + "/METADATA": ("\n".join(metadata) + "\n").encode(),
            info + "/WHEEL": ("\n".join(wheel) + "\n").encode(),
            info + "/top_level.txt": (NAME + "\n").encode()}


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


# PEP 517 hooks.

def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    version = _version()
    for path, data in _metadata_files(version).items():
        target = os.path.join(metadata_directory, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)
    return _dist_info(version)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    files = _package_files(version)
    files.update(_metadata_files(version))
    record = _dist_info(version) + "/RECORD"
    lines = [_record_line(path, data) for path, data in files.items()] + [record + ",,"]
    files[record] = ("\n".join(lines) + "\n").encode()
    name = "%s-%s-%s.whl" % (NAME, version, TAG)
    os.makedirs(wheel_directory, exist_ok=True)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in files.items():
            # A fixed time: the same tree gives the same wheel.
            entry = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            entry.external_attr = 0o644 << 16
            wheel.writestr(entry, data, zipfile.ZIP_DEFLATED)
    return name
