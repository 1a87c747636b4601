// ShmComm's single-copy path: large collectives copy straight between the
// ranks' own buffers instead of twice through the slots (the staged path).
// Threads of one process copy from a peer's pointer; forked processes use
// cross-memory attach (process_vm_readv / process_vm_writev), as Open MPI's
// shared-memory transport does.
//
// Each collective: every rank offers its buffer's address (a sync), copies,
// and syncs again so no buffer changes while a peer still uses it. Who
// copies what:
//   broadcast       receivers read the first (p−1)/p of root's buffer; root
//                   writes the last 1/p into each receiver's, so every rank
//                   copies about the same amount.
//   reduce_scatter  rank r sums its chunk of every rank's buffer in rank
//                   order, a piece at a time: the staged path's arithmetic,
//                   so both give the same bits.
//   all_reduce      reduce_scatter into its own buffer's chunk, a sync, then
//                   every rank reads the other reduced chunks.
//   all_gather      every rank reads the other ranks' chunks.
#include <fmt/format.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "reduce.h"
#include "shm_comm.h"
#include "tinyllm/dist/chunk.h"
#include "tinyllm/dist/errors.h"

namespace tinyllm::dist::detail {
namespace {

// Below this, the two extra barrier points cost more than the copy they save.
constexpr std::size_t kSingleCopyMin = 8192;
// Reductions go a piece at a time, so the peers' pieces stay in cache.
constexpr std::size_t kPiece = 16384;

}  // namespace

bool ShmComm::single_copy(std::size_t n) const {
  return n >= kSingleCopyMin && group_.peer_reads() != PeerReads::Staged;
}

void ShmComm::offer(const double* buffer) {
  group_.published(rank_, seq_) = buffer;
  sync();
}

// A peer that has died cannot be read (ESRCH): the launcher will say how it
// died, which is worth more than our errno. Any other failure is ours to report.
void ShmComm::cross_memory_attach_failed(int q, const char* call) {
  if (errno == ESRCH) group_.await_failure(rank_, q, options_.timeout, current_);
  const std::string message =
      fmt::format("{} cannot reach rank {}'s memory: {}: {}", current_, q, call, std::strerror(errno));
  group_.fail(rank_, FailureKind::Comm, message);
  throw CommError(message);
}

// Cross-memory attach may stop short of the whole range; go on from there.
void ShmComm::read_from(int q, const double* remote, std::size_t count, double* local) {
  if (count == 0) return;
  if (group_.peer_reads() == PeerReads::SameProcess) {
    std::memcpy(local, remote, count * sizeof(double));
    return;
  }
  const std::size_t bytes = count * sizeof(double);
  for (std::size_t done = 0; done < bytes;) {
    iovec here{reinterpret_cast<char*>(local) + done, bytes - done};
    iovec there{const_cast<char*>(reinterpret_cast<const char*>(remote)) + done, bytes - done};
    const ssize_t moved = process_vm_readv(group_.pid(q), &here, 1, &there, 1, 0);
    if (moved <= 0) cross_memory_attach_failed(q, "process_vm_readv");
    done += static_cast<std::size_t>(moved);
  }
}

void ShmComm::write_to(int q, const double* local, std::size_t count, const double* remote) {
  if (count == 0) return;
  if (group_.peer_reads() == PeerReads::SameProcess) {
    std::memcpy(const_cast<double*>(remote), local, count * sizeof(double));
    return;
  }
  const std::size_t bytes = count * sizeof(double);
  for (std::size_t done = 0; done < bytes;) {
    iovec here{const_cast<char*>(reinterpret_cast<const char*>(local)) + done, bytes - done};
    iovec there{const_cast<char*>(reinterpret_cast<const char*>(remote)) + done, bytes - done};
    const ssize_t moved = process_vm_writev(group_.pid(q), &here, 1, &there, 1, 0);
    if (moved <= 0) cross_memory_attach_failed(q, "process_vm_writev");
    done += static_cast<std::size_t>(moved);
  }
}

// Rank q's values, in place when it shares our address space, else copied
// into its piece of incoming_.
const double* ShmComm::view(int q, const double* remote, std::size_t count) {
  if (group_.peer_reads() == PeerReads::SameProcess) return remote;
  double* piece = incoming_.data() + static_cast<std::size_t>(q) * kPiece;
  read_from(q, remote, count, piece);
  return piece;
}

// target[0, b − a) = this rank's chunk [a, b) of Σ_q in_q, a piece at a
// time. `in` is this rank's offered buffer; target may be its own chunk,
// which no peer reads before the next sync.
void ShmComm::reduce_own_chunk(const double* in, std::size_t n, ReduceOp op, double* target) {
  const int p = size();
  auto [a, b] = chunk_bounds(n, p, rank_);
  incoming_.resize(static_cast<std::size_t>(p) * kPiece);
  parts_.resize(static_cast<std::size_t>(p));
  for (std::size_t start = a; start < b; start += kPiece) {
    const std::size_t count = std::min(kPiece, b - start);
    for (int q = 0; q < p; ++q) parts_[q] = q == rank_ ? in + start : view(q, offered(q) + start, count);
    reduce_in_rank_order(parts_, count, op, target + (start - a));
  }
}

void ShmComm::broadcast_single_copy(std::span<double> buf, int root) {
  const std::size_t split = buf.size() - buf.size() / static_cast<std::size_t>(size());
  offer(buf.data());
  if (rank_ == root) {
    for (int q = 0; q < size(); ++q) {
      if (q != root) write_to(q, buf.data() + split, buf.size() - split, offered(q) + split);
    }
  } else {
    read_from(root, offered(root), split, buf.data());
  }
  sync();
}

void ShmComm::reduce_scatter_single_copy(std::span<const double> in, std::span<double> out, ReduceOp op) {
  offer(in.data());
  reduce_own_chunk(in.data(), in.size(), op, out.data());
  sync();
}

void ShmComm::all_reduce_single_copy(std::span<double> buf, ReduceOp op) {
  const int p = size();
  offer(buf.data());
  auto [a, b] = chunk_bounds(buf.size(), p, rank_);
  reduce_own_chunk(buf.data(), buf.size(), op, buf.data() + a);
  sync();
  for (int q = 0; q < p; ++q) {
    auto [qa, qb] = chunk_bounds(buf.size(), p, q);
    if (q != rank_) read_from(q, offered(q) + qa, qb - qa, buf.data() + qa);
  }
  sync();
}

void ShmComm::all_gather_single_copy(std::span<const double> chunk, std::span<double> out) {
  offer(chunk.data());
  for (int q = 0; q < size(); ++q) {
    auto [a, b] = chunk_bounds(out.size(), size(), q);
    if (q != rank_) read_from(q, offered(q), b - a, out.data() + a);
  }
  auto [a, b] = chunk_bounds(out.size(), size(), rank_);
  if (chunk.data() != out.data() + a) std::memmove(out.data() + a, chunk.data(), (b - a) * sizeof(double));
  sync();
}

}  // namespace tinyllm::dist::detail
