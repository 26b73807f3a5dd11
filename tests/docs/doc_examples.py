#!/usr/bin/env python3
"""Every code example of the READMEs, run as written.

The fenced blocks of the given Markdown files are run by their language
against a `kerntuned --cpu` this script starts on the default socket
($XDG_RUNTIME_DIR/kerntune.sock, in a temp dir) with a tuning store at
$KERNTUNE_DB holding the shipped H100 configs:

  sh      bash -euo pipefail, `kerntune` and `kerntuned` of the build on PATH,
          in an empty working directory;
  python  a script of its own (PYTHONPATH = the build's Python package);
  cpp     a whole program, extracted at configure time (`extract-cpp`) and
          built against kt_daemon_client; the built source must still be
          the block's text;
  json    a tuned-config file: `kerntune configs import` must take it.

Untagged blocks (diagrams, usage synopses, sample output) are text. A block
that cannot run here says why in the comment line just before it:

  <!-- doc-test: skip (needs a GPU) -->
  <!-- doc-test: daemons (...) -->  every line starts a daemon, which must
                                     come up serving and stop on SIGTERM
                                     (its /tmp/ paths go to the temp dir)
  <!-- doc-test: in-process -->      a python block that loads the in-process
                                     runtime (kerntune.torch); skipped with
                                     --sanitized, whose instrumented library an
                                     uninstrumented python cannot load

Usage:
  doc_examples.py extract-cpp OUT_DIR FILE...   writes OUT_DIR/<name>.cc, prints the names
  doc_examples.py run --source-dir DIR --kerntune BIN --kerntuned BIN --pythonpath DIR
                      [--cpp NAME=BIN ...] [--sanitized] FILE...
"""

import argparse
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!--\s*doc-test:\s*([a-z-]+)\s*(?:\((.*)\))?\s*-->\s*$")
RUNNABLE = ("sh", "python", "cpp", "json")
MARKERS = ("skip", "daemons", "in-process")


class Block:
    def __init__(self, path, line, lang, text, marker, reason, index):
        self.path = path
        self.line = line  # of the opening fence, from 1
        self.lang = lang
        self.text = text
        self.marker = marker
        self.reason = reason
        self.index = index  # among the blocks of this language in the file

    def where(self):
        return "%s:%d (%s)" % (self.path, self.line, self.lang or "text")


def parse(path, label=None):
    """The fenced blocks of a Markdown file; ValueError for a malformed marker."""
    label = label or path
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, counts = [], {}
    pending = None  # (marker, reason, line) waiting for its block
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = MARKER.match(line)
        if marker:
            if marker.group(1) not in MARKERS:
                raise ValueError("%s:%d: unknown doc-test marker %r (know %s)"
                                 % (label, i + 1, marker.group(1), ", ".join(MARKERS)))
            if marker.group(1) == "skip" and not (marker.group(2) or "").strip():
                raise ValueError("%s:%d: doc-test: skip needs a reason in parentheses"
                                 % (label, i + 1))
            pending = (marker.group(1), (marker.group(2) or "").strip(), i + 1)
            i += 1
            continue
        fence = FENCE.match(line)
        if fence:
            lang = fence.group(1)
            start = i
            i += 1
            body = []
            while i < len(lines) and not FENCE.match(lines[i]):
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise ValueError("%s:%d: a code block that never ends" % (label, start + 1))
            index = counts.get(lang, 0)
            counts[lang] = index + 1
            marker_name, reason = (pending[0], pending[1]) if pending else (None, None)
            blocks.append(Block(label, start + 1, lang, "\n".join(body) + "\n", marker_name,
                                reason, index))
            pending = None
            i += 1
            continue
        if pending and line.strip():
            raise ValueError("%s:%d: doc-test marker not followed by a code block"
                             % (label, pending[2]))
        i += 1
    if pending:
        raise ValueError("%s:%d: doc-test marker at the end of the file" % (label, pending[2]))
    return blocks


