// Hooks: callbacks that code outside a tensor or a module attaches to it, as
// libtorch's register_hook and torch.nn.Module's forward hooks. A HookList
// runs its hooks in registration order; a RemovableHandle takes one out
// again. DDP's buckets and ZeRO's units are built on these, so they are
// public: a user may attach their own beside them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace tinyllm {

// Takes its hook out of the list it came from; a no-op once done, or once
// the list is gone. Destroying the handle leaves the hook in place, as
// torch's RemovableHandle does.
class RemovableHandle {
 public:
  RemovableHandle() = default;
  explicit RemovableHandle(std::function<void()> remove) : remove_(std::move(remove)) {}
  void remove() {
    if (auto remove = std::exchange(remove_, nullptr)) remove();
  }

 private:
  std::function<void()> remove_;
};

template <class Fn>
class HookList {
 public:
  // The list must live in a shared_ptr: the handle holds it weakly.
  static RemovableHandle add(const std::shared_ptr<HookList>& list, Fn hook) {
    const std::uint64_t id = list->next_id_++;
    list->hooks_.emplace_back(id, std::move(hook));
    return RemovableHandle([weak = std::weak_ptr<HookList>(list), id] {
      if (auto alive = weak.lock()) std::erase_if(alive->hooks_, [id](const auto& entry) { return entry.first == id; });
    });
  }

  // Over a copy, so a hook may remove itself (or others) while it runs.
  template <class... Args>
  void run(Args&&... args) const {
    const std::vector<std::pair<std::uint64_t, Fn>> hooks = hooks_;
    for (const auto& [id, hook] : hooks) hook(args...);
  }

  bool empty() const { return hooks_.empty(); }
  std::size_t size() const { return hooks_.size(); }

 private:
  std::vector<std::pair<std::uint64_t, Fn>> hooks_;
  std::uint64_t next_id_ = 0;
};

}  // namespace tinyllm
