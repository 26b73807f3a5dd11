// scratch: small Run round trips through the queue on a CPU-backend daemon.
#include <algorithm>
#include <string>
#include <chrono>
#include <cstdio>
#include <vector>
#include "client/daemon_client.h"
#include "client/shared_memory.h"
using namespace kt::client;
int main(int argc, char** argv) {
  DaemonClientOptions options;
  options.target = argv[1];
  options.use_queue = argc < 4 || std::string(argv[3]) != "grpc";
  const double gap_us = argc >= 4 && std::string(argv[3]) != "grpc" ? atof(argv[3]) : 0;
  int n = atoi(argv[2]);
  auto client = DaemonClient::Connect(options);
  if (!client.ok()) { fprintf(stderr, "%s\n", client.status().ToString().c_str()); return 1; }
  auto shm = SharedMemory::Create(1 << 16);
  auto buffer = client->RegisterHostShm(shm->name(), 0, 0, "");
  if (!buffer.ok()) { fprintf(stderr, "%s\n", buffer.status().ToString().c_str()); return 1; }
  RunArgs args;
  args.op = kerntune::v1::OP_SOFTMAX;
  args.dtype = kerntune::v1::DTYPE_FLOAT16;
  args.rows = 1; args.cols = 64;
  args.input = buffer->Tensor(0);
  args.output = buffer->Output(8192);
  std::vector<double> t; t.reserve(n);
  double handler = 0;
  for (int i = 0; i < n; ++i) {
    { auto g = std::chrono::steady_clock::now(); while (std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - g).count() < gap_us) {} }
    auto s = std::chrono::steady_clock::now();
    auto r = client->Run(args);
    auto e = std::chrono::steady_clock::now();
    if (!r.ok()) { fprintf(stderr, "%s\n", r.status().ToString().c_str()); return 1; }
    handler += r->server_timing().handler_us();
    t.push_back(std::chrono::duration<double, std::micro>(e - s).count());
  }
  std::sort(t.begin(), t.end());
  printf("p50 %.2f p99 %.2f handler avg %.2f\n", t[n/2], t[n*99/100], handler / n);
}
