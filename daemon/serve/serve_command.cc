#include "daemon/serve/serve_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <variant>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/base/logging.h"
#include "common/base/service.h"
#include "common/base/signals.h"
#include "common/http/server.h"
#include "daemon/serve/api.h"

namespace tfd::serve_command {
namespace {

constexpr const char* kUsage =
    "usage: tfd serve --model BASE [--name NAME] [--bind ADDR:PORT] [--batch-max N] [--batch-timeout-us N]\n"
    "                 [--queue-max N] [--max-body-bytes N] [--deadline-ms N] [--max-connections N] [--idle-timeout-s N]\n"
    "                 [--token-file F] [--threads N] [--poll-s N]\n"
    "  Serves BASE's newest version folder (BASE/N/model.json ...) with TensorFlow Serving's REST API on\n"
    "  ADDR:PORT (default 127.0.0.1:8501): /v1/models/NAME[:predict|/metadata], /metrics, /healthz.\n";

struct Flags {
  std::string model, name, bind = "127.0.0.1:8501", token_file;
  int batch_max = 64, batch_timeout_us = 1000, queue_max = 1024, deadline_ms = 10000, max_connections = 256, idle_timeout_s = 30,
      threads = 1, poll_s = 2;
  std::size_t max_body_bytes = 16 * 1024 * 1024;
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "tfd: %s\n", message.c_str());
  return 2;
}

// One line naming the first flag out of range, or "".
std::string CheckRanges(const Flags& f) {
  const std::pair<const char*, int> at_least_one[] = {{"batch-max", f.batch_max}, {"queue-max", f.queue_max}, {"deadline-ms", f.deadline_ms},
                                                      {"max-connections", f.max_connections}, {"idle-timeout-s", f.idle_timeout_s},
                                                      {"threads", f.threads}, {"poll-s", f.poll_s}};
  for (const auto& [flag, value] : at_least_one)
    if (value < 1) return fmt::format("serve: --{} {}: expected at least 1", flag, value);
  if (f.batch_timeout_us < 0) return fmt::format("serve: --batch-timeout-us {}: expected 0 or more", f.batch_timeout_us);
  if (f.max_body_bytes < 1024) return fmt::format("serve: --max-body-bytes {}: expected at least 1024", f.max_body_bytes);
  if (f.model.empty()) return "serve: --model BASE is required (a folder of numbered version folders)";
  return "";
}

// The flags, or an exit code: 0 after --help, 2 after one line on stderr.
std::variant<Flags, int> ParseFlags(int argc, char** argv, std::ostream& out) {
  namespace po = boost::program_options;
  Flags f;
  bool help = false;
  po::options_description named;
  named.add_options()("model", po::value(&f.model))("name", po::value(&f.name))("bind", po::value(&f.bind))(
      "batch-max", po::value(&f.batch_max))("batch-timeout-us", po::value(&f.batch_timeout_us))("queue-max", po::value(&f.queue_max))(
      "max-body-bytes", po::value(&f.max_body_bytes))("deadline-ms", po::value(&f.deadline_ms))("max-connections", po::value(&f.max_connections))(
      "idle-timeout-s", po::value(&f.idle_timeout_s))("token-file", po::value(&f.token_file))("threads", po::value(&f.threads))(
      "poll-s", po::value(&f.poll_s))("help,h", po::bool_switch(&help));
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(named).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return Fail(fmt::format("serve: {}\n{}", e.what(), kUsage));
  }
  if (help) return out << kUsage, 0;
  if (const std::string bad = CheckRanges(f); !bad.empty()) return Fail(bad);
  if (f.name.empty()) f.name = std::filesystem::path(f.model).lexically_normal().filename().string();
  if (f.name.empty()) f.name = std::filesystem::path(f.model).lexically_normal().parent_path().filename().string();
  return f;
}

