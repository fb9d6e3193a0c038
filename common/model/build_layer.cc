#include "common/model/build_layer.h"

#include <algorithm>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tfd::model {
namespace {

using config::LayerSpec;

// InvalidArgument at `where` when a "valid" k x k `what` window does not fit the input `in`
// ("same" always fits: it pads).
Status CheckWindowFits(const std::string& where, std::string_view what, int k, const LayerSpec& l, tensor::ActShape in) {
  if (l.padding == config::Padding::kSame || (in.h >= k && in.w >= k)) return Status::Ok();
  return Status::InvalidArgument(fmt::format("{}: a {}x{} {} does not fit a {}x{} input (\"padding\": \"same\" pads it)", where, k, k,
                                             what, in.h, in.w));
}

// The product of the strides of a block's layers: the stride of the 1x1 projection that samples
// the pixels its strided windows start at, as Keras' ResNet projects a strided block.
int NetStride(const std::vector<LayerSpec>& layers) {
  int s = 1;
  for (const LayerSpec& l : layers) {
    switch (l.kind) {
      case LayerSpec::Kind::kConv2D:
      case LayerSpec::Kind::kDepthwiseConv2D:
      case LayerSpec::Kind::kMaxPool2D:
      case LayerSpec::Kind::kAvgPool2D: s *= l.stride(); break;
      case LayerSpec::Kind::kResidual: s *= NetStride(l.layers); break;
      default: break;
    }
  }
  return s;
}

std::string ShapeText(tensor::ActShape s) { return fmt::format("{}x{}x{}", s.h, s.w, s.c); }

// The projection's stride for a block from `in` to `out` (they differ), or InvalidArgument when
// no strided 1x1 projection gives `out`'s height and width.
Result<int> ProjectionStride(const std::vector<LayerSpec>& inner, tensor::ActShape in, tensor::ActShape out, const std::string& where) {
  const int s = NetStride(inner);
  const int h = tensor::Window(in.h, 1, s, config::Padding::kValid).out, w = tensor::Window(in.w, 1, s, config::Padding::kValid).out;
  if (h == out.h && w == out.w) return s;
  return Status::InvalidArgument(fmt::format(
      "{}: the block's layers turn its {} input into {}, which a 1x1 projection with the layers' stride {} cannot match ({}x{}): "
      "keep the block's height and width, or shrink them by strides with \"padding\": \"same\"",
      where, ShapeText(in), ShapeText(out), s, h, w));
}

Result<BuiltLayer> BuildResidual(LayerSpec l, tensor::ActShape in, const std::string& where, const config::InitSpec& model_init,
                                 tensor::GemmConfig gemm, bool on_rows) {
  std::vector<tensor::BlockLayer> inner;
  std::vector<LayerSpec> kept;
  std::map<std::string, int> kind_count;
  tensor::ActShape shape = in;
  for (std::size_t j = 0; j < l.layers.size(); ++j) {
    if (l.layers[j].kind == LayerSpec::Kind::kFlatten) {
      shape = {1, 1, static_cast<int>(shape.size())};
      continue;
    }
    TFD_ASSIGN_OR_RETURN(BuiltLayer b, BuildLayer(l.layers[j], shape, fmt::format("{}.layers[{}]", where, j), model_init, gemm,
                                                  on_rows && inner.empty()));
    const std::string kind(config::LayerKindName(b.spec.kind));
    const int n = kind_count[kind]++;
    shape = b.layer->output_shape();
    inner.push_back({n == 0 ? kind : fmt::format("{}_{}", kind, n), std::move(b.layer)});
    kept.push_back(std::move(b.spec));
  }
  if (inner.empty()) return Status::InvalidArgument(fmt::format("{}.layers: the block has no layer but flatten", where));
  tensor::ResidualOptions o{.activation = l.activation, .projection_init = l.init, .gemm = gemm};
  if (shape.h != in.h || shape.w != in.w || shape.c != in.c) {
    TFD_ASSIGN_OR_RETURN(o.projection_stride, ProjectionStride(kept, in, shape, where));
  }
  l.layers = std::move(kept);
  l.strides = o.projection_stride;
  return BuiltLayer{tensor::MakeResidual(in, std::move(inner), o), std::move(l)};
}

}  // namespace

