#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "common/config/job.h"

namespace tfd::config {
namespace {

constexpr const char* kGood = R"({"model": "mlp", "data": "data/mnist", "epochs": 2, "batch_size": 100,
  "optimizer": {"type": "sgd", "learning_rate": 0.5}})";

std::string ErrorOf(const std::string& text) {
  auto got = ParseJobSpec(text, "job.json");
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kInvalidArgument);
  return got.status().message();
}

// kGood with `field` replaced or added.
std::string With(const std::string& field) {
  std::string s = R"({"model": "mlp", "data": "data/mnist", "epochs": 2, "batch_size": 100, "optimizer": {"type": "sgd", "learning_rate": 0.5})";
  return s + ", " + field + "}";
}

TEST_CASE("a minimal job spec parses with documented defaults", "[unit][config]") {
  auto got = ParseJobSpec(kGood, "job.json");
  REQUIRE(got.ok());
  CHECK(got->model.name == "mlp");
  CHECK(got->epochs == 2);
  CHECK(got->optimizer.type == OptimizerSpec::Type::kSgd);
  CHECK(got->optimizer.learning_rate == 0.5);
  CHECK(got->update.mode == UpdateSpec::Mode::kAsync);
  CHECK(got->update.scale_stale);
  CHECK_FALSE(got->update.overlap);
  CHECK(got->placement == Placement::kBalanced);
  CHECK(got->seed == 1);
  CHECK(got->device == "cpu");
  CHECK(got->threads == 1);
  CHECK(got->shuffle);
}

TEST_CASE("allreduce's bucket_kb defaults to 128 and takes 0 (one bucket)", "[unit][config]") {
  auto def = ParseJobSpec(With(R"("update": {"mode": "allreduce"})"), "job.json");
  REQUIRE(def.ok());
  CHECK(def->update.bucket_kb == 128);
  auto zero = ParseJobSpec(With(R"("update": {"mode": "allreduce", "bucket_kb": 0})"), "job.json");
  REQUIRE(zero.ok());
  CHECK(zero->update.bucket_kb == 0);
}

TEST_CASE("allreduce's hierarchical is \"auto\" by default, takes true and false, and names the field for anything else", "[unit][config]") {
  auto def = ParseJobSpec(With(R"("update": {"mode": "allreduce"})"), "job.json");
  REQUIRE(def.ok());
  CHECK(def->update.hierarchical == UpdateSpec::Hierarchical::kAuto);
  auto on = ParseJobSpec(With(R"("update": {"mode": "allreduce", "hierarchical": true})"), "job.json");
  REQUIRE(on.ok());
  CHECK(on->update.hierarchical == UpdateSpec::Hierarchical::kOn);
  auto off = ParseJobSpec(With(R"("update": {"mode": "allreduce", "hierarchical": false})"), "job.json");
  REQUIRE(off.ok());
  CHECK(off->update.hierarchical == UpdateSpec::Hierarchical::kOff);
  auto aut = ParseJobSpec(With(R"("update": {"mode": "allreduce", "hierarchical": "auto"})"), "job.json");
  REQUIRE(aut.ok());
  CHECK(aut->update.hierarchical == UpdateSpec::Hierarchical::kAuto);
  for (const char* bad : {R"("yes")", "1", "null"}) {
    auto got = ParseJobSpec(With(std::string(R"("update": {"mode": "allreduce", "hierarchical": )") + bad + "}"), "job.json");
    REQUIRE_FALSE(got.ok());
    CHECK(got.status().message().find("update.hierarchical") != std::string::npos);
    CHECK(got.status().message().find("expected \"auto\", true or false") != std::string::npos);
  }
}

