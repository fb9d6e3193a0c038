#include "common/export/onnx.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <onnx/onnx_pb.h>

#include "common/config/json_writer.h"

namespace tfd::exporting {
namespace {

using config::LayerSpec;

// Builds the graph node by node; each value is named "<layer>/<what>" so a viewer shows the layers.
class GraphBuilder {
 public:
  explicit GraphBuilder(onnx::GraphProto* g) : g_(g) {}

  // A float initializer of `dims` (row-major) named `name`.
  std::string Constant(const std::string& name, std::vector<std::int64_t> dims, std::span<const float> values) {
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (std::int64_t d : dims) t->add_dims(d);
    t->set_raw_data(values.data(), values.size_bytes());
    return name;
  }
  std::string Int64s(const std::string& name, std::vector<std::int64_t> values) {
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<std::int64_t>(values.size()));
    for (std::int64_t v : values) t->add_int64_data(v);
    return name;
  }
  // Adds `op`(inputs) -> `out` and returns `out`.
  onnx::NodeProto* Node(const std::string& op, std::vector<std::string> inputs, const std::string& out) {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (auto& in : inputs) n->add_input(in);
    n->add_output(out);
    return n;
  }
  static void Ints(onnx::NodeProto* n, const char* name, std::vector<std::int64_t> values) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (std::int64_t v : values) a->add_ints(v);
  }
  static void Int(onnx::NodeProto* n, const char* name, std::int64_t value) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
  }
  static void Float(onnx::NodeProto* n, const char* name, float value) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(value);
  }
  void Value(onnx::ValueInfoProto* v, const std::string& name, std::int64_t width) {
    v->set_name(name);
    onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_param("batch");
    t->mutable_shape()->add_dim()->set_dim_value(width);
  }

 private:
  onnx::GraphProto* g_;
};

// The activation `act` of `x` as node(s) named under `prefix`; `x` itself for none.
std::string Activate(GraphBuilder& b, config::Activation act, const std::string& x, const std::string& prefix) {
  switch (act) {
    case config::Activation::kNone: return x;
    case config::Activation::kRelu: return b.Node("Relu", {x}, prefix + "/relu")->output(0);
    case config::Activation::kSigmoid: return b.Node("Sigmoid", {x}, prefix + "/sigmoid")->output(0);
    case config::Activation::kTanh: return b.Node("Tanh", {x}, prefix + "/tanh")->output(0);
    case config::Activation::kElu: {
      onnx::NodeProto* n = b.Node("Elu", {x}, prefix + "/elu");
      GraphBuilder::Float(n, "alpha", 1.0f);
      return n->output(0);
    }
  }
  return x;
}

// tfd's conv kernel [k, k, c_in, filters] (TensorFlow's HWIO) as ONNX's [filters, c_in, k, k].
std::vector<float> ToOihw(std::span<const float> hwio, int k, int cin, int filters) {
  std::vector<float> out(hwio.size());
  for (int y = 0; y < k; ++y)
    for (int x = 0; x < k; ++x)
      for (int i = 0; i < cin; ++i)
        for (int o = 0; o < filters; ++o)
          out[((static_cast<std::size_t>(o) * cin + i) * k + y) * k + x] = hwio[((static_cast<std::size_t>(y) * k + x) * cin + i) * filters + o];
  return out;
}

}  // namespace

