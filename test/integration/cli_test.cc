// The tfd binary on bad input (one-line error naming the culprit, exit 2), its JSON events, its
// determinism and its handling of Ctrl-C. Uses small synthetic IDX files written by the test.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/test_util.h"

extern char** environ;

namespace tfd::testing::cli_test {
namespace {

const std::string kTfd = TFD_BINARY;

std::string Job(const std::string& data, const std::string& extra = "", const std::string& model = R"("mlp")") {
  return R"({"model": )" + model + R"(, "data": ")" + data +
         R"(", "epochs": 2, "batch_size": 20, "optimizer": {"type": "adam", "learning_rate": 0.01})" + extra + "}";
}

// Runs tfd --standalone on `job_text` and returns its result.
CommandResult RunJob(const TempDir& dir, const std::string& job_text, const std::string& flags = "") {
  WriteFile(dir / "job.json", job_text);
  return RunCommand(kTfd + " --standalone --job " + dir / "job.json" + " " + flags, dir);
}

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// Expects exit code 2 and exactly one line on stderr containing `fragment`.
void ExpectUsageError(const CommandResult& r, const std::string& fragment) {
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  CHECK(Lines(r.err) == 1);
  CHECK(r.err.find(fragment) != std::string::npos);
}

std::vector<nlohmann::json> Events(const std::string& out) {
  std::vector<nlohmann::json> events;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) events.push_back(nlohmann::json::parse(line));
  return events;
}

TEST_CASE("tfd rejects bad usage and bad files with one line and exit code 2", "[integration][cli]") {
  TempDir dir;
  WriteSyntheticMnist(dir / "", 200, 50);
  const std::string data = dir.path();

  SECTION("no job") { ExpectUsageError(RunCommand(kTfd + " --standalone", dir), "--job FILE is required"); }
  SECTION("unknown flag") { ExpectUsageError(RunCommand(kTfd + " --standalone --jbo x", dir), "unrecognised option '--jbo'"); }
  SECTION("bad log format") {
    ExpectUsageError(RunJob(dir, Job(data), "--log-format yaml"), "--log-format: expected text or json, got \"yaml\"");
  }
  SECTION("missing job file") {
    ExpectUsageError(RunCommand(kTfd + " --standalone --job " + dir / "none.json", dir),
                     dir / "none.json" + ": cannot open the job file");
  }
  SECTION("missing TF_CONFIG file") {
    ExpectUsageError(RunCommand(kTfd + " --tf-config " + dir / "none.json" + " --job x", dir),
                     dir / "none.json" + ": cannot open the TF_CONFIG file");
  }
  SECTION("invalid JSON") { ExpectUsageError(RunJob(dir, "{\"model\": "), "job.json: not valid JSON"); }
  SECTION("unknown model") { ExpectUsageError(RunJob(dir, Job(data, "", "\"resnet\"")), "job.json: model: unknown model \"resnet\""); }
  SECTION("unknown optimizer") {
    std::string job = Job(data);
    job.replace(job.find("adam"), 4, "adagrad");
    ExpectUsageError(RunJob(dir, job), "job.json: optimizer.type: unknown optimizer \"adagrad\"");
  }
  SECTION("negative batch size") {
    std::string job = Job(data);
    job.replace(job.find("\"batch_size\": 20"), 16, "\"batch_size\": -3");
    ExpectUsageError(RunJob(dir, job), "job.json: batch_size: expected an integer in [1, 65536], got -3");
  }
  SECTION("missing data folder") {
    ExpectUsageError(RunJob(dir, Job(dir / "nowhere")), dir / "nowhere" + ": no such data folder");
  }
  SECTION("truncated image file") {
    std::filesystem::resize_file(dir / "train-images-idx3-ubyte", 1000);
    ExpectUsageError(RunJob(dir, Job(data)), dir / "train-images-idx3-ubyte" + ": truncated IDX file");
  }
  SECTION("label count differs from image count") {
    WriteFile(dir / "t10k-labels-idx1-ubyte", IdxBytes({49}, std::vector<std::uint8_t>(49, 1)));
    ExpectUsageError(RunJob(dir, Job(data)), dir / "t10k-labels-idx1-ubyte" + ": 49 labels, but ");
  }
  SECTION("labels given as images") {
    std::filesystem::copy_file(dir / "train-labels-idx1-ubyte", dir / "train-images-idx3-ubyte",
                               std::filesystem::copy_options::overwrite_existing);
    ExpectUsageError(RunJob(dir, Job(data)), "wrong dimensions: IDX magic 0x00000801 says 1 dimensions, expected 3");
  }
  SECTION("a batch larger than the data") {
    std::string job = Job(data);
    job.replace(job.find("\"batch_size\": 20"), 16, "\"batch_size\": 500");
    ExpectUsageError(RunJob(dir, job), "batch_size: 500 is more than the 200 training examples");
  }
  SECTION("a cuda device this machine cannot use") {
    // cuda:63: out of range on a GPU machine; no device, or no backend built, elsewhere.
    CommandResult r = RunJob(dir, Job(data, R"(, "device": "cuda:63")"));
    ExpectUsageError(r, "device: \"cuda:63\": ");
    const bool reason = r.err.find("this tfd was built without the CUDA backend") != std::string::npos ||
                        r.err.find("no CUDA device") != std::string::npos ||
                        r.err.find("index 63 out of range: ") != std::string::npos;
    CHECK(reason);
  }
  SECTION("--device overrides the job's device, and is checked as it is") {
    ExpectUsageError(RunJob(dir, Job(data), "--device gpu0"), "--device: expected \"cpu\" or \"cuda:N\", got \"gpu0\"");
    ExpectUsageError(RunJob(dir, Job(data), "--device cuda:63"), "device: \"cuda:63\": ");
    ExpectUsageError(RunJob(dir, Job(data), "--gpu-memory-fraction 1.5"), "--gpu-memory-fraction: expected a number in (0, 1], got 1.5");
    ExpectUsageError(RunCommand("TF_CONFIG='{\"cluster\": {\"ps\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\"]}, \"task\": {\"type\": \"ps\", "
                                "\"index\": 0}}' " + kTfd + " --device cuda:0", dir),
                     "--device: a ps task trains nothing and never uses a GPU");
  }
  SECTION("--device cpu trains on the CPU whatever the job's device") {
    CommandResult r = RunJob(dir, Job(data, R"(, "device": "cuda:63")"), "--device cpu");
    INFO("stderr: " << r.err);
    CHECK(r.exit_code == 0);
  }
}

