// CommStream: one rank's collectives, run in order on a thread of their own
// while the caller goes on computing, as PyTorch's DDP and FSDP run theirs on
// a communication stream (Li et al., PyTorch Distributed, VLDB 2020; Zhao
// et al., PyTorch FSDP, VLDB 2023). Tasks
// run one at a time in the order enqueued, so every rank still issues the
// same collectives in the same order as without it, and the results and
// traffic are the same bits and bytes. Not installed: DDP and ZeroOptimizer
// use it.
//
// The contract, as with a CUDA stream: while a task is pending, the caller
// neither calls the Comm itself nor touches the buffers the task reads or
// writes; wait() or synchronize() first. A failed task (a CommError, a dead
// peer) makes the stream drop what is queued behind it, and every later
// enqueue(), wait() and synchronize() rethrows it on the caller's thread.
//
// Without overlap (off, or a Comm that only its own thread may call: MPI
// below MPI_THREAD_SERIALIZED), enqueue() runs the task at once, on the
// caller's thread, as the code did before the stream existed; overlapping()
// says which, for the caller to report (the stream itself prints nothing).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "tinyllm/distributed/comm.h"

namespace tinyllm::dist {

class CommStream {
 public:
  // Counts the tasks enqueued: task t is done once every task up to t is.
  // 0 stands for no task, always done.
  using Ticket = std::uint64_t;

  // Overlaps when asked and the Comm allows it; says once per process on
  // stderr when it was asked and cannot.
  CommStream(Comm& comm, bool overlap);
  // Drops the tasks not started and waits for the running one, so nothing
  // outlives the buffers; never throws (a rank unwinding from an error
  // must not wait for collectives its peers will never join).
  ~CommStream();
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  bool overlapping() const { return worker_.joinable(); }

  Ticket enqueue(std::function<void()> task);
  // Until task t has run; rethrows the stream's failure.
  void wait(Ticket t);
  // Until every task enqueued has run; rethrows the stream's failure.
  void synchronize();

 private:
  void work();
  void rethrow_failure() const;  // with mutex_ held

  std::mutex mutex_;
  std::condition_variable queued_;  // the worker waits for tasks or the end
  std::condition_variable done_;    // the caller waits for tickets
  std::deque<std::function<void()>> queue_;
  Ticket enqueued_ = 0;    // the caller's alone
  Ticket done_up_to_ = 0;  // the worker's, under mutex_
  std::exception_ptr failure_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace tinyllm::dist
