#include "tinyllm/nn/module.h"

#include <fmt/format.h>

#include <stdexcept>

namespace tinyllm::nn {

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_parameters()) out.push_back(tensor);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out);
  return out;
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
