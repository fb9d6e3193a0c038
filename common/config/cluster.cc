#include "common/config/cluster.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include <fmt/format.h>

#include "common/base/sha256.h"
#include "common/config/json_reader.h"

namespace tfd::config {
namespace {

using nlohmann::json;

bool ParseTaskType(std::string_view s, TaskType* out) {
  for (TaskType t : kAllTypes) {
    if (TaskTypeName(t) == s) {
      *out = t;
      return true;
    }
  }
  return false;
}

std::vector<Endpoint>& TasksOf(ClusterSpec& c, TaskType t) {
  return const_cast<std::vector<Endpoint>&>(static_cast<const ClusterSpec&>(c).Tasks(t));
}

// Cross-field checks shared by TF_CONFIG and the flags: at most one chief and evaluator, unique
// endpoints, at least one training worker, the task exists.
Status Validate(const TfConfig& c, std::string_view source) {
  if (c.cluster.chief.size() > 1)
    return Status::InvalidArgument(fmt::format("{}: cluster.chief: {} tasks, at most one allowed", source, c.cluster.chief.size()));
  if (c.cluster.evaluator.size() > 1)
    return Status::InvalidArgument(fmt::format("{}: cluster.evaluator: {} tasks, at most one allowed", source, c.cluster.evaluator.size()));
  if (c.cluster.coordinator.size() > 1)
    return Status::InvalidArgument(fmt::format("{}: cluster.coordinator: {} tasks, at most one allowed", source, c.cluster.coordinator.size()));
  if (!c.cluster.coordinator.empty()) {
    for (TaskType t : {TaskType::kChief, TaskType::kPs, TaskType::kEvaluator})
      if (!c.cluster.Tasks(t).empty())
        return Status::InvalidArgument(fmt::format("{}: cluster.{}: a cluster with a coordinator has worker tasks only (the coordinator "
                                                   "hands each worker its trials)",
                                                   source, TaskTypeName(t)));
  }
  if (c.cluster.num_workers() == 0)
    return Status::InvalidArgument(fmt::format("{}: cluster: no chief or worker task (training needs at least one)", source));
  std::set<std::pair<std::string, std::uint16_t>> seen;
  for (TaskType t : kAllTypes) {
    const auto& tasks = c.cluster.Tasks(t);
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      if (!seen.emplace(tasks[i].host, tasks[i].port).second)
        return Status::InvalidArgument(fmt::format("{}: cluster.{}[{}]: \"{}\" is listed twice", source, TaskTypeName(t), i,
                                                   tasks[i].ToString()));
    }
  }
  const auto& tasks = c.cluster.Tasks(c.task.type);
  if (tasks.empty())
    return Status::InvalidArgument(fmt::format("{}: task.type: \"{}\" has no tasks in cluster", source, TaskTypeName(c.task.type)));
  if (c.task.index < 0 || c.task.index >= static_cast<int>(tasks.size()))
    return Status::InvalidArgument(fmt::format("{}: task.index: {} is out of range: cluster.{} has {} task{}", source, c.task.index,
                                               TaskTypeName(c.task.type), tasks.size(), tasks.size() == 1 ? "" : "s"));
  return Status::Ok();
}

}  // namespace

bool Endpoint::IsLoopback() const { return host == "localhost" || host == "::1" || host.starts_with("127."); }

std::string Endpoint::ToString() const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

