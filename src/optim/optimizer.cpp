// The shared half of every optimizer: parameter checks, zero_grad, set_lr and the
// parsing of a StateDict's "<index>.<field>" names that load_state_dict needs.
#include "tinyllm/optim/optimizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <type_traits>

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

// One std::invalid_argument naming every problem a state dict has, if any.
void throw_if_any(std::string_view who, const std::vector<std::string>& missing,
                  const std::vector<std::string>& unexpected, const std::vector<std::string>& duplicate,
                  std::vector<std::string> wrong_shape, std::span<const std::string_view> tensor_fields,
                  std::span<const std::string_view> scalar_fields, std::size_t params) {
  std::vector<std::string> problems;
  if (!missing.empty()) problems.push_back(fmt::format("missing {}", fmt::join(missing, ", ")));
  if (!unexpected.empty()) {
    std::vector<std::string_view> fields(tensor_fields.begin(), tensor_fields.end());
    fields.insert(fields.end(), scalar_fields.begin(), scalar_fields.end());
    problems.push_back(fmt::format("unexpected {} (names are <i>.{{{}}} for i < {})", fmt::join(unexpected, ", "),
                                   fmt::join(fields, ", "), params));
  }
  if (!duplicate.empty()) problems.push_back(fmt::format("duplicate {}", fmt::join(duplicate, ", ")));
  for (std::string& p : wrong_shape) problems.push_back(std::move(p));
  if (!problems.empty()) {
    throw std::invalid_argument(fmt::format("{}::load_state_dict: {}", who, fmt::join(problems, "; ")));
  }
}

}  // namespace

std::vector<std::optional<Optimizer::ParamEntries>> Optimizer::parse_state_dict(
    const StateDict& state, std::string_view who, std::span<const std::string_view> tensor_fields,
    std::span<const std::string_view> scalar_fields) const {
  // Slots per parameter, pointing into the dict; a parameter has state when
  // any of its slots is filled, and then needs all of them.
  struct Slots {
    std::vector<const Tensor*> tensors;
    std::vector<const double*> scalars;
    bool any = false;
  };
  std::vector<Slots> slots(params_.size());
  for (Slots& s : slots) {
    s.tensors.assign(tensor_fields.size(), nullptr);
    s.scalars.assign(scalar_fields.size(), nullptr);
  }

  std::vector<std::string> unexpected, duplicate, wrong_shape;
  // Each named entry of one kind into its parameter's slot of that kind.
  const auto place = [&](const auto& named, std::span<const std::string_view> fields, auto slots_of) {
    for (const auto& [name, value] : named) {
      const auto parts = split_name(name);
      const auto field = parts && parts->first < params_.size() ? find_field(fields, parts->second) : std::nullopt;
      if (!field) {
        unexpected.push_back(name);
        continue;
      }
      const std::size_t i = parts->first;
      auto& slot = slots_of(slots[i])[*field];
      if (slot != nullptr) {
        duplicate.push_back(name);
        continue;
      }
      if constexpr (std::is_same_v<std::decay_t<decltype(value)>, Tensor>) {
        if (!value.defined() || value.shape() != params_[i].shape()) {
          wrong_shape.push_back(fmt::format("{} has shape {} but parameter {} has shape {}", name,
                                            value.defined() ? to_string(value.shape()) : "undefined", i,
                                            to_string(params_[i].shape())));
        }
      }
      slot = &value;
      slots[i].any = true;
    }
  };
  const auto tensors_of = [](Slots& s) -> std::vector<const Tensor*>& { return s.tensors; };
  const auto scalars_of = [](Slots& s) -> std::vector<const double*>& { return s.scalars; };
  place(state.tensors, tensor_fields, tensors_of);
  place(state.scalars, scalar_fields, scalars_of);

  std::vector<std::string> missing;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (!slots[i].any) continue;
    for (std::size_t f = 0; f < tensor_fields.size(); ++f)
      if (slots[i].tensors[f] == nullptr) missing.push_back(fmt::format("{}.{}", i, tensor_fields[f]));
    for (std::size_t f = 0; f < scalar_fields.size(); ++f)
      if (slots[i].scalars[f] == nullptr) missing.push_back(fmt::format("{}.{}", i, scalar_fields[f]));
  }
  throw_if_any(who, missing, unexpected, duplicate, std::move(wrong_shape), tensor_fields, scalar_fields,
               params_.size());

  std::vector<std::optional<ParamEntries>> entries(params_.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (!slots[i].any) continue;
    ParamEntries& e = entries[i].emplace();
    e.tensors = slots[i].tensors;
    for (const double* value : slots[i].scalars) e.scalars.push_back(*value);
  }
  return entries;
}

}  // namespace tinyllm::optim
