// tfd serve as a client meets it: an exported model served on a free port, every kind of good and
// bad request sent with Debian's curl, predictions checked against LoadVersion + Forward on the
// same rows, a new version swapped in under concurrent load with no failed request, the
// Prometheus counters checked against the requests sent, bad model folders refused with exit 2.
#include <csignal>
#include <cmath>
#include <filesystem>
#include <map>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/export/model_dir.h"
#include "test/system/tfctl_util.h"
#include "test/test_util.h"

namespace tfd::testing::serve_test {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

struct Answer {
  int status = 0;
  std::string body;
};

// Sends one request with curl and counts its status in `sent` (what /metrics should then show).
class Client {
 public:
  Client(const TempDir& dir, int port, std::string auth = "") : dir_(dir), base_("http://127.0.0.1:" + std::to_string(port)), auth_(std::move(auth)) {}

  Answer Send(const std::string& method, const std::string& path, const std::string& body = "", bool count = true) {
    const std::string body_file = dir_ / "req.json", out_file = dir_ / "resp.json";
    WriteFile(body_file, body);
    std::string cmd = "curl -s -m 30 -o " + out_file + " -w '%{http_code}' -X " + method + " ";
    if (!auth_.empty()) cmd += "-H 'Authorization: Bearer " + auth_ + "' ";
    if (!body.empty()) cmd += "-H 'Content-Type: application/json' --data-binary @" + body_file + " ";
    CommandResult r = RunCommand(cmd + "'" + base_ + path + "'", dir_);
    Answer a{.status = std::atoi(r.out.c_str()), .body = ReadAll(out_file)};
    if (count && a.status != 0) ++sent[a.status];
    return a;
  }
  std::map<int, int> sent;

 private:
  const TempDir& dir_;
  std::string base_, auth_;
};

std::string WriteModel(const TempDir& dir, const std::string& base, const std::string& model, const std::string& shape, int seed) {
  CommandResult r = RunCommand(std::string(TFD_WRITE_TEST_MODEL) + " " + base + " " + model + " " + shape + " " + std::to_string(seed), dir);
  REQUIRE(r.exit_code == 0);
  std::string out = r.out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// What the model in `version_dir` gives for raw rows: LoadVersion + normalise + Forward + softmax.
std::vector<std::vector<float>> Expected(const std::string& version_dir, const std::vector<std::vector<float>>& rows) {
  Result<exporting::LoadedModel> m = exporting::LoadVersion(version_dir, static_cast<int>(rows.size()));
  REQUIRE(m.ok());
  std::vector<float> x;
  for (const auto& row : rows)
    for (std::size_t j = 0; j < row.size(); ++j) x.push_back((row[j] * *m->card.normalizer.scale - m->card.normalizer.mean[j]) * m->card.normalizer.inv_std[j]);
  const float* out = m->model->Forward(x.data(), static_cast<int>(rows.size()));
  const int k = m->card.outputs();
  std::vector<std::vector<float>> logits;
  for (std::size_t r = 0; r < rows.size(); ++r) logits.emplace_back(out + r * k, out + (r + 1) * k);
  return logits;
}

bool Near(const json& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (std::abs(got[i].get<double>() - want[i]) > 1e-5 * std::max(1.0f, std::abs(want[i]))) return false;
  return true;
}

double Sample(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix + " ", 0) == 0) return std::stod(line.substr(prefix.size() + 1));
  return -1;
}

bool WaitHealthy(Client& c, Process& p) {
  for (int i = 0; i < 300; ++i) {
    if (c.Send("GET", "/healthz").status == 200) return true;
    if (p.Wait(100ms)) return false;
  }
  return false;
}

TEST_CASE("tfd serve refuses a missing or corrupt model folder with exit 2 and one line", "[system][serve]") {
  TempDir dir;
  CommandResult r = RunCommand(std::string(kTfd) + " serve --model " + (dir / "none"), dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("no such model folder") != std::string::npos);
  const std::string version = WriteModel(dir, dir / "iris", "mlp", "table", 1);
  std::filesystem::remove(version + "/weights.tfdckpt");
  r = RunCommand(std::string(kTfd) + " serve --model " + (dir / "iris"), dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("weights.tfdckpt") != std::string::npos);
  const std::string v2 = WriteModel(dir, dir / "iris", "mlp", "table", 1);
  WriteFile(v2 + "/model.onnx", "not onnx");
  r = RunCommand(std::string(kTfd) + " serve --model " + (dir / "iris"), dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("model.onnx") != std::string::npos);
  r = RunCommand(std::string(kTfd) + " serve --model " + (dir / "iris") + " --batch-max 0", dir);
  CHECK(r.exit_code == 2);
  CHECK(r.err == "tfd: serve: --batch-max 0: expected at least 1\n");
  r = RunCommand(std::string(kTfd) + " serve --modle x", dir);
  CHECK(r.exit_code == 2);
}

