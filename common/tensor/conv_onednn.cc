#include "common/tensor/conv_onednn.h"

#if TFD_HAVE_ONEDNN
#include <map>
#include <optional>

#include <dnnl.hpp>

#include "common/base/check.h"
#endif

namespace tfd::tensor {

#if TFD_HAVE_ONEDNN
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// The argument of a primitive over storage the layer owns: oneDNN takes a void* for every
// argument and only reads the inputs (SRC, WEIGHTS, DIFF_DST), so the const_cast writes nothing.
void Point(memory& m, const float* p) { m.set_data_handle(const_cast<float*>(p)); }

// A kernel in the layer's hwio beside the layout a primitive wants (`wanted`): when they differ, a
// buffer of that layout and the reorder between the two, in the direction `to_wanted` says.
class KernelLayout {
 public:
  KernelLayout(const dnnl::engine& engine, const memory::desc& hwio, const memory::desc& wanted, bool to_wanted)
      : user_(hwio, engine, DNNL_MEMORY_NONE) {
    if (wanted == hwio) return;
    own_.emplace(wanted, engine);
    reorder_.emplace(to_wanted ? dnnl::reorder(user_, *own_) : dnnl::reorder(*own_, user_));
    to_wanted_ = to_wanted;
  }
  // The primitive's kernel argument, in its layout, from the layer's `hwio` (reordered now when
  // the layouts differ and this is an input).
  memory& In(dnnl::stream& s, const float* hwio) {
    Point(user_, hwio);
    if (!own_) return user_;
    reorder_->execute(s, user_, *own_);
    return *own_;
  }
  // The primitive's kernel-gradient argument; Out's result reaches `hwio` after Finish.
  memory& Out(float* hwio) {
    Point(user_, hwio);
    return own_ ? *own_ : user_;
  }
  void Finish(dnnl::stream& s) {
    if (own_ && !to_wanted_) reorder_->execute(s, *own_, user_);
  }

 private:
  memory user_;
  std::optional<memory> own_;
  std::optional<dnnl::reorder> reorder_;
  bool to_wanted_ = true;
};

// The primitives for one batch size. Backward's are made on the first Backward.
struct Primitives {
  struct Backward {
    dnnl::convolution_backward_data data;
    dnnl::convolution_backward_weights weights;
    KernelLayout data_kernel, weights_kernel;
  };
  memory src, dst;  // NHWC, over the layer's storage, pointed at on each call
  dnnl::convolution_forward::primitive_desc forward_pd;
  dnnl::convolution_forward forward;
  KernelLayout forward_kernel;
  std::optional<Backward> backward;
};

class Convolution final : public OneDnnConvolution {
 public:
  Convolution(const ConvGeometry& g, const GemmConfig& gemm)
      : g_(g), gemm_(gemm), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_),
        hwio_({g.out.c, g.in.c, g.k, g.k}, memory::data_type::f32, Tag::hwio) {}

  void Prepare(int batch) override { Get(batch); }

  void Forward(const float* in, const float* kernel, float* out, int batch) override {
    Primitives& p = Get(batch);
    Point(p.src, in);
    Point(p.dst, out);
    Run([&] {
      p.forward.execute(stream_, {{DNNL_ARG_SRC, p.src}, {DNNL_ARG_WEIGHTS, p.forward_kernel.In(stream_, kernel)}, {DNNL_ARG_DST, p.dst}});
    });
  }

  void BackwardWeights(const float* in, const float* dout, float* dkernel, int batch) override {
    Primitives& p = Get(batch);
    Primitives::Backward& b = GetBackward(p, batch);
    Point(p.src, in);
    Point(p.dst, dout);
    Run([&] {
      b.weights.execute(stream_, {{DNNL_ARG_SRC, p.src}, {DNNL_ARG_DIFF_DST, p.dst}, {DNNL_ARG_DIFF_WEIGHTS, b.weights_kernel.Out(dkernel)}});
      b.weights_kernel.Finish(stream_);
    });
  }

