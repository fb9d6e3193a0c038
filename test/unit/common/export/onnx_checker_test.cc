// ONNX's own C++ checker (Debian's libonnx: onnx::checker::check_model, then strict shape
// inference with type checks, which is what python3-onnx's check_model(full_check=True) runs) on
// the graph OnnxModelBytes writes for every model kind; no Python, no ONNX Runtime.
#include <catch2/catch.hpp>
#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include "common/export/model_card.h"
#include "common/export/onnx.h"
#include "test/export_models.h"

namespace tfd::exporting {
namespace {

// The full check: nothing when the model is valid, else the checker's message.
std::string FullCheck(onnx::ModelProto& proto) {
  try {
    onnx::checker::check_model(proto);
    onnx::shape_inference::InferShapes(proto, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type_val=*/true, /*strict_mode_val=*/1));
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The inferred dims of graph value `name` (-1 for a symbolic one), empty when shape inference gave it none.
std::vector<std::int64_t> InferredDims(const onnx::ModelProto& proto, const std::string& name) {
  std::vector<std::int64_t> dims;
  auto take = [&](const onnx::ValueInfoProto& v) {
    for (const auto& d : v.type().tensor_type().shape().dim()) dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
  };
  for (const auto& v : proto.graph().value_info())
    if (v.name() == name) take(v);
  return dims;
}

TEST_CASE("libonnx's checker and strict shape inference accept the graph of every model kind", "[unit][export]") {
  for (const testing::ExportCase& c : testing::ExportCases(8, 5)) {
    INFO("model " << c.name);
    std::unique_ptr<model::Model> m = testing::TrainedModel(c, 8, 1, 2);
    Result<std::string> bytes = OnnxModelBytes(CardFor(c.job, c.data), *m);
    REQUIRE(bytes.ok());
    onnx::ModelProto proto;
    REQUIRE(proto.ParseFromString(*bytes));
    CHECK(FullCheck(proto) == "");
    // The value before the outputs' Identity holds [batch, outputs]: the layers' shapes chain up.
    const std::string last = proto.graph().node(proto.graph().node_size() - (c.data.regression() ? 1 : 2)).input(0);
    CHECK(InferredDims(proto, last) == std::vector<std::int64_t>{-1, c.data.outputs()});
  }
}

TEST_CASE("libonnx's full check refuses a graph whose declared outputs are not what its layers give", "[unit][export]") {
  const testing::ExportCase c = testing::ExportCases(8, 5)[1];  // the mlp
  REQUIRE(c.name == "mlp");
  std::unique_ptr<model::Model> m = testing::TrainedModel(c, 8, 0, 2);
  Result<std::string> bytes = OnnxModelBytes(CardFor(c.job, c.data), *m);
  REQUIRE(bytes.ok());
  onnx::ModelProto proto;
  REQUIRE(proto.ParseFromString(*bytes));
  REQUIRE(FullCheck(proto) == "");
  proto.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(1)->set_dim_value(11);
  CHECK_THAT(FullCheck(proto), Catch::Contains("differ"));
}

}  // namespace
}  // namespace tfd::exporting
