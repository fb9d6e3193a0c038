// Writes golden seed inputs for the fuzz targets: one valid frame of every message (with the
// selector byte frame_fuzz.cc expects), valid checkpoints and TFRecord files. Usage: fuzz_make_seeds CORPUS_DIR
#include <stb/stb_image_write.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/ckpt/format.h"
#include "common/data/proto/example.pb.h"
#include "common/summary/record.h"
#include "common/wire/frame.h"
#include "common/wire/messages.h"

namespace {

using namespace tfd;
namespace fs = std::filesystem;

void Save(const fs::path& path, const std::vector<std::byte>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Appends `f` (sealed: length and CRC) to `bytes` as it travels on a socket.
void AppendFrame(std::vector<std::byte>& bytes, const wire::OutFrame& f) {
  std::array<std::byte, wire::kFrameHeaderBytes> raw{};
  wire::EncodeHeader(f.header, raw);
  bytes.insert(bytes.end(), raw.begin(), raw.end());
  bytes.insert(bytes.end(), f.head.begin(), f.head.end());
  for (auto t : f.tail) bytes.insert(bytes.end(), t.begin(), t.end());
}

// selector: index into frame_fuzz.cc's kDecodable (low 5 bits), payload limit 8 KiB (top 3 bits).
void SaveFrame(const fs::path& dir, const std::string& name, std::uint8_t index, wire::OutFrame f) {
  if (!f.Seal().ok()) return;
  f.header.request_id = 7;
  std::vector<std::byte> bytes{std::byte{static_cast<std::uint8_t>(0xe0 | index)}};
  AppendFrame(bytes, f);
  Save(dir / name, bytes);
}

// The bytes of `frames` as they travel on a ring link, after link_fuzz.cc's two selector bytes.
void SaveStream(const fs::path& path, std::uint8_t s0, std::uint8_t s1, std::vector<wire::OutFrame> frames) {
  std::vector<std::byte> bytes{std::byte{s0}, std::byte{s1}};
  for (auto& f : frames) {
    if (!f.Seal().ok()) return;
    AppendFrame(bytes, f);
  }
  Save(path, bytes);
}

}  // namespace

// TFRecords as tfrecord_fuzz.cc's two specs read them: float features with an int64 label; a raw
// 4x4 grayscale "image" with a bytes label; a PNG "image".
void SaveTfrecords(const fs::path& dir) {
  auto file = [](const std::vector<tensorflow::Example>& examples) {
    std::string framed;
    for (const auto& e : examples) summary::AppendRecord(e.SerializeAsString(), &framed);
    const auto* p = reinterpret_cast<const std::byte*>(framed.data());
    return std::vector<std::byte>(p, p + framed.size());
  };
  std::vector<tensorflow::Example> table(3), raw(2), png(2);
  std::string pixels(16, '\0');
  for (int i = 0; i < 16; ++i) pixels[static_cast<std::size_t>(i)] = static_cast<char>(16 * i);
  std::string encoded;
  stbi_write_png_to_func([](void* out, void* data, int n) { static_cast<std::string*>(out)->append(static_cast<const char*>(data), static_cast<std::size_t>(n)); },
                         &encoded, 4, 4, 1, pixels.data(), 4);
  for (int i = 0; i < 3; ++i) {
    auto& f = *table[static_cast<std::size_t>(i)].mutable_features()->mutable_feature();
    f["x"].mutable_float_list()->add_value(0.5f * static_cast<float>(i));
    f["x"].mutable_float_list()->add_value(-1.0f);
    f["label"].mutable_int64_list()->add_value(i % 2);
    if (i == 2) break;
    auto& r = *raw[static_cast<std::size_t>(i)].mutable_features()->mutable_feature();
    r["image"].mutable_bytes_list()->add_value(pixels);
    r["label"].mutable_bytes_list()->add_value(i == 0 ? "cat" : "dog");
    auto& p = *png[static_cast<std::size_t>(i)].mutable_features()->mutable_feature();
    p["image"].mutable_bytes_list()->add_value(encoded);
    p["label"].mutable_int64_list()->add_value(i);
  }
  Save(dir / "table.tfrecord", file(table));
  Save(dir / "raw-image.tfrecord", file(raw));
  Save(dir / "png-image.tfrecord", file(png));
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR\n");
    return 2;
  }
  const fs::path corpus(argv[1]);
  const fs::path frames = corpus / "frame";
  const std::vector<float> values = {1.5f, -2.0f, 0.25f, 3.0f};
  const std::span<const float> v(values);