Result<std::string> OnnxModelBytes(const ModelCard& card, const model::Model& m) {
  onnx::ModelProto proto;
  proto.set_ir_version(7);  // ONNX 1.8's IR: what opset 13 readers all take
  proto.set_producer_name("tfd");
  proto.set_producer_version(TFD_VERSION);
  proto.set_domain("tfd");
  proto.set_model_version(1);
  proto.add_opset_import()->set_version(13);
  onnx::GraphProto* g = proto.mutable_graph();
  g->set_name("tfd");
  GraphBuilder b(g);
  b.Value(g->add_input(), kOnnxInput, card.features());

  // The preprocessing training applied, on the raw values.
  std::string x = kOnnxInput;
  const float scale = card.normalizer.scale.value_or(1.0f);
  if (scale != 1.0f) {
    const float s[] = {scale};
    x = b.Node("Mul", {x, b.Constant("preprocess/scale", {}, s)}, "preprocess/scaled")->output(0);
  }
  if (!card.normalizer.mean.empty()) {
    x = b.Node("Sub", {x, b.Constant("preprocess/mean", {card.features()}, card.normalizer.mean)}, "preprocess/centered")->output(0);
    x = b.Node("Mul", {x, b.Constant("preprocess/inv_std", {card.features()}, card.normalizer.inv_std)}, "preprocess/standardized")->output(0);
  }

  // The layers. `x` is flat ([batch, h*w*c], NHWC order inside a row, as tfd keeps rows) until a
  // convolution, which takes NCHW; a dense layer after one flattens back to NHWC order.
  bool nchw = false;
  tensor::ActShape shape = m.input_shape();
  const std::vector<model::Variable>& vars = m.variables();
  std::size_t next_var = 0;
  auto take = [&](std::string_view what) -> Result<const model::Variable*> {
    if (next_var >= vars.size()) return Status::InvalidArgument(fmt::format("the model has no {} variable left to export", what));
    return &vars[next_var++];
  };
  const std::span<const float> params = m.params();
  auto values = [&](const model::Variable* v) { return params.subspan(static_cast<std::size_t>(v->offset), static_cast<std::size_t>(v->size)); };
  for (std::size_t i = 0; i < m.num_layers(); ++i) {
    const LayerSpec& l = m.layer_spec(i);
    const std::string prefix = fmt::format("layer{}", i);
    switch (l.kind) {
      case LayerSpec::Kind::kDropout: break;  // the identity at inference
      case LayerSpec::Kind::kFlatten: break;  // rows are flat already; an NCHW value is flattened by the dense layer that reads it
      case LayerSpec::Kind::kDense: {
        if (nchw) {
          onnx::NodeProto* t = b.Node("Transpose", {x}, prefix + "/nhwc");
          GraphBuilder::Ints(t, "perm", {0, 2, 3, 1});
          onnx::NodeProto* f = b.Node("Flatten", {t->output(0)}, prefix + "/flat");
          GraphBuilder::Int(f, "axis", 1);
          x = f->output(0);
          nchw = false;
        }
        TFD_ASSIGN_OR_RETURN(const model::Variable* kernel, take("kernel"));
        TFD_ASSIGN_OR_RETURN(const model::Variable* bias, take("bias"));
        const std::string k = b.Constant(kernel->name, kernel->shape, values(kernel));
        const std::string c = b.Constant(bias->name, bias->shape, values(bias));
        x = Activate(b, l.activation, b.Node("Gemm", {x, k, c}, prefix + "/dense")->output(0), prefix);
        break;
      }
      case LayerSpec::Kind::kConv2D: {
        if (!nchw) {
          onnx::NodeProto* r = b.Node("Reshape", {x, b.Int64s(prefix + "/nhwc_shape", {-1, shape.h, shape.w, shape.c})}, prefix + "/nhwc");
          onnx::NodeProto* t = b.Node("Transpose", {r->output(0)}, prefix + "/nchw");
          GraphBuilder::Ints(t, "perm", {0, 3, 1, 2});
          x = t->output(0);
          nchw = true;
        }
        TFD_ASSIGN_OR_RETURN(const model::Variable* kernel, take("kernel"));
        TFD_ASSIGN_OR_RETURN(const model::Variable* bias, take("bias"));
        const int k = l.kernel_size;
        const std::vector<float> oihw = ToOihw(values(kernel), k, shape.c, l.filters);
        const std::string w = b.Constant(kernel->name, {l.filters, shape.c, k, k}, oihw);
        const std::string c = b.Constant(bias->name, bias->shape, values(bias));
        onnx::NodeProto* conv = b.Node("Conv", {x, w, c}, prefix + "/conv");
        GraphBuilder::Ints(conv, "kernel_shape", {k, k});
        GraphBuilder::Ints(conv, "strides", {1, 1});
        x = Activate(b, l.activation, conv->output(0), prefix);
        break;
      }
      case LayerSpec::Kind::kMaxPool2D: {
        if (!nchw) return Status::InvalidArgument(fmt::format("layer {}: max_pool2d on flat rows cannot be exported", i));
        onnx::NodeProto* p = b.Node("MaxPool", {x}, prefix + "/max_pool");
        GraphBuilder::Ints(p, "kernel_shape", {l.pool_size, l.pool_size});
        GraphBuilder::Ints(p, "strides", {l.pool_size, l.pool_size});
        x = p->output(0);
        break;
      }
    }
    shape = m.layer_output_shape(i);
  }
  if (nchw) {  // a model that ends in a convolution or pooling: its rows as tfd gives them
    onnx::NodeProto* t = b.Node("Transpose", {x}, "output/nhwc");
    GraphBuilder::Ints(t, "perm", {0, 2, 3, 1});
    onnx::NodeProto* f = b.Node("Flatten", {t->output(0)}, "output/flat");
    GraphBuilder::Int(f, "axis", 1);
    x = f->output(0);
  }
  if (next_var != vars.size()) return Status::InvalidArgument(fmt::format("{} of the model's variables belong to no exported layer", vars.size() - next_var));

  const std::int64_t width = m.classes();
  if (card.regression()) {
    b.Node("Identity", {x}, kOnnxOutputs);
    b.Value(g->add_output(), kOnnxOutputs, width);
  } else {
    b.Node("Identity", {x}, kOnnxLogits);
    onnx::NodeProto* sm = b.Node("Softmax", {kOnnxLogits}, kOnnxProbabilities);
    GraphBuilder::Int(sm, "axis", 1);
    b.Value(g->add_output(), kOnnxLogits, width);
    b.Value(g->add_output(), kOnnxProbabilities, width);
    onnx::StringStringEntryProto* classes = proto.add_metadata_props();
    classes->set_key("classes");
    classes->set_value(config::CompactJson(nlohmann::json(card.class_names)));
  }
  onnx::StringStringEntryProto* task = proto.add_metadata_props();
  task->set_key("task");
  task->set_value(card.regression() ? "regression" : "classification");
  std::string bytes;
  if (!proto.SerializeToString(&bytes)) return Status::Internal("the ONNX model could not be serialized");
  return bytes;
}

}  // namespace tfd::exporting
