#include "tinyllm/train/metrics.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <map>
#include <vector>

#include "tinyllm/distributed/chunk.h"
#include "tinyllm/distributed/zero.h"
#include "tinyllm/train/trainer.h"

namespace tinyllm::train {
namespace {

constexpr std::size_t kDouble = sizeof(double);
constexpr std::size_t kAdamWState = 2;  // exp_avg, exp_avg_sq

dist::MemoryBytes bytes(std::size_t params, std::size_t grads, std::size_t optimizer) {
  return {.params = params * kDouble, .grads = grads * kDouble, .optimizer = optimizer * kDouble};
}

std::size_t chunk_length(std::size_t n, int p, int r) {
  const auto [a, b] = dist::chunk_bounds(n, p, r);
  return b - a;
}

}  // namespace

dist::MemoryBytes state_bytes(int zero, std::size_t n, int p, int r) {
  const std::size_t c = chunk_length(n, p, r), K = kAdamWState;
  switch (zero) {
    case 0:
      return bytes(n, n, K * n);
    case 1:
      return bytes(n, n + c, K * c + c);  // the master chunk beside the full parameters
    case 2:
      return bytes(n, c, K * c + c);
    default:
      return bytes(c, c, K * c);  // the master chunk is the parameters
  }
}

dist::MemoryBytes peak_bytes(int zero, const nn::GPTConfig& config, int p, int r, std::size_t grad_accum, bool overlap,
                             bool bitwise) {
  const std::size_t n = config.num_parameters(), c = chunk_length(n, p, r);
  dist::MemoryBytes peak = state_bytes(zero, n, p, r);
  // Bitwise mode's limbs live for the run: 3n, and under ZeRO the 3 limb chunks.
  const std::size_t limbs = bitwise ? (3 * n + (zero > 0 ? 3 * c : 0)) * kDouble : 0;
  peak.grads += limbs;
  if (zero < 2) return peak;  // DDP's and stage 1's buckets are views of the one flat gradient
  std::vector<std::size_t> numels;
  for (const Shape& shape : config.parameter_shapes()) numels.push_back(numel_of(shape));
  // Stage 3's units are the blocks: parameters [2 + 12i, 2 + 12(i + 1)).
  std::vector<std::pair<std::size_t, std::size_t>> units;
  const std::size_t per_block = nn::GPTConfig::kTensorsPerBlock;
  for (std::size_t i = 0; zero == 3 && i < config.n_layer; ++i)
    units.emplace_back(2 + per_block * i, 2 + per_block * (i + 1));
  const std::vector<dist::Bucket> buckets = dist::make_buckets(numels, {}, "tinyllm", units);
  // When the i-th bucket of a micro-batch is reduced: the chunk's gradient,
  // the staging slots taken so far (each the largest bucket; one, or two
  // with overlap), the bucket's own gradients and wte's, which the tied
  // head starts at the top of backward and the embedding finishes last;
  // from the second micro-batch on, a part to add into the chunk per slot
  // taken in that micro-batch.
  std::size_t largest = 0;
  for (const dist::Bucket& b : buckets) largest = std::max(largest, b.end - b.begin);
  const std::size_t slots = dist::ZeroOptimizer::slots_for(overlap, buckets.size()), part = std::min(largest, c);
  std::size_t most = 0;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const dist::Bucket& b = buckets[i];
    const std::size_t own = (b.end - b.begin) + (b.first == 0 ? 0 : numels[0]), taken = std::min(i + 1, slots);
    most = std::max(most, taken * largest + own);
    if (grad_accum > 1) most = std::max(most, slots * largest + (grad_accum > 2 ? slots : taken) * part + own);
  }
  peak.grads = (c + most) * kDouble + limbs;
  if (zero == 3) {
    // The chunk, wte, wpe and ln_f for the whole step, and a block with the
    // one prefetched beside it.
    const std::size_t block = config.block_parameters();
    const std::size_t rest = n - config.n_layer * block;
    peak.params = (c + rest + std::min<std::size_t>(2, config.n_layer) * block) * kDouble;
  }
  return peak;
}

