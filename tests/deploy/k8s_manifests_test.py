"""deploy/k8s, checked without a cluster (none is at hand, and kubectl's
client-side dry run needs an API server to map kinds).

Static: every manifest parses (python3-yaml), has what its kind needs, and
the manifests agree with each other (selectors, service accounts, the
ConfigMap the Job patches and the DaemonSet mounts, the RBAC that allows
exactly that, the socket directory and group of the daemon and its
clients, the metrics port and its annotations, the image build_image.sh
makes, and only flags kerntuned has).

Functional, with this build's kerntuned and kerntune and paths moved into a
temporary directory: the tuning Job's script (its `kerntune tune` stood in
for by an import of the shipped H100 configs) publishes to a fake API
server; what it sent, laid out as the kubelet lays out a ConfigMap volume,
is imported by the DaemonSet's init container; kerntuned runs with the
DaemonSet's arguments, and its probes pass while it serves and fail once it
stopped.

    k8s_manifests_test.py SOURCE_DIR KERNTUNED KERNTUNE
"""

import glob
import http.server
import json
import os
import re
import shutil
import signal
import socket as socket_module
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

import yaml

SOURCE, KERNTUNED, KERNTUNE = sys.argv[1:4]
K8S = os.path.join(SOURCE, "deploy", "k8s")
NAMESPACE = "kerntune"
API_VERSIONS = {
    "Namespace": "v1", "ServiceAccount": "v1", "ConfigMap": "v1", "Pod": "v1",
    "Role": "rbac.authorization.k8s.io/v1", "RoleBinding": "rbac.authorization.k8s.io/v1",
    "DaemonSet": "apps/v1", "Job": "batch/v1",
}


