#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp forgets it

#include <cstdint>
#include <span>
#include <vector>

#include "common/base/status.h"
#include "common/compress/half.h"
#include "common/transport/connection.h"

namespace tfd::collective {

struct RingOptions;

// The collectives an allreduce worker runs over every worker, whatever the topology: the flat Ring
// (ring.h) or a HierarchicalRing (hier_ring.h, a ring inside each host and one across hosts), so
// the updater and the elastic code are written once for both. Each call keeps the contract Ring
// states for it (threads, errors, ordering: every member calls the same collectives in the same
// order, and every member ends with the same bits).
class Collective {
 public:
  virtual ~Collective() = default;

  // An accepted connection from the listener (any thread).
  virtual void Accept(transport::tcp::socket socket) = 0;
  // Forms the links; blocks until they are up or the startup timeout.
  virtual Status Connect() = 0;
  virtual Status AllReduce(std::span<float> data) = 0;
  virtual Result<std::uint64_t> StartAllReduce(std::span<float> data) = 0;
  virtual Status Progress() = 0;
  virtual Status Wait(std::uint64_t id) = 0;
  // Copies rank 0's `data` to every member.
  virtual Status Broadcast(std::span<float> data) = 0;
  virtual Status Finish() = 0;
  // Gradient compression (update.compression): an all-reduce whose values travel as 16 bits, an
  // all-gather of equal parts, and the chunk value bytes sent so far (Ring states each contract).
  // Only the flat Ring has them: a job with compression runs flat (run_allreduce.cc), and the
  // hierarchy answers FailedPrecondition (0 bytes).
  virtual Result<std::uint64_t> StartAllReduceHalf(std::span<float> data, compress::Half half) = 0;
  virtual Status AllGather(std::span<float> data) = 0;
  virtual std::uint64_t value_bytes_sent() const = 0;
  virtual void Close(const Status& why) = 0;

  // This worker's rank among all members, and their number: the flat ring's numbering, whatever
  // the topology.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The options of the flat ring of the same members (elastic re-forms a flat ring from them).
  virtual const RingOptions& options() const = 0;
  virtual bool closed() const = 0;
  // The member (rank) `error` blames, through any chain of "MEMBER reports: ..."; -1 for none.
  virtual int Blamed(const Status& error) const = 0;
};

}  // namespace tfd::collective
