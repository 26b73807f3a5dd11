"""`python3 -m kerntune status`: ask a kerntuned how it is, from Python.

The C++ `kerntune` CLI has every verb; this one is there so that a host with
only the Python package can check its daemon (and its installation):
exit 0 when the daemon answered, 1 when it could not be reached or refused,
2 for a bad command line.
"""

import argparse
import dataclasses
import json
import sys

import kerntune


def _plural(count, one, many):
    return "%d %s" % (count, one if count == 1 else many)


def _status_lines(target, s):
    lines = [("kerntuned", "%s (kernels %s) at %s" % (s.version, s.kernel_library_version,
                                                      target)),
             ("backend", "%s: %s%s" % (s.backend, s.backend_reason,
                                       " (%s)" % s.backend_note if s.backend_note else ""))]
    if not s.devices:
        lines.append(("devices", "none"))
    for i, d in enumerate(s.devices):
        lines.append(("devices" if i == 0 else "",
                      "%d: %s, cc %d.%d, %d SMs%s" % (d.ordinal, d.sku.name, d.sku.cc_major,
                                                      d.sku.cc_minor, d.sku.sm_count,
                                                      ", " + d.uuid if d.uuid else "")))
    lines.append(("tuned", "%s from %s" % (_plural(s.tuned_entries, "entry", "entries"),
                                           s.database_path or "(no store)")))
    lines.append(("shipped", "%s from %s" % (_plural(s.shipped_entries, "entry", "entries"),
                                             ", ".join(s.shipped_config_files))
                  if s.shipped_config_files else "none loaded"))
    lines.append(("buffers", "%d registered, %d bytes, owned by %s" % (
        s.registered_buffers, s.registered_bytes,
        _plural(s.buffer_owners, "process", "processes"))))
    lines.append(("cuda ipc", "supported; %s open" % _plural(s.open_ipc_mappings, "mapping",
                                                              "mappings")
                  if s.cuda_ipc_supported else "not supported by this backend"))
    lines.append(("uptime", "%d s" % s.uptime_seconds))
    return lines


def _status(args):
    with kerntune.Client(args.server, timeout=args.timeout) as client:
        # An unreachable daemon's message names this command's flag, not
        # the Python API's argument.
        client.NAME_ANOTHER_DAEMON = "pass --server=unix:PATH with the --socket it listens on"
        status = client.status()
        if args.json:
            print(json.dumps(dict(dataclasses.asdict(status), target=client.target), indent=1))
            return 0
        lines = _status_lines(client.target, status)
    width = max(len(label) for label, _ in lines) + 1
    for label, text in lines:
        print("%-*s %s" % (width, label + ":" if label else "", text))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python3 -m kerntune",
        description="The kerntune Python client (%s). The C++ `kerntune` CLI has the other "
                    "verbs." % kerntune.__version__)
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    status = verbs.add_parser("status", help="the daemon's backend, devices, configs and buffers")
    status.add_argument("--server", default=None,
                        help="unix:/path/kerntune.sock, /path/kerntune.sock or host:port "
                             "(default %s)" % kerntune.default_target())
    status.add_argument("--timeout", type=float, default=10.0,
                        help="seconds to wait for the answer (default 10)")
    status.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args(argv)
    try:
        return _status(args)
    except kerntune.KernTuneError as error:
        target = args.server or kerntune.default_target()
        if isinstance(error, kerntune.UnavailableError) and error.message.startswith("unix:"):
            # The client's own: the socket it tried and what to do, in this
            # command's words (_status).
            print("kerntune: %s" % error.message, file=sys.stderr)
        else:
            print("kerntune: %s: %s" % (target, error), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
