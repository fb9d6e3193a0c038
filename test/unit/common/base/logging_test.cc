#include <catch2/catch.hpp>

#include "common/base/logging.h"
#include "common/base/sha256.h"

namespace tfd {
namespace {

TEST_CASE("event lines are JSON with escaped strings and no NaN", "[unit][logging]") {
  std::string line = EventWriter::Format(12.5, "worker:1", "epoch",
                                         {{"epoch", std::int64_t{3}}, {"loss", 0.25}, {"message", std::string("a \"b\"\n")},
                                          {"ok", true}, {"bad", std::nan("")}});
  CHECK(line ==
        R"({"ts":12.500,"task":"worker:1","event":"epoch","epoch":3,"loss":0.25,"message":"a \"b\"\n","ok":true,"bad":null})");
}

TEST_CASE("Sha256 matches the standard test vector", "[unit][base]") {
  Sha256 h;
  const std::string abc = "abc";
  h.Update(std::as_bytes(std::span(abc.data(), abc.size())));
  CHECK(h.HexDigest() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace tfd