TEST_CASE("update.compression: a method name or an object with its ratio or rank; none by default", "[unit][config]") {
  using Method = CompressionSpec::Method;
  auto def = ParseJobSpec(With(R"("update": {"mode": "allreduce"})"), "job.json");
  REQUIRE(def.ok());
  CHECK(def->update.compression.method == Method::kNone);
  auto fp16 = ParseJobSpec(With(R"("update": {"mode": "sync", "compression": "fp16"})"), "job.json");
  REQUIRE(fp16.ok());
  CHECK(fp16->update.compression.method == Method::kFp16);
  auto topk = ParseJobSpec(With(R"("update": {"mode": "async", "compression": {"method": "topk", "ratio": 0.05}})"), "job.json");
  REQUIRE(topk.ok());
  CHECK(topk->update.compression.method == Method::kTopK);
  CHECK(topk->update.compression.ratio == 0.05);
  CHECK(topk->update.compression.warmup_epochs == 1);  // Deep Gradient Compression's warm-up, by default
  auto psgd = ParseJobSpec(With(R"("update": {"mode": "allreduce", "compression": {"method": "powersgd", "rank": 4}})"), "job.json");
  REQUIRE(psgd.ok());
  CHECK(psgd->update.compression.method == Method::kPowerSgd);
  CHECK(psgd->update.compression.rank == 4);
  CHECK(ErrorOf(With(R"("update": {"mode": "allreduce", "compression": "int8"})")) ==
        "job.json: update.compression: unknown method \"int8\" (expected \"none\", \"fp16\", \"bf16\", {\"method\": \"topk\", "
        "\"ratio\": R} or {\"method\": \"powersgd\", \"rank\": N})");
  CHECK(ErrorOf(With(R"("update": {"mode": "allreduce", "compression": {"method": "topk", "ratio": 0}})")) ==
        "job.json: update.compression.ratio: expected a number in (0, 1], got 0");
  auto warm = ParseJobSpec(With(R"("update": {"mode": "allreduce", "compression": {"method": "topk", "warmup_epochs": 0.5}})"), "job.json");
  REQUIRE(warm.ok());
  CHECK(warm->update.compression.warmup_epochs == 0.5);
  CHECK(ErrorOf(With(R"("update": {"mode": "allreduce", "compression": {"method": "topk", "warmup_epochs": -1}})")) ==
        "job.json: update.compression.warmup_epochs: expected a number in [0, 1000], got -1");
  CHECK(ErrorOf(With(R"("update": {"mode": "allreduce", "compression": {"method": "powersgd", "rank": 0}})")) ==
        "job.json: update.compression.rank: expected an integer in [1, 1024], got 0");
  CHECK(ErrorOf(With(R"("update": {"mode": "allreduce", "compression": {"method": "fp16", "rank": 2}})")) ==
        "job.json: update.compression.rank: unknown field (expected one of: method)");
  CHECK(ErrorOf(With(R"("update": {"mode": "sync", "compression": {"method": "powersgd"}})")) ==
        "job.json: update.compression.method: powersgd needs \"mode\": \"allreduce\" (its two all-reduces per matrix have no ps "
        "counterpart in this version)");
  CHECK(ErrorOf(With(R"("update": {"mode": "allreduce", "compression": "fp16"}, "elastic": {"min_workers": 1, "max_workers": 2})")) ==
        "job.json: update.compression: \"fp16\" is not available with elastic in this version (leave update.compression out)");
}

TEST_CASE("the canonical job spec of the design parses whole", "[unit][config]") {
  auto got = ParseJobSpec(R"({ "model": "mlp", "data": "data/mnist", "epochs": 5, "batch_size": 100,
    "optimizer": {"type": "adam", "learning_rate": 0.001, "beta1": 0.8, "epsilon": 1e-8},
    "update": {"mode": "sync", "replicas_to_aggregate": 2, "total_num_replicas": 3},
    "placement": "round_robin", "seed": 7, "log_every_steps": 50, "device": "cuda:1", "gpu_memory_fraction": 0.5,
    "checkpoint": {"dir": "ckpt", "every_steps": 500, "keep": 3} })", "job.json");
  REQUIRE(got.ok());
  CHECK(got->optimizer.type == OptimizerSpec::Type::kAdam);
  CHECK(got->optimizer.beta1 == 0.8);
  CHECK(got->optimizer.beta2 == 0.999);
  CHECK(got->optimizer.epsilon == 1e-8);
  CHECK(got->update.mode == UpdateSpec::Mode::kSync);
  CHECK(got->update.replicas_to_aggregate == 2);
  CHECK(got->update.total_num_replicas == 3);
  CHECK(got->placement == Placement::kRoundRobin);
  auto by_host = ParseJobSpec(R"({"model": "mlp", "data": "d", "epochs": 1, "batch_size": 1, "placement": "by_host",
      "optimizer": {"type": "sgd", "learning_rate": 1}})", "job.json");
  REQUIRE(by_host.ok());
  CHECK(by_host->placement == Placement::kByHost);
  CHECK(got->cuda_device == 1);
  CHECK(got->checkpoint.dir == "ckpt");
  CHECK(got->checkpoint.every_steps == 500);
}

