#include <catch2/catch.hpp>

#include "common/wire/trial_messages.h"
#include "test/unit/common/wire/wire_fixtures.h"

namespace tfd::wire {
namespace {

using fixtures::Flatten;

template <typename M>
M RoundTrip(const OutFrame& f, MessageType type) {
  CHECK(f.header.type == type);
  std::vector<std::byte> p = Flatten(f);
  M got;
  REQUIRE(Decode(p, &got).ok());
  return got;
}

TEST_CASE("the coordinator's messages round-trip", "[unit][wire][sweep]") {
  CHECK(RoundTrip<TrialRequest>(Encode(TrialRequest{.worker = 7}), MessageType::kTrialRequest).worker == 7);
  TrialAssign a = RoundTrip<TrialAssign>(Encode(TrialAssign{.trial = 3, .attempt = 2, .job = R"({"model": "dnn"})"}), MessageType::kTrialAssign);
  CHECK(a.trial == 3);
  CHECK(a.attempt == 2);
  CHECK(a.job == R"({"model": "dnn"})");
  CHECK(RoundTrip<TrialAssign>(Encode(TrialAssign{}), MessageType::kTrialAssign).trial == kNoTrial);
  TrialEpoch e = RoundTrip<TrialEpoch>(Encode(TrialEpoch{.trial = 1, .epoch = 4, .metrics = {{"loss", 0.25}, {"test_accuracy", 0.9}}}),
                                       MessageType::kTrialEpoch);
  CHECK(e.epoch == 4);
  REQUIRE(e.metrics.size() == 2);
  CHECK(e.metrics[1].first == "test_accuracy");
  CHECK(e.metrics[1].second == 0.9);
  CHECK(RoundTrip<TrialControl>(Encode(TrialControl{.stop = true}), MessageType::kTrialControl).stop);
  TrialEnd end = RoundTrip<TrialEnd>(Encode(TrialEnd{.trial = 2, .ok = false, .stopped = false, .reason = "batch_size too large", .metrics = {}}),
                                     MessageType::kTrialEnd);
  CHECK_FALSE(end.ok);
  CHECK(end.reason == "batch_size too large");
}

TEST_CASE("the coordinator's messages refuse short, oversize and trailing bytes", "[unit][wire][sweep]") {
  std::vector<std::byte> p = Flatten(Encode(TrialAssign{.trial = 1, .attempt = 0, .job = "{}"}));
  TrialAssign a;
  std::vector<std::byte> shorter(p.begin(), p.end() - 1);
  CHECK(Decode(shorter, &a).code() == Code::kCorruption);
  std::vector<std::byte> longer = p;
  longer.push_back(std::byte{1});  // the optional predictions flag
  REQUIRE(Decode(longer, &a).ok());
  CHECK(a.predictions);
  longer.push_back(std::byte{0});
  CHECK(Decode(longer, &a).code() == Code::kCorruption);
  std::vector<std::byte> bad_flag = p;
  bad_flag.push_back(std::byte{2});
  CHECK(Decode(bad_flag, &a).code() == Code::kCorruption);
  std::vector<std::byte> huge = p;
  huge[8] = std::byte{0xff};  // job length beyond the bound and the payload
  huge[9] = std::byte{0xff};
  huge[10] = std::byte{0xff};
  CHECK(Decode(huge, &a).code() == Code::kCorruption);
  std::vector<std::byte> metrics = Flatten(Encode(TrialEpoch{.trial = 1, .epoch = 1, .metrics = {{"loss", 1}}}));
  metrics[8] = std::byte{kMaxTrialMetrics + 1};  // the metric count
  TrialEpoch e;
  CHECK(Decode(metrics, &e).code() == Code::kCorruption);
  std::vector<std::byte> control = Flatten(Encode(TrialControl{}));
  control[0] = std::byte{2};
  TrialControl c;
  CHECK(Decode(control, &c).code() == Code::kCorruption);
  TrialPredictions pred{.trial = 1, .epoch = 2, .classes = 3, .labels = {0, 2}, .probabilities = {0.5f, 0.25f, 0.25f, 0.1f, 0.1f, 0.8f}};
  TrialPredictions got;
  std::vector<std::byte> pp = Flatten(Encode(pred));
  REQUIRE(Decode(pp, &got).ok());
  CHECK(got.labels == pred.labels);
  CHECK(got.probabilities == pred.probabilities);
  pp.pop_back();
  CHECK(Decode(pp, &got).code() == Code::kCorruption);  // a float cut short
  std::vector<std::byte> no_classes = Flatten(Encode(TrialPredictions{.trial = 1, .epoch = 1, .classes = 0, .labels = {}, .probabilities = {}}));
  CHECK(Decode(no_classes, &got).code() == Code::kCorruption);
  // A regression member's outputs carry the targets in a trailer; a classification frame has none.
  TrialPredictions reg{.trial = 1, .epoch = 2, .classes = 1, .labels = {0, 0}, .probabilities = {1.5f, -2.0f}, .targets = {1.25f, -1.75f}};
  std::vector<std::byte> rp = Flatten(Encode(reg));
  REQUIRE(Decode(rp, &got).ok());
  CHECK(got.probabilities == reg.probabilities);
  CHECK(got.targets == reg.targets);
  REQUIRE(Decode(Flatten(Encode(pred)), &got).ok());
  CHECK(got.targets.empty());
  std::vector<std::byte> cut_target(rp.begin(), rp.end() - 1);
  CHECK(Decode(cut_target, &got).code() == Code::kCorruption);
  std::vector<std::byte> bad_trailer = rp;
  bad_trailer[bad_trailer.size() - 2 * sizeof(float) - 1] = std::byte{2};
  CHECK(Decode(bad_trailer, &got).code() == Code::kCorruption);
}

TEST_CASE("TRIAL_PREDICTIONS: labels are a byte each up to 256 classes, 2 bytes past; a label outside the classes is refused",
          "[unit][wire][sweep]") {
  constexpr std::size_t kHead = 4 * sizeof(std::uint32_t);  // trial, epoch, classes, rows
  TrialPredictions narrow{.trial = 1, .epoch = 1, .classes = 256, .labels = {0, 255}, .probabilities = std::vector<float>(2 * 256, 0.5f)};
  std::vector<std::byte> np = Flatten(Encode(narrow));
  CHECK(np.size() == kHead + 2 + 2 * 256 * sizeof(float));  // as before more classes were allowed
  CHECK(np[kHead + 1] == std::byte{255});
  TrialPredictions wide{.trial = 1, .epoch = 1, .classes = 300, .labels = {299, 0, 256}, .probabilities = std::vector<float>(3 * 300, 0.25f)};
  std::vector<std::byte> wp = Flatten(Encode(wide));
  CHECK(wp.size() == kHead + 3 * 2 + 3 * 300 * sizeof(float));
  TrialPredictions got;
  REQUIRE(Decode(wp, &got).ok());
  CHECK(got.labels == wide.labels);
  CHECK(got.probabilities == wide.probabilities);
  wp[kHead] = std::byte{0x2c}, wp[kHead + 1] = std::byte{0x01};  // label 300 of 300 classes
  CHECK(Decode(wp, &got).code() == Code::kCorruption);
  std::vector<std::byte> outside = Flatten(Encode(TrialPredictions{.trial = 1, .epoch = 1, .classes = 2, .labels = {2}, .probabilities = {0.5f, 0.5f}}));
  CHECK(Decode(outside, &got).code() == Code::kCorruption);
}

TEST_CASE("TRIAL_CHECKPOINT and a resuming TRIAL_ASSIGN round-trip; their lengths are bounded", "[unit][wire][sweep]") {
  const std::vector<std::byte> bytes = {std::byte{'T'}, std::byte{'F'}, std::byte{'D'}, std::byte{'K'}, std::byte{9}};
  TrialCheckpoint c = RoundTrip<TrialCheckpoint>(Encode(TrialCheckpoint{.trial = 4, .epoch = 7, .bytes = bytes}), MessageType::kTrialCheckpoint);
  CHECK(c.trial == 4);
  CHECK(c.epoch == 7);
  CHECK(c.bytes == bytes);
  std::vector<std::byte> p = Flatten(Encode(TrialCheckpoint{.trial = 4, .epoch = 7, .bytes = bytes}));
  std::vector<std::byte> cut(p.begin(), p.end() - 1);
  CHECK(Decode(cut, &c).code() == Code::kCorruption);
  std::vector<std::byte> trailing = p;
  trailing.push_back(std::byte{0});
  CHECK(Decode(trailing, &c).code() == Code::kCorruption);
  std::vector<std::byte> huge = p;
  huge[11] = std::byte{0x7f};  // a length over kMaxTrialCheckpointBytes (and the payload)
  CHECK(Decode(huge, &c).code() == Code::kCorruption);
  std::vector<std::byte> empty = Flatten(Encode(TrialCheckpoint{.trial = 1, .epoch = 1, .bytes = {}}));
  CHECK(Decode(empty, &c).code() == Code::kCorruption);  // a checkpoint is never empty

  TrialAssign a = RoundTrip<TrialAssign>(Encode(TrialAssign{.trial = 2, .attempt = 1, .job = "{}", .predictions = false, .resume_epoch = 3,
                                                            .checkpoint = bytes}),
                                         MessageType::kTrialAssign);
  CHECK_FALSE(a.predictions);
  CHECK(a.resume_epoch == 3);
  CHECK(a.checkpoint == bytes);
  TrialAssign fresh = RoundTrip<TrialAssign>(Encode(TrialAssign{.trial = 2, .attempt = 0, .job = "{}", .predictions = true}),
                                             MessageType::kTrialAssign);
  CHECK(fresh.predictions);
  CHECK(fresh.resume_epoch == 0);
  CHECK(fresh.checkpoint.empty());
  std::vector<std::byte> q = Flatten(Encode(TrialAssign{.trial = 2, .attempt = 1, .job = "{}", .predictions = true, .resume_epoch = 3,
                                                        .checkpoint = bytes}));
  q[4 + 4 + 4 + 2 + 1 + 4 + 3] = std::byte{0x10};  // the checkpoint length's high byte: beyond the bound
  CHECK(Decode(q, &a).code() == Code::kCorruption);
}

}  // namespace
}  // namespace tfd::wire