TEST_CASE("tfd --log-format json writes start, epoch and done events", "[integration][cli]") {
  TempDir dir;
  WriteSyntheticMnist(dir / "", 200, 50);
  CommandResult r = RunJob(dir, Job(dir.path(), R"(, "log_every_steps": 5)"), "--log-format json");
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  std::vector<nlohmann::json> events = Events(r.out);
  REQUIRE(events.size() >= 4);
  CHECK(events.front()["event"] == "start");
  CHECK(events.front()["task"] == "standalone");
  int epochs = 0, steps = 0;
  for (const auto& e : events) {
    CHECK(e.contains("ts"));
    if (e["event"] == "epoch") {
      ++epochs;
      CHECK(e["epoch"] == epochs);
      CHECK(e["global_step"] == epochs * 10);  // 200 examples / batch 20
      for (const char* key : {"loss", "accuracy", "test_accuracy", "samples_per_sec"}) CHECK(e[key].is_number());
    }
    steps += e["event"] == "step";
  }
  CHECK(epochs == 2);
  CHECK(steps == 4);  // every 5 of 20 steps
  const auto& done = events.back();
  CHECK(done["event"] == "done");
  CHECK(done["global_step"] == 20);
  CHECK(done["params_sha256"].get<std::string>().size() == 64);
  // The text form carries the seeds' per-epoch line.
  CHECK(r.err.find("epoch=2 global_step=20 loss=") != std::string::npos);
}

TEST_CASE("two runs with the same seed end with bit-identical parameters", "[integration][cli]") {
  TempDir dir;
  WriteSyntheticMnist(dir / "", 200, 50);
  auto sha = [&](const std::string& seed) {
    CommandResult r = RunJob(dir, Job(dir.path(), R"(, "seed": )" + seed), "--log-format json");
    REQUIRE(r.exit_code == 0);
    return Events(r.out).back()["params_sha256"].get<std::string>();
  };
  const std::string a = sha("3");
  CHECK(sha("3") == a);
  CHECK(sha("4") != a);
}