namespace {

constexpr std::size_t kPage = 4096, kHugePage = std::size_t{2} << 20;

// A block of `numel` doubles as the process holds it: its pages (from
// 2 MiB up, the storage cache's huge pages). Such a block's mapping also
// holds up to 2 MiB ahead of it that aligned_alloc never touches: address
// space, not memory (RankMemory::unmapped).
std::size_t block_bytes(std::size_t numel) {
  const std::size_t size = numel * kDouble, page = size >= kHugePage ? kHugePage : kPage;
  return (size + page - 1) / page * page;
}

// One op of the GPT's forward, as src/nn builds it: its output, the
// outputs it reads (which autograd keeps) and the extras it saves.
struct GraphOp {
  std::size_t numel;
  std::vector<std::size_t> inputs;  // indices of earlier ops
  std::vector<std::size_t> saved;   // numels
};

std::vector<GraphOp> forward_graph(const nn::GPTConfig& config, std::size_t rows, std::size_t layers) {
  const std::size_t C = config.n_embd, T = config.block_size, N = rows * T;
  std::vector<GraphOp> graph;
  const auto op = [&graph](std::size_t numel, std::vector<std::size_t> inputs = {},
                           std::vector<std::size_t> saved = {}) {
    graph.push_back({numel, std::move(inputs), std::move(saved)});
    return graph.size() - 1;
  };
  const std::size_t wte = op(N * C), wpe = op(T * C);
  std::size_t x = op(N * C, {wte, wpe});
  for (std::size_t l = 0; l < layers; ++l) {
    const std::size_t ln_1 = op(N * C, {x}, {N, N});  // its mean and rstd
    const std::size_t qkv = op(3 * N * C, {ln_1});
    const std::size_t q = op(N * C, {qkv}), k = op(N * C, {qkv}), v = op(N * C, {qkv});
    const std::size_t attn = op(N * C, {q, k, v}, {rows * config.n_head * T * T});  // its probabilities
    const std::size_t h = op(N * C, {x, op(N * C, {attn})});
    const std::size_t ln_2 = op(N * C, {h}, {N, N});
    const std::size_t fc = op(4 * N * C, {ln_2});
    const std::size_t gelu = op(4 * N * C, {fc});
    x = op(N * C, {h, op(N * C, {gelu})});
  }
  const std::size_t ln_f = op(N * C, {x}, {N, N});
  op(1, {op(N * config.vocab_size, {ln_f})}, {N});  // the loss, its log-sum-exp
  return graph;
}

// The cache's resident bytes after the forward, and at the most: per block
// size, the most blocks alive at once.
struct Replay {
  std::map<std::size_t, std::size_t> live, most;  // block bytes: count
  void take(std::size_t numel) {
    const std::size_t size = block_bytes(numel);
    most[size] = std::max(most[size], ++live[size]);
  }
  void give(std::size_t numel) { --live[block_bytes(numel)]; }
  // The most bytes held; with `slack`, each huge block's alignment slack too.
  std::size_t most_bytes(bool slack) const {
    std::size_t total = 0;
    for (const auto& [size, count] : most) total += (size + (slack && size >= kHugePage ? kHugePage : 0)) * count;
    return total;
  }
};

Replay replay_step(const nn::GPTConfig& config, std::size_t rows) {
  const std::vector<GraphOp> graph = forward_graph(config, rows, config.n_layer);
  Replay replay;
  for (const GraphOp& op : graph) {
    replay.take(op.numel);
    for (std::size_t m : op.saved) replay.take(m);
  }
  // Backward in reverse: each input gets its gradient when its consumer
  // runs; the consumer's own gradient and saved extras go (its value stays
  // until the end).
  std::vector<bool> has_grad(graph.size(), false);
  replay.take(1);  // the seed
  for (std::size_t i = graph.size(); i-- > 0;) {
    for (std::size_t input : graph[i].inputs) {
      if (!has_grad[input]) {
        has_grad[input] = true;
        replay.take(graph[input].numel);
      }
    }
    replay.give(graph[i].numel);
    for (std::size_t m : graph[i].saved) replay.give(m);
  }
  return replay;
}

}  // namespace

std::size_t activation_bytes(const nn::GPTConfig& config, std::size_t rows) {
  return replay_step(config, rows).most_bytes(false);
}

namespace {

// A validation forward under no-grad frees each tensor once read; one
// block's outputs with the embedding and the head all alive bound it.
std::size_t eval_bytes(const nn::GPTConfig& config, std::size_t rows) {
  std::size_t total = 0;
  for (const GraphOp& op : forward_graph(config, rows, 1)) {
    total += block_bytes(op.numel);
    for (std::size_t m : op.saved) total += block_bytes(m);
  }
  return total;
}

// Per rank, beside what the model counts: a thread's stack (8 MiB), its
// malloc arena's reservation (64 MiB), OpenBLAS's work buffers and the
// shared-memory slots; and a tenth of the rest for rounding and
// fragmentation. Measured against ulimit -v in tests/train/memory_limit.sh.
constexpr std::size_t kRankBase = std::size_t{160} << 20;
constexpr std::size_t kMarginDivisor = 10;

}  // namespace