  SaveFrame(frames, "hello", 0, wire::Encode(wire::Hello{.index = 1, .incarnation = 3, .cluster_id = 0x1234}));
  SaveFrame(frames, "welcome", 1, wire::Encode(wire::Welcome{.index = 0, .incarnation = 9, .initialized = true, .global_step = 5}));
  wire::Init init;
  init.layout_hash = 42;
  init.optimizer = {.type = wire::OptimizerKind::kAdam, .learning_rate = 0.001, .beta1 = 0.9, .beta2 = 0.999, .epsilon = 1e-7};
  init.update = {.mode = wire::UpdateMode::kSync, .replicas_to_aggregate = 2, .total_num_replicas = 2, .num_workers = 2};
  init.chunks = {{"dense/kernel[0:3]", 3}, {"dense/bias", 1}};
  SaveFrame(frames, "init", 2, wire::Encode(init, v));
  init.has_state = true;
  init.updates = 7;
  init.resume_steps = {3, 4};
  const std::vector<float> slots = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
  SaveFrame(frames, "init_state", 2, wire::Encode(init, v, slots));
  SaveFrame(frames, "state_pull", 15, wire::Encode(wire::StatePull{}));
  wire::State state;
  state.global_step = 5;
  state.updates = 5;
  state.resume_steps = {2, 3};
  SaveFrame(frames, "state", 16, wire::Encode(state, v, slots));
  SaveFrame(frames, "wait_ready", 3, wire::Encode(wire::WaitReady{.layout_hash = 42}));
  SaveFrame(frames, "ready", 4, wire::Encode(wire::Ready{.global_step = 5, .resume_step = 2}));
  SaveFrame(frames, "pull", 5, wire::Encode(wire::Pull{.min_step = 4}));
  SaveFrame(frames, "params", 6, wire::Encode(wire::Params{.global_step = 5}, v));
  const std::vector<std::span<const float>> grads = {v.first(3), v.subspan(3)};
  SaveFrame(frames, "push", 7, wire::Encode(wire::Push{.worker = 1, .incarnation = 2, .local_step = 3, .based_on_step = 4}, grads));
  SaveFrame(frames, "push_ack", 8, wire::Encode(wire::PushAck{.global_step = 6, .outcome = wire::PushOutcome::kStale}));
  SaveFrame(frames, "done", 9, wire::Encode(wire::Done{.worker = 1}));
  SaveFrame(frames, "error", 10, wire::Encode(wire::ErrorMessage{.code = 3, .message = "PUSH payload CRC mismatch"}));
  SaveFrame(frames, "heartbeat", 0, wire::EncodeHeartbeat());
  SaveFrame(frames, "done_ack", 0, wire::EncodeDoneAck());

  // Ring link streams: chunks (placed and not), heartbeats between them, DONE and ERROR.
  auto chunk = [&](std::uint64_t id, wire::RingPhase phase, std::uint64_t offset, std::span<const float> f) {
    return wire::Encode(wire::RingChunk{.collective = id, .phase = phase, .hop = 0, .segment = 1, .offset = offset}, f);
  };
  auto ring_stream = [&] {
    std::vector<wire::OutFrame> fs;
    fs.push_back(chunk(3, wire::RingPhase::kReduceScatter, 2, v.first(2)));
    fs.push_back(wire::EncodeHeartbeat());
    fs.push_back(chunk(3, wire::RingPhase::kAllGather, 0, v));
    fs.push_back(chunk(4, wire::RingPhase::kBroadcast, 0, v.first(1)));
    fs.push_back(wire::Encode(wire::Done{.worker = 2}));
    fs.push_back(wire::Encode(wire::ErrorMessage{.code = 5, .message = "worker:2 (10.0.0.6:2222) closed the connection"}));
    return fs;
  };
  SaveStream(corpus / "link" / "ring_bytewise_placed", 0x07, 0x0f, ring_stream());  // 1 byte at a time, 8 KiB limit
  SaveStream(corpus / "link" / "ring_pieces", 0x3d, 0x00, ring_stream());           // 50-byte pieces, no placer
  SaveStream(corpus / "link" / "ring_small_limit", 0x80, 0x09, ring_stream());      // 113-byte pieces, 64-byte limit

  ckpt::Checkpoint c;
  c.global_step = 1200;
  c.num_workers = 2;
  c.optimizer.spec.type = config::OptimizerSpec::Type::kAdam;
  c.optimizer.spec.learning_rate = 0.001;
  c.optimizer.updates = 1200;
  c.optimizer.slot_names = {"m", "v"};
  c.cursors = {{0, 1, 0, 30}, {1, 1, 0, 29}};
  c.tensors.push_back({"dense/kernel", {2, 2}, values, {{"m", values}, {"v", values}}});
  c.tensors.push_back({"dense/bias", {2}, {0.5f, -0.5f}, {{"m", {0.1f, 0.2f}}, {"v", {0.3f, 0.4f}}}});
  auto adam = ckpt::Serialize(c);
  ckpt::Checkpoint s;
  s.global_step = 7;
  s.num_workers = 1;
  s.cursors = {{0, 0, 0, 3}};
  s.optimizer.spec.type = config::OptimizerSpec::Type::kMomentum;
  s.optimizer.slot_names = {"momentum"};
  s.tensors.push_back({"w", {}, {1.0f}, {{"momentum", {0.5f}}}});
  auto momentum = ckpt::Serialize(s);
  // Two workers' error feedback (update.compression powersgd) in a FEEDBACK record.
  s.num_workers = 2;
  s.cursors = {{0, 0, 0, 3}, {1, 0, 0, 3}};
  s.feedback = ckpt::ErrorFeedback{.method = config::CompressionSpec::Method::kPowerSgd, .residuals = {{0.25f}, {-0.75f}}, .shared = {1.0f}, .rank = 1};
  auto feedback = ckpt::Serialize(s);
  if (!adam.ok() || !momentum.ok() || !feedback.ok()) {
    std::fprintf(stderr, "fuzz_make_seeds: cannot serialize the seed checkpoints\n");
    return 1;
  }
  Save(corpus / "checkpoint" / "valid-adam.tfdckpt", *adam);
  Save(corpus / "checkpoint" / "valid-momentum.tfdckpt", *momentum);
  Save(corpus / "checkpoint" / "valid-feedback.tfdckpt", *feedback);
  SaveTfrecords(corpus / "tfrecord");
  std::printf("fuzz_make_seeds: wrote seeds under %s\n", corpus.c_str());
  return 0;
}
