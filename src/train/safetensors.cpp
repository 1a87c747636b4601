// safetensors: the header (nlohmann-json), the data region's checksum, the
// collective atomic writer and the checked reader. The data is never parsed
// as text: whole ranges move with pread/pwrite. Reference:
// https://github.com/huggingface/safetensors (its writer pads the header
// with spaces to a multiple of 8, as this one does).
#include "tinyllm/train/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <utility>

namespace tinyllm::train {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this host would need swaps");

using Json = nlohmann::ordered_json;  // keeps the tensors in data order

constexpr std::size_t kMaxHeader = 100'000'000;       // the reference reader's limit
constexpr std::size_t kBlock = std::size_t{1} << 16;  // doubles per gathered broadcast, per checksum read
// The header opens with the checksum, so its 16 digits sit at a fixed byte.
constexpr std::string_view kOpening = R"({"__metadata__":{"checksum":")";
constexpr std::size_t kChecksumAt = 8 + kOpening.size();
constexpr std::size_t kDigits = 16;

// The checksum: the sum mod 2^64, over the data region's 8-byte words w_i,
// of mix64(w_i ^ i·φ), mix64 being splitmix64's finalizer and φ the odd
// golden-ratio constant. A sum, so each rank hashes the words it writes and
// the partial sums add up; the position makes moved words count.
std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t checksum(std::span<const double> values, std::size_t first) {
  std::uint64_t sum = 0;
  for (std::size_t k = 0; k < values.size(); ++k) {
    sum += mix64(std::bit_cast<std::uint64_t>(values[k]) ^ ((first + k) * 0x9e3779b97f4a7c15ull));
  }
  return sum;
}

std::string hex(std::uint64_t value) { return fmt::format("{:016x}", value); }

// Whole ranges, over short transfers: 0, or the errno (ENODATA at an early end).
int write_all(int fd, const void* data, std::size_t bytes, std::size_t at) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t done = ::pwrite(fd, p, bytes, static_cast<off_t>(at));
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) return errno;
    p += done, at += static_cast<std::size_t>(done), bytes -= static_cast<std::size_t>(done);
  }
  return 0;
}

int read_all(int fd, void* data, std::size_t bytes, std::size_t at) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t done = ::pread(fd, p, bytes, static_cast<off_t>(at));
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) return errno;
    if (done == 0) return ENODATA;
    p += done, at += static_cast<std::size_t>(done), bytes -= static_cast<std::size_t>(done);
  }
  return 0;
}

bool multiply(std::size_t a, std::size_t b, std::size_t& out) { return !__builtin_mul_overflow(a, b, &out); }

// What a writer needs to know of its tensors: the header (8 + N bytes,
// checksum digits zero) and the data region's length n, or why not.
struct Layout {
  std::string header;
  std::size_t n = 0;
  std::string problem;
};

