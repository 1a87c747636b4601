// ShmComm: the collectives over a ShmGroup, for ranks that share memory
// (threads of one process, or processes forked with a shared mapping). Data
// moves by plain copies through each rank's slot, or, for large broadcasts
// and all-gathers where the group allows it, straight between the ranks'
// buffers. Not installed: use run_threads or run_procs.
#pragma once

#include <vector>

#include "shm_group.h"
#include "tinyllm/distributed/comm.h"

namespace tinyllm::dist::detail {

class ShmComm final : public Comm {
 public:
  ShmComm(ShmGroup& group, int rank, CommOptions options);

  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }

 protected:
  void exchange_headers(const CollectiveHeader& mine, std::span<CollectiveHeader> all) override;
  void transport_broadcast(std::span<double> buf, int root) override;
  void transport_all_reduce(std::span<double> buf, ReduceOp op, Layout layout) override;
  void transport_reduce_scatter(std::span<const double> in, std::span<double> out, ReduceOp op, Layout layout) override;
  void transport_all_gather(std::span<const double> part, std::span<double> out, Layout layout) override;

 private:
  // A barrier point: announce this rank's next phase, wait until every rank
  // has announced it too.
  void sync();
  // Single copy (shm_single_copy.cpp): every rank offers its buffer, then
  // copies straight from or into its peers' buffers.
  bool single_copy(std::size_t n) const;
  void offer(const double* buffer);
  const double* offered(int q) { return group_.published(q, seq_); }
  void read_from(int q, const double* remote, std::size_t count, double* local);
  void write_to(int q, const double* local, std::size_t count, const double* remote);
  [[noreturn]] void cross_memory_attach_failed(int q, const char* call);
  void broadcast_single_copy(std::span<double> buf, int root);
  void all_gather_single_copy(std::span<const double> part, std::span<double> out, Layout layout);

  void stage_pieces(const double* in, Layout layout, std::size_t start, std::size_t piece, int h);

  // Half h of rank q's slot; rounds alternate halves (see shm_comm.cpp).
  double* half(int q, int h) { return group_.slot(q) + static_cast<std::size_t>(h) * half_doubles_; }

  ShmGroup& group_;
  int rank_;
  CommOptions options_;
  std::size_t half_doubles_;
  std::uint32_t phase_ = 0;
  std::uint64_t seq_ = 0;             // the collective in progress
  std::string current_;               // "rank 1/4: all_reduce #17", for timeout and abort messages
  std::vector<const double*> parts_;  // the reduction's p terms, in rank order
};

}  // namespace tinyllm::dist::detail
