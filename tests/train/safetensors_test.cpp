#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <tinyllm/distributed/chunk.h>
#include <tinyllm/distributed/procs_comm.h>
#include <tinyllm/distributed/threads_comm.h>
#include <tinyllm/train/safetensors.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "support/expect_throw.h"

namespace tinyllm::train {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system's temporary directory, removed with
// everything in it.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> count{0};
    path_ = fs::temp_directory_path() /
            ("tinyllm_safetensors_" + std::to_string(::getpid()) + "_" + std::to_string(count++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // What the directory holds, sorted: a leftover temporary file shows here.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : fs::directory_iterator(path_)) out.push_back(entry.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  fs::path path_;
};

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string le64(std::uint64_t value) {
  std::string out(8, '\0');
  for (int byte = 0; byte < 8; ++byte) out[byte] = static_cast<char>((value >> (8 * byte)) & 0xff);
  return out;
}

// A file as the format lays it out, from a header written by hand.
std::string raw_file(const std::string& header, const std::vector<double>& data) {
  std::string out = le64(header.size()) + header;
  out.append(reinterpret_cast<const char*>(data.data()), 8 * data.size());
  return out;
}

// A small GPT's worth of tensors, an empty one among them: n = 15 + 3 + 0 + 21.
const std::vector<TensorInfo> kTensors = {
    {"wte.weight", {5, 3}}, {"ln_f.bias", {3}}, {"empty", {0, 4}}, {"h.0.attn.c_attn.weight", {3, 7}}};
constexpr std::size_t kN = 39;
const Metadata kMetadata = {{"step", "12"}, {"format", "tinyllm"}};

// Values with every bit in play, a formula of the index.
std::vector<double> values(std::size_t n) {
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = std::sin(1.0 + i) * std::pow(10.0, static_cast<double>(i % 7) - 3);
  return out;
}

// Rank r's chunk_bounds chunk, as two uneven pieces, the later one first.
std::vector<Piece> pieces_of(std::span<const double> data, int p, int r) {
  const auto [a, b] = dist::chunk_bounds(data.size(), p, r);
  const std::size_t m = a + (b - a) / 3;
  return {Piece{m, data.subspan(m, b - m)}, Piece{a, data.subspan(a, m - a)}};
}

using Run = std::function<void(int, const std::function<void(dist::Comm&)>&)>;
const Run kThreads = [](int p, const std::function<void(dist::Comm&)>& fn) { dist::run_threads(p, fn); };
const Run kProcs = [](int p, const std::function<void(dist::Comm&)>& fn) { dist::run_procs(p, fn); };

void write_on(const Run& run, int p, SharedFiles shared, const std::string& path, std::span<const double> data,
              const std::vector<TensorInfo>& tensors = kTensors) {
  run(p, [&](dist::Comm& comm) {
    const std::vector<Piece> pieces = pieces_of(data, p, comm.rank());
    write_safetensors(path, comm, tensors, kMetadata, pieces, shared);
  });
}

// The message each of p thread ranks threw (empty where none): every rank
// must throw, none may hang.
std::vector<std::string> errors_on_threads(int p, const std::function<void(dist::Comm&)>& fn) {
  std::vector<std::string> messages(static_cast<std::size_t>(p));
  dist::run_threads(p,
                    [&](dist::Comm& comm) {
                      try {
                        fn(comm);
                      } catch (const std::exception& error) {
                        messages[static_cast<std::size_t>(comm.rank())] = error.what();
                      }
                    },
                    {.timeout = std::chrono::seconds(20)});
  return messages;
}

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

TEST(SafetensorsTest, WritesTheExactBytesOfTheFormat) {
  // Two tensors out of alphabetical order and one metadata entry. The header
  // is the reference's compact JSON, the checksum first (its value from an
  // independent Python computation of the documented hash of the data and
  // the header), padded with
  // spaces to 176 bytes so the data starts at byte 184, a multiple of 8.
  TempDir dir;
  const std::string path = dir.file("tiny.safetensors");
  write_safetensors(path, {{"wte", {2}}, {"a", {1, 1}}}, {{"step", "7"}}, std::vector<double>{1.0, -2.5, 0.125});
  const std::string header = R"({"__metadata__":{"checksum":"5f90977b5cd4c6d9","step":"7"},)"
                             R"("wte":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},)"
                             R"("a":{"dtype":"F64","shape":[1,1],"data_offsets":[16,24]}}    )";
  const std::string expected = std::string("\xb0\0\0\0\0\0\0\0", 8) + header +
                               std::string("\0\0\0\0\0\0\xf0\x3f", 8) +  // 1.0
                               std::string("\0\0\0\0\0\0\x04\xc0", 8) +  // -2.5
                               std::string("\0\0\0\0\0\0\xc0\x3f", 8);   // 0.125
  ASSERT_EQ(header.size(), 176u);
  EXPECT_EQ(contents(path), expected);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"tiny.safetensors"});
}

