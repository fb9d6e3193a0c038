// The job's "model": the seeds' names or a layer list, read and validated (ReadModel), and the
// names of the layer kinds, activations and paddings.
#include <fmt/format.h>

#include "common/config/job.h"
#include "common/config/json_reader.h"

namespace tfd::config {
namespace {

using nlohmann::json;

constexpr int kMaxUnits = 1 << 16;

std::string_view Known(std::string_view what) {
  if (what == "model") return "softmax, mlp, dnn, cnn or {\"layers\": [...]}";
  return "";
}

bool ParseActivation(std::string_view s, Activation* out) {
  if (s == "none" || s == "linear") *out = Activation::kNone;
  else if (s == "relu") *out = Activation::kRelu;
  else if (s == "sigmoid") *out = Activation::kSigmoid;
  else if (s == "elu") *out = Activation::kElu;
  else if (s == "tanh") *out = Activation::kTanh;
  else if (s == "relu6") *out = Activation::kRelu6;
  else if (s == "gelu") *out = Activation::kGelu;
  else return false;
  return true;
}

// "init": "glorot_uniform" | {"type": "normal", "stddev": 0.1}
void ReadInit(ObjectReader& r, InitSpec* out) {
  const json* v = r.Get("init");
  if (v == nullptr) return;
  std::string type;
  std::string path = r.PathOf("init");
  if (v->is_string()) {
    type = v->get<std::string>();
  } else if (v->is_object()) {
    ObjectReader o = r.Child(*v, path);
    o.String("type", &type, /*required=*/true);
    o.Double("stddev", 0, 1e3, /*min_exclusive=*/true, &out->stddev);
    if (!o.Finish().ok()) return;
    path += ".type";
  } else {
    return r.Fail(path, "expected an initializer name or {\"type\": ..., \"stddev\": ...}, got " + Describe(*v));
  }
  if (type == "zeros") out->kind = InitKind::kZeros;
  else if (type == "normal") out->kind = InitKind::kNormal;
  else if (type == "truncated_normal") out->kind = InitKind::kTruncatedNormal;
  else if (type == "glorot_uniform") out->kind = InitKind::kGlorotUniform;
  else if (type == "he_normal") out->kind = InitKind::kHeNormal;
  else r.Fail(path, fmt::format("unknown initializer \"{}\" (expected zeros, normal, truncated_normal, glorot_uniform or he_normal)", type));
}

// "strides" and "padding" of a convolution or pooling layer, Keras' names and defaults.
void ReadWindow(ObjectReader& r, LayerSpec* layer) {
  r.Int("strides", 1, 64, &layer->strides);
  std::string padding = "valid";
  r.String("padding", &padding);
  if (padding == "same") layer->padding = Padding::kSame;
  else if (padding != "valid" && r.status().ok())
    r.Fail(r.PathOf("padding"), fmt::format("unknown padding \"{}\" (expected valid or same)", padding));
}

// batch_norm's and layer_norm's fields, Keras' names and defaults (epsilon 1e-3 for both).
void ReadNorm(ObjectReader& r, const std::string& type, LayerSpec* layer) {
  const bool batch = type == "batch_norm";
  layer->kind = batch ? LayerSpec::Kind::kBatchNorm : LayerSpec::Kind::kLayerNorm;
  r.Double("epsilon", 0, 1, /*min_exclusive=*/true, &layer->epsilon);
  r.Bool("center", &layer->center);
  r.Bool("scale", &layer->scale);
  if (!batch) return;
  r.Double("momentum", 0, 1, /*min_exclusive=*/false, &layer->momentum);
  if (r.status().ok() && layer->momentum >= 1) r.Fail(r.PathOf("momentum"), "must be below 1 (the moving statistics would never move)");
  r.Bool("sync", &layer->sync);
}

void ReadLayer(const json& j, const std::string& path, LayerSpec* layer, const ObjectReader& parent);

// A residual block's "layers": a non-empty array, each read as a model's layer at PATH.layers[j].
void ReadBlock(ObjectReader& r, LayerSpec* layer) {
  layer->kind = LayerSpec::Kind::kResidual;
  const json* inner = r.Get("layers");
  if (inner == nullptr || !inner->is_array() || inner->empty())
    return r.Fail(r.PathOf("layers"), fmt::format("expected a non-empty array of the block's layers, got {}",
                                                  inner == nullptr ? std::string("nothing") : Describe(*inner)));
  layer->layers.resize(inner->size());
  for (std::size_t j = 0; j < inner->size(); ++j) ReadLayer((*inner)[j], r.PathOf("layers", j), &layer->layers[j], r);
}

// Keras' DepthwiseConv2D: kernel_size, strides, padding, depth_multiplier, use_bias.
void ReadDepthwise(ObjectReader& r, LayerSpec* layer) {
  layer->kind = LayerSpec::Kind::kDepthwiseConv2D;
  r.Int("kernel_size", 1, 64, &layer->kernel_size, /*required=*/true);
  r.Int("depth_multiplier", 1, 256, &layer->depth_multiplier);
  r.Bool("use_bias", &layer->use_bias);
  ReadWindow(r, layer);
}

// embedding's and one_hot's "columns" (names of the data's categorical columns) and
// embedding's "output_dim".
void ReadCategorical(ObjectReader& r, const std::string& type, LayerSpec* layer) {
  const bool embedding = type == "embedding";
  layer->kind = embedding ? LayerSpec::Kind::kEmbedding : LayerSpec::Kind::kOneHot;
  if (embedding) r.Int("output_dim", 1, 4096, &layer->output_dim, /*required=*/true);
  const json* v = r.Get("columns");
  if (v == nullptr) return;
  if (!v->is_array() || v->empty())
    return r.Fail(r.PathOf("columns"), "expected a non-empty list of the data's categorical column names, got " + Describe(*v));
  for (std::size_t j = 0; j < v->size(); ++j) {
    if (!(*v)[j].is_string() || (*v)[j].get<std::string>().empty())
      return r.Fail(r.PathOf("columns", j), "expected a categorical column's name, got " + Describe((*v)[j]));
    layer->columns.push_back((*v)[j].get<std::string>());
  }
  if (embedding) ReadInit(r, &layer->init);
}

bool HasActivation(LayerSpec::Kind k) {
  return k == LayerSpec::Kind::kDense || k == LayerSpec::Kind::kConv2D || k == LayerSpec::Kind::kDepthwiseConv2D ||
         k == LayerSpec::Kind::kResidual;
}

void ReadLayer(const json& j, const std::string& path, LayerSpec* layer, const ObjectReader& parent) {
  ObjectReader r = parent.Child(j, path);
  std::string type;
  r.String("type", &type, /*required=*/true);
  if (type == "dense") {
    layer->kind = LayerSpec::Kind::kDense;
    r.Int("units", 1, kMaxUnits, &layer->units, /*required=*/true);
  } else if (type == "conv2d") {
    layer->kind = LayerSpec::Kind::kConv2D;
    r.Int("filters", 1, 4096, &layer->filters, /*required=*/true);
    r.Int("kernel_size", 1, 64, &layer->kernel_size, /*required=*/true);
    ReadWindow(r, layer);
  } else if (type == "max_pool2d" || type == "avg_pool2d") {
    layer->kind = type == "max_pool2d" ? LayerSpec::Kind::kMaxPool2D : LayerSpec::Kind::kAvgPool2D;
    r.Int("pool_size", 1, 64, &layer->pool_size, /*required=*/true);
    ReadWindow(r, layer);
  } else if (type == "depthwise_conv2d") {
    ReadDepthwise(r, layer);
  } else if (type == "residual") {
    ReadBlock(r, layer);
  } else if (type == "global_avg_pool2d") {
    layer->kind = LayerSpec::Kind::kGlobalAvgPool2D;
  } else if (type == "batch_norm" || type == "layer_norm") {
    ReadNorm(r, type, layer);
  } else if (type == "embedding" || type == "one_hot") {
    ReadCategorical(r, type, layer);
  } else if (type == "flatten") {
    layer->kind = LayerSpec::Kind::kFlatten;
  } else if (type == "dropout") {
    layer->kind = LayerSpec::Kind::kDropout;
    r.Double("rate", 0, 1, /*min_exclusive=*/false, &layer->rate, /*required=*/true);
    if (r.status().ok() && layer->rate >= 1) r.Fail(r.PathOf("rate"), "must be below 1 (a dropout of every value)");
  } else if (r.status().ok()) {
    r.Fail(r.PathOf("type"), fmt::format("unknown layer type \"{}\" (expected dense, conv2d, depthwise_conv2d, max_pool2d, avg_pool2d, "
                                         "global_avg_pool2d, batch_norm, layer_norm, residual, embedding, one_hot, flatten or dropout)",
                                         type));
  }
  if (HasActivation(layer->kind)) {
    std::string act = "none";
    r.String("activation", &act);
    if (r.status().ok() && !ParseActivation(act, &layer->activation))
      r.Fail(r.PathOf("activation"), fmt::format("unknown activation \"{}\" (expected none, relu, relu6, sigmoid, elu, tanh or gelu)", act));
    ReadInit(r, &layer->init);
  }
  (void)r.Finish();
}

}  // namespace

void ReadModel(ObjectReader& root, ModelSpec* model) {
  const json* v = root.Get("model");
  if (v == nullptr) return root.Fail(root.PathOf("model"), std::string("missing (expected ") + std::string(Known("model")) + ")");
  if (v->is_string()) {
    model->name = v->get<std::string>();
    if (model->name != "softmax" && model->name != "mlp" && model->name != "dnn" && model->name != "cnn")
      root.Fail(root.PathOf("model"), fmt::format("unknown model \"{}\" (expected {})", model->name, Known("model")));
    return;
  }
  if (!v->is_object()) return root.Fail(root.PathOf("model"), fmt::format("expected {}, got {}", Known("model"), Describe(*v)));
  ObjectReader r = root.Child(*v, root.PathOf("model"));
  if (r.Has("name") && r.Has("layers")) r.Fail(root.PathOf("model"), "give either \"name\" or \"layers\", not both");
  if (r.Has("name")) {
    r.String("name", &model->name);
    if (r.status().ok() && model->name != "softmax" && model->name != "mlp" && model->name != "dnn" && model->name != "cnn")
      r.Fail(r.PathOf("name"), fmt::format("unknown model \"{}\" (expected softmax, mlp, dnn or cnn)", model->name));
  } else {
    const json* layers = r.Get("layers");
    if (layers == nullptr || !layers->is_array() || layers->empty()) {
      r.Fail(r.PathOf("layers"), "expected a non-empty array of layers (or \"name\": one of softmax, mlp, dnn, cnn)");
    } else {
      model->name = "layers";
      model->layers.resize(layers->size());
      for (std::size_t i = 0; i < layers->size(); ++i)
        ReadLayer((*layers)[i], r.PathOf("layers", i), &model->layers[i], r);
    }
  }
  ReadInit(r, &model->init);
  (void)r.Finish();
}


std::string_view ActivationName(Activation a) {
  switch (a) {
    case Activation::kNone: return "none";
    case Activation::kRelu: return "relu";
    case Activation::kSigmoid: return "sigmoid";
    case Activation::kElu: return "elu";
    case Activation::kTanh: return "tanh";
    case Activation::kRelu6: return "relu6";
    case Activation::kGelu: return "gelu";
  }
  return "?";
}

std::string_view PaddingName(Padding p) { return p == Padding::kSame ? "same" : "valid"; }

std::string_view LayerKindName(LayerSpec::Kind k) {
  switch (k) {
    case LayerSpec::Kind::kDense: return "dense";
    case LayerSpec::Kind::kConv2D: return "conv2d";
    case LayerSpec::Kind::kMaxPool2D: return "max_pool2d";
    case LayerSpec::Kind::kFlatten: return "flatten";
    case LayerSpec::Kind::kDropout: return "dropout";
    case LayerSpec::Kind::kAvgPool2D: return "avg_pool2d";
    case LayerSpec::Kind::kGlobalAvgPool2D: return "global_avg_pool2d";
    case LayerSpec::Kind::kBatchNorm: return "batch_norm";
    case LayerSpec::Kind::kLayerNorm: return "layer_norm";
    case LayerSpec::Kind::kResidual: return "residual";
    case LayerSpec::Kind::kDepthwiseConv2D: return "depthwise_conv2d";
    case LayerSpec::Kind::kEmbedding: return "embedding";
    case LayerSpec::Kind::kOneHot: return "one_hot";
  }
  return "?";
}

Status ForEachLayer(const std::vector<LayerSpec>& layers, const std::function<Status(const LayerSpec&, const std::string&)>& visit,
                    const std::string& path) {
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", path, i);
    TFD_RETURN_IF_ERROR(visit(layers[i], at));
    if (layers[i].kind == LayerSpec::Kind::kResidual) TFD_RETURN_IF_ERROR(ForEachLayer(layers[i].layers, visit, at + ".layers"));
  }
  return Status::Ok();
}

}  // namespace tfd::config