TEST_CASE("prefetching the next batch on a thread changes no parameter", "[integration][cli]") {
  TempDir dir;
  WriteSyntheticMnist(dir / "", 230, 50);  // 230 / 20: a short last batch is dropped, 11 steps an epoch
  auto sha = [&](const std::string& extra) {
    CommandResult r = RunJob(dir, Job(dir.path(), R"(, "seed": 5, "validation_split": 30)" + extra), "--log-format json");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return Events(r.out).back()["params_sha256"].get<std::string>();
  };
  const std::string off = sha(R"(, "prefetch": false)");
  CHECK(sha(R"(, "prefetch": true)") == off);
  CHECK(sha("") == off);  // the CPU's default: off
  ExpectUsageError(RunJob(dir, Job(dir.path(), R"(, "prefetch": "yes")")), "prefetch");
}

TEST_CASE("Ctrl-C stops a training run within a second with exit code 130", "[integration][cli]") {
  TempDir dir;
  WriteSyntheticMnist(dir / "", 2000, 50);
  std::string job = Job(dir.path());
  job.replace(job.find("\"epochs\": 2"), 11, "\"epochs\": 100000");
  WriteFile(dir / "job.json", job);
  const std::string log = dir / "err.log";
  std::vector<std::string> args = {kTfd, "--standalone", "--job", dir / "job.json", "--log-format", "json"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, (dir / "out.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, kTfd.c_str(), &actions, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);

  auto wait_for = [&](auto done, std::chrono::seconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (done()) return true;  // done() may have side effects (waitpid): call it once per round
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  // Wait until it trains (its first epoch line), then interrupt it.
  bool training = wait_for([&] {
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {}).find("epoch=1 ") != std::string::npos;
  }, std::chrono::seconds(60));
  int status = 0;
  if (!training) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL("tfd did not finish its first epoch within 60 s");
  }
  REQUIRE(kill(pid, SIGINT) == 0);
  const auto sent = std::chrono::steady_clock::now();
  bool exited = wait_for([&] { return waitpid(pid, &status, WNOHANG) == pid; }, std::chrono::seconds(30));
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL("tfd did not stop within 30 s of SIGINT");
  }
  // Generous for a loaded CI machine; a step of this model takes well under a millisecond.
  CHECK(std::chrono::steady_clock::now() - sent < std::chrono::seconds(5));
  std::ifstream err_in(log);
  INFO("stderr: " << std::string(std::istreambuf_iterator<char>(err_in), {}));
  INFO("killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  std::ifstream in(log);
  std::string err(std::istreambuf_iterator<char>(in), {});
  CHECK(err.find("stopped by a signal") != std::string::npos);
}

TEST_CASE("tfd data inspect reports a CSV's rows, classes and warnings, as text and JSON; bad data is one line, exit 2", "[integration][cli][data]") {
  TempDir dir;
  WriteFile(dir / "t.csv", "a,b,y\n1,5,cat\n2,5,dog\n3,5,dog\n3,5,dog\n");
  CommandResult text = RunCommand(kTfd + " data inspect " + dir / "t.csv", dir);
  INFO(text.err);
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.rfind(dir / "t.csv" + " (csv), training split: 4 rows; each 1x2x1 (2 float32 values)\nclasses (2): cat 1 (25.0%) dog 3 (75.0%)\n", 0) == 0);
  CHECK(text.out.find("warning: 1 constant feature (b): no use to the model\n") != std::string::npos);
  CHECK(text.out.find("warning: 1 duplicate row (features and label repeat an earlier row)\n") != std::string::npos);
  CommandResult json = RunCommand(kTfd + " data inspect --json " + dir / "t.csv", dir);
  REQUIRE(json.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(json.out);
  CHECK(j["train"]["rows"] == 4);
  CHECK(j["train"]["classes"][1]["name"] == "dog");
  CHECK(j["train"]["classes"][1]["count"] == 3);
  WriteFile(dir / "bad.csv", "a,y\n1,cat\nx,dog\n");
  ExpectUsageError(RunCommand(kTfd + " data inspect " + dir / "bad.csv", dir), dir / "bad.csv" + ":3: column 1 (\"a\"): expected a finite number, got \"x\"");
  CommandResult usage = RunCommand(kTfd + " data inspect", dir);
  CHECK(usage.exit_code == 2);
  CHECK(usage.err.rfind("tfd: data inspect: name a source or a job file\n", 0) == 0);
}

}  // namespace
}  // namespace tfd::testing::cli_test
