// How fast are the collectives? Time and bus bandwidth of broadcast,
// all_reduce, reduce_scatter and all_gather at 8 KiB to 128 MiB on p ranks,
// for the procs backend (forked here) and, in the same run, under mpirun:
// the mpi backend and OpenMPI's own MPI_Bcast, MPI_Allreduce,
// MPI_Reduce_scatter_block and MPI_Allgather, as the peer.
//
// A plain program, not Google Benchmark: every rank must run exactly the
// same number of iterations (timing.h says how each call is timed, for
// every backend alike).
//
// Bus bandwidth as nccl-tests define it, from the full buffer's bytes S and
// time t: all_reduce S/t · 2(p−1)/p; reduce_scatter and all_gather
// S/t · (p−1)/p; broadcast S/t.
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "timing.h"
#include "tinyllm/distributed/chunk.h"
#include "tinyllm/distributed/procs_comm.h"
#ifdef TINYLLM_WITH_MPI
#include <mpi.h>

#include "tinyllm/distributed/mpi_comm.h"
#endif

namespace {

using tinyllm::bench::seconds_per_call;
using tinyllm::dist::chunk_bounds;
using tinyllm::dist::Comm;
using tinyllm::dist::ReduceOp;

const std::vector<std::string> kOps = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
std::vector<std::size_t> kSizes = {std::size_t{8} << 10, std::size_t{1} << 20, std::size_t{16} << 20,
                                   std::size_t{128} << 20};

int iterations(std::size_t bytes) { return static_cast<int>(std::clamp<std::size_t>((512u << 20) / bytes, 5, 2000)); }

double bus_factor(const std::string& op, int p) {
  if (op == "all_reduce") return 2.0 * (p - 1) / p;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(p - 1) / p;
}

// Runs every (op, size) on one rank of `comm`, calling report(op, bytes, s) on rank 0.
void time_comm(Comm& comm, const std::function<void(const std::string&, std::size_t, double)>& report) {
  const int p = comm.size(), r = comm.rank();
  for (std::size_t bytes : kSizes) {
    const std::size_t n = bytes / sizeof(double);
    auto [a, b] = chunk_bounds(n, p, r);
    std::vector<double> buf(n, 1.0 + r), chunk(b - a, 1.0);
    const std::map<std::string, std::function<void()>> calls = {
        {"all_reduce", [&] { comm.all_reduce(buf, ReduceOp::Sum); }},
        {"reduce_scatter", [&] { comm.reduce_scatter(buf, chunk, ReduceOp::Sum); }},
        {"all_gather", [&] { comm.all_gather(chunk, buf); }},
        {"broadcast", [&] { comm.broadcast(buf, 0); }},
    };
    for (const std::string& op : kOps) {
      const double s = seconds_per_call(
          iterations(bytes), [&] { comm.barrier(); }, calls.at(op));
      if (r == 0) report(op, bytes, s);
    }
  }
}

#ifdef TINYLLM_WITH_MPI
// Under mpirun: OpenMPI's own collectives, then the mpi backend; rank 0
// prints "<backend> <op> <bytes> <seconds>" lines for the parent to read.
int mpi_peer() {
  tinyllm::dist::MpiSession session;
  int p = 0, r = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  auto barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
  for (std::size_t bytes : kSizes) {
    const int n = static_cast<int>(bytes / sizeof(double));
    std::vector<double> buf(static_cast<std::size_t>(n), 1.0 + r), chunk(static_cast<std::size_t>(n / p), 1.0);
    const std::map<std::string, std::function<void()>> calls = {
        {"all_reduce", [&] { MPI_Allreduce(MPI_IN_PLACE, buf.data(), n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); }},
        {"reduce_scatter",
         [&] { MPI_Reduce_scatter_block(buf.data(), chunk.data(), n / p, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); }},
        {"all_gather",
         [&] { MPI_Allgather(chunk.data(), n / p, MPI_DOUBLE, buf.data(), n / p, MPI_DOUBLE, MPI_COMM_WORLD); }},
        {"broadcast", [&] { MPI_Bcast(buf.data(), n, MPI_DOUBLE, 0, MPI_COMM_WORLD); }},
    };
    for (const std::string& op : kOps) {
      const double s = seconds_per_call(iterations(bytes), barrier, calls.at(op));
      if (r == 0) std::printf("openmpi %s %zu %.9g\n", op.c_str(), bytes, s);
    }
  }
  tinyllm::dist::MpiComm comm(MPI_COMM_WORLD);
  time_comm(comm, [](const std::string& op, std::size_t bytes, double s) {
    std::printf("mpi %s %zu %.9g\n", op.c_str(), bytes, s);
  });
  std::fflush(stdout);
  return 0;
}
#endif

using Results = std::map<std::string, double>;  // "<backend> <op> <bytes>" -> seconds

std::string key(const std::string& backend, const std::string& op, std::size_t bytes) {
  return fmt::format("{} {} {}", backend, op, bytes);
}

// The procs backend, forked here; rank 0 writes its timings to memory the
// parent shares.
void time_procs(int p, tinyllm::dist::CommOptions options, Results& results) {
  const std::size_t slots = kOps.size() * kSizes.size();
  void* memory = mmap(nullptr, slots * sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) throw std::runtime_error("mmap failed");
  double* seconds = static_cast<double*>(memory);
  tinyllm::dist::run_procs(
      p,
      [&](Comm& comm) {
        std::size_t slot = 0;
        time_comm(comm, [&](const std::string&, std::size_t, double s) { seconds[slot++] = s; });
      },
      options);
  std::size_t slot = 0;
  for (std::size_t bytes : kSizes) {
    for (const std::string& op : kOps) results[key("procs", op, bytes)] = seconds[slot++];
  }
  munmap(memory, slots * sizeof(double));
}

#ifdef TINYLLM_WITH_MPI
void time_mpi(int p, Results& results) {
  const std::string command = fmt::format(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 {} -n {} --oversubscribe /proc/{}/exe --mpi-peer",
      TINYLLM_MPIEXEC, p, getpid());
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + command);
  char line[256];
  while (std::fgets(line, sizeof line, pipe)) {
    char backend[32], op[32];
    std::size_t bytes = 0;
    double s = 0;
    if (std::sscanf(line, "%31s %31s %zu %lf", backend, op, &bytes, &s) == 4) results[key(backend, op, bytes)] = s;
  }
  if (pclose(pipe) != 0) throw std::runtime_error("the MPI peer failed: " + command);
}
#endif