TEST(SafetensorsTest, RoundTripsValuesAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const std::vector<double> data = values(kN);
  write_safetensors(path, kTensors, kMetadata, data);

  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.size(), kN);
  ASSERT_EQ(file.tensors().size(), kTensors.size());
  for (std::size_t i = 0; i < kTensors.size(); ++i) {
    EXPECT_EQ(file.tensors()[i].name, kTensors[i].name);
    EXPECT_EQ(file.tensors()[i].shape, kTensors[i].shape);
  }
  EXPECT_EQ(file.metadata().at("step"), "12");
  EXPECT_EQ(file.metadata().at("format"), "tinyllm");
  EXPECT_EQ(file.metadata().at("checksum").size(), 16u);
  EXPECT_EQ(file.offset("ln_f.bias"), 15u);
  EXPECT_EQ(file.offset("empty"), 18u);
  EXPECT_EQ(file.offset("h.0.attn.c_attn.weight"), 18u);
  ASSERT_NE(file.find("h.0.attn.c_attn.weight"), nullptr);
  EXPECT_EQ(file.find("h.0.attn.c_attn.weight")->numel(), 21u);
  EXPECT_EQ(file.find("wte"), nullptr);

  std::vector<double> all(kN), part(4);
  file.read(0, all);
  EXPECT_EQ(all, data);
  file.read(15, part);
  EXPECT_EQ(part, std::vector<double>(data.begin() + 15, data.begin() + 19));
  file.read(kN, std::span<double>());
}

TEST(SafetensorsTest, ReadsFilesWithoutChecksumOrPadding) {
  // As another writer may leave them: no metadata, the header not padded.
  TempDir dir;
  const std::string path = dir.file("other.safetensors");
  put(path, raw_file(R"({"b":{"dtype":"F64","shape":[],"data_offsets":[8,16]},)"
                     R"("a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})",
                     {4.5, -1.0}));
  const SafetensorsFile file = SafetensorsFile::open(path);
  ASSERT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.tensors()[0].name, "a");  // data order, not header order
  EXPECT_EQ(file.offset("b"), 1u);
  EXPECT_TRUE(file.metadata().empty());
  std::vector<double> out(1);
  file.read(1, out);
  EXPECT_EQ(out[0], -1.0);
}

// p = 1..4 ranks of a backend, each writing its chunk, give the bytes of
// the one-process file in every sharing mode.
void expect_ranks_write_the_one_process_bytes(const Run& run, const std::vector<SharedFiles>& modes) {
  TempDir dir;
  const std::vector<double> data = values(kN);
  write_safetensors(dir.file("one.safetensors"), kTensors, kMetadata, data);
  const std::string expected = contents(dir.file("one.safetensors"));
  for (int p = 1; p <= 4; ++p) {
    for (SharedFiles shared : modes) {
      SCOPED_TRACE("p = " + std::to_string(p) + ", shared = " + std::to_string(static_cast<int>(shared)));
      write_on(run, p, shared, dir.file("ranks.safetensors"), data);
      EXPECT_EQ(contents(dir.file("ranks.safetensors")), expected);
    }
  }
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"one.safetensors", "ranks.safetensors"}));
}

TEST(SafetensorsTest, ThreadRanksWriteTheOneProcessBytes) {
  expect_ranks_write_the_one_process_bytes(kThreads, {SharedFiles::Auto, SharedFiles::Yes, SharedFiles::No});
}

