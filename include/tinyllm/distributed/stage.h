// The data-parallel modes by number, as `--zero` and ZeroOptimizer's stage
// count them: 0 is DDP, 1 to 3 are ZeRO's stages (docs/ZERO.md).
#pragma once

#include <string>

namespace tinyllm::dist {

// "DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3": the one spelling of messages and headers.
inline std::string mode_name(int stage) { return stage == 0 ? "DDP" : "ZeRO-" + std::to_string(stage); }

}  // namespace tinyllm::dist
