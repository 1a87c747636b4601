#include "comm_stream.h"

#include <utility>

namespace tinyllm::dist {

// A library does not print: overlapping() reports the decision, and the
// caller says it (the tinyllm command's header line does).
CommStream::CommStream(Comm& comm, bool overlap) {
  if (overlap && comm.callable_from_other_threads()) worker_ = std::thread([this] { work(); });
}

CommStream::~CommStream() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    queue_.clear();
    stopping_ = true;
  }
  queued_.notify_one();
  worker_.join();
}

CommStream::Ticket CommStream::enqueue(std::function<void()> task) {
  if (!overlapping()) {
    task();
    return ++enqueued_;
  }
  std::lock_guard lock(mutex_);
  rethrow_failure();
  queue_.push_back(std::move(task));
  queued_.notify_one();
  return ++enqueued_;
}

void CommStream::wait(Ticket t) {
  if (!overlapping()) return;
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return done_up_to_ >= t || failure_; });
  rethrow_failure();
}

void CommStream::synchronize() { wait(enqueued_); }

void CommStream::rethrow_failure() const {
  if (failure_) std::rethrow_exception(failure_);
}

void CommStream::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing started is left to finish
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::exception_ptr failure;
    try {
      task();
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    if (failure) {
      // The group is out of step for good: what is queued would only fail too.
      failure_ = failure;
      queue_.clear();
    }
    ++done_up_to_;
    done_.notify_all();
  }
}

}  // namespace tinyllm::dist
