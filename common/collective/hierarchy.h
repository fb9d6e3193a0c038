#pragma once

#include <string>
#include <vector>

#include "common/collective/ring.h"

// Which workers share a host, who leads each host, and whether to run the hierarchical all-reduce
// (hier_ring.h): pure functions of the members' addresses, unit-tested without sockets
// (test/unit/common/collective/hierarchy_test.cc).
//
// A host is a distinct `host` string of the members' endpoints, compared as written: no name is
// resolved, so "pc-01" and its IP address are two hosts, and 127.0.0.1 and 127.0.0.2 (both
// loopback) are two hosts too, which is how a test on one machine stands for two.
namespace tfd::collective {

struct HostGroup {
  std::string host;
  std::vector<int> ranks;  // the flat ring's ranks on this host, ascending: ranks[0] leads it
};

// The hosts of `members`, in the order of their lowest rank (so host 0 holds rank 0, and rank 0
// leads it and is rank 0 of the ring of leaders).
std::vector<HostGroup> GroupByHost(const std::vector<RingMember>& members);

// One member's two rings: the ring inside its host (every member) and a ring across hosts. Split
// (two hosts or more, each with the same number of workers, at least 2): every member is in the
// ring of the members of its local rank, one on each host, in host order (local rank 0's is the
// leaders'). Else the ring of the hosts' leaders (leaders only; a ring of one with one host).
struct HierarchyPlan {
  std::vector<HostGroup> hosts;
  int host = 0;                        // this member's, an index into hosts
  RingOptions local;                   // the members of this host, in rank order
  bool leader = false;                 // local.rank == 0
  bool split = false;                  // each local rank crosses hosts in a ring of its own
  RingOptions leaders;                 // the ring across hosts: split, this member's; else meaningful when leader
};
// From the flat ring's options (every member, this member's rank, the timeouts and the rest): the
// two rings' options, each keeping the flat ring's settings. Only the flat ring's rank 0 keeps
// on_stranger (elastic joiners ask rank 0), in its host's ring.
// `split_even_hosts` false keeps the leaders' ring even where the hosts are even (the environment's
// TFD_HIER_SPLIT=off, for a benchmark of both shapes: every worker must be given the same).
HierarchyPlan PlanHierarchy(const RingOptions& flat, bool split_even_hosts = true);

enum class HierarchyMode { kAuto, kOn, kOff };
struct TopologyChoice {
  bool hierarchical = false;
  std::string why;  // for the start line: "2 hosts, up to 2 workers on one: update.hierarchical auto"
};
// kAuto: hierarchical when there are at least two hosts and some host has two workers or more
// (else it would be the flat ring with extra hops). kOn and kOff as told.
TopologyChoice ChooseTopology(HierarchyMode mode, const std::vector<HostGroup>& hosts);

}  // namespace tfd::collective
