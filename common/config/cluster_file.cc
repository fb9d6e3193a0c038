#include "common/config/cluster_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "common/config/job_cluster.h"
#include "common/config/json_reader.h"

namespace tfd::config {
namespace {

using nlohmann::json;

// Reads the fields of a host's launch settings over `h` (so per-host entries start from the defaults).
void ReadHostLaunch(ObjectReader& r, HostLaunch* h) {
  std::string via;
  r.String("via", &via);
  if (via == "local") h->via = HostLaunch::Via::kLocal;
  else if (via == "ssh") h->via = HostLaunch::Via::kSsh;
  else if (!via.empty() && via != "auto") r.Fail(r.PathOf("via"), fmt::format("\"{}\": expected auto, local or ssh", via));
  r.String("tfd", &h->tfd);
  if (r.status().ok() && h->tfd.empty()) r.Fail(r.PathOf("tfd"), "must name the tfd binary");
  r.String("workdir", &h->workdir);
  if (const json* ssh = r.Get("ssh")) {
    ObjectReader s = r.Child(*ssh, r.PathOf("ssh"));
    s.String("user", &h->ssh_user);
    s.Int("port", 1, 65535, &h->ssh_port);
    s.String("identity_file", &h->ssh_identity);
    if (const json* opts = s.Get("options")) {
      if (!opts->is_array()) {
        s.Fail(s.PathOf("options"), "expected a list of \"Option=value\" strings, got " + Describe(*opts));
      } else {
        h->ssh_options.clear();
        for (std::size_t i = 0; i < opts->size(); ++i) {
          const json& o = (*opts)[i];
          if (!o.is_string() || o.get<std::string>().find('=') == std::string::npos) {
            s.Fail(s.PathOf("options", i), "expected an \"Option=value\" string, got " + Describe(o));
            break;
          }
          const std::string opt = o.get<std::string>();
          const std::string key = opt.substr(0, opt.find('='));
          if (key == "StrictHostKeyChecking" && opt.find("=no") != std::string::npos)
            s.Fail(s.PathOf("options", i), "tfctl never turns host-key checking off (use --accept-new-hostkeys for new hosts)");
          h->ssh_options.push_back(opt);
        }
      }
    }
    (void)s.Finish();
  }
}

// launch.env: NAME: "value" for every task, TF_CONFIG excepted (tfctl sets it per task).
void ReadLaunchEnv(ObjectReader& l, LaunchSpec* launch) {
  if (const json* env = l.Get("env")) {
    if (!env->is_object()) {
      l.Fail(l.PathOf("env"), "expected an object of NAME: \"value\", got " + Describe(*env));
    } else {
      for (auto it = env->begin(); it != env->end(); ++it) {
        const std::string& k = it.key();
        bool name_ok = !k.empty() && !std::isdigit(static_cast<unsigned char>(k[0]));
        for (char c : k) name_ok = name_ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
        if (!name_ok) {
          l.Fail(l.PathOf("env") + "." + k, "not an environment variable name");
          break;
        }
        if (!it.value().is_string()) {
          l.Fail(l.PathOf("env") + "." + k, "expected a string, got " + Describe(it.value()));
          break;
        }
        if (k == "TF_CONFIG") {
          l.Fail(l.PathOf("env") + "." + k, "tfctl sets TF_CONFIG for each task itself");
          break;
        }
        launch->env[k] = it.value().get<std::string>();
      }
    }
  }
}

// launch.tasks: per training task, its device and GPU memory share.
void ReadLaunchTasks(ObjectReader& l, LaunchSpec* launch) {
  if (const json* tasks = l.Get("tasks")) {
    if (!tasks->is_object()) {
      l.Fail(l.PathOf("tasks"), "expected an object of \"worker:N\": {\"device\": ..., \"gpu_memory_fraction\": ...}, got " + Describe(*tasks));
    } else {
      for (auto it = tasks->begin(); it != tasks->end(); ++it) {
        ObjectReader tr = l.Child(it.value(), l.PathOf("tasks") + "." + it.key());
        TaskLaunch t;
        tr.String("device", &t.device);
        if (tr.status().ok() && tr.Get("device") != nullptr)
          if (Result<int> d = ParseDevice(t.device); !d.ok()) tr.Fail(tr.PathOf("device"), d.status().message());
        tr.Double("gpu_memory_fraction", 0, 1, /*min_exclusive=*/true, &t.gpu_memory_fraction);
        (void)tr.Finish();
        launch->tasks[it.key()] = t;
      }
    }
  }
}

// launch.hosts: per host, settings over the defaults.
void ReadLaunchHosts(ObjectReader& l, LaunchSpec* launch) {
  if (const json* hosts = l.Get("hosts")) {
    if (!hosts->is_object()) {
      l.Fail(l.PathOf("hosts"), "expected an object of host: {settings}, got " + Describe(*hosts));
    } else {
      for (auto it = hosts->begin(); it != hosts->end(); ++it) {
        HostLaunch h = launch->defaults;
        ObjectReader hr = l.Child(it.value(), l.PathOf("hosts") + "." + it.key());
        ReadHostLaunch(hr, &h);
        (void)hr.Finish();
        launch->hosts[it.key()] = h;
      }
    }
  }
}

// launch: how tfctl starts the tasks (docs/operations.md).
void ReadLaunch(ObjectReader& l, LaunchSpec* launch) {
  ReadHostLaunch(l, &launch->defaults);
  l.String("run_dir", &launch->run_dir);
  l.Double("start_timeout", 0, 3600, /*min_exclusive=*/true, &launch->start_timeout_secs);
  l.Int("max_restarts", 0, 100, &launch->max_restarts);
  if (const json* restart = l.Get("restart")) {
    ObjectReader rr = l.Child(*restart, l.PathOf("restart"));
    for (TaskType t : {TaskType::kChief, TaskType::kWorker, TaskType::kPs, TaskType::kEvaluator}) {
      std::string policy = "never";
      rr.String(TaskTypeName(t), &policy);
      if (policy == "on-failure") launch->restart_on_failure.insert(t);
      else if (policy != "never" && rr.status().ok())
        rr.Fail(rr.PathOf(TaskTypeName(t)), fmt::format("unknown policy \"{}\" (expected on-failure or never)", policy));
    }
    (void)rr.Finish();
  }
  if (const json* timeouts = l.Get("timeouts")) {
    ObjectReader tr = l.Child(*timeouts, l.PathOf("timeouts"));
    TaskTimeouts& t = launch->timeouts;
    for (auto [key, out] : {std::pair{"peer", &t.peer_secs}, {"reconnect", &t.reconnect_secs}, {"startup", &t.startup_secs}, {"step", &t.step_secs}})
      tr.Double(key, 0, 100000, /*min_exclusive=*/true, out);
    (void)tr.Finish();
  }
  if (const json* metrics = l.Get("metrics")) {
    if (metrics->is_boolean()) {
      launch->metrics.enabled = metrics->get<bool>();
    } else if (metrics->is_object()) {
      ObjectReader mr = l.Child(*metrics, l.PathOf("metrics"));
      mr.Bool("enabled", &launch->metrics.enabled);
      mr.Int("port_base", 1, 65535, &launch->metrics.port_base);
      (void)mr.Finish();
    } else {
      l.Fail(l.PathOf("metrics"), "expected true, false or {\"enabled\": BOOL, \"port_base\": PORT}, got " + Describe(*metrics));
    }
  }
  ReadLaunchEnv(l, launch);
  ReadLaunchTasks(l, launch);
  ReadLaunchHosts(l, launch);
  (void)l.Finish();
}

// The checks across sections: the evaluation setting, metrics ports, and launch.tasks and
// launch.hosts naming tasks and hosts of the cluster (a typo would silently not apply).
Status CheckAcross(const ClusterFile& f, std::string_view source) {
  TFD_RETURN_IF_ERROR(CheckEvaluation(f.cluster, f.train, fmt::format("{}: train.", source)));
  // Every task's metrics port (port_base + its place in the plan) must be a port.
  const int tasks = static_cast<int>(f.cluster.ps.size() + f.cluster.evaluator.size()) + f.cluster.num_workers();
  if (f.launch.metrics.enabled && f.launch.metrics.port_base > 0 && f.launch.metrics.port_base + tasks - 1 > 65535)
    return Status::InvalidArgument(fmt::format("{}: launch.metrics.port_base: {} + {} tasks goes past port 65535", source,
                                               f.launch.metrics.port_base, tasks));
  // launch.tasks names training tasks of the cluster: a ps never uses a GPU, a typo would not apply.
  for (const auto& [name, settings] : f.launch.tasks) {
    bool found = false;
    for (int rank = 0; rank < f.cluster.num_workers(); ++rank) found = found || f.cluster.WorkerTask(rank).ToString() == name;
    if (!found)
      return Status::InvalidArgument(fmt::format("{}: launch.tasks.{}: not a training task of the cluster (expected chief:0 or worker:N; "
                                                 "a ps or evaluator task never uses a GPU)", source, name));
  }
  TFD_RETURN_IF_ERROR(CheckGpuShares(f.cluster, f.train, f.launch.tasks, fmt::format("{}: ", source)));
  // Hosts named under launch.hosts must be hosts of the cluster: a typo there would silently not apply.
  for (const auto& [host, settings] : f.launch.hosts) {
    bool used = false;
    for (TaskType t : {TaskType::kChief, TaskType::kWorker, TaskType::kPs, TaskType::kEvaluator})
      for (const Endpoint& e : f.cluster.Tasks(t)) used = used || e.host == host;
    if (!used) return Status::InvalidArgument(fmt::format("{}: launch.hosts.{}: no task of the cluster runs on \"{}\"", source, host, host));
  }
  return Status::Ok();
}

}  // namespace

const HostLaunch& LaunchSpec::For(const std::string& host) const {
  auto it = hosts.find(host);
  return it == hosts.end() ? defaults : it->second;
}

Result<ClusterFile> ParseClusterFile(std::string_view text, std::string_view source) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::InvalidArgument(fmt::format("{}: not valid JSON", source));
  Status status;
  ObjectReader r(doc, std::string(source), "", &status);
  ClusterFile f;
  f.source = std::string(source);
  f.name = std::filesystem::path(std::string(source)).stem().string();
  r.String("name", &f.name);
  for (char c : f.name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      r.Fail("name", fmt::format("\"{}\": use letters, digits, '-', '_' and '.' (it names the run folder)", f.name));
      break;
    }
  }
  // The cluster: TF_CONFIG's, checked by the same parser (with a placeholder task).
  if (const json* cluster = r.Get("cluster")) {
    json tf = {{"cluster", *cluster}, {"task", {{"type", "worker"}, {"index", 0}}}};
    if (cluster->is_object() && !cluster->contains("worker") && cluster->contains("chief")) tf["task"]["type"] = "chief";
    Result<TfConfig> c = ParseTfConfig(tf.dump(), source);
    if (!c.ok()) {
      if (status.ok()) status = c.status();
    } else {
      f.cluster = c->cluster;
    }
  } else {
    r.Fail("cluster", "missing (expected {\"ps\": [\"host:port\", ...], \"worker\": [...]})");
  }
  if (const json* train = r.Get("train")) {
    ObjectReader t = r.Child(*train, "train");
    f.train = ReadJobSpec(t);
    f.train_json = train->dump(2);
  } else {
    r.Fail("train", "missing (expected the job spec: model, data, epochs, batch_size, optimizer, ...)");
  }
  if (const json* launch = r.Get("launch")) {
    ObjectReader l = r.Child(*launch, "launch");
    ReadLaunch(l, &f.launch);
  }
  TFD_RETURN_IF_ERROR(r.Finish());
  TFD_RETURN_IF_ERROR(CheckAcross(f, source));
  return f;
}

