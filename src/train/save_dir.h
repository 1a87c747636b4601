// The --save directory, claimed for one run before any rank starts: a lock
// against a second run saving into it at the same time, a refusal of
// another run's checkpoints, and the removal of what killed saves left.
#pragma once

#include <string>

#include "tinyllm/train/launch.h"
#include "tinyllm/train/trainer.h"

namespace tinyllm::train {

// The lock file in a --save directory, held with flock(2) by the process
// that checks the options: the kernel releases it when that process dies,
// however it dies, and forked ranks share it. It holds the holder's pid.
inline constexpr const char* kSaveLockFile = ".tinyllm.lock";

class SaveDir {
 public:
  // Without --save, nothing. Else takes the lock (std::invalid_argument
  // naming the holder's pid when another run holds it), refuses a directory
  // holding checkpoints that the run does not resume (unless --overwrite),
  // and removes stale temporaries. Under mpirun every rank checks the
  // checkpoints; rank 0 alone locks and removes.
  SaveDir(const TrainOptions& o, Backend backend);

 private:
  // Removes the lock file, then releases the lock; a member, so that a
  // refusal after the lock was taken releases it too.
  struct Lock {
    std::string path;
    int fd = -1;
    Lock() = default;
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;
    ~Lock();
  };
  Lock lock_;
};

}  // namespace tinyllm::train
