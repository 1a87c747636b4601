// ShmGroup: the state p ranks share when they talk through one block of
// memory: each rank's phase counter and headers, the first failure, and a
// data slot per rank. It holds only plain data and lock-free atomics and
// lives at the start of a mapping every rank sees, so the same code serves
// threads (heap memory) and processes (a shared mapping made before fork).
// Not installed: the backends are the public face.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tinyllm/distributed/comm.h"

namespace tinyllm::dist::detail {

// How a rank may read another rank's private memory, which lets the large
// broadcasts and all-gathers copy once, straight from the owner's buffer,
// instead of twice through a slot.
enum class PeerReads : std::uint32_t {
  SameProcess,        // threads: a plain copy from the peer's pointer
  CrossMemoryAttach,  // processes: process_vm_readv from the peer's pid
  Staged,             // neither is allowed here: every byte goes through the slots
};

// What a launcher should use: `available` when single copies are wanted and
// every rank has a core of its own; with more ranks than cores the staged
// path measured faster at every size (docs/PERFORMANCE.md).
PeerReads choose_peer_reads(int p, bool single_copy, PeerReads available);

// How a failure is rethrown where it is reported (another thread, or the
// parent of a forked rank), since an exception object cannot cross processes.
enum class FailureKind : std::uint32_t { Comm, InvalidArgument, Logic, Runtime, Other };

class ShmGroup {
 public:
  // 1 MiB a rank: rounds of 512 KiB stay in cache between the rank that
  // writes a half and the ranks that read it; 4 MiB slots measured 1.5x
  // slower for a 16 MiB all_reduce on 2 ranks.
  static constexpr std::size_t kDefaultSlotDoubles = std::size_t{1} << 17;

  // Bytes a group of p ranks with slot_doubles per rank occupies.
  static std::size_t bytes_needed(int p, std::size_t slot_doubles);
  // Builds the group in `memory` (bytes_needed bytes, page aligned, zeroed
  // or not) before any rank uses it.
  static ShmGroup* create(void* memory, int p, std::size_t slot_doubles, PeerReads reads);

  int size() const { return p_; }
  PeerReads peer_reads() const { return reads_; }
  std::size_t slot_doubles() const { return slot_doubles_; }
  double* slot(int q);

  CollectiveHeader& header(int q, std::uint64_t seq);
  // The buffer rank q offers its peers in collective `seq`, and its pid.
  const double*& published(int q, std::uint64_t seq);
  std::int32_t& pid(int q);

  // A barrier point: rank r has reached `phase`; wake whoever waits for it.
  void arrive(int r, std::uint32_t phase);
  // Waits until rank q has reached `phase`. Throws CommError (after
  // recording it as this rank's failure) when the group failed meanwhile or
  // `timeout` passes; `what` names the collective in the message.
  void wait_for(int r, int q, std::uint32_t phase, std::chrono::milliseconds timeout, const std::string& what);

  // Rank q's process is gone: waits for the launcher to record why, then
  // throws that as CommError (or a timeout, if no verdict comes).
  [[noreturn]] void await_failure(int r, int q, std::chrono::milliseconds timeout, const std::string& what);

  // Records the first failure and wakes every waiter; later ones are ignored
  // so the report names the cause, not its echoes. Returns whether it won.
  bool fail(int rank, FailureKind kind, std::string_view message);
  bool failed() const { return failure_published_.load(std::memory_order_acquire) != 0; }
  int failed_rank() const { return failed_rank_.load(std::memory_order_acquire); }
  FailureKind failure_kind() const { return failure_kind_; }
  std::string failure_message() const;

 private:
  ShmGroup(int p, std::size_t slot_doubles, PeerReads reads);
  // Headers and published buffers are kept by collective parity: a fast
  // rank may announce the next collective while a slow one reads this one.
  struct alignas(64) RankState {
    std::atomic<std::uint32_t> phase{0};
    std::int32_t pid = 0;
    CollectiveHeader headers[2];
    const double* published[2] = {nullptr, nullptr};
  };
  template <class Done>
  void wait_until(Done done, int r, std::chrono::milliseconds timeout, const std::string& what,
                  const std::string& waiting_for);
  static std::size_t slots_offset(int p);
  RankState* ranks();
  void wake_all();

  int p_;
  std::size_t slot_doubles_;
  PeerReads reads_;
  std::atomic<std::uint32_t> epoch_{0};  // the futex word: bumped by every arrival and failure
  std::atomic<std::uint32_t> sleepers_{0};
  std::atomic<std::int32_t> failed_rank_{-1};
  std::atomic<std::uint32_t> failure_published_{0};
  FailureKind failure_kind_ = FailureKind::Other;
  char failure_message_[2048] = {};
};

// Rethrows a recorded failure as the type it had, naming its rank unless the
// message already does (a CommError leads with "rank r/p").
[[noreturn]] void throw_failure(int rank, FailureKind kind, const std::string& message);
// The kind and message of the exception being handled (call inside catch).
std::pair<FailureKind, std::string> current_failure();

}  // namespace tinyllm::dist::detail
