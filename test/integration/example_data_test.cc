// The ready jobs for NumPy, TFRecord and regression, as a user runs them: scripts/make_example_data.py
// writes data/ from scikit-learn's digits and diabetes files (Debian's python3-sklearn) into a
// temporary folder, and tfd trains configs/jobs/npz-digits.json, tfrecord-digits.json and
// csv-diabetes-regression.json there as they are (each stops early within a second). The floors
// sit below what seed 1 measured (docs/config.md, "Job files"): test accuracy 98.05% and 98.61%,
// test MAE 40.90 (scikit-learn's LinearRegression: 41.69; the training mean: 61.20), with margin
// for another CPU's arithmetic. Skipped (77) without python3, numpy or the scikit-learn files.
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/catch/subjects.h"
#include "test/test_util.h"

namespace tfd::testing::example_data_test {
namespace {

const std::string kSklearnData = "/usr/lib/python3/dist-packages/sklearn/datasets/data";
const std::string kScript = std::string(TFD_SOURCE_DIR) + "/scripts/make_example_data.py";

// Runs the script into dir/data, as `scripts/make_example_data.py` run from dir would.
void MakeData(const TempDir& dir) {
  CommandResult r = RunCommand(kScript + " --out " + dir / "data" + " --sklearn-data " + kSklearnData, dir);
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
}

// The done event of `tfd --standalone --job configs/jobs/NAME` run in `dir`.
nlohmann::json TrainReadyJob(const TempDir& dir, const std::string& name) {
  CommandResult r = RunCommand("cd " + dir.path() + " && " + kTfd + " --standalone --log-format json --job " +
                                   TFD_SOURCE_DIR + "/configs/jobs/" + name,
                               dir);
  INFO(name << " stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  std::vector<nlohmann::json> done = ParseEvents(r.out, "done");
  REQUIRE(done.size() == 1);
  CHECK(ParseEvents(r.out, "early_stopping").size() == 1);  // stopped on the validation split
  return done[0];
}

TEST_CASE("the ready NumPy, TFRecord and regression jobs train on the data the script writes", "[data]") {
  TempDir dir;
  MakeData(dir);
  const double npz = TrainReadyJob(dir, "npz-digits.json")["test_accuracy"].get<double>();
  const double tfrecord = TrainReadyJob(dir, "tfrecord-digits.json")["test_accuracy"].get<double>();
  const nlohmann::json diabetes = TrainReadyJob(dir, "csv-diabetes-regression.json");
  INFO("npz " << npz << " tfrecord " << tfrecord << " diabetes " << diabetes.dump());
  CHECK(npz >= 0.95);
  CHECK(tfrecord >= 0.95);
  REQUIRE(diabetes.contains("test_mae"));
  CHECK(diabetes["test_mae"].get<double>() <= 46.0);
}

TEST_CASE("the script writes the same bytes when run again, and names a missing file in one line", "[data]") {
  TempDir dir;
  MakeData(dir);
  const std::vector<std::string> files = {"digits-npz/train.npz",           "digits-npz/test.npz",
                                          "digits-tfrecord/train.tfrecord", "digits-tfrecord/test.tfrecord",
                                          "diabetes/train.csv",             "diabetes/test.csv"};
  std::vector<std::string> first;
  for (const std::string& f : files) first.push_back(ReadAll(dir / ("data/" + f)));
  MakeData(dir);
  for (std::size_t i = 0; i < files.size(); ++i) {
    INFO(files[i]);
    CHECK_FALSE(first[i].empty());
    CHECK(ReadAll(dir / ("data/" + files[i])) == first[i]);
  }

  std::filesystem::create_directories(dir / "empty");
  CommandResult r = RunCommand(kScript + " --out " + dir / "out" + " --sklearn-data " + dir / "empty", dir);
  CHECK(r.exit_code == 1);
  CHECK(r.err == "make_example_data.py: " + dir / "empty/digits.csv.gz" +
                     ": not found (scripts/setup installs python3-sklearn, which ships it)\n");
}

// Why this subject cannot run here ("" when it can): tfd_process_tests then skips it (exit 77).
std::string CannotRunHere(const std::string&) {
  for (const char* f : {"digits.csv.gz", "diabetes_data_raw.csv.gz", "diabetes_target.csv.gz"})
    if (!std::filesystem::exists(kSklearnData + "/" + f))
      return kSklearnData + "/" + f + ": missing (scripts/setup installs python3-sklearn)";
  TempDir dir;
  // The script runs under python3 and, where that one lacks numpy, /usr/bin/python3.
  if (RunCommand("command -v python3", dir).exit_code != 0) return "no python3 on PATH";
  if (RunCommand("python3 -c 'import numpy' || /usr/bin/python3 -c 'import numpy'", dir).exit_code != 0)
    return "numpy is missing (scripts/setup installs python3-sklearn, which brings python3-numpy)";
  return "";
}
const SubjectNeeds kNeeds(__FILE__, &CannotRunHere);

}  // namespace
}  // namespace tfd::testing::example_data_test
