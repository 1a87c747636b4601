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
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "../support/fnv1a.h"
#include "safetensors_format.h"
#include "tinyllm/train/safetensors.h"

namespace tinyllm::train {

using detail::checksum, detail::header_checksum, detail::hex, detail::kBlock, detail::kChecksumAt, detail::kDigits,
    detail::Layout, detail::lay_out, detail::read_all, detail::write_all;
using tinyllm::detail::fnv1a;

namespace {

// The collectives the writer needs, on comm or, without one, in one process.
// Words travel bit-copied in doubles: broadcast and all_gather only copy.
class Group {
 public:
  explicit Group(dist::Comm* comm) : comm_(comm) {}
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int size() const { return comm_ ? comm_->size() : 1; }

  // Every rank's words (the same count on each), rank by rank.
  std::vector<std::uint64_t> all_gather(std::span<const std::uint64_t> mine) {
    std::vector<double> chunk(mine.size()), all(mine.size() * static_cast<std::size_t>(size()));
    std::transform(mine.begin(), mine.end(), chunk.begin(), [](std::uint64_t w) { return std::bit_cast<double>(w); });
    if (comm_) {
      comm_->all_gather(chunk, all);
    } else {
      all = chunk;
    }
    std::vector<std::uint64_t> out(all.size());
    std::transform(all.begin(), all.end(), out.begin(), [](double d) { return std::bit_cast<std::uint64_t>(d); });
    return out;
  }
  std::vector<std::uint64_t> broadcast(std::vector<std::uint64_t> words, int root) {
    if (!comm_) return words;
    std::vector<double> buf(words.size());
    std::transform(words.begin(), words.end(), buf.begin(), [](std::uint64_t w) { return std::bit_cast<double>(w); });
    comm_->broadcast(buf, root);
    std::transform(buf.begin(), buf.end(), words.begin(), [](double d) { return std::bit_cast<std::uint64_t>(d); });
    return words;
  }
  void broadcast_values(std::span<double> values, int root) {
    if (comm_) comm_->broadcast(values, root);
  }

 private:
  dist::Comm* comm_;
};

// An I/O failure as it travels between ranks: the step and its errno.
enum Step : std::uint64_t { kOk, kNonce, kCreate, kWrite, kSync, kRename, kSyncDirectory };
struct Failure {
  std::uint64_t step = kOk, err = 0;
  explicit operator bool() const { return step != kOk; }
  void note(Step s, int e) {
    if (!*this && e != 0) step = s, err = static_cast<std::uint64_t>(e);
  }
};

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

// Step 1 of write(): the ranks agree. One all_gather carries each rank's
// own problem, the hash of what it was given, its pieces' count and values;
// a second carries every piece's bounds, so each rank checks the tiling
// itself and rank 0 knows where gathered values go. Returns spans[q], rank
// q's non-empty pieces in its order (mine is this rank's).
std::vector<std::vector<Span>> agree(const std::string& path, Group& group, const Layout& layout,
                                     const std::vector<Piece>& mine, SharedFiles shared) {
  const int p = group.size();
  const std::size_t n = layout.n;
  std::size_t held = 0;
  for (const Piece& piece : mine) held += piece.values.size();
  const std::uint64_t hash = fnv1a(layout.header, fnv1a(path + '\0' + static_cast<char>(shared)));
  const std::array<std::uint64_t, 4> own = {layout.problem.empty() ? 0u : 1u, hash, mine.size(), held};
  const std::vector<std::uint64_t> all = group.all_gather(own);
  const auto field = [&](int q, int f) { return all[4 * static_cast<std::size_t>(q) + static_cast<std::size_t>(f)]; };
  if (!layout.problem.empty()) throw std::invalid_argument(fmt::format("checkpoint '{}': {}", path, layout.problem));
  std::size_t most = 0, total = 0;
  for (int q = 0; q < p; ++q) {
    if (field(q, 0) != 0) {
      throw std::invalid_argument(fmt::format("checkpoint '{}': rank {} has invalid arguments", path, q));
    }
    if (field(q, 1) != field(0, 1)) {
      throw std::invalid_argument(
          fmt::format("checkpoint '{}': rank {} has other tensors, metadata or options than rank 0", path, q));
    }
    most = std::max<std::size_t>(most, field(q, 2));
    total += field(q, 3);
  }
  if (total != n) {
    throw std::invalid_argument(fmt::format("checkpoint '{}': the pieces {}hold {} values, the tensors need {}", path,
                                            p == 1 ? "" : "of all ranks ", total, n));
  }

  std::vector<std::uint64_t> bounds(2 * most, 0);  // (offset, size) per piece, padded with empty ones
  for (std::size_t i = 0; i < mine.size(); ++i) {
    bounds[2 * i] = mine[i].offset;
    bounds[2 * i + 1] = mine[i].values.size();
  }
  if (most > 0) bounds = group.all_gather(bounds);
  std::vector<std::vector<Span>> spans(static_cast<std::size_t>(p));
  std::vector<std::pair<Span, int>> sorted;
  for (int q = 0; q < p; ++q) {
    for (std::size_t i = most * q; i < most * (q + 1); ++i) {
      const Span s{bounds[2 * i], bounds[2 * i + 1]};
      if (s.size > 0) spans[q].push_back(s), sorted.emplace_back(s, q);
    }
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.first.offset < y.first.offset; });
  const auto where = [p](int q) { return p == 1 ? std::string() : fmt::format(" of rank {}", q); };
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
  return spans;
}

// Steps 2 to 6 of the collective write, one method each, on what step 1
// agreed: the layout, this rank's pieces and every rank's spans.
class Writer {
 public:
  Writer(const std::string& path, Group& group, Layout& layout, const std::vector<Piece>& mine,
         const std::vector<std::vector<Span>>& spans, SharedFiles shared)
      : path_(path), group_(group), layout_(layout), mine_(mine), spans_(spans), shared_(shared) {}

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
    const std::vector<std::uint64_t> created = group_.broadcast({failure_.step, failure_.err, nonce}, 0);
    nonce_ = created[2];
    temp_path_ = temp_name(nonce_);
    if (created[0] != kOk) fail(0, created[0], created[1]);
    temp_.name = temp_path_;
  }