def cpp_name(label, index):
    """kt_doc_example_<file>_<n>: the target and source name of a C++ block."""
    return "%s_%d" % (re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_").lower(), index)


def relative_label(path, source_dir):
    return os.path.relpath(os.path.abspath(path), os.path.abspath(source_dir))


def extract_cpp(out_dir, files, source_dir):
    os.makedirs(out_dir, exist_ok=True)
    names = []
    for path in files:
        label = relative_label(path, source_dir)
        for block in parse(path, label):
            if block.lang != "cpp" or block.marker == "skip":
                continue
            name = cpp_name(label, block.index)
            target = os.path.join(out_dir, name + ".cc")
            # Written only when changed, so a README edit elsewhere rebuilds nothing.
            old = None
            if os.path.exists(target):
                with open(target, encoding="utf-8") as f:
                    old = f.read()
            if old != block.text:
                with open(target, "w", encoding="utf-8") as f:
                    f.write(block.text)
            names.append(name)
    print(";".join(names), end="")


# -- running -------------------------------------------------------------------

def health_serving(target, timeout):
    """True once grpc.health.v1 answers SERVING (kerntuned_child.health)."""
    import grpc  # only the run needs it
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    os.pardir, "client", "python"))
    import kerntuned_child
    with grpc.insecure_channel(target) as channel:
        return kerntuned_child.health(channel, timeout=timeout,
                                      wait_for_ready=True) == kerntuned_child.SERVING


def wait_socket(path, process, timeout, log):
    end = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError("kerntuned exited with %s:\n%s" % (process.returncode, log()))
        try:
            mode = os.stat(path).st_mode
            if stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o660:
                return
        except FileNotFoundError:
            pass
        if time.monotonic() > end:
            raise RuntimeError("no socket at %s after %s s:\n%s" % (path, timeout, log()))
        time.sleep(0.02)


def die_with_parent():
    """In a daemon's child process: SIGTERM when the harness dies, so a killed
    test (a timeout, a closed pipe) leaves no daemon behind."""
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def stop(process, timeout=10):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