TEST(SafetensorsTest, ProcessRanksWriteTheOneProcessBytes) {
  expect_ranks_write_the_one_process_bytes(kProcs, {SharedFiles::Auto, SharedFiles::No});
}

TEST(SafetensorsTest, GatheringThroughRankZeroStreamsLargeRegionsInBlocks) {
  // 300000 values on 3 ranks: each rank's 100000 go out in two blocks of
  // at most 65536, each block holding runs of both its pieces.
  TempDir dir;
  const std::vector<TensorInfo> tensors = {{"big", {1000, 300}}};
  const std::vector<double> data = values(300'000);
  write_safetensors(dir.file("one.safetensors"), tensors, kMetadata, data);
  const std::string expected = contents(dir.file("one.safetensors"));
  for (SharedFiles shared : {SharedFiles::Auto, SharedFiles::No}) {
    write_on(kThreads, 3, shared, dir.file("three.safetensors"), data, tensors);
    EXPECT_TRUE(contents(dir.file("three.safetensors")) == expected);  // no megabyte diff on failure
  }
  std::vector<double> out(data.size());
  SafetensorsFile::open(dir.file("three.safetensors")).read(0, out);
  EXPECT_EQ(out, data);
}

TEST(SafetensorsTest, WritesEmptyDataRegions) {
  TempDir dir;
  const std::string path = dir.file("empty.safetensors");
  dist::run_threads(2, [&](dist::Comm& comm) { write_safetensors(path, comm, {{"e", {0}}}, {}, {}); });
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.size(), 0u);
  ASSERT_EQ(file.tensors().size(), 1u);
  EXPECT_EQ(file.tensors()[0].name, "e");
  // No data: the checksum is the header's share alone (the same Python).
  EXPECT_EQ(file.metadata().at("checksum"), "c44b1a354ffd3350");
  write_safetensors(path, {}, {}, std::span<const double>());
  EXPECT_TRUE(SafetensorsFile::open(path).tensors().empty());
}