Result<Endpoint> ParseEndpoint(std::string_view text) {
  Endpoint ep;
  std::string_view port;
  if (text.starts_with('[')) {
    auto close = text.find(']');
    if (close == std::string_view::npos) return Status::InvalidArgument(fmt::format("\"{}\" has no closing ']'", text));
    ep.host = std::string(text.substr(1, close - 1));
    if (close + 1 >= text.size() || text[close + 1] != ':') return Status::InvalidArgument(fmt::format("\"{}\" has no port", text));
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return Status::InvalidArgument(fmt::format("\"{}\" has no port", text));
    ep.host = std::string(text.substr(0, colon));
    if (ep.host.find(':') != std::string::npos)
      return Status::InvalidArgument(fmt::format("\"{}\": write an IPv6 address in brackets, as [::1]:2222", text));
    port = text.substr(colon + 1);
  }
  if (ep.host.empty()) return Status::InvalidArgument(fmt::format("\"{}\" has no host", text));
  const bool bracketed = text.starts_with('[');
  for (char c : ep.host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
                    c == '_' || (bracketed && (c == ':' || c == '%'));
    if (!ok) return Status::InvalidArgument(fmt::format("\"{}\": '{}' cannot be part of a host name or address", text, c));
  }
  int p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || p < 1 || p > 65535)
    return Status::InvalidArgument(fmt::format("\"{}\": port \"{}\" is not a number in [1, 65535]", text, port));
  ep.port = static_cast<std::uint16_t>(p);
  return ep;
}

std::string_view TaskTypeName(TaskType t) {
  switch (t) {
    case TaskType::kChief: return "chief";
    case TaskType::kWorker: return "worker";
    case TaskType::kPs: return "ps";
    case TaskType::kEvaluator: return "evaluator";
    case TaskType::kCoordinator: return "coordinator";
  }
  return "?";
}

std::string TaskId::ToString() const { return fmt::format("{}:{}", TaskTypeName(type), index); }

const std::vector<Endpoint>& ClusterSpec::Tasks(TaskType t) const {
  switch (t) {
    case TaskType::kChief: return chief;
    case TaskType::kWorker: return worker;
    case TaskType::kPs: return ps;
    case TaskType::kEvaluator: return evaluator;
    case TaskType::kCoordinator: return coordinator;
  }
  return worker;
}

int ClusterSpec::WorkerRank(const TaskId& task) const {
  if (task.type == TaskType::kChief) return 0;
  TFD_CHECK(task.type == TaskType::kWorker);
  return static_cast<int>(chief.size()) + task.index;
}

TaskId ClusterSpec::WorkerTask(int rank) const {
  if (!chief.empty()) return rank == 0 ? TaskId{TaskType::kChief, 0} : TaskId{TaskType::kWorker, rank - 1};
  return TaskId{TaskType::kWorker, rank};
}

const Endpoint& ClusterSpec::EndpointOf(const TaskId& task) const {
  const auto& tasks = Tasks(task.type);
  TFD_CHECK(task.index >= 0 && task.index < static_cast<int>(tasks.size()));
  return tasks[static_cast<std::size_t>(task.index)];
}

std::uint64_t ClusterSpec::Id() const {
  std::string canonical;
  for (TaskType t : kAllTypes) {
    if (t == TaskType::kCoordinator && coordinator.empty()) continue;  // the ids of clusters without one stay as they were
    canonical += TaskTypeName(t);
    canonical += '=';
    const std::vector<Endpoint>& tasks = Tasks(t);
    const std::size_t counted = t == TaskType::kWorker && base_workers >= 0 ? std::min<std::size_t>(static_cast<std::size_t>(base_workers), tasks.size()) : tasks.size();
    for (std::size_t i = 0; i < counted; ++i) canonical += tasks[i].ToString() + ',';
    canonical += ';';
  }
  return Fingerprint64(canonical);
}