Status CheckGpuShares(const ClusterSpec& cluster, const JobSpec& job, const std::map<std::string, TaskLaunch>& tasks,
                      std::string_view where) {
  struct Share {
    double total = 0;
    std::vector<std::string> parts;
  };
  std::map<std::pair<std::string, int>, Share> by_gpu;  // (host, N of cuda:N)
  for (int rank = 0; rank < cluster.num_workers(); ++rank) {
    const TaskId task = cluster.WorkerTask(rank);
    int device = job.cuda_device;
    double fraction = job.gpu_memory_fraction;
    if (auto it = tasks.find(task.ToString()); it != tasks.end()) {
      if (Result<int> d = ParseDevice(it->second.device); !it->second.device.empty() && d.ok()) device = *d;
      if (it->second.gpu_memory_fraction > 0) fraction = it->second.gpu_memory_fraction;
    }
    if (device < 0) continue;
    Share& s = by_gpu[{cluster.EndpointOf(task).host, device}];
    s.total += fraction;
    s.parts.push_back(fmt::format("{} {:g}", task.ToString(), fraction));
  }
  for (const auto& [gpu, share] : by_gpu) {
    if (share.total <= 1 + 1e-9) continue;
    return Status::InvalidArgument(fmt::format(
        "{}launch.tasks: the tasks on {} cuda:{} ({}) ask for {:g} of its memory in all; at most 1 (set gpu_memory_fraction per task "
        "under launch.tasks, or the job's)", where, gpu.first, gpu.second, fmt::join(share.parts, ", "), share.total));
  }
  return Status::Ok();
}

bool IsEventName(std::string_view name) {
  for (std::string_view e : kEventNames)
    if (e == name) return true;
  return false;
}

Result<Event> ParseEvent(std::string_view line) {
  json doc = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("event") || !doc["event"].is_string())
    return Status::InvalidArgument("not an event line");
  Event e;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.value().is_number()) e.numbers[it.key()] = it.value().get<double>();
    else if (it.value().is_string()) e.strings[it.key()] = it.value().get<std::string>();
  }
  e.event = e.strings["event"];
  e.task = e.strings["task"];
  return e;
}

Result<ClusterFile> LoadClusterFile(const std::string& path) {
  TFD_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "the cluster file"));
  return ParseClusterFile(text, path);
}

}  // namespace tfd::config