RankMemory predict_rank_memory(int zero, const nn::GPTConfig& config, int p, int r, std::size_t batch,
                               std::size_t grad_accum, bool overlap, bool bitwise, bool evaluates) {
  RankMemory m;
  m.state = state_bytes(zero, config.num_parameters(), p, r).total();
  m.in_step = peak_bytes(zero, config, p, r, grad_accum, overlap, bitwise).total() - m.state;
  const std::size_t rows = std::max<std::size_t>(1, batch / (static_cast<std::size_t>(p) * grad_accum));
  const Replay step = replay_step(config, bitwise ? 1 : rows);
  m.activations = step.most_bytes(false);
  m.unmapped = step.most_bytes(true) - m.activations;
  // Validation batches of B/P rows and the last, shorter one: block sizes the step does not reuse.
  if (evaluates) m.activations += 2 * eval_bytes(config, std::max<std::size_t>(1, batch / static_cast<std::size_t>(p)));
  m.base = kRankBase * (overlap ? 2 : 1);  // the communication thread
  m.margin = (m.state + m.in_step + m.activations) / kMarginDivisor;
  return m;
}

std::uint64_t theory_bytes_sent(int zero, const nn::GPTConfig& config, int p, int r, std::size_t grad_accum,
                                std::size_t bitwise_leaves) {
  if (p == 1) return 0;
  const std::size_t n = config.num_parameters();
  const auto [a, b] = dist::chunk_bounds(n, p, r);
  const std::uint64_t c = b - a, q = static_cast<std::uint64_t>(p), K = grad_accum;
  const std::uint64_t reduce_scatter = (n - c) * kDouble, all_gather = (q - 1) * c * kDouble;
  // Stage 3 gathers the blocks (the units, after wte and wpe, before ln_f)
  // for each pass's forward and again for its backward, the rest once.
  const std::size_t C = config.n_embd, begin = (config.vocab_size + config.block_size) * C, end = n - 2 * C;
  const std::uint64_t in_units = std::max(a, std::min(b, end)) - std::max(a, std::min(b, begin));
  const auto stage3_gathers = [&](std::uint64_t passes) {
    return (q - 1) * ((c - in_units) + 2 * passes * in_units) * kDouble;
  };
  if (bitwise_leaves > 0) {
    // The three limbs of every gradient value, reduced once per step: DDP
    // all-reduces the 3n at once, ZeRO reduce-scatters each limb array
    // (docs/BITWISE.md); stage 3 gathers the blocks for every leaf.
    const std::uint64_t c3 = chunk_length(3 * n, p, r);
    if (zero == 0) return (3 * n - c3) * kDouble + (q - 1) * c3 * kDouble;
    if (zero < 3) return 3 * reduce_scatter + all_gather;
    return 3 * reduce_scatter + stage3_gathers(bitwise_leaves);
  }
  // DDP and stage 1 reduce once (the micro-batches before the last run in
  // no_sync); stages 2 and 3 reduce-scatter every micro-batch.
  if (zero == 0) return reduce_scatter + all_gather;
  if (zero == 1) return reduce_scatter + 2 * all_gather;
  if (zero == 2) return K * reduce_scatter + all_gather;
  return K * reduce_scatter + stage3_gathers(K);
}

std::size_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::size_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::string metrics_line(const StepReport& report) {
  std::string ranks;
  for (const RankStats& s : report.ranks) {
    ranks += fmt::format(
        "{}{{\"rank\":{},\"params_bytes\":{},\"grads_bytes\":{},\"optimizer_bytes\":{},\"peak_state_bytes\":{},"
        "\"peak_rss_bytes\":{},\"bytes_sent\":{},\"theory_bytes_sent\":{}}}",
        ranks.empty() ? "" : ",", s.rank, s.state.params, s.state.grads, s.state.optimizer, s.peak.total(), s.peak_rss,
        s.bytes_sent, s.theory_sent);
  }
  const std::string grad_norm =
      report.grad_norm ? fmt::format("\"grad_norm\":{:.17g},", *report.grad_norm) : std::string();
  return fmt::format(
      "{{\"step\":{},\"loss\":{:.17g},\"lr\":{:.17g},\"seconds\":{:.9g},\"tokens_per_second\":{:.9g},"
      "{}\"ranks\":[{}]}}",
      report.step, report.loss, report.lr, report.seconds, report.tokens_per_second, grad_norm, ranks);
}

std::string val_metrics_line(std::size_t step, double val_loss) {
  return fmt::format("{{\"step\":{},\"val_loss\":{:.17g}}}", step, val_loss);
}

}  // namespace tinyllm::train
