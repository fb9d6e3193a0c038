#pragma once

#include <cstdint>
#include <string>

#include "common/config/job.h"

namespace tfd::optim {

// The learning rate of the update that follows `step` updates (the global step before it), with
// tf.keras.optimizers.schedules' semantics; `spec.learning_rate` is the initial rate. A pure
// function of its arguments, in double precision, so every task (and every ps) that evaluates it
// for the same step gets the same bits. With warm-up W > 0, step s < W gives
// base(0) * (s + 1) / W and step s >= W gives base(s - W): the schedule starts after the warm-up.
//   constant:    lr
//   exponential: lr * decay_rate ^ (s / decay_steps)   (staircase: floor(s / decay_steps))
//   piecewise:   values[i] for boundaries[i-1] < s <= boundaries[i] (values[0] up to boundaries[0])
//   cosine:      lr * ((1 - alpha) * 0.5 * (1 + cos(pi * min(s, decay_steps) / decay_steps)) + alpha)
// `step` < 0 is taken as 0.
double LearningRate(const config::OptimizerSpec& spec, std::int64_t step);

// "learning_rate=0.1" or "learning_rate=exponential_decay(initial=0.1 decay_steps=1000 ...)":
// the part of an optimizer's description that names its rate.
std::string DescribeLearningRate(const config::OptimizerSpec& spec);

}  // namespace tfd::optim
