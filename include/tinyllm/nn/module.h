// Module: the libtorch way to own parameters. A module registers its own
// parameters and its submodules by name; parameters() walks them in
// registration order (own parameters first, then each child's), which is the
// flat order DDP and ZeRO shard and checkpoints store. Names are dotted
// paths, "h.0.attn.c_attn.weight", as in GPT-2's state dict. A tensor
// registered under two names (tied weights) is one parameter, listed under
// its first name, as torch's named_parameters(remove_duplicate=True) does;
// state_dict() has it under both.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tinyllm/tensor/hooks.h"
#include "tinyllm/tensor/tensor.h"

namespace tinyllm::nn {

class Module {
 public:
  using ForwardPreHook = std::function<void(const Module&)>;
  using ForwardHook = std::function<void(const Module&, const Tensor& output)>;

  virtual ~Module() = default;

  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;  // each tensor once
  // Every name, a tied tensor under each of its names (torch's state_dict).
  std::vector<std::pair<std::string, Tensor>> state_dict() const;
  // Copies the values in by name. Missing, unexpected or duplicate names and
  // wrong shapes throw std::invalid_argument naming each, before any copy.
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state);
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  std::size_t num_parameters() const;  // elements over all parameters
  void zero_grad();                    // drops every parameter's grad

  RemovableHandle register_forward_pre_hook(ForwardPreHook hook);
  RemovableHandle register_forward_hook(ForwardHook hook);

 protected:
  // Every forward computes its output through this, between the hooks.
  template <class Body>
  Tensor hooked(Body&& body) const {
    if (pre_hooks_) pre_hooks_->run(*this);
    Tensor output = body();
    if (hooks_) hooks_->run(*this, output);
    return output;
  }

  // The tensor becomes a leaf requiring grad. Names are non-empty, have no
  // '.', and are unique among this module's parameters and children; the
  // same tensor may be registered under several names.
  Tensor& register_parameter(std::string name, Tensor tensor);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    check_new_name(name);
    children_.emplace_back(std::move(name), module);
    return module;
  }
  // Put a new tensor or module in the place of the one registered as `name`,
  // keeping the order (libtorch's replace_module); std::invalid_argument if
  // no parameter, or no child, has that name.
  Tensor& replace_parameter(const std::string& name, Tensor tensor);
  template <class M>
  std::shared_ptr<M> replace_module(const std::string& name, std::shared_ptr<M> module) {
    child_slot(name) = module;
    return module;
  }
  // Drops the parameter or child registered as `name`; false if there is none.
  bool unregister(const std::string& name);
  bool is_parameter(const std::string& name) const;

 private:
  void check_new_name(const std::string& name) const;
  std::shared_ptr<Module>& child_slot(const std::string& name);
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const;

  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::shared_ptr<HookList<ForwardPreHook>> pre_hooks_;  // null until the first registration
  std::shared_ptr<HookList<ForwardHook>> hooks_;
};

// A list of modules named "0", "1", ... (torch.nn.ModuleList).
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<Module> module);
  std::size_t size() const { return named_children().size(); }
  template <class M>
  M& at(std::size_t i) const {
    return dynamic_cast<M&>(*named_children().at(i).second);
  }
};

}  // namespace tinyllm::nn
