#include "common/export/onnx.h"

#include <algorithm>

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
  // A scalar int64 initializer (a Gather index that drops its axis).
  std::string Int64Scalar(const std::string& name, std::int64_t value) {
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_int64_data(value);
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
    case config::Activation::kRelu6: {  // opset 13's Clip takes its bounds as inputs
      const float lo[] = {0.0f}, hi[] = {6.0f};
      return b.Node("Clip", {x, b.Constant(prefix + "/relu6_min", {}, lo), b.Constant(prefix + "/relu6_max", {}, hi)}, prefix + "/relu6")
          ->output(0);
    }
    case config::Activation::kGelu: {  // no Gelu before opset 20: x (1 + erf(x / sqrt 2)) / 2
      const float inv_sqrt2[] = {0.70710678118654752f}, one[] = {1.0f}, half[] = {0.5f};
      const std::string h = b.Node("Mul", {x, b.Constant(prefix + "/gelu_inv_sqrt2", {}, inv_sqrt2)}, prefix + "/gelu_scaled")->output(0);
      const std::string e = b.Node("Erf", {h}, prefix + "/gelu_erf")->output(0);
      const std::string a = b.Node("Add", {e, b.Constant(prefix + "/gelu_one", {}, one)}, prefix + "/gelu_cdf2")->output(0);
      const std::string m = b.Node("Mul", {x, a}, prefix + "/gelu_x_cdf2")->output(0);
      return b.Node("Mul", {m, b.Constant(prefix + "/gelu_half", {}, half)}, prefix + "/gelu")->output(0);
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

// Writes the model's layers into the graph after `x`. Values are flat ([batch, h*w*c], NHWC order
// inside a row, as tfd keeps rows) until a convolution or pooling, which takes NCHW; a dense layer
// after one flattens back to NHWC order.
class LayerWriter {
 public:
  LayerWriter(GraphBuilder& b, const model::Model& m, std::string x) : b_(b), m_(m), x_(std::move(x)), shape_(m.input_shape()) {}

  Status WriteAll() {
    for (std::size_t i = 0; i < m_.num_layers(); ++i) {
      TFD_RETURN_IF_ERROR(Write(m_.layer_spec(i), m_.layer(i), fmt::format("layer{}", i)));
      shape_ = m_.layer_output_shape(i);
    }
    return Status::Ok();
  }
  // The last layer's output as rows of tfd's layout.
  std::string FlatOutput() {
    ToFlat("output");
    return x_;
  }
  std::size_t unused_variables() const { return m_.variables().size() - next_var_; }

 private:
  Result<const model::Variable*> Take(std::string_view what) {
    if (next_var_ >= m_.variables().size()) return Status::InvalidArgument(fmt::format("the model has no {} variable left to export", what));
    return &m_.variables()[next_var_++];
  }
  std::span<const float> Values(const model::Variable* v) const {
    return m_.params().subspan(static_cast<std::size_t>(v->offset), static_cast<std::size_t>(v->size));
  }
  // The value `v` of shape `shape`, NCHW when `from_nchw` (else flat rows), in the layout `to_nchw` asks for.
  std::string Convert(const std::string& v, bool from_nchw, tensor::ActShape shape, bool to_nchw, const std::string& prefix) {
    if (from_nchw == to_nchw) return v;
    if (to_nchw) {
      onnx::NodeProto* r = b_.Node("Reshape", {v, b_.Int64s(prefix + "/nhwc_shape", {-1, shape.h, shape.w, shape.c})}, prefix + "/nhwc");
      onnx::NodeProto* t = b_.Node("Transpose", {r->output(0)}, prefix + "/nchw");
      GraphBuilder::Ints(t, "perm", {0, 3, 1, 2});
      return t->output(0);
    }
    onnx::NodeProto* t = b_.Node("Transpose", {v}, prefix + "/nhwc");
    GraphBuilder::Ints(t, "perm", {0, 2, 3, 1});
    onnx::NodeProto* f = b_.Node("Flatten", {t->output(0)}, prefix + "/flat");
    GraphBuilder::Int(f, "axis", 1);
    return f->output(0);
  }
  void ToNchw(const std::string& prefix) {
    x_ = Convert(x_, nchw_, shape_, true, prefix);
    nchw_ = true;
  }
  void ToFlat(const std::string& prefix) {
    x_ = Convert(x_, nchw_, shape_, false, prefix);
    nchw_ = false;
  }
  // kernel_shape, strides and pads (ONNX's [top, left, bottom, right]) of a k x k window.
  void Window(onnx::NodeProto* n, const LayerSpec& l, int k) const {
    const tensor::WindowAxis y = tensor::Window(shape_.h, k, l.stride(), l.padding), x = tensor::Window(shape_.w, k, l.stride(), l.padding);
    GraphBuilder::Ints(n, "kernel_shape", {k, k});
    GraphBuilder::Ints(n, "strides", {l.stride(), l.stride()});
    GraphBuilder::Ints(n, "pads", {y.pad_before, x.pad_before, y.pad_after, x.pad_after});
  }
  // One layer (`layer`, built from `l`) on x_ of shape shape_; the caller sets shape_ after it.
  Status Write(const LayerSpec& l, const tensor::Layer& layer, const std::string& prefix) {
    switch (l.kind) {
      case LayerSpec::Kind::kDropout: break;  // the identity at inference
      case LayerSpec::Kind::kFlatten: break;  // rows are flat already; an NCHW value is flattened by the dense layer that reads it
      case LayerSpec::Kind::kDense: return Dense(l, prefix);
      case LayerSpec::Kind::kConv2D: return Conv(l, prefix);
      case LayerSpec::Kind::kDepthwiseConv2D: return Depthwise(l, prefix);
      case LayerSpec::Kind::kMaxPool2D:
      case LayerSpec::Kind::kAvgPool2D: Pool(l, prefix); break;
      case LayerSpec::Kind::kGlobalAvgPool2D:
        ToNchw(prefix);
        x_ = b_.Node("GlobalAveragePool", {x_}, prefix + "/global_avg_pool")->output(0);
        break;
      case LayerSpec::Kind::kBatchNorm: return BatchNorm(l, prefix);
      case LayerSpec::Kind::kLayerNorm: return LayerNorm(l, prefix);
      case LayerSpec::Kind::kResidual: return Residual(l, layer, prefix);
      case LayerSpec::Kind::kEmbedding:
      case LayerSpec::Kind::kOneHot: return Categorical(l, prefix);
    }
    return Status::Ok();
  }
  // The numeric features (a Gather of their places), then per categorical column its id (a
  // Gather of its place, Cast to int64) through a Gather of its table's rows (embedding) or a
  // OneHot of its id count, concatenated in that order as tfd's layer does. The ids arrive as
  // floats in the input row: the model's one input stays tfd's row of features.
  Status Categorical(const LayerSpec& l, const std::string& prefix) {
    ToFlat(prefix);
    std::vector<std::int64_t> numeric;
    for (std::int64_t f = 0; f < shape_.size(); ++f)
      if (std::find(l.column_features.begin(), l.column_features.end(), f) == l.column_features.end()) numeric.push_back(f);
    std::vector<std::string> parts;
    if (!numeric.empty()) {
      onnx::NodeProto* g = b_.Node("Gather", {x_, b_.Int64s(prefix + "/numeric_places", numeric)}, prefix + "/numeric");
      GraphBuilder::Int(g, "axis", 1);
      parts.push_back(g->output(0));
    }
    for (std::size_t c = 0; c < l.column_features.size(); ++c) {
      const std::string at = fmt::format("{}/column{}", prefix, c);
      onnx::NodeProto* g = b_.Node("Gather", {x_, b_.Int64Scalar(at + "/place", l.column_features[c])}, at + "/id_float");
      GraphBuilder::Int(g, "axis", 1);
      onnx::NodeProto* cast = b_.Node("Cast", {g->output(0)}, at + "/id");
      GraphBuilder::Int(cast, "to", onnx::TensorProto::INT64);
      if (l.kind == LayerSpec::Kind::kEmbedding) {
        TFD_ASSIGN_OR_RETURN(const model::Variable* table, Take("embeddings"));
        onnx::NodeProto* rows = b_.Node("Gather", {b_.Constant(table->name, table->shape, Values(table)), cast->output(0)}, at + "/embedding");
        GraphBuilder::Int(rows, "axis", 0);
        parts.push_back(rows->output(0));
      } else {
        const float off_on[] = {0.0f, 1.0f};
        onnx::NodeProto* hot = b_.Node("OneHot", {cast->output(0), b_.Int64s(at + "/depth", {l.column_ids[c]}), b_.Constant(at + "/values", {2}, off_on)},
                                       at + "/one_hot");
        GraphBuilder::Int(hot, "axis", -1);
        parts.push_back(hot->output(0));
      }
    }
    onnx::NodeProto* cat = b_.Node("Concat", parts, prefix + "/concat");
    GraphBuilder::Int(cat, "axis", 1);
    x_ = cat->output(0);
    return Status::Ok();
  }
  // The block's layers in order (PREFIX_j/...), then its shortcut (the input, or a Conv with the
  // 1x1 projection), an Add of the two in the sum's layout (NCHW for an image, else flat rows)
  // and the activation.
  Status Residual(const LayerSpec& l, const tensor::Layer& layer, const std::string& prefix) {
    const tensor::ActShape in = shape_, out = layer.output_shape();
    if (l.strides > 0 || in.h * in.w > 1) ToNchw(prefix);  // a projection convolves NCHW
    const std::string input = x_;
    const bool input_nchw = nchw_;
    for (std::size_t j = 0; j < layer.Inner().size(); ++j) {
      TFD_RETURN_IF_ERROR(Write(l.layers[j], *layer.Inner()[j], fmt::format("{}_{}", prefix, j)));
      shape_ = layer.Inner()[j]->output_shape();
    }
    const bool sum_nchw = out.h * out.w > 1;
    const std::string inner = Convert(x_, nchw_, out, sum_nchw, prefix + "/inner");
    std::string shortcut = input;
    if (l.strides > 0) {
      TFD_ASSIGN_OR_RETURN(const model::Variable* kernel, Take("projection kernel"));
      TFD_ASSIGN_OR_RETURN(const model::Variable* bias, Take("projection bias"));
      const std::string w = b_.Constant(kernel->name, {out.c, in.c, 1, 1}, ToOihw(Values(kernel), 1, in.c, out.c));
      onnx::NodeProto* conv = b_.Node("Conv", {input, w, b_.Constant(bias->name, bias->shape, Values(bias))}, prefix + "/projection");
      GraphBuilder::Ints(conv, "kernel_shape", {1, 1});
      GraphBuilder::Ints(conv, "strides", {l.strides, l.strides});
      shortcut = Convert(conv->output(0), true, out, sum_nchw, prefix + "/shortcut");
    } else {
      shortcut = Convert(input, input_nchw, in, sum_nchw, prefix + "/shortcut");
    }
    x_ = Activate(b_, l.activation, b_.Node("Add", {inner, shortcut}, prefix + "/add")->output(0), prefix);
    nchw_ = sum_nchw;
    return Status::Ok();
  }
  // Keras' depthwise_kernel [k, k, C, M] as ONNX's grouped Conv weights [C * M, 1, k, k], group C:
  // output channel c * M + m reads input channel c alone, as tfd's does.
  Status Depthwise(const LayerSpec& l, const std::string& prefix) {
    ToNchw(prefix);
    TFD_ASSIGN_OR_RETURN(const model::Variable* kernel, Take("depthwise_kernel"));
    const int k = l.kernel_size, c = shape_.c, m = l.depth_multiplier;
    const std::span<const float> hwcm = Values(kernel);
    std::vector<float> w(hwcm.size());
    for (int y = 0; y < k; ++y)
      for (int x = 0; x < k; ++x)
        for (int i = 0; i < c * m; ++i) w[(static_cast<std::size_t>(i) * k + y) * k + x] = hwcm[(static_cast<std::size_t>(y) * k + x) * c * m + i];
    std::vector<std::string> inputs = {x_, b_.Constant(kernel->name, {c * m, 1, k, k}, w)};
    if (l.use_bias) {
      TFD_ASSIGN_OR_RETURN(const model::Variable* bias, Take("bias"));
      inputs.push_back(b_.Constant(bias->name, bias->shape, Values(bias)));
    }
    onnx::NodeProto* conv = b_.Node("Conv", inputs, prefix + "/depthwise_conv");
    Window(conv, l, k);
    GraphBuilder::Int(conv, "group", c);
    x_ = Activate(b_, l.activation, conv->output(0), prefix);
    return Status::Ok();
  }
  Status Dense(const LayerSpec& l, const std::string& prefix) {
    ToFlat(prefix);
    TFD_ASSIGN_OR_RETURN(const model::Variable* kernel, Take("kernel"));
    TFD_ASSIGN_OR_RETURN(const model::Variable* bias, Take("bias"));
    const std::string k = b_.Constant(kernel->name, kernel->shape, Values(kernel));
    const std::string c = b_.Constant(bias->name, bias->shape, Values(bias));
    x_ = Activate(b_, l.activation, b_.Node("Gemm", {x_, k, c}, prefix + "/dense")->output(0), prefix);
    return Status::Ok();
  }
  Status Conv(const LayerSpec& l, const std::string& prefix) {
    ToNchw(prefix);
    TFD_ASSIGN_OR_RETURN(const model::Variable* kernel, Take("kernel"));
    TFD_ASSIGN_OR_RETURN(const model::Variable* bias, Take("bias"));
    const int k = l.kernel_size;
    const std::vector<float> oihw = ToOihw(Values(kernel), k, shape_.c, l.filters);
    const std::string w = b_.Constant(kernel->name, {l.filters, shape_.c, k, k}, oihw);
    const std::string c = b_.Constant(bias->name, bias->shape, Values(bias));
    onnx::NodeProto* conv = b_.Node("Conv", {x_, w, c}, prefix + "/conv");
    Window(conv, l, k);
    x_ = Activate(b_, l.activation, conv->output(0), prefix);
    return Status::Ok();
  }
  void Pool(const LayerSpec& l, const std::string& prefix) {
    ToNchw(prefix);
    const bool max = l.kind == LayerSpec::Kind::kMaxPool2D;
    onnx::NodeProto* p = b_.Node(max ? "MaxPool" : "AveragePool", {x_}, prefix + (max ? "/max_pool" : "/avg_pool"));
    Window(p, l, l.pool_size);
    if (!max) GraphBuilder::Int(p, "count_include_pad", 0);  // Keras averages the cells inside the input only
    x_ = p->output(0);
  }

  // Both normalise over tfd's channels, which is axis 1 of a flat [batch, features] row and of
  // NCHW: an image is taken to NCHW first. gamma and beta (when the layer learns them, else ones
  // and zeros) shaped to broadcast along axis 1.
  std::string ChannelAxis(const std::string& prefix) {
    if (shape_.h * shape_.w > 1) ToNchw(prefix);
    return x_;
  }
  Result<std::pair<std::string, std::string>> GammaBeta(const LayerSpec& l, const std::string& prefix, std::vector<std::int64_t> dims) {
    const std::vector<float> ones(static_cast<std::size_t>(shape_.c), 1.0f), zeros(ones.size(), 0.0f);
    std::string gamma, beta;
    if (l.scale) {
      TFD_ASSIGN_OR_RETURN(const model::Variable* v, Take("gamma"));
      gamma = b_.Constant(v->name, dims, Values(v));
    } else {
      gamma = b_.Constant(prefix + "/gamma", dims, ones);
    }
    if (l.center) {
      TFD_ASSIGN_OR_RETURN(const model::Variable* v, Take("beta"));
      beta = b_.Constant(v->name, dims, Values(v));
    } else {
      beta = b_.Constant(prefix + "/beta", dims, zeros);
    }
    return std::pair{gamma, beta};
  }
  // Inference's batch norm: opset 13's BatchNormalization with the moving statistics.
  Status BatchNorm(const LayerSpec& l, const std::string& prefix) {
    ChannelAxis(prefix);
    TFD_ASSIGN_OR_RETURN(auto gb, GammaBeta(l, prefix, {shape_.c}));
    TFD_ASSIGN_OR_RETURN(const model::Variable* mean, Take("moving_mean"));
    TFD_ASSIGN_OR_RETURN(const model::Variable* var, Take("moving_variance"));
    onnx::NodeProto* n = b_.Node("BatchNormalization",
                                 {x_, gb.first, gb.second, b_.Constant(mean->name, mean->shape, Values(mean)),
                                  b_.Constant(var->name, var->shape, Values(var))},
                                 prefix + "/batch_norm");
    GraphBuilder::Float(n, "epsilon", static_cast<float>(l.epsilon));
    x_ = n->output(0);
    return Status::Ok();
  }
  // No LayerNormalization before opset 17: (x - mean) / sqrt(var + epsilon) * gamma + beta from
  // ReduceMean (axes an attribute in opset 13), Sub, Mul, Add, Sqrt and Div.
  Status LayerNorm(const LayerSpec& l, const std::string& prefix) {
    ChannelAxis(prefix);
    std::vector<std::int64_t> dims = {shape_.c};
    if (nchw_) dims = {shape_.c, 1, 1};
    TFD_ASSIGN_OR_RETURN(auto gb, GammaBeta(l, prefix, dims));
    auto mean_of = [&](const std::string& v, const std::string& out) {
      onnx::NodeProto* n = b_.Node("ReduceMean", {v}, out);
      GraphBuilder::Ints(n, "axes", {1});
      GraphBuilder::Int(n, "keepdims", 1);
      return n->output(0);
    };
    const float eps[] = {static_cast<float>(l.epsilon)};
    const std::string d = b_.Node("Sub", {x_, mean_of(x_, prefix + "/mean")}, prefix + "/centered")->output(0);
    const std::string var = mean_of(b_.Node("Mul", {d, d}, prefix + "/squared")->output(0), prefix + "/variance");
    const std::string sd = b_.Node("Sqrt", {b_.Node("Add", {var, b_.Constant(prefix + "/epsilon", {}, eps)}, prefix + "/var_eps")->output(0)},
                                   prefix + "/std")->output(0);
    const std::string xhat = b_.Node("Div", {d, sd}, prefix + "/normalized")->output(0);
    x_ = b_.Node("Add", {b_.Node("Mul", {xhat, gb.first}, prefix + "/scaled")->output(0), gb.second}, prefix + "/layer_norm")->output(0);
    return Status::Ok();
  }

  GraphBuilder& b_;
  const model::Model& m_;
  std::string x_;
  bool nchw_ = false;
  tensor::ActShape shape_;
  std::size_t next_var_ = 0;
};

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

  LayerWriter layers(b, m, x);
  TFD_RETURN_IF_ERROR(layers.WriteAll());
  x = layers.FlatOutput();
  if (layers.unused_variables() > 0)
    return Status::InvalidArgument(fmt::format("{} of the model's variables belong to no exported layer", layers.unused_variables()));

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