  void BackwardData(const float* dout, const float* kernel, float* din, int batch) override {
    Primitives& p = Get(batch);
    Primitives::Backward& b = GetBackward(p, batch);
    Point(p.src, din);
    Point(p.dst, dout);
    Run([&] {
      b.data.execute(stream_, {{DNNL_ARG_DIFF_DST, p.dst}, {DNNL_ARG_WEIGHTS, b.data_kernel.In(stream_, kernel)}, {DNNL_ARG_DIFF_SRC, p.src}});
    });
  }

 private:
  memory::desc Activations(int batch, ActShape s) const {
    return memory::desc({batch, s.c, s.h, s.w}, memory::data_type::f32, Tag::nhwc);
  }
  memory::desc AnyKernel() const { return memory::desc(hwio_.dims(), memory::data_type::f32, Tag::any); }
  memory::dims Strides() const { return {g_.stride, g_.stride}; }
  memory::dims PadBefore() const { return {g_.y.pad_before, g_.x.pad_before}; }
  memory::dims PadAfter() const { return {g_.y.pad_after, g_.x.pad_after}; }

  // Runs `f` (oneDNN calls) on the config's thread count, which oneDNN reads when it makes a
  // primitive (its work split) and when it runs one; waits for the stream.
  template <typename F>
  void Run(F&& f) {
    ApplyGemmThreads(gemm_);
    try {
      f();
      stream_.wait();
    } catch (const dnnl::error& e) {
      internal::CheckFailed(__FILE__, __LINE__, e.what());
    }
  }

  // The kernel's layout is left to oneDNN (`any`): its JIT convolutions want a blocked one.
  Primitives& Get(int batch) {
    auto it = cache_.find(batch);
    if (it != cache_.end()) return *it->second;
    std::unique_ptr<Primitives> made;
    Run([&] {
      const memory::desc src = Activations(batch, g_.in), dst = Activations(batch, g_.out);
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src, AnyKernel(), dst,
                                        Strides(), PadBefore(), PadAfter());
      dnnl::convolution_forward::primitive_desc pd(d, engine_);
      made = std::make_unique<Primitives>(Primitives{memory(src, engine_, DNNL_MEMORY_NONE), memory(dst, engine_, DNNL_MEMORY_NONE), pd,
                                dnnl::convolution_forward(pd), KernelLayout(engine_, hwio_, pd.weights_desc(), true), std::nullopt});
    });
    return *cache_.emplace(batch, std::move(made)).first->second;
  }

  Primitives::Backward& GetBackward(Primitives& p, int batch) {
    if (p.backward) return *p.backward;
    Run([&] {
      const memory::desc src = Activations(batch, g_.in), dst = Activations(batch, g_.out);
      dnnl::convolution_backward_data::primitive_desc data(
          {dnnl::algorithm::convolution_direct, src, AnyKernel(), dst, Strides(), PadBefore(), PadAfter()}, engine_, p.forward_pd);
      dnnl::convolution_backward_weights::primitive_desc weights(
          {dnnl::algorithm::convolution_direct, src, AnyKernel(), dst, Strides(), PadBefore(), PadAfter()}, engine_, p.forward_pd);
      p.backward.emplace(Primitives::Backward{dnnl::convolution_backward_data(data), dnnl::convolution_backward_weights(weights),
                                              KernelLayout(engine_, hwio_, data.weights_desc(), true),
                                              KernelLayout(engine_, hwio_, weights.diff_weights_desc(), false)});
    });
    return *p.backward;
  }

  const ConvGeometry g_;
  const GemmConfig gemm_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  const memory::desc hwio_;
  // Batch size -> its primitives: a training run sees its batch and the last short one, an
  // inference run its blocks of images (model::Model::Forward), so the map stays small.
  std::map<int, std::unique_ptr<Primitives>> cache_;
};

}  // namespace
#endif

std::unique_ptr<OneDnnConvolution> MakeOneDnnConvolution(const ConvGeometry& geometry, const GemmConfig& gemm) {
#if TFD_HAVE_ONEDNN
  if (gemm.backend == GemmBackend::kOneDnn && !gemm.im2col_convolutions) return std::make_unique<Convolution>(geometry, gemm);
#endif
  (void)geometry;
  (void)gemm;
  return nullptr;
}

}  // namespace tfd::tensor
