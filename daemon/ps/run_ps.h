#pragma once

#include <atomic>
#include <string>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/config/cluster.h"
#include "common/transport/connection.h"

namespace tfd::ps {

struct PsOptions {
  std::string bind_address;  // "" = every interface, as TensorFlow listens
  // For every accepted connection. Without a guard RunPs makes its own; give one to share it or to
  // read the refusal counts as they grow.
  transport::ConnectionOptions connection;
  const std::atomic<bool>* stop = nullptr;  // set by a signal handler
};

// Runs this process as the ps task of `config`: listens on its endpoint's port, serves the workers
// and returns Ok once every worker has sent DONE. Unavailable if it cannot listen;
// FailedPrecondition when stopped by a signal.
Status RunPs(const config::TfConfig& config, EventWriter& events, const PsOptions& options);

}  // namespace tfd::ps
