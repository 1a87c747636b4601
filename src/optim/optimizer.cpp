// The shared half of every optimizer: parameter checks, zero_grad, set_lr and the
// parsing of a StateDict's "<index>.<field>" names that load_state_dict needs.
#include "tinyllm/optim/optimizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cmath>
#include <stdexcept>

namespace tinyllm::optim {

std::size_t StateDict::bytes() const {
  std::size_t elements = 0;
  for (const auto& [name, tensor] : tensors) elements += tensor.numel();
  return elements * sizeof(double);
}

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  if (params_.empty()) {
    throw std::invalid_argument("Optimizer: parameter list must not be empty (got 0 tensors)");
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].defined()) {
      throw std::invalid_argument(fmt::format("Optimizer: parameter {} must be defined (got an undefined tensor)", i));
    }
    if (!params_[i].is_leaf()) {
      throw std::invalid_argument(
          fmt::format("Optimizer: parameter {} must be a leaf (got a tensor of shape {} with a grad_fn)", i,
                      to_string(params_[i].shape())));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (params_[j].same(params_[i])) {
        throw std::invalid_argument(
            fmt::format("Optimizer: parameter {} must appear once (got the same tensor as parameter {})", i, j));
      }
    }
  }
}

void Optimizer::set_lr(double lr) {
  if (!(std::isfinite(lr) && lr >= 0)) {
    throw std::invalid_argument(fmt::format("Optimizer: lr must be finite and >= 0 (got {})", lr));
  }
  apply_lr(lr);
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad();
}

namespace {

// "12.exp_avg" -> {12, "exp_avg"}; nullopt unless digits, a dot, then a field.
std::optional<std::pair<std::size_t, std::string_view>> split_name(std::string_view name) {
  const std::size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == name.size()) return std::nullopt;
  std::size_t index = 0;
  const auto [end, error] = std::from_chars(name.data(), name.data() + dot, index);
  if (error != std::errc() || end != name.data() + dot) return std::nullopt;
  return std::pair{index, name.substr(dot + 1)};
}

std::optional<std::size_t> find_field(std::span<const std::string_view> fields, std::string_view field) {
  for (std::size_t f = 0; f < fields.size(); ++f)
    if (fields[f] == field) return f;
  return std::nullopt;
}

}  // namespace

std::vector<std::optional<Optimizer::ParamEntries>> Optimizer::parse_state_dict(
    const StateDict& state, std::string_view who, std::span<const std::string_view> tensor_fields,
    std::span<const std::string_view> scalar_fields) const {
  // Slots per parameter, filled from the dict; a parameter has state when any
  // of its slots is, and then needs all of them.
  struct Slots {
    std::vector<const Tensor*> tensors;
    std::vector<std::optional<double>> scalars;
    bool any = false;
  };
  std::vector<Slots> slots(params_.size());
  for (Slots& s : slots) {
    s.tensors.assign(tensor_fields.size(), nullptr);
    s.scalars.assign(scalar_fields.size(), std::nullopt);
  }

  std::vector<std::string> unexpected, duplicate, wrong_shape;
  auto locate = [&](const std::string& name,
                    std::span<const std::string_view> fields) -> std::optional<std::pair<std::size_t, std::size_t>> {
    const auto parts = split_name(name);
    if (!parts || parts->first >= params_.size()) return std::nullopt;
    const auto field = find_field(fields, parts->second);
    if (!field) return std::nullopt;
    return std::pair{parts->first, *field};
  };
  for (const auto& [name, tensor] : state.tensors) {
    const auto at = locate(name, tensor_fields);
    if (!at) {
      unexpected.push_back(name);
      continue;
    }
    const auto [i, f] = *at;
    if (slots[i].tensors[f] != nullptr) {
      duplicate.push_back(name);
      continue;
    }
    if (!tensor.defined() || tensor.shape() != params_[i].shape()) {
      wrong_shape.push_back(fmt::format("{} has shape {} but parameter {} has shape {}", name,
                                        tensor.defined() ? to_string(tensor.shape()) : "undefined", i,
                                        to_string(params_[i].shape())));
    }
    slots[i].tensors[f] = &tensor;
    slots[i].any = true;
  }
  for (const auto& [name, value] : state.scalars) {
    const auto at = locate(name, scalar_fields);
    if (!at) {
      unexpected.push_back(name);
      continue;
    }
    const auto [i, f] = *at;
    if (slots[i].scalars[f]) {
      duplicate.push_back(name);
      continue;
    }
    slots[i].scalars[f] = value;
    slots[i].any = true;
  }

  std::vector<std::string> missing;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (!slots[i].any) continue;
    for (std::size_t f = 0; f < tensor_fields.size(); ++f)
      if (slots[i].tensors[f] == nullptr) missing.push_back(fmt::format("{}.{}", i, tensor_fields[f]));
    for (std::size_t f = 0; f < scalar_fields.size(); ++f)
      if (!slots[i].scalars[f]) missing.push_back(fmt::format("{}.{}", i, scalar_fields[f]));
  }

  std::vector<std::string> problems;
  if (!missing.empty()) problems.push_back(fmt::format("missing {}", fmt::join(missing, ", ")));
  if (!unexpected.empty()) {
    std::vector<std::string_view> fields(tensor_fields.begin(), tensor_fields.end());
    fields.insert(fields.end(), scalar_fields.begin(), scalar_fields.end());
    problems.push_back(fmt::format("unexpected {} (names are <i>.{{{}}} for i < {})", fmt::join(unexpected, ", "),
                                   fmt::join(fields, ", "), params_.size()));
  }
  if (!duplicate.empty()) problems.push_back(fmt::format("duplicate {}", fmt::join(duplicate, ", ")));
  for (std::string& p : wrong_shape) problems.push_back(std::move(p));
  if (!problems.empty()) {
    throw std::invalid_argument(fmt::format("{}::load_state_dict: {}", who, fmt::join(problems, "; ")));
  }

  std::vector<std::optional<ParamEntries>> entries(params_.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (!slots[i].any) continue;
    ParamEntries& e = entries[i].emplace();
    e.tensors = slots[i].tensors;
    for (const auto& s : slots[i].scalars) e.scalars.push_back(*s);
  }
  return entries;
}

}  // namespace tinyllm::optim
