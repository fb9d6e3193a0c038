#include "common/collective/hierarchy.h"

#include <algorithm>

#include <fmt/format.h>

namespace tfd::collective {

std::vector<HostGroup> GroupByHost(const std::vector<RingMember>& members) {
  std::vector<HostGroup> hosts;
  for (int r = 0; r < static_cast<int>(members.size()); ++r) {
    const std::string& host = members[static_cast<std::size_t>(r)].host;
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const HostGroup& g) { return g.host == host; });
    if (it == hosts.end()) hosts.push_back({host, {r}});
    else it->ranks.push_back(r);
  }
  return hosts;  // ranks ascend within each host and hosts come in order of their first rank
}

HierarchyPlan PlanHierarchy(const RingOptions& flat, bool split_even_hosts) {
  HierarchyPlan plan;
  plan.hosts = GroupByHost(flat.members);
  plan.local = flat;
  plan.local.members.clear();
  plan.leaders = flat;
  plan.leaders.members.clear();
  plan.leaders.on_stranger = nullptr;
  for (int h = 0; h < static_cast<int>(plan.hosts.size()); ++h) {
    const std::vector<int>& ranks = plan.hosts[static_cast<std::size_t>(h)].ranks;
    if (ranks.front() == flat.rank) plan.leaders.rank = h;
    plan.leaders.members.push_back(flat.members[static_cast<std::size_t>(ranks.front())]);
    const auto at = std::find(ranks.begin(), ranks.end(), flat.rank);
    if (at == ranks.end()) continue;
    plan.host = h;
    plan.local.rank = static_cast<int>(at - ranks.begin());
    for (int r : ranks) plan.local.members.push_back(flat.members[static_cast<std::size_t>(r)]);
  }
  plan.leader = plan.local.rank == 0;
  if (flat.rank != 0) plan.local.on_stranger = nullptr;
  // Every host with as many workers: each local rank crosses with its peers on the other hosts.
  const std::size_t per_host = plan.hosts.front().ranks.size();
  plan.split = split_even_hosts && plan.hosts.size() >= 2 && per_host >= 2 &&
               std::all_of(plan.hosts.begin(), plan.hosts.end(), [&](const HostGroup& g) { return g.ranks.size() == per_host; });
  if (plan.split) {
    plan.leaders.members.clear();
    plan.leaders.rank = plan.host;
    for (const HostGroup& g : plan.hosts)
      plan.leaders.members.push_back(flat.members[static_cast<std::size_t>(g.ranks[static_cast<std::size_t>(plan.local.rank)])]);
  }
  return plan;
}

TopologyChoice ChooseTopology(HierarchyMode mode, const std::vector<HostGroup>& hosts) {
  std::size_t most = 0;
  for (const HostGroup& g : hosts) most = std::max(most, g.ranks.size());
  const std::string shape = fmt::format("{} host{}, at most {} worker{} on one", hosts.size(), hosts.size() == 1 ? "" : "s", most,
                                        most == 1 ? "" : "s");
  switch (mode) {
    case HierarchyMode::kOn: return {true, shape + ": update.hierarchical true"};
    case HierarchyMode::kOff: return {false, shape + ": update.hierarchical false"};
    case HierarchyMode::kAuto: break;
  }
  if (hosts.size() >= 2 && most >= 2) return {true, shape + ": update.hierarchical auto"};
  return {false, shape + (hosts.size() < 2 ? ": update.hierarchical auto needs two hosts or more"
                                           : ": update.hierarchical auto needs two workers on some host")};
}

}  // namespace tfd::collective