TEST(SafetensorsTest, FailedWriteKeepsTheOldFileAndLeavesNoTemporary) {
  // A file size limit makes the data's writes fail with EFBIG after the
  // temporary file exists: in every rank's writes (Auto) or in rank 0's
  // while it gathers (No), which must still follow the broadcasts.
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const std::vector<TensorInfo> tensors = {{"big", {20'000}}};
  const std::vector<double> data = values(20'000);
  write_safetensors(path, kTensors, kMetadata, values(kN));
  const std::string old = contents(path);

  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto saved_handler = ::signal(SIGXFSZ, SIG_IGN);
  rlimit limited = saved;
  limited.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  for (SharedFiles shared : {SharedFiles::Auto, SharedFiles::No}) {
    const std::vector<std::string> errors = errors_on_threads(2, [&](dist::Comm& comm) {
      write_safetensors(path, comm, tensors, kMetadata, pieces_of(data, 2, comm.rank()), shared);
    });
    for (const std::string& error : errors) {
      EXPECT_TRUE(contains(error, "checkpoint '" + path + "'") && contains(error, "cannot write the temporary file") &&
                  contains(error, std::strerror(EFBIG)))
          << error;
    }
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, saved_handler);
  EXPECT_EQ(contents(path), old);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"model.safetensors"});
}

TEST(SafetensorsTest, AFileSizeLimitIsAnErrorNotASignal) {
  // As `ulimit -f` leaves a process: SIGXFSZ at its default, which kills. A
  // child writes under the limit, so that the signal, were it raised, kills
  // only the child; it exits 0 when the write threw EFBIG's message.
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_safetensors(path, kTensors, kMetadata, values(kN));
  const std::string old = contents(path);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_DFL);
    const rlimit limited{.rlim_cur = 64 * 1024, .rlim_max = RLIM_INFINITY};
    bool reported = false;
    if (::setrlimit(RLIMIT_FSIZE, &limited) == 0) {
      try {
        write_safetensors(path, {{"big", {20'000}}}, kMetadata, values(20'000));
      } catch (const std::runtime_error& error) {
        reported =
            contains(error.what(), "cannot write the temporary file") && contains(error.what(), std::strerror(EFBIG));
      }
    }
    sigset_t pending;
    sigpending(&pending);
    ::_exit(reported && sigismember(&pending, SIGXFSZ) == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << (WIFSIGNALED(status) ? "killed by " + std::string(strsignal(WTERMSIG(status)))
                              : "exit status " + std::to_string(WEXITSTATUS(status)));
  EXPECT_EQ(contents(path), old);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"model.safetensors"});
}

TEST(SafetensorsTest, FailedRenameLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("taken");
  fs::create_directory(path);
  const std::vector<double> data = values(kN);
  for (const std::string& error : errors_on_threads(2, [&](dist::Comm& comm) {
         write_safetensors(path, comm, kTensors, kMetadata, pieces_of(data, 2, comm.rank()));
       })) {
    EXPECT_TRUE(contains(error, "cannot rename '" + path + ".") && contains(error, std::strerror(EISDIR))) << error;
  }
  EXPECT_EQ(dir.names(), std::vector<std::string>{"taken"});
}

TEST(SafetensorsTest, RejectsPiecesNotTilingTheRegion) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_safetensors(path, kTensors, kMetadata, values(kN));
  const std::string old = contents(path);
  const std::vector<double> data = values(kN);
  const auto piece = [&](std::size_t a, std::size_t b) { return Piece{a, std::span(data).subspan(a, b - a)}; };
  const auto try_pieces = [&](std::vector<Piece> rank0, std::vector<Piece> rank1) {
    return errors_on_threads(2, [&](dist::Comm& comm) {
      write_safetensors(path, comm, kTensors, kMetadata, comm.rank() == 0 ? rank0 : rank1);
    });
  };
  for (const std::string& error : try_pieces({piece(0, 20)}, {piece(20, 38)})) {
    EXPECT_TRUE(contains(error, "the pieces of all ranks hold 38 values, the tensors need 39")) << error;
  }
  for (const std::string& error : try_pieces({piece(0, 20)}, {piece(19, 38)})) {
    EXPECT_TRUE(contains(error, "the piece [0, 20) of rank 0 and the piece [19, 38) of rank 1 overlap")) << error;
  }
  for (const std::string& error : try_pieces({piece(0, 10), piece(11, 20)}, {piece(20, 39), piece(25, 26)})) {
    EXPECT_TRUE(contains(error, "the piece [0, 10) of rank 0 and the piece [11, 20) of rank 0 leave a hole")) << error;
  }
  const std::vector<std::string> range = try_pieces({piece(0, 20)}, {Piece{30, std::span(data).subspan(20, 15)}});
  EXPECT_TRUE(contains(range[0], "rank 1 has invalid arguments")) << range[0];
  EXPECT_TRUE(contains(range[1], "piece [30, 45) lies outside the data region of 39 values")) << range[1];
  EXPECT_THROW_WITH(write_safetensors(path, kTensors, kMetadata, std::span(data).first(38)), std::invalid_argument,
                    "checkpoint '" + path + "': the pieces hold 38 values, the tensors need 39");
  EXPECT_EQ(contents(path), old);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"model.safetensors"});
}

TEST(SafetensorsTest, RejectsRanksDisagreeingOnTensors) {
  TempDir dir;
  const std::vector<double> data = values(kN);
  std::vector<TensorInfo> transposed = kTensors;
  transposed[0].shape = {3, 5};
  for (const std::string& error : errors_on_threads(3, [&](dist::Comm& comm) {
         write_safetensors(dir.file("model.safetensors"), comm, comm.rank() == 2 ? transposed : kTensors, kMetadata,
                           pieces_of(data, 3, comm.rank()));
       })) {
    EXPECT_TRUE(contains(error, "rank 2 has other tensors, metadata or options than rank 0")) << error;
  }
  EXPECT_TRUE(dir.names().empty());
}

