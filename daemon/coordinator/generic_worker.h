#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/base/logging.h"
#include "common/base/status.h"
#include "common/transport/connection.h"
#include "daemon/train/observer.h"

namespace tfd::coordinator {

struct GenericWorkerOptions {
  std::string host;  // the coordinator
  std::uint16_t port = 0;
  int index = 0;     // this worker's index (its HELLO)
  std::uint64_t cluster_id = 0;  // its HELLO's cluster id: the TF_CONFIG cluster's, or 0 (tfctl sweep)
  const std::atomic<bool>* stop = nullptr;  // a signal: stop the trial at its next step and return
  std::chrono::milliseconds startup_timeout{120000};  // to reach the coordinator
  std::vector<train::TrainObserver*> observers;  // given every trial's steps and epochs; not owned
  // tfd --export-dir: trial K exports its trained model into <export_root>/K/model (whatever its
  // job's export.dir, so trials never share a folder); "": where its job says, if anywhere.
  std::string export_root;
};

// A generic worker (tfd --coordinator HOST:PORT): asks the coordinator for a trial, trains its job
// in this process as tfd --standalone does (train::RunStandalone), reports each epoch and obeys
// the answer (stop: end the trial now), reports the end, and asks again until the coordinator says
// the sweep is over. A trial that fails (bad data, a model that does not fit) is reported FAILED
// with its reason and the worker takes the next. Blocks the calling thread. Ok when the sweep is
// over; Unavailable when the coordinator cannot be reached or is lost; FailedPrecondition when
// stopped by a signal.
Status RunGenericWorker(const GenericWorkerOptions& options, EventWriter& events, const transport::ConnectionOptions& connection);

}  // namespace tfd::coordinator