std::string size_name(std::size_t bytes) {
  return bytes >= (1u << 20) ? fmt::format("{} MiB", bytes >> 20) : fmt::format("{} KiB", bytes >> 10);
}

void print_table(int p, const Results& results) {
  std::printf("\np = %d (time per call; busbw in GB/s; ratio = OpenMPI's time / ours, > 1 means faster)\n\n", p);
  std::printf(
      "| collective | size | procs µs | procs busbw | mpi µs | mpi busbw | OpenMPI µs | OpenMPI busbw | procs vs "
      "OpenMPI | mpi vs OpenMPI |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& op : kOps) {
    for (std::size_t bytes : kSizes) {
      auto get = [&](const char* backend) {
        auto it = results.find(key(backend, op, bytes));
        return it == results.end() ? 0.0 : it->second;
      };
      const double procs = get("procs"), mpi = get("mpi"), openmpi = get("openmpi");
      auto busbw = [&](double s) { return s > 0 ? bytes / s * bus_factor(op, p) / 1e9 : 0.0; };
      auto ratio = [&](double s) {
        return s > 0 && openmpi > 0 ? fmt::format("{:.2f}", openmpi / s) : std::string("-");
      };
      std::printf("| %s | %s | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f | %s | %s |\n", op.c_str(),
                  size_name(bytes).c_str(), procs * 1e6, busbw(procs), mpi * 1e6, busbw(mpi), openmpi * 1e6,
                  busbw(openmpi), ratio(procs).c_str(), ratio(mpi).c_str());
    }
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> worlds = {2, 4};
  tinyllm::dist::CommOptions options;
  bool with_mpi = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mpi-peer") == 0) {
#ifdef TINYLLM_WITH_MPI
      return mpi_peer();
#else
      std::fprintf(stderr, "comm_bench: built without MPI\n");
      return 1;
#endif
    }
    if (std::strcmp(argv[i], "--staged") == 0) options.single_copy = false;
    if (std::strcmp(argv[i], "--no-mpi") == 0) with_mpi = false;
    if (std::strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
      kSizes.clear();
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');) kSizes.push_back(std::stoul(item) << 10);
    }
    if (std::strcmp(argv[i], "--worlds") == 0 && i + 1 < argc) {
      worlds.clear();
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');) worlds.push_back(std::stoi(item));
    }
  }
  try {
    for (int p : worlds) {
      Results results;
      time_procs(p, options, results);
#ifdef TINYLLM_WITH_MPI
      if (with_mpi) time_mpi(p, results);
#endif
      print_table(p, results);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "comm_bench: %s\n", error.what());
    return 1;
  }
  return 0;
}
