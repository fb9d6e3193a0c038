#include "daemon/train/job_data.h"

#include <fmt/format.h>

#include "common/data/source.h"
#include "common/tensor/cuda/runtime.h"
#include "daemon/train/trainer.h"

namespace tfd::train {

Result<LoadedJob> LoadJobData(const config::JobSpec& job, int num_workers, bool trains) {
  if (job.cuda_device >= 0 && trains) {
    if (Status s = cuda::CheckDevice(job.cuda_device); !s.ok())
      return Status::InvalidArgument(fmt::format("device: \"{}\": {}", job.device, s.message()));
    if (job.model_parallel.enabled() || job.model_parallel.microbatches > 1)
      return Status::InvalidArgument(fmt::format("device: \"{}\": a model_parallel job trains on the CPU only (set \"device\": \"cpu\")",
                                                 job.device));
  }
  LoadedJob loaded;
  Result<data::DataSplits> data = data::LoadData(job.data, job.seed);
  if (!data.ok()) {  // a corrupt input file is bad input, as a bad field is (exit code 2)
    return data.status().code() == Code::kCorruption ? Status::InvalidArgument(data.status().message()) : data.status();
  }
  loaded.data = std::move(data).value();
  if (job.validation_count > 0 || job.validation_fraction > 0) {
    const std::int64_t n = loaded.data.train.size;
    const std::int64_t held = data::HeldOutCount(n, job.validation_count, job.validation_fraction);
    if (held <= 0 || held >= n)
      return Status::InvalidArgument(fmt::format("validation_split: holds out {} of the {} training examples in {}; leave some of each",
                                                 held, n, job.data.Describe()));
    data::HoldOut(&loaded.data, held);
  }
  if (StepsPerEpoch(loaded.data.train.size, num_workers, job.batch_size) == 0) {
    return Status::InvalidArgument(fmt::format("batch_size: {} is more than the {} training examples in {}{}", job.batch_size,
                                               loaded.data.train.size / num_workers, job.data.Describe(),
                                               num_workers > 1 ? fmt::format(" per worker ({} workers)", num_workers) : ""));
  }
  tensor::ActShape input{loaded.data.train.height, loaded.data.train.width, loaded.data.train.channels};
  const tensor::GemmConfig gemm{.threads = job.threads};
  TFD_ASSIGN_OR_RETURN(loaded.model, model::Model::Build(job.model, input, model::OutputsFor(loaded.data.train, job.data), job.batch_size, gemm,
                                                          loaded.data.train.categorical));
  loaded.model->Initialize(job.seed);
  return loaded;
}

}  // namespace tfd::train
