#include "tinyllm/nn/module.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>
#include <unordered_set>

namespace tinyllm::nn {

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_parameters()) out.push_back(tensor);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  // A tied tensor is one parameter: the optimizer, DDP and ZeRO must see it
  // once, under the first name the registration order reaches.
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const TensorImpl*> seen;
  for (auto& [name, tensor] : state_dict())
    if (seen.insert(&tensor.impl()).second) out.emplace_back(std::move(name), std::move(tensor));
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out);
  return out;
}

void Module::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state) {
  // Check every entry against this module's names, then copy: a refused
  // load leaves every value as it was.
  const auto mine = state_dict();
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < mine.size(); ++i) index.emplace(mine[i].first, i);
  std::vector<bool> given(mine.size(), false);
  std::vector<std::string> unexpected, duplicate, wrong_shape, missing;
  for (const auto& [name, tensor] : state) {
    const auto at = index.find(name);
    if (at == index.end()) {
      unexpected.push_back(name);
      continue;
    }
    if (given[at->second]) {
      duplicate.push_back(name);
      continue;
    }
    given[at->second] = true;
    const Shape& want = mine[at->second].second.shape();
    if (!tensor.defined() || tensor.shape() != want) {
      wrong_shape.push_back(fmt::format("{} has shape {} but the parameter has shape {}", name,
                                        tensor.defined() ? to_string(tensor.shape()) : "undefined", to_string(want)));
    }
  }
  for (std::size_t i = 0; i < mine.size(); ++i)
    if (!given[i]) missing.push_back(mine[i].first);

  std::vector<std::string> problems;
  if (!missing.empty()) problems.push_back(fmt::format("missing {}", fmt::join(missing, ", ")));
  if (!unexpected.empty()) problems.push_back(fmt::format("unexpected {}", fmt::join(unexpected, ", ")));
  if (!duplicate.empty()) problems.push_back(fmt::format("duplicate {}", fmt::join(duplicate, ", ")));
  problems.insert(problems.end(), wrong_shape.begin(), wrong_shape.end());
  if (!problems.empty()) {
    throw std::invalid_argument(fmt::format("Module::load_state_dict: {}", fmt::join(problems, "; ")));
  }

  // memmove, as the source may be the parameter itself (a module loading its
  // own state_dict). The version moves on, as for any write autograd cannot
  // see, so a graph recorded before the load refuses to run backward.
  for (const auto& [name, tensor] : state) {
    const Tensor& param = mine[index.at(name)].second;
    const std::span<double> to = param.data(), from = tensor.data();
    std::memmove(to.data(), from.data(), to.size_bytes());
    ++param.impl().version;
  }
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [name, tensor] : parameters_) out.emplace_back(prefix + name, tensor);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::size_t Module::num_parameters() const {
  std::size_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.zero_grad();
}

namespace {

template <class Fn>
RemovableHandle add_hook(std::shared_ptr<HookList<Fn>>& list, Fn hook, const char* who) {
  if (!hook) throw std::invalid_argument(fmt::format("Module::{}: the hook must not be empty", who));
  if (!list) list = std::make_shared<HookList<Fn>>();
  return HookList<Fn>::add(list, std::move(hook));
}

}  // namespace

RemovableHandle Module::register_forward_pre_hook(ForwardPreHook hook) {
  return add_hook(pre_hooks_, std::move(hook), "register_forward_pre_hook");
}

RemovableHandle Module::register_forward_hook(ForwardHook hook) {
  return add_hook(hooks_, std::move(hook), "register_forward_hook");
}

Tensor& Module::register_parameter(std::string name, Tensor tensor) {
  check_new_name(name);
  if (!tensor.defined()) throw std::invalid_argument(fmt::format("Module: parameter '{}' is undefined", name));
  tensor.set_requires_grad(true);
  return parameters_.emplace_back(std::move(name), std::move(tensor)).second;
}

Tensor& Module::replace_parameter(const std::string& name, Tensor tensor) {
  if (!tensor.defined()) throw std::invalid_argument(fmt::format("Module: parameter '{}' is undefined", name));
  for (auto& [own, slot] : parameters_) {
    if (own != name) continue;
    tensor.set_requires_grad(true);
    return slot = std::move(tensor);
  }
  throw std::invalid_argument(fmt::format("Module: no parameter is registered as '{}'", name));
}

std::shared_ptr<Module>& Module::child_slot(const std::string& name) {
  for (auto& [own, child] : children_)
    if (own == name) return child;
  throw std::invalid_argument(fmt::format("Module: no module is registered as '{}'", name));
}

bool Module::unregister(const std::string& name) {
  auto named = [&](const auto& entry) { return entry.first == name; };
  return std::erase_if(parameters_, named) + std::erase_if(children_, named) > 0;
}

bool Module::is_parameter(const std::string& name) const {
  return std::any_of(parameters_.begin(), parameters_.end(), [&](const auto& entry) { return entry.first == name; });
}

void Module::check_new_name(const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos) {
    throw std::invalid_argument(fmt::format("Module: a name must be non-empty and without '.' (got '{}')", name));
  }
  auto taken = [&](const auto& entries) {
    for (const auto& entry : entries)
      if (entry.first == name) return true;
    return false;
  };
  if (taken(parameters_) || taken(children_)) {
    throw std::invalid_argument(fmt::format("Module: the name '{}' is already registered", name));
  }
}

void ModuleList::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(size()), std::move(module));
}

}  // namespace tinyllm::nn
