#include <catch2/catch.hpp>

#include "common/data/dataset.h"
#include "common/data/idx.h"
#include "test/test_util.h"

namespace tfd::data {
namespace {

using tfd::testing::IdxBytes;

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

TEST_CASE("ParseIdx reads the header's dimensions and the data", "[unit][idx]") {
  std::string file = IdxBytes({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  auto got = ParseIdx(Bytes(file), 3, "x.idx");
  REQUIRE(got.ok());
  CHECK(got->dims == std::vector<std::uint32_t>{2, 3, 2});
  CHECK(got->data.size() == 12);
  CHECK(got->data[11] == 12);
}

TEST_CASE("ParseIdx rejects corrupt files with a message naming the file and the fault", "[unit][idx]") {
  std::string good = IdxBytes({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  auto expect_error = [](const std::string& bytes, int rank, const std::string& fragment) {
    auto got = ParseIdx(Bytes(bytes), rank, "f.idx");
    REQUIRE_FALSE(got.ok());
    CHECK(got.status().code() == Code::kCorruption);
    INFO(got.status().message());
    CHECK(got.status().message().rfind("f.idx: ", 0) == 0);
    CHECK(got.status().message().find(fragment) != std::string::npos);
  };
  SECTION("truncated data") { expect_error(good.substr(0, good.size() - 1), 3, "truncated IDX file: header says 8 bytes of data (2x2x2), file has 7"); }
  SECTION("truncated header") { expect_error(good.substr(0, 9), 3, "truncated IDX file: 9 bytes, header needs 16"); }
  SECTION("empty") { expect_error("", 3, "too short for the 4-byte magic"); }
  SECTION("wrong magic") {
    std::string bad = good;
    bad[0] = 0x1f;
    expect_error(bad, 3, "not an unsigned-byte IDX file: magic 0x1f000803, expected 0x00000803");
  }
  SECTION("float data type is not ubyte") {
    std::string bad = good;
    bad[2] = 0x0d;
    expect_error(bad, 3, "not an unsigned-byte IDX file");
  }
  SECTION("wrong number of dimensions") { expect_error(good, 1, "wrong dimensions: IDX magic 0x00000803 says 3 dimensions, expected 1"); }
  SECTION("extra bytes") { expect_error(good + "zz", 3, "file has 2 more"); }
  SECTION("a zero dimension") { expect_error(IdxBytes({2, 0, 2}, {}), 3, "dimension 1 is 0"); }
  SECTION("a header claiming terabytes is refused before allocating") {
    expect_error(IdxBytes({0xffffffffu, 0xffffffffu, 0xffffffffu}, {}), 3, "header claims more than");
  }
}

TEST_CASE("LoadIdxPair rejects label counts and values that do not fit the images", "[unit][idx]") {
  tfd::testing::TempDir dir;
  tfd::testing::WriteFile(dir / "img", IdxBytes({3, 2, 2}, std::vector<std::uint8_t>(12, 7)));
  SECTION("fewer labels than images") {
    tfd::testing::WriteFile(dir / "lab", IdxBytes({2}, {1, 2}));
    auto got = LoadIdxPair(dir / "img", dir / "lab");
    REQUIRE_FALSE(got.ok());
    CHECK(got.status().message() == dir / "lab" + ": 2 labels, but " + dir / "img" + " has 3 images");
  }
  SECTION("a label outside the classes") {
    tfd::testing::WriteFile(dir / "lab", IdxBytes({3}, {1, 12, 2}));
    auto got = LoadIdxPair(dir / "img", dir / "lab");
    REQUIRE_FALSE(got.ok());
    CHECK(got.status().message() == dir / "lab" + ": label 12 at index 1 is outside [0, 10)");
  }
  SECTION("a good pair") {
    tfd::testing::WriteFile(dir / "lab", IdxBytes({3}, {1, 9, 0}));
    auto got = LoadIdxPair(dir / "img", dir / "lab");
    REQUIRE(got.ok());
    CHECK(got->size == 3);
    CHECK(got->pixels() == 4);
  }
  SECTION("a missing file") {
    auto got = LoadIdxPair(dir / "nope", dir / "lab");
    REQUIRE_FALSE(got.ok());
    CHECK(got.status().code() == Code::kNotFound);
    CHECK(got.status().message() == dir / "nope" + ": cannot open");
  }
}

TEST_CASE("LoadMnist names a missing data folder and how to fetch it", "[unit][idx]") {
  auto got = LoadMnist("/nonexistent/mnist");
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == Code::kNotFound);
  CHECK(got.status().message() ==
        "/nonexistent/mnist: no such data folder (fetch MNIST with: scripts/fetch_mnist.sh /nonexistent/mnist)");
}

TEST_CASE("real MNIST headers parse when the data is present", "[unit][idx][mnist]") {
  const char* dir = std::getenv("TFD_MNIST_DIR");
  if (dir == nullptr) return;  // scripts/test sets it; the MNIST tests cover the data itself
  auto got = LoadMnist(dir);
  REQUIRE(got.ok());
  CHECK(got->train.size == 60000);
  CHECK(got->test.size == 10000);
  CHECK(got->train.height == 28);
  CHECK(got->train.width == 28);
  CHECK(got->train.labels[0] == 5);  // the first training label of MNIST
}

TEST_CASE("EpochShard splits every epoch's permutation among workers without overlap", "[unit][data]") {
  const std::int64_t n = 1003;
  for (int count : {1, 2, 3, 5}) {
    std::vector<int> seen(n, 0);
    for (int i = 0; i < count; ++i)
      for (std::uint32_t e : EpochShard(n, 42, 2, i, count, true)) seen[e]++;
    for (std::int64_t e = 0; e < n; ++e) REQUIRE(seen[e] == 1);
  }
  CHECK(EpochShard(n, 42, 2, 1, 3, true) == EpochShard(n, 42, 2, 1, 3, true));
  CHECK(EpochShard(n, 42, 2, 1, 3, true) != EpochShard(n, 42, 3, 1, 3, true));  // reshuffled each epoch
  CHECK(EpochShard(n, 42, 2, 1, 3, true) != EpochShard(n, 43, 2, 1, 3, true));
  auto plain = EpochShard(10, 42, 1, 1, 3, false);
  CHECK(plain == std::vector<std::uint32_t>{1, 4, 7});
}

TEST_CASE("the k-th batches of n workers together are the k-th batch of one worker with n times the batch", "[unit][data]") {
  const std::int64_t n = 600;
  const int workers = 3, b = 7, k = 4;
  std::vector<std::uint32_t> one = EpochShard(n, 9, 1, 0, 1, true);
  std::vector<std::uint32_t> combined(one.begin() + k * workers * b, one.begin() + (k + 1) * workers * b);
  std::vector<std::uint32_t> parts;
  for (int i = 0; i < workers; ++i) {
    auto shard = EpochShard(n, 9, 1, i, workers, true);
    parts.insert(parts.end(), shard.begin() + k * b, shard.begin() + (k + 1) * b);
  }
  std::sort(combined.begin(), combined.end());
  std::sort(parts.begin(), parts.end());
  CHECK(parts == combined);
}

TEST_CASE("FillBatch scales pixels to [0, 1] and copies labels", "[unit][data]") {
  Dataset d;
  d.size = 2;
  d.height = 1;
  d.width = 2;
  d.features = {0, 255, 51, 102};
  d.labels = {3, 4};
  std::vector<std::uint32_t> idx = {1, 0};
  float x[4];
  ClassId y[2];
  FillBatch(d, idx, x, y);
  CHECK(x[0] == Approx(0.2));
  CHECK(x[1] == Approx(0.4));
  CHECK(x[2] == 0.0f);
  CHECK(x[3] == 1.0f);
  CHECK(y[0] == 4);
  CHECK(y[1] == 3);
}

TEST_CASE("LoadIdxPair maps a regular image file read-only; HoldOut copies the validation images out", "[unit][idx]") {
  tfd::testing::TempDir dir;
  std::vector<std::uint8_t> pixels(4 * 2 * 2);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 3);
  tfd::testing::WriteFile(dir / "img", IdxBytes({4, 2, 2}, pixels));
  tfd::testing::WriteFile(dir / "lab", IdxBytes({4}, {0, 1, 2, 3}));
  auto got = LoadIdxPair(dir / "img", dir / "lab");
  REQUIRE(got.ok());
  CHECK(got->features.mapped());
  CHECK(got->features == pixels);
  DataSplits m;
  m.train = *got;
  Dataset copy = m.train;  // shares the mapping
  CHECK(copy.features.data() == m.train.features.data());
  HoldOut(&m, 1);
  CHECK(m.train.features.mapped());
  CHECK(m.train.features == std::vector<std::uint8_t>(pixels.begin(), pixels.begin() + 12));
  CHECK_FALSE(m.validation.features.mapped());
  CHECK(m.validation.features == std::vector<std::uint8_t>(pixels.begin() + 12, pixels.end()));
  m = DataSplits{};  // the copy keeps the mapping alive
  CHECK(copy.features == pixels);
}

TEST_CASE("MapIdxFile checks the header as ParseIdx does, and leaves a file it cannot map to the reader", "[unit][idx]") {
  tfd::testing::TempDir dir;
  tfd::testing::WriteFile(dir / "short", IdxBytes({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}).substr(0, 20));
  auto corrupt = MapIdxFile(dir / "short", 3);
  REQUIRE_FALSE(corrupt.ok());
  CHECK(corrupt.status().code() == Code::kCorruption);
  CHECK(corrupt.status().message() == dir / "short" + ": truncated IDX file: header says 8 bytes of data (2x2x2), file has 4");
  CHECK(MapIdxFile(dir / "missing", 3).status().code() == Code::kNotFound);
  CHECK(MapIdxFile("/dev/null", 3).status().code() == Code::kUnavailable);
}

}  // namespace
}  // namespace tfd::data
