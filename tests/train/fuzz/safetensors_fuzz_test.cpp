// A seeded mutation loop over valid checkpoints: each damaged file must load
// or be refused with a std::exception that says why, never crash (the CI runs
// it under ASan and UBSan too), and the loader must never allocate more than
// the file's size justifies. Its own executable, because it counts every
// operator new of the process.
//
// Why the bound holds by construction: the reader allocates the header's
// text (at most the file), a parse tree of a header nested at most 3 deep
// with arrays of at most 8 values (a constant factor of the header), one
// block of the data region for the checksum, and, once read_checkpoint_info
// has matched the tensors' shapes to the metadata's sizes, a model whose
// parameters are a third of the data region. The loop measures it.
#include <gtest/gtest.h>
#include <tinyllm/train/checkpoint.h>
#include <tinyllm/train/safetensors.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <random>
#include <string>
#include <vector>

// GCC takes the free() in the replaced delete below for a mismatch with
// new, though both replaced functions use malloc and free.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {

// Bytes requested from operator new while counting is on.
bool counting = false;
std::size_t allocated = 0;

void* counted_malloc(std::size_t bytes) noexcept {
  if (counting) allocated += bytes;
  return std::malloc(bytes == 0 ? 1 : bytes);
}

}  // namespace

// Every form the loader's containers use (stable_sort's buffer is a nothrow
// new), all on malloc and free, so that a sanitizer's own operator new never
// meets this free.
void* operator new(std::size_t bytes) {
  if (void* p = counted_malloc(bytes)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t bytes) { return ::operator new(bytes); }
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept { return counted_malloc(bytes); }
void* operator new[](std::size_t bytes, const std::nothrow_t&) noexcept { return counted_malloc(bytes); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace tinyllm::train {
namespace {

namespace fs = std::filesystem;

// tmpfs where there is one, so that a write and an open cost microseconds.
fs::path scratch_file() {
  const fs::path shm = "/dev/shm";
  std::error_code error;
  const fs::path dir = fs::is_directory(shm, error) ? shm : fs::temp_directory_path();
  return dir / ("tinyllm_fuzz_" + std::to_string(::getpid()) + ".safetensors");
}

std::string contents(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A checkpoint of a tiny GPT as save_checkpoint lays it out, with the
// metadata (a map, hence sorted by key) given.
const nn::GPTConfig kConfig{.vocab_size = 4, .block_size = 2, .n_layer = 1, .n_head = 1, .n_embd = 2};

Metadata checkpoint_metadata() {
  return {{"format", "tinyllm-checkpoint-1"},
          {"vocab_size", "4"},
          {"block_size", "2"},
          {"n_layer", "1"},
          {"n_head", "1"},
          {"n_embd", "2"},
          {"step", "2"},
          {"batch", "4"},
          {"seed", "1337"},
          {"world", "1"},
          {"zero", "0"}};
}

std::string write_checkpoint(const fs::path& path, const std::vector<TensorInfo>& tensors, const Metadata& metadata,
                             std::mt19937_64& rng) {
  std::size_t n = 0;
  for (const TensorInfo& t : tensors) n += t.numel();
  std::vector<double> data(n);
  std::normal_distribution<double> normal;
  for (double& x : data) x = normal(rng);
  write_safetensors(path.string(), tensors, metadata, data);
  return contents(path);
}

// The header's JSON text, between the length field and the data.
std::size_t header_length(const std::string& file) {
  std::uint64_t n = 0;
  for (int byte = 0; byte < 8 && byte < static_cast<int>(file.size()); ++byte)
    n |= std::uint64_t{static_cast<unsigned char>(file[byte])} << (8 * byte);
  return static_cast<std::size_t>(n);
}

void set_header_length(std::string& file, std::uint64_t n) {
  for (int byte = 0; byte < 8; ++byte) file[byte] = static_cast<char>((n >> (8 * byte)) & 0xff);
}

// One mutation of a valid file, chosen by rng: the damage the reader must
// name. Mutations of the header's text keep the length field in step
// unless the mutation is of the length itself.
std::string mutate(const std::string& good, std::mt19937_64& rng) {
  std::string out = good;
  const auto pick = [&](std::size_t below) { return below == 0 ? 0 : static_cast<std::size_t>(rng() % below); };
  const std::size_t n = std::min(header_length(out), out.size() - 8);
  const auto header_at = [&] { return 8 + pick(n); };
  const auto replace_header = [&](std::size_t at, std::size_t len, const std::string& with) {
    out.replace(at, len, with);
    set_header_length(out, n - len + with.size());
  };
  static const std::vector<std::string> kTokens = {"[",
                                                   "]",
                                                   "{",
                                                   "}",
                                                   ",",
                                                   ":",
                                                   "\"",
                                                   "\\",
                                                   "0",
                                                   "18446744073709551615",
                                                   "-1",
                                                   "1e400",
                                                   "\"F32\"",
                                                   "\"I64\"",
                                                   "null",
                                                   "[]",
                                                   "{}",
                                                   "99999999999",
                                                   "[0,8]",
                                                   "[8,0]",
                                                   "\"data_offsets\"",
                                                   "\"shape\"",
                                                   "\"dtype\"",
                                                   "\"__metadata__\"",
                                                   "\xff",
                                                   "\xc3",
                                                   "\"checksum\""};
  switch (pick(9)) {
    case 0:  // truncated anywhere
      out.resize(pick(out.size()));
      break;
    case 1:  // bytes flipped anywhere, the length field included
      for (std::size_t k = 0, flips = 1 + pick(4); k < flips; ++k)
        out[pick(out.size())] ^= static_cast<char>(1 << pick(8));
      break;
    case 2: {  // a huge or off-by-some header length
      const std::uint64_t lengths[] = {
          rng(), n + 1, n - 1, out.size(), out.size() - 7, std::uint64_t{1} << 62, std::uint64_t{17} << 20};
      set_header_length(out, lengths[pick(std::size(lengths))]);
      break;
    }
    case 3:  // a header token replaced by a structural or extreme one
      replace_header(header_at(), pick(4), kTokens[pick(kTokens.size())]);
      break;
    case 4: {  // one digit of the header changed: offsets, shapes, sizes
      std::vector<std::size_t> digits;
      for (std::size_t i = 8; i < 8 + n; ++i)
        if (out[i] >= '0' && out[i] <= '9') digits.push_back(i);
      if (!digits.empty()) out[digits[pick(digits.size())]] = static_cast<char>('0' + pick(10));
      break;
    }
    case 5: {  // an entry's data_offsets copied over another's: overlap, hole
      std::vector<std::size_t> at;
      for (std::size_t i = out.find("\"data_offsets\":["); i < 8 + n; i = out.find("\"data_offsets\":[", i + 1))
        at.push_back(i + 16);
      if (at.size() >= 2) {
        const std::size_t from = at[pick(at.size())], to = at[pick(at.size())];
        const std::string offsets = out.substr(from, out.find(']', from) - from);
        replace_header(to, out.find(']', to) - to, offsets);
      }
      break;
    }
    case 6: {  // a shape replaced by another rank's
      const std::size_t i = out.find("\"shape\":[", header_at() - 8);
      if (i < 8 + n) {
        static const std::vector<std::string> kShapes = {"",  "0",  "1,1,1,1,1,1,1,1,1", "4294967296,4294967296", "2,2",
                                                         "8", "1,0"};
        replace_header(i + 9, out.find(']', i + 9) - (i + 9), kShapes[pick(kShapes.size())]);
      }
      break;
    }
    case 7:  // bytes appended or cut from the data region
      if (pick(2) == 0) {
        out.append(1 + pick(16), '\0');
      } else {
        out.resize(out.size() - std::min(out.size(), 1 + pick(16)));
      }
      break;
    default: {  // a run of the header deleted or duplicated
      const std::size_t at = header_at(), len = pick(32);
      replace_header(
          at, std::min(len, 8 + n - at),
          pick(2) == 0 ? "" : out.substr(at, std::min(len, 8 + n - at)) + out.substr(at, std::min(len, 8 + n - at)));
      break;
    }
  }
  return out;
}

std::size_t pick_base(std::mt19937_64& rng, std::size_t bases) { return static_cast<std::size_t>(rng() % bases); }

TEST(SafetensorsFuzzTest, EveryMutationLoadsOrIsRefusedWithinTheFileSize) {
  // TINYLLM_FUZZ_INPUTS runs more (or fewer) of the same sequence.
  const char* asked = std::getenv("TINYLLM_FUZZ_INPUTS");
  const std::size_t kInputs = asked ? std::stoul(asked) : 100'000;
  // Per byte of file, what a load may allocate (the parse tree's nodes
  // dominate), plus a constant for the path and the messages.
  constexpr std::size_t kPerByte = 64, kSlack = 64 * 1024;
  const fs::path path = scratch_file();
  std::mt19937_64 rng(20261206);

  // The bases: a checkpoint of a tiny GPT, the same with other sizes in its
  // metadata under a valid checksum (the shape check's cases), and a plain
  // safetensors file that is not ours.
  nn::GPT model(kConfig);
  const std::vector<TensorInfo> tensors = checkpoint_tensors(model);
  std::vector<std::string> bases = {write_checkpoint(path, tensors, checkpoint_metadata(), rng)};
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{{"n_embd", "100000"},
                                                                                   {"n_layer", "100000000"},
                                                                                   {"n_embd", "18446744073709551615"},
                                                                                   {"n_head", "2"},
                                                                                   {"vocab_size", "3"},
                                                                                   {"step", "x"},
                                                                                   {"format", "other"}}) {
    Metadata metadata = checkpoint_metadata();
    metadata[key] = value;
    bases.push_back(write_checkpoint(path, tensors, metadata, rng));
  }
  bases.push_back(write_checkpoint(path, {{"a", {3, 2}}, {"b", {0}}, {"c", {}}}, {}, rng));

  std::size_t loaded = 0, refused = 0, worst_ratio_bytes = 0, worst_file = 1;
  for (std::size_t input = 0; input < kInputs; ++input) {
    const std::string bytes = input < bases.size() ? bases[input] : mutate(bases[pick_base(rng, bases.size())], rng);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    allocated = 0;
    counting = true;
    try {
      const SafetensorsFile file = SafetensorsFile::open(path.string());
      if (file.metadata().contains("format")) {
        const std::unique_ptr<nn::GPT> gpt = load_gpt(file);
      }
      ++loaded;
    } catch (const std::exception& error) {
      counting = false;
      ASSERT_GT(std::string(error.what()).size(), 0u) << "input " << input;
      ++refused;
    }
    counting = false;
    ASSERT_LE(allocated, kPerByte * bytes.size() + kSlack) << "input " << input << " of " << bytes.size() << " bytes";
    if (bytes.size() >= 1024 && allocated * worst_file > worst_ratio_bytes * bytes.size()) {
      worst_ratio_bytes = allocated, worst_file = bytes.size();
    }
  }
  fs::remove(path);
  std::cout << loaded << " loaded, " << refused
            << " refused; the most allocated per byte of a file of 1 KiB or more: " << worst_ratio_bytes
            << " bytes for a file of " << worst_file << "\n";
  EXPECT_GT(loaded, 1u);  // the bases that are valid
  EXPECT_GT(refused, kInputs / 2);
}

}  // namespace
}  // namespace tinyllm::train
