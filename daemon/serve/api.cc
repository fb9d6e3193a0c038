#include "daemon/serve/api.h"

#include <charconv>
#include <map>
#include <span>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tfd::serve {
namespace {

constexpr std::string_view kPrefix = "/v1/models/";
constexpr std::string_view kRequests = "tfd_serve_requests_total";
constexpr std::string_view kRequestsHelp = "HTTP requests answered, by status code.";

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (std::size_t at = 0;;) {
    const std::size_t next = s.find(sep, at);
    out.push_back(s.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at));
    if (next == std::string_view::npos) return out;
    at = next + 1;
  }
}

std::optional<std::uint64_t> ParseVersion(std::string_view s) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

nlohmann::ordered_json TensorInfo(std::string_view name, std::int64_t width) {
  return {{"dtype", "DT_FLOAT"},
          {"tensor_shape", {{"dim", {{{"size", "-1"}, {"name", ""}}, {{"size", std::to_string(width)}, {"name", ""}}}}, {"unknown_rank", false}}},
          {"name", fmt::format("{}:0", name)}};
}

// A path under /v1/models/: NAME[/versions/N][/metadata][:VERB].
struct ModelPath {
  std::string_view name, verb;
  std::optional<std::uint64_t> version;
  bool metadata = false;
  bool valid = false;
};

ModelPath ParseModelPath(std::string_view rest) {
  ModelPath p;
  if (const std::size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    p.verb = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
  }
  std::vector<std::string_view> parts = Split(rest, '/');
  p.name = parts[0];
  std::size_t i = 1;
  if (parts.size() >= 3 && parts[1] == "versions") {
    p.version = ParseVersion(parts[2]);
    if (!p.version) return p;
    i = 3;
  }
  if (i < parts.size() && parts[i] == "metadata" && p.verb.empty()) p.metadata = true, ++i;
  p.valid = i == parts.size() && !p.name.empty();
  return p;
}

}  // namespace

ServeApi::ServeApi(ApiOptions options, ModelManager& models, metrics::Registry& registry)
    : options_(std::move(options)), models_(models), registry_(registry) {
  for (int code : {200, 400, 401, 404, 405, 408, 413, 500, 503, 504})  // at 0 from the start, so a rate() sees the first one
    registry_.AddCounter(kRequests, kRequestsHelp, {{"code", std::to_string(code)}});
  latency_ = registry_.AddHistogram("tfd_serve_request_duration_seconds", "Predict requests, from arrival to answer.",
                                    metrics::ExponentialBuckets(0.0001, 2, 16));
  std::vector<double> sizes;
  for (int b = 1; b < options_.batch_max; b *= 2) sizes.push_back(b);
  sizes.push_back(options_.batch_max);
  batch_rows_ = registry_.AddHistogram("tfd_serve_batch_size", "Rows per forward pass.", sizes);
  load_failures_ = registry_.AddCounter("tfd_serve_version_load_failures_total", "New versions that failed to load and were skipped.");
  registry_.AddCallback("tfd_serve_model_version", "The version served.", metrics::Type::kGauge, {},
                        [&models] { return static_cast<double>(models.Current()->version()); });
}

void ServeApi::Count(int status) {
  // Registration is idempotent and takes the registry's lock: cheap beside a request.
  registry_.AddCounter(kRequests, kRequestsHelp, {{"code", std::to_string(status)}})->Increment();
}

http::Response ServeApi::Answer(int status, std::string body, std::string content_type) {
  Count(status);
  return {.status = status, .content_type = std::move(content_type), .body = std::move(body)};
}

http::Response ServeApi::Refusal(int status, std::string_view message) { return Error(status, message); }

bool ServeApi::Authorized(const http::Request& request) const {
  if (!options_.token) return true;
  constexpr std::string_view kBearer = "Bearer ";
  if (!request.authorization.starts_with(kBearer)) return false;
  const std::string want = options_.token->Hex();
  const std::string_view got = std::string_view(request.authorization).substr(kBearer.size());
  return got.size() == want.size() && transport::SameBytes(std::as_bytes(std::span(got)), std::as_bytes(std::span(want)));
}

void ServeApi::Handle(http::Request request, http::Respond respond) {
  bool queued = false;
  http::Response answer = Route(request, respond, &queued);
  if (!queued) respond(std::move(answer));
}

