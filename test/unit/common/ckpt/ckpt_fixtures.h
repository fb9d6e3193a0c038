#pragma once
// What the checkpoint tests share: a small checkpoint of three variables with Adam's slots, a
// field-by-field comparison, and the offsets of a file's records.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "common/ckpt/checkpoint.h"
#include "common/ckpt/format.h"

namespace tfd::ckpt::fixtures {

// Step `step`, 2 workers, Adam; variables dense/kernel {3, 4}, dense/bias {5}, out/kernel {7}.
inline Checkpoint MakeCheckpoint(std::uint64_t step = 100) {
  Checkpoint c;
  c.global_step = step;
  c.num_workers = 2;
  c.optimizer.spec.type = config::OptimizerSpec::Type::kAdam;
  c.optimizer.spec.learning_rate = 0.001;
  c.optimizer.updates = static_cast<std::int64_t>(step);
  c.optimizer.slot_names = {"m", "v"};
  c.cursors = {{0, 1, 0, 10}, {1, 1, 0, 7}};
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> vars = {
      {"dense/kernel", {3, 4}}, {"dense/bias", {5}}, {"out/kernel", {7}}};
  float x = 0.5f + static_cast<float>(step);
  for (const auto& [name, shape] : vars) {
    NamedTensor t;
    t.name = name;
    t.shape = shape;
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    for (std::int64_t i = 0; i < n; ++i) t.values.push_back(x += 1.0f);
    for (const char* s : {"m", "v"}) {
      Slot slot{s, {}};
      for (std::int64_t i = 0; i < n; ++i) slot.values.push_back(x += 0.25f);
      t.slots.push_back(std::move(slot));
    }
    c.tensors.push_back(std::move(t));
  }
  return c;
}

inline void RequireSame(const Checkpoint& a, const Checkpoint& b) {
  REQUIRE(a.global_step == b.global_step);
  REQUIRE(a.num_workers == b.num_workers);
  REQUIRE(a.optimizer.spec.type == b.optimizer.spec.type);
  REQUIRE(a.optimizer.spec.learning_rate == b.optimizer.spec.learning_rate);
  REQUIRE(a.optimizer.updates == b.optimizer.updates);
  REQUIRE(a.optimizer.slot_names == b.optimizer.slot_names);
  REQUIRE(a.model_card == b.model_card);
  REQUIRE(a.early_stopping == b.early_stopping);
  REQUIRE(a.feedback == b.feedback);
  REQUIRE(a.cursors.size() == b.cursors.size());
  for (std::size_t i = 0; i < a.cursors.size(); ++i) {
    CHECK(a.cursors[i].rank == b.cursors[i].rank);
    CHECK(a.cursors[i].epoch == b.cursors[i].epoch);
    CHECK(a.cursors[i].base == b.cursors[i].base);
    CHECK(a.cursors[i].next == b.cursors[i].next);
  }
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    CHECK(a.tensors[i].name == b.tensors[i].name);
    CHECK(a.tensors[i].shape == b.tensors[i].shape);
    CHECK(a.tensors[i].values == b.tensors[i].values);
    REQUIRE(a.tensors[i].slots.size() == b.tensors[i].slots.size());
    for (std::size_t k = 0; k < a.tensors[i].slots.size(); ++k) {
      CHECK(a.tensors[i].slots[k].name == b.tensors[i].slots[k].name);
      CHECK(a.tensors[i].slots[k].values == b.tensors[i].slots[k].values);
    }
  }
}

inline std::vector<std::byte> Bytes(const Checkpoint& c) {
  auto b = Serialize(c);
  REQUIRE(b.ok());
  return *b;
}

// Offsets of each record's first byte, then the file size.
inline std::vector<std::size_t> RecordStarts(const std::vector<std::byte>& b) {
  std::vector<std::size_t> starts;
  std::size_t pos = 8;
  while (pos < b.size()) {
    starts.push_back(pos);
    std::uint32_t len = 0;
    std::memcpy(&len, b.data() + pos + 4, 4);
    pos += 8 + len + 4;
  }
  starts.push_back(b.size());
  return starts;
}

}  // namespace tfd::ckpt::fixtures
