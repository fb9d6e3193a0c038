#pragma once
// CudaModel's private parts (cuda_model.h), shared by its two files: cuda_model_build.cc makes the
// device twin of each layer and reserves every buffer; cuda_model.cc runs the forward and backward
// passes, captures the step as a CUDA graph and copies in and out. Not for any other includer.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "common/tensor/cuda/arena.h"
#include "common/tensor/cuda/cublas_loader.h"
#include "common/tensor/cuda/cuda_model.h"
#include "common/tensor/cuda/kernels.h"

namespace tfd::cuda {
inline Status CudaError(cudaError_t e, std::string_view what) {
  return Status::Internal(fmt::format("cuda: {}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e)));
}

#define TFD_CUDA_RETURN(expr, what)                            \
  do {                                                         \
    if (cudaError_t e_ = (expr); e_ != cudaSuccess) return CudaError(e_, what); \
  } while (0)

#define TFD_CUBLAS_RETURN(expr, what)                                                                   \
  do {                                                                                                  \
    if (cublasStatus_t s_ = (expr); s_ != CUBLAS_STATUS_SUCCESS)                                        \
      return Status::Internal(fmt::format("cublas: {}: {}", what, Cublas().status_string(s_)));          \
  } while (0)

// What the device reads each step from pinned host memory (copied in by the step itself, so a
// graph replay sees the values of its step).
struct StepScalars {
  float lr = 0;  // the rate (Adam: lr_t)
  float pad = 0;
  std::uint64_t dropout_seed = 0;
};

// cuBLAS's workspace, from the arena so graph capture never allocates (32 MiB: cuBLAS's advice for Hopper).
inline constexpr std::size_t kCublasWorkspace = 32u << 20;

// One layer on the device: its shapes and geometry, where its variables sit in the flat
// parameter buffer (offsets, as model::Model lays them out) and its device buffers. A residual
// block holds its layers (and its projection, a 1x1 conv2d) as DevLayers of their own.
struct DevLayer {
  config::LayerSpec::Kind kind = config::LayerSpec::Kind::kDense;
  config::Activation act = config::Activation::kNone;
  tensor::ActShape in, out;
  int k = 0;
  WindowGeometry g;  // conv2d, depthwise_conv2d and the pools
  float rate = 0;
  std::uint64_t stream_id = 0;  // dropout: its mask's stream
  std::size_t param_start = 0, param_end = 0;
  std::size_t kernel_off = 0, bias_off = 0;
  bool has_bias = true;  // depthwise_conv2d's use_bias
  int multiplier = 1;    // depthwise_conv2d
  // batch_norm and layer_norm: their options and variables (gamma and beta kNone when left out).
  static constexpr std::size_t kNone = ~std::size_t{0};
  double momentum = 0, epsilon = 0;
  std::size_t gamma_off = kNone, beta_off = kNone, mean_off = 0, var_off = 0;
  bool sync = false;  // batch_norm's "sync": its sums over every replica, when the model has a CrossReplicaSum
  // Buffers: [max_batch, out] output, dropout's mask, conv2d's im2col patches (then their
  // gradient), gelu's pre-activation, a batch norm's statistics (6 x c) or a layer norm's rows'.
  float *out_buf = nullptr, *mask = nullptr, *cols = nullptr, *pre = nullptr, *stats = nullptr;
  float* sync_sums = nullptr;  // a synchronised batch norm's 2c + 2 (BatchNormArgs::sync)
  // residual: the inner layers, the projection (none or one), dL/d(sum), the projection's
  // dL/d(in) and the inner layers' two gradient buffers.
  std::vector<DevLayer> inner, projection;
  float *dsum = nullptr, *dproj = nullptr, *dbuf[2] = {nullptr, nullptr};
  // embedding and one_hot: what each output feature is.
  std::vector<CategoricalOutput> outputs;
  CategoricalOutput* map = nullptr;
  std::int64_t rows(int batch) const { return std::int64_t{batch} * out.h * out.w; }
};


struct CudaModel::Impl {
  std::unique_ptr<DeviceArena> arena;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  std::vector<DevLayer> layers;
  int max_batch = 0, classes = 0;  // classes: the last layer's units (a regression's targets)
  tensor::LossKind loss = tensor::LossKind::kSoftmaxCrossEntropy;
  std::int64_t input_size = 0, num_params = 0;
  // Device buffers.
  float *params = nullptr, *grads = nullptr, *slots = nullptr, *x = nullptr, *dbuf[2] = {nullptr, nullptr}, *dlogits = nullptr,
        *row_loss = nullptr, *ones = nullptr;
  int* row_hit = nullptr;
  ClassId* y = nullptr;       // classification's labels
  float* targets = nullptr;   // a regression's, [max_batch, classes]
  double* row_err = nullptr;  // a regression's per-row sums
  LossSums* sums = nullptr;
  StepScalars* scalars = nullptr;
  double2* partial = nullptr;  // the column reductions' scratch
  void* workspace = nullptr;
  // Pinned host buffers.
  float *h_x = nullptr, *h_params = nullptr, *h_grads = nullptr;
  ClassId* h_y = nullptr;
  float* h_targets = nullptr;
  float* h_sync = nullptr;  // a synchronised batch norm's sums on their way through CrossReplicaSum
  LossSums* h_sums = nullptr;
  StepScalars* h_scalars = nullptr;
  // The variables a training Forward moves (batch norms' moving statistics): copied back to the
  // host after each step of the gradients-out path.
  std::vector<optim::Range> moved;
  // The optimizer (standalone path).
  const optim::Optimizer* optimizer = nullptr;
  std::vector<optim::Range> decayed;
  std::int64_t updates = 0;
  // Captured full-batch steps: [0] gradients out, [1] with the update.
  cudaGraphExec_t graphs[2] = {nullptr, nullptr};
  // A full batch ran once eagerly in this mode: kernels loaded, cuBLAS set up; capture is safe.
  bool warmed[2] = {false, false};
  // Synchronised batch norms: whether the model has one, and the replicas' summer (null: none).
  // With both, a step stops at each of their sums for the host's all-reduce, so it runs eagerly.
  bool has_sync = false;
  tensor::CrossReplicaSum* cross = nullptr;
  std::string device_name;

  ~Impl() {
    for (cudaGraphExec_t g : graphs)
      if (g != nullptr) cudaGraphExecDestroy(g);
    if (cublas != nullptr) Cublas().destroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
    for (void* p : {static_cast<void*>(h_x), static_cast<void*>(h_params), static_cast<void*>(h_grads), static_cast<void*>(h_y),
                    static_cast<void*>(h_targets), static_cast<void*>(h_sync), static_cast<void*>(h_sums), static_cast<void*>(h_scalars)})
      if (p != nullptr) cudaFreeHost(p);
  }

  BatchNormArgs BatchNorm(const DevLayer& l) const;
  LayerNormArgs LayerNorm(const DevLayer& l) const;
  Status ForwardLayer(DevLayer& l, const float* in, int batch, bool training);
  Status BackwardLayer(DevLayer& l, const float* in, float* dout, float* din, int batch);
  Status Forward(int batch, bool training);
  Status Backward(int batch);
  Status Update();
  Status Enqueue(int mode, int batch);
  Result<tensor::LossResult> Run(int mode, int batch);
  bool regression() const { return loss != tensor::LossKind::kSoftmaxCrossEntropy; }
  bool synced() const { return has_sync && cross != nullptr; }
  // The first n floats at `sums` (device) summed over the replicas: out to the host, through
  // `cross`, back in; the stream waits for the host between.
  Status SumReplicas(float* sums, int n);
  // Copies y into the pinned labels (or targets) after checking it against the model; its rows.
  Result<int> StageLabels(const tensor::Labels& y);
};

}  // namespace tfd::cuda