Result<TfConfig> ParseTfConfig(std::string_view text, std::string_view source) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::InvalidArgument(fmt::format("{}: not valid JSON", source));
  Status status;
  ObjectReader r(doc, std::string(source), "", &status);
  TfConfig c;
  const json* cluster = r.Get("cluster");
  if (cluster == nullptr) {
    r.Fail("cluster", "missing (expected {\"ps\": [\"host:port\", ...], \"worker\": [...]})");
  } else {
    ObjectReader cr = r.Child(*cluster, "cluster");
    for (TaskType t : kAllTypes) {
      const json* list = cr.Get(TaskTypeName(t));
      if (list == nullptr) continue;
      const std::string path = cr.PathOf(TaskTypeName(t));
      if (!list->is_array()) {
        cr.Fail(path, "expected a list of \"host:port\" strings, got " + Describe(*list));
        continue;
      }
      for (std::size_t i = 0; i < list->size(); ++i) {
        const json& e = (*list)[i];
        if (!e.is_string()) {
          cr.Fail(cr.PathOf(TaskTypeName(t), i), "expected a \"host:port\" string, got " + Describe(e));
          break;
        }
        Result<Endpoint> ep = ParseEndpoint(e.get<std::string>());
        if (!ep.ok()) {
          cr.Fail(cr.PathOf(TaskTypeName(t), i), ep.status().message());
          break;
        }
        TasksOf(c.cluster, t).push_back(*ep);
      }
    }
    (void)cr.Finish();
  }
  const json* task = r.Get("task");
  if (task == nullptr) {
    r.Fail("task", "missing (expected {\"type\": \"worker\", \"index\": 0})");
  } else {
    ObjectReader tr = r.Child(*task, "task");
    std::string type;
    tr.String("type", &type, /*required=*/true);
    if (tr.status().ok() && !ParseTaskType(type, &c.task.type))
      tr.Fail("task.type", fmt::format("unknown task type \"{}\" (expected chief, worker, ps, evaluator or coordinator)", type));
    tr.Int("index", 0, 1 << 20, &c.task.index, /*required=*/true);
    (void)tr.Finish();
  }
  r.Get("rpc_layer");
  r.Get("environment");
  if (const json* ext = r.Get("tfd"); ext != nullptr) {  // our extensions
    ObjectReader xr = r.Child(*ext, "tfd");
    xr.String("token_file", &c.token_file, /*required=*/false);
    xr.Int("base_workers", 0, 1 << 16, &c.cluster.base_workers);
    if (xr.status().ok() && c.cluster.base_workers > static_cast<int>(c.cluster.worker.size()))
      xr.Fail("tfd.base_workers", fmt::format("{} is more than the {} workers of cluster.worker", c.cluster.base_workers, c.cluster.worker.size()));
    (void)xr.Finish();
  }
  TFD_RETURN_IF_ERROR(r.Finish());
  TFD_RETURN_IF_ERROR(Validate(c, source));
  return c;
}

Result<TfConfig> LoadTfConfig(const std::string& path) {
  TFD_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "the TF_CONFIG file"));
  return ParseTfConfig(text, path);
}

Result<TfConfig> TfConfigFromFlags(std::string_view job_name, int task_index, std::string_view ps_hosts,
                                   std::string_view worker_hosts) {
  TfConfig c;
  if (!ParseTaskType(job_name, &c.task.type) || (c.task.type != TaskType::kPs && c.task.type != TaskType::kWorker))
    return Status::InvalidArgument(fmt::format("--job_name: expected ps or worker, got \"{}\"", job_name));
  c.task.index = task_index;
  auto split = [](std::string_view flag, std::string_view list, std::vector<Endpoint>* out) -> Status {
    std::size_t i = 0;
    while (!list.empty()) {
      auto comma = list.find(',');
      std::string_view item = list.substr(0, comma);
      if (item.empty() || (comma != std::string_view::npos && comma + 1 == list.size()))
        return Status::InvalidArgument(fmt::format("{}: entry {} is empty (a stray comma?)", flag, item.empty() ? i : i + 1));
      Result<Endpoint> ep = ParseEndpoint(item);
      if (!ep.ok()) return Status::InvalidArgument(fmt::format("{}: entry {}: {}", flag, i, ep.status().message()));
      out->push_back(*ep);
      ++i;
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    }
    return Status::Ok();
  };
  TFD_RETURN_IF_ERROR(split("--ps_hosts", ps_hosts, &c.cluster.ps));
  TFD_RETURN_IF_ERROR(split("--worker_hosts", worker_hosts, &c.cluster.worker));
  TFD_RETURN_IF_ERROR(Validate(c, "flags"));
  return c;
}

bool MentionsTask(std::string_view text, std::string_view task) {
  for (std::size_t at = text.find(task); at != std::string_view::npos; at = text.find(task, at + 1)) {
    const std::size_t after = at + task.size();
    if (after == text.size() || !std::isdigit(static_cast<unsigned char>(text[after]))) return true;
  }
  return false;
}

}  // namespace tfd::config