  // 3. Who writes: every rank where each finds the nonce in the file it
  //    opens by that name (so it is the one file), else rank 0 alone.
  void choose_writers() {
    const int p = group_.size();
    direct_ = shared_ != SharedFiles::No;
    if (!direct_ || p == 1) return;
    bool sees = r() == 0;
    if (r() != 0) {
      temp_.fd = ::open(temp_path_.c_str(), O_RDWR | O_CLOEXEC);
      std::array<char, kDigits> digits{};
      sees = temp_.fd >= 0 && read_all(temp_.fd, digits.data(), kDigits, kChecksumAt) == 0 &&
             std::string_view(digits.data(), kDigits) == hex(nonce_);
    }
    const std::vector<std::uint64_t> seen = group_.all_gather(std::array<std::uint64_t, 1>{sees ? 1u : 0u});
    for (int q = 0; q < p && direct_; ++q) direct_ = seen[static_cast<std::size_t>(q)] != 0;
    if (!direct_ && shared_ == SharedFiles::Yes) {
      const int q = static_cast<int>(std::find(seen.begin(), seen.end(), 0u) - seen.begin());
      throw std::runtime_error(
          fmt::format("checkpoint '{}': rank {} does not see rank 0's temporary file '{}' "
                      "(SharedFiles::Yes)",
                      path_, q, temp_path_));
    }
  }