TEST(SafetensorsTest, RejectsAnUnwritableDirectory) {
  // A regular file where a directory should be: refused even to root.
  TempDir dir;
  put(dir.file("plain"), "x");
  const std::string path = dir.file("plain") + "/model.safetensors";
  const std::vector<double> data = values(kN);
  for (const std::string& error : errors_on_threads(3, [&](dist::Comm& comm) {
         write_safetensors(path, comm, kTensors, kMetadata, pieces_of(data, 3, comm.rank()));
       })) {
    EXPECT_TRUE(contains(error, "checkpoint '" + path + "': rank 0 cannot create the temporary file") &&
                contains(error, std::strerror(ENOTDIR)))
        << error;
  }
  EXPECT_THROW_WITH(write_safetensors(path, kTensors, kMetadata, data), std::runtime_error,
                    "checkpoint '" + path + "': cannot create the temporary file");
  EXPECT_EQ(dir.names(), std::vector<std::string>{"plain"});
}

TEST(SafetensorsTest, RejectsTheReservedChecksumKey) {
  TempDir dir;
  EXPECT_THROW_WITH(write_safetensors(dir.file("m.safetensors"), kTensors, {{"checksum", "0"}}, values(kN)),
                    std::invalid_argument, "metadata key 'checksum' is reserved");
  EXPECT_THROW_WITH(write_safetensors(dir.file("m.safetensors"), {{"a", {1}}, {"a", {2}}}, {}, values(3)),
                    std::invalid_argument, "tensor name 'a' must be non-empty, not __metadata__ and unique");
  EXPECT_TRUE(dir.names().empty());
}

// Reading: each damage to a good file, or a header written by hand, is
// named with the path.
class SafetensorsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write_safetensors(path_, kTensors, kMetadata, values(kN));
    good_ = contents(path_);
  }
  void expect_rejected(const std::string& bytes, const std::string& fragment) {
    put(path_, bytes);
    EXPECT_THROW_WITH(SafetensorsFile::open(path_), std::invalid_argument, "checkpoint '" + path_ + "' " + fragment);
  }
  // A header of two tensors a ([2], F64) and b, with b's fields as given.
  void expect_header_rejected(const std::string& b, const std::string& fragment, std::size_t values_in_file = 3) {
    const std::string header = R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},"b":)" + b + "}";
    expect_rejected(raw_file(header, std::vector<double>(values_in_file, 1.0)), fragment);
  }

  TempDir dir_;
  std::string path_ = dir_.file("model.safetensors");
  std::string good_;
};

TEST_F(SafetensorsFileTest, RejectsATruncatedFile) {
  expect_rejected(good_.substr(0, good_.size() - 8), "is truncated: header says 312 bytes of data, file has 304");
  expect_rejected(good_ + std::string(8, '\0'), "has 8 bytes after its last tensor");
  expect_rejected(std::string("\x10\0\0\0\0", 5), "is truncated: 5 bytes, too short for the 8-byte header length");
  expect_rejected(le64(1000) + good_.substr(8), "is truncated: its header length is 1000 bytes, but only");
}

TEST_F(SafetensorsFileTest, RejectsABadHeader) {
  expect_rejected(raw_file(R"({"a": {"dtype": )", {}), "has an invalid JSON header");
  expect_rejected(raw_file("[1, 2]", {}), "has a header that is not a JSON object");
  expect_rejected(raw_file(R"({"__metadata__":{"step":12}})", {}), "has metadata 'step' that is not a string: 12");
  expect_header_rejected(R"({"dtype":"F32","shape":[2],"data_offsets":[16,24]})",
                         "tensor 'b' has dtype F32, expected F64");
  expect_header_rejected(R"({"dtype":"F64","shape":[2],"data_offsets":[16,24]})",
                         "tensor 'b' has shape [2] (16 bytes) but data_offsets [16,24] (8 bytes)");
  expect_header_rejected(R"({"dtype":"F64","shape":[1],"data_offsets":[24,32]})",
                         "has a hole: bytes [16, 24) of the data, before tensor 'b', belong to no tensor", 4);
  expect_header_rejected(R"({"dtype":"F64","shape":[1],"data_offsets":[8,16]})",
                         "has tensor 'b' at bytes [8, 16) overlapping the tensor before it, which ends at byte 16", 2);
  expect_header_rejected(R"({"dtype":"F64","shape":[-1],"data_offsets":[16,24]})",
                         "tensor 'b' has an invalid shape [-1]");
  expect_header_rejected(R"({"dtype":"F64","shape":[1]})", "tensor 'b' lacks 'data_offsets'");
  expect_rejected(raw_file(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"
                           R"("a":{"dtype":"F64","shape":[1],"data_offsets":[8,16]}})",
                           {1.0, 2.0}),
                  "names 'a' twice in its header");
}