http::Response ServeApi::Route(const http::Request& request, const http::Respond& respond, bool* queued) {
  const std::string_view path = std::string_view(request.target).substr(0, request.target.find('?'));
  if (path == "/healthz") return Answer(200, "ok\n", "text/plain; charset=utf-8");
  if (!Authorized(request)) return Error(401, "missing or wrong \"Authorization: Bearer TOKEN\" (tfd serve --token-file)");
  if (path == "/metrics") {
    if (request.method != "GET") return Error(405, "/metrics: only GET");
    Count(200);  // counted before rendering, so a scrape sees itself
    return {.content_type = std::string(metrics::kContentType), .body = registry_.Render()};
  }
  if (!path.starts_with(kPrefix)) return Error(404, fmt::format("{}: no such path (expected /v1/models/{}...)", path, options_.name));
  const ModelPath p = ParseModelPath(path.substr(kPrefix.size()));
  if (!p.valid) return Error(404, fmt::format("{}: no such path (expected /v1/models/NAME[/versions/N][/metadata] or ...:predict)", path));
  if (p.name != options_.name) return Error(404, fmt::format("Servable not found for request: model \"{}\" (this server serves \"{}\")", p.name, options_.name));
  std::shared_ptr<const Servable> servable = p.version ? models_.Find(*p.version) : models_.Current();
  if (!servable)
    return Error(404, fmt::format("Servable not found for request: version {} of \"{}\" (the version served is {})", *p.version, p.name,
                                  models_.Current()->version()));
  if (!p.verb.empty()) {
    if (p.verb != "predict") return Error(404, fmt::format(":{}: not served (only :predict)", p.verb));
    if (request.method != "POST") return Error(405, fmt::format("{}: expected POST, got {}", path, request.method));
    return Predict(request, std::move(servable), respond, queued);
  }
  if (request.method != "GET") return Error(405, fmt::format("{}: expected GET, got {}", path, request.method));
  return Answer(200, p.metadata ? MetadataJson(*servable) : StatusJson(*servable));
}

http::Response ServeApi::Predict(const http::Request& request, std::shared_ptr<const Servable> servable, const http::Respond& respond,
                                 bool* queued) {
  Result<PredictRequest> parsed = ParsePredict(request.body, servable->signature());
  if (!parsed.ok()) return Error(400, parsed.status().message());
  const Clock::time_point now = Clock::now();
  Job job{.servable = std::move(servable), .request = std::move(*parsed), .enqueued = now, .deadline = now + options_.deadline,
          .done = [this, respond, now](int status, std::string body) {
            latency_->Observe(std::chrono::duration<double>(Clock::now() - now).count());
            respond(Answer(status, std::move(body)));
          }};
  if (!batcher_->queue().Push(std::move(job))) return Error(503, "the queue is full or the server is stopping (--queue-max); retry later");
  *queued = true;
  return {};
}

std::string ServeApi::StatusJson(const Servable& s) const {
  nlohmann::ordered_json j = {{"model_version_status",
                               {{{"version", std::to_string(s.version())},
                                 {"state", "AVAILABLE"},
                                 {"status", {{"error_code", "OK"}, {"error_message", ""}}}}}}};
  return j.dump(1) + "\n";
}

std::string ServeApi::MetadataJson(const Servable& s) const {
  const Signature& sig = s.signature();
  nlohmann::ordered_json outputs = nlohmann::ordered_json::object();
  if (sig.regression) {
    outputs["outputs"] = TensorInfo("outputs", sig.outputs);
  } else {
    outputs["logits"] = TensorInfo("logits", sig.outputs);
    outputs["probabilities"] = TensorInfo("probabilities", sig.outputs);
  }
  nlohmann::ordered_json def = {{"inputs", {{std::string(kInputName), TensorInfo(kInputName, sig.features())}}},
                                {"outputs", outputs},
                                {"method_name", "tensorflow/serving/predict"}};
  const exporting::ModelCard& card = s.loaded().card;
  nlohmann::ordered_json tfd = {{"example_shape", {sig.height, sig.width, sig.channels}}, {"task", sig.regression ? "regression" : "classification"}};
  if (sig.regression) {
    tfd["targets"] = card.num_targets;
  } else {
    tfd["class_names"] = card.class_names;
  }
  if (!card.feature_names.empty()) tfd["feature_names"] = card.feature_names;
  nlohmann::ordered_json j = {{"model_spec", {{"name", options_.name}, {"signature_name", ""}, {"version", std::to_string(s.version())}}},
                              {"metadata", {{"signature_def", {{"signature_def", {{"serving_default", def}}}}}, {"tfd", tfd}}}};
  return j.dump(1) + "\n";
}

}  // namespace tfd::serve