class Runner:
    def __init__(self, args):
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="kt_docs_")
        for sub in ("run", "home", "work", "store", "daemons"):
            os.makedirs(os.path.join(self.tmp, sub))
        env = dict(os.environ)
        for name in ("XDG_DATA_HOME", "KERNTUNE_DB"):
            env.pop(name, None)
        env.update({
            "PATH": os.pathsep.join([os.path.dirname(os.path.abspath(args.kerntune)),
                                     os.path.dirname(os.path.abspath(args.kerntuned)),
                                     env.get("PATH", "/usr/bin:/bin")]),
            "XDG_RUNTIME_DIR": os.path.join(self.tmp, "run"),
            "HOME": os.path.join(self.tmp, "home"),
            "KERNTUNE_DB": os.path.join(self.tmp, "store", "tuning.db"),
            "PYTHONPATH": args.pythonpath,
            "PYTHONDONTWRITEBYTECODE": "1",
        })
        self.env = env
        self.cpp = dict(item.split("=", 1) for item in args.cpp)
        self.daemon = None
        self.daemon_log = os.path.join(self.tmp, "kerntuned.log")
        self.failures = []

    def log(self):
        with open(self.daemon_log, "rb") as f:
            return f.read().decode(errors="replace")

    def start(self):
        # The store the CLI examples read: the shipped H100 configs, imported.
        subprocess.run([self.args.kerntune, "configs", "import",
                        os.path.join(self.args.source_dir, "deploy", "configs", "h100.json")],
                       env=self.env, check=True, stdout=subprocess.DEVNULL)
        with open(self.daemon_log, "wb") as log:
            self.daemon = subprocess.Popen([self.args.kerntuned, "--cpu"], env=self.env,
                                           stdout=log, stderr=subprocess.STDOUT,
                                           preexec_fn=die_with_parent)
        socket = os.path.join(self.tmp, "run", "kerntune.sock")
        wait_socket(socket, self.daemon, 20, self.log)
        if not health_serving("unix:" + socket, 20):
            raise RuntimeError("kerntuned is not SERVING:\n" + self.log())

    def finish(self):
        if self.daemon is not None and stop(self.daemon) != 0:
            self.failures.append("the daemon did not stop cleanly:\n" + self.log())
        if self.failures:
            print("kept for a look: " + self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def check(self, block, command, **kwargs):
        kwargs.setdefault("cwd", os.path.join(self.tmp, "work"))
        kwargs.setdefault("env", self.env)
        started = time.monotonic()
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                timeout=300, **kwargs)
        output = result.stdout.decode(errors="replace")
        print("---- %s: exit %d in %.1f s\n%s" % (block.where(), result.returncode,
                                                  time.monotonic() - started, output))
        if result.returncode != 0:
            self.failures.append("%s exited %d:\n%s%s" % (block.where(), result.returncode,
                                                          block.text, output))

    def run_daemons(self, block):
        run_dir = os.path.join(self.tmp, "daemons", "run")
        os.makedirs(run_dir, exist_ok=True)
        env = dict(self.env, XDG_RUNTIME_DIR=run_dir)  # the test's daemon holds the default
        for n, line in enumerate(block.text.split("\n")):
            command = line.split("#", 1)[0].strip()
            if not command:
                continue
            command = command.replace("/tmp/", os.path.join(self.tmp, "daemons") + "/")
            log_path = os.path.join(self.tmp, "daemons", "%d.log" % n)
            with open(log_path, "wb") as log:
                process = subprocess.Popen(["bash", "-c", "exec " + command], env=env,
                                           cwd=os.path.join(self.tmp, "work"), stdout=log,
                                           stderr=subprocess.STDOUT,
                                           preexec_fn=die_with_parent)
            end = time.monotonic() + 20
            text = ""
            while time.monotonic() < end and process.poll() is None:
                with open(log_path, "rb") as f:
                    text = f.read().decode(errors="replace")
                if "kerntuned: serving on" in text:
                    break
                time.sleep(0.05)
            code = stop(process)
            with open(log_path, "rb") as f:
                text = f.read().decode(errors="replace")
            print("---- %s: `%s` exit %s\n%s" % (block.where(), command, code, text))
            if "kerntuned: serving on" not in text or code != 0:
                self.failures.append("%s: `%s` did not serve and stop cleanly (exit %s):\n%s"
                                     % (block.where(), command, code, text))

    def run_block(self, block):
        work = os.path.join(self.tmp, "work")
        if block.marker == "daemons":
            self.run_daemons(block)
        elif block.lang == "sh":
            self.check(block, ["bash", "-euo", "pipefail", "-c", block.text])
        elif block.lang == "python":
            script = os.path.join(work, "%s.py" % cpp_name(block.path, block.index))
            with open(script, "w", encoding="utf-8") as f:
                f.write(block.text)
            self.check(block, [sys.executable, script])
        elif block.lang == "json":
            path = os.path.join(work, "%s.json" % cpp_name(block.path, block.index))
            with open(path, "w", encoding="utf-8") as f:
                f.write(block.text)
            self.check(block, [self.args.kerntune, "configs", "import", path,
                               "--db=" + os.path.join(self.tmp, "store", "json_blocks.db")])
        elif block.lang == "cpp":
            name = cpp_name(block.path, block.index)
            binary = self.cpp.get(name)
            if binary is None:
                self.failures.append("%s: no program %s was built (re-run cmake)"
                                     % (block.where(), name))
                return
            source = os.path.join(self.args.cpp_dir, name + ".cc")
            with open(source, encoding="utf-8") as f:
                if f.read() != block.text:
                    self.failures.append("%s: %s was built from an older text (re-run cmake "
                                         "and rebuild)" % (block.where(), source))
                    return
            self.check(block, [binary])

    def run(self, files):
        self.start()
        ran = skipped = 0
        for path in files:
            label = relative_label(path, self.args.source_dir)
            for block in parse(path, label):
                if block.lang not in RUNNABLE:
                    continue
                if block.marker == "skip":
                    print("---- %s: skipped: %s" % (block.where(), block.reason))
                    skipped += 1
                    continue
                if block.marker == "in-process" and self.args.sanitized:
                    print("---- %s: skipped: a sanitizer build's libkerntune_runtime.so does "
                          "not load into an uninstrumented python" % block.where())
                    skipped += 1
                    continue
                ran += 1
                self.run_block(block)
        if self.daemon.poll() is not None:
            self.failures.append("the test's kerntuned exited:\n" + self.log())
        self.finish()
        print("%d examples run, %d skipped with a reason, %d failed"
              % (ran, skipped, len(self.failures)))
        for failure in self.failures:
            print("FAIL: " + failure)
        return 1 if self.failures or ran == 0 else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    extract = sub.add_parser("extract-cpp")
    extract.add_argument("--source-dir", required=True)
    extract.add_argument("out_dir")
    extract.add_argument("files", nargs="+")
    run = sub.add_parser("run")
    run.add_argument("--source-dir", required=True)
    run.add_argument("--kerntune", required=True)
    run.add_argument("--kerntuned", required=True)
    run.add_argument("--pythonpath", required=True)
    run.add_argument("--cpp-dir", default="")
    run.add_argument("--cpp", action="append", default=[], metavar="NAME=BINARY")
    run.add_argument("--sanitized", action="store_true",
                     help="the build is sanitizer-instrumented: skip in-process blocks")
    run.add_argument("files", nargs="+")
    args = parser.parse_args()
    if args.command == "extract-cpp":
        extract_cpp(args.out_dir, args.files, args.source_dir)
        return 0
    return Runner(args).run(args.files)


if __name__ == "__main__":
    sys.exit(main())
