// What do DDP and ZeroOptimizer cost beyond the work they cannot avoid? For
// a model of n parameters in 8 tensors on p processes, one DDP sync_grads
// and one ZeRO step (gather, refill the gradients, step) per stage, each
// timed beside its peer in the same run: the bare collectives on a
// preallocated flat buffer plus, for ZeRO, AdamW's update of the chunk.
// Both sides refill the gradients each iteration, as a backward would, so
// the ratio is the module's own overhead: the check that every rank has
// gradients, the flat vectors taken from the storage cache, and any copy
// into or out of them (none, when every grad and parameter is a view of
// its flat vector).
//
//   ./build/bench/zero_bench [--worlds 2,4] [--sizes 1,8]   (sizes in Mi values)
#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "timing.h"
#include "tinyllm/distributed/procs_comm.h"
#include "tinyllm/distributed/zero.h"
#include "tinyllm/optim/adamw.h"
#include "tinyllm/tensor/storage.h"

namespace {

using namespace tinyllm;
using dist::Comm;
using dist::ReduceOp;

constexpr int kTensors = 8;
const char* const kModes[] = {"DDP", "stage 1", "stage 2", "stage 3"};

std::vector<Tensor> make_params(std::size_t n) {
  std::vector<Tensor> params;
  for (int i = 0; i < kTensors; ++i) params.push_back(Tensor::full({n / kTensors}, 0.5, true));
  return params;
}

// What a training step's zero_grad() and backward() leave: fresh gradients.
void refill_grads(const std::vector<Tensor>& params, int rank) {
  for (const Tensor& p : params) {
    p.zero_grad();
    std::fill(p.mutable_grad().begin(), p.mutable_grad().end(), 1e-3 * (rank + 1));
  }
}

int iterations(std::size_t n) { return static_cast<int>(std::clamp<std::size_t>((std::size_t{64} << 20) / n, 3, 50)); }

// Seconds per iteration of mode m (0 DDP, 1–3 the stages) and of its peer.
std::pair<double, double> time_mode(Comm& comm, std::size_t n, int m) {
  const int r = comm.rank();
  const auto barrier = [&] { comm.barrier(); };
  const auto optimizer = optim::AdamW::factory({.lr = 1e-6});
  std::vector<Tensor> params = make_params(n);
  double ours = 0;
  if (m == 0) {
    struct Model : nn::Module {
      explicit Model(const std::vector<Tensor>& ps) {
        for (std::size_t i = 0; i < ps.size(); ++i) register_parameter(fmt::format("p{}", i), ps[i]);
      }
    };
    dist::DDP ddp(std::make_shared<Model>(params), comm);
    ours = bench::seconds_per_call(iterations(n), barrier, [&] {
      refill_grads(params, r);
      ddp.sync_grads();
    });
  } else {
    dist::ZeroOptimizer zo(optimizer, params, comm, m);
    ours = bench::seconds_per_call(iterations(n), barrier, [&] {
      zo.gather();
      zo.zero_grad();
      refill_grads(params, r);
      zo.step();
    });
  }

  // The peer: the same refill, then the collectives straight on a flat
  // buffer allocated once (from the storage cache, huge pages and all, as
  // tinyllm's), and the update of a chunk that owns its grad.
  Storage flat_storage(n);
  const std::span<double> flat = flat_storage.span();
  std::fill(flat.begin(), flat.end(), 0.0);
  const auto [a, b] = dist::chunk_bounds(n, comm.size(), r);
  Tensor chunk = Tensor::full({b - a}, 0.5);
  std::fill(chunk.mutable_grad().begin(), chunk.mutable_grad().end(), 0.0);
  auto inner = optimizer({chunk});
  const double peer = bench::seconds_per_call(iterations(n), barrier, [&] {
    refill_grads(params, r);
    if (m == 0) {
      comm.all_reduce(flat, ReduceOp::Mean);
      return;
    }
    if (m == 1) {
      comm.all_reduce(flat, ReduceOp::Mean);
    } else {
      comm.reduce_scatter(flat, chunk.grad(), ReduceOp::Mean);
    }
    inner->step();
    comm.all_gather(chunk.data(), flat);
  });
  return {ours, peer};
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> values;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) values.push_back(std::stoi(item));
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> worlds = {2, 4}, sizes = {1, 8};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--worlds") {
      worlds = parse_list(argv[i + 1]);
    } else if (flag == "--sizes") {
      sizes = parse_list(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: zero_bench [--worlds 2,4] [--sizes 1,8]\n");
      return 2;
    }
  }
  // Rank 0 writes its timings where the parent reads them.
  void* memory = mmap(nullptr, 8 * sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return 1;
  double* seconds = static_cast<double*>(memory);

  std::printf("| p | n | mode | tinyllm ms | peer ms | peer / tinyllm |\n|---|---|---|---|---|---|\n");
  for (int p : worlds) {
    for (int mi : sizes) {
      const std::size_t n = static_cast<std::size_t>(mi) << 20;
      dist::run_procs(p, [&](Comm& comm) {
        for (int m = 0; m < 4; ++m) {
          const auto [ours, peer] = time_mode(comm, n, m);
          if (comm.rank() == 0) seconds[2 * m] = ours, seconds[2 * m + 1] = peer;
        }
      });
      for (int m = 0; m < 4; ++m) {
        std::printf("| %d | %d Mi | %s | %.2f | %.2f | %.2f |\n", p, mi, kModes[m], seconds[2 * m] * 1e3,
                    seconds[2 * m + 1] * 1e3, seconds[2 * m + 1] / seconds[2 * m]);
        std::fflush(stdout);
      }
    }
  }
  munmap(memory, 8 * sizeof(double));
  return 0;
}
