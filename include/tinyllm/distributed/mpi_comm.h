// MpiComm: the Comm backend over MPI (Open MPI or MPICH), one rank per MPI
// process under `mpirun -n P`. Broadcast and all-gather are MPI's non-blocking
// collectives, the reduce-scatter point-to-point messages summed in rank order;
// every wait is polled against CommOptions::timeout, so a rank that stops
// calling is named. MpiSession owns MPI_Init and MPI_Finalize; MpiComm never does.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "tinyllm/distributed/comm.h"

namespace tinyllm::dist {

// True when this process was started by mpirun or mpiexec (Open MPI, MPICH
// or any PMIx launcher), so `--backend auto` can pick MPI.
bool launched_by_mpirun();

// MPI_Init_thread (MPI_THREAD_SERIALIZED: any thread calls MPI, one at a
// time, as the communication thread of BucketOptions::overlap does) on
// construction and MPI_Finalize on destruction, unless MPI was already
// initialised by someone else: then it does neither. Nor does it finalise
// when an exception is unwinding through it: after a failed collective,
// MPI_Finalize waits for the ranks that never joined, forever if one is
// stopped. MPI then stays initialised for abort_mpi_job.
class MpiSession {
 public:
  explicit MpiSession(int* argc = nullptr, char*** argv = nullptr);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // Whether this session initialised MPI and will finalise it.
  bool owns() const { return owns_; }

 private:
  bool owns_ = false;
  int unwinding_ = 0;  // std::uncaught_exceptions() at construction
};

// Ends the whole mpirun job after a failure: MPI_Abort(MPI_COMM_WORLD,
// code), which makes mpirun kill every rank, a stopped one included. Does
// nothing (and returns) when MPI is not initialised or already finalised.
// The library never calls it: the program does, once its message is
// printed and flushed (MPI_Abort does not return).
void abort_mpi_job(int code);

class MpiComm final : public Comm {
 public:
  // MPI counts are int: a longer vector goes in pieces of at most this many values.
  static constexpr std::size_t kMaxCount = INT_MAX;

  // Collective over `comm` (every rank of it constructs its MpiComm in the
  // same order), bounded by options.timeout like every other wait. Works on
  // its own duplicate of `comm`, so its messages never match the caller's.
  // `max_count` is the most values one MPI call moves; tests shrink it to
  // exercise the pieces.
  explicit MpiComm(MPI_Comm comm = MPI_COMM_WORLD, CommOptions options = {}, std::size_t max_count = kMaxCount);
  ~MpiComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Whether MPI was initialised at MPI_THREAD_SERIALIZED or above (by
  // MpiSession, or by whoever initialised it before).
  bool callable_from_other_threads() const override { return serialized_; }

 private:
  void exchange_headers(const CollectiveHeader& mine, std::span<CollectiveHeader> all) override;
  void transport_broadcast(std::span<double> buf, int root) override;
  void transport_all_reduce(std::span<double> buf, ReduceOp op, Layout layout) override;
  void transport_reduce_scatter(std::span<const double> in, std::span<double> out, ReduceOp op, Layout layout) override;
  void transport_all_gather(std::span<const double> chunk, std::span<double> out, Layout layout) override;

  void lay_out_piece(Layout layout, std::size_t s, std::size_t e);
  void reduce_scatter_piece(const double* in, double* part, ReduceOp op);
  void all_gather_piece(const double* part, double* out);
  std::span<double> scratch(std::size_t n);

  std::span<double> received(std::size_t n);

  bool poll(std::span<MPI_Request> requests) const;
  void wait(std::span<MPI_Request> requests, const char* phase);
  std::string unjoined() const;
  void check(int status, const char* call);
  std::string current() const;

  MPI_Comm comm_ = MPI_COMM_NULL;  // our duplicate of the caller's communicator
  int rank_ = 0;
  int size_ = 1;
  CommOptions options_;
  std::size_t max_count_;
  bool serialized_ = false;
  bool broken_ = false;  // a collective failed here: keep comm_ (see the destructor)

  CollectiveHeader current_;           // the collective in progress, for messages
  CollectiveHeader outgoing_;          // this rank's header while its sends are in flight
  std::vector<MPI_Request> requests_;  // [0, p) receives from rank q, [p, 2p) sends to it
  std::vector<int> counts_, displs_;   // the piece's layout: rank q's part, its offset
  std::size_t own_offset_ = 0;         // this rank's part of the piece, from the start of its part of the layout
  std::vector<const double*> terms_;   // the reduce-scatter's p terms, in rank order
  std::vector<double> received_;       // the reduce-scatter's terms from the peers, kept across calls
  std::vector<double> scratch_;        // a copy of a part or chunk that overlaps its destination
};

}  // namespace tinyllm::dist
