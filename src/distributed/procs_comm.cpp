// The launcher: one shared segment, p forked children, and a parent that
// only watches. The parent turns a child's death into a group failure, so
// the survivors' collectives fail fast with the dead rank's name.
#include "tinyllm/distributed/procs_comm.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <new>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "shm_comm.h"
#include "tinyllm/distributed/stop.h"
#include "tinyllm/tensor/parallel.h"

namespace tinyllm::dist {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(2);
constexpr auto kCallerPollEvery = std::chrono::milliseconds(50);

// How long after the first failure the launcher lets the other ranks end on
// their own. A rank in a collective sees the failure in microseconds and
// exits; one still alive after this is stopped or stuck outside the
// collectives, and its result is lost either way, so it is killed. A hung
// rank thus ends the run one timeout (the others' wait) plus this after it
// stopped, not two timeouts.
constexpr auto kGrace = std::chrono::milliseconds(1000);

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), "run_procs: " + what);
}

// A shared mapping whose name exists only between shm_open and shm_unlink,
// so a crash at any later point leaves nothing in /dev/shm.
class SharedSegment {
 public:
  explicit SharedSegment(std::size_t bytes) : bytes_(bytes) {
    static std::atomic<int> counter{0};
    const std::string name = fmt::format("/tinyllm-{}-{}", getpid(), counter++);
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw_errno("shm_open " + name);
    shm_unlink(name.c_str());
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      close(fd);
      throw_errno(fmt::format("ftruncate {} bytes", bytes));
    }
    memory_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (memory_ == MAP_FAILED) throw_errno(fmt::format("mmap {} bytes", bytes));
  }
  ~SharedSegment() { munmap(memory_, bytes_); }
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  void* memory() const { return memory_; }

 private:
  std::size_t bytes_;
  void* memory_ = nullptr;
};

// Whether forked siblings may read each other with process_vm_readv: not
// when a seccomp filter forbids the call, nor when Yama allows ptrace only to
// admins (scope 2 or 3). Scope 1 is lifted by PR_SET_PTRACER in each child.
detail::PeerReads probe_peer_reads() {
  double here = 1.0, there = 0.0;
  iovec local{&there, sizeof there}, remote{&here, sizeof here};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != static_cast<ssize_t>(sizeof here) || there != here) {
    return detail::PeerReads::Staged;
  }
  std::ifstream yama("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  if (yama >> scope && scope >= 2) return detail::PeerReads::Staged;
  return detail::PeerReads::CrossMemoryAttach;
}

// Child r's whole life. It must never return into the caller's stack (that
// would run the parent's code twice), so it leaves with _exit, after
// flushing what fn printed. returned[r] says that fn returned or threw, so
// that the parent can tell an exit from inside fn (status 0 or not) from
// the end of a rank.
[[noreturn]] void run_child(detail::ShmGroup& group, std::atomic<std::uint32_t>* returned, int r, pid_t parent,
                            const std::function<void(Comm&)>& fn, CommOptions options) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);  // the parent died before the line above took effect
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  tinyllm::set_num_threads(static_cast<int>(std::max(1u, cores / static_cast<unsigned>(group.size()))));
  int status = 0;
  try {
    detail::ShmComm comm(group, r, options);
    fn(comm);
  } catch (...) {
    auto [kind, message] = detail::current_failure();
    group.fail(r, kind, message);
    status = 1;
  }
  returned[r].store(1, std::memory_order_release);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  _exit(status);
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    return fmt::format("died of signal {} ({})", signal, strsignal(signal));
  }
  return fmt::format("exited with status {}", WEXITSTATUS(status));
}

void signal_alive(const std::vector<pid_t>& children, int signal) {
  for (pid_t child : children) {
    if (child > 0) kill(child, signal);
  }
}