TEST_CASE("an unknown field is an error that lists the known ones", "[unit][config]") {
  CHECK(ErrorOf(With(R"("learning_rate": 1)")) ==
        "job.json: learning_rate: unknown field (expected one of: batch_size, checkpoint, data, device, early_stopping, elastic, ensemble, epochs, evaluation, export, "
        "gpu_memory_fraction, log_every_steps, model, model_parallel, optimizer, placement, seed, shuffle, stop_at_accuracy, summaries, threads, "
        "update, validation_split)");
}

TEST_CASE("summaries: defaults, every field, and each bad one named by its JSON path", "[unit][config]") {
  auto def = ParseJobSpec(kGood, "job.json");
  REQUIRE(def.ok());
  CHECK(def->summaries.dir.empty());
  CHECK(def->summaries.every_steps == 100);
  CHECK(def->summaries.histograms_every_epochs == 0);
  auto some = ParseJobSpec(With(R"("summaries": {"every_steps": 20})"), "job.json");
  REQUIRE(some.ok());
  CHECK(some->summaries.dir.empty());  // tfd's --summaries-dir may still set it
  CHECK(some->summaries.every_steps == 20);
  auto all = ParseJobSpec(With(R"("summaries": {"dir": "tb", "every_steps": 5, "histograms_every_epochs": 2})"), "job.json");
  REQUIRE(all.ok());
  CHECK(all->summaries.dir == "tb");
  CHECK(all->summaries.every_steps == 5);
  CHECK(all->summaries.histograms_every_epochs == 2);
  CHECK(ErrorOf(With(R"("summaries": "tb")")) == "job.json: summaries: expected an object, got \"tb\"");
  CHECK(ErrorOf(With(R"("summaries": {"dir": ""})")) ==
        "job.json: summaries.dir: must not be empty (leave it out for no summaries, or let tfd's --summaries-dir set it)");
  CHECK(ErrorOf(With(R"("summaries": {"dir": 3})")) == "job.json: summaries.dir: expected a string, got 3");
  CHECK(ErrorOf(With(R"("summaries": {"every_steps": 0})")) == "job.json: summaries.every_steps: expected an integer in [1, 1073741824], got 0");
  CHECK(ErrorOf(With(R"("summaries": {"histograms_every_epochs": -1})")) ==
        "job.json: summaries.histograms_every_epochs: expected an integer in [0, 100000], got -1");
  CHECK(ErrorOf(With(R"("summaries": {"dir": "tb", "every": 5})")) ==
        "job.json: summaries.every: unknown field (expected one of: dir, every_steps, histograms_every_epochs)");
}

TEST_CASE("a layer list parses with activations and initializers", "[unit][config]") {
  auto ok = ParseJobSpec(R"({"model": {"layers": [{"type": "conv2d", "filters": 8, "kernel_size": 3, "activation": "relu"},
      {"type": "max_pool2d", "pool_size": 2}, {"type": "flatten"},
      {"type": "dense", "units": 10, "init": {"type": "normal", "stddev": 0.1}}]},
      "data": "d", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 0.1}})", "job.json");
  REQUIRE(ok.ok());
  REQUIRE(ok->model.layers.size() == 4);
  CHECK(ok->model.layers[0].kind == LayerSpec::Kind::kConv2D);
  CHECK(ok->model.layers[0].activation == Activation::kRelu);
  CHECK(ok->model.layers[3].init.kind == InitKind::kNormal);
  CHECK(ok->model.layers[3].init.stddev == 0.1);
}

