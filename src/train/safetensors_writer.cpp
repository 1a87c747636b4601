// The collective atomic writer of safetensors files: the ranks agree on what
// they write, rank 0 creates a temporary file beside the path, every rank
// writes its pieces into it (or gathers them through rank 0, where the ranks
// do not share the file), they vote, and rank 0 patches in the checksum and
// renames the file into place. write() below takes step 1 and Writer, one
// method a step, steps 2 to 6.
#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "../support/fnv1a.h"
#include "safetensors_format.h"
#include "tinyllm/distributed/payload.h"
#include "tinyllm/distributed/self_comm.h"
#include "tinyllm/train/safetensors.h"

namespace tinyllm::train {

using detail::checksum, detail::header_checksum, detail::hex, detail::kBlock, detail::kChecksumAt, detail::kDigits,
    detail::Layout, detail::lay_out, detail::read_all, detail::write_all;
using tinyllm::detail::fnv1a;

namespace {

// An I/O failure as it travels between ranks: the step and its errno.
enum Step : std::uint64_t { kOk, kNonce, kCreate, kWrite, kSync, kRename, kSyncDirectory };
struct Failure {
  std::uint64_t step = kOk, err = 0;
  explicit operator bool() const { return step != kOk; }
  void note(Step s, int e) {
    if (!*this && e != 0) step = s, err = static_cast<std::uint64_t>(e);
  }
};
// A step's outcome on one rank, with the nonce (create) or the checksum's
// partial sum (vote).
struct Outcome {
  Failure failure;
  std::uint64_t value = 0;
};
using OutcomePayload = dist::Payload<Outcome, [](auto& o, auto& io) { io(o.failure.step, o.failure.err, o.value); }>;

// The temporary file beside path. Every rank that knows its name removes it
// on every way out but the rename, a CommError included.
struct TempFile {
  std::string name;
  int fd = -1;
  bool renamed = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!name.empty() && !renamed) ::unlink(name.c_str());
  }
};

// A write past the file size limit (RLIMIT_FSIZE) raises SIGXFSZ, which by
// default kills the process silently, and only where the signal is ignored
// or blocked does write() fail with EFBIG instead. A library must not change
// the process's dispositions, so while it writes, the calling thread blocks
// the signal (the kernel sends it to the thread that wrote) and on the way
// out discards the one its writes raised; EFBIG is then reported as ENOSPC
// is, and the temporary file removed.
class FileSizeSignalBlocked {
 public:
  FileSizeSignalBlocked() {
    sigset_t xfsz;
    sigemptyset(&xfsz);
    sigaddset(&xfsz, SIGXFSZ);
    pthread_sigmask(SIG_BLOCK, &xfsz, &saved_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGXFSZ) == 1;
  }
  ~FileSizeSignalBlocked() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGXFSZ) == 1) {
      sigset_t xfsz;
      sigemptyset(&xfsz);
      sigaddset(&xfsz, SIGXFSZ);
      const timespec now{};
      while (sigtimedwait(&xfsz, nullptr, &now) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }
  FileSizeSignalBlocked(const FileSizeSignalBlocked&) = delete;
  FileSizeSignalBlocked& operator=(const FileSizeSignalBlocked&) = delete;

 private:
  sigset_t saved_;
  bool was_pending_ = false;
};

struct Span {
  std::size_t offset = 0, size = 0;
};
using SpanPayload = dist::Payload<Span, [](auto& s, auto& io) { io(s.offset, s.size); }>;

// What every rank checks of the others' arguments before any writes.
struct Claim {
  bool invalid = false;    // its own problem, which that rank reports
  std::uint64_t hash = 0;  // of the path, the options and the header
  std::size_t pieces = 0, values = 0;
};
using ClaimPayload = dist::Payload<Claim, [](auto& c, auto& io) { io(c.invalid, c.hash, c.pieces, c.values); }>;

// Calls fn(i, within, at, len) for each run of the values [start, start +
// count) of the pieces laid end to end: len values of piece i from its
// value `within`, at position `at` of the block.
template <class Fn>
void for_each_run(const std::vector<Span>& pieces, std::size_t start, std::size_t count, Fn fn) {
  std::size_t pos = 0;
  for (std::size_t i = 0; i < pieces.size(); pos += pieces[i].size, ++i) {
    const std::size_t lo = std::max(pos, start), hi = std::min(pos + pieces[i].size, start + count);
    if (lo < hi) fn(i, lo - pos, lo - start, hi - lo);
  }
}

