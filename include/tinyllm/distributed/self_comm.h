// SelfComm: a group of one rank, for one process alone. Every collective is
// Comm's p == 1 case (the buffers stay or are copied), so code written for
// p ranks runs unchanged as the one-process run every mode must equal.
#pragma once

#include "tinyllm/distributed/comm.h"

namespace tinyllm::dist {

class SelfComm final : public Comm {
 public:
  SelfComm() = default;
  int rank() const override { return 0; }
  int size() const override { return 1; }

 protected:
  void exchange_headers(const CollectiveHeader& mine, std::span<CollectiveHeader> all) override { all[0] = mine; }
  // Comm moves no data at p == 1: the transport is never called.
  void transport_broadcast(std::span<double>, int) override {}
  void transport_all_reduce(std::span<double>, ReduceOp, Layout) override {}
  void transport_reduce_scatter(std::span<const double>, std::span<double>, ReduceOp, Layout) override {}
  void transport_all_gather(std::span<const double>, std::span<double>, Layout) override {}
};

}  // namespace tinyllm::dist
