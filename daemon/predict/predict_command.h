#pragma once

#include <ostream>

namespace tfd::predict_command {

// `tfd predict --model DIR --data SOURCE [--labels FILE] [--out FILE.csv|FILE.npy] [--top K] [--skip-rows N] [--header B]
// [--threads N] [--batch N] [--device cpu]` (docs/serving.md): the exported model in DIR (a version
// folder, or the base of several: its newest) on every example of SOURCE, read as training read its
// data (the model's card: format, columns, preprocessing). Writes one row per example (CSV: the
// class, its probability and the top K, or the regression outputs; .npy: the probabilities or
// outputs) to FILE, or the CSV to `out`; when SOURCE has labels, prints the accuracy (or MAE and
// RMSE) as training reported it, to stderr when the rows go to `out`. argv[0] is "predict".
// Returns the exit code: 0, or 2 with one line on stderr for bad flags, a bad model folder or data.
int Run(int argc, char** argv, std::ostream& out);

}  // namespace tfd::predict_command
