#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/data/dataset.h"

namespace tfd::data {

// What `tfd data inspect` says about a dataset: its size and example shape, its classes with their
// counts, the first features' ranges (as stored, before normalisation), and what looks wrong.
struct DataReport {
  struct Feature {
    std::string name;
    double min = 0, mean = 0, max = 0;
  };
  struct Class {
    std::string name;
    std::int64_t count = 0;
  };
  std::int64_t rows = 0;
  int height = 0, width = 0, channels = 0;
  DType dtype = DType::kU8;
  std::vector<Class> classes;     // every class, in id order
  std::int64_t features = 0;      // values per example
  std::vector<Feature> first;     // the first kMaxReported features
  struct Categorical {
    std::string name;
    std::int64_t vocabulary = 0;  // distinct training values (ids 1 .. vocabulary; 0: unseen)
    std::int64_t unseen = 0;      // examples of this split whose value is out of vocabulary
  };
  std::vector<Categorical> categorical;  // the categorical columns, in row order
  std::vector<std::string> warnings;  // constant features, rare classes (under 1%; past 100 classes, under a tenth of an even share), duplicate rows
};

inline constexpr std::size_t kMaxReported = 20;
// Classes the text report lists (the JSON lists all): a 20,000-class report stays readable.
inline constexpr std::size_t kMaxReportedClasses = 100;

// Reports on `data`; `names` names its features where the source had names (a CSV header), else
// they are numbered. Constant features are looked for among all features, not only the first.
DataReport Inspect(const Dataset& data, const std::vector<std::string>& names = {});

// The report as lines of text, starting with `title` (the source and split).
std::string FormatReport(const std::string& title, const DataReport& r);

}  // namespace tfd::data