// Reaps every child (a slot that was never forked holds -1). The first
// abnormal exit, or an exit before fn returned, becomes the group's failure
// (unless a rank recorded a better one); once the group failed, children
// still alive kGrace later are killed. A stop asked of this process is
// passed on to the children. When poll throws, the group fails, the
// children get SIGTERM at once and SIGKILL after kGrace, and the exception
// is returned once all are reaped.
std::exception_ptr watch(detail::ShmGroup& group, const std::atomic<std::uint32_t>* returned,
                         std::vector<pid_t>& children, const std::function<void()>& poll) {
  using Clock = std::chrono::steady_clock;
  auto alive = static_cast<std::size_t>(std::count_if(children.begin(), children.end(), [](pid_t c) { return c > 0; }));
  Clock::time_point kill_at = Clock::time_point::max();
  Clock::time_point poll_at = Clock::now() + kCallerPollEvery;
  std::exception_ptr stopped;
  bool stop_forwarded = false;
  while (alive > 0) {
    if (const int signal = stop_requested(); signal != 0 && !stop_forwarded) {
      signal_alive(children, signal);
      stop_forwarded = true;
    }
    for (std::size_t r = 0; r < children.size(); ++r) {
      if (children[r] <= 0) continue;
      int status = 0;
      const pid_t done = waitpid(children[r], &status, WNOHANG);
      if (done == 0) continue;
      children[r] = -1;
      --alive;
      if (done < 0) continue;
      const bool ended = returned[r].load(std::memory_order_acquire) != 0;
      if (!WIFSIGNALED(status) && !ended) {
        group.fail(static_cast<int>(r), detail::FailureKind::Comm,
                   fmt::format("rank {} {} before returning a result", r, describe_exit(status)));
      } else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        group.fail(static_cast<int>(r), detail::FailureKind::Comm, fmt::format("rank {} {}", r, describe_exit(status)));
      }
    }
    const auto now = Clock::now();
    if (poll && !stopped && alive > 0 && now >= poll_at) {
      try {
        poll();
      } catch (...) {
        stopped = std::current_exception();
        auto [kind, message] = detail::current_failure();
        const auto first = std::find_if(children.begin(), children.end(), [](pid_t c) { return c > 0; });
        group.fail(static_cast<int>(first - children.begin()), kind, "the run was stopped: " + message);
        signal_alive(children, SIGTERM);
      }
      poll_at = Clock::now() + kCallerPollEvery;
    }
    if (group.failed() && kill_at == Clock::time_point::max()) kill_at = now + kGrace;
    if (now >= kill_at) signal_alive(children, SIGKILL);
    if (alive > 0) std::this_thread::sleep_for(kPoll);
  }
  return stopped;
}

}  // namespace

void run_procs(int p, const std::function<void(Comm&)>& fn, CommOptions options, const std::function<void()>& poll) {
  if (p < 1 || p > kMaxSharedMemoryWorld) {
    throw std::invalid_argument(
        fmt::format("run_procs: world size must be from 1 to {} (got {})", kMaxSharedMemoryWorld, p));
  }
  check_options(options, "run_procs");
  const std::size_t slot = detail::ShmGroup::kDefaultSlotDoubles;
  SharedSegment segment(detail::ShmGroup::bytes_needed(p, slot));
  SharedSegment returned_flags(sizeof(std::atomic<std::uint32_t>) * static_cast<std::size_t>(p));
  static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
  auto* returned = static_cast<std::atomic<std::uint32_t>*>(returned_flags.memory());
  for (int r = 0; r < p; ++r) new (&returned[r]) std::atomic<std::uint32_t>(0);
  const detail::PeerReads reads = detail::choose_peer_reads(p, options.single_copy, probe_peer_reads());
  detail::ShmGroup& group = *detail::ShmGroup::create(segment.memory(), p, slot, reads);

  // Anything buffered now would be written once by every child as well.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const pid_t parent = getpid();
  std::vector<pid_t> children(static_cast<std::size_t>(p), -1);
  for (int r = 0; r < p; ++r) {
    const pid_t child = fork();
    if (child == 0) run_child(group, returned, r, parent, fn, options);
    if (child < 0) {
      const int error = errno;
      group.fail(r, detail::FailureKind::Runtime,
                 fmt::format("could not be started: fork failed: {}", std::strerror(error)));
      break;
    }
    children[static_cast<std::size_t>(r)] = child;
  }
  if (std::exception_ptr stopped = watch(group, returned, children, poll)) std::rethrow_exception(stopped);
  if (group.failed()) detail::throw_failure(group.failed_rank(), group.failure_kind(), group.failure_message());
}

}  // namespace tinyllm::dist