TEST_CASE("tfd serve answers TF Serving's REST API, every bad request with its 4xx, and swaps versions under load", "[system][serve]") {
  TempDir dir;
  const std::string base = dir / "iris";
  const std::string v1 = WriteModel(dir, base, "mlp", "table", 1);
  const int port = FreePort();
  Process serve({kTfd, "serve", "--model", base, "--bind", "127.0.0.1:" + std::to_string(port), "--batch-max", "8", "--poll-s", "1",
                 "--max-body-bytes", "4096", "--batch-timeout-us", "2000"},
                {}, dir / "serve.out", dir / "serve.err");
  Client c(dir, port);
  INFO("tfd serve stderr:\n" << serve.err());
  REQUIRE(WaitHealthy(c, serve));

  Answer a = c.Send("GET", "/v1/models/iris");
  CHECK(a.status == 200);
  CHECK(json::parse(a.body) == json::parse(R"({"model_version_status": [{"version": "1", "state": "AVAILABLE",
                                              "status": {"error_code": "OK", "error_message": ""}}]})"));
  a = c.Send("GET", "/v1/models/iris/versions/1/metadata");
  CHECK(a.status == 200);
  const json meta = json::parse(a.body);
  CHECK(meta["metadata"]["tfd"]["class_names"] == json({"setosa", "versicolor", "virginica"}));
  CHECK(meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]["input"]["tensor_shape"]["dim"][1]["size"] == "4");

  const std::vector<std::vector<float>> rows = {{5.1f, 3.5f, 1.4f, 0.2f}, {6.7f, 3.0f, 5.2f, 2.3f}, {5.9f, 3.0f, 4.2f, 1.5f}};
  const auto want = Expected(v1, rows);
  a = c.Send("POST", "/v1/models/iris:predict", json({{"instances", rows}}).dump());
  REQUIRE(a.status == 200);
  json got = json::parse(a.body);
  REQUIRE(got["predictions"].size() == 3);
  for (int r = 0; r < 3; ++r) {
    CHECK(Near(got["predictions"][r]["logits"], want[r]));
    double sum = 0;
    for (const auto& p : got["predictions"][r]["probabilities"]) sum += p.get<double>();
    CHECK(std::abs(sum - 1) < 1e-5);
  }
  a = c.Send("POST", "/v1/models/iris/versions/1:predict", json({{"inputs", {{"input", rows}}}}).dump());
  REQUIRE(a.status == 200);
  CHECK(Near(json::parse(a.body)["outputs"]["logits"][2], want[2]));

  const std::pair<std::string, std::string> bad[] = {
      {"{\"instances\": [1,", "not JSON"},
      {R"({"instances": [[1, 2, 3, 4], [1, 2, 3]]})", "instance 1: expected 4 numbers"},
      {R"({"instances": [[1, 2, "x", 4]]})", "instance 0: value 2 is a string"},
      {R"({"instances": [[1, 2, 1e40, 4]]})", "not a finite float32"},
      {R"({"instances": []})", "empty list"},
      {json({{"instances", std::vector<std::vector<float>>(9, rows[0])}}).dump(), "at most 8 per request"},
  };
  for (const auto& [body, message] : bad) {
    a = c.Send("POST", "/v1/models/iris:predict", body);
    CHECK(a.status == 400);
    CHECK(json::parse(a.body)["error"].get<std::string>().find(message) != std::string::npos);
  }
  CHECK(c.Send("POST", "/v1/models/other:predict", R"({"instances": [[1, 2, 3, 4]]})").status == 404);
  CHECK(c.Send("GET", "/v1/models/iris/versions/7").status == 404);
  CHECK(c.Send("GET", "/v2/nothing").status == 404);
  CHECK(c.Send("GET", "/v1/models/iris:predict").status == 405);
  a = c.Send("POST", "/v1/models/iris:predict", std::string(5000, ' '));
  CHECK(a.status == 413);
  CHECK(json::parse(a.body)["error"].get<std::string>().find("too large") != std::string::npos);

  // Version 2 appears while four clients send predictions: none fails, and 2 is then served.
  const std::string v2 = WriteModel(dir, dir / "staging", "mlp", "table", 2);
  std::vector<std::map<int, int>> codes(4);
  std::vector<std::thread> load;
  std::atomic<bool> stop{false};
  for (int t = 0; t < 4; ++t)
    load.emplace_back([&, t] {
      TempDir own;
      Client mine(own, port);
      while (!stop) mine.Send("POST", "/v1/models/iris:predict", json({{"instances", {rows[t % 3]}}}).dump());
      codes[t] = mine.sent;
    });
  std::this_thread::sleep_for(1s);
  std::filesystem::rename(std::filesystem::path(v2).parent_path(), base + "/2.tmp");  // as WriteVersion does: a whole folder appears
  std::filesystem::rename(base + "/2.tmp/1", base + "/2");
  bool swapped = false;
  for (int i = 0; i < 100 && !swapped; ++i) {
    swapped = json::parse(c.Send("GET", "/v1/models/iris").body)["model_version_status"][0]["version"] == "2";
    std::this_thread::sleep_for(100ms);
  }
  std::this_thread::sleep_for(1s);
  stop = true;
  for (auto& t : load) t.join();
  CHECK(swapped);
  int total = 0;
  for (const auto& m : codes)
    for (const auto& [code, n] : m) {
      CHECK(code == 200);
      c.sent[code] += n;
      total += n;
    }
  CHECK(total > 8);
  const auto want2 = Expected(base + "/2", rows);
  a = c.Send("POST", "/v1/models/iris:predict", json({{"instances", rows}}).dump());
  REQUIRE(a.status == 200);
  CHECK(Near(json::parse(a.body)["predictions"][0]["logits"], want2[0]));
  CHECK(c.Send("GET", "/v1/models/iris/versions/1").status == 404);  // unloaded once 2 was in

  // A broken version 3 is logged and skipped; 2 keeps serving.
  std::filesystem::create_directories(base + "/3");
  WriteFile(base + "/3/model.json", "{");
  std::this_thread::sleep_for(2500ms);
  CHECK(c.Send("GET", "/v1/models/iris").body.find("\"2\"") != std::string::npos);
  CHECK(serve.err().find("new version skipped, still serving version 2") != std::string::npos);

  // /metrics counts every request above (this scrape counts itself before it renders).
  c.sent[200] += 1;
  a = c.Send("GET", "/metrics", "", false);
  REQUIRE(a.status == 200);
  for (const auto& [code, n] : c.sent) {
    INFO("code " << code);
    CHECK(Sample(a.body, "tfd_serve_requests_total{code=\"" + std::to_string(code) + "\"}") == n);
  }
  CHECK(Sample(a.body, "tfd_serve_model_version") == 2);
  CHECK(Sample(a.body, "tfd_serve_version_load_failures_total") == 1);
  CHECK(Sample(a.body, "tfd_serve_batch_size_count") > 0);
  serve.Signal(SIGTERM);
  CHECK(serve.Wait(30s) == std::optional<int>(0));
}