  // 4. Write, each rank hashing its own values (its checksum partial sum,
  //    returned). A failure waits for the vote, so no rank leaves the
  //    collectives early. Gathered through rank 0, rank q's values go out
  //    in blocks of kBlock, its pieces end to end, by broadcast from q;
  //    rank 0 writes each run where the piece says.
  std::uint64_t write_values() {
    const int p = group_.size();
    const std::size_t data_at = layout_.header.size();
    std::uint64_t partial = 0;
    for (const Piece& piece : mine_) partial += checksum(piece.values, piece.offset);
    if (r() == 0 || direct_) {
      for (const Piece& piece : mine_) {
        failure_.note(kWrite,
                      write_all(temp_.fd, piece.values.data(), 8 * piece.values.size(), data_at + 8 * piece.offset));
      }
    }
    std::vector<double> block;
    for (int q = 1; q < p && !direct_; ++q) {
      const auto& theirs = spans_[static_cast<std::size_t>(q)];
      std::size_t values = 0;
      for (const Span& s : theirs) values += s.size;
      for (std::size_t start = 0; start < values; start += kBlock) {
        block.resize(std::min(kBlock, values - start));
        for_each_run(theirs, start, block.size(),
                     [&](std::size_t i, std::size_t within, std::size_t at, std::size_t len) {
                       if (r() == q)
                         std::copy_n(mine_[i].values.begin() + static_cast<std::ptrdiff_t>(within), len,
                                     block.begin() + static_cast<std::ptrdiff_t>(at));
                     });
        group_.broadcast_values(block, q);
        if (r() != 0) continue;
        for_each_run(
            theirs, start, block.size(), [&](std::size_t i, std::size_t within, std::size_t at, std::size_t len) {
              failure_.note(kWrite,
                            write_all(temp_.fd, block.data() + at, 8 * len, data_at + 8 * (theirs[i].offset + within)));
            });
      }
    }
    if (r() != 0 && temp_.fd >= 0) {
      if (direct_) failure_.note(kSync, ::fsync(temp_.fd) == 0 ? 0 : errno);  // a network filesystem flushes per client
      ::close(temp_.fd);
      temp_.fd = -1;
    }
    return partial;
  }

  // 5. Vote, and add up the checksum (integers: any order gives the same).
  std::uint64_t vote(std::uint64_t partial) {
    const std::vector<std::uint64_t> votes =
        group_.all_gather(std::array<std::uint64_t, 3>{failure_.step, failure_.err, partial});
    std::uint64_t sum = 0;
    for (int q = 0; q < group_.size(); ++q) {
      if (votes[3 * q] != kOk) fail(q, votes[3 * q], votes[3 * q + 1]);
      sum += votes[3 * q + 2];
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
    const std::vector<std::uint64_t> done = group_.broadcast({failure_.step, failure_.err}, 0);
    temp_.renamed = done[0] == kOk || done[0] == kSyncDirectory;
    if (done[0] != kOk) fail(0, done[0], done[1]);
  }

 private:
  int r() const { return group_.rank(); }
  std::string temp_name(std::uint64_t nonce) const { return fmt::format("{}.{}.tmp", path_, hex(nonce)); }

  // Every rank throws the same error for rank q's failed step.
  [[noreturn]] void fail(int q, std::uint64_t step, std::uint64_t err) const {
    const char* why = std::strerror(static_cast<int>(err));
    if (step == kRename)
      throw std::runtime_error(fmt::format("checkpoint '{}': cannot rename '{}' to it: {}", path_, temp_path_, why));
    if (step == kSyncDirectory)
      throw std::runtime_error(fmt::format("checkpoint '{}': cannot sync its directory: {}", path_, why));
    const char* verb = step == kNonce    ? "draw a name for"
                       : step == kCreate ? "create"
                       : step == kWrite  ? "write"
                                         : "sync";
    const std::string where = group_.size() == 1 ? std::string() : fmt::format("rank {} ", q);
    throw std::runtime_error(
        fmt::format("checkpoint '{}': {}cannot {} the temporary file '{}': {}", path_, where, verb, temp_path_, why));
  }

  const std::string& path_;
  Group& group_;
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
void write(const std::string& path, Group& group, const std::vector<TensorInfo>& tensors, const Metadata& metadata,
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
  const std::vector<std::vector<Span>> spans = agree(path, group, layout, mine, shared);
  Writer writer(path, group, layout, mine, spans, shared);
  writer.create();
  writer.choose_writers();
  const std::uint64_t partial = writer.write_values();
  const std::uint64_t sum = writer.vote(partial);
  writer.commit(sum + header_checksum(tensors, metadata));
}

}  // namespace

void write_safetensors(const std::string& path, dist::Comm& comm, const std::vector<TensorInfo>& tensors,
                       const Metadata& metadata, std::span<const Piece> pieces, SharedFiles shared) {
  Group group(&comm);
  write(path, group, tensors, metadata, pieces, shared);
}

void write_safetensors(const std::string& path, const std::vector<TensorInfo>& tensors, const Metadata& metadata,
                       std::span<const double> data) {
  Group group(nullptr);
  const Piece whole{.offset = 0, .values = data};
  write(path, group, tensors, metadata, std::span(&whole, 1), SharedFiles::Auto);
}

}  // namespace tinyllm::train
