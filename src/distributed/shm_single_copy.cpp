// ShmComm's single-copy path: large broadcasts and all-gathers copy straight
// between the ranks' own buffers instead of twice through the slots (the
// staged path).
// Threads of one process copy from a peer's pointer; forked processes use
// cross-memory attach (process_vm_readv / process_vm_writev), as Open MPI's
// shared-memory transport does.
//
// Each collective: every rank offers its buffer's address (a sync), copies,
// and syncs again so no buffer changes while a peer still uses it. Who
// copies what:
//   broadcast   receivers read the first (p−1)/p of root's buffer; root
//               writes the last 1/p into each receiver's, so every rank
//               copies about the same amount.
//   all_gather  every rank reads the other ranks' parts.
// The reductions stay staged: they read the slots in place, while here each
// peer's piece would first be copied by the kernel, which measured slower
// (docs/PERFORMANCE.md).
#include <fmt/format.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "shm_comm.h"
#include "tinyllm/distributed/errors.h"

namespace tinyllm::dist::detail {
namespace {

// Measured on the project's machine (bench/comm_bench.cpp): below 64 KiB the
// two extra barrier points cost more than the copy they save; from 16 MiB
// the staged path, whose slots stay in cache, is as fast or faster than the
// kernel's copy from memory.
constexpr std::size_t kSingleCopyMin = std::size_t{8} << 10;
constexpr std::size_t kSingleCopyMax = std::size_t{2} << 20;

}  // namespace

bool ShmComm::single_copy(std::size_t n) const {
  return n >= kSingleCopyMin && n < kSingleCopyMax && group_.peer_reads() != PeerReads::Staged;
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

void ShmComm::all_gather_single_copy(std::span<const double> part, std::span<double> out, Layout layout) {
  offer(part.data());
  for (int q = 0; q < size(); ++q) {
    auto [a, b] = layout[q];
    if (q != rank_) read_from(q, offered(q), b - a, out.data() + a);
  }
  auto [a, b] = layout[rank_];
  if (b > a && part.data() != out.data() + a) std::memmove(out.data() + a, part.data(), (b - a) * sizeof(double));
  sync();
}

}  // namespace tinyllm::dist::detail