// Waits for SIGINT/SIGTERM (blocked in every thread, see Run), polling for a new version every
// poll_s seconds meanwhile; returns the signal. A signal that a library's own thread took (see
// common/base/signals.h) is seen within a second.
int WaitAndPoll(const StopSignal& stop, serve::ModelManager& models, serve::ServeApi& api, int poll_s) {
  auto next_poll = std::chrono::steady_clock::now() + std::chrono::seconds(poll_s);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_poll - std::chrono::steady_clock::now());
    if (const int sig = WaitStopSignal(std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(1000))); sig > 0) return sig;
    if (stop.stop.load()) return stop.signal.load();
    if (std::chrono::steady_clock::now() < next_poll) continue;
    next_poll = std::chrono::steady_clock::now() + std::chrono::seconds(poll_s);
    Result<std::uint64_t> swapped = models.Poll();
    if (!swapped.ok()) {
      api.CountLoadFailure();
      spdlog::error("new version skipped, still serving version {}: {}", models.Current()->version(), swapped.status().message());
    } else if (*swapped != 0) {
      spdlog::info("serving version {} of {}", *swapped, models.base());
      NotifyStatus(fmt::format("serving version {}", *swapped));
    }
  }
}

int Serve(const StopSignal& stop, const Flags& f) {
  std::optional<transport::ClusterToken> token;
  if (!f.token_file.empty()) {
    Result<transport::ClusterToken> read = transport::ClusterToken::ReadFile(f.token_file);
    if (!read.ok()) return Fail(fmt::format("serve: --token-file: {}", read.status().message()));
    token = *read;
  }
  Result<std::pair<std::string, std::uint16_t>> bind = http::ParseListenAddress(f.bind, "serve: --bind");
  if (!bind.ok()) return Fail(bind.status().message());
  Result<std::unique_ptr<serve::ModelManager>> models = serve::ModelManager::Open(f.model, f.batch_max, {.threads = f.threads});
  if (!models.ok()) return Fail(fmt::format("serve: {}", models.status().message()));
  metrics::Registry registry;
  serve::ServeApi api({.name = f.name, .deadline = std::chrono::milliseconds(f.deadline_ms), .token = token, .batch_max = f.batch_max},
                      **models, registry);
  serve::Batcher batcher({.batch_max = f.batch_max, .timeout = std::chrono::microseconds(f.batch_timeout_us), .queue_max = f.queue_max},
                         [&api](int rows) { api.ObserveBatch(rows); });
  api.SetBatcher(&batcher);
  registry.AddCallback("tfd_serve_queue_depth", "Predict requests waiting for the batcher.", metrics::Type::kGauge, {},
                       [&batcher] { return static_cast<double>(batcher.queue().depth()); });
  http::ServerOptions options{.max_body_bytes = f.max_body_bytes, .max_connections = f.max_connections,
                              .read_timeout = std::chrono::seconds(10), .idle_timeout = std::chrono::seconds(f.idle_timeout_s),
                              .refusal = [&api](int status, std::string_view message) { return api.Refusal(status, message); }};
  Result<std::unique_ptr<http::Server>> server = http::Server::StartAsync(
      bind->first, bind->second, [&api](http::Request r, http::Respond respond) { api.Handle(std::move(r), std::move(respond)); }, options);
  if (!server.ok()) {
    spdlog::error("serve: {}", server.status().message());
    return 1;
  }
  const std::uint64_t version = (*models)->Current()->version();
  spdlog::info("serving {} version {} as \"{}\" on http://{}/v1/models/{}", f.model, version, f.name, (*server)->address(), f.name);
  NotifyReady(fmt::format("serving version {} on {}", version, (*server)->address()));
  const int sig = WaitAndPoll(stop, **models, api, f.poll_s);
  NotifyStopping();
  spdlog::info("signal {}: stopping", sig);
  batcher.Stop();   // answers what waits while the server still holds the connections
  server->reset();
  return 0;
}

}  // namespace

int Run(int argc, char** argv, std::ostream& out) {
  // Blocked before any thread starts, so every thread inherits the mask and WaitAndPoll takes them.
  const StopSignal& stop = BlockStopSignals();
  std::variant<Flags, int> parsed = ParseFlags(argc, argv, out);
  if (const int* code = std::get_if<int>(&parsed)) return *code;
  SetupLogging("serve");
  return Serve(stop, std::get<Flags>(parsed));
}

}  // namespace tfd::serve_command