Result<BuiltLayer> BuildLayer(LayerSpec l, tensor::ActShape in, const std::string& where, const config::InitSpec& model_init,
                              tensor::GemmConfig gemm, bool on_rows) {
  if (model_init.kind != config::InitKind::kDefault) l.init = model_init;
  std::unique_ptr<tensor::Layer> layer;
  switch (l.kind) {
    case LayerSpec::Kind::kFlatten: TFD_CHECK(false); break;  // a shape change only: the caller's
    case LayerSpec::Kind::kDense: layer = tensor::MakeDense(in, l.units, l.activation, l.init, gemm); break;
    case LayerSpec::Kind::kConv2D:
    case LayerSpec::Kind::kDepthwiseConv2D: {
      if (on_rows)
        return Status::InvalidArgument(fmt::format("{}: {} needs images (height x width x channels), but the data's examples are "
                                                   "rows of {} features: use a dense model (dnn, mlp or dense layers)",
                                                   where, config::LayerKindName(l.kind), in.size()));
      TFD_RETURN_IF_ERROR(CheckWindowFits(where, "kernel", l.kernel_size, l, in));
      if (l.kind == LayerSpec::Kind::kConv2D) {
        layer = tensor::MakeConv2D(in, l.filters, l.kernel_size, l.activation, l.init, gemm, l.stride(), l.padding);
        break;
      }
      const tensor::DepthwiseOptions o{.kernel_size = l.kernel_size, .stride = l.stride(), .depth_multiplier = l.depth_multiplier,
                                       .padding = l.padding, .use_bias = l.use_bias};
      layer = tensor::MakeDepthwiseConv2D(in, o, l.activation, l.init);
      break;
    }
    case LayerSpec::Kind::kDropout: layer = tensor::MakeDropout(in, l.rate); break;
    case LayerSpec::Kind::kMaxPool2D:
    case LayerSpec::Kind::kAvgPool2D:
      TFD_RETURN_IF_ERROR(CheckWindowFits(where, "pool", l.pool_size, l, in));
      layer = l.kind == LayerSpec::Kind::kMaxPool2D ? tensor::MakeMaxPool2D(in, l.pool_size, l.stride(), l.padding)
                                                    : tensor::MakeAvgPool2D(in, l.pool_size, l.stride(), l.padding);
      break;
    case LayerSpec::Kind::kGlobalAvgPool2D: layer = tensor::MakeGlobalAvgPool2D(in); break;
    case LayerSpec::Kind::kBatchNorm:
    case LayerSpec::Kind::kLayerNorm: {
      const tensor::NormOptions o{.momentum = l.momentum, .epsilon = l.epsilon, .center = l.center, .scale = l.scale, .sync = l.sync};
      layer = l.kind == LayerSpec::Kind::kBatchNorm ? tensor::MakeBatchNorm(in, o) : tensor::MakeLayerNorm(in, o);
      break;
    }
    case LayerSpec::Kind::kResidual: return BuildResidual(std::move(l), in, where, model_init, gemm, on_rows);
    case LayerSpec::Kind::kEmbedding:
    case LayerSpec::Kind::kOneHot:
      return Status::InvalidArgument(fmt::format("{}: {} must be the model's first layer (it reads the data's categorical columns)", where,
                                                 config::LayerKindName(l.kind)));
  }
  return BuiltLayer{std::move(layer), std::move(l)};
}

Result<BuiltLayer> BuildCategorical(LayerSpec l, tensor::ActShape in, const std::string& where,
                                    const std::vector<data::CategoricalColumn>& categorical) {
  const std::string_view kind = config::LayerKindName(l.kind);
  if (categorical.empty())
    return Status::InvalidArgument(fmt::format("{}: {} needs categorical columns, but the data has none (name them in data.categorical)", where, kind));
  std::vector<std::string> names;
  for (const data::CategoricalColumn& c : categorical) names.push_back(c.name);
  if (l.columns.empty()) l.columns = names;
  std::vector<tensor::CategoricalInput> inputs;
  l.column_features.clear(), l.column_ids.clear();
  for (std::size_t j = 0; j < l.columns.size(); ++j) {
    auto it = std::find(names.begin(), names.end(), l.columns[j]);
    if (it == names.end())
      return Status::InvalidArgument(fmt::format("{}.columns[{}]: \"{}\" is not a categorical column (data.categorical: {})", where, j,
                                                 l.columns[j], fmt::join(names, ", ")));
    const data::CategoricalColumn& c = categorical[static_cast<std::size_t>(it - names.begin())];
    if (std::find(l.column_features.begin(), l.column_features.end(), c.feature) != l.column_features.end())
      return Status::InvalidArgument(fmt::format("{}.columns[{}]: \"{}\" is listed twice", where, j, c.name));
    inputs.push_back({c.feature, c.ids()});
    l.column_features.push_back(c.feature);
    l.column_ids.push_back(c.ids());
  }
  for (const data::CategoricalColumn& c : categorical)
    if (std::find(l.columns.begin(), l.columns.end(), c.name) == l.columns.end())
      return Status::InvalidArgument(fmt::format("{}.columns: leaves out the categorical column \"{}\" (list every one of data.categorical, "
                                                 "or none for all)", where, c.name));
  std::unique_ptr<tensor::Layer> layer = l.kind == LayerSpec::Kind::kEmbedding ? tensor::MakeEmbedding(in, std::move(inputs), l.output_dim, l.init)
                                                                               : tensor::MakeOneHot(in, std::move(inputs));
  return BuiltLayer{std::move(layer), std::move(l)};
}

}  // namespace tfd::model
