// The chief's end-of-epoch early-stopping decision, validation_split and the stop flags on the
// wire (DONE from the chief, PUSH_ACK to the others).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "common/config/job.h"
#include "common/data/dataset.h"
#include "common/wire/messages.h"
#include "daemon/train/early_stopping.h"

namespace tfd::train {
namespace {

config::JobSpec WithStopping(config::EarlyStoppingSpec::Monitor monitor, int patience, double min_delta) {
  config::JobSpec job;
  job.validation_count = 10;
  job.early_stopping = {monitor, patience, min_delta};
  return job;
}

TEST_CASE("early stopping waits `patience` epochs without an improvement over min_delta", "[unit][early_stopping]") {
  EarlyStopper s(WithStopping(config::EarlyStoppingSpec::Monitor::kValAccuracy, 2, 0.001));
  const auto acc = [](double a) { return EpochMetrics{.val_accuracy = a}; };
  CHECK_FALSE(s.Update(1, acc(0.90)).has_value());
  CHECK_FALSE(s.Update(2, acc(0.95)).has_value());   // best 0.95
  CHECK_FALSE(s.Update(3, acc(0.9505)).has_value());  // +0.0005 is no improvement: wait 1
  CHECK_FALSE(s.Update(4, acc(0.9600)).has_value());  // improves: wait 0, best 0.96 at 4
  CHECK_FALSE(s.Update(5, acc(0.9601)).has_value());  // wait 1
  const auto why = s.Update(6, acc(0.94));            // wait 2 = patience
  REQUIRE(why.has_value());
  CHECK(*why == "val_accuracy did not improve by 0.001 for 2 epochs (best 0.9600 at epoch 4)");
}

TEST_CASE("a loss improves downwards; patience 0 stops at the first epoch that does not improve", "[unit][early_stopping]") {
  EarlyStopper s(WithStopping(config::EarlyStoppingSpec::Monitor::kLoss, 0, 0));
  CHECK_FALSE(s.Update(1, {.loss = 0.5}).has_value());
  CHECK_FALSE(s.Update(2, {.loss = 0.4}).has_value());
  const auto why = s.Update(3, {.loss = 0.4});
  REQUIRE(why.has_value());
  CHECK(*why == "loss did not improve by 0 for 1 epoch (best 0.4000 at epoch 2)");
}

TEST_CASE("a restored early stopper goes on counting its patience where the saved one was", "[unit][early_stopping]") {
  const config::JobSpec job = WithStopping(config::EarlyStoppingSpec::Monitor::kValLoss, 3, 0.01);
  EarlyStopper first(job);
  CHECK_FALSE(first.Update(1, {.val_loss = 0.5}).has_value());  // best 0.5 at 1
  CHECK_FALSE(first.Update(2, {.val_loss = 0.6}).has_value());  // wait 1
  CHECK_FALSE(first.Update(3, {.val_loss = 0.7}).has_value());  // wait 2
  const ckpt::EarlyStopping saved = first.State();
  CHECK(saved == ckpt::EarlyStopping{.epoch = 3, .have_best = true, .best = 0.5, .best_epoch = 1, .wait = 2});
  EarlyStopper resumed(job);
  resumed.Restore(saved);
  const auto why = resumed.Update(4, {.val_loss = 0.8});  // wait 3 = patience: as the undisturbed one stops
  REQUIRE(why.has_value());
  CHECK(*why == "val_loss did not improve by 0.01 for 3 epochs (best 0.5000 at epoch 1)");
  CHECK(first.Update(4, {.val_loss = 0.8}) == why);
  EarlyStopper afresh(job);  // what a restart did before: patience from zero
  CHECK_FALSE(afresh.Update(4, {.val_loss = 0.8}).has_value());
}

TEST_CASE("stop_at_accuracy watches val_accuracy", "[unit][early_stopping]") {
  config::JobSpec job;
  job.validation_fraction = 0.1;
  job.stop_at_accuracy = 0.98;
  EarlyStopper val(job);
  CHECK_FALSE(val.Update(1, {.val_accuracy = 0.97}).has_value());
  CHECK_FALSE(val.Update(2, {.loss = 0.01}).has_value());  // not measured: no stop
  const auto why = val.Update(3, {.val_accuracy = 0.9805});
  REQUIRE(why.has_value());
  CHECK(*why == "val_accuracy 0.9805 reached stop_at_accuracy 0.98 at epoch 3");
}

TEST_CASE("the job spec's early_stopping, stop_at_accuracy and validation_split, with their errors", "[unit][config][early_stopping]") {
  const std::string head = R"({"model": "mlp", "data": "d", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 1})";
  const auto error = [&](const std::string& extra) {
    auto r = config::ParseJobSpec(head + extra + "}", "job.json");
    return r.ok() ? std::string("ok") : r.status().message();
  };
  auto ok = config::ParseJobSpec(head + R"(, "validation_split": 0.1, "stop_at_accuracy": 0.985,
      "early_stopping": {"monitor": "val_loss", "patience": 3, "min_delta": 0.001}})", "job.json");
  REQUIRE(ok.ok());
  CHECK(ok->validation_fraction == 0.1);
  CHECK(ok->early_stopping.monitor == config::EarlyStoppingSpec::Monitor::kValLoss);
  CHECK(ok->early_stopping.patience == 3);
  CHECK(ok->stop_at_accuracy == 0.985);
  auto count = config::ParseJobSpec(head + R"(, "validation_split": 5000})", "job.json");
  REQUIRE(count.ok());
  CHECK(count->validation_count == 5000);
  CHECK(error(R"(, "validation_split": 1.5)") == "job.json: validation_split: expected a fraction in (0, 1) or a count of examples >= 1, got 1.5");
  CHECK(error(R"(, "validation_split": 0)") == "job.json: validation_split: expected a fraction in (0, 1) or a count of examples >= 1, got 0");
  CHECK(error(R"(, "early_stopping": {"monitor": "val_accuracy"})") ==
        "job.json: early_stopping.monitor: val_accuracy needs a validation set: set validation_split");
  CHECK(error(R"(, "early_stopping": {"monitor": "accuracy"})") ==
        "job.json: early_stopping.monitor: unknown metric \"accuracy\" (expected val_accuracy, val_loss or loss)");
  CHECK(error(R"(, "early_stopping": {"monitor": "loss", "patience": -1})") ==
        "job.json: early_stopping.patience: expected an integer in [0, 100000], got -1");
  CHECK(error(R"(, "early_stopping": {"monitor": "loss", "wait": 1})") ==
        "job.json: early_stopping.wait: unknown field (expected one of: min_delta, monitor, patience)");
  CHECK(error(R"(, "stop_at_accuracy": 0)") == "job.json: stop_at_accuracy: expected a number in (0, 1], got 0");
}

// Model selection never sees the test set: stopping on it would tune the epoch count on it.
TEST_CASE("early stopping on a test metric and stop_at_accuracy without a validation split are refused", "[unit][config][early_stopping]") {
  const std::string head = R"({"model": "mlp", "data": "d", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 1})";
  const auto error = [&](const std::string& extra) {
    auto r = config::ParseJobSpec(head + extra + "}", "job.json");
    return r.ok() ? std::string("ok") : r.status().message();
  };
  CHECK(error(R"(, "stop_at_accuracy": 0.985)") ==
        "job.json: stop_at_accuracy: needs a validation set: it stops on val_accuracy, never on the test set, which is reported, not tuned on: "
        "set validation_split (a fraction or a count of training examples, e.g. 5000 for MNIST)");
  CHECK(error(R"(, "validation_split": 5000, "stop_at_accuracy": 0.985)") == "ok");
  // Refused with a validation split too: the test set is never the thing watched.
  for (const char* split : {"", R"(, "validation_split": 0.1)"})
    CHECK(error(std::string(split) + R"(, "early_stopping": {"monitor": "test_accuracy", "patience": 2})") ==
          "job.json: early_stopping.monitor: \"test_accuracy\": early stopping never watches the test set, which is reported, not tuned on: "
          "set validation_split and monitor val_accuracy or val_loss");
  const std::string regression = R"(, "data": {"train": "a.csv", "test_split": 0.2, "task": "regression"})";
  const auto regression_error = [&](const std::string& extra) {
    auto r = config::ParseJobSpec(R"({"model": "mlp", "epochs": 1, "batch_size": 1, "optimizer": {"type": "sgd", "learning_rate": 1})" +
                                      regression + extra + "}", "job.json");
    return r.ok() ? std::string("ok") : r.status().message();
  };
  CHECK(regression_error(R"(, "validation_split": 0.1, "early_stopping": {"monitor": "test_mae"})") ==
        "job.json: early_stopping.monitor: \"test_mae\": early stopping never watches the test set, which is reported, not tuned on: "
        "set validation_split and monitor val_mae or val_loss");
  CHECK(regression_error(R"(, "validation_split": 0.1, "early_stopping": {"monitor": "val_mae"})") == "ok");
}

TEST_CASE("HoldOut moves the last examples of the training set into the validation set", "[unit][early_stopping]") {
  data::DataSplits d;
  d.train.size = 5;
  d.train.height = d.train.width = 1;
  d.train.features = {10, 11, 12, 13, 14};
  d.train.labels = {0, 1, 2, 3, 4};
  data::HoldOut(&d, 2);
  CHECK(d.train.size == 3);
  CHECK(d.train.features == std::vector<std::uint8_t>{10, 11, 12});
  CHECK(d.validation.size == 2);
  CHECK(d.validation.features == std::vector<std::uint8_t>{13, 14});
  CHECK(d.validation.labels == std::vector<ClassId>{3, 4});
  CHECK(d.validation.height == 1);
}

}  // namespace
}  // namespace tfd::train