// kGood with the layer list `layers` as its model.
std::string WithLayers(const std::string& layers) {
  return R"({"model": {"layers": [)" + layers + R"(]}, "data": "d", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 1}})";
}

TEST_CASE("conv2d and pooling take Keras' strides and padding, with Keras' defaults", "[unit][config]") {
  auto ok = ParseJobSpec(WithLayers(R"({"type": "conv2d", "filters": 8, "kernel_size": 3, "strides": 2, "padding": "same", "activation": "gelu"},
      {"type": "max_pool2d", "pool_size": 3}, {"type": "avg_pool2d", "pool_size": 2, "strides": 1, "padding": "same"},
      {"type": "conv2d", "filters": 4, "kernel_size": 1, "activation": "relu6"}, {"type": "global_avg_pool2d"},
      {"type": "dense", "units": 10})"), "job.json");
  INFO(ok.status().ToString());
  REQUIRE(ok.ok());
  const std::vector<LayerSpec>& l = ok->model.layers;
  REQUIRE(l.size() == 6);
  CHECK((l[0].stride() == 2 && l[0].padding == Padding::kSame && l[0].activation == Activation::kGelu));
  CHECK((l[1].kind == LayerSpec::Kind::kMaxPool2D && l[1].stride() == 3 && l[1].padding == Padding::kValid));  // strides = pool_size
  CHECK((l[2].kind == LayerSpec::Kind::kAvgPool2D && l[2].stride() == 1 && l[2].padding == Padding::kSame));
  CHECK((l[3].stride() == 1 && l[3].padding == Padding::kValid && l[3].activation == Activation::kRelu6));
  CHECK(l[4].kind == LayerSpec::Kind::kGlobalAvgPool2D);
}

TEST_CASE("bad strides, padding and pooling fields exit 2 naming model.layers[i].field", "[unit][config]") {
  CHECK(ErrorOf(WithLayers(R"({"type": "conv2d", "filters": 2, "kernel_size": 3, "strides": 0})")) ==
        "job.json: model.layers[0].strides: expected an integer in [1, 64], got 0");
  CHECK(ErrorOf(WithLayers(R"({"type": "dense", "units": 3}, {"type": "max_pool2d", "pool_size": 2, "padding": "full"})")) ==
        "job.json: model.layers[1].padding: unknown padding \"full\" (expected valid or same)");
  CHECK(ErrorOf(WithLayers(R"({"type": "avg_pool2d", "pool_size": 2, "strides": [2, 2]})")) ==
        "job.json: model.layers[0].strides: expected an integer in [1, 64], got an array");
  CHECK(ErrorOf(WithLayers(R"({"type": "avg_pool2d", "strides": 2})")) == "job.json: model.layers[0].pool_size: missing (expected an integer)");
  CHECK(ErrorOf(WithLayers(R"({"type": "global_avg_pool2d", "pool_size": 2})")) ==
        "job.json: model.layers[0].pool_size: unknown field (expected one of: type)");
  CHECK(ErrorOf(WithLayers(R"({"type": "max_pool2d", "pool_size": 2, "activation": "relu"})")) ==
        "job.json: model.layers[0].activation: unknown field (expected one of: padding, pool_size, strides, type)");
  // The CUDA backend has kernels for every layer kind (kernels.h), a synchronised batch norm's too:
  // a cuda device refuses none of them at load.
  for (const char* layers : {R"({"type": "conv2d", "filters": 2, "kernel_size": 3}, {"type": "avg_pool2d", "pool_size": 2})",
                             R"({"type": "conv2d", "filters": 2, "kernel_size": 3, "strides": 2, "padding": "same"})",
                             R"({"type": "dense", "units": 5, "activation": "relu6"})",
                             R"({"type": "depthwise_conv2d", "kernel_size": 3}, {"type": "batch_norm"}, {"type": "layer_norm"})",
                             R"({"type": "dense", "units": 4}, {"type": "batch_norm", "sync": true})"}) {
    INFO(layers);
    CHECK(ParseJobSpec(fmt::format(R"({{"model": {{"layers": [{}, {{"type": "dense", "units": 10}}]}}, "data": "d", "epochs": 1,
        "batch_size": 1, "optimizer": {{"type": "sgd", "learning_rate": 1}}, "device": "cuda:0"}})", layers), "job.json").ok());
  }
}

TEST_CASE("batch_norm and layer_norm parse with Keras' defaults; bad fields exit 2 naming model.layers[i].field", "[unit][config][norm]") {
  auto ok = ParseJobSpec(WithLayers(R"({"type": "dense", "units": 4}, {"type": "batch_norm"},
      {"type": "batch_norm", "momentum": 0.9, "epsilon": 0.01, "center": false, "sync": true}, {"type": "layer_norm", "scale": false},
      {"type": "dense", "units": 10})"), "job.json");
  REQUIRE(ok.ok());
  const std::vector<LayerSpec>& l = ok->model.layers;
  CHECK((l[1].kind == LayerSpec::Kind::kBatchNorm && l[1].momentum == 0.99 && l[1].epsilon == 1e-3 && l[1].center && l[1].scale && !l[1].sync));
  CHECK((l[2].momentum == 0.9 && l[2].epsilon == 0.01 && !l[2].center && l[2].sync));
  CHECK((l[3].kind == LayerSpec::Kind::kLayerNorm && l[3].center && !l[3].scale));
  CHECK(ErrorOf(WithLayers(R"({"type": "batch_norm", "momentum": 1})")) ==
        "job.json: model.layers[0].momentum: must be below 1 (the moving statistics would never move)");
  CHECK(ErrorOf(WithLayers(R"({"type": "batch_norm", "epsilon": 0})")).starts_with("job.json: model.layers[0].epsilon: expected a number in (0, 1]"));
  CHECK(ErrorOf(WithLayers(R"({"type": "batch_norm", "sync": "yes"})")).starts_with("job.json: model.layers[0].sync: "));
  CHECK(ErrorOf(WithLayers(R"({"type": "layer_norm", "momentum": 0.9})")) ==
        "job.json: model.layers[0].momentum: unknown field (expected one of: center, epsilon, scale, type)");
}

TEST_CASE("job spec errors name the file and the JSON path", "[unit][config]") {
  CHECK(ErrorOf("{") == "job.json: not valid JSON");
  CHECK(ErrorOf("[]") == "job.json: (top level): expected an object, got an array");
  CHECK(ErrorOf(R"({"model": "mlp", "data": "d", "epochs": 1, "batch_size": -5, "optimizer": {"type": "sgd", "learning_rate": 1}})") ==
        "job.json: batch_size: expected an integer in [1, 65536], got -5");
  CHECK(ErrorOf(R"({"model": "resnet", "data": "d", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 1}})") ==
        "job.json: model: unknown model \"resnet\" (expected softmax, mlp, dnn, cnn or {\"layers\": [...]})");
  CHECK(ErrorOf(R"({"model": "mlp", "data": "d", "epochs": 1, "batch_size": 1, "optimizer": {"type": "rmsprop", "learning_rate": 1}})") ==
        "job.json: optimizer.type: unknown optimizer \"rmsprop\" (expected sgd, momentum or adam)");
  CHECK(ErrorOf(R"({"model": "mlp", "data": "d", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rte": 1}})") ==
        "job.json: optimizer.learning_rate: missing (expected a number)");
  CHECK(ErrorOf(R"({"model": "mlp", "data": "d", "epochs": 1, "batch_size": 1, "optimizer": {"type": "momentum", "learning_rate": 1}})") ==
        "job.json: optimizer.momentum: missing (expected a number)");
  CHECK(ErrorOf(R"({"model": "mlp", "data": "d", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 0}})") ==
        "job.json: optimizer.learning_rate: expected a number in (0, 1000000], got 0");
  CHECK(ErrorOf(R"({"model": "mlp", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 1}})") ==
        "job.json: data: missing (expected a folder with the MNIST IDX files, or an object naming your data's files)");
  CHECK(ErrorOf(R"({"model": "mlp", "data": "d", "epochs": 1.5, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 1}})") ==
        "job.json: epochs: expected an integer in [1, 100000], got 1.5");
  CHECK(ErrorOf(With(R"("update": {"mode": "sync", "replicas_to_aggregate": 3, "total_num_replicas": 2})")) ==
        "job.json: update.replicas_to_aggregate: 3 is more than total_num_replicas 2");
  CHECK(ErrorOf(With(R"("update": {"mode": "async", "staleness": "ignore"})")) ==
        "job.json: update.staleness: unknown staleness rule \"ignore\" (expected scale or none)");
  CHECK(ErrorOf(With(R"("update": {"mode": "sync", "overlap": true})")) ==
        "job.json: update.overlap: unknown field (expected one of: compression, min_replicas, mode, on_worker_loss, replicas_to_aggregate, "
        "total_num_replicas)");
  CHECK(ErrorOf(With(R"("update": {"mode": "sync", "on_worker_loss": "retry"})")) ==
        "job.json: update.on_worker_loss: unknown policy \"retry\" (expected fail, wait or shrink)");
  CHECK(ErrorOf(With(R"("update": {"mode": "sync", "replicas_to_aggregate": 2, "min_replicas": 3})")) ==
        "job.json: update.min_replicas: 3 is more than replicas_to_aggregate 2");
  CHECK(ErrorOf(With(R"("update": {"mode": "sync", "min_replicas": 0})")) ==
        "job.json: update.min_replicas: expected an integer in [1, 65536], got 0");
  CHECK(ErrorOf(With(R"("update": {"mode": "allreduce", "bucket_kb": -1})")) ==
        "job.json: update.bucket_kb: expected an integer in [0, 1048576], got -1");
  CHECK(ErrorOf(With(R"("update": {"mode": "async", "bucket_kb": 64})")) ==
        "job.json: update.bucket_kb: unknown field (expected one of: compression, mode, overlap, staleness)");
  CHECK(ErrorOf(With(R"("update": {"mode": "ring"})")) ==
        "job.json: update.mode: unknown mode \"ring\" (expected async, sync or allreduce)");
  CHECK(ErrorOf(With(R"("device": "gpu0")")) == "job.json: device: expected \"cpu\" or \"cuda:N\", got \"gpu0\"");
  CHECK(ErrorOf(With(R"("placement": "random")")) ==
        "job.json: placement: unknown placement \"random\" (expected balanced, round_robin, greedy or by_host)");
  CHECK(ErrorOf(With(R"("checkpoint": {"every_steps": 5})")) == "job.json: checkpoint.dir: missing (expected a string)");
  CHECK(ErrorOf(R"({"model": {"layers": [{"type": "dense", "units": 0}]}, "data": "d", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 1}})") ==
        "job.json: model.layers[0].units: expected an integer in [1, 65536], got 0");
  CHECK(ErrorOf(R"({"model": {"layers": [{"type": "dense", "units": 10, "activation": "swish"}]}, "data": "d", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 1}})") ==
        "job.json: model.layers[0].activation: unknown activation \"swish\" (expected none, relu, relu6, sigmoid, elu, tanh or gelu)");
  CHECK(ErrorOf(R"({"model": {"layers": [{"type": "lstm"}]}, "data": "d", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 1}})") ==
        "job.json: model.layers[0].type: unknown layer type \"lstm\" (expected dense, conv2d, depthwise_conv2d, max_pool2d, avg_pool2d, "
        "global_avg_pool2d, batch_norm, layer_norm, residual, embedding, one_hot, flatten or dropout)");
  CHECK(ErrorOf(R"({"model": {"layers": []}, "data": "d", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 1}})") ==
        "job.json: model.layers: expected a non-empty array of layers (or \"name\": one of softmax, mlp, dnn, cnn)");
  CHECK(ErrorOf(R"({"model": {"name": "mlp", "init": "xavier"}, "data": "d", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 1}})") ==
        "job.json: model.init: unknown initializer \"xavier\" (expected zeros, normal, truncated_normal, glorot_uniform or he_normal)");
}

