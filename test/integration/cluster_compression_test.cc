// Gradient compression (update.compression) in tfd clusters on synthetic data: for each method, a
// 2-worker allreduce run leaves bit-identical parameters on both workers and again on a second
// run, and sends the bytes per step its arithmetic says; the sync ps path does the same for fp16
// and topk; powersgd is refused in a ps mode with exit 2 naming the field. An allreduce run's
// checkpoints carry every worker's error feedback, so a resumed run ends with the undisturbed bits;
// the ps modes' saves carry it too, do not wait for a worker the ps has lost, and get a stopped
// worker's deposit through a ps restarted while they wait.
#include <algorithm>
#include <csignal>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "common/ckpt/file.h"
#include "test/integration/cluster_util.h"
#include "test/local_cluster.h"
#include "test/test_util.h"

namespace tfd::testing::cluster_compression_test {
namespace {

using namespace std::chrono_literals;

const std::string kOptimizer = R"({"type": "momentum", "learning_rate": 0.02, "momentum": 0.9})";

std::string CompressedJob(const TempDir& data, const std::string& mode, const std::string& compression) {
  return Job(data.path(), R"({"mode": ")" + mode + R"(", "compression": )" + compression + "}", 2, kOptimizer, 20, R"({"name": "dnn"})");
}

// The ring_bytes_per_step of worker `i`'s last epoch line.
long RingBytesPerStep(const TaskResult& w) {
  const std::string key = "ring_bytes_per_step=";
  const std::size_t at = w.err.rfind(key);
  if (at == std::string::npos) return -1;
  return std::stol(w.err.substr(at + key.size()));
}

// The chief's result once it, worker 1 and ps 0 have exited 0, no save having waited its 30 s out
// for a residual.
TaskResult FinishChief(LocalCluster& c) {
  TaskResult chief = c.Finish("worker", 0);
  INFO(chief.err);
  REQUIRE(chief.exit_code == 0);
  CHECK(c.Finish("worker", 1).exit_code == 0);
  CHECK(c.Finish("ps", 0, 30s).exit_code == 0);
  CHECK(chief.err.find("did not come from every ps within") == std::string::npos);
  return chief;
}

std::vector<TaskResult> Run(const std::string& job, int num_ps) {
  LocalCluster c({.num_ps = num_ps, .num_workers = 2, .job = job});
  c.StartAll();
  return c.FinishAll();
}

TEST_CASE("compressed allreduce: each method gives the same bits on both workers and across runs", "[integration][cluster][compression]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 400, 100);
  LocalCluster plain({.num_ps = 0, .num_workers = 2, .job = CompressedJob(data, "allreduce", R"("none")")});
  auto uncompressed = RunToCompletion(plain);
  REQUIRE(uncompressed[0]["params_sha256"].is_string());
  const std::vector<std::string> methods{R"("fp16")", R"("bf16")", R"({"method": "topk", "ratio": 0.01})",
                                         R"({"method": "topk", "ratio": 0.01, "warmup_epochs": 0})", R"({"method": "powersgd", "rank": 2})"};
  for (const std::string& method : methods) {
    INFO("compression " << method);
    const std::string job = CompressedJob(data, "allreduce", method);
    std::vector<TaskResult> first = Run(job, 0), second = Run(job, 0);
    for (std::size_t i = 0; i < 2; ++i) {
      INFO("worker " << i << ":\n" << first[i].err);
      REQUIRE(first[i].exit_code == 0);
      REQUIRE(second[i].exit_code == 0);
      CHECK(first[i].done["params_sha256"] == first[0].done["params_sha256"]);
      CHECK(second[i].done["params_sha256"] == first[0].done["params_sha256"]);
      CHECK(first[i].err.find("update.compression") != std::string::npos);
    }
    CHECK(first[0].done["params_sha256"] != uncompressed[0]["params_sha256"]);  // it did compress
    // The bytes each worker sent per step, against the arithmetic of the log line it printed.
    const long measured = RingBytesPerStep(first[0]);
    std::smatch said;
    REQUIRE(std::regex_search(first[0].err, said, std::regex(R"(update\.compression \w+: (\d+) bytes per step)")));
    const long stated = std::stol(said[1].str());
    CHECK(measured > 0);
    // Two workers: an all-reduce sends each float once (half in each phase), an all-gather each
    // worker's part once: the stated bytes, give or take a control float.
    CHECK(std::labs(measured - stated) <= 8);
    // topk's warm-up (1 epoch by default): the first epoch kept more, from 1/4 of each tensor down.
    if (method.find("topk") != std::string::npos) {
      const std::size_t first_at = first[0].err.find("ring_bytes_per_step=");
      REQUIRE(first_at != std::string::npos);
      const long first_epoch = std::stol(first[0].err.substr(first_at + 20));
      if (method.find("warmup_epochs\": 0") != std::string::npos) CHECK(first_epoch == measured);
      else CHECK(first_epoch > 4 * measured);
    }
  }
}

TEST_CASE("compressed sync ps: fp16 and topk pushes give the same bits on both workers and across runs", "[integration][cluster][compression]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 400, 100);
  for (const std::string method : {R"("fp16")", R"({"method": "topk", "ratio": 0.05})"}) {
    INFO("compression " << method);
    const std::string job = CompressedJob(data, "sync", method);
    std::vector<TaskResult> first = Run(job, 2), second = Run(job, 2);  // two ps: each decodes its own shard
    REQUIRE(first.size() == 2);
    REQUIRE(second.size() == 2);
    CHECK(first[0].err.find("pushes go as PUSH_COMPRESSED") != std::string::npos);
    REQUIRE(first[0].done["params_sha256"].is_string());
    CHECK(first[1].done["params_sha256"] == first[0].done["params_sha256"]);
    CHECK(second[0].done["params_sha256"] == first[0].done["params_sha256"]);
    CHECK(second[1].done["params_sha256"] == first[0].done["params_sha256"]);
  }
}

TEST_CASE("compressed ps modes: checkpoints carry every worker's topk error feedback, and a restore resumes it in the chief",
          "[integration][cluster][compression][checkpoint]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 400, 100);
  for (const std::string mode : {"sync", "async"}) {
    INFO("mode " << mode);
    // 10 steps an epoch per worker (400 examples, 2 workers, batch 20), 2 epochs, a save every 5 global steps;
    // two ps tasks, so each worker's residual comes back in two shards.
    const auto job = [&](const TempDir& dir) {
      return Job(data.path(), R"({"mode": ")" + mode + R"(", "compression": {"method": "topk", "ratio": 0.05}})", 2, kOptimizer, 20,
                 R"({"name": "dnn"})", R"(, "checkpoint": {"dir": ")" + dir.path() + R"(", "every_steps": 5, "keep": 20})");
    };
    TempDir dir;
    // Worker 1 shakes hands with both ps before the chief starts, so it trains beside the chief: the
    // chief alone could otherwise be through its steps before worker 1 takes one.
    LocalCluster c({.num_ps = 2, .num_workers = 2, .job = job(dir)});
    c.StartPs(0);
    c.StartPs(1);
    c.StartWorker(1);
    AwaitLine(c.process("worker", 1), "connected to ps:0 (");
    AwaitLine(c.process("worker", 1), "connected to ps:1 (");
    c.StartWorker(0);
    std::vector<TaskResult> first = c.FinishAll();
    REQUIRE(first.size() == 2);
    INFO(first[0].err);
    REQUIRE(first[0].exit_code == 0);
    REQUIRE(first[1].exit_code == 0);
    CHECK(first[0].err.find("did not come from every ps within") == std::string::npos);  // no save waited its 30 s out
    Result<std::vector<std::string>> files = ckpt::List(dir.path());
    REQUIRE(files.ok());
    REQUIRE(files->size() >= 2);
    std::string mid;  // the newest save before the final one
    int both = 0;     // saves with both workers' residuals (async: worker 1 may finish first, and deposit no more)
    for (const std::string& f : *files) {
      Result<ckpt::Checkpoint> c = ckpt::Load(f);
      REQUIRE(c.ok());
      INFO(f);
      if (c->final) {  // no step after it to ask the others in
        CHECK_FALSE(c->feedback.has_value());
        continue;
      }
      if (mid.empty()) mid = f;
      REQUIRE(c->feedback.has_value());
      CHECK(c->feedback->method == config::CompressionSpec::Method::kTopK);
      REQUIRE(c->feedback->residuals.size() == 2);
      std::size_t params = 0;
      for (const ckpt::NamedTensor& t : c->tensors) params += t.values.size();
      const auto nonzero = [](const std::vector<float>& r) { return std::any_of(r.begin(), r.end(), [](float v) { return v != 0.0f; }); };
      for (const std::vector<float>& r : c->feedback->residuals) CHECK(r.size() == params);
      CHECK(nonzero(c->feedback->residuals[0]));  // the chief's own
      if (mode == std::string("sync")) CHECK(nonzero(c->feedback->residuals[1]));  // in step with the chief: never finished first
      if (nonzero(c->feedback->residuals[1])) {
        ++both;
        CHECK(c->feedback->residuals[0] != c->feedback->residuals[1]);  // each worker's own batches
      }
    }
    REQUIRE_FALSE(mid.empty());
    CHECK(both >= 1);
    // From that save alone: the chief resumes the feedback, summed, and the run ends.
    TempDir again_dir;
    WriteFile(again_dir / std::filesystem::path(mid).filename().string(), ReadAll(mid));
    std::vector<TaskResult> again = Run(job(again_dir), 2);
    REQUIRE(again.size() == 2);
    INFO(again[0].err);
    CHECK(again[0].exit_code == 0);
    CHECK(again[0].err.find("its error feedback, summed over the workers that saved it, resumes in the chief's") != std::string::npos);
  }
}

TEST_CASE("compressed sync ps: a save does not wait for the error feedback of a worker the ps has lost", "[integration][cluster][compression][checkpoint]") {
  TempDir data, dir;
  WriteSyntheticMnist(data.path(), 1200, 100);
  // 3 workers, batch 20: 20 sync steps an epoch, 6 epochs, a save every 5 steps; worker 2 killed
  // after its first epoch, the others going on without it. Each save after that would wait 30 s
  // for its residual (the run's whole time limit over four saves) if the chief did not hear from
  // the ps that worker 2 is away.
  const std::string job =
      Job(data.path(), R"({"mode": "sync", "on_worker_loss": "shrink", "min_replicas": 2, "compression": {"method": "topk", "ratio": 0.05}})",
          6, kOptimizer, 20, R"({"name": "dnn"})", R"(, "checkpoint": {"dir": ")" + dir.path() + R"(", "every_steps": 5, "keep": 100})");
  LocalCluster c({.num_ps = 1, .num_workers = 3, .job = job});
  c.StartPs(0);
  for (int i = 0; i < 3; ++i) c.StartWorker(i);
  c.AwaitEvent("worker", 2, "epoch", {{"epoch", 1}});
  c.process("worker", 2).Signal(SIGKILL);
  const TaskResult chief = FinishChief(c);
  INFO(chief.err);
  CHECK(chief.err.find("worker rank(s) 2 lost by a ps and not back") != std::string::npos);
  // The saves after the loss: worker 1's residual in, worker 2's zero.
  Result<std::vector<std::string>> files = ckpt::List(dir.path());
  REQUIRE(files.ok());
  int after_loss = 0;
  for (const std::string& f : *files) {  // newest first
    Result<ckpt::Checkpoint> ck = ckpt::Load(f);
    REQUIRE(ck.ok());
    if (ck->final) continue;
    REQUIRE(ck->feedback.has_value());
    REQUIRE(ck->feedback->residuals.size() == 3);
    const auto zero = [](const std::vector<float>& r) { return std::all_of(r.begin(), r.end(), [](float v) { return v == 0.0f; }); };
    if (!zero(ck->feedback->residuals[2])) break;  // from before the loss
    INFO(f);
    CHECK_FALSE(zero(ck->feedback->residuals[1]));
    ++after_loss;
  }
  CHECK(after_loss >= 4);
}

TEST_CASE("compressed async ps: a ps restarted while a save waits for a deposit is asked again, and the save has it",
          "[integration][cluster][compression][checkpoint]") {
  TempDir data, dir;
  WriteSyntheticMnist(data.path(), 2000, 100);
  // 50 steps an epoch per worker, a save every 20 global steps, for long enough to stop worker 1
  // and restart the ps while the chief goes on.
  const std::string job = Job(data.path(), R"({"mode": "async", "compression": {"method": "topk", "ratio": 0.05}})", 20,
                              R"({"type": "sgd", "learning_rate": 0.01})", 20,
                              R"({"name": "dnn"})", R"(, "checkpoint": {"dir": ")" + dir.path() + R"(", "every_steps": 20, "keep": 1000})");
  LocalCluster c({.num_ps = 1, .num_workers = 2, .job = job});
  const std::vector<std::string> patient = {"--peer-timeout", "120"};  // a stopped worker stays connected, not lost
  c.StartPs(0, patient);
  c.StartWorker(1);
  AwaitLine(c.process("worker", 1), "connected to ps:0 (");
  c.StartWorker(0);
  c.AwaitEvent("worker", 1, "epoch", {{"epoch", 1}});
  // Worker 1 stopped: the chief's next save waits for its residual. The ps is killed and started
  // again meanwhile; the chief initialises it again and names the save in its next STATE_PULL, the
  // restarted ps asks worker 1, and worker 1, let go, reconnects and deposits with it.
  c.process("worker", 1).Signal(SIGSTOP);
  const std::string waiting = "waiting for the error feedback of worker rank(s) 1";
  AwaitLine(c.process("worker", 0), waiting);
  c.process("ps", 0).Signal(SIGKILL);
  std::this_thread::sleep_for(500ms);
  c.StartPs(0, patient);
  c.process("worker", 1).Signal(SIGCONT);
  const TaskResult w0 = FinishChief(c);
  INFO(w0.err);
  CHECK(w0.err.find("lost by a ps") == std::string::npos);
  // The save that waited (the first at or after the step it waited at: worker 1's steps move the
  // parameters on meanwhile) has worker 1's residual.
  const std::size_t at = w0.err.find(waiting);
  const std::size_t step_at = w0.err.rfind("global_step ", at);
  REQUIRE(step_at != std::string::npos);
  const std::uint64_t step = std::stoull(w0.err.substr(step_at + 12));
  std::optional<ckpt::Checkpoint> waited;
  Result<std::vector<std::string>> files = ckpt::List(dir.path());
  REQUIRE(files.ok());
  for (const std::string& f : *files) {  // newest first
    Result<ckpt::Checkpoint> ck = ckpt::Load(f);
    REQUIRE(ck.ok());
    if (ck->global_step >= step && !ck->final) waited = std::move(ck).value();
  }
  REQUIRE(waited.has_value());
  INFO("the save at global_step " << waited->global_step);
  REQUIRE(waited->feedback.has_value());
  REQUIRE(waited->feedback->residuals.size() == 2);
  CHECK(std::any_of(waited->feedback->residuals[1].begin(), waited->feedback->residuals[1].end(), [](float v) { return v != 0.0f; }));
}

TEST_CASE("compressed allreduce: checkpoints carry every worker's error feedback, and a run resumed from one ends with the undisturbed run's bits",
          "[integration][cluster][compression][checkpoint]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 400, 100);
  // 10 steps an epoch (400 examples, 2 workers, batch 20), a save every 10 steps.
  auto job = [&](const std::string& compression, const TempDir& dir) {
    return Job(data.path(), R"({"mode": "allreduce", "compression": )" + compression + "}", 3, kOptimizer, 20, R"({"name": "dnn"})",
               R"(, "checkpoint": {"dir": ")" + dir.path() + R"(", "every_steps": 10, "keep": 10})");
  };
  for (const std::string method : {R"({"method": "topk", "ratio": 0.01})", R"({"method": "powersgd", "rank": 2})"}) {
    INFO("compression " << method);
    const bool topk = method.find("topk") != std::string::npos;
    TempDir first;
    LocalCluster a({.num_ps = 0, .num_workers = 2, .job = job(method, first)});
    auto whole = RunToCompletion(a);
    REQUIRE(whole[0]["params_sha256"].is_string());
    Result<std::vector<std::string>> files = ckpt::List(first.path());
    REQUIRE(files.ok());
    // Newest first; a save with error feedback waits for the write before it, so none is skipped.
    REQUIRE(files->size() == 3);
    REQUIRE(files->back().find("ckpt-000000000010.tfdckpt") != std::string::npos);
    for (const std::string& f : *files) {
      Result<ckpt::Checkpoint> c = ckpt::Load(f);
      REQUIRE(c.ok());
      INFO(f);
      REQUIRE(c->feedback.has_value());
      CHECK(c->feedback->method == (topk ? config::CompressionSpec::Method::kTopK : config::CompressionSpec::Method::kPowerSgd));
      REQUIRE(c->feedback->residuals.size() == 2);
      std::size_t params = 0;
      for (const ckpt::NamedTensor& t : c->tensors) params += t.values.size();
      CHECK(c->feedback->residuals[0].size() == params);
      // Each worker's own: they saw other batches.
      CHECK(c->feedback->residuals[0] != c->feedback->residuals[1]);
      CHECK(std::any_of(c->feedback->residuals[1].begin(), c->feedback->residuals[1].end(), [](float v) { return v != 0.0f; }));
      CHECK(c->feedback->shared.empty() == topk);  // powersgd's Q
    }
    // From step 10: epochs 2 and 3 again, each worker taking up its own residual, the same bits.
    TempDir b_dir;
    WriteFile(b_dir / "ckpt-000000000010.tfdckpt", ReadAll(files->back()));
    LocalCluster b({.num_ps = 0, .num_workers = 2, .job = job(method, b_dir)});
    auto resumed = RunToCompletion(b);
    INFO(b.process("worker", 0).err());
    CHECK(HasEvent(b.process("worker", 0).out(), "restored", {{"global_step", 10}}));
    for (const auto& d : resumed) {
      CHECK(d["global_step"] == 30);
      CHECK(d["params_sha256"] == whole[0]["params_sha256"]);
    }
    if (!topk) continue;
    // On 3 workers each starts from the 2 residuals' mean; under fp16 they are left out. Both said.
    TempDir c_dir, d_dir;
    WriteFile(c_dir / "ckpt-000000000010.tfdckpt", ReadAll(files->back()));
    WriteFile(d_dir / "ckpt-000000000010.tfdckpt", ReadAll(files->back()));
    LocalCluster three({.num_ps = 0, .num_workers = 3, .job = job(method, c_dir)});
    RunToCompletion(three);
    CHECK(three.process("worker", 0).err().find("error feedback of 2 workers, averaged, seeds each of this run's 3") != std::string::npos);
    LocalCluster half({.num_ps = 0, .num_workers = 2, .job = job(R"("fp16")", d_dir)});
    RunToCompletion(half);
    CHECK(half.process("worker", 0).err().find("its topk error feedback is not restored: this job's update.compression is fp16") !=
          std::string::npos);
  }
}

TEST_CASE("update.compression refuses powersgd in a ps mode and unknown methods, exit 2 naming the field", "[integration][cluster][compression]") {
  TempDir data;
  WriteSyntheticMnist(data.path(), 100, 20);
  LocalCluster c({.num_ps = 1, .num_workers = 1, .job = CompressedJob(data, "sync", R"({"method": "powersgd", "rank": 2})")});
  c.StartWorker(0);
  TaskResult w = c.Finish("worker", 0, 60s);
  CHECK(w.exit_code == 2);
  CHECK(w.err.find("update.compression.method: powersgd needs \"mode\": \"allreduce\"") != std::string::npos);
  LocalCluster d({.num_ps = 0, .num_workers = 1, .job = CompressedJob(data, "allreduce", R"("int8")")});
  d.StartWorker(0);
  TaskResult x = d.Finish("worker", 0, 60s);
  CHECK(x.exit_code == 2);
  CHECK(x.err.find("update.compression: unknown method \"int8\"") != std::string::npos);
}

}  // namespace
}  // namespace tfd::testing::cluster_compression_test
