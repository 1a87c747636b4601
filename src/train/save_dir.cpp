#include "save_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string_view>

#include "launcher_env.h"
#include "tinyllm/train/checkpoint.h"

namespace tinyllm::train {
namespace {

namespace fs = std::filesystem;

// Under mpirun every rank runs train(), before MPI starts: the launcher's
// environment names rank 0, which speaks for the directory.
bool is_launchers_rank_0(Backend backend) {
  if (backend != Backend::Mpi) return true;
  return launcher_number({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}).value_or(0) == 0;
}

// " (pid N)" from the holder's lock file, or "" before the holder wrote it.
std::string holder_of(int fd) {
  std::array<char, 32> text{};
  const ssize_t got = ::pread(fd, text.data(), text.size() - 1, 0);
  const std::string_view pid(text.data(), got > 0 ? static_cast<std::size_t>(got) : 0);
  return pid.empty() ? std::string() : fmt::format(" (pid {})", pid);
}

bool same_file(int fd, const std::string& path) {
  struct stat held {
  }, named{};
  return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
         held.st_ino == named.st_ino;
}

// The open, locked lock file of dir, with this process's pid in it.
int take_lock(const std::string& dir, const std::string& path) {
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
      throw std::invalid_argument(
          fmt::format("--save directory '{}': cannot open its lock file '{}': {}", dir, path, std::strerror(errno)));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      const std::string holder = holder_of(fd);
      ::close(fd);
      if (error == EWOULDBLOCK) {
        throw std::invalid_argument(
            fmt::format("--save directory '{}' is in use by another tinyllm run{}", dir, holder));
      }
      throw std::invalid_argument(
          fmt::format("--save directory '{}': cannot lock '{}': {}", dir, path, std::strerror(error)));
    }
    // A finishing holder unlinks the file before it releases the lock, so
    // a lock won on the unlinked file guards nothing: open the new one.
    if (!same_file(fd, path)) {
      ::close(fd);
      continue;
    }
    const std::string pid = std::to_string(::getpid());
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
      const int error = errno;
      ::close(fd);
      throw std::invalid_argument(
          fmt::format("--save directory '{}': cannot write its lock file '{}': {}", dir, path, std::strerror(error)));
    }
    return fd;
  }
}

bool is_checkpoint_name(const std::string& name) {
  return (name.starts_with("step-") && name.ends_with(".safetensors")) || name == kBestCheckpoint;
}

// Whether --resume names dir or a file in it.
bool resumes_from(const TrainOptions& o, const std::string& dir) {
  if (o.resume.empty()) return false;
  std::error_code error;
  const fs::path resume(o.resume);
  const fs::path from = fs::is_directory(resume, error) ? resume : resume.parent_path();
  return fs::equivalent(from.empty() ? fs::path(".") : from, dir, error);
}

// Another run's checkpoints would be replaced one by one, or mixed with
// this run's, and --resume DIR would then pick whichever was written last.
void refuse_other_checkpoints(const TrainOptions& o) {
  if (o.overwrite || resumes_from(o, o.save_dir)) return;
  std::string latest;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(o.save_dir, error)) {
    const std::string name = entry.path().filename().string();
    if (is_checkpoint_name(name) && name > latest) latest = name;
  }
  if (latest.empty()) return;
  // Without a step file, --resume DIR finds nothing: the best step is named.
  const std::string resume = latest == kBestCheckpoint ? (fs::path(o.save_dir) / latest).string() : o.save_dir;
  throw std::invalid_argument(
      fmt::format("--save directory '{}' already holds checkpoints of another run ({}); pass --resume {} to continue "
                  "it, or --overwrite to replace them",
                  o.save_dir, latest, resume));
}

}  // namespace

SaveDir::SaveDir(const TrainOptions& o, Backend backend) {
  if (o.save_dir.empty()) return;
  const bool rank_0 = is_launchers_rank_0(backend);
  if (rank_0) {
    lock_.path = (fs::path(o.save_dir) / kSaveLockFile).string();
    lock_.fd = take_lock(o.save_dir, lock_.path);
  }
  refuse_other_checkpoints(o);
  if (rank_0) remove_stale_temporaries(o.save_dir);
}

SaveDir::Lock::~Lock() {
  if (fd < 0) return;
  ::unlink(path.c_str());
  ::close(fd);
}

}  // namespace tinyllm::train