TEST_CASE("evaluation is chief by default, and evaluator or none on request", "[unit][config][evaluator]") {
  auto chief = ParseJobSpec(kGood, "job.json");
  REQUIRE(chief.ok());
  CHECK(chief->evaluation == Evaluation::kChief);
  auto none = ParseJobSpec(With(R"("evaluation": "none")"), "job.json");
  REQUIRE(none.ok());
  CHECK(none->evaluation == Evaluation::kNone);
  auto evaluator = ParseJobSpec(With(R"("evaluation": "evaluator", "checkpoint": {"dir": "ck", "every_secs": 5})"), "job.json");
  REQUIRE(evaluator.ok());
  CHECK(evaluator->evaluation == Evaluation::kEvaluator);
  CHECK(EvaluationName(evaluator->evaluation) == "evaluator");
}

TEST_CASE("evaluation errors name the field: a typo, no checkpoints, early stopping", "[unit][config][evaluator]") {
  CHECK(ErrorOf(With(R"("evaluation": "worker")")) ==
        "job.json: evaluation: unknown evaluation \"worker\" (expected chief, evaluator or none)");
  CHECK(ErrorOf(With(R"("evaluation": "evaluator")")) ==
        "job.json: evaluation: \"evaluator\" needs checkpoints (the evaluator reads the chief's): set checkpoint.dir");
  // Allreduce writes checkpoints (the ring's rank 0): an evaluator has them to read.
  CHECK(ParseJobSpec(With(R"("evaluation": "evaluator", "checkpoint": {"dir": "ck"}, "update": {"mode": "allreduce"})"), "job.json").ok());
  CHECK(ErrorOf(With(R"("evaluation": "none", "validation_split": 100, "stop_at_accuracy": 0.9)")) ==
        "job.json: evaluation: \"none\" with stop_at_accuracy: the chief decides to stop on its own per-epoch metrics, so early "
        "stopping needs \"evaluation\": \"chief\"");
  CHECK(ErrorOf(With(R"("evaluation": "evaluator", "checkpoint": {"dir": "ck"}, "early_stopping": {"monitor": "loss"})")) ==
        "job.json: evaluation: \"evaluator\" with early_stopping: the chief decides to stop on its own per-epoch metrics, so early "
        "stopping needs \"evaluation\": \"chief\"");
  CHECK(ErrorOf(With(R"("evaluation": 1)")) == "job.json: evaluation: expected a string, got 1");
}

