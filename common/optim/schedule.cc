#include "common/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

namespace tfd::optim {
namespace {

using Kind = config::LrSchedule::Kind;

double Base(const config::OptimizerSpec& spec, std::int64_t step) {
  const config::LrSchedule& s = spec.schedule;
  switch (s.kind) {
    case Kind::kConstant: return spec.learning_rate;
    case Kind::kExponentialDecay: {
      double p = static_cast<double>(step) / static_cast<double>(s.decay_steps);
      if (s.staircase) p = std::floor(p);
      return spec.learning_rate * std::pow(s.decay_rate, p);
    }
    case Kind::kPiecewiseConstant: {
      // The first boundary at or after the step: values[i] holds for boundaries[i-1] < step <= boundaries[i].
      const auto it = std::lower_bound(s.boundaries.begin(), s.boundaries.end(), step);
      return s.values[static_cast<std::size_t>(it - s.boundaries.begin())];
    }
    case Kind::kCosineDecay: {
      const double done = static_cast<double>(std::min(step, s.decay_steps)) / static_cast<double>(s.decay_steps);
      const double cosine = 0.5 * (1 + std::cos(std::numbers::pi * done));
      return spec.learning_rate * ((1 - s.alpha) * cosine + s.alpha);
    }
  }
  return spec.learning_rate;
}

}  // namespace

double LearningRate(const config::OptimizerSpec& spec, std::int64_t step) {
  step = std::max<std::int64_t>(step, 0);
  const std::int64_t w = spec.schedule.warmup_steps;
  if (w > 0 && step < w) return Base(spec, 0) * static_cast<double>(step + 1) / static_cast<double>(w);
  return Base(spec, w > 0 ? step - w : step);
}

std::string DescribeLearningRate(const config::OptimizerSpec& spec) {
  const config::LrSchedule& s = spec.schedule;
  const std::string warmup = s.warmup_steps > 0 ? fmt::format(" warmup_steps={}", s.warmup_steps) : "";
  switch (s.kind) {
    case Kind::kConstant:
      return warmup.empty() ? fmt::format("learning_rate={}", spec.learning_rate)
                            : fmt::format("learning_rate=constant(initial={}{})", spec.learning_rate, warmup);
    case Kind::kExponentialDecay:
      return fmt::format("learning_rate=exponential_decay(initial={} decay_steps={} decay_rate={} staircase={}{})", spec.learning_rate,
                         s.decay_steps, s.decay_rate, s.staircase, warmup);
    case Kind::kPiecewiseConstant:
      return fmt::format("learning_rate=piecewise_constant(boundaries=[{}] values=[{}]{})", fmt::join(s.boundaries, ","),
                         fmt::join(s.values, ","), warmup);
    case Kind::kCosineDecay:
      return fmt::format("learning_rate=cosine_decay(initial={} decay_steps={} alpha={}{})", spec.learning_rate, s.decay_steps, s.alpha,
                         warmup);
  }
  return "";
}

}  // namespace tfd::optim