TEST_CASE("tfd serve with --token-file wants the token as a Bearer header", "[system][serve]") {
  TempDir dir;
  WriteModel(dir, dir / "iris", "mlp", "table", 1);
  const std::string token(64, 'a');
  WriteFile(dir / "token", token + "\n");
  std::filesystem::permissions(dir / "token", std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const int port = FreePort();
  Process serve({kTfd, "serve", "--model", dir / "iris", "--bind", "127.0.0.1:" + std::to_string(port), "--token-file", dir / "token"}, {},
                dir / "serve.out", dir / "serve.err");
  Client open(dir, port), wrong(dir, port, std::string(64, 'b')), right(dir, port, token);
  INFO("tfd serve stderr:\n" << serve.err());
  REQUIRE(WaitHealthy(open, serve));  // /healthz needs no token
  CHECK(open.Send("GET", "/v1/models/iris").status == 401);
  CHECK(wrong.Send("GET", "/v1/models/iris").status == 401);
  CHECK(open.Send("GET", "/metrics").status == 401);
  CHECK(right.Send("GET", "/v1/models/iris").status == 200);
  CHECK(right.Send("POST", "/v1/models/iris:predict", R"({"instances": [[5.1, 3.5, 1.4, 0.2]]})").status == 200);
}

}  // namespace
}  // namespace tfd::testing::serve_test
