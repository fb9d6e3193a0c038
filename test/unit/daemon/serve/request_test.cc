#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "daemon/serve/request.h"

namespace tfd::serve {
namespace {

const Signature kImage{.height = 2, .width = 2, .channels = 1, .outputs = 3, .regression = false, .max_instances = 4};
const Signature kTable{.height = 1, .width = 3, .channels = 1, .outputs = 2, .regression = true, .max_instances = 4};

std::string ErrorOf(std::string_view body, const Signature& sig) {
  Result<PredictRequest> r = ParsePredict(body, sig);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  return r.status().message();
}

TEST_CASE("serve: rows, nested rows, named rows and columns parse to the same values", "[serve]") {
  const std::vector<float> want = {1, 2, 3, 4, 5, 6, 7, 8};
  for (const char* body : {R"({"instances": [[1, 2, 3, 4], [5, 6, 7, 8]]})", R"({"instances": [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]})",
                           R"({"instances": [[[[1], [2]], [[3], [4]]], [[[5], [6]], [[7], [8]]]]})",
                           R"({"instances": [{"input": [1, 2, 3, 4]}, {"input": [[5, 6], [7, 8]]}]})",
                           R"({"signature_name": "serving_default", "inputs": [[1, 2, 3, 4], [5, 6, 7, 8]]})",
                           R"({"inputs": {"input": [[1, 2, 3, 4], [5, 6, 7, 8]]}})"}) {
    INFO(body);
    Result<PredictRequest> r = ParsePredict(body, kImage);
    REQUIRE(r.ok());
    CHECK(r->rows == 2);
    CHECK(r->values == want);
    CHECK(r->columnar == (std::string_view(body).find("inputs") != std::string_view::npos));
  }
}

TEST_CASE("serve: each bad request is a 400 message naming the instance and what was expected", "[serve]") {
  CHECK(ErrorOf("{\"instances\": [1, 2", kImage).starts_with("the body is not JSON"));
  CHECK(ErrorOf("[1, 2]", kImage) == "the body is a list, expected an object {\"instances\": [...]}");
  CHECK(ErrorOf(R"({"rows": []})", kImage) == "unknown field \"rows\" (expected \"instances\" or \"inputs\")");
  CHECK(ErrorOf(R"({"instances": [[1,2,3,4]], "inputs": [[1,2,3,4]]})", kImage).starts_with("expected exactly one of"));
  CHECK(ErrorOf(R"({"instances": []})", kImage) == "\"instances\" is an empty list, expected at least one example");
  CHECK(ErrorOf(R"({"instances": [[1,2,3,4],[1,2,3,4],[1,2,3,4],[1,2,3,4],[1,2,3,4]]})", kImage) ==
        "\"instances\" holds 5 examples, at most 4 per request (--batch-max)");
  CHECK(ErrorOf(R"({"instances": [[1, 2, 3, 4], [1, 2, 3]]})", kImage) == "instance 1: expected 4 numbers (or nested [2, 2, 1]), got shape [3]");
  CHECK(ErrorOf(R"({"instances": [[1, 2, 3, 4], [1, "2", 3, 4]]})", kImage) == "instance 1: value 1 is a string, expected a number");
  CHECK(ErrorOf(R"({"instances": [[1, 2, 3, 1e39]]})", kImage) == "instance 0: value 3 is not a finite float32 (1e+39)");
  CHECK(ErrorOf(R"({"instances": [[1, 2, 3, NaN]]})", kImage).starts_with("the body is not JSON"));
  CHECK(ErrorOf(R"({"instances": [[[1, 2], [3]]]})", kImage) == "instance 0: not a rectangular list: expected 2 elements at depth 1, got 1");
  CHECK(ErrorOf(R"({"instances": [{"x": [1, 2, 3, 4]}]})", kImage) == "instance 0: unknown input \"x\" (the signature's input is \"input\")");
  CHECK(ErrorOf(R"({"instances": [null]})", kImage) == "instance 0: null, expected 4 numbers (or nested [2, 2, 1])");
  CHECK(ErrorOf(R"({"inputs": [[1, 2, 3], [1, 2]]})", kTable) == "inputs[1]: expected 3 numbers, got shape [2]");
  CHECK(ErrorOf(R"({"instances": [[1, 2, 3]], "signature_name": "other"})", kTable).starts_with("signature_name \"other\""));
}

TEST_CASE("serve: answers are TF Serving's row and column shapes", "[serve]") {
  Result<PredictRequest> rows = ParsePredict(R"({"instances": [[1, 2, 3, 4], [5, 6, 7, 8]]})", kImage);
  REQUIRE(rows.ok());
  const std::vector<float> logits = {1, 2, 3, 4, 5, 6}, probs = {0.5f, 0.25f, 0.25f, 0.125f, 0.125f, 0.75f};
  nlohmann::json j = nlohmann::json::parse(FormatPredict(*rows, kImage, logits, probs));
  CHECK(j["predictions"].size() == 2);
  CHECK(j["predictions"][1]["logits"] == nlohmann::json({4, 5, 6}));
  CHECK(j["predictions"][1]["probabilities"] == nlohmann::json({0.125, 0.125, 0.75}));
  Result<PredictRequest> cols = ParsePredict(R"({"inputs": [[1, 2, 3, 4], [5, 6, 7, 8]]})", kImage);
  REQUIRE(cols.ok());
  j = nlohmann::json::parse(FormatPredict(*cols, kImage, logits, probs));
  CHECK(j["outputs"]["logits"] == nlohmann::json({{1, 2, 3}, {4, 5, 6}}));
  Result<PredictRequest> reg = ParsePredict(R"({"instances": [[1, 2, 3]]})", kTable);
  REQUIRE(reg.ok());
  j = nlohmann::json::parse(FormatPredict(*reg, kTable, std::vector<float>{0.1f, 2.5f}, {}));
  CHECK(j == nlohmann::json::parse(R"({"predictions": [[0.1, 2.5]]})"));
  CHECK(nlohmann::json::parse(ErrorJson("instance 2: \"x\"")) == nlohmann::json({{"error", "instance 2: \"x\""}}));
}

}  // namespace
}  // namespace tfd::serve