Layout lay_out(const std::vector<TensorInfo>& tensors, const Metadata& metadata) {
  Layout out;
  if (metadata.contains("checksum")) {
    out.problem = "metadata key 'checksum' is reserved for the writer's checksum";
    return out;
  }
  Json meta = Json::object();
  meta["checksum"] = std::string(kDigits, '0');
  for (const auto& [key, value] : metadata) meta[key] = value;
  Json header = Json::object();
  header["__metadata__"] = std::move(meta);
  for (const TensorInfo& t : tensors) {
    std::size_t numel = 1, bytes = 0;
    for (std::size_t d : t.shape) {
      if (!multiply(numel, d, numel)) numel = SIZE_MAX;
    }
    if (t.name.empty() || t.name == "__metadata__" || header.contains(t.name)) {
      out.problem = fmt::format("tensor name '{}' must be non-empty, not __metadata__ and unique", t.name);
      return out;
    }
    if (!multiply(numel, 8, bytes) || out.n * 8 + bytes < bytes || out.n * 8 + bytes > SIZE_MAX / 2) {
      out.problem = fmt::format("tensor '{}' has too many elements: shape [{}]", t.name, fmt::join(t.shape, ", "));
      return out;
    }
    header[t.name] = {
        {"dtype", "F64"}, {"shape", t.shape}, {"data_offsets", Json::array({out.n * 8, out.n * 8 + bytes})}};
    out.n += numel;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& error) {
    out.problem = fmt::format("tensor names and metadata must be valid UTF-8 ({})", error.what());
    return out;
  }
  if (text.size() > kMaxHeader) {
    out.problem = fmt::format("the header of {} bytes exceeds the limit of {}", text.size(), kMaxHeader);
    return out;
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // 8 + N, hence the data, 8-byte aligned
  out.header.resize(8);
  for (int byte = 0; byte < 8; ++byte) out.header[byte] = static_cast<char>((text.size() >> (8 * byte)) & 0xff);
  out.header += text;
  return out;
}

// FNV-1a, for the ranks to compare what they were given.
std::uint64_t fnv1a(std::string_view bytes, std::uint64_t h = 14695981039346656037ull) {
  for (char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

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

// The collective write, steps 1 to 6.
void write(const std::string& path, Group& group, const std::vector<TensorInfo>& tensors, const Metadata& metadata,
           std::span<const Piece> pieces, SharedFiles shared) {
  const int p = group.size(), r = group.rank();
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
  const auto where = [p](int q) { return p == 1 ? std::string() : fmt::format("rank {} ", q); };

  // 2. Rank 0 creates the temporary file and writes the header, with a
  //    random nonce where the checksum will go; every rank learns the
  //    outcome and the nonce, hence the file's name.
  const auto temp_name = [&](std::uint64_t nonce) { return fmt::format("{}.{}.tmp", path, hex(nonce)); };
  TempFile temp;
  Failure failure;
  std::uint64_t nonce = 0;
  if (r == 0) {
    failure.note(kNonce, ::getentropy(&nonce, sizeof nonce) == 0 ? 0 : errno);
    if (!failure) {
      temp.fd = ::open(temp_name(nonce).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      failure.note(kCreate, temp.fd < 0 ? errno : 0);
    }
    if (temp.fd >= 0) {
      temp.name = temp_name(nonce);
      layout.header.replace(kChecksumAt, kDigits, hex(nonce));
      failure.note(kWrite, write_all(temp.fd, layout.header.data(), layout.header.size(), 0));
    }
  }
  const std::vector<std::uint64_t> created = group.broadcast({failure.step, failure.err, nonce}, 0);
  nonce = created[2];
  const std::string temp_path = temp_name(nonce);
  const auto fail = [&](int q, std::uint64_t step, std::uint64_t err) {
    const char* why = std::strerror(static_cast<int>(err));
    if (step == kRename)
      throw std::runtime_error(fmt::format("checkpoint '{}': cannot rename '{}' to it: {}", path, temp_path, why));
    if (step == kSyncDirectory)
      throw std::runtime_error(fmt::format("checkpoint '{}': cannot sync its directory: {}", path, why));
    const char* verb = step == kNonce    ? "draw a name for"
                       : step == kCreate ? "create"
                       : step == kWrite  ? "write"
                                         : "sync";
    throw std::runtime_error(
        fmt::format("checkpoint '{}': {}cannot {} the temporary file '{}': {}", path, where(q), verb, temp_path, why));
  };
  if (created[0] != kOk) fail(0, created[0], created[1]);
  temp.name = temp_path;

  // 3. Who writes: every rank where each finds the nonce in the file it
  //    opens by that name (so it is the one file), else rank 0 alone.
  bool direct = shared != SharedFiles::No;
  if (direct && p > 1) {
    bool sees = r == 0;
    if (r != 0) {
      temp.fd = ::open(temp_path.c_str(), O_RDWR | O_CLOEXEC);
      std::array<char, kDigits> digits{};
      sees = temp.fd >= 0 && read_all(temp.fd, digits.data(), kDigits, kChecksumAt) == 0 &&
             std::string_view(digits.data(), kDigits) == hex(nonce);
    }
    const std::vector<std::uint64_t> seen = group.all_gather(std::array<std::uint64_t, 1>{sees ? 1u : 0u});
    for (int q = 0; q < p && direct; ++q) direct = seen[static_cast<std::size_t>(q)] != 0;
    if (!direct && shared == SharedFiles::Yes) {
      const int q = static_cast<int>(std::find(seen.begin(), seen.end(), 0u) - seen.begin());
      throw std::runtime_error(
          fmt::format("checkpoint '{}': rank {} does not see rank 0's temporary file '{}' "
                      "(SharedFiles::Yes)",
                      path, q, temp_path));
    }
  }

  // 4. Write, each rank hashing its own values (its checksum partial sum).
  //    A failure waits for the vote, so no rank leaves the collectives early.
  //    Gathered through rank 0, rank q's values go out in blocks of kBlock,
  //    its pieces end to end, by broadcast from q; rank 0 writes each run
  //    where the piece says.
  const std::size_t data_at = layout.header.size();
  std::uint64_t partial = 0;
  for (const Piece& piece : mine) partial += checksum(piece.values, piece.offset);
  if (r == 0 || direct) {
    for (const Piece& piece : mine) {
      failure.note(kWrite,
                   write_all(temp.fd, piece.values.data(), 8 * piece.values.size(), data_at + 8 * piece.offset));
    }
  }
  std::vector<double> block;
  for (int q = 1; q < p && !direct; ++q) {
    const auto& theirs = spans[static_cast<std::size_t>(q)];
    std::size_t values = 0;
    for (const Span& s : theirs) values += s.size;
    for (std::size_t start = 0; start < values; start += kBlock) {
      block.resize(std::min(kBlock, values - start));
      for_each_run(theirs, start, block.size(),
                   [&](std::size_t i, std::size_t within, std::size_t at, std::size_t len) {
                     if (r == q)
                       std::copy_n(mine[i].values.begin() + static_cast<std::ptrdiff_t>(within), len,
                                   block.begin() + static_cast<std::ptrdiff_t>(at));
                   });
      group.broadcast_values(block, q);
      if (r != 0) continue;
      for_each_run(
          theirs, start, block.size(), [&](std::size_t i, std::size_t within, std::size_t at, std::size_t len) {
            failure.note(kWrite,
                         write_all(temp.fd, block.data() + at, 8 * len, data_at + 8 * (theirs[i].offset + within)));
          });
    }
  }
  if (r != 0 && temp.fd >= 0) {
    if (direct) failure.note(kSync, ::fsync(temp.fd) == 0 ? 0 : errno);  // a network filesystem flushes per client
    ::close(temp.fd);
    temp.fd = -1;
  }

  // 5. Vote, and add up the checksum (integers: any order gives the same).
  const std::vector<std::uint64_t> votes =
      group.all_gather(std::array<std::uint64_t, 3>{failure.step, failure.err, partial});
  std::uint64_t sum = 0;
  for (int q = 0; q < p; ++q) {
    if (votes[3 * q] != kOk) fail(q, votes[3 * q], votes[3 * q + 1]);
    sum += votes[3 * q + 2];
  }

  // 6. Rank 0 patches the checksum in, syncs, renames, syncs the directory,
  //    and tells every rank how it went.
  if (r == 0) {
    const std::string digits = hex(sum);
    failure.note(kWrite, write_all(temp.fd, digits.data(), kDigits, kChecksumAt));
    if (!failure) failure.note(kSync, ::fsync(temp.fd) == 0 ? 0 : errno);
    ::close(temp.fd);
    temp.fd = -1;
    if (!failure) {
      failure.note(kRename, ::rename(temp_path.c_str(), path.c_str()) == 0 ? 0 : errno);
      temp.renamed = !failure;
    }
    if (!failure) {
      std::string directory = std::filesystem::path(path).parent_path().string();
      const int fd = ::open(directory.empty() ? "." : directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      failure.note(kSyncDirectory, fd < 0 ? errno : ::fsync(fd) == 0 ? 0 : errno);
      if (fd >= 0) ::close(fd);
    }
  }
  const std::vector<std::uint64_t> done = group.broadcast({failure.step, failure.err}, 0);
  temp.renamed = done[0] == kOk || done[0] == kSyncDirectory;
  if (done[0] != kOk) fail(0, done[0], done[1]);
}

}  // namespace

std::size_t TensorInfo::numel() const {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

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

SafetensorsFile::SafetensorsFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      data_start_(other.data_start_),
      size_(other.size_),
      tensors_(std::move(other.tensors_)),
      offsets_(std::move(other.offsets_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    data_start_ = other.data_start_;
    size_ = other.size_;
    tensors_ = std::move(other.tensors_);
    offsets_ = std::move(other.offsets_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

// Checks, in order: the length field, the header against the file, the
// JSON, each entry alone, the entries together (sorted by offset they must
// run from 0 to the end of the file), then the checksum.
SafetensorsFile SafetensorsFile::open(const std::string& path) {
  const auto bad = [&path](const std::string& what) {
    return std::invalid_argument(fmt::format("checkpoint '{}' {}", path, what));
  };
  const auto io = [&path](const char* what, int err) {
    return std::runtime_error(fmt::format("checkpoint '{}' cannot be {}: {}", path, what, std::strerror(err)));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw io("opened", errno);
  SafetensorsFile file(path, fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw io("examined", errno);
  if (!S_ISREG(st.st_mode)) throw bad("is not a regular file");
  const auto file_size = static_cast<std::size_t>(st.st_size);
  if (file_size < 8)
    throw bad(fmt::format("is truncated: {} bytes, too short for the 8-byte header length", file_size));

  std::array<unsigned char, 8> length{};
  if (int err = read_all(fd, length.data(), 8, 0)) throw io("read", err);
  std::uint64_t n_header = 0;
  for (int byte = 0; byte < 8; ++byte) n_header |= std::uint64_t{length[byte]} << (8 * byte);
  if (n_header > file_size - 8) {
    throw bad(
        fmt::format("is truncated: its header length is {} bytes, but only {} bytes follow", n_header, file_size - 8));
  }
  if (n_header > kMaxHeader)
    throw bad(fmt::format("has a header of {} bytes, over the limit of {}", n_header, kMaxHeader));
  std::string text(n_header, '\0');
  if (int err = read_all(fd, text.data(), text.size(), 8)) throw io("read", err);

  // The parser keeps one value per key; the callback sees every top-level key.
  std::set<std::string> names;
  const Json::parser_callback_t no_twice = [&](int depth, nlohmann::json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && !names.insert(parsed.get<std::string>()).second) {
      throw bad(fmt::format("names '{}' twice in its header", parsed.get<std::string>()));
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text, no_twice);
  } catch (const Json::parse_error& error) {
    throw bad(fmt::format("has an invalid JSON header: {}", error.what()));
  }
  if (!header.is_object()) throw bad(fmt::format("has a header that is not a JSON object: {}", header.dump()));

  struct Entry {
    TensorInfo info;
    std::size_t begin = 0, end = 0;
  };
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) throw bad(fmt::format("has __metadata__ that is not an object: {}", value.dump()));
      for (const auto& [name, text_value] : value.items()) {
        if (!text_value.is_string()) {
          throw bad(fmt::format("has metadata '{}' that is not a string: {}", name, text_value.dump()));
        }
        file.metadata_[name] = text_value.get<std::string>();
      }
      continue;
    }
    const auto entry_bad = [&](const std::string& what) { return bad(fmt::format("tensor '{}' {}", key, what)); };
    if (!value.is_object()) throw entry_bad(fmt::format("is not an object: {}", value.dump()));
    for (const auto& [field, ignored] : value.items()) {
      if (field != "dtype" && field != "shape" && field != "data_offsets")
        throw entry_bad(fmt::format("has an unknown field '{}'", field));
    }
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
      if (!value.contains(field)) throw entry_bad(fmt::format("lacks '{}'", field));
    }
    const Json& dtype = value["dtype"];
    if (dtype != "F64")
      throw entry_bad(
          fmt::format("has dtype {}, expected F64", dtype.is_string() ? dtype.get<std::string>() : dtype.dump()));
    const Json& shape = value["shape"];
    const Json& offsets = value["data_offsets"];
    const auto unsigned_array = [](const Json& a) {
      return a.is_array() && std::all_of(a.begin(), a.end(), [](const Json& x) { return x.is_number_unsigned(); });
    };
    if (!unsigned_array(shape)) throw entry_bad(fmt::format("has an invalid shape {}", shape.dump()));
    if (!unsigned_array(offsets) || offsets.size() != 2 || offsets[0] > offsets[1]) {
      throw entry_bad(fmt::format("has invalid data_offsets {}", offsets.dump()));
    }
    Entry entry{.info = {.name = key, .shape = shape.get<std::vector<std::size_t>>()},
                .begin = offsets[0].get<std::size_t>(),
                .end = offsets[1].get<std::size_t>()};
    std::size_t bytes = 8;
    for (std::size_t d : entry.info.shape) {
      if (!multiply(bytes, d, bytes)) throw entry_bad(fmt::format("has a shape {} too large to address", shape.dump()));
    }
    if (bytes != entry.end - entry.begin) {
      throw entry_bad(fmt::format("has shape {} ({} bytes) but data_offsets {} ({} bytes)", shape.dump(), bytes,
                                  offsets.dump(), entry.end - entry.begin));
    }
    entries.push_back(std::move(entry));
  }

  // In data order; empty tensors at one offset keep the header's order.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& x, const Entry& y) { return x.begin < y.begin; });
  std::size_t cursor = 0;
  for (const Entry& e : entries) {
    if (e.begin < cursor) {
      throw bad(fmt::format("has tensor '{}' at bytes [{}, {}) overlapping the tensor before it, which ends at byte {}",
                            e.info.name, e.begin, e.end, cursor));
    }
    if (e.begin > cursor) {
      throw bad(fmt::format("has a hole: bytes [{}, {}) of the data, before tensor '{}', belong to no tensor", cursor,
                            e.begin, e.info.name));
    }
    cursor = e.end;
  }
  const std::size_t data_bytes = file_size - 8 - n_header;
  if (cursor > data_bytes) {
    throw bad(fmt::format("is truncated: header says {} bytes of data, file has {}", cursor, data_bytes));
  }
  if (cursor < data_bytes) {
    throw bad(fmt::format("has {} bytes after its last tensor: header says {} bytes of data, file has {}",
                          data_bytes - cursor, cursor, data_bytes));
  }
  file.data_start_ = 8 + n_header;
  file.size_ = cursor / 8;
  for (Entry& e : entries) {
    file.index_.emplace(e.info.name, file.tensors_.size());
    file.offsets_.push_back(e.begin / 8);
    file.tensors_.push_back(std::move(e.info));
  }

  if (const auto stored = file.metadata_.find("checksum"); stored != file.metadata_.end()) {
    const std::string& digits = stored->second;
    if (digits.size() != kDigits || !std::all_of(digits.begin(), digits.end(), [](char c) {
          return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
        })) {
      throw bad(fmt::format("has a malformed checksum '{}' (expected {} hex digits)", digits, kDigits));
    }
    std::vector<double> block(std::min(kBlock, file.size_));
    std::uint64_t sum = 0;
    for (std::size_t start = 0; start < file.size_; start += kBlock) {
      const std::span<double> part(block.data(), std::min(kBlock, file.size_ - start));
      file.read(start, part);
      sum += checksum(part, start);
    }
    if (hex(sum) != digits) {
      throw bad(fmt::format("has a checksum mismatch (stored {}, computed {}): the data region is corrupt", digits,
                            hex(sum)));
    }
  }
  return file;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::size_t SafetensorsFile::offset(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) throw std::invalid_argument(fmt::format("checkpoint '{}' has no tensor '{}'", path_, name));
  return offsets_[it->second];
}

void SafetensorsFile::read(std::size_t offset, std::span<double> out) const {
  if (offset > size_ || out.size() > size_ - offset) {
    throw std::invalid_argument(fmt::format("checkpoint '{}': values [{}, {}) lie outside the data region of {} values",
                                            path_, offset, offset + out.size(), size_));
  }
  if (int err = read_all(fd_, out.data(), 8 * out.size(), data_start_ + 8 * offset)) {
    throw std::runtime_error(fmt::format("checkpoint '{}' cannot be read: {}", path_, std::strerror(err)));
  }
}

}  // namespace tinyllm::train