namespace tfd::wire {
namespace {

template <typename M>
std::vector<std::byte> PayloadOf(const M& m) {
  OutFrame f = Encode(m);
  REQUIRE(f.Seal().ok());
  std::vector<std::byte> out = f.head;
  for (auto t : f.tail) out.insert(out.end(), t.begin(), t.end());
  return out;
}

TEST_CASE("DONE and PUSH_ACK carry the stop flag as one optional byte", "[unit][wire][early_stopping]") {
  CHECK(PayloadOf(Done{3, false}).size() == 4);  // as before early stopping existed
  auto stop = PayloadOf(Done{3, true});
  REQUIRE(stop.size() == 5);
  Done d;
  REQUIRE(Decode(stop, &d).ok());
  CHECK((d.worker == 3 && d.stop));
  REQUIRE(Decode(std::span(stop).first(4), &d).ok());
  CHECK_FALSE(d.stop);
  stop[4] = std::byte{0};  // false is never sent as a byte
  CHECK_FALSE(Decode(stop, &d).ok());
  CHECK(PayloadOf(PushAck{7, PushOutcome::kApplied, false}).size() == 9);
  auto ack = PayloadOf(PushAck{7, PushOutcome::kStale, true});
  PushAck a;
  REQUIRE(Decode(ack, &a).ok());
  CHECK((a.global_step == 7 && a.outcome == PushOutcome::kStale && a.stop));
  ack.push_back(std::byte{1});
  CHECK_FALSE(Decode(ack, &a).ok());
}

}  // namespace
}  // namespace tfd::wire