TEST_CASE("LoadJobSpec names a job file it cannot open", "[unit][config]") {
  auto got = LoadJobSpec("/nonexistent/job.json");
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kNotFound);
  CHECK(got.status().message() == "/nonexistent/job.json: cannot open the job file");
}

TEST_CASE("elastic: min_workers and max_workers, both required, min <= max", "[unit][config]") {
  auto ok = ParseJobSpec(With(R"("elastic": {"min_workers": 2, "max_workers": 8})"), "job.json");
  REQUIRE(ok.ok());
  CHECK(ok->elastic.enabled());
  CHECK(ok->elastic.min_workers == 2);
  CHECK(ok->elastic.max_workers == 8);
  CHECK(ok->elastic.commit_every_steps == 10);
  auto every = ParseJobSpec(With(R"("elastic": {"min_workers": 2, "max_workers": 8, "commit_every_steps": 25})"), "job.json");
  REQUIRE(every.ok());
  CHECK(every->elastic.commit_every_steps == 25);
  CHECK(ErrorOf(With(R"("elastic": {"min_workers": 1, "max_workers": 2, "commit_every_steps": 0})")).starts_with(
      "job.json: elastic.commit_every_steps: "));
  CHECK(!ParseJobSpec(With(R"("seed": 3)"), "job.json")->elastic.enabled());
  CHECK(ErrorOf(With(R"("elastic": {"min_workers": 3, "max_workers": 2})")) == "job.json: elastic.max_workers: 2 is less than min_workers 3");
  CHECK(ErrorOf(With(R"("elastic": {"min_workers": 1})")) == "job.json: elastic.max_workers: missing (expected an integer)");
}

}  // namespace
}  // namespace tfd::config