// Step 1a: every rank's arguments are valid and the same as rank 0's, and
// the pieces of all hold the tensors' values. Returns the most pieces a
// rank has.
std::size_t agree_on_arguments(const std::string& path, dist::Comm& comm, const Layout& layout,
                               const std::vector<Piece>& mine, SharedFiles shared) {
  Claim own{.invalid = !layout.problem.empty(),
            .hash = fnv1a(layout.header, fnv1a(path + '\0' + static_cast<char>(shared))),
            .pieces = mine.size()};
  for (const Piece& piece : mine) own.values += piece.values.size();
  const std::vector<Claim> all = ClaimPayload::all_gather(comm, own);
  if (own.invalid) throw std::invalid_argument(fmt::format("checkpoint '{}': {}", path, layout.problem));
  std::size_t most = 0, total = 0;
  for (std::size_t q = 0; q < all.size(); ++q) {
    if (all[q].invalid) {
      throw std::invalid_argument(fmt::format("checkpoint '{}': rank {} has invalid arguments", path, q));
    }
    if (all[q].hash != all[0].hash) {
      throw std::invalid_argument(
          fmt::format("checkpoint '{}': rank {} has other tensors, metadata or options than rank 0", path, q));
    }
    most = std::max(most, all[q].pieces);
    total += all[q].values;
  }
  if (total != layout.n) {
    throw std::invalid_argument(fmt::format("checkpoint '{}': the pieces {}hold {} values, the tensors need {}", path,
                                            all.size() == 1 ? "" : "of all ranks ", total, layout.n));
  }
  return most;
}

// Step 1b: every rank's pieces, padded with empty ones to `most` a rank.
// Returns spans[q], rank q's non-empty pieces in its order.
std::vector<std::vector<Span>> gather_spans(dist::Comm& comm, const std::vector<Piece>& mine, std::size_t most) {
  std::vector<Span> bounds(most);
  for (std::size_t i = 0; i < mine.size(); ++i) bounds[i] = {mine[i].offset, mine[i].values.size()};
  if (most > 0) bounds = SpanPayload::all_gather(comm, bounds);
  std::vector<std::vector<Span>> spans(static_cast<std::size_t>(comm.size()));
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (bounds[i].size > 0) spans[i / most].push_back(bounds[i]);
  }
  return spans;
}

// Step 1c: the pieces, in offset order, meet end to end (each rank checks
// them itself).
void check_tiling(const std::string& path, const std::vector<std::vector<Span>>& spans) {
  std::vector<std::pair<Span, std::size_t>> sorted;
  for (std::size_t q = 0; q < spans.size(); ++q) {
    for (const Span& s : spans[q]) sorted.emplace_back(s, q);
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.first.offset < y.first.offset; });
  const auto where = [&](std::size_t q) { return spans.size() == 1 ? std::string() : fmt::format(" of rank {}", q); };
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    const auto& [before, q] = sorted[i - 1];
    const auto& [after, s] = sorted[i];
    if (after.offset != before.offset + before.size) {
      throw std::invalid_argument(
          fmt::format("checkpoint '{}': the piece [{}, {}){} and the piece [{}, {}){} {} instead of meeting", path,
                      before.offset, before.offset + before.size, where(q), after.offset, after.offset + after.size,
                      where(s), after.offset < before.offset + before.size ? "overlap" : "leave a hole"));
    }
  }
}

// Step 1 of write(): the ranks agree on the arguments, then on every
// piece's bounds, so each rank checks the tiling itself and rank 0 knows
// where gathered values go. Returns spans[q], rank q's non-empty pieces in
// its order (mine is this rank's).
std::vector<std::vector<Span>> agree(const std::string& path, dist::Comm& comm, const Layout& layout,
                                     const std::vector<Piece>& mine, SharedFiles shared) {
  const std::size_t most = agree_on_arguments(path, comm, layout, mine, shared);
  std::vector<std::vector<Span>> spans = gather_spans(comm, mine, most);
  check_tiling(path, spans);
  return spans;
}

// Steps 2 to 6 of the collective write, one method each, on what step 1
// agreed: the layout, this rank's pieces and every rank's spans.
class Writer {
 public:
  Writer(const std::string& path, dist::Comm& comm, Layout& layout, const std::vector<Piece>& mine,
         const std::vector<std::vector<Span>>& spans, SharedFiles shared)
      : path_(path), comm_(comm), layout_(layout), mine_(mine), spans_(spans), shared_(shared) {}

