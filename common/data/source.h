#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/status.h"
#include "common/config/data_spec.h"
#include "common/data/dataset.h"
#include "common/data/examples.h"

namespace tfd::data {

// Most classes a classification source may have (docs/data.md): ImageNet-21k's 21,841 fit with
// room. The bound is the output layer's: 65,536 classes behind a 1,024-unit hidden layer are 67
// million weights (256 MiB, and as much again per optimizer slot), about what one task can train;
// it also keeps a stray integer column (a price, an id) from asking for millions of classes.
inline constexpr int kMaxClasses = 65536;

// The files `files` names: each path as it is, each glob (a path with *, ? or [) its matches,
// sorted; relative paths are relative to the working directory. NotFound naming `field` and the
// path or glob when a path does not exist or a glob matches nothing.
Result<std::vector<std::string>> ExpandPaths(const std::vector<std::string>& paths, const std::string& field);

// Reads one split's files in the spec's format (the reader of common/data/<format>.h).
Result<Examples> ReadExamples(const config::DataSpec& spec, const config::DataFiles& files, const std::string& field);

// Each categorical column of `train` (as a reader leaves it) with its vocabulary: the values its
// examples hold, sorted by their bytes.
std::vector<CategoricalColumn> BuildVocabulary(const Examples& train);
// Turns `e`'s categorical features (indices into e->categorical's values, as a reader leaves them)
// into ids of `vocabulary` (a training split's: k + 1 for vocabulary[k], 0 for a value it lacks)
// and keeps `vocabulary` as e->categorical. InvalidArgument naming `source` when `e` has other
// categorical columns than `vocabulary` (names or places).
Status EncodeCategories(const std::vector<CategoricalColumn>& vocabulary, Examples* e, const std::string& source);

// Numbers the classes of `train` and `test` alike and builds the two datasets: the spec's
// `classes` when given (a label not among them is an error naming `test_source`/`train_source`),
// else the training labels sorted (numbers in numeric order; integer labels are their own ids).
// InvalidArgument for more than kMaxClasses classes, for fewer than 2, or for a test label the
// training files never have.
Result<DataSplits> NumberClasses(const config::DataSpec& spec, Examples train, Examples test, const std::string& train_source,
                                 const std::string& test_source);

// Moves `count` examples of `data->train`, chosen by a shuffle seeded by `seed`, into data->test
// (0 < count < train size), keeping their order; every task draws the same ones.
// Regression: the two splits with the readers' float targets and no classes. InvalidArgument when a
// split has no targets or the two have different numbers of them.
Result<DataSplits> RegressionSplits(Examples train, Examples test, const std::string& train_source, const std::string& test_source);

void HoldOutTest(DataSplits* data, std::int64_t count, std::uint64_t seed);

// Sets every split's normalizer from the spec (scale, standardize from the training split's
// per-feature mean and standard deviation, computed in one fixed order so that every task gets the
// same bits, or none).
void Normalize(const config::DataSpec& spec, DataSplits* data);

// Loads the job's data: the MNIST folder, or the spec's files read, their classes numbered, the
// test set held out when the spec asks, and normalised. InvalidArgument/NotFound naming the file
// and where in it (exit code 2 for the caller).
Result<DataSplits> LoadData(const config::DataSpec& spec, std::uint64_t seed);

}  // namespace tfd::data
