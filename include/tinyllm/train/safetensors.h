// safetensors files of F64 tensors, the checkpoint format: a little-endian
// u64 N, N bytes of JSON header, then the raw little-endian data, tensors end
// to end (https://github.com/huggingface/safetensors). The writer is
// collective and atomic: every rank writes its own pieces of the data region
// into one temporary file, which is renamed into place only when complete.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tinyllm/distributed/comm.h"

namespace tinyllm::train {

struct TensorInfo {
  std::string name;
  std::vector<std::size_t> shape;
  std::size_t numel() const;
};

// The header's "__metadata__": string keys to string values. The writer
// adds "checksum" (16 hex digits; the key is reserved), a position-dependent
// hash of the data region plus a hash of the rest of the header (the tensors'
// names and shapes and the other metadata), which open() verifies.
using Metadata = std::map<std::string, std::string>;

// A rank's contribution: values for elements [offset, offset + values.size())
// of the data region, counted in doubles.
struct Piece {
  std::size_t offset = 0;
  std::span<const double> values;
};

// Whether every rank may write the temporary file itself. Auto: where every
// rank sees rank 0's temporary file (always for the threads and processes of
// one machine); No: gather every piece through rank 0, which writes it all.
enum class SharedFiles { Auto, Yes, No };

// Collective: every rank of comm calls it with the same path, tensors and
// metadata, each with its own pieces; the pieces of all ranks together tile
// the data region (the tensors in the given order, end to end) exactly once.
// path is replaced atomically (temporary file beside it, fsync, rename, fsync
// of the directory): a reader never sees a half-written file, and an old
// file at path survives any failure. Every rank throws the same error:
// std::invalid_argument for bad arguments (a piece out of range, pieces not
// tiling the region, ranks disagreeing on path, tensors or metadata),
// std::runtime_error for I/O (an unwritable directory, a failed write).
void write_safetensors(const std::string& path, dist::Comm& comm, const std::vector<TensorInfo>& tensors,
                       const Metadata& metadata, std::span<const Piece> pieces, SharedFiles shared = SharedFiles::Auto);

// One process: the whole data region from one buffer. Same format, same
// atomic write.
void write_safetensors(const std::string& path, const std::vector<TensorInfo>& tensors, const Metadata& metadata,
                       std::span<const double> data);

// A checked safetensors file of F64 tensors, open for reading ranges.
class SafetensorsFile {
 public:
  // Validates everything before returning: the header length against the
  // file size, the JSON, every entry (dtype F64, shape × 8 bytes equal to
  // its data_offsets, the tensors contiguous from 0 to the end of the file,
  // no name twice), the metadata's values are strings, and the checksum when
  // present (reading the whole data region once); a file whose metadata has
  // a "format" of ours (beginning "tinyllm") must have it. The header is at
  // most 16 MiB, nested at most 3 deep, with shapes of rank at most 8.
  // Throws
  // std::invalid_argument naming the path and what is wrong, or
  // std::runtime_error when the file cannot be read.
  static SafetensorsFile open(const std::string& path);

  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in data order
  const Metadata& metadata() const { return metadata_; }               // "checksum" included
  const TensorInfo* find(std::string_view name) const;                 // nullptr when absent
  // In doubles from the start of the data region; throws
  // std::invalid_argument naming the tensor when absent.
  std::size_t offset(std::string_view name) const;
  std::size_t size() const { return size_; }  // doubles in the data region
  // Elements [offset, offset + out.size()) of the data region, in one pread;
  // std::invalid_argument when the range leaves the region.
  void read(std::size_t offset, std::span<double> out) const;
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile(std::string path, int fd);

  std::string path_;
  int fd_ = -1;
  std::size_t data_start_ = 0;  // bytes from the start of the file: 8 + N
  std::size_t size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::vector<std::size_t> offsets_;                       // offsets_[i]: tensors_[i]'s first double
  std::map<std::string, std::size_t, std::less<>> index_;  // name → position in tensors_
  Metadata metadata_;
};

}  // namespace tinyllm::train