TEST_F(SafetensorsFileTest, RejectsDeepNestingQuotingAShortPrefix) {
  // 400 KB of brackets once overflowed the stack, in the message's dump().
  const std::string deep(400'000, '[');
  try {
    put(path_, raw_file(deep, {}));
    SafetensorsFile::open(path_);
    ADD_FAILURE() << "a header of 400000 brackets was accepted";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_TRUE(contains(message, "has a header that nests deeper than the format's 3 levels")) << message;
    EXPECT_LT(message.size(), 300u) << message;
  }
  expect_header_rejected(R"({"dtype":"F64","shape":[[1]],"data_offsets":[16,24]})", "has a header that nests deeper");
  const std::string long_name(100'000, 'x');
  try {
    put(path_, raw_file("{\"" + long_name + "\":1}", {}));
    SafetensorsFile::open(path_);
    ADD_FAILURE() << "a tensor that is a number was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_LT(std::string(error.what()).size(), 300u) << error.what();
  }
}

TEST_F(SafetensorsFileTest, RejectsAbsurdHeaders) {
  // A shape of 30 ones is valid JSON and addresses 8 bytes, but no tensor
  // has rank 30; a header over 16 MiB describes far more than any model.
  std::string ones = "1";
  for (int i = 1; i < 30; ++i) ones += ",1";
  expect_header_rejected(R"({"dtype":"F64","shape":[)" + ones + R"(],"data_offsets":[16,24]})",
                         "has a header that has an array of more than 8 values");
  const std::size_t n = (std::size_t{16} << 20) + 8;
  expect_rejected(le64(n) + std::string(n, ' '), "has a header of 16777224 bytes, over the limit of 16777216");
}

TEST_F(SafetensorsFileTest, RejectsAFlippedDataByte) {
  std::string bytes = good_;
  bytes[bytes.size() - 20] ^= 0x10;
  expect_rejected(bytes, "has a checksum mismatch");
  put(path_, good_);
  EXPECT_NO_THROW(SafetensorsFile::open(path_));
}

TEST_F(SafetensorsFileTest, RejectsEditedMetadata) {
  // The step edited from 12 to 19: the header is as valid as before.
  std::string bytes = good_;
  const std::size_t at = bytes.find(R"("step":"12")");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 9] = '9';
  expect_rejected(bytes, "has a checksum mismatch");
  // A tensor renamed, to a name of the same length.
  bytes = good_;
  bytes.replace(bytes.find(R"("ln_f.bias")"), 11, R"("ln_f.bixs")");
  expect_rejected(bytes, "has a checksum mismatch");
}

TEST_F(SafetensorsFileTest, RejectsOurFormatWithoutItsChecksum) {
  // The checksum's key renamed and a data byte flipped: without the rule,
  // a file of ours would load unchecked.
  std::string bytes = good_;
  bytes.replace(bytes.find(R"("checksum")"), 10, R"("checksun")");
  bytes[bytes.size() - 20] ^= 0x10;
  expect_rejected(bytes, "has tinyllm metadata (format 'tinyllm') but no checksum");
}

TEST_F(SafetensorsFileTest, RejectsReadsOutsideTheRegion) {
  const SafetensorsFile file = SafetensorsFile::open(path_);
  std::vector<double> out(5);
  EXPECT_THROW_WITH(file.read(35, out), std::invalid_argument,
                    "checkpoint '" + path_ + "': values [35, 40) lie outside the data region of 39 values");
  EXPECT_THROW_WITH(file.read(SIZE_MAX, out), std::invalid_argument, "lie outside the data region");
  EXPECT_THROW_WITH(file.offset("wte"), std::invalid_argument, "checkpoint '" + path_ + "' has no tensor 'wte'");
  EXPECT_THROW_WITH(SafetensorsFile::open(dir_.file("missing")), std::runtime_error,
                    "checkpoint '" + dir_.file("missing") + "' cannot be opened: " + std::strerror(ENOENT));
}

}  // namespace
}  // namespace tinyllm::train
