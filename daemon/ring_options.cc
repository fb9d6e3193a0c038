#include "daemon/ring_options.h"

#include <memory>
#include <random>

#include "common/transport/peer_guard.h"
#include "daemon/task_kind.h"
#include "daemon/task/lifecycle.h"

namespace tfd {

collective::RingOptions RingOptionsFor(const config::TfConfig& config, int first_worker, int count, int rank,
                                       const train::WorkerTaskOptions& options,
                                       const transport::ConnectionOptions& connection) {
  collective::RingOptions ro;
  ro.rank = rank;
  for (int r = first_worker; r < first_worker + count; ++r) {
    const config::TaskId t = config.cluster.WorkerTask(r);
    const config::Endpoint& ep = config.cluster.EndpointOf(t);
    ro.members.push_back({t.ToString(), ep.host, ep.port, ToWireKind(t.type), static_cast<std::uint32_t>(t.index)});
  }
  ro.cluster_id = config.cluster.Id();
  ro.incarnation = task::NewIncarnation();
  ro.connection = connection;
  if (ro.connection.guard == nullptr) ro.connection.guard = std::make_shared<transport::PeerGuard>();
  ro.startup_timeout = options.startup_timeout;
  ro.step_timeout = options.step_timeout;
  ro.stop = options.stop;
  return ro;
}

}  // namespace tfd