  // 2. Rank 0 creates the temporary file and writes the header, with a
  //    random nonce where the checksum will go; every rank learns the
  //    outcome and the nonce, hence the file's name.
  void create() {
    std::uint64_t nonce = 0;
    if (r() == 0) {
      failure_.note(kNonce, ::getentropy(&nonce, sizeof nonce) == 0 ? 0 : errno);
      if (!failure_) {
        temp_.fd = ::open(temp_name(nonce).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        failure_.note(kCreate, temp_.fd < 0 ? errno : 0);
      }
      if (temp_.fd >= 0) {
        temp_.name = temp_name(nonce);
        layout_.header.replace(kChecksumAt, kDigits, hex(nonce));
        failure_.note(kWrite, write_all(temp_.fd, layout_.header.data(), layout_.header.size(), 0));
      }
    }
    const Outcome created = OutcomePayload::broadcast(comm_, Outcome{failure_, nonce}, 0);
    nonce_ = created.value;
    temp_path_ = temp_name(nonce_);
    if (created.failure) fail(0, created.failure);
    temp_.name = temp_path_;
  }

  // 3. Who writes: every rank where each finds the nonce in the file it
  //    opens by that name (so it is the one file), else rank 0 alone.
  void choose_writers() {
    const int p = comm_.size();
    direct_ = shared_ != SharedFiles::No;
    if (!direct_ || p == 1) return;
    bool sees = r() == 0;
    if (r() != 0) {
      temp_.fd = ::open(temp_path_.c_str(), O_RDWR | O_CLOEXEC);
      std::array<char, kDigits> digits{};
      sees = temp_.fd >= 0 && read_all(temp_.fd, digits.data(), kDigits, kChecksumAt) == 0 &&
             std::string_view(digits.data(), kDigits) == hex(nonce_);
    }
    const std::vector<bool> seen = dist::SinglePayload<bool>::all_gather(comm_, sees);
    direct_ = std::find(seen.begin(), seen.end(), false) == seen.end();
    if (!direct_ && shared_ == SharedFiles::Yes) {
      const auto q = std::find(seen.begin(), seen.end(), false) - seen.begin();
      throw std::runtime_error(
          fmt::format("checkpoint '{}': rank {} does not see rank 0's temporary file '{}' "
                      "(SharedFiles::Yes)",
                      path_, q, temp_path_));
    }
  }

  // 4. Write, each rank hashing its own values (its checksum partial sum,
  //    returned). A failure waits for the vote, so no rank leaves the
  //    collectives early.
  std::uint64_t write_values() {
    std::uint64_t partial = 0;
    for (const Piece& piece : mine_) partial += checksum(piece.values, piece.offset);
    if (r() == 0 || direct_) {
      for (const Piece& piece : mine_) write_run(piece.values.data(), piece.values.size(), piece.offset);
    }
    for (int q = 1; q < comm_.size() && !direct_; ++q) gather_from(q);
    if (r() != 0 && temp_.fd >= 0) {
      if (direct_) failure_.note(kSync, ::fsync(temp_.fd) == 0 ? 0 : errno);  // a network filesystem flushes per client
      ::close(temp_.fd);
      temp_.fd = -1;
    }
    return partial;
  }

  // Rank q's values, gathered through rank 0: they go out in blocks of
  // kBlock, its pieces end to end, by broadcast from q; rank 0 writes each
  // run where the piece says.
  void gather_from(int q) {
    const auto& theirs = spans_[static_cast<std::size_t>(q)];
    std::size_t values = 0;
    for (const Span& s : theirs) values += s.size;
    std::vector<double> block;
    for (std::size_t start = 0; start < values; start += kBlock) {
      block.resize(std::min(kBlock, values - start));
      for_each_run(theirs, start, block.size(),
                   [&](std::size_t i, std::size_t within, std::size_t at, std::size_t len) {
                     if (r() == q)
                       std::copy_n(mine_[i].values.begin() + static_cast<std::ptrdiff_t>(within), len,
                                   block.begin() + static_cast<std::ptrdiff_t>(at));
                   });
      comm_.broadcast(block, q);
      if (r() != 0) continue;
      for_each_run(theirs, start, block.size(),
                   [&](std::size_t i, std::size_t within, std::size_t at, std::size_t len) {
                     write_run(block.data() + at, len, theirs[i].offset + within);
                   });
    }
  }

  // count values at the data region's value `offset`.
  void write_run(const double* values, std::size_t count, std::size_t offset) {
    failure_.note(kWrite, write_all(temp_.fd, values, 8 * count, layout_.header.size() + 8 * offset));
  }

  // 5. Vote, and add up the checksum (integers: any order gives the same).
  std::uint64_t vote(std::uint64_t partial) {
    const std::vector<Outcome> votes = OutcomePayload::all_gather(comm_, Outcome{failure_, partial});
    std::uint64_t sum = 0;
    for (std::size_t q = 0; q < votes.size(); ++q) {
      if (votes[q].failure) fail(static_cast<int>(q), votes[q].failure);
      sum += votes[q].value;
    }
    return sum;
  }

  // 6. Rank 0 patches the checksum in, syncs, renames, syncs the directory,
  //    and tells every rank how it went.
  void commit(std::uint64_t checksum) {
    if (r() == 0) {
      const std::string digits = hex(checksum);
      failure_.note(kWrite, write_all(temp_.fd, digits.data(), kDigits, kChecksumAt));
      if (!failure_) failure_.note(kSync, ::fsync(temp_.fd) == 0 ? 0 : errno);
      ::close(temp_.fd);
      temp_.fd = -1;
      if (!failure_) {
        failure_.note(kRename, ::rename(temp_path_.c_str(), path_.c_str()) == 0 ? 0 : errno);
        temp_.renamed = !failure_;
      }
      if (!failure_) {
        std::string directory = std::filesystem::path(path_).parent_path().string();
        const int fd = ::open(directory.empty() ? "." : directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        failure_.note(kSyncDirectory, fd < 0 ? errno : ::fsync(fd) == 0 ? 0 : errno);
        if (fd >= 0) ::close(fd);
      }
    }
    const Failure done = OutcomePayload::broadcast(comm_, Outcome{failure_}, 0).failure;
    temp_.renamed = !done || done.step == kSyncDirectory;
    if (done) fail(0, done);
  }

 private:
  int r() const { return comm_.rank(); }
  std::string temp_name(std::uint64_t nonce) const { return fmt::format("{}.{}.tmp", path_, hex(nonce)); }

  // Every rank throws the same error for rank q's failed step.
  [[noreturn]] void fail(int q, const Failure& failure) const {
    const std::uint64_t step = failure.step;
    const char* why = std::strerror(static_cast<int>(failure.err));
    if (step == kRename)
      throw std::runtime_error(fmt::format("checkpoint '{}': cannot rename '{}' to it: {}", path_, temp_path_, why));
    if (step == kSyncDirectory)
      throw std::runtime_error(fmt::format("checkpoint '{}': cannot sync its directory: {}", path_, why));
    const char* verb = step == kNonce    ? "draw a name for"
                       : step == kCreate ? "create"
                       : step == kWrite  ? "write"
                                         : "sync";
    const std::string where = comm_.size() == 1 ? std::string() : fmt::format("rank {} ", q);
    throw std::runtime_error(
        fmt::format("checkpoint '{}': {}cannot {} the temporary file '{}': {}", path_, where, verb, temp_path_, why));
  }

  const std::string& path_;
  dist::Comm& comm_;
  Layout& layout_;
  const std::vector<Piece>& mine_;
  const std::vector<std::vector<Span>>& spans_;
  SharedFiles shared_;
  TempFile temp_;
  Failure failure_;
  std::uint64_t nonce_ = 0;
  std::string temp_path_;
  bool direct_ = false;
};

// The collective write: step 1 here, steps 2 to 6 in Writer.
void write(const std::string& path, dist::Comm& comm, const std::vector<TensorInfo>& tensors, const Metadata& metadata,
           std::span<const Piece> pieces, SharedFiles shared) {
  const FileSizeSignalBlocked no_sigxfsz;
  Layout layout = lay_out(tensors, metadata);
  std::vector<Piece> mine;
  for (const Piece& piece : pieces) {
    if (layout.problem.empty() && (piece.offset > layout.n || piece.values.size() > layout.n - piece.offset)) {
      layout.problem = fmt::format("piece [{}, {}) lies outside the data region of {} values", piece.offset,
                                   piece.offset + piece.values.size(), layout.n);
    }
    if (!piece.values.empty()) mine.push_back(piece);
  }
  const std::vector<std::vector<Span>> spans = agree(path, comm, layout, mine, shared);
  Writer writer(path, comm, layout, mine, spans, shared);
  writer.create();
  writer.choose_writers();
  const std::uint64_t partial = writer.write_values();
  const std::uint64_t sum = writer.vote(partial);
  writer.commit(sum + header_checksum(tensors, metadata));
}

}  // namespace

void write_safetensors(const std::string& path, dist::Comm& comm, const std::vector<TensorInfo>& tensors,
                       const Metadata& metadata, std::span<const Piece> pieces, SharedFiles shared) {
  write(path, comm, tensors, metadata, pieces, shared);
}

void write_safetensors(const std::string& path, const std::vector<TensorInfo>& tensors, const Metadata& metadata,
                       std::span<const double> data) {
  dist::SelfComm self;
  const Piece whole{.offset = 0, .values = data};
  write(path, self, tensors, metadata, std::span(&whole, 1), SharedFiles::Auto);
}

}  // namespace tinyllm::train