def load_manifests():
    docs = {}
    for path in sorted(glob.glob(os.path.join(K8S, "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if doc is None:
                    continue
                key = (doc.get("kind"), (doc.get("metadata") or {}).get("name"))
                assert key not in docs, "%s: %s defined twice" % (path, key)
                docs[key] = dict(doc, _file=os.path.basename(path))
    return docs


DOCS = load_manifests()


def one(kind):
    found = [doc for (k, _), doc in DOCS.items() if k == kind]
    assert len(found) == 1, "expected one %s, found %d" % (kind, len(found))
    return found[0]


def container(pod_spec, name, init=False):
    containers = pod_spec.get("initContainers" if init else "containers") or []
    for c in containers:
        if c["name"] == name:
            return c
    raise AssertionError("no container %s" % name)


def project_version():
    with open(os.path.join(SOURCE, "CMakeLists.txt"), encoding="utf-8") as f:
        return re.search(r"project\(kerntune VERSION ([0-9.]+)", f.read()).group(1)


def daemon_spec():
    return one("DaemonSet")["spec"]["template"]["spec"]


def job_spec():
    return one("Job")["spec"]["template"]["spec"]


def flag_value(args, name):
    for arg in args:
        if arg.startswith("--%s=" % name):
            return arg.split("=", 1)[1]
    raise AssertionError("no --%s in %s" % (name, args))


class Static(unittest.TestCase):
    def test_every_manifest_has_kind_name_and_namespace(self):
        self.assertTrue(DOCS)
        for (kind, name), doc in DOCS.items():
            where = "%s %s (%s)" % (kind, name, doc["_file"])
            self.assertIn(kind, API_VERSIONS, where)
            self.assertEqual(doc.get("apiVersion"), API_VERSIONS[kind], where)
            self.assertTrue(name, where)
            if kind != "Namespace":
                self.assertEqual(doc["metadata"].get("namespace"), NAMESPACE, where)

    def test_namespace_allows_host_pid_and_host_paths(self):
        labels = DOCS[("Namespace", NAMESPACE)]["metadata"]["labels"]
        self.assertEqual(labels["pod-security.kubernetes.io/enforce"], "privileged")

    def test_images_are_the_one_build_image_makes(self):
        image = "localhost/kerntune:" + project_version()
        with open(os.path.join(SOURCE, "deploy", "container", "build_image.sh")) as f:
            self.assertIn("${IMAGE_NAME:-localhost/kerntune}", f.read())
        for (kind, name), doc in DOCS.items():
            spec = {"DaemonSet": lambda: daemon_spec(), "Job": lambda: job_spec(),
                    "Pod": lambda: doc["spec"]}.get(kind)
            if spec is None:
                continue
            for c in spec().get("initContainers", []) + spec()["containers"]:
                self.assertEqual(c["image"], image, "%s %s: %s" % (kind, name, c["name"]))

    def test_daemonset_selector_and_service_account(self):
        ds = one("DaemonSet")
        labels = ds["spec"]["template"]["metadata"]["labels"]
        for key, value in ds["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(labels.get(key), value)
        spec = daemon_spec()
        self.assertIn(("ServiceAccount", spec["serviceAccountName"]), DOCS)
        self.assertIs(spec["automountServiceAccountToken"], False)

    def test_daemonset_shares_the_socket_directory_and_host_pids(self):
        spec = daemon_spec()
        self.assertIs(spec["hostPID"], True)
        self.assertIs(spec["hostIPC"], True)
        daemon = container(spec, "kerntuned")
        socket = flag_value(daemon["args"], "socket")
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in daemon["volumeMounts"]}
        socket_dir = os.path.dirname(socket)
        self.assertIn(socket_dir, mounts)
        self.assertEqual(volumes[mounts[socket_dir]]["hostPath"]["path"], socket_dir)
        client = DOCS[("Pod", "kerntune-example-client")]["spec"]
        client_volume = client["volumes"][0]["hostPath"]["path"]
        self.assertEqual(client_volume, socket_dir)
        self.assertIn("--server=unix:" + socket, client["containers"][0]["command"])
        self.assertIn(spec["securityContext"]["runAsGroup"],
                      client["securityContext"]["supplementalGroups"])

    def test_daemonset_gets_every_gpu_from_the_runtime_not_the_device_plugin(self):
        spec = daemon_spec()
        daemon = container(spec, "kerntuned")
        self.assertEqual(spec["runtimeClassName"], "nvidia")
        env = {e["name"]: e["value"] for e in daemon["env"]}
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], "all")
        self.assertNotIn("nvidia.com/gpu", json.dumps(daemon.get("resources", {})))
        self.assertEqual(daemon["securityContext"]["capabilities"]["add"], ["DAC_OVERRIDE"])

    def test_daemonset_probes_ask_the_daemon_on_its_socket(self):
        daemon = container(daemon_spec(), "kerntuned")
        socket = flag_value(daemon["args"], "socket")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            command = daemon[probe]["exec"]["command"]
            self.assertEqual(command, ["kerntune", "status", "--server=unix:" + socket], probe)

    def test_daemonset_metrics_port_is_annotated(self):
        annotations = one("DaemonSet")["spec"]["template"]["metadata"]["annotations"]
        ports = {p["name"]: p["containerPort"]
                 for p in container(daemon_spec(), "kerntuned")["ports"]}
        self.assertEqual(annotations["prometheus.io/scrape"], "true")
        self.assertEqual(annotations["prometheus.io/port"], str(ports["metrics"]))
        self.assertEqual(ports["metrics"], 9464)

    def test_daemonset_imports_the_configmap_into_its_store(self):
        spec = daemon_spec()
        volumes = {v["name"]: v for v in spec["volumes"]}
        init = container(spec, "import-configs", init=True)
        daemon = container(spec, "kerntuned")
        init_mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
        daemon_mounts = {m["name"]: m["mountPath"] for m in daemon["volumeMounts"]}
        configmap = [n for n, v in volumes.items() if "configMap" in v]
        self.assertEqual(len(configmap), 1)
        self.assertIn(("ConfigMap", volumes[configmap[0]]["configMap"]["name"]), DOCS)
        script = init["args"][0]
        self.assertIn(init_mounts[configmap[0]] + "/*.json", script)
        db = flag_value(daemon["args"], "db")
        self.assertIn("--db=" + db, script)
        store = [n for n, path in daemon_mounts.items() if db.startswith(path + "/")]
        self.assertEqual(len(store), 1)
        self.assertEqual(init_mounts[store[0]], daemon_mounts[store[0]])
        self.assertIn("emptyDir", volumes[store[0]])

    def test_daemonset_passes_only_flags_kerntuned_has(self):
        helpfull = subprocess.run([KERNTUNED, "--helpfull"], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, universal_newlines=True).stdout
        for arg in container(daemon_spec(), "kerntuned")["args"]:
            name = re.match(r"--([a-z_]+)=", arg).group(1)
            self.assertRegex(helpfull, r"\n\s+--%s \(" % name)

    def test_job_runs_on_one_sku_with_a_gpu_of_its_own(self):
        spec = job_spec()
        self.assertEqual(list(spec["nodeSelector"]), ["nvidia.com/gpu.product"])
        tune = container(spec, "tune")
        self.assertGreaterEqual(int(tune["resources"]["limits"]["nvidia.com/gpu"]), 1)
        self.assertEqual(spec["restartPolicy"], "OnFailure")
        volumes = {v["name"]: v for v in spec["volumes"]}
        for mount in tune["volumeMounts"]:
            self.assertIn("emptyDir", volumes[mount["name"]])

    def test_job_may_patch_exactly_its_configmap(self):
        spec = job_spec()
        account = spec["serviceAccountName"]
        script = container(spec, "tune")["args"][0]
        configmap = re.search(r"kerntune-publish-configmap --configmap=(\S+)", script).group(1)
        self.assertIn(("ConfigMap", configmap), DOCS)
        bindings = [d for (k, _), d in DOCS.items() if k == "RoleBinding"
                    and {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
                    in d["subjects"]]
        self.assertEqual(len(bindings), 1)
        role = DOCS[("Role", bindings[0]["roleRef"]["name"])]
        self.assertEqual(role["rules"], [{"apiGroups": [""], "resources": ["configmaps"],
                                          "resourceNames": [configmap], "verbs": ["patch"]}])


class FakeApiServer(http.server.BaseHTTPRequestHandler):
    """Answers every PATCH with `status` and keeps what it was sent."""
    requests = []
    status = 200

    def do_PATCH(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        FakeApiServer.requests.append((self.command, self.path, dict(self.headers), body))
        self.send_response(FakeApiServer.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if FakeApiServer.status >= 400:
            self.wfile.write(json.dumps({"kind": "Status", "message": "forbidden here"}).encode())
        else:
            self.wfile.write(body)

    def log_message(self, *args):
        pass


class Functional(unittest.TestCase):
    """The manifests' scripts and arguments, run with /run/kerntune,
    /var/lib/kerntune, /etc/kerntune/configs and /work moved under a
    temporary directory."""

    def setUp(self):
        self.work = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.work)
        self.moved = {}
        for path in ("/run/kerntune", "/var/lib/kerntune", "/etc/kerntune/configs", "/work"):
            self.moved[path] = os.path.join(self.work, path.strip("/").replace("/", "_"))
            os.makedirs(self.moved[path])
        # PATH: the build's programs, the publisher, and a `kerntune` whose
        # `tune` imports the shipped H100 configs instead of timing a GPU.
        self.bin = os.path.join(self.work, "bin")
        os.makedirs(self.bin)
        os.symlink(os.path.abspath(KERNTUNED), os.path.join(self.bin, "kerntuned"))
        os.symlink(os.path.join(K8S, "kerntune-publish-configmap"),
                   os.path.join(self.bin, "kerntune-publish-configmap"))
        shim = os.path.join(self.bin, "kerntune")
        with open(shim, "w") as f:
            f.write('#!/bin/sh\nif [ "$1" = tune ]; then\n  shift\n'
                    '  exec "%s" configs import "$@" "%s" > /dev/null\nfi\nexec "%s" "$@"\n'
                    % (os.path.abspath(KERNTUNE), self.h100_json(), os.path.abspath(KERNTUNE)))
        os.chmod(shim, 0o755)
        self.env = dict(os.environ, PATH=self.bin + ":" + os.environ["PATH"])
        self.env.pop("XDG_RUNTIME_DIR", None)
        FakeApiServer.requests = []
        FakeApiServer.status = 200
        self.server = http.server.HTTPServer(("127.0.0.1", 0), FakeApiServer)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)
        self.token = os.path.join(self.work, "token")
        with open(self.token, "w") as f:
            f.write("test-token\n")

    @staticmethod
    def h100_json():
        return os.path.join(SOURCE, "deploy", "configs", "h100.json")

    def move(self, text):
        for path, moved in self.moved.items():
            text = text.replace(path, moved)
        return text

    def publisher_flags(self):
        return "--api-server=http://127.0.0.1:%d --token-file=%s --namespace=%s" % (
            self.server.server_port, self.token, NAMESPACE)

    def run_job(self):
        script = self.move(container(job_spec(), "tune")["args"][0]).replace(
            "kerntune-publish-configmap ", "kerntune-publish-configmap %s " % self.publisher_flags())
        return subprocess.run(["/bin/sh", "-ec", script], env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True)

    def configmap_volume(self, data):
        """data laid out as the kubelet mounts a ConfigMap: key -> ..data/key."""
        root = self.moved["/etc/kerntune/configs"]
        stamp = os.path.join(root, "..2026_11_26_00_00_00.000000001")
        os.makedirs(stamp)
        for key, value in data.items():
            with open(os.path.join(stamp, key), "w") as f:
                f.write(value)
        os.symlink(os.path.basename(stamp), os.path.join(root, "..data"))
        for key in data:
            os.symlink(os.path.join("..data", key), os.path.join(root, key))

    def test_job_publishes_and_the_daemonset_imports_and_serves(self):
        result = self.run_job()
        self.assertEqual(result.returncode, 0, result.stdout)
        self.assertEqual(len(FakeApiServer.requests), 1)
        method, path, headers, body = FakeApiServer.requests[0]
        url = urllib.parse.urlparse(path)
        query = urllib.parse.parse_qs(url.query)
        self.assertEqual(method, "PATCH")
        self.assertEqual(url.path, "/api/v1/namespaces/kerntune/configmaps/kerntune-configs")
        self.assertEqual(query, {"fieldManager": ["kerntune-publish-nvidia-h100-80gb-hbm3"],
                                 "force": ["true"]})
        self.assertEqual(headers["Authorization"], "Bearer test-token")
        self.assertEqual(headers["Content-Type"], "application/apply-patch+yaml")
        sent = json.loads(body)
        self.assertEqual((sent["kind"], sent["metadata"]["name"]), ("ConfigMap", "kerntune-configs"))
        self.assertEqual(list(sent["data"]), ["nvidia-h100-80gb-hbm3.json"])
        with open(self.h100_json()) as f:
            shipped = json.load(f)
        published = json.loads(sent["data"]["nvidia-h100-80gb-hbm3.json"])
        self.assertEqual(published["gpu"], shipped["gpu"])
        self.assertEqual(len(published["configs"]), len(shipped["configs"]))

        # The DaemonSet's init container on that ConfigMap.
        self.configmap_volume(sent["data"])
        spec = daemon_spec()
        init = subprocess.run(["/bin/sh", "-c", self.move(container(spec, "import-configs",
                                                                    init=True)["args"][0])],
                              env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True)
        self.assertEqual(init.returncode, 0, init.stdout)
        self.assertNotIn("exited", init.stdout)
        db = self.move(flag_value(container(spec, "kerntuned")["args"], "db"))
        gpus = json.loads(subprocess.run([KERNTUNE, "gpus", "--db=" + db, "--format=json"],
                                         stdout=subprocess.PIPE, check=True).stdout)
        self.assertEqual([g["name"] for g in gpus], [shipped["gpu"]["name"]])

        # kerntuned with the DaemonSet's arguments, and its probes.
        daemon = container(spec, "kerntuned")
        socket = self.move(flag_value(daemon["args"], "socket"))
        # Its metrics on a free loopback port rather than the pod's 0.0.0.0:9464,
        # which another daemon of this machine may hold.
        with socket_module.socket() as free:
            free.bind(("127.0.0.1", 0))
            metrics = "127.0.0.1:%d" % free.getsockname()[1]
        flag_value(daemon["args"], "metrics_address")
        args = ["--metrics_address=" + metrics if a.startswith("--metrics_address=")
                else self.move(a) for a in daemon["args"]]
        process = subprocess.Popen([KERNTUNED] + args,
                                   env=self.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, universal_newlines=True)
        try:
            deadline = time.time() + 20
            while not os.path.exists(socket) and process.poll() is None and time.time() < deadline:
                time.sleep(0.1)
            self.assertTrue(os.path.exists(socket), "kerntuned made no socket")
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                command = [self.move(a) for a in daemon[probe]["exec"]["command"]]
                result = subprocess.run(command, env=self.env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, universal_newlines=True,
                                        timeout=daemon[probe]["timeoutSeconds"])
                self.assertEqual(result.returncode, 0, probe + ": " + result.stdout)
                self.assertIn(db, result.stdout)
            annotations = one("DaemonSet")["spec"]["template"]["metadata"]["annotations"]
            path = annotations["prometheus.io/path"]
            with urllib.request.urlopen("http://" + metrics + path, timeout=10) as reply:
                self.assertIn("kerntune_build_info", reply.read().decode())
        finally:
            process.send_signal(signal.SIGTERM)
            log = process.communicate(timeout=30)[0]
        self.assertEqual(process.returncode, 0, log)
        command = [self.move(a) for a in daemon["livenessProbe"]["exec"]["command"]]
        stopped = subprocess.run(command, env=self.env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, universal_newlines=True, timeout=10)
        self.assertNotEqual(stopped.returncode, 0, "the probe passed with no daemon")

    def test_publisher_reports_a_refusal(self):
        FakeApiServer.status = 403
        result = self.run_job()
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("HTTP 403: forbidden here", result.stdout)

    def test_publisher_refuses_a_file_that_is_not_an_export(self):
        for text in ("{\"format\": \"something else\"}", "not json"):
            path = os.path.join(self.work, "bad.json")
            with open(path, "w") as f:
                f.write(text)
            result = subprocess.run(
                [os.path.join(self.bin, "kerntune-publish-configmap")]
                + self.publisher_flags().split() + [path],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
            self.assertEqual(result.returncode, 1, result.stdout)
        self.assertEqual(FakeApiServer.requests, [])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
